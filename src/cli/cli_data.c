/*
 * cli_data.c: users' own data for `cltrain train` and `eval` (--data FILE:
 * CSV, NumPy, HDF5, raw): the file opened as classification or regression
 * by the model's loss line, its validation part (--val FRACTION, or a file
 * of its own), and the per-feature normalisation: computed on the training
 * split once by all ranks together (each takes its part, the parts'
 * statistics are gathered and combined in rank order, so every rank has
 * the same bits), or read back from the weights being evaluated.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Chan et al.'s combination of the parts' (count, mean, M2), and the
 * minima and maxima; then shift and scale as kind says (a feature that is
 * the same everywhere keeps scale 1). */
static int combine(clt_comm *comm, const clt_dataset *ds, clt_normalize_kind kind, float *shift, float *scale) {
  const int R = clt_comm_size(comm), r = clt_comm_rank(comm);
  const int64_t N = clt_dataset_count(ds), F = clt_dataset_sample_size(ds);
  const size_t per = (size_t)(4 * F + 1);
  double *mine = calloc(per, sizeof *mine), *all = calloc(per * (size_t)R, sizeof *all);
  double *mean = calloc((size_t)F, sizeof *mean), *m2 = calloc((size_t)F, sizeof *m2);
  double *mn = calloc((size_t)F, sizeof *mn), *mx = calloc((size_t)F, sizeof *mx);
  int rc = mine && all && mean && m2 && mn && mx ? CLT_OK : CLT_ENOMEM;
  int64_t lo = N * r / R, hi = N * (r + 1) / R;
  if (rc == CLT_OK) rc = clt_dataset_feature_stats(ds, lo, hi, mine);
  if (rc == CLT_OK) {
    mine[4 * F] = (double)(hi - lo);
    rc = clt_allgather(comm, mine, per * sizeof *mine, all);
  }
  double n = 0;
  for (int64_t j = 0; j < F; j++) mn[j] = INFINITY, mx[j] = -INFINITY;
  for (int q = 0; rc == CLT_OK && q < R; q++) {
    const double *p = all + per * (size_t)q, nb = p[4 * F];
    if (nb == 0) continue;
    for (int64_t j = 0; j < F; j++) {
      double d = p[j] - mean[j], tot = n + nb;
      mean[j] += d * nb / tot;
      m2[j] += p[F + j] + d * d * n * nb / tot;
      if (p[2 * F + j] < mn[j]) mn[j] = p[2 * F + j];
      if (p[3 * F + j] > mx[j]) mx[j] = p[3 * F + j];
    }
    n += nb;
  }
  for (int64_t j = 0; rc == CLT_OK && j < F; j++) {
    double sh = kind == CLT_NORMALIZE_MINMAX ? mn[j] : mean[j];
    double sc = kind == CLT_NORMALIZE_MINMAX ? mx[j] - mn[j] : sqrt(m2[j] / n);
    shift[j] = (float)sh;
    scale[j] = sc > 0 && isfinite(sc) && (float)sc > 0 ? (float)sc : 1.0f;
  }
  free(mine), free(all), free(mean), free(m2), free(mn), free(mx);
  return rc;
}

/* --val: a fraction of --data, or a file. */
static int val_fraction(const char *val, double *f) {
  char *end;
  *f = val ? strtod(val, &end) : 0;
  return val && end != val && !*end && *f > 0 && *f < 1;
}

int cli_data_open(const cli_data_args *a, const clt_model *m, clt_comm *comm, clt_dataset **train,
                  clt_dataset **test, cli_norm *norm) {
  int rc;
  double frac;
  clt_data_options o = {a->labels, a->target, a->features, clt_model_loss(m) != CLT_LOSS_CROSSENTROPY, 0};
  *train = *test = NULL;
  memset(norm, 0, sizeof *norm);
  if (a->val && !val_fraction(a->val, &frac) && strspn(a->val, "0123456789.eE+-") == strlen(a->val)) {
    fprintf(stderr, "cltrain: --val %s: a validation fraction lies between 0 and 1 (0.1: the last tenth of --data)\n",
            a->val);
    return CLI_EXIT_USAGE;
  }
  if ((rc = clt_dataset_open(a->data, &o, train)) < 0) return cli_fail(rc, "--data");
  if (a->val && val_fraction(a->val, &frac)) {
    if ((rc = clt_dataset_split(*train, frac, test)) < 0) return cli_fail(rc, "--val");
  } else if (a->val && strcmp(a->val, "none") != 0) {
    clt_data_options v = o;
    v.labels = a->val_labels;
    if ((rc = clt_dataset_open(a->val, &v, test)) < 0) return cli_fail(rc, "--val");
  }
  if (a->eval) { /* evaluate the validation part, or else all of --data, as the weights say to normalise */
    if (!*test) *test = *train, *train = NULL;
    if ((rc = clt_weights_normalization(a->weights, &norm->kind, NULL, NULL, 0, &norm->n)) < 0)
      return cli_fail(rc, "--weights");
    if (norm->kind == CLT_NORMALIZE_NONE) return CLI_EXIT_OK;
    if (norm->n != clt_dataset_sample_size(*test)) {
      fprintf(stderr, "cltrain: --weights %s: its normalisation has %lld features, but %s has %lld a sample\n",
              a->weights, (long long)norm->n, clt_dataset_path(*test), (long long)clt_dataset_sample_size(*test));
      return CLI_EXIT_ERROR;
    }
  } else {
    if ((rc = clt_normalize_parse(a->normalize ? a->normalize : "standard", &norm->kind)) < 0)
      return cli_fail(rc, "--normalize");
    if (norm->kind == CLT_NORMALIZE_NONE) return CLI_EXIT_OK;
    norm->n = clt_dataset_sample_size(*train);
  }
  norm->shift = calloc((size_t)norm->n, sizeof(float));
  norm->scale = calloc((size_t)norm->n, sizeof(float));
  if (!norm->shift || !norm->scale) return cli_fail(CLT_ENOMEM, "--normalize");
  if (a->eval) {
    if ((rc = clt_weights_normalization(a->weights, &norm->kind, norm->shift, norm->scale, norm->n, &norm->n)) < 0)
      return cli_fail(rc, "--weights");
  } else if ((rc = combine(comm, *train, norm->kind, norm->shift, norm->scale)) < 0) {
    return cli_comm_fail(comm, rc, "--normalize");
  }
  if (*train && (rc = clt_dataset_normalize_features(*train, norm->kind, norm->shift, norm->scale)) < 0)
    return cli_fail(rc, "--normalize");
  if (*test && (rc = clt_dataset_normalize_features(*test, norm->kind, norm->shift, norm->scale)) < 0)
    return cli_fail(rc, "--normalize");
  return CLI_EXIT_OK;
}

void cli_norm_free(cli_norm *n) {
  free(n->shift), free(n->scale);
  memset(n, 0, sizeof *n);
}
