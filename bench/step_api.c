/*
 * step_api.c: the step API on the application's own host memory against
 * clt_trainer_fit on the same batches (issue 16's target: at most 5%
 * slower a step). The same model, options, seed and samples: fit draws its
 * batches through the sampler and its prefetch thread; the step loop takes
 * the same sampler's batches, gathered beforehand, and before each step
 * copies the step's batch into one host buffer, as an application holds
 * the batch it has just produced (insitu_heat's patches); only the
 * clt_trainer_step calls are timed, as fit's prefetch thread prepares its
 * batches outside fit's step. Repetitions alternate; medians of the
 * per-step times.
 *
 *   bench/step_api [MODEL] [STEPS] [REPS] [DATA_DIR]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cltrain.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int die(const char *what) {
  fprintf(stderr, "step_api: %s: %s\n", what, clt_last_error());
  exit(1);
}

int main(int argc, char **argv) {
  const char *spec = argc > 1 ? argv[1] : "examples/fashion_mlp.model";
  int steps = argc > 2 ? atoi(argv[2]) : 300, reps = argc > 3 ? atoi(argv[3]) : 3;
  const char *dir = argc > 4 ? argv[4] : "/usr/share/datasets/fashion-mnist";
  const int64_t B = 64;
  clt_model *m;
  clt_devices *all, *dev;
  clt_dataset *train;
  float mean, std;
  if (clt_model_load(spec, &m) < 0) die(spec);
  if (clt_devices_discover(&all) < 0 || clt_devices_select(all, "0", &dev) < 0) die("devices");
  if (clt_dataset_open_idx(dir, "train", &train) < 0) die(dir);
  clt_dataset_stats(train, &mean, &std);
  clt_dataset_normalize(train, mean, std);
  int64_t in = clt_model_input_size(m);

  clt_train_options o;
  clt_train_options_defaults(&o);
  o.batch = B;
  o.epochs = 1;
  o.max_steps = steps;
  o.log_every = 0;
  o.check_every = 0;

  /* The application's data: fit's batches, in its order. */
  clt_sampler *s;
  if (clt_sampler_create(clt_dataset_count(train), B, o.seed, 0, &s) < 0) die("sampler");
  float *x = malloc((size_t)steps * B * in * sizeof *x);
  int32_t *y = malloc((size_t)steps * B * sizeof *y);
  int64_t idx[64], *ns = malloc((size_t)steps * sizeof *ns);
  for (int i = 0; i < steps; i++) {
    if (clt_sampler_slice(s, 0, i, 0, idx, &ns[i]) < 0) die("sampler");
    if (clt_dataset_get_batch(train, idx, ns[i], x + (size_t)i * B * in, y + (size_t)i * B) < 0) die("batch");
  }
  clt_sampler_destroy(s);

  float *bx = malloc((size_t)B * in * sizeof *bx); /* the application's current batch */
  int32_t *by = malloc((size_t)B * sizeof *by);
  double *tf = malloc(reps * sizeof *tf), *ts = malloc(reps * sizeof *ts);
  for (int r = 0; r < reps; r++) {
    clt_trainer *t;
    if (clt_trainer_create(m, dev, NULL, &o, &t) < 0) die("trainer");
    double t0 = now();
    if (clt_trainer_fit(t, train, NULL) < 0) die("fit");
    tf[r] = (now() - t0) / steps;
    clt_trainer_destroy(t);

    if (clt_trainer_create(m, dev, NULL, &o, &t) < 0) die("trainer");
    ts[r] = 0;
    for (int i = 0; i < steps; i++) {
      memcpy(bx, x + (size_t)i * B * in, (size_t)ns[i] * in * sizeof *bx);
      memcpy(by, y + (size_t)i * B, (size_t)ns[i] * sizeof *by);
      t0 = now();
      if (clt_trainer_step(t, bx, by, ns[i], NULL) < 0) die("step");
      ts[r] += now() - t0;
    }
    ts[r] /= steps;
    clt_trainer_destroy(t);
    printf("rep %d: fit %.3f ms a step, clt_trainer_step %.3f ms a step\n", r + 1, tf[r] * 1e3, ts[r] * 1e3);
  }
  qsort(tf, reps, sizeof *tf, cmp);
  qsort(ts, reps, sizeof *ts, cmp);
  printf("median: fit %.3f ms, step API %.3f ms a step: the step API takes %.3fx fit's time (%s, batch %lld, %d steps)\n",
         tf[reps / 2] * 1e3, ts[reps / 2] * 1e3, ts[reps / 2] / tf[reps / 2], spec, (long long)B, steps);
  free(x), free(y), free(bx), free(by), free(ns), free(tf), free(ts);
  clt_dataset_destroy(train);
  clt_devices_destroy(dev);
  clt_devices_destroy(all);
  clt_model_destroy(m);
  return 0;
}
