/*
 * cmd_tokenize.c: `cltrain tokenize TEXT... -o FILE.bin`: text files to an
 * llm.c token shard (clt_tokens_write) for training a language model, with
 * a byte-level tokenizer (a vocabulary of 256; each byte is its own token),
 * and optionally the last fraction of the tokens in a validation shard.
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
          "writes them as an llm.c token shard (uint16 tokens, magic 20240520) to train a\n"
          "language model on. The tokenizer is byte-level: a vocabulary of %d, each\n"
          "byte's value is its token.\n"
          "\n"
          "  -o, --output FILE       the shard to write (gzip-compressed when FILE ends in .gz)\n"
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

/* Byte-level tokens of text[0..n) into a shard at path. */
static int write_shard(const char *path, const unsigned char *text, int64_t n, int quiet, const char *what) {
  uint32_t *tokens = malloc((size_t)n * sizeof *tokens);
  if (!tokens) {
    fprintf(stderr, "cltrain: tokenize: out of memory for %lld tokens\n", (long long)n);
    return CLI_EXIT_ERROR;
  }
  for (int64_t i = 0; i < n; i++) tokens[i] = text[i];
  int rc = clt_tokens_write(path, tokens, n, 0);
  free(tokens);
  if (rc < 0) return cli_fail(rc, "tokenize");
  if (!quiet) printf("wrote %lld %stokens (bytes; vocabulary %d) to %s\n", (long long)n, what, BYTE_VOCAB, path);
  return CLI_EXIT_OK;
}

/* Before reading: the shards can be written (a regular file or nothing
 * there, its directory writable), and none of them is one of the texts or
 * the other shard. */
static int check_files(int argc, char **argv, const char *output, const char *val_output) {
  cli_file f[2 + 64];
  int n = 0, rc;
  f[n++] = (cli_file){"--output", output, 1};
  f[n++] = (cli_file){"--val-output", val_output, 1};
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
  enum { O_VAL_FRACTION = 256, O_VAL_OUTPUT };
  static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                       {"val-fraction", required_argument, 0, O_VAL_FRACTION},
                                       {"val-output", required_argument, 0, O_VAL_OUTPUT},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {0}};
  const char *output = NULL, *val_output = NULL;
  double fraction = 0;
  int quiet = 0, c;
  char *end;
  while ((c = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
    switch (c) {
    case 'o': output = optarg; break;
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
    default: help(stderr); return CLI_EXIT_USAGE;
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
  int ec = check_files(argc, argv, output, val_output);
  if (ec != CLI_EXIT_OK) return ec;

  unsigned char *text = NULL;
  size_t len = 0, cap = 0;
  ec = CLI_EXIT_ERROR;
  for (int i = optind; i < argc; i++)
    if (read_text(argv[i], &text, &len, &cap) < 0) goto done;
  if (len == 0) {
    fprintf(stderr, "cltrain: tokenize: no text: the input%s hold%s 0 bytes\n", argc - optind > 1 ? "s" : "",
            argc - optind > 1 ? "" : "s");
    goto done;
  }
  /* llm.c's header counts tokens in an int32. */
  if (len > INT32_MAX) {
    fprintf(stderr, "cltrain: tokenize: %zu bytes of text; a shard holds at most 2^31 - 1 tokens, so split the "
                    "text over several shards\n", len);
    goto done;
  }
  const int64_t n = (int64_t)len, nval = (int64_t)floor((double)n * fraction), ntrain = n - nval;
  if (fraction > 0 && nval < 1) {
    fprintf(stderr, "cltrain: tokenize: %lld bytes of text are too few to put a fraction %g of them into "
                    "%s\n", (long long)n, fraction, val_output);
    goto done;
  }
  if ((ec = write_shard(output, text, ntrain, quiet, val_output ? "training " : "")) != CLI_EXIT_OK) goto done;
  if (val_output) ec = write_shard(val_output, text + ntrain, nval, quiet, "validation ");
done:
  free(text);
  return ec;
}
