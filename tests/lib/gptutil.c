/* gptutil.c: a small GPT, its pseudo-text and its parameter layout (see gptutil.h). */
#include "gptutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain.h>

#define GPT_LINES(MLP_EXTRA)                                                                                           \
  "# a GPT of the examples' form, small enough for a test\n"                                                           \
  "input tokens 16 vocab=37\n"                                                                                         \
  "embedding 16 name=wte\n"                                                                                            \
  "posembedding\n"                                                                                                     \
  "block repeat=2\n"                                                                                                   \
  "  layernorm\n"                                                                                                      \
  "  attention heads=2\n"                                                                                              \
  "  residual\n"                                                                                                       \
  "  layernorm\n"                                                                                                      \
  "  linear 32 init=normal\n"                                                                                          \
  "  gelu\n" MLP_EXTRA "  linear 16 init=normal\n"                                                                     \
  "  residual\n"                                                                                                       \
  "end\n"                                                                                                              \
  "layernorm\n"                                                                                                        \
  "linear 37 tie=wte bias=false\n"

const char *gu_spec = GPT_LINES("");
const char *gu_spec_dropout = GPT_LINES("  dropout 0.1\n");

static uint64_t next(uint64_t *s) {
  uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint32_t token_of(char c) {
  if (c >= 'a' && c <= 'z') return (uint32_t)(c - 'a' + 1);
  if (c >= '0' && c <= '9') return (uint32_t)(c - '0' + 27);
  return 0;
}

void gu_text(uint32_t *tokens, int64_t n, uint64_t seed) {
  static const char *words[] = {"the",    "quick", "brown", "fox",   "jumps", "over", "lazy",  "dog",
                                "kernel", "device", "rank",  "ring",  "tensor", "layer", "batch", "step",
                                "queue",  "buffer", "and",   "of",    "with",  "gradient", "model", "token"};
  const int nw = (int)(sizeof words / sizeof words[0]);
  uint64_t s = seed;
  int64_t i = 0;
  while (i < n) {
    uint64_t r = next(&s);
    char num[8];
    const char *w = words[r % nw];
    if (r % 17 == 0) { /* a number now and then */
      snprintf(num, sizeof num, "%u", (unsigned)(r >> 40) % 1000);
      w = num;
    }
    for (const char *c = w; *c && i < n; c++) tokens[i++] = token_of(*c);
    if (i < n) tokens[i++] = 0;
  }
}

int gu_write_tokens(const char *path, int64_t n, uint64_t seed) {
  uint32_t *t = malloc((size_t)n * sizeof *t);
  if (!t) return -1;
  gu_text(t, n, seed);
  int rc = clt_tokens_write(path, t, n, 0);
  free(t);
  if (rc < 0) fprintf(stderr, "%s: %s\n", path, clt_last_error());
  return rc < 0 ? -1 : 0;
}

int gu_layout(gu_tensor *out, int max) {
  const int64_t C = 16, V = 37, T = 16, H4 = 32;
  int n = 0;
  int64_t at = 0;
#define ADD(NAME, COUNT, CLS)                                                                                          \
  do {                                                                                                                 \
    if (n < max) out[n] = (gu_tensor){NAME, at, COUNT, CLS};                                                           \
    n++, at += (COUNT);                                                                                                \
  } while (0)
  ADD("wte.weight", V * C, GU_EMBEDDING); /* also the output layer's weight (tie=wte) */
  ADD("wpe.weight", T * C, GU_EMBEDDING);
  for (int b = 0; b < 2; b++) {
    ADD("ln1.weight", C, GU_NORM);
    ADD("ln1.bias", C, GU_NORM);
    ADD("attn.qkv.weight", 3 * C * C, GU_MATRIX);
    ADD("attn.qkv.bias", 3 * C, GU_BIAS);
    ADD("attn.proj.weight", C * C, GU_MATRIX);
    ADD("attn.proj.bias", C, GU_BIAS);
    ADD("ln2.weight", C, GU_NORM);
    ADD("ln2.bias", C, GU_NORM);
    ADD("fc.weight", H4 * C, GU_MATRIX);
    ADD("fc.bias", H4, GU_BIAS);
    ADD("proj.weight", C * H4, GU_MATRIX);
    ADD("proj.bias", C, GU_BIAS);
  }
  ADD("ln_f.weight", C, GU_NORM);
  ADD("ln_f.bias", C, GU_NORM);
#undef ADD
  if (at != GU_PARAMS) {
    fprintf(stderr, "gu_layout: %lld parameters, not %d\n", (long long)at, GU_PARAMS);
    return -1;
  }
  return n;
}

const char *gu_class_name(gu_class c) {
  static const char *names[] = {"matrix", "bias", "norm", "embedding"};
  return names[c];
}

int gu_is_key_bias(int64_t i) {
  gu_tensor lay[64];
  int n = gu_layout(lay, 64);
  for (int k = 0; k < n; k++)
    if (!strcmp(lay[k].name, "attn.qkv.bias") && i >= lay[k].offset + 16 && i < lay[k].offset + 32) return 1;
  return 0;
}
