/*
 * ngram.c: the baseline a language model has to beat: an interpolated
 * order-3 n-gram model over token ids (each token predicted from the two
 * before it),
 *
 *   P(c | a b) = l3 f(c | a b) + l2 f(c | b) + l1 f(c) + l0 / V,
 *
 * f the relative frequencies counted on the training split, V the
 * vocabulary (256 for bytes, the default; a BPE tokenizer's size for its
 * shards). The four weights are fitted by EM on held-out data (the last
 * tenth of the training split, counted on the other nine tenths;
 * Jelinek-Mercer), then the counts are taken on the whole training split
 * and the model scores the validation split. Prints the loss in nats per
 * token, which is what a model's cross-entropy over the same V ids
 * reports, and bits per token (bits per byte when the tokens are bytes).
 *
 *   bench/ngram TRAIN.bin VAL.bin [VOCAB]   (token files of `cltrain tokenize`)
 *
 * The counts are kept in sorted tables of packed (a, b, c) keys, looked up
 * by binary search, so the memory is the training split's size whatever V.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain.h>

/* Distinct keys, ascending, with how often each occurred. */
typedef struct table {
  uint64_t *key;
  uint32_t *n;
  int64_t len;
} table;

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return (a > b) - (a < b);
}

/* Sort keys[0..n) and fold it into t (keys is taken over, freed here). */
static int table_make(table *t, uint64_t *keys, int64_t n) {
  qsort(keys, (size_t)n, sizeof *keys, cmp_u64);
  t->key = keys;
  t->n = malloc((size_t)(n ? n : 1) * sizeof *t->n);
  if (!t->n) return -1;
  int64_t len = 0;
  for (int64_t i = 0; i < n; i++) {
    if (len && keys[len - 1] == keys[i]) {
      t->n[len - 1]++;
    } else {
      keys[len] = keys[i];
      t->n[len++] = 1;
    }
  }
  t->len = len;
  return 0;
}

static uint32_t table_get(const table *t, uint64_t key) {
  int64_t lo = 0, hi = t->len;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (t->key[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo < t->len && t->key[lo] == key ? t->n[lo] : 0;
}

static void table_free(table *t) { free(t->key), free(t->n); }

typedef struct counts {
  uint64_t V;
  table c3, n3, c2; /* (a, b, c), context (a, b), (b, c) */
  uint32_t *n2, *c1; /* context (b), (c): V each */
  uint64_t n1;
} counts;

/* Count every token of s[from, to) with the two before it (from >= 2). */
static int counts_make(counts *k, uint64_t V, const uint32_t *s, int64_t from, int64_t to) {
  memset(k, 0, sizeof *k);
  k->V = V;
  int64_t n = to - from;
  uint64_t *k3 = malloc((size_t)n * sizeof *k3), *kn3 = malloc((size_t)n * sizeof *kn3);
  uint64_t *k2 = malloc((size_t)n * sizeof *k2);
  k->n2 = calloc(V, sizeof *k->n2);
  k->c1 = calloc(V, sizeof *k->c1);
  if (!k3 || !kn3 || !k2 || !k->n2 || !k->c1) {
    free(k3), free(kn3), free(k2);
    return -1;
  }
  for (int64_t i = from; i < to; i++) {
    uint64_t a = s[i - 2], b = s[i - 1], c = s[i];
    k3[i - from] = (a * V + b) * V + c;
    kn3[i - from] = a * V + b;
    k2[i - from] = b * V + c;
    k->n2[b]++, k->c1[c]++, k->n1++;
  }
  int rc = table_make(&k->c3, k3, n);
  rc |= table_make(&k->n3, kn3, n);
  rc |= table_make(&k->c2, k2, n);
  return rc;
}

static void counts_free(counts *k) {
  table_free(&k->c3), table_free(&k->n3), table_free(&k->c2);
  free(k->n2), free(k->c1);
}

/* The four components' probabilities of s[i]: p[3] trigram ... p[0] uniform. */
static void components(const counts *k, const uint32_t *s, int64_t i, double p[4]) {
  uint64_t a = s[i - 2], b = s[i - 1], c = s[i], V = k->V;
  uint32_t n3 = table_get(&k->n3, a * V + b), n2 = k->n2[b];
  p[3] = n3 ? (double)table_get(&k->c3, (a * V + b) * V + c) / n3 : 0;
  p[2] = n2 ? (double)table_get(&k->c2, b * V + c) / n2 : 0;
  p[1] = k->n1 ? (double)k->c1[c] / (double)k->n1 : 0;
  p[0] = 1.0 / (double)V;
}

/* Mean negative log-likelihood (nats per token) of s[from, to). */
static double nll(const counts *k, const double lam[4], const uint32_t *s, int64_t from, int64_t to) {
  double sum = 0;
  for (int64_t i = from; i < to; i++) {
    double p[4];
    components(k, s, i, p);
    sum -= log(lam[0] * p[0] + lam[1] * p[1] + lam[2] * p[2] + lam[3] * p[3]);
  }
  return sum / (double)(to - from);
}

/* EM for the mixture weights on held-out tokens s[from, to); the
 * components' probabilities are looked up once. */
static int fit_weights(const counts *k, const uint32_t *s, int64_t from, int64_t to, double lam[4]) {
  int64_t n = to - from;
  double *p = malloc((size_t)n * 4 * sizeof *p);
  if (!p) return -1;
  for (int64_t i = from; i < to; i++) components(k, s, i, p + 4 * (i - from));
  for (int j = 0; j < 4; j++) lam[j] = 0.25;
  for (int it = 0; it < 50; it++) {
    double acc[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) {
      double q[4], z = 0;
      for (int j = 0; j < 4; j++) z += q[j] = lam[j] * p[4 * i + j];
      for (int j = 0; j < 4; j++) acc[j] += q[j] / z;
    }
    for (int j = 0; j < 4; j++) lam[j] = acc[j] / (double)n;
  }
  free(p);
  return 0;
}

/* All tokens of a token file (each below vocab). */
static int read_tokens(const char *path, int vocab, uint32_t **out, int64_t *n) {
  clt_dataset *ds;
  const char *paths[1] = {path};
  int rc = clt_dataset_open_tokens(paths, 1, 1, vocab, &ds);
  if (rc < 0) return rc;
  int64_t count = clt_dataset_count(ds); /* windows of 2: tokens - 1 */
  int64_t *idx = malloc((size_t)count * sizeof *idx);
  float *x = malloc((size_t)count * sizeof *x);
  int32_t *y = malloc((size_t)count * sizeof *y);
  uint32_t *t = malloc(((size_t)count + 1) * sizeof *t);
  if (!idx || !x || !y || !t) rc = CLT_ENOMEM;
  for (int64_t i = 0; rc == 0 && i < count; i++) idx[i] = i;
  if (rc == 0) rc = clt_dataset_get_batch(ds, idx, count, x, y);
  for (int64_t i = 0; rc == 0 && i < count; i++) t[i] = (uint32_t)x[i];
  if (rc == 0) t[count] = (uint32_t)y[count - 1];
  free(idx), free(x), free(y);
  clt_dataset_destroy(ds);
  if (rc < 0) free(t), t = NULL;
  *out = t;
  *n = count + 1;
  return rc;
}

int main(int argc, char **argv) {
  int vocab = argc == 4 ? atoi(argv[3]) : 256;
  if ((argc != 3 && argc != 4) || vocab < 2 || vocab > (1 << 21)) {
    fprintf(stderr, "usage: %s TRAIN.bin VAL.bin [VOCAB]   (VOCAB: 2 to 2097152, default 256)\n", argv[0]);
    return 2;
  }
  uint32_t *tr, *va;
  int64_t ntr, nva;
  if (read_tokens(argv[1], vocab, &tr, &ntr) < 0 || read_tokens(argv[2], vocab, &va, &nva) < 0) {
    fprintf(stderr, "ngram: %s\n", clt_last_error());
    return 1;
  }
  if (ntr < 100 || nva < 3) {
    fprintf(stderr, "ngram: too little data (%lld training and %lld validation tokens)\n", (long long)ntr,
            (long long)nva);
    return 1;
  }
  counts k;
  double lam[4];
  int64_t cut = ntr - ntr / 10;
  if (counts_make(&k, (uint64_t)vocab, tr, 2, cut) < 0 || fit_weights(&k, tr, cut, ntr, lam) < 0) {
    fprintf(stderr, "ngram: out of memory\n");
    return 1;
  }
  counts_free(&k);
  if (counts_make(&k, (uint64_t)vocab, tr, 2, ntr) < 0) {
    fprintf(stderr, "ngram: out of memory\n");
    return 1;
  }
  double loss = nll(&k, lam, va, 2, nva);
  if (vocab == 256)
    printf("{\"model\": \"interpolated order-3 byte n-gram\", \"train_bytes\": %lld, \"val_bytes\": %lld, "
           "\"weights\": [%.4f, %.4f, %.4f, %.4f], \"val_loss\": %.5f, \"val_bits_per_byte\": %.5f}\n",
           (long long)ntr, (long long)nva, lam[0], lam[1], lam[2], lam[3], loss, loss / log(2.0));
  else
    printf("{\"model\": \"interpolated order-3 token n-gram\", \"vocab\": %d, \"train_tokens\": %lld, "
           "\"val_tokens\": %lld, \"weights\": [%.4f, %.4f, %.4f, %.4f], \"val_loss\": %.5f, "
           "\"val_bits_per_token\": %.5f}\n",
           vocab, (long long)ntr, (long long)nva, lam[0], lam[1], lam[2], lam[3], loss, loss / log(2.0));
  counts_free(&k);
  free(tr), free(va);
  return 0;
}
