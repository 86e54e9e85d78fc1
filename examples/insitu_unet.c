/*
 * insitu_unet.c: a U-Net surrogate trained inside a running simulation. The
 * 2-D heat equation of insitu_heat.c (explicit, u += alpha * laplacian(u),
 * zero at the domain's edge, blobs of heat put in every few cycles) runs on
 * an NX x NY grid split into strips of rows over the MPI ranks, each
 * exchanging one halo row with its neighbours every step. Every K solver
 * steps each rank cuts windows out of its strip and takes one optimizer
 * step of a small 2-D U-Net through clt_trainer_step_targets (the global
 * batch is every rank's windows): a W x W window of the field at step t,
 * a (1, W, W) sample, to the field K steps later on its inner S x S
 * (W = S + 2K: what happens there in K steps depends on nothing outside
 * the window), learnt as the change, times DSCALE. The U-Net's first
 * convolution is unpadded (W to S), the rest keep S x S: batch norm with
 * the global batch's statistics, SiLU, max-pooling down, a transposed
 * convolution and an up-sampling up, concatenated skips.
 *
 * After its training budget the simulation goes on with fresh heat that the
 * surrogate has not seen, and the surrogate forecasts each next state
 * (clt_trainer_forward, in evaluation mode: batch norm's running
 * statistics): the program prints the RMSE of its forecast against the
 * solver's state, that of persistence (the current field as the forecast)
 * and their ratio. Then the solver's time per step alone and with training
 * every K steps.
 *
 *   cc insitu_unet.c $(pkg-config --cflags --libs cltrain-mpi) -lm -o insitu_unet
 *   mpirun -np 2 ./insitu_unet [--cycles N] [--eval N] [--nx N] [--ny N] [--model FILE]
 *
 * (with cltrain's flags instead of cltrain-mpi's it runs on one process;
 * CLT_DEVICES=pocl, gpu, ... names the devices the ranks take theirs from).
 * --model reads another surrogate from a spec file: input 1 W W, one S x S
 * output, loss mse.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cltrain.h>
#include <cltrain/version.h>
/* MPI where the library has it (CLT_HAVE_MPI) and the build asked for it:
 * cltrain-mpi.pc's flags define CLT_USE_MPI; cltrain.pc's need no MPI. */
#if CLT_HAVE_MPI && defined(CLT_USE_MPI)
#define USE_MPI 1
#include <cltrain/mpi.h>
#else
#define USE_MPI 0
#endif

/* W x W windows every STRIDE cells; the forecast is K steps ahead on
 * their inner S x S. */
enum { S = 16, K = 2, W = S + 2 * K, STRIDE = 4 };
#define ALPHA 0.2f
/* The change over K steps times 1 / (K alpha): the stencil the surrogate
 * has to learn then has weights of order 1. */
#define DSCALE (1.0f / (K * ALPHA))

/* The U-Net: two levels, batch norm and SiLU, concatenated skips. */
static const char unet_spec[] =
    "input 1 20 20\n"
    "conv2d 8 kernel=5\n" /* (8, 16, 16): unpadded, the window's inner S x S */
    "save linear\n" /* before batch norm, which takes away the scale */
    "batchnorm\n"
    "silu\n"
    "save level1\n"
    "maxpool2d 2\n" /* (8, 8, 8) */
    "conv2d 16 kernel=3 pad=1\n"
    "batchnorm\n"
    "silu\n"
    "save level2\n"
    "maxpool2d 2\n" /* (16, 4, 4) */
    "conv2d 32 kernel=3 pad=1\n"
    "batchnorm\n"
    "silu\n"
    "convtranspose2d 16 kernel=2 stride=2\n" /* (16, 8, 8) */
    "concat level2\n" /* (32, 8, 8) */
    "conv2d 16 kernel=3 pad=1\n"
    "batchnorm\n"
    "silu\n"
    "upsample scale=2 mode=linear\n" /* (16, 16, 16) */
    "concat level1\n" /* (24, 16, 16) */
    "conv2d 8 kernel=3 pad=1\n"
    "batchnorm\n"
    "silu\n"
    "concat linear\n" /* (16, 16, 16): the change is linear in the field */
    "conv2d 1 kernel=1\n"
    "loss mse\n";

typedef struct strip {
  int nx, rows, row0, ny; /* this rank's rows [row0, row0 + rows) of ny, each nx wide */
  float *u, *v;           /* (rows + 2) x nx: one halo row above and below */
  int rank, size;
} strip;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *at(const strip *s, float *f, int r, int x) { return f + (size_t)(r + 1) * s->nx + x; }

/* The neighbours' edge rows into the halo rows (zero at the domain's edge). */
static void exchange(strip *s) {
  float *top = at(s, s->u, -1, 0), *bottom = at(s, s->u, s->rows, 0);
  memset(top, 0, s->nx * sizeof *top);
  memset(bottom, 0, s->nx * sizeof *bottom);
#if USE_MPI
  int up = s->rank > 0 ? s->rank - 1 : MPI_PROC_NULL, down = s->rank < s->size - 1 ? s->rank + 1 : MPI_PROC_NULL;
  MPI_Sendrecv(at(s, s->u, 0, 0), s->nx, MPI_FLOAT, up, 0, bottom, s->nx, MPI_FLOAT, down, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Sendrecv(at(s, s->u, s->rows - 1, 0), s->nx, MPI_FLOAT, down, 1, top, s->nx, MPI_FLOAT, up, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
#endif
}

/* One explicit step. */
static void solve_step(strip *s) {
  exchange(s);
  for (int r = 0; r < s->rows; r++)
    for (int x = 0; x < s->nx; x++) {
      float c = *at(s, s->u, r, x), l = x > 0 ? *at(s, s->u, r, x - 1) : 0, rt = x < s->nx - 1 ? *at(s, s->u, r, x + 1) : 0;
      *at(s, s->v, r, x) = c + ALPHA * (l + rt + *at(s, s->u, r - 1, x) + *at(s, s->u, r + 1, x) - 4 * c);
    }
  float *t = s->u;
  s->u = s->v;
  s->v = t;
}

/* Heat put in: a Gaussian blob at a place drawn from `seed` (the same on
 * every rank, in global coordinates). */
static void add_blob(strip *s, unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  float cx = (float)(*seed >> 8 & 0xffff) / 65536.0f * s->nx, amp = 0.5f + (float)(*seed & 0xff) / 512.0f;
  *seed = *seed * 1103515245u + 12345u;
  float cy = (float)(*seed >> 8 & 0xffff) / 65536.0f * s->ny, w = 2.0f + (float)(*seed & 0x3);
  for (int r = 0; r < s->rows; r++)
    for (int x = 0; x < s->nx; x++) {
      float dx = x - cx, dy = s->row0 + r - cy;
      *at(s, s->u, r, x) += amp * expf(-(dx * dx + dy * dy) / (2 * w * w));
    }
}

/* Windows inside the strip (its own rows): inputs x (n, 1, W, W) of `from`
 * less the window's mean (the change does not depend on the field's level:
 * the surrogate need not learn that) and targets y (n, 1, S, S), the inner
 * S x S of `to` less that of `from`, times DSCALE. Returns n. */
static int windows(const strip *s, float *from, float *to, float *x, float *y) {
  int n = 0;
  for (int r = 0; r + W <= s->rows; r += STRIDE)
    for (int c = 0; c + W <= s->nx; c += STRIDE, n++) {
      float *xn = x + (size_t)n * W * W, mean = 0;
      for (int i = 0; i < W; i++) memcpy(xn + i * W, at(s, from, r + i, c), W * sizeof *x);
      for (int i = 0; i < W * W; i++) mean += xn[i] / (W * W);
      for (int i = 0; i < W * W; i++) xn[i] -= mean;
      for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++)
          y[((size_t)n * S + i) * S + j] = (*at(s, to, r + K + i, c + K + j) - *at(s, from, r + K + i, c + K + j)) * DSCALE;
    }
  return n;
}

static int fail(const char *what) {
  fprintf(stderr, "insitu_unet: %s: %s\n", what, clt_last_error());
#if USE_MPI
  MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  return 1;
}

static double sum_all(double v) {
#if USE_MPI
  double all;
  MPI_Allreduce(&v, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return all;
#else
  return v;
#endif
}

int main(int argc, char **argv) {
  int cycles = 300, eval = 40, nx = 48, ny = 48;
  const char *model_path = NULL;
  clt_comm *comm;
#if USE_MPI
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0) return fail("communicator");
#else
  if (clt_comm_create_local(&comm) < 0) return fail("communicator");
#endif
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--model")) {
      model_path = argv[i + 1];
      continue;
    }
    int *v = !strcmp(argv[i], "--cycles") ? &cycles
             : !strcmp(argv[i], "--eval") ? &eval
             : !strcmp(argv[i], "--nx")   ? &nx
             : !strcmp(argv[i], "--ny")   ? &ny
                                          : NULL;
    if (!v || (*v = atoi(argv[i + 1])) < 1) {
      fprintf(stderr,
              "insitu_unet: unknown option or bad value '%s %s' (--cycles N, --eval N, --nx N, --ny N, --model FILE)\n",
              argv[i], argv[i + 1]);
      return 2;
    }
  }
  strip s = {.nx = nx, .ny = ny, .rank = clt_comm_rank(comm), .size = clt_comm_size(comm)};
  s.row0 = (int)((long)ny * s.rank / s.size);
  s.rows = (int)((long)ny * (s.rank + 1) / s.size) - s.row0;
  if (s.rows < W || nx < W) {
    fprintf(stderr, "insitu_unet: a strip of %d x %d rows is smaller than a %d x %d window: fewer ranks or a larger grid\n",
            s.rows, nx, W, W);
    return 2;
  }
  s.u = calloc((size_t)(s.rows + 2) * nx, sizeof *s.u);
  s.v = calloc((size_t)(s.rows + 2) * nx, sizeof *s.v);
  float *snap = calloc((size_t)(s.rows + 2) * nx, sizeof *snap);
  int maxn = ((s.rows - W) / STRIDE + 1) * ((nx - W) / STRIDE + 1);
  size_t room = (size_t)maxn * S * S;
  float *x = malloc((size_t)maxn * W * W * sizeof *x), *y = malloc(room * sizeof *y), *pred = malloc(room * sizeof *pred);

  clt_devices *all, *mine;
  clt_model *model;
  clt_trainer *tr;
  if ((model_path ? clt_model_load(model_path, &model) : clt_model_parse(unet_spec, "unet", &model)) < 0)
    return fail(model_path ? model_path : "model");
  if (clt_model_input_size(model) != W * W || clt_model_labels_per_sample(model) != S * S) {
    fprintf(stderr, "insitu_unet: the surrogate must take a %d x %d window (input 1 %d %d) and give %d x %d values\n",
            W, W, W, W, S, S);
    return 2;
  }
  /* One device per rank, by its place on its node, among those CLT_DEVICES
   * names (all when unset): CLT_DEVICES=pocl, gpu, nvidia, ... */
  clt_devices *usable;
  if (clt_devices_discover(&all) < 0 || clt_devices_select(all, NULL, &usable) < 0) return fail("devices");
  char one[16];
  snprintf(one, sizeof one, "%d", clt_comm_default_device(comm, usable));
  if (clt_devices_select(usable, one, &mine) < 0) return fail("devices");
  clt_devices_destroy(usable);
  clt_train_options o;
  clt_train_options_defaults(&o);
  clt_optimizer_defaults(CLT_OPT_ADAM, &o.optimizer);
  o.schedule.lr = 1e-2f;
  o.batch = maxn; /* the most any replica runs at once */
  if (clt_trainer_create(model, mine, comm, &o, &tr) < 0) return fail("trainer");
  if (s.rank == 0)
    printf("insitu_unet: %d x %d grid on %d rank(s), %d windows of %d x %d a rank, forecast %d steps ahead, %lld "
           "parameters\n",
           nx, ny, s.size, maxn, W, W, K, (long long)clt_model_param_count(model));

  /* Warm up the field, then time the solver alone. */
  int step = 0;
  unsigned seed = 42;
  for (int i = 0; i < 8; i++) add_blob(&s, &seed);
  for (; step < 100; step++) solve_step(&s);
  double t0 = now();
  for (int i = 0; i < 50; i++, step++) solve_step(&s);
  double alone = (now() - t0) / 50;

  /* ---- training: one optimizer step every K solver steps ---- */
  double t_train = 0, t_solve = 0;
  for (int c = 0; c < cycles; c++) {
    if (c % 4 == 0) add_blob(&s, &seed);
    memcpy(snap, s.u, (size_t)(s.rows + 2) * nx * sizeof *snap);
    double t1 = now();
    for (int i = 0; i < K; i++, step++) solve_step(&s);
    t_solve += now() - t1;
    double t2 = now();
    int n = windows(&s, snap, s.u, x, y);
    clt_step_result r;
    if (clt_trainer_step_targets(tr, x, y, n, (int64_t)n * S * S, &r) < 0) return fail("training step");
    t_train += now() - t2;
    if (s.rank == 0 && (c % 50 == 0 || c == cycles - 1)) {
      double pe = 0;
      for (size_t i = 0; i < (size_t)n * S * S; i++) pe += (double)y[i] * y[i];
      printf("cycle %d (solver step %d): training rmse %.5f (persistence %.5f)\n", c, step, r.rmse / DSCALE,
             sqrt(pe / ((double)n * S * S)) / DSCALE);
    }
  }

  /* ---- fresh states: forecast each next one, no training ---- */
  double se = 0, pe = 0, values = 0;
  seed = 4242; /* heat the surrogate has not seen */
  for (int c = 0; c < eval; c++) {
    if (c % 2 == 0) add_blob(&s, &seed);
    memcpy(snap, s.u, (size_t)(s.rows + 2) * nx * sizeof *snap);
    for (int i = 0; i < K; i++, step++) solve_step(&s);
    int n = windows(&s, snap, s.u, x, y);
    if (clt_trainer_forward(tr, x, NULL, n, pred, (int64_t)n * S * S, NULL) < 0) return fail("forecast");
    for (size_t i = 0; i < (size_t)n * S * S; i++) {
      se += (double)(pred[i] - y[i]) * (pred[i] - y[i]) / (DSCALE * DSCALE); /* the surrogate's */
      pe += (double)y[i] * y[i] / (DSCALE * DSCALE);                         /* "nothing changes" */
    }
    values += (double)n * S * S;
  }
  double count = sum_all(values), rmse = sqrt(sum_all(se) / count), persist = sqrt(sum_all(pe) / count);
  if (s.rank == 0) {
    printf("surrogate forecast rmse on fresh states: %.6f, persistence %.6f, ratio %.2f (%d cycles of %d steps)\n",
           rmse, persist, persist / rmse, eval, K);
    printf("solver: %.3f ms a step alone, %.3f ms a step with training every %d steps (training %.3f ms a cycle)\n",
           alone * 1e3, (t_solve + t_train) / ((double)cycles * K) * 1e3, K, t_train / cycles * 1e3);
  }
  clt_trainer_destroy(tr);
  clt_model_destroy(model);
  clt_devices_destroy(mine);
  clt_devices_destroy(all);
  clt_comm_destroy(comm);
  free(s.u), free(s.v), free(snap), free(x), free(y), free(pred);
#if USE_MPI
  MPI_Finalize();
#endif
  return 0;
}
