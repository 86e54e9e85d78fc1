/*
 * cmd_summary.c: `cltrain summary MODEL`: the layers of a model spec with
 * their output shapes and parameter counts, the memory one replica needs
 * for a batch (clt_model_replica_memory, the layout training allocates),
 * and with --devices, whether that fits each device.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void help(FILE *to) {
  clt_train_options d;
  clt_train_options_defaults(&d);
  fprintf(to,
          "usage: cltrain summary MODEL [OPTIONS]\n"
          "\n"
          "Prints each layer of the model spec file MODEL with its output shape and\n"
          "parameter count, and the device memory one replica needs to train it.\n"
          "\n"
          "  -b, --batch N         samples per replica run, as train's --batch (default %lld)\n"
          "      --accumulate K    as train's: runs of N / K samples (default 1)\n"
          "  -o, --optimizer NAME  sgd, adam or adamw: their state (default sgd, with momentum)\n"
          "      --precision P     fp32 or fp16 (default fp32)\n"
          "  -d, --devices SPEC    compare the need with these devices (as train's --devices);\n"
          "                        exit 1 when it does not fit one of them\n"
          "  -h, --help            this text\n",
          (long long)d.batch);
}

/* The replica's need, line by line. */
static void print_need(const clt_replica_memory *m, const clt_train_options *o) {
  char b[32];
  const struct { const char *what; uint64_t bytes; } rows[] = {
      {"parameters", m->parameters},           {"gradients", m->gradients},
      {"optimizer state", m->optimizer_state}, {"activations", m->activations},
      {"activation gradients", m->activation_grads}, {"workspace", m->workspace}};
  printf("memory of one replica for batches of %lld (%s, %s):\n", (long long)m->batch,
         clt_optimizer_name(o->optimizer.kind), o->precision == CLT_F16 ? "fp16" : "fp32");
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    printf("  %-22s %12s\n", rows[i].what, cli_bytes((double)rows[i].bytes, b, sizeof b));
  printf("  %-22s %12s", "total", cli_bytes((double)m->total, b, sizeof b));
  printf("  (largest buffer %s: %s)\n", cli_bytes((double)m->largest, b, sizeof b), m->largest_what);
}

int cmd_summary(int argc, char **argv) {
  static const struct option opts[] = {{"batch", required_argument, 0, 'b'}, {"accumulate", required_argument, 0, 'a'},
                                       {"optimizer", required_argument, 0, 'o'},
                                       {"precision", required_argument, 0, 'p'},
                                       {"devices", required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'},
                                       {0}};
  clt_train_options o;
  const char *devices = NULL;
  clt_optimizer_kind kind = CLT_OPT_SGD;
  char *end;
  int c;
  clt_train_options_defaults(&o);
  optind = 1;
  while ((c = getopt_long(argc, argv, "b:o:d:h", opts, NULL)) != -1) {
    switch (c) {
    case 'b':
    case 'a': {
      long long v = strtoll(optarg, &end, 10);
      if (end == optarg || *end || v < 1 || v > (c == 'b' ? 1 << 24 : 1 << 16)) {
        fprintf(stderr, "cltrain summary: %s must be a whole number from 1 to %d, not '%s'\n",
                c == 'b' ? "--batch" : "--accumulate", c == 'b' ? 1 << 24 : 1 << 16, optarg);
        return CLI_EXIT_USAGE;
      }
      if (c == 'b') o.batch = v;
      else o.accumulate = (int)v;
      break;
    }
    case 'o':
      if (clt_optimizer_parse(optarg, &kind) < 0) {
        fprintf(stderr, "cltrain summary: --optimizer: %s\n", clt_last_error());
        return CLI_EXIT_USAGE;
      }
      clt_optimizer_defaults(kind, &o.optimizer);
      break;
    case 'p':
      if (strcmp(optarg, "fp32") && strcmp(optarg, "fp16")) {
        fprintf(stderr, "cltrain summary: --precision must be fp32 or fp16, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      o.precision = strcmp(optarg, "fp16") == 0 ? CLT_F16 : CLT_F32;
      break;
    case 'd': devices = optarg; break;
    case 'h': help(stdout); return CLI_EXIT_OK;
    default: help(stderr); return CLI_EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "usage: cltrain summary MODEL [OPTIONS] (cltrain summary --help lists them)\n");
    return CLI_EXIT_USAGE;
  }
  if (o.batch % o.accumulate) {
    fprintf(stderr, "cltrain summary: --accumulate %d must divide the batch size %lld\n", o.accumulate,
            (long long)o.batch);
    return CLI_EXIT_USAGE;
  }
  clt_model *m;
  clt_devices *all = NULL, *sel = NULL;
  clt_replica_memory need;
  char *text;
  int rc = clt_model_load(argv[optind], &m), ec = CLI_EXIT_OK;
  if (rc < 0) return cli_fail(rc, "summary");
  if ((rc = clt_model_summary(m, &text)) < 0 || (rc = clt_model_replica_memory(m, &o, &need)) < 0) {
    clt_model_destroy(m);
    return cli_fail(rc, "summary");
  }
  fputs(text, stdout);
  free(text);
  print_need(&need, &o);
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
