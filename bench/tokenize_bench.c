/*
 * tokenize_bench.c: cltrain's side of bench/tokenize.sh. Encodes a text
 * file with a tokenizer.json REPS times, one thread, as whole documents
 * (the file) or as its lines, and prints one line of JSON a repetition:
 * the seconds of the encoding alone (the tokenizer loaded and the text read
 * before), the bytes and the ids. The ids' FNV-1a checksum lets the script
 * check that both sides gave the same tokens.
 *
 *   tokenize_bench TOKENIZER TEXT docs|lines REPS
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cltrain.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc != 5 || (strcmp(argv[3], "docs") && strcmp(argv[3], "lines"))) {
    fprintf(stderr, "usage: tokenize_bench TOKENIZER TEXT docs|lines REPS\n");
    return 2;
  }
  clt_tokenizer *t;
  if (clt_tokenizer_load(argv[1], &t) < 0) {
    fprintf(stderr, "tokenize_bench: %s\n", clt_last_error());
    return 1;
  }
  FILE *f = fopen(argv[2], "rb");
  if (!f) {
    perror(argv[2]);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  const size_t n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc(n + 1);
  if (!text || fread(text, 1, n, f) != n) {
    fprintf(stderr, "tokenize_bench: cannot read %s\n", argv[2]);
    return 1;
  }
  fclose(f);
  const int lines = strcmp(argv[3], "lines") == 0, reps = atoi(argv[4]);
  for (int r = 0; r < reps; r++) {
    int64_t total = 0;
    uint64_t h = 0xcbf29ce484222325ull;
    const double t0 = now();
    for (size_t at = 0; at < n;) {
      size_t end = n;
      if (lines) {
        const char *nl = memchr(text + at, '\n', n - at);
        end = nl ? (size_t)(nl - text) + 1 : n;
      }
      uint32_t *ids;
      int64_t k;
      if (clt_tokenizer_encode(t, text + at, end - at, 0, &ids, &k) < 0) {
        fprintf(stderr, "tokenize_bench: %s\n", clt_last_error());
        return 1;
      }
      for (int64_t i = 0; i < k; i++)
        for (int b = 0; b < 4; b++) h = (h ^ ((ids[i] >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
      total += k;
      free(ids);
      at = end;
    }
    printf("{\"seconds\": %.6f, \"bytes\": %zu, \"ids\": %lld, \"fnv1a64\": \"%016llx\"}\n", now() - t0, n,
           (long long)total, (unsigned long long)h);
    fflush(stdout);
  }
  clt_tokenizer_destroy(t);
  free(text);
  return 0;
}
