/*
 * cmd_generate.c: `cltrain generate MODEL --weights W --prompt TEXT`:
 * samples text from a language model one token at a time, printed as it
 * comes: a byte-level model (vocabulary 256, as `cltrain tokenize` makes)
 * a byte a token, or any vocabulary with the Hugging Face tokenizer it was
 * trained with (--tokenizer), which encodes the prompt (BOS as the
 * tokenizer says) and decodes what is sampled; an EOS token ends the text.
 *
 * There is no KV cache: each new token runs the forward pass over the last
 * T tokens of the text (T the model's context; a shorter text is padded
 * after its end, which causal attention never lets the last real position
 * see), so a token costs a whole forward pass. Simple and exact; for the
 * small models this machine trains it takes milliseconds.
 */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(FILE *to) {
  fprintf(to, "usage: cltrain generate MODEL --weights FILE [OPTIONS]\n"
              "\n"
              "Samples text from a language model: a byte-level one (vocabulary 256), or any\n"
              "with the tokenizer it was trained with (--tokenizer).\n"
              "\n"
              "  -w, --weights FILE      weights saved by 'cltrain train --save', or a checkpoint\n"
              "                          (required)\n"
              "  -T, --tokenizer PATH    a Hugging Face tokenizer.json, or the directory holding it:\n"
              "                          encodes the prompt and decodes the tokens; the EOS token\n"
              "                          ends the text (default: bytes)\n"
              "      --bos, --no-bos     start the prompt with the BOS token, or not (default: as\n"
              "                          the tokenizer says)\n"
              "  -p, --prompt TEXT       the text to continue (default: a newline)\n"
              "  -n, --tokens N          tokens to generate (default 200)\n"
              "  -t, --temperature X     softmax temperature; 0 takes the most likely token\n"
              "                          (default 1)\n"
              "  -k, --top-k K           sample among the K most likely tokens; 0: all (default 0)\n"
              "      --seed S            the sampler's seed (default 42)\n"
              "  -d, --devices SPEC      the device (default: the first)\n"
              "  -h, --help              this text\n");
}

static uint64_t splitmix64(uint64_t *s) {
  uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static int descending(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* A token from the logits of one position (the first V): the most likely at
 * temperature 0, else a draw from softmax(logits / temperature) over the
 * top k. p and sorted are scratch of V. */
static int sample(const float *logits, int V, double temperature, int top_k, uint64_t *rng, double *p,
                  float *sorted) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  if (temperature <= 0) return best;
  double z = 0, cut = -INFINITY;
  if (top_k > 0 && top_k < V) { /* the k-th largest logit */
    memcpy(sorted, logits, (size_t)V * sizeof *sorted);
    qsort(sorted, (size_t)V, sizeof *sorted, descending);
    cut = sorted[top_k - 1];
  }
  for (int v = 0; v < V; v++) z += p[v] = logits[v] >= cut ? exp((logits[v] - logits[best]) / temperature) : 0;
  double u = (double)(splitmix64(rng) >> 11) / 9007199254740992.0 * z;
  for (int v = 0; v < V; v++)
    if ((u -= p[v]) < 0) return v;
  return best;
}

/* What the command line asks for. */
typedef struct gen_args {
  const char *weights, *prompt, *devices, *tokenizer;
  int bos; /* -1: as the tokenizer says */
  long ntok, top_k;
  double temperature;
  unsigned long long seed;
} gen_args;

/* The options into a: -1 to go on, else the exit code (the help asked
 * for, or a usage error said). */
static int parse_args(int argc, char **argv, gen_args *a) {
  enum { O_BOS = 256, O_NO_BOS };
  static const struct option opts[] = {{"weights", required_argument, 0, 'w'},     {"prompt", required_argument, 0, 'p'},
                                       {"tokenizer", required_argument, 0, 'T'},   {"bos", no_argument, 0, O_BOS},
                                       {"no-bos", no_argument, 0, O_NO_BOS},
                                       {"tokens", required_argument, 0, 'n'},      {"temperature", required_argument, 0, 't'},
                                       {"top-k", required_argument, 0, 'k'},       {"seed", required_argument, 0, 'S'},
                                       {"devices", required_argument, 0, 'd'},     {"help", no_argument, 0, 'h'},
                                       {0}};
  char *end;
  *a = (gen_args){NULL, "\n", NULL, NULL, -1, 200, 0, 1.0, 42};
  int c;
  optind = 1;
  while ((c = cli_getopt(argc, argv, "w:p:T:n:t:k:d:h", opts, "generate")) != -1) {
    switch (c) {
    case 'w': a->weights = optarg; break;
    case 'T': a->tokenizer = optarg; break;
    case O_BOS: a->bos = 1; break;
    case O_NO_BOS: a->bos = 0; break;
    case 'p': a->prompt = optarg; break;
    case 'n':
      a->ntok = strtol(optarg, &end, 10);
      if (*end || end == optarg || a->ntok < 0 || a->ntok > 100000000) {
        fprintf(stderr, "cltrain: --tokens must be a whole number from 0 to 100000000, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case 't':
      a->temperature = strtod(optarg, &end);
      if (*end || end == optarg || !(a->temperature >= 0 && a->temperature <= 100)) {
        fprintf(stderr, "cltrain: --temperature must be a number from 0 to 100, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case 'k':
      a->top_k = strtol(optarg, &end, 10);
      if (*end || end == optarg || a->top_k < 0 || a->top_k > (1 << 24)) {
        fprintf(stderr, "cltrain: --top-k must be a whole number from 0 to 2^24, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case 'S':
      a->seed = strtoull(optarg, &end, 10);
      if (*end || end == optarg) {
        fprintf(stderr, "cltrain: --seed must be a whole number, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case 'd': a->devices = optarg; break;
    case 'h': help(stdout); return CLI_EXIT_OK;
    default: return CLI_EXIT_USAGE;
    }
  }
  if (optind != argc - 1 || !a->weights) {
    fprintf(stderr, "cltrain: generate: one MODEL spec file and --weights FILE are needed\n");
    return CLI_EXIT_USAGE;
  }
  if (a->bos >= 0 && !a->tokenizer) {
    fprintf(stderr, "cltrain: generate: --bos and --no-bos need --tokenizer (bytes have no BOS token)\n");
    return CLI_EXIT_USAGE;
  }
  return -1;
}

/* The text so far and how to show it: bytes, or a tokenizer's tokens. */
typedef struct gen_text {
  clt_tokenizer *tok;
  uint32_t *ids;
  size_t n, nprompt;
  int has_eos;
  uint32_t eos;
  size_t shown; /* bytes of the decoded text printed */
} gen_text;

/* The prompt as tokens (its text printed), into g->ids with room for ntok more. */
static int prompt_tokens(gen_text *g, const char *prompt, int bos, long ntok) {
  const size_t plen = strlen(prompt);
  uint32_t *enc = NULL;
  int64_t k = (int64_t)plen;
  int add = 0, rc;
  uint32_t bos_id = 0;
  if (g->tok) {
    if ((rc = clt_tokenizer_encode(g->tok, prompt, plen, 0, &enc, &k)) < 0) return cli_fail(rc, "generate: --prompt");
    rc = clt_tokenizer_bos(g->tok, &bos_id, &add);
    if (rc < 0 && (rc != CLT_ENOTFOUND || bos == 1)) {
      free(enc);
      return cli_fail(rc, "generate: --bos");
    }
    if (rc == CLT_OK && bos >= 0) add = bos;
    g->has_eos = clt_tokenizer_eos(g->tok, &g->eos, NULL) == CLT_OK;
  }
  if (!(g->ids = malloc(((size_t)k + (size_t)add + (size_t)ntok + 1) * sizeof *g->ids))) {
    free(enc);
    return cli_fail(CLT_ENOMEM, "generate");
  }
  if (add) g->ids[g->n++] = bos_id;
  for (int64_t i = 0; i < k; i++) g->ids[g->n++] = g->tok ? enc[i] : (unsigned char)prompt[i];
  free(enc);
  if (g->n == 0) return cli_fail(CLT_EINVAL, "generate: the prompt makes no tokens");
  g->nprompt = g->n;
  fwrite(prompt, 1, plen, stdout);
  if (g->tok) { /* what the prompt decodes to is not printed again */
    char *d;
    if ((rc = clt_tokenizer_decode(g->tok, g->ids, (int64_t)g->n, CLT_DECODE_SKIP_SPECIAL, &d, &g->shown)) < 0)
      return cli_fail(rc, "generate");
    free(d);
  }
  return CLI_EXIT_OK;
}

/* Print what token `id`, just added, adds to the text: a byte, or the new
 * end of the decoded text (held back while it ends in an incomplete
 * character, which decodes as U+FFFD). */
static int show(gen_text *g, uint32_t id, int last) {
  if (!g->tok) {
    putchar((int)id);
    return CLI_EXIT_OK;
  }
  char *d;
  size_t len;
  int rc = clt_tokenizer_decode(g->tok, g->ids, (int64_t)g->n, CLT_DECODE_SKIP_SPECIAL, &d, &len);
  if (rc < 0) return cli_fail(rc, "generate");
  const int partial = len >= 3 && memcmp(d + len - 3, "\xEF\xBF\xBD", 3) == 0;
  if (len > g->shown && (!partial || last)) {
    fwrite(d + g->shown, 1, len - g->shown, stdout);
    g->shown = len;
  }
  free(d);
  return CLI_EXIT_OK;
}

int cmd_generate(int argc, char **argv) {
  gen_args a;
  int done = parse_args(argc, argv, &a);
  if (done >= 0) return done;
  const char *weights = a.weights, *prompt = a.prompt, *devices = a.devices;
  long ntok = a.ntok, top_k = a.top_k;
  double temperature = a.temperature;
  unsigned long long seed = a.seed;
  clt_model *m = NULL;
  clt_devices *all = NULL, *one = NULL;
  clt_trainer *tr = NULL;
  float *x = NULL, *logits = NULL, *sorted = NULL;
  double *p = NULL;
  gen_text g = {0};
  int rc, ec = CLI_EXIT_OK;
  if ((rc = clt_model_load(argv[optind], &m)) < 0) { ec = cli_fail(rc, "model"); goto out; }
  int V = clt_model_vocab(m), Vs = V; /* Vs: the ids sampled, those the tokenizer has */
  int64_t T = clt_model_input_size(m);
  if (a.tokenizer) {
    if ((rc = clt_tokenizer_load(a.tokenizer, &g.tok)) < 0) { ec = cli_fail(rc, "generate: --tokenizer"); goto out; }
    const int64_t tv = clt_tokenizer_vocab_size(g.tok);
    if (!V || tv > V) {
      if (V)
        fprintf(stderr, "cltrain: generate: %s has a vocabulary of %d, smaller than the %lld ids of %s; give the "
                "tokenizer the model was trained with\n", argv[optind], V, (long long)tv, clt_tokenizer_path(g.tok));
      else
        fprintf(stderr, "cltrain: generate: %s is not a language model (input tokens T vocab=V)\n", argv[optind]);
      ec = CLI_EXIT_ERROR;
      goto out;
    }
    Vs = (int)tv;
  } else if (V != 256) {
    fprintf(stderr, "cltrain: generate: %s %s; without --tokenizer generate reads and writes bytes, so it needs a "
            "byte-level model (input tokens T vocab=256)\n", argv[optind],
            V ? "has another vocabulary" : "is not a language model");
    ec = CLI_EXIT_ERROR;
    goto out;
  }
  /* An exit code, said already (no driver, no device: 3), as for every command. */
  if ((ec = cli_select_devices(devices ? devices : "0", &all, &one)) != CLI_EXIT_OK) goto out;
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = 1;
  if ((rc = clt_trainer_create(m, one, NULL, &o, &tr)) < 0) { ec = cli_fail(rc, "generate"); goto out; }
  if ((rc = clt_trainer_load_weights(tr, weights)) < 0) { ec = cli_fail(rc, "--weights"); goto out; }
  if (!*prompt && !g.tok) prompt = "\n"; /* the model needs one byte to go on from */
  x = calloc((size_t)T, sizeof *x);
  logits = malloc((size_t)(T * V) * sizeof *logits);
  p = malloc((size_t)V * sizeof *p);
  sorted = malloc((size_t)V * sizeof *sorted);
  if (!x || !logits || !p || !sorted) { ec = cli_fail(CLT_ENOMEM, "generate"); goto out; }
  if ((ec = prompt_tokens(&g, prompt, a.bos, ntok)) != CLI_EXIT_OK) goto out;
  uint64_t rng = seed;
  for (long i = 0; i < ntok; i++) {
    size_t from = g.n > (size_t)T ? g.n - (size_t)T : 0, w = g.n - from;
    for (size_t j = 0; j < (size_t)T; j++) x[j] = j < w ? (float)g.ids[from + j] : 0.0f;
    if ((rc = clt_trainer_forward(tr, x, NULL, 1, logits, T * V, NULL)) < 0) { ec = cli_fail(rc, "generate"); goto out; }
    const uint32_t b = (uint32_t)sample(logits + (w - 1) * (size_t)V, Vs, temperature, (int)top_k, &rng, p, sorted);
    g.ids[g.n++] = b;
    const int stop = g.has_eos && b == g.eos;
    if ((ec = show(&g, b, stop || i == ntok - 1)) != CLI_EXIT_OK) goto out;
    fflush(stdout);
    if (stop) break;
  }
  putchar('\n');
out:
  free(x), free(logits), free(p), free(sorted), free(g.ids);
  clt_tokenizer_destroy(g.tok);
  clt_trainer_destroy(tr);
  clt_devices_destroy(one);
  clt_devices_destroy(all);
  clt_model_destroy(m);
  return ec;
}
