/*
 * ngram.c: the baseline a byte-level GPT has to beat: an interpolated
 * order-3 byte n-gram model (each byte predicted from the two before it),
 *
 *   P(c | a b) = l3 f(c | a b) + l2 f(c | b) + l1 f(c) + l0 / 256,
 *
 * f the relative frequencies counted on the training split. The four
 * weights are fitted by EM on held-out data (the last tenth of the
 * training split, counted on the other nine tenths; Jelinek-Mercer), then
 * the counts are taken on the whole training split and the model scores
 * the validation split. Prints bits per byte and the loss in nats per
 * byte, which is what a GPT's cross-entropy over the vocabulary of 256
 * bytes reports.
 *
 *   bench/ngram TRAIN.bin VAL.bin     (token files of `cltrain tokenize`)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain.h>

typedef struct counts {
  uint32_t *c3, *c2, *c1; /* (a, b, c), (b, c), (c) */
  uint32_t *n3, *n2;      /* context totals: (a, b), (b) */
  uint64_t n1;
} counts;

static int counts_make(counts *k) {
  memset(k, 0, sizeof *k);
  k->c3 = calloc((size_t)1 << 24, sizeof *k->c3);
  k->c2 = calloc(1 << 16, sizeof *k->c2);
  k->c1 = calloc(256, sizeof *k->c1);
  k->n3 = calloc(1 << 16, sizeof *k->n3);
  k->n2 = calloc(256, sizeof *k->n2);
  return k->c3 && k->c2 && k->c1 && k->n3 && k->n2 ? 0 : -1;
}

static void counts_free(counts *k) {
  free(k->c3), free(k->c2), free(k->c1), free(k->n3), free(k->n2);
}

/* Count every byte of s[from, to) with the two before it (from >= 2). */
static void count(counts *k, const uint8_t *s, int64_t from, int64_t to) {
  for (int64_t i = from; i < to; i++) {
    unsigned a = s[i - 2], b = s[i - 1], c = s[i];
    k->c3[(a << 16) | (b << 8) | c]++, k->n3[(a << 8) | b]++;
    k->c2[(b << 8) | c]++, k->n2[b]++;
    k->c1[c]++, k->n1++;
  }
}

/* The four components' probabilities of s[i]: p[3] trigram ... p[0] uniform. */
static void components(const counts *k, const uint8_t *s, int64_t i, double p[4]) {
  unsigned a = s[i - 2], b = s[i - 1], c = s[i];
  uint32_t n3 = k->n3[(a << 8) | b], n2 = k->n2[b];
  p[3] = n3 ? (double)k->c3[(a << 16) | (b << 8) | c] / n3 : 0;
  p[2] = n2 ? (double)k->c2[(b << 8) | c] / n2 : 0;
  p[1] = k->n1 ? (double)k->c1[c] / (double)k->n1 : 0;
  p[0] = 1.0 / 256;
}

/* Mean negative log-likelihood (nats per byte) of s[from, to). */
static double nll(const counts *k, const double lam[4], const uint8_t *s, int64_t from, int64_t to) {
  double sum = 0;
  for (int64_t i = from; i < to; i++) {
    double p[4];
    components(k, s, i, p);
    sum -= log(lam[0] * p[0] + lam[1] * p[1] + lam[2] * p[2] + lam[3] * p[3]);
  }
  return sum / (double)(to - from);
}

/* EM for the mixture weights on held-out bytes s[from, to). */
static void fit_weights(const counts *k, const uint8_t *s, int64_t from, int64_t to, double lam[4]) {
  for (int j = 0; j < 4; j++) lam[j] = 0.25;
  for (int it = 0; it < 50; it++) {
    double acc[4] = {0, 0, 0, 0};
    for (int64_t i = from; i < to; i++) {
      double p[4], q[4], z = 0;
      components(k, s, i, p);
      for (int j = 0; j < 4; j++) z += q[j] = lam[j] * p[j];
      for (int j = 0; j < 4; j++) acc[j] += q[j] / z;
    }
    for (int j = 0; j < 4; j++) lam[j] = acc[j] / (double)(to - from);
  }
}

/* All bytes of a token file (every token must be a byte). */
static int read_bytes(const char *path, uint8_t **out, int64_t *n) {
  clt_dataset *ds;
  const char *paths[1] = {path};
  int rc = clt_dataset_open_tokens(paths, 1, 1, 256, &ds);
  if (rc < 0) return rc;
  int64_t count = clt_dataset_count(ds); /* windows of 2: tokens - 1 */
  int64_t *idx = malloc((size_t)count * sizeof *idx);
  float *x = malloc((size_t)count * sizeof *x);
  int32_t *y = malloc((size_t)count * sizeof *y);
  uint8_t *b = malloc((size_t)count + 1);
  if (!idx || !x || !y || !b) rc = CLT_ENOMEM;
  for (int64_t i = 0; rc == 0 && i < count; i++) idx[i] = i;
  if (rc == 0) rc = clt_dataset_get_batch(ds, idx, count, x, y);
  for (int64_t i = 0; rc == 0 && i < count; i++) b[i] = (uint8_t)x[i];
  if (rc == 0) b[count] = (uint8_t)y[count - 1];
  free(idx), free(x), free(y);
  clt_dataset_destroy(ds);
  if (rc < 0) free(b), b = NULL;
  *out = b;
  *n = count + 1;
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s TRAIN.bin VAL.bin\n", argv[0]);
    return 2;
  }
  uint8_t *tr, *va;
  int64_t ntr, nva;
  if (read_bytes(argv[1], &tr, &ntr) < 0 || read_bytes(argv[2], &va, &nva) < 0) {
    fprintf(stderr, "ngram: %s\n", clt_last_error());
    return 1;
  }
  if (ntr < 100 || nva < 3) {
    fprintf(stderr, "ngram: too little data (%lld training and %lld validation bytes)\n", (long long)ntr,
            (long long)nva);
    return 1;
  }
  counts k;
  double lam[4];
  if (counts_make(&k) < 0) return 1;
  int64_t cut = ntr - ntr / 10;
  count(&k, tr, 2, cut);
  fit_weights(&k, tr, cut, ntr, lam);
  counts_free(&k);
  if (counts_make(&k) < 0) return 1;
  count(&k, tr, 2, ntr);
  double loss = nll(&k, lam, va, 2, nva);
  printf("{\"model\": \"interpolated order-3 byte n-gram\", \"train_bytes\": %lld, \"val_bytes\": %lld, "
         "\"weights\": [%.4f, %.4f, %.4f, %.4f], \"val_loss\": %.5f, \"val_bits_per_byte\": %.5f}\n",
         (long long)ntr, (long long)nva, lam[0], lam[1], lam[2], lam[3], loss, loss / log(2.0));
  counts_free(&k);
  free(tr), free(va);
  return 0;
}
