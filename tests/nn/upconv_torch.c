/*
 * upconv_torch.c: cltrain's side of tests/nn/upconv_torch_check.py, which
 * compares upsample and the transposed convolutions with PyTorch's on the
 * same weights:
 *
 *   upconv_torch MODEL WEIGHTS X.f32 T.f32 N OUT.f32 GRAD.f32
 *
 * Loads the regression MODEL with WEIGHTS on one device (the first of
 * CLT_DEVICES, else device 0), runs the N samples of X (raw little-endian
 * float32) forward into OUT (as many floats as T holds: the targets, one
 * per output value) and writes to GRAD the gradient of the mean loss over
 * the targets T (clt_trainer_gradient_targets, the parameter arena's
 * layout: each layer's weight then bias, in order). Prints the mean loss.
 * Exit 77 without a device, 2 for bad usage.
 */
#include <stdio.h>
#include <stdlib.h>

#include "driverutil.h"

static float *read_f32(const char *path, int64_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  float *v = bytes > 0 && bytes % 4 == 0 ? malloc((size_t)bytes) : NULL;
  if (v && fread(v, 1, (size_t)bytes, f) != (size_t)bytes) free(v), v = NULL;
  fclose(f);
  *n = bytes / 4;
  return v;
}

static int write_f32(const char *path, const float *v, int64_t n) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(v, 4, (size_t)n, f) == (size_t)n;
  if (f && fclose(f) != 0) ok = 0;
  return ok;
}

int main(int argc, char **argv) {
  static const char prog[] = "upconv_torch";
  if (argc != 8) {
    fprintf(stderr, "usage: upconv_torch MODEL WEIGHTS X.f32 T.f32 N OUT.f32 GRAD.f32\n");
    return 2;
  }
  int64_t n = atoll(argv[5]), nx, nt;
  float *x = read_f32(argv[3], &nx), *tg = read_f32(argv[4], &nt);
  if (!x || !tg || n < 1) {
    fprintf(stderr, "%s: cannot read %s or %s, or N %s is not a count\n", prog, argv[3], argv[4], argv[5]);
    return 2;
  }
  clt_model *m = NULL;
  clt_trainer *t = NULL;
  clt_devices *all = NULL, *one = NULL;
  int rc, ec = 0;
  if ((rc = clt_model_load(argv[1], &m)) < 0) return du_die(prog, rc, argv[1]);
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = n;
  o.check_every = 0;
  int64_t np = clt_model_param_count(m);
  float *out = malloc((size_t)nt * 4), *grad = malloc((size_t)np * 4);
  double loss = 0;
  if (!out || !grad) ec = 1;
  else if ((ec = du_trainer(prog, m, &o, argv[2], &t, &all, &one)) != 0) {
  } else if ((rc = clt_trainer_forward_targets(t, x, tg, n, out, nt, &loss, NULL)) < 0) ec = du_die(prog, rc, "forward");
  else if ((rc = clt_trainer_gradient_targets(t, x, tg, n, grad, np, &loss)) < 0) ec = du_die(prog, rc, "gradient");
  else if (!write_f32(argv[6], out, nt) || !write_f32(argv[7], grad, np)) {
    fprintf(stderr, "%s: cannot write %s or %s\n", prog, argv[6], argv[7]);
    ec = 1;
  } else printf("%.9g\n", loss);
  clt_trainer_destroy(t);
  clt_devices_destroy(one);
  clt_devices_destroy(all);
  clt_model_destroy(m);
  free(x), free(tg), free(out), free(grad);
  return ec;
}
