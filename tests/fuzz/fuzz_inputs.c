/*
 * fuzz_inputs.c: seeded mutation fuzzing of every file cltrain reads — model
 * specs (clt_model_parse), IDX image and label files, raw datasets and llm.c
 * token shards (clt_dataset_open_idx_files, clt_dataset_open_raw,
 * clt_dataset_open_tokens), safetensors weights (the reader behind
 * clt_trainer_load_weights) and Hugging Face tokenizer.json files
 * (clt_tokenizer_load_json, then an encode and a decode) — bounded so it fits
 * in `make check`. Needs no OpenCL device.
 *
 * Each iteration takes a valid seed input and stacks 1-4 mutations: bit
 * flips, interesting bytes and 32-bit integers (both byte orders, for IDX
 * dimensions and raw counts), truncation, insertion and deletion of bytes
 * and of dictionary tokens (layer names, JSON pieces, huge numbers), range
 * duplication, swaps of two tokens and replacement of a token by a
 * dictionary one. For safetensors half the mutations
 * hit the JSON header only (often replacing a shape or offset by an extreme
 * number) and re-write its length, so they get past the length check into
 * the JSON, shape and range checks.
 *
 * It fails on a crash (the input is saved to fuzz-crash-TARGET.bin and the
 * signal re-raised), on a sanitizer report, and on a contract breach the
 * targets detect: a refusal without a message naming the input, or an
 * accepted input that cannot be used.
 *
 *   FUZZ_SEED     the run's seed (default: fixed, so `make check` repeats)
 *   FUZZ_SECONDS  time per target (default 1)
 *   FUZZ_ITERS    iterations per target at most (default 20000)
 */
#include "fuzz_targets.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cltrain.h>

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* ---- the input being tried, saved by the crash handler ---------------------- */
static uint8_t *cur;
static size_t cur_len, cur_cap;
static const char *cur_target = "none";
static char crash_path[4096];

static void on_crash(int sig) {
  int fd;
  char msg[512];
  snprintf(crash_path, sizeof crash_path, "fuzz-crash-%s.bin", cur_target); /* not async-safe, but we are dying */
  if ((fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0) {
    if (write(fd, cur, cur_len) < 0) { /* nothing more to do */ }
    close(fd);
  }
  int k = snprintf(msg, sizeof msg, "fuzz_inputs: signal %d in target %s; the input is in %s\n", sig, cur_target,
                   crash_path);
  if (write(2, msg, (size_t)k) < 0) { /* dying anyway */ }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void reserve(size_t n) {
  if (n <= cur_cap) return;
  cur_cap = n * 2 + 64;
  if (!(cur = realloc(cur, cur_cap))) exit(99);
}

/* ---- mutations ------------------------------------------------------------------ */
static const char *const spec_dict[] = {
    "input", "linear", "conv2d", "relu", "maxpool", "flatten", "dropout", "layernorm", "kernel=", "pad=",
    "stride=", "bias=false", "bias=", "=", "0", "-1", "1e30", "nan", "inf", "0.999999", "4294967297",
    "99999999999999999999", "\n", "#", " ", "\t", "\r", "1000000", "65536", "input 1 1 1\n", "\nlinear 1000000\n",
    "\nconv2d 1 kernel=1\n", "\nloss mse\n", "loss", "huber", "delta=", "l1", "crossentropy", NULL};
static const char *const json_dict[] = {
    "\"F32\"", "\"F16\"", "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "[", "]", "{", "}",
    ",", ":", "-1", "0", "1e308", "18446744073709551615", "9223372036854775807", "1099511627776", "null",
    "[0,0]", "[]", "[1099511627776,1099511627776,1099511627776]", "1099511627776,1099511627776,16777216", "\"\"", "\\u0000", NULL};
static const uint32_t interesting32[] = {0, 1, 2, 3, 8, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, 0x7fffffff,
                                         0x80000000u, 0xfffffffeu, 0xffffffffu, 0x40000000};

static void insert_bytes(size_t at, const void *p, size_t n) {
  reserve(cur_len + n);
  memmove(cur + at + n, cur + at, cur_len - at);
  memcpy(cur + at, p, n);
  cur_len += n;
}

static int is_tok(uint8_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' ||
         c == '-' || c == '=' || c == '"';
}
/* Find a random token [*s, *e) in cur[lo, hi); 0 if none. */
static int find_token(size_t lo, size_t hi, size_t *s, size_t *e) {
  for (int tries = 0; tries < 8 && hi > lo; tries++) {
    size_t i = lo + below(hi - lo);
    if (!is_tok(cur[i])) continue;
    *s = *e = i;
    while (*s > lo && is_tok(cur[*s - 1])) (*s)--;
    while (*e < hi && is_tok(cur[*e])) (*e)++;
    return 1;
  }
  return 0;
}
static void swap_tokens(size_t lo, size_t hi) {
  size_t s1, e1, s2, e2;
  if (!find_token(lo, hi, &s1, &e1) || !find_token(lo, hi, &s2, &e2) || s1 == s2) return;
  if (s2 < s1) { size_t t = s1; s1 = s2; s2 = t; t = e1; e1 = e2; e2 = t; }
  if (e1 > s2) return; /* overlapping */
  size_t n = cur_len;
  uint8_t *out = malloc(n);
  if (!out) exit(99);
  size_t k = 0;
  memcpy(out + k, cur, s1), k += s1;
  memcpy(out + k, cur + s2, e2 - s2), k += e2 - s2;
  memcpy(out + k, cur + e1, s2 - e1), k += s2 - e1;
  memcpy(out + k, cur + s1, e1 - s1), k += e1 - s1;
  memcpy(out + k, cur + e2, n - e2);
  memcpy(cur, out, n);
  free(out);
}

/* One mutation of cur[lo, hi) (hi may move); dict may be NULL. */
static void mutate_range(size_t lo, size_t *hi, const char *const *dict) {
  size_t span = *hi - lo, before = cur_len;
  switch (below(10)) {
  case 0: /* bit flips */
    for (int k = 1 + (int)below(4); k > 0 && span; k--) cur[lo + below(span)] ^= (uint8_t)(1u << below(8));
    break;
  case 1: { /* an interesting byte */
    static const uint8_t b[] = {0, 1, 0x7f, 0x80, 0xff, '\n', ' ', '-', '9'};
    if (span) cur[lo + below(span)] = b[below(sizeof b)];
    break;
  }
  case 2: { /* an interesting 32-bit integer, big- or little-endian */
    if (span < 4) break;
    uint32_t v = interesting32[below(sizeof interesting32 / sizeof *interesting32)];
    size_t at = lo + below(span - 3);
    int big = (int)below(2);
    for (int i = 0; i < 4; i++) cur[at + i] = (uint8_t)(v >> (big ? 24 - 8 * i : 8 * i));
    break;
  }
  case 3: /* truncate */
    if (*hi == cur_len) cur_len = lo + below(span + 1);
    break;
  case 4: { /* insert random bytes */
    uint8_t r[8];
    size_t n = 1 + below(8);
    for (size_t i = 0; i < n; i++) r[i] = (uint8_t)rnd();
    insert_bytes(lo + below(span + 1), r, n);
    break;
  }
  case 5: /* insert a dictionary token */
    if (dict) {
      size_t nd = 0;
      while (dict[nd]) nd++;
      const char *t = dict[below(nd)];
      insert_bytes(lo + below(span + 1), t, strlen(t));
    }
    break;
  case 6: { /* delete a range */
    if (!span) break;
    size_t at = lo + below(span), n = 1 + below(span - (at - lo) < 16 ? span - (at - lo) : 16);
    memmove(cur + at, cur + at + n, cur_len - at - n);
    cur_len -= n;
    break;
  }
  case 7: { /* duplicate a range */
    if (!span) break;
    size_t at = lo + below(span), n = 1 + below(span - (at - lo) < 32 ? span - (at - lo) : 32);
    uint8_t tmp[32];
    memcpy(tmp, cur + at, n);
    insert_bytes(lo + below(span + 1), tmp, n);
    break;
  }
  case 8: /* swap two tokens */
    swap_tokens(lo, *hi);
    break;
  default: { /* replace a token with a dictionary token: a number by a huge one */
    size_t s, e, nd = 0;
    if (!dict || !find_token(lo, *hi, &s, &e)) break;
    while (dict[nd]) nd++;
    const char *t = dict[below(nd)];
    memmove(cur + s, cur + e, cur_len - e);
    cur_len -= e - s;
    insert_bytes(s, t, strlen(t));
    break;
  }
  }
  if (cur_len > before) *hi += cur_len - before;
  else if (*hi > lo + (before - cur_len)) *hi -= before - cur_len;
  else *hi = cur_len < lo ? cur_len : lo;
  if (*hi > cur_len) *hi = cur_len;
}

static void mutate(const char *const *dict) {
  size_t hi = cur_len;
  for (int k = 1 + (int)below(4); k > 0; k--) mutate_range(0, &hi, dict);
}

/* Replace one number in cur[lo, *hi), chosen uniformly, by an extreme one:
 * the shapes and byte ranges of a safetensors header. */
static void replace_number(size_t lo, size_t *hi) {
  static const char *const numbers[] = {"0", "-1", "1", "1099511627776", "1099511627776,1099511627776,16777216",
                                        "9223372036854775807", "4611686018427387904", "18446744073709551615",
                                        "2147483648", "4294967296", "1e3", "-9223372036854775808"};
  size_t count = 0, pick, s = 0, e = 0;
  for (size_t i = lo; i < *hi; i++)
    if (cur[i] >= '0' && cur[i] <= '9' && (i == lo || cur[i - 1] < '0' || cur[i - 1] > '9')) count++;
  if (!count) return;
  pick = below(count);
  for (size_t i = lo, k = 0; i < *hi; i++)
    if (cur[i] >= '0' && cur[i] <= '9' && (i == lo || cur[i - 1] < '0' || cur[i - 1] > '9') && k++ == pick) {
      for (s = e = i; e < *hi && cur[e] >= '0' && cur[e] <= '9'; e++) {}
      break;
    }
  const char *t = numbers[below(sizeof numbers / sizeof *numbers)];
  memmove(cur + s, cur + e, cur_len - e);
  cur_len -= e - s;
  *hi -= e - s;
  insert_bytes(s, t, strlen(t));
  *hi += strlen(t);
}

/* safetensors: mutate only the JSON header, then re-write its length. */
static void mutate_header(void) {
  if (cur_len < 8) return mutate(json_dict);
  uint64_t h = 0;
  for (int i = 7; i >= 0; i--) h = h << 8 | cur[i];
  if (h > cur_len - 8) return mutate(json_dict);
  size_t hi = 8 + (size_t)h;
  for (int k = 1 + (int)below(3); k > 0; k--) {
    if (below(2)) replace_number(8, &hi);
    else mutate_range(8, &hi, json_dict);
  }
  if (hi < 8) hi = 8;
  h = hi - 8;
  for (int i = 0; i < 8; i++) cur[i] = (uint8_t)(h >> (8 * i));
}

/* ---- the driver ------------------------------------------------------------------- */
typedef struct target {
  const char *name;
  int (*run)(const char *dir, const uint8_t *data, size_t n);
  const char *const *dict;
  int header_aware;
} target;

static int run_spec(const char *dir, const uint8_t *d, size_t n) { (void)dir; return fuzz_spec(d, n); }
static int run_tokenizer(const char *dir, const uint8_t *d, size_t n) { (void)dir; return fuzz_tokenizer(d, n); }

/* tokenizer.json's component names and the pieces of its patterns */
static const char *const tokenizer_dict[] = {
    "\"Sequence\"", "\"Split\"", "\"ByteLevel\"", "\"Digits\"", "\"Metaspace\"", "\"Prepend\"", "\"Replace\"",
    "\"ByteFallback\"", "\"Fuse\"", "\"Strip\"", "\"first\"", "\"never\"", "\"NFC\"",
    "\"TemplateProcessing\"", "\"BPE\"", "\"Regex\"", "\"String\"",
    "\"Removed\"", "\"MergedWithNext\"", "\"Contiguous\"", "\"<0x41>\"", "\\\\p{L}", "\\\\s+", "(?!", "(?i:", "{1,3}",
    "[^", "]", "|", "*", "+", "(", ")", "\\u2581", "\\u0000", "null", "true", "false", "-1", "16777216", "4294967295",
    "1e9", "[]", "{}", "\"\"", ",", ":", "\"a b\"", "[\"a\",\"b\"]", NULL};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void) {
  const char *e;
  uint64_t seed = (e = getenv("FUZZ_SEED")) ? strtoull(e, NULL, 0) : 0x636c747261696eull;
  double seconds = (e = getenv("FUZZ_SECONDS")) ? atof(e) : 1.0;
  long max_iters = (e = getenv("FUZZ_ITERS")) ? atol(e) : 20000;
  const char *tmpdir = getenv("TMPDIR");
  char dirpath[4096];
  snprintf(dirpath, sizeof dirpath, "%s/cltrain-fuzz-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  char *dir = mkdtemp(dirpath);
  if (!dir) { perror("mkdtemp"); return 99; }
  signal(SIGSEGV, on_crash), signal(SIGBUS, on_crash), signal(SIGFPE, on_crash), signal(SIGILL, on_crash),
      signal(SIGABRT, on_crash);
  clt_log_set_level(CLT_LOG_ERROR);

  const target targets[] = {{"spec", run_spec, spec_dict, 0},
                            {"idx-images", fuzz_idx_images, NULL, 0},
                            {"idx-labels", fuzz_idx_labels, NULL, 0},
                            {"raw", fuzz_raw, NULL, 0},
                            {"npy", fuzz_npy, NULL, 0},
                            {"npz", fuzz_npz, NULL, 0},
                            {"csv", fuzz_csv, NULL, 0},
                            {"tokens", fuzz_tokens, NULL, 0},
                            {"safetensors", fuzz_safetensors, json_dict, 1},
                            {"tokenizer", run_tokenizer, tokenizer_dict, 0}};
  int failures = 0;
  printf("fuzz_inputs: seed 0x%llx, %.1f s or %ld inputs per target\n", (unsigned long long)seed, seconds,
         max_iters);
  for (size_t ti = 0; ti < sizeof targets / sizeof *targets; ti++) {
    const target *t = &targets[ti];
    uint8_t *seeds[8];
    size_t seed_len[8], nseeds = 0;
    if (t->run == run_spec) {
      for (; fuzz_seed_specs[nseeds]; nseeds++) {
        seed_len[nseeds] = strlen(fuzz_seed_specs[nseeds]);
        seeds[nseeds] = malloc(seed_len[nseeds]);
        memcpy(seeds[nseeds], fuzz_seed_specs[nseeds], seed_len[nseeds]);
      }
    } else if (t->run == run_tokenizer) {
      for (; fuzz_seed_tokenizers[nseeds]; nseeds++) {
        seed_len[nseeds] = strlen(fuzz_seed_tokenizers[nseeds]);
        seeds[nseeds] = malloc(seed_len[nseeds]);
        memcpy(seeds[nseeds], fuzz_seed_tokenizers[nseeds], seed_len[nseeds]);
      }
    } else if (t->run == fuzz_idx_images) {
      fuzz_seed_idx_images(&seeds[0], &seed_len[0]), nseeds = 1;
    } else if (t->run == fuzz_idx_labels) {
      fuzz_seed_idx_labels(&seeds[0], &seed_len[0]), nseeds = 1;
    } else if (t->run == fuzz_raw) {
      fuzz_seed_raw(dir, &seeds[0], &seed_len[0]), nseeds = 1;
    } else if (t->run == fuzz_npy) {
      fuzz_seed_npy(0, &seeds[0], &seed_len[0]), nseeds = 1;
    } else if (t->run == fuzz_npz) {
      fuzz_seed_npy(1, &seeds[0], &seed_len[0]);
      fuzz_seed_npy(2, &seeds[1], &seed_len[1]), nseeds = 2;
    } else if (t->run == fuzz_csv) {
      seed_len[0] = strlen(fuzz_seed_csv);
      seeds[0] = malloc(seed_len[0]);
      memcpy(seeds[0], fuzz_seed_csv, seed_len[0]), nseeds = 1;
    } else if (t->run == fuzz_tokens) {
      fuzz_seed_tokens(dir, 0, &seeds[0], &seed_len[0]);
      fuzz_seed_tokens(dir, 1, &seeds[1], &seed_len[1]), nseeds = 2;
    } else {
      fuzz_seed_safetensors(dir, &seeds[0], &seed_len[0]), nseeds = 1;
    }
    cur_target = t->name;
    /* every seed must itself be accepted, or the fuzzing proves little */
    for (size_t s = 0; s < nseeds; s++) {
      reserve(seed_len[s]);
      memcpy(cur, seeds[s], cur_len = seed_len[s]);
      clt_clear_error();
      if (t->run(dir, cur, cur_len) != 1) {
        fprintf(stderr, "FAIL: %s: seed %zu is refused: %s\n", t->name, s, clt_last_error());
        failures++;
      }
    }
    rng_state = seed ^ (0x1000193ull * (ti + 1));
    long iters = 0, accepted = 0, bad = 0;
    double t0 = now();
    for (; iters < max_iters && now() - t0 < seconds; iters++) {
      size_t s = below(nseeds);
      reserve(seed_len[s]);
      memcpy(cur, seeds[s], cur_len = seed_len[s]);
      if (t->header_aware && below(2)) mutate_header();
      else mutate(t->dict);
      clt_clear_error();
      int rc = t->run(dir, cur, cur_len);
      if (rc < 0) {
        char path[4096];
        snprintf(path, sizeof path, "fuzz-fail-%s-%ld.bin", t->name, iters);
        fuzz_write_file(path, cur, cur_len);
        fprintf(stderr, "FAIL: %s: input %ld (saved as %s)\n", t->name, iters, path);
        if (++bad >= 5) break;
      } else if (rc == 1) {
        accepted++;
      }
    }
    printf("%s %s: %ld inputs in %.1f s, %ld accepted, %ld contract failures\n", bad ? "FAIL" : "ok", t->name,
           iters, now() - t0, accepted, bad);
    failures += (int)bad;
    for (size_t s = 0; s < nseeds; s++) free(seeds[s]);
  }
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  free(cur);
  return failures ? 1 : 0;
}
