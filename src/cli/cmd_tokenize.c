/*
 * cmd_tokenize.c: `cltrain tokenize TEXT... -o FILE.bin`: text files to an
 * llm.c token shard (clt_tokens_write) for training a language model, with
 * a byte-level tokenizer (a vocabulary of 256; each byte is its own token)
 * or a Hugging Face tokenizer.json (--tokenizer; each file one document,
 * with BOS / EOS as the tokenizer says or --bos / --eos ask), and
 * optionally the last fraction of the tokens in a validation shard.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define BYTE_VOCAB 256

static void help(FILE *to) {
  fprintf(to,
          "usage: cltrain tokenize TEXT... -o FILE.bin [OPTIONS]\n"
          "\n"
          "Joins the text files TEXT ('-' reads standard input) in the order given and\n"
          "writes them as an llm.c token shard to train a language model on: uint16 tokens\n"
          "(magic 20240520) where the vocabulary fits, else uint32 (magic 20240801).\n"
          "Without --tokenizer the tokenizer is byte-level: a vocabulary of %d, each\n"
          "byte's value is its token.\n"
          "\n"
          "  -o, --output FILE       the shard to write (gzip-compressed when FILE ends in .gz)\n"
          "  -t, --tokenizer PATH    a Hugging Face tokenizer.json, or the directory holding it\n"
          "                          (and its tokenizer_config.json); each TEXT is a document\n"
          "      --bos, --no-bos     start each document with the BOS token, or not (default:\n"
          "                          as the tokenizer says: add_bos_token, else its\n"
          "                          post-processor)\n"
          "      --eos, --no-eos     end each document with the EOS token, or not (default:\n"
          "                          as the tokenizer says)\n"
          "      --val-fraction F    put the last fraction F of the tokens, 0 <= F < 1, into a\n"
          "                          validation shard (default 0: no split)\n"
          "      --val-output FILE   the validation shard (needed with --val-fraction)\n"
          "  -q, --quiet             no summary of what was written\n"
          "  -h, --help              this text\n",
          BYTE_VOCAB);
}

/* Append the whole of path ('-': stdin) to *buf (of *len bytes, room *cap). */
static int read_text(const char *path, unsigned char **buf, size_t *len, size_t *cap) {
  const int is_stdin = strcmp(path, "-") == 0;
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cltrain: tokenize: %s: cannot open: %s\n", path, strerror(errno));
    return -1;
  }
  for (;;) {
    if (*len == *cap) {
      size_t want = *cap ? *cap * 2 : 1 << 20;
      unsigned char *bigger = realloc(*buf, want);
      if (!bigger) {
        fprintf(stderr, "cltrain: tokenize: %s: out of memory after %zu bytes of text\n", path, *len);
        if (!is_stdin) fclose(f);
        return -1;
      }
      *buf = bigger;
      *cap = want;
    }
    size_t k = fread(*buf + *len, 1, *cap - *len, f);
    *len += k;
    if (k == 0) break;
  }
  int bad = ferror(f);
  int e = errno;
  if (!is_stdin) fclose(f);
  if (bad) {
    fprintf(stderr, "cltrain: tokenize: %s: read error: %s\n", is_stdin ? "standard input" : path, strerror(e));
    return -1;
  }
  return 0;
}

/* tokens[0..n) into a shard at path, uint32 when the vocabulary needs it. */
static int write_shard(const char *path, const uint32_t *tokens, int64_t n, int64_t vocab, const char *tokenizer,
                       int quiet, const char *what) {
  int rc = clt_tokens_write(path, tokens, n, vocab > 65536);
  if (rc < 0) return cli_fail(rc, "tokenize");
  if (!quiet)
    printf("wrote %lld %stokens (%s; vocabulary %lld) to %s\n", (long long)n, what, tokenizer ? tokenizer : "bytes",
           (long long)vocab, path);
  return CLI_EXIT_OK;
}

/* What each document gets around it. */
typedef struct ends {
  int bos, eos;         /* -1: as the tokenizer says */
  uint32_t bos_id, eos_id;
} ends;

/* The tokenizer's BOS / EOS for the documents, as asked or as it says. */
static int resolve_ends(clt_tokenizer *tok, ends *e) {
  int add, rc;
  for (int which = 0; which < 2; which++) {
    int *on = which ? &e->eos : &e->bos;
    uint32_t *id = which ? &e->eos_id : &e->bos_id;
    rc = which ? clt_tokenizer_eos(tok, id, &add) : clt_tokenizer_bos(tok, id, &add);
    if (rc == CLT_ENOTFOUND && *on != 1) {
      *on = 0; /* none known and none asked for */
      continue;
    }
    if (rc < 0) {
      cli_fail(rc, which ? "tokenize: --eos" : "tokenize: --bos");
      return -1;
    }
    if (*on < 0) *on = add;
  }
  return 0;
}

/* Every document text[start[d] .. start[d + 1]) encoded, with BOS / EOS, into
 * *out (malloc'd), *n tokens. */
static int encode_docs(clt_tokenizer *tok, const ends *e, const unsigned char *text, const size_t *start, int ndocs,
                       uint32_t **out, int64_t *n) {
  size_t cap = 0;
  *out = NULL, *n = 0;
  for (int d = 0; d < ndocs; d++) {
    uint32_t *ids;
    int64_t k;
    int rc = clt_tokenizer_encode(tok, (const char *)text + start[d], start[d + 1] - start[d], 0, &ids, &k);
    if (rc < 0) return cli_fail(rc, "tokenize");
    const size_t need = (size_t)*n + (size_t)k + 2;
    if (need > cap) {
      cap = need > 2 * cap ? need : 2 * cap;
      uint32_t *bigger = realloc(*out, cap * sizeof *bigger);
      if (!bigger) {
        free(ids);
        fprintf(stderr, "cltrain: tokenize: out of memory for %zu tokens\n", cap);
        return CLI_EXIT_ERROR;
      }
      *out = bigger;
    }
    if (e->bos) (*out)[(*n)++] = e->bos_id;
    memcpy(*out + *n, ids, (size_t)k * sizeof *ids);
    *n += k;
    if (e->eos) (*out)[(*n)++] = e->eos_id;
    free(ids);
  }
  return CLI_EXIT_OK;
}

/* Before reading: the shards can be written (a regular file or nothing
 * there, its directory writable), and none of them is one of the texts or
 * the other shard. */
static int check_files(int argc, char **argv, const char *output, const char *val_output, const char *tokenizer) {
  cli_file f[3 + 64];
  int n = 0, rc;
  f[n++] = (cli_file){"--output", output, 1};
  f[n++] = (cli_file){"--val-output", val_output, 1};
  f[n++] = (cli_file){"--tokenizer", tokenizer, 0};
  for (int i = 0; i < 2; i++)
    if (f[i].path && (rc = clt_check_output(f[i].path, CLT_OUTPUT_FILE)) < 0) return cli_fail(rc, f[i].opt);
  for (int i = optind; i < argc; i += 64) { /* the texts, 64 at a time */
    int m = n;
    for (int j = i; j < argc && j < i + 64; j++)
      if (strcmp(argv[j], "-") != 0) f[m++] = (cli_file){"TEXT", argv[j], 0};
    if ((rc = cli_check_distinct("tokenize", f, m)) != CLI_EXIT_OK) return rc;
  }
  return CLI_EXIT_OK;
}

int cmd_tokenize(int argc, char **argv) {
  enum { O_VAL_FRACTION = 256, O_VAL_OUTPUT, O_BOS, O_NO_BOS, O_EOS, O_NO_EOS };
  static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                       {"tokenizer", required_argument, 0, 't'},
                                       {"bos", no_argument, 0, O_BOS},
                                       {"no-bos", no_argument, 0, O_NO_BOS},
                                       {"eos", no_argument, 0, O_EOS},
                                       {"no-eos", no_argument, 0, O_NO_EOS},
                                       {"val-fraction", required_argument, 0, O_VAL_FRACTION},
                                       {"val-output", required_argument, 0, O_VAL_OUTPUT},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {0}};
  const char *output = NULL, *val_output = NULL, *tokenizer = NULL;
  double fraction = 0;
  int quiet = 0, c;
  ends e = {-1, -1, 0, 0};
  char *end;
  while ((c = cli_getopt(argc, argv, "o:t:qh", opts, "tokenize")) != -1) {
    switch (c) {
    case 'o': output = optarg; break;
    case 't': tokenizer = optarg; break;
    case O_BOS: e.bos = 1; break;
    case O_NO_BOS: e.bos = 0; break;
    case O_EOS: e.eos = 1; break;
    case O_NO_EOS: e.eos = 0; break;
    case O_VAL_FRACTION:
      fraction = strtod(optarg, &end);
      if (end == optarg || *end || !(fraction >= 0 && fraction < 1)) {
        fprintf(stderr, "cltrain: --val-fraction must be a number from 0 to below 1, not '%s'\n", optarg);
        return CLI_EXIT_USAGE;
      }
      break;
    case O_VAL_OUTPUT: val_output = optarg; break;
    case 'q': quiet = 1; break;
    case 'h': help(stdout); return CLI_EXIT_OK;
    default: return CLI_EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "cltrain: tokenize: no TEXT file given ('-' reads standard input)\n");
    return CLI_EXIT_USAGE;
  }
  if (!output || !*output) {
    fprintf(stderr, "cltrain: tokenize: no output shard given (-o FILE.bin)\n");
    return CLI_EXIT_USAGE;
  }
  if ((fraction > 0) != (val_output != NULL)) {
    fprintf(stderr, "cltrain: tokenize: %s\n", val_output ? "--val-output needs --val-fraction F > 0"
                                                          : "--val-fraction needs --val-output FILE");
    return CLI_EXIT_USAGE;
  }
  if (!tokenizer && (e.bos >= 0 || e.eos >= 0)) {
    fprintf(stderr, "cltrain: tokenize: --bos, --no-bos, --eos and --no-eos need --tokenizer (byte-level text has "
                    "no BOS or EOS token)\n");
    return CLI_EXIT_USAGE;
  }
  int ec = check_files(argc, argv, output, val_output, tokenizer);
  if (ec != CLI_EXIT_OK) return ec;

  unsigned char *text = NULL;
  size_t len = 0, cap = 0, *start = NULL;
  uint32_t *tokens = NULL;
  clt_tokenizer *tok = NULL;
  int rc;
  ec = CLI_EXIT_ERROR;
  const int ndocs = argc - optind;
  if (!(start = malloc(((size_t)ndocs + 1) * sizeof *start))) goto done;
  start[0] = 0;
  for (int i = optind; i < argc; i++) {
    if (read_text(argv[i], &text, &len, &cap) < 0) goto done;
    start[i - optind + 1] = len;
  }
  if (len == 0) {
    fprintf(stderr, "cltrain: tokenize: no text: the input%s hold%s 0 bytes\n", argc - optind > 1 ? "s" : "",
            argc - optind > 1 ? "" : "s");
    goto done;
  }
  int64_t n, vocab = BYTE_VOCAB;
  if (tokenizer) {
    if ((rc = clt_tokenizer_load(tokenizer, &tok)) < 0) {
      ec = cli_fail(rc, "tokenize: --tokenizer");
      goto done;
    }
    if (resolve_ends(tok, &e) < 0) goto done;
    if ((ec = encode_docs(tok, &e, text, start, ndocs, &tokens, &n)) != CLI_EXIT_OK) goto done;
    ec = CLI_EXIT_ERROR;
    vocab = clt_tokenizer_vocab_size(tok);
  } else {
    if (!(tokens = malloc(len * sizeof *tokens))) {
      fprintf(stderr, "cltrain: tokenize: out of memory for %zu tokens\n", len);
      goto done;
    }
    for (size_t i = 0; i < len; i++) tokens[i] = text[i];
    n = (int64_t)len;
  }
  /* llm.c's header counts tokens in an int32. */
  if (n > INT32_MAX) {
    fprintf(stderr, "cltrain: tokenize: %lld tokens; a shard holds at most 2^31 - 1 tokens, so split the text over "
                    "several shards\n", (long long)n);
    goto done;
  }
  if (n == 0) {
    fprintf(stderr, "cltrain: tokenize: the text makes no tokens\n");
    goto done;
  }
  const int64_t nval = (int64_t)floor((double)n * fraction), ntrain = n - nval;
  if (fraction > 0 && nval < 1) {
    fprintf(stderr, "cltrain: tokenize: %lld tokens are too few to put a fraction %g of them into %s\n",
            (long long)n, fraction, val_output);
    goto done;
  }
  const char *name = tok ? clt_tokenizer_path(tok) : NULL;
  if ((ec = write_shard(output, tokens, ntrain, vocab, name, quiet, val_output ? "training " : "")) != CLI_EXIT_OK)
    goto done;
  if (val_output) ec = write_shard(val_output, tokens + ntrain, nval, vocab, name, quiet, "validation ");
done:
  free(text);
  free(start);
  free(tokens);
  clt_tokenizer_destroy(tok);
  return ec;
}
