/*
 * cmd_hf.c: `cltrain hf import DIR -o PREFIX` and `cltrain hf export MODEL
 * --weights W -o DIR`: Hugging Face GPT-2 checkpoints (the directory
 * GPT2LMHeadModel.save_pretrained writes) to and from cltrain's model spec
 * and weights, over clt_hf_gpt2_import and clt_hf_gpt2_export.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void hf_help(FILE *to) {
  fprintf(to, "usage: cltrain hf import DIR -o PREFIX [--context T]\n"
              "       cltrain hf export MODEL --weights FILE -o DIR\n"
              "\n"
              "Hugging Face GPT-2 checkpoints: the directory transformers'\n"
              "GPT2LMHeadModel.save_pretrained writes (config.json, model.safetensors).\n"
              "'cltrain hf import --help' and 'cltrain hf export --help' show the options.\n");
}

static void import_help(FILE *to) {
  fprintf(to, "usage: cltrain hf import DIR -o PREFIX [--context T]\n"
              "\n"
              "Reads DIR/config.json and DIR/model.safetensors (float32, float16 or bfloat16;\n"
              "or its shards, by model.safetensors.index.json) and writes the model spec\n"
              "PREFIX.model and its float32 weights PREFIX.safetensors, which 'train --weights'\n"
              "and 'eval --weights' read. A config cltrain's GPT cannot follow (another\n"
              "activation function, cross-attention, ...) is refused, naming the key.\n"
              "\n"
              "  -o, --output PREFIX   where to write PREFIX.model and PREFIX.safetensors (required)\n"
              "  -T, --context T       the model's context, 1 .. n_positions (default n_positions)\n"
              "  -h, --help            this text\n");
}

static void export_help(FILE *to) {
  fprintf(to, "usage: cltrain hf export MODEL --weights FILE -o DIR\n"
              "\n"
              "Writes a GPT model (of examples/gpt2_124m.model's structure) and its weights as\n"
              "DIR/config.json and DIR/model.safetensors, which\n"
              "transformers.GPT2LMHeadModel.from_pretrained(DIR) loads.\n"
              "\n"
              "  -w, --weights FILE    weights saved by 'train --save', or a checkpoint (required)\n"
              "  -o, --output DIR      the directory to write (made if missing; required)\n"
              "  -h, --help            this text\n");
}

static int hf_import(int argc, char **argv) {
  static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                       {"context", required_argument, 0, 'T'},
                                       {"help", no_argument, 0, 'h'},
                                       {0}};
  const char *prefix = NULL;
  long context = 0;
  int c;
  while ((c = getopt_long(argc, argv, "o:T:h", opts, NULL)) != -1) {
    char *end;
    switch (c) {
    case 'o': prefix = optarg; break;
    case 'T':
      context = strtol(optarg, &end, 10);
      if (!*optarg || *end || context < 1 || context > 1000000) {
        fprintf(stderr, "cltrain hf import: --context must be a number of positions from 1, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case 'h': import_help(stdout); return CLI_EXIT_OK;
    default: import_help(stderr); return CLI_EXIT_USAGE;
    }
  }
  if (optind != argc - 1 || !prefix) {
    fprintf(stderr, "cltrain hf import: one DIR and -o PREFIX are needed (cltrain hf import --help)\n");
    return CLI_EXIT_USAGE;
  }
  size_t len = strlen(prefix) + 16;
  char *model = malloc(len), *weights = malloc(len);
  int rc = CLT_ENOMEM;
  if (model && weights) {
    snprintf(model, len, "%s.model", prefix);
    snprintf(weights, len, "%s.safetensors", prefix);
    rc = clt_check_output(model, CLT_OUTPUT_FILE);
    if (rc == CLT_OK) rc = clt_check_output(weights, CLT_OUTPUT_FILE);
    if (rc == CLT_OK) rc = clt_hf_gpt2_import(argv[optind], (int)context, model, weights);
  }
  if (rc == CLT_OK) printf("cltrain: imported %s as %s and %s\n", argv[optind], model, weights);
  free(model);
  free(weights);
  return rc < 0 ? cli_fail(rc, "hf import") : CLI_EXIT_OK;
}

static int hf_export(int argc, char **argv) {
  static const struct option opts[] = {{"weights", required_argument, 0, 'w'},
                                       {"output", required_argument, 0, 'o'},
                                       {"help", no_argument, 0, 'h'},
                                       {0}};
  const char *weights = NULL, *dir = NULL;
  int c;
  while ((c = getopt_long(argc, argv, "w:o:h", opts, NULL)) != -1) {
    switch (c) {
    case 'w': weights = optarg; break;
    case 'o': dir = optarg; break;
    case 'h': export_help(stdout); return CLI_EXIT_OK;
    default: export_help(stderr); return CLI_EXIT_USAGE;
    }
  }
  if (optind != argc - 1 || !weights || !dir) {
    fprintf(stderr, "cltrain hf export: one MODEL, --weights FILE and -o DIR are needed (cltrain hf export --help)\n");
    return CLI_EXIT_USAGE;
  }
  int rc = clt_hf_gpt2_export(argv[optind], weights, dir);
  if (rc < 0) return cli_fail(rc, "hf export");
  printf("cltrain: exported %s with %s to %s (config.json, model.safetensors)\n", argv[optind], weights, dir);
  return CLI_EXIT_OK;
}

int cmd_hf(int argc, char **argv) {
  if (argc < 2) {
    hf_help(stderr);
    return CLI_EXIT_USAGE;
  }
  if (strcmp(argv[1], "import") == 0) return hf_import(argc - 1, argv + 1);
  if (strcmp(argv[1], "export") == 0) return hf_export(argc - 1, argv + 1);
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    hf_help(stdout);
    return CLI_EXIT_OK;
  }
  fprintf(stderr, "cltrain hf: unknown subcommand '%s' (import or export)\n\n", argv[1]);
  hf_help(stderr);
  return CLI_EXIT_USAGE;
}
