/*
 * weights_close.c: whether two weights files hold the same model within a
 * tolerance, for the scripts that compare runs (tests/train/llama_ranks.sh):
 *
 *   weights_close A.safetensors B.safetensors TOL
 *
 * Every tensor of A is in B with the same shape, and no value of it is
 * more than TOL from B's; B has no tensor A lacks. Prints the largest
 * difference and where it is. Exit 0 when within, 1 when not (or a tensor
 * is missing or misshapen), 2 for bad usage or a file that cannot be read.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "io/safetensors.h"

static float *read_all(clt__st_file *f, const clt__st_tensor *t, int64_t *count) {
  *count = 1;
  for (int d = 0; d < t->ndim; d++) *count *= t->shape[d];
  float *x = malloc((size_t)(*count ? *count : 1) * sizeof *x);
  if (x && clt__st_read(f, t, x, *count) == CLT_OK) return x;
  free(x);
  return NULL;
}

int main(int argc, char **argv) {
  char *end;
  double tol = argc == 4 ? strtod(argv[3], &end) : -1;
  if (argc != 4 || *end || !(tol >= 0)) {
    fprintf(stderr, "usage: weights_close A.safetensors B.safetensors TOL\n");
    return 2;
  }
  clt__st_file *a = NULL, *b = NULL;
  if (clt__st_open(argv[1], &a) < 0 || clt__st_open(argv[2], &b) < 0) {
    fprintf(stderr, "weights_close: %s\n", clt_last_error());
    clt__st_close(a);
    return 2;
  }
  int ec = 0, na = 0, nb = 0;
  double worst = 0;
  char where[256] = "";
  void *it = NULL;
  for (const char *name; (name = clt__st_next_name(b, &it)) != NULL;) nb++;
  it = NULL;
  for (const char *name; ec == 0 && (name = clt__st_next_name(a, &it)) != NULL;) {
    clt__st_tensor ta, tb;
    int64_t ca, cb;
    na++;
    if (clt__st_find(a, name, &ta) < 0 || clt__st_find(b, name, &tb) < 0) {
      printf("FAIL: %s: %s\n", argv[2], clt_last_error());
      ec = 1;
      break;
    }
    float *x = read_all(a, &ta, &ca), *y = read_all(b, &tb, &cb);
    if (!x || !y || ca != cb || ta.ndim != tb.ndim) {
      printf("FAIL: tensor '%s' differs in shape or cannot be read (%s)\n", name, clt_last_error());
      ec = x && y ? 1 : 2;
    }
    for (int64_t i = 0; ec == 0 && i < ca; i++) {
      double d = fabs((double)x[i] - (double)y[i]);
      if (!(d <= worst)) {
        worst = d;
        snprintf(where, sizeof where, "%s[%lld]: %.9g and %.9g", name, (long long)i, (double)x[i], (double)y[i]);
      }
    }
    free(x), free(y);
  }
  if (ec == 0 && na != nb) {
    printf("FAIL: %s holds %d tensors, %s %d\n", argv[1], na, argv[2], nb);
    ec = 1;
  }
  if (ec == 0) {
    printf("%s: %d tensors, largest difference %.3g (%s)\n", worst <= tol ? "within" : "FAIL: beyond", na, worst,
           where[0] ? where : "none");
    ec = worst <= tol ? 0 : 1;
  }
  clt__st_close(a);
  clt__st_close(b);
  return ec;
}
