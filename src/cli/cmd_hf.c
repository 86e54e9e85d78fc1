/*
 * cmd_hf.c: `cltrain hf import DIR -o PREFIX` and `cltrain hf export MODEL
 * --weights W -o DIR`: Hugging Face checkpoints (the directory a model's
 * save_pretrained writes: GPT2LMHeadModel, LlamaForCausalLM,
 * Qwen2ForCausalLM, MistralForCausalLM) to and from cltrain's model spec
 * and weights, over clt_hf_import and clt_hf_export.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void hf_help(FILE *to) {
  fprintf(to, "usage: cltrain hf import DIR -o PREFIX [--context T]\n"
              "       cltrain hf export MODEL --weights FILE -o DIR [--dtype f32|bf16|f16]\n"
              "\n"
              "Hugging Face checkpoints: the directory transformers' save_pretrained writes\n"
              "(config.json, model.safetensors) for GPT2LMHeadModel, LlamaForCausalLM,\n"
              "Qwen2ForCausalLM and MistralForCausalLM.\n"
              "'cltrain hf import --help' and 'cltrain hf export --help' show the options.\n");
}

static void import_help(FILE *to) {
  fprintf(to, "usage: cltrain hf import DIR -o PREFIX [--context T]\n"
              "\n"
              "Reads DIR/config.json and DIR/model.safetensors (float32, float16 or bfloat16;\n"
              "or its shards, by model.safetensors.index.json) of a GPT2LMHeadModel,\n"
              "LlamaForCausalLM, Qwen2ForCausalLM or MistralForCausalLM and writes the model\n"
              "spec PREFIX.model and its float32 weights PREFIX.safetensors, which\n"
              "'train --weights' and 'eval --weights' read. A config key cltrain cannot follow\n"
              "(another activation, a sliding window shorter than the context, a rope_scaling\n"
              "other than llama3, ...) is refused, naming the key. The spec records the class\n"
              "and DIR for 'hf export' (its hf- comment lines).\n"
              "\n"
              "  -o, --output PREFIX   where to write PREFIX.model and PREFIX.safetensors (required)\n"
              "  -T, --context T       the model's context, 1 .. n_positions or max_position_embeddings\n"
              "                        (default all of it)\n"
              "  -h, --help            this text\n");
}

static void export_help(FILE *to) {
  fprintf(to, "usage: cltrain hf export MODEL --weights FILE -o DIR [--dtype f32|bf16|f16]\n"
              "                         [--class CLASS] [--tokenizer DIR|FILE | --no-tokenizer]\n"
              "\n"
              "Writes a model of GPT-2's structure (examples/gpt2_124m.model) or Llama's\n"
              "(examples/llama_tiny.model) and its weights as DIR/config.json and\n"
              "DIR/model.safetensors, with the tokenizer's files beside them, which\n"
              "transformers' from_pretrained(DIR) loads.\n"
              "\n"
              "  -w, --weights FILE    weights saved by 'train --save', or a checkpoint (required)\n"
              "  -o, --output DIR      the directory to write (made if missing; required)\n"
              "      --dtype D         the tensors' dtype: f32, bf16 or f16 (rounded to nearest even)\n"
              "                        (default f32)\n"
              "      --class CLASS     GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM or\n"
              "                        MistralForCausalLM (default: the one 'hf import' recorded in\n"
              "                        MODEL, else GPT-2's or, for Llama's structure, Qwen2's with\n"
              "                        q, k and v biases and Llama's otherwise)\n"
              "      --tokenizer P     copy the tokenizer's files (tokenizer.json, tokenizer_config.json,\n"
              "                        special_tokens_map.json, ...) of directory P, or P as tokenizer.json\n"
              "                        (default: those of the directory 'hf import' read, if recorded)\n"
              "      --no-tokenizer    copy none\n"
              "  -h, --help            this text\n");
}

/* The class hf import recorded in the spec it wrote (its "# hf-class:"
 * line, cltrain(1)). */
static const char *recorded_class(const char *model, char *buf, size_t len) {
  char line[256];
  FILE *f = fopen(model, "r");
  snprintf(buf, len, "%s", "?");
  while (f && fgets(line, sizeof line, f) && line[0] == '#')
    if (sscanf(line, "# hf-class: %63s", buf) == 1) break;
  if (f) fclose(f);
  return buf;
}

static int hf_import(int argc, char **argv) {
  static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                       {"context", required_argument, 0, 'T'},
                                       {"help", no_argument, 0, 'h'},
                                       {0}};
  const char *prefix = NULL;
  long context = 0;
  int c;
  while ((c = cli_getopt(argc, argv, "o:T:h", opts, "hf import")) != -1) {
    char *end;
    switch (c) {
    case 'o': prefix = optarg; break;
    case 'T':
      context = strtol(optarg, &end, 10);
      if (!*optarg || *end || context < 1 || context > 1000000) {
        fprintf(stderr, "cltrain: hf import: --context must be a number of positions from 1, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case 'h': import_help(stdout); return CLI_EXIT_OK;
    default: return CLI_EXIT_USAGE;
    }
  }
  if (optind != argc - 1 || !prefix) {
    fprintf(stderr, "cltrain: hf import: one DIR and -o PREFIX are needed (cltrain hf import --help)\n");
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
    if (rc == CLT_OK) rc = clt_hf_import(argv[optind], (int)context, model, weights);
  }
  if (rc == CLT_OK) {
    char cls[64];
    printf("cltrain: imported %s (%s) as %s and %s\n", argv[optind], recorded_class(model, cls, sizeof cls), model,
           weights);
  }
  free(model);
  free(weights);
  return rc < 0 ? cli_fail(rc, "hf import") : CLI_EXIT_OK;
}

static int hf_export(int argc, char **argv) {
  static const struct option opts[] = {{"weights", required_argument, 0, 'w'},
                                       {"output", required_argument, 0, 'o'},
                                       {"dtype", required_argument, 0, 'D'},
                                       {"class", required_argument, 0, 'C'},
                                       {"tokenizer", required_argument, 0, 'k'},
                                       {"no-tokenizer", no_argument, 0, 'N'},
                                       {"help", no_argument, 0, 'h'},
                                       {0}};
  static const char *const dtypes[] = {[CLT_HF_F32] = "f32", [CLT_HF_BF16] = "bf16", [CLT_HF_F16] = "f16"};
  const char *weights = NULL, *dir = NULL;
  clt_hf_export_options o;
  clt_hf_export_options_defaults(&o);
  int c, dtype = -1;
  while ((c = cli_getopt(argc, argv, "w:o:h", opts, "hf export")) != -1) {
    switch (c) {
    case 'w': weights = optarg; break;
    case 'o': dir = optarg; break;
    case 'D':
      for (int d = 0; d < (int)(sizeof dtypes / sizeof *dtypes); d++)
        if (strcmp(optarg, dtypes[d]) == 0) dtype = d;
      if (dtype < 0) {
        fprintf(stderr, "cltrain: hf export: --dtype must be f32, bf16 or f16, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      o.dtype = (clt_hf_dtype)dtype;
      break;
    case 'C': o.hf_class = optarg; break;
    case 'k': o.tokenizer = optarg; break;
    case 'N': o.no_tokenizer = 1; break;
    case 'h': export_help(stdout); return CLI_EXIT_OK;
    default: return CLI_EXIT_USAGE;
    }
  }
  if (optind != argc - 1 || !weights || !dir) {
    fprintf(stderr, "cltrain: hf export: one MODEL, --weights FILE and -o DIR are needed (cltrain hf export --help)\n");
    return CLI_EXIT_USAGE;
  }
  if (o.tokenizer && o.no_tokenizer) {
    fprintf(stderr, "cltrain: hf export: --tokenizer and --no-tokenizer contradict each other; give one\n");
    return CLI_EXIT_USAGE;
  }
  int rc = clt_hf_export(argv[optind], weights, dir, &o);
  if (rc < 0) return cli_fail(rc, "hf export");
  printf("cltrain: exported %s with %s to %s as %s (config.json, model.safetensors in %s", argv[optind], weights,
         dir, o.written_class, dtypes[o.dtype]);
  if (o.tokenizer_files) printf(", %d tokenizer file(s) from %s", o.tokenizer_files, o.tokenizer_from);
  printf(")\n");
  return CLI_EXIT_OK;
}

int cmd_hf(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "cltrain: hf: which conversion? import or export\n\n");
    hf_help(stderr);
    return CLI_EXIT_USAGE;
  }
  if (strcmp(argv[1], "import") == 0) return hf_import(argc - 1, argv + 1);
  if (strcmp(argv[1], "export") == 0) return hf_export(argc - 1, argv + 1);
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    hf_help(stdout);
    return CLI_EXIT_OK;
  }
  fprintf(stderr, "cltrain: hf: unknown subcommand '%s' (import or export)\n\n", argv[1]);
  hf_help(stderr);
  return CLI_EXIT_USAGE;
}
