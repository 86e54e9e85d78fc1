/*
 * cmd_generate.c: `cltrain generate MODEL --weights W --prompt TEXT`:
 * samples text from a byte-level language model (vocabulary 256, as
 * `cltrain tokenize` makes), one byte at a time, printed as it comes.
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
              "Samples text from a byte-level language model (vocabulary 256).\n"
              "\n"
              "  -w, --weights FILE      weights saved by 'cltrain train --save', or a checkpoint\n"
              "                          (required)\n"
              "  -p, --prompt TEXT       the text to continue (default: a newline)\n"
              "  -n, --tokens N          bytes to generate (default 200)\n"
              "  -t, --temperature X     softmax temperature; 0 takes the most likely byte\n"
              "                          (default 1)\n"
              "  -k, --top-k K           sample among the K most likely bytes; 0: all (default 0)\n"
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

/* A byte from the logits of one position: the most likely at temperature
 * 0, else a draw from softmax(logits / temperature) over the top k. */
static int sample(const float *logits, int V, double temperature, int top_k, uint64_t *rng) {
  int best = 0;
  for (int v = 1; v < V; v++)
    if (logits[v] > logits[best]) best = v;
  if (temperature <= 0) return best;
  double p[256], z = 0, cut = -INFINITY;
  if (top_k > 0 && top_k < V) { /* the k-th largest logit */
    float sorted[256];
    memcpy(sorted, logits, (size_t)V * sizeof *sorted);
    for (int i = 0; i < top_k; i++)
      for (int j = i + 1; j < V; j++)
        if (sorted[j] > sorted[i]) {
          float t = sorted[i];
          sorted[i] = sorted[j], sorted[j] = t;
        }
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
  const char *weights, *prompt, *devices;
  long ntok, top_k;
  double temperature;
  unsigned long long seed;
} gen_args;

/* The options into a: -1 to go on, else the exit code (the help asked
 * for, or a usage error said). */
static int parse_args(int argc, char **argv, gen_args *a) {
  static const struct option opts[] = {{"weights", required_argument, 0, 'w'},     {"prompt", required_argument, 0, 'p'},
                                       {"tokens", required_argument, 0, 'n'},      {"temperature", required_argument, 0, 't'},
                                       {"top-k", required_argument, 0, 'k'},       {"seed", required_argument, 0, 'S'},
                                       {"devices", required_argument, 0, 'd'},     {"help", no_argument, 0, 'h'},
                                       {0}};
  char *end;
  *a = (gen_args){NULL, "\n", NULL, 200, 0, 1.0, 42};
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "w:p:n:t:k:d:h", opts, NULL)) != -1) {
    switch (c) {
    case 'w': a->weights = optarg; break;
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
      if (*end || end == optarg || a->top_k < 0 || a->top_k > 256) {
        fprintf(stderr, "cltrain: --top-k must be a whole number from 0 to 256, not '%s'\n", optarg);
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
    default: help(stderr); return CLI_EXIT_USAGE;
    }
  }
  if (optind != argc - 1 || !a->weights) {
    fprintf(stderr, "cltrain generate: one MODEL spec file and --weights FILE are needed\n");
    return CLI_EXIT_USAGE;
  }
  return -1;
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
  float *x = NULL, *logits = NULL;
  uint8_t *text = NULL;
  int rc, ec = CLI_EXIT_OK;
  if ((rc = clt_model_load(argv[optind], &m)) < 0) { ec = cli_fail(rc, "model"); goto out; }
  int V = clt_model_vocab(m);
  int64_t T = clt_model_input_size(m);
  if (V != 256) {
    fprintf(stderr, "cltrain generate: %s %s; generate reads and writes bytes, so it needs a byte-level model "
            "(input tokens T vocab=256)\n", argv[optind], V ? "has another vocabulary" : "is not a language model");
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
  if (!*prompt) prompt = "\n"; /* the model needs one byte to go on from */
  size_t plen = strlen(prompt);
  x = calloc((size_t)T, sizeof *x);
  logits = malloc((size_t)(T * V) * sizeof *logits);
  text = malloc(plen + (size_t)ntok + 1);
  if (!x || !logits || !text) { ec = cli_fail(CLT_ENOMEM, "generate"); goto out; }
  memcpy(text, prompt, plen);
  fwrite(prompt, 1, plen, stdout);
  uint64_t rng = seed;
  size_t len = plen;
  for (long i = 0; i < ntok; i++) {
    size_t from = len > (size_t)T ? len - (size_t)T : 0, w = len - from;
    for (size_t j = 0; j < (size_t)T; j++) x[j] = j < w ? (float)text[from + j] : 0.0f;
    if ((rc = clt_trainer_forward(tr, x, NULL, 1, logits, T * V, NULL)) < 0) { ec = cli_fail(rc, "generate"); goto out; }
    int b = sample(logits + (w - 1) * (size_t)V, V, temperature, (int)top_k, &rng);
    text[len++] = (uint8_t)b;
    putchar(b);
    fflush(stdout);
  }
  putchar('\n');
out:
  free(x), free(logits), free(text);
  clt_trainer_destroy(tr);
  clt_devices_destroy(one);
  clt_devices_destroy(all);
  clt_model_destroy(m);
  return ec;
}
