/*
 * cmd_summary.c: `cltrain summary MODEL`: the layers of a model spec with
 * their output shapes and parameter counts, the memory one replica needs
 * for a batch (clt_model_replica_memory_ranks, the layout training
 * allocates, with ZeRO's shard of the optimizer state, and at stage 2 of
 * the gradients, over --ranks, and with --recompute blocks what
 * recomputation saves), the tensors weight decay applies to, and with
 * --devices, whether that fits each device.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#include <stdlib.h>

static void help(FILE *to) {
  clt_train_options d;
  char names[256];
  clt_train_options_defaults(&d);
  fprintf(to,
          "usage: cltrain summary MODEL [OPTIONS]\n"
          "\n"
          "Prints each layer of the model spec file MODEL with its output shape,\n"
          "parameter count and the tensors weight decay applies to, and the device\n"
          "memory one replica needs to train it.\n"
          "\n"
          "  -b, --batch N         samples per replica run, as train's --batch (default %lld)\n"
          "      --accumulate K    as train's: runs of N / K samples (default 1)\n"
          "  -o, --optimizer NAME  %s: their state (default %s, with momentum)\n"
          "      --decay-all       as train's: decoupled weight decay on every tensor (the weight\n"
          "                        decay column shows the tensors it applies to without it)\n"
          "      --precision P     fp32 or fp16 (default fp32)\n"
          "      --zero S          as train's --zero: 1 counts the optimizer state of the\n"
          "                        largest rank's shard only, 2 its gradients too with the\n"
          "                        backward's bucket buffers, 3 its parameters too with the\n"
          "                        ring of gathered layers (default 0)\n"
          "      --ranks N         ranks of the job, one replica each (default 1)\n"
          "      --offload optimizer  as train's: no optimizer state on the device\n"
          "      --bucket-mb X     as train's: the buckets the shards are cut from (default %g)\n"
          "      --recompute WHAT  as train's: blocks counts each block pass's input and one\n"
          "                        pass's activations, and says what that saves (default none)\n"
          "  -d, --devices SPEC    compare the need with these devices (as train's --devices);\n"
          "                        exit 1 when it does not fit one of them\n"
          "  -w, --weights FILE    also show the inputs' normalisation saved with these weights\n"
          "                        (or checkpoint): its kind and every feature's shift and scale\n"
          "  -h, --help            this text\n",
          (long long)d.batch, cli_optimizer_names(-1, ", ", " or ", names, sizeof names),
          clt_optimizer_name(d.optimizer.kind), d.bucket_mb);
}

static const char *weights_path; /* --weights */

/* The normalisation saved with --weights FILE: what a user of the weights
 * elsewhere applies to the inputs first. */
static int print_normalization(const char *path, const clt_model *m) {
  clt_normalize_kind kind;
  int64_t n;
  int rc = clt_weights_normalization(path, &kind, NULL, NULL, 0, &n);
  if (rc < 0) return cli_fail(rc, "--weights");
  if (kind == CLT_NORMALIZE_NONE) {
    printf("normalization (%s): none saved; the inputs go in as stored\n", path);
    return CLI_EXIT_OK;
  }
  float *shift = calloc((size_t)n, sizeof *shift), *scale = calloc((size_t)n, sizeof *scale);
  if (!shift || !scale || (rc = clt_weights_normalization(path, &kind, shift, scale, n, &n)) < 0) {
    free(shift), free(scale);
    return cli_fail(rc < 0 ? rc : CLT_ENOMEM, "--weights");
  }
  printf("normalization (%s): %s, %lld features, x' = (x - shift) / scale%s\n", path, clt_normalize_name(kind),
         (long long)n, n == clt_model_input_size(m) ? "" : " (not the model's input size!)");
  for (int64_t j = 0; j < n; j++) printf("  feature %lld: shift %.9g scale %.9g\n", (long long)j, (double)shift[j], (double)scale[j]);
  free(shift), free(scale);
  return CLI_EXIT_OK;
}

/* The replica's need, line by line. */
/* The replica's need, line by line; without_rc: its activations without
 * --recompute blocks (when it is on). */
static void print_need(const clt_replica_memory *m, const clt_train_options *o, int nranks, int64_t shard,
                       int64_t P, uint64_t without_rc) {
  char b[32];
  const struct { const char *what; uint64_t bytes; } rows[] = {
      {"parameters", m->parameters},           {"gradients", m->gradients},
      {"optimizer state", m->optimizer_state}, {"activations", m->activations},
      {"activation gradients", m->activation_grads}, {"workspace", m->workspace}};
  printf("memory of one replica for batches of %lld (%s, %s", (long long)m->batch,
         clt_optimizer_name(o->optimizer.kind), o->precision == CLT_F16 ? "fp16" : "fp32");
  if (o->zero == 3 && nranks > 1)
    printf(", --zero 3 over %d ranks: parameters, optimizer state and gradients for at most %lld of %lld "
           "parameters, with the ring of gathered layers and %s", nranks, (long long)shard, (long long)P,
           o->accumulate == 1 ? "the bucket buffers the backward writes into"
                              : "whole gradients, since --accumulate sums the micro-batches locally first");
  else if (o->zero == 2 && nranks > 1 && o->accumulate == 1)
    printf(", --zero 2 over %d ranks: optimizer state and gradients for at most %lld of %lld parameters, with the "
           "bucket buffers the backward writes into", nranks, (long long)shard, (long long)P);
  else if (o->zero && nranks > 1)
    printf(", --zero %d over %d ranks: optimizer state for at most %lld of %lld parameters%s", o->zero, nranks,
           (long long)shard, (long long)P,
           o->zero == 2 ? "; gradients whole, since --accumulate sums the micro-batches locally first" : "");
  else if (o->zero)
    printf(", --zero %d on one rank changes nothing", o->zero);
  if (o->offload == CLT_OFFLOAD_OPTIMIZER) printf("; the optimizer state in host memory (--offload optimizer)");
  printf("):\n");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    printf("  %-22s %12s\n", rows[i].what, cli_bytes((double)rows[i].bytes, b, sizeof b));
  printf("  %-22s %12s", "total", cli_bytes((double)m->total, b, sizeof b));
  printf("  (largest buffer %s: %s)\n", cli_bytes((double)m->largest, b, sizeof b), m->largest_what);
  if (o->recompute == CLT_RECOMPUTE_BLOCKS) {
    char w[32], d[32];
    printf("--recompute blocks: activations %s instead of %s, %s less (each block pass's input kept, one pass's "
           "activations made again in the backward)\n", cli_bytes((double)m->activations, b, sizeof b),
           cli_bytes((double)without_rc, w, sizeof w), cli_bytes((double)(without_rc - m->activations), d, sizeof d));
  }
}

/* The options into o, *nranks and *devices: -1 to go on, else the exit
 * code (the help asked for, or a usage error said). */
static int parse_args(int argc, char **argv, clt_train_options *o, int *nranks, const char **devices) {
  static const struct option opts[] = {{"batch", required_argument, 0, 'b'}, {"accumulate", required_argument, 0, 'a'},
                                       {"optimizer", required_argument, 0, 'o'},
                                       {"precision", required_argument, 0, 'p'},
                                       {"devices", required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'},
                                       {"zero", required_argument, 0, 'z'},   {"ranks", required_argument, 0, 'r'},
                                       {"bucket-mb", required_argument, 0, 'm'},
                                       {"decay-all", no_argument, 0, 'A'},
                                       {"offload", required_argument, 0, 'O'},
                                       {"weights", required_argument, 0, 'w'},
                                       {"recompute", required_argument, 0, 'R'}, {0}};
  clt_optimizer_kind kind = CLT_OPT_SGD;
  char *end;
  int c;
  optind = 1;
  while ((c = cli_getopt(argc, argv, "b:o:d:w:h", opts, "summary")) != -1) {
    switch (c) {
    case 'b':
    case 'a': {
      long long v = strtoll(optarg, &end, 10);
      if (end == optarg || *end || v < 1 || v > (c == 'b' ? 1 << 24 : 1 << 16)) {
        fprintf(stderr, "cltrain: summary: %s must be a whole number from 1 to %d, not '%s'\n",
                c == 'b' ? "--batch" : "--accumulate", c == 'b' ? 1 << 24 : 1 << 16, optarg);
        return CLI_EXIT_USAGE;
      }
      if (c == 'b') o->batch = v;
      else o->accumulate = (int)v;
      break;
    }
    case 'o':
      if (clt_optimizer_parse(optarg, &kind) < 0) {
        fprintf(stderr, "cltrain: summary: --optimizer: %s\n", clt_last_error());
        return CLI_EXIT_USAGE;
      }
      clt_optimizer_defaults(kind, &o->optimizer);
      break;
    case 'p':
      if (strcmp(optarg, "fp32") && strcmp(optarg, "fp16")) {
        fprintf(stderr, "cltrain: summary: --precision must be fp32 or fp16, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      o->precision = strcmp(optarg, "fp16") == 0 ? CLT_F16 : CLT_F32;
      break;
    case 'O':
      if (strcmp(optarg, "optimizer") && strcmp(optarg, "none")) {
        fprintf(stderr, "cltrain: summary: --offload must be optimizer or none, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      o->offload = strcmp(optarg, "optimizer") == 0 ? CLT_OFFLOAD_OPTIMIZER : CLT_OFFLOAD_NONE;
      break;
    case 'z':
    case 'r': {
      long long v = strtoll(optarg, &end, 10), lo = c == 'z' ? 0 : 1, hi = c == 'z' ? 3 : 1 << 20;
      if (end == optarg || *end || v < lo || v > hi) {
        fprintf(stderr, "cltrain: summary: %s must be a whole number from %lld to %lld, not '%s'\n",
                c == 'z' ? "--zero" : "--ranks", lo, hi, optarg);
        return CLI_EXIT_USAGE;
      }
      if (c == 'z') o->zero = (int)v;
      else *nranks = (int)v;
      break;
    }
    case 'm': {
      double v = strtod(optarg, &end);
      if (end == optarg || *end || !(v >= 0 && v <= 1e6)) {
        fprintf(stderr, "cltrain: summary: --bucket-mb must be a number from 0 to 1e6, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      o->bucket_mb = v;
      break;
    }
    case 'd': *devices = optarg; break;
    case 'A': o->decay_all = 1; break;
    case 'w': weights_path = optarg; break;
    case 'R':
      if (strcmp(optarg, "blocks") && strcmp(optarg, "none")) {
        fprintf(stderr, "cltrain: summary: --recompute must be blocks or none, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      o->recompute = strcmp(optarg, "blocks") == 0 ? CLT_RECOMPUTE_BLOCKS : CLT_RECOMPUTE_NONE;
      break;
    case 'h': help(stdout); return CLI_EXIT_OK;
    default: return CLI_EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, optind >= argc ? "cltrain: summary: the MODEL spec file is missing (cltrain summary --help)\n"
                                   : "cltrain: summary: one MODEL spec file is expected; '%s' is extra\n",
            argv[argc - 1]);
    return CLI_EXIT_USAGE;
  }
  if (o->batch % o->accumulate) {
    fprintf(stderr, "cltrain: summary: --accumulate %d must divide the batch size %lld\n", o->accumulate,
            (long long)o->batch);
    return CLI_EXIT_USAGE;
  }
  return -1;
}

int cmd_summary(int argc, char **argv) {
  int nranks = 1, done;
  clt_train_options o;
  const char *devices = NULL;
  clt_train_options_defaults(&o);
  if ((done = parse_args(argc, argv, &o, &nranks, &devices)) >= 0) return done;
  clt_model *m;
  clt_devices *all = NULL, *sel = NULL;
  clt_replica_memory need, without_rc;
  clt_train_options plain;
  int64_t shard = 0;
  char *text;
  int rc = clt_model_load(argv[optind], &m), ec = CLI_EXIT_OK;
  if (rc < 0) return cli_fail(rc, "summary");
  plain = o;
  plain.recompute = CLT_RECOMPUTE_NONE;
  if ((rc = clt_model_summary(m, &text)) < 0 || (rc = clt_model_replica_memory_ranks(m, &o, nranks, &need, &shard)) < 0 ||
      (rc = clt_model_replica_memory_ranks(m, &plain, nranks, &without_rc, NULL)) < 0) {
    clt_model_destroy(m);
    return cli_fail(rc, "summary");
  }
  fputs(text, stdout);
  free(text);
  if (!clt_optimizer_decoupled_decay(o.optimizer.kind))
    printf("(%s's weight decay is L2, added to the gradient of every parameter)\n", clt_optimizer_name(o.optimizer.kind));
  else if (o.decay_all)
    printf("(--decay-all: %s's decoupled weight decay applies to every parameter)\n",
           clt_optimizer_name(o.optimizer.kind));
  print_need(&need, &o, nranks, shard, clt_model_param_count(m), without_rc.activations);
  if (weights_path) ec = print_normalization(weights_path, m);
  if (devices && (ec = cli_select_devices(devices, &all, &sel)) == CLI_EXIT_OK) {
    for (int i = 0; i < clt_devices_count(sel); i++) {
      const clt_device_info *d = clt_devices_info(sel, i);
      char g[32], a[32];
      printf("device %d (%s): %s, %s in one buffer: ", d->index, d->name,
             cli_bytes((double)d->global_mem_bytes, g, sizeof g), cli_bytes((double)d->max_alloc_bytes, a, sizeof a));
      if ((rc = clt_replica_memory_check(&need, d)) < 0) {
        printf("does not fit\n");
        fflush(stdout);
        ec = cli_fail(rc, argv[optind]);
      } else {
        printf("fits\n");
      }
    }
  }
  clt_devices_destroy(sel);
  clt_devices_destroy(all);
  clt_model_destroy(m);
  return ec;
}
