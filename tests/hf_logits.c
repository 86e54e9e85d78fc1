/*
 * hf_logits.c: cltrain's logits and loss for given tokens, for
 * tests/hf_check.py to compare with transformers':
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

static int die(int rc, const char *what) {
  fprintf(stderr, "hf_logits: %s: %s\n", what, rc < 0 ? clt_last_error() : "");
  return rc == CLT_ENOICD || rc == CLT_ENODEV ? 77 : 1;
}

/* The whole file as int32 tokens (malloc'd), *n of them. */
static int32_t *read_i32(const char *path, int64_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  int32_t *x = bytes > 0 && bytes % 4 == 0 ? malloc((size_t)bytes) : NULL;
  if (x && fread(x, 1, (size_t)bytes, f) != (size_t)bytes) {
    free(x);
    x = NULL;
  }
  fclose(f);
  *n = bytes / 4;
  return x;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: hf_logits MODEL WEIGHTS X.i32 Y.i32 OUT.f32\n");
    return 2;
  }
  clt_model *m = NULL;
  clt_devices *all = NULL, *sel = NULL, *one = NULL;
  clt_trainer *t = NULL;
  int rc, ec = 1;
  int64_t nx, ny;
  int32_t *x32 = read_i32(argv[3], &nx), *y = read_i32(argv[4], &ny);
  float *x = NULL, *out = NULL;
  if (!x32 || !y || nx != ny) {
    fprintf(stderr, "hf_logits: %s and %s must hold the same number of int32 tokens\n", argv[3], argv[4]);
    return 2;
  }
  if ((rc = clt_model_load(argv[1], &m)) < 0) { ec = die(rc, argv[1]); goto out; }
  int64_t T = clt_model_input_size(m), V = clt_model_num_classes(m), n = nx / T;
  if (nx % T) {
    fprintf(stderr, "hf_logits: %lld tokens are not whole windows of the model's %lld\n", (long long)nx, (long long)T);
    goto out;
  }
  if ((rc = clt_devices_discover(&all)) < 0) { ec = die(rc, "devices"); goto out; }
  if (clt_devices_count(all) == 0) { ec = die(CLT_ENODEV, "no OpenCL device"); goto out; }
  const char *spec = getenv("CLT_DEVICES");
  if ((rc = clt_devices_select(all, spec && *spec ? spec : "0", &sel)) < 0) { ec = die(rc, "devices"); goto out; }
  char first[16];
  snprintf(first, sizeof first, "%d", clt_devices_info(sel, 0)->index);
  if ((rc = clt_devices_select(all, first, &one)) < 0) { ec = die(rc, "devices"); goto out; }
  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = n < 16 ? n : 16;
  if ((rc = clt_trainer_create(m, one, NULL, &o, &t)) < 0) { ec = die(rc, "trainer"); goto out; }
  if ((rc = clt_trainer_load_weights(t, argv[2])) < 0) { ec = die(rc, argv[2]); goto out; }
  x = malloc((size_t)nx * sizeof *x);
  out = malloc((size_t)(nx * V) * sizeof *out);
  if (!x || !out) { ec = die(CLT_ENOMEM, "memory"); goto out; }
  for (int64_t i = 0; i < nx; i++) x[i] = (float)x32[i];
  double loss;
  if ((rc = clt_trainer_forward(t, x, y, n, out, nx * V, &loss)) < 0) { ec = die(rc, "forward"); goto out; }
  FILE *f = fopen(argv[5], "wb");
  if (!f || fwrite(out, sizeof *out, (size_t)(nx * V), f) != (size_t)(nx * V) || fclose(f) != 0) {
    fprintf(stderr, "hf_logits: cannot write %s\n", argv[5]);
    goto out;
  }
  printf("loss %.9g %lld\n", loss, (long long)nx);
  ec = 0;
out:
  clt_trainer_destroy(t);
  clt_devices_destroy(one);
  clt_devices_destroy(sel);
  clt_devices_destroy(all);
  clt_model_destroy(m);
  free(x32), free(y), free(x), free(out);
  return ec;
}
