/*
 * hf_logits.c: cltrain's logits and loss for given tokens, for
 * tests/io/hf_check.py to compare with transformers':
 *
 *   hf_logits MODEL WEIGHTS X.i32 Y.i32 OUT.f32
 *
 * X and Y hold n x T little-endian int32 tokens (inputs and their next
 * tokens, T the model's context); OUT receives the n x T x V float32 logits
 * of clt_trainer_forward. Prints "loss SUM LABELS" (the summed
 * cross-entropy, %.9g, and how many labels it sums). One device: the first
 * of CLT_DEVICES (default: device 0). Exit 77 without a device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cltrain.h>

#include "driverutil.h"

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: hf_logits MODEL WEIGHTS X.i32 Y.i32 OUT.f32\n");
    return 2;
  }
  clt_model *m = NULL;
  clt_devices *all = NULL, *one = NULL;
  clt_trainer *t = NULL;
  int rc, ec = 1;
  int64_t nx, ny;
  int32_t *x32 = du_read_i32(argv[3], &nx), *y = du_read_i32(argv[4], &ny);
  float *x = NULL, *out = NULL;
  if (!x32 || !y || nx != ny) {
    fprintf(stderr, "hf_logits: %s and %s must hold the same number of int32 tokens\n", argv[3], argv[4]);
    return 2;
  }
  if ((rc = clt_model_load(argv[1], &m)) < 0) { ec = du_die("hf_logits", rc, argv[1]); goto out; }
  int64_t T = clt_model_input_size(m), V = clt_model_num_classes(m), n = nx / T;
  if (nx % T) {
    fprintf(stderr, "hf_logits: %lld tokens are not whole windows of the model's %lld\n", (long long)nx, (long long)T);
    goto out;
  }
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = n < 16 ? n : 16;
  if ((ec = du_trainer("hf_logits", m, &o, argv[2], &t, &all, &one)) != 0) goto out;
  x = malloc((size_t)nx * sizeof *x);
  out = malloc((size_t)(nx * V) * sizeof *out);
  if (!x || !out) { ec = du_die("hf_logits", CLT_ENOMEM, "memory"); goto out; }
  for (int64_t i = 0; i < nx; i++) x[i] = (float)x32[i];
  double loss;
  if ((rc = clt_trainer_forward(t, x, y, n, out, nx * V, &loss)) < 0) { ec = du_die("hf_logits", rc, "forward"); goto out; }
  FILE *f = fopen(argv[5], "wb");
  if (!f || fwrite(out, sizeof *out, (size_t)(nx * V), f) != (size_t)(nx * V) || fclose(f) != 0) {
    fprintf(stderr, "hf_logits: cannot write %s\n", argv[5]);
    ec = 1;
    goto out;
  }
  printf("loss %.9g %lld\n", loss, (long long)nx);
  ec = 0;
out:
  clt_trainer_destroy(t);
  clt_devices_destroy(one);
  clt_devices_destroy(all);
  clt_model_destroy(m);
  free(x32), free(y), free(x), free(out);
  return ec;
}
