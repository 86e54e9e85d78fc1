/*
 * insitu_heat.c: in-situ training inside a running simulation. A 2-D heat
 * equation, explicit (u += alpha * laplacian(u)) on an NX x NY grid with
 * blobs of heat put in every few cycles, is split into strips of rows over
 * the MPI ranks, each exchanging one halo row with its neighbours every
 * step. Every K solver steps each rank cuts patches out of its strip and
 * trains an MLP surrogate, through clt_trainer_step_targets on the data it
 * has just made (the global batch is every rank's patches): a (P+2K) x
 * (P+2K) patch at step t to the change of its inner P x P patch by step
 * t+K. Before training on a cycle the surrogate forecasts it from the
 * previous one (clt_trainer_forward), and the program prints the
 * forecast's error against the solver's state: it falls as the surrogate
 * trains, below that of persistence (no change in K steps). Then it
 * prints the solver's time per step without training and with it.
 *
 *   cc insitu_heat.c $(pkg-config --cflags --libs cltrain-mpi) -lm -o insitu_heat
 *   mpirun -np 2 ./insitu_heat [--cycles N] [--nx N] [--ny N]
 *
 * (with cltrain's flags instead of cltrain-mpi's it runs on one process).
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

enum { P = 6, K = 2, W = P + 2 * K, STRIDE = 3 };
#define ALPHA 0.2f
/* The surrogate learns the change over K steps, scaled to order 1. */
#define DSCALE 20.0f

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
 * every rank, in global coordinates), between training cycles. */
static void add_blob(strip *s, unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  float cx = (float)(*seed >> 8 & 0xffff) / 65536.0f * s->nx, amp = 0.5f + (float)(*seed & 0xff) / 512.0f;
  *seed = *seed * 1103515245u + 12345u;
  float cy = (float)(*seed >> 8 & 0xffff) / 65536.0f * s->ny, w = 2.0f + (float)(*seed & 0x3) ;
  for (int r = 0; r < s->rows; r++)
    for (int x = 0; x < s->nx; x++) {
      float dx = x - cx, dy = s->row0 + r - cy;
      *at(s, s->u, r, x) += amp * expf(-(dx * dx + dy * dy) / (2 * w * w));
    }
}

/* Patches whose window lies inside the strip (its own rows): inputs
 * (W x W of `from`) and, when `to` is given, targets (the inner P x P of
 * `to` less that of `from`, times DSCALE). Returns the count. */
static int patches(const strip *s, float *from, float *to, float *x, float *y) {
  int n = 0;
  for (int r = 0; r + W <= s->rows; r += STRIDE)
    for (int c = 0; c + W <= s->nx; c += STRIDE, n++) {
      for (int i = 0; i < W; i++) memcpy(x + ((size_t)n * W + i) * W, at(s, from, r + i, c), W * sizeof *x);
      if (to)
        for (int i = 0; i < P; i++)
          for (int j = 0; j < P; j++)
            y[((size_t)n * P + i) * P + j] = (*at(s, to, r + K + i, c + K + j) - *at(s, from, r + K + i, c + K + j)) * DSCALE;
    }
  return n;
}

static int fail(const char *what) {
  fprintf(stderr, "insitu_heat: %s: %s\n", what, clt_last_error());
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
  int cycles = 200, nx = 48, ny = 48;
  clt_comm *comm;
#if USE_MPI
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0) return fail("communicator");
#else
  if (clt_comm_create_local(&comm) < 0) return fail("communicator");
#endif
  for (int i = 1; i + 1 < argc; i += 2) {
    int *v = !strcmp(argv[i], "--cycles") ? &cycles : !strcmp(argv[i], "--nx") ? &nx : !strcmp(argv[i], "--ny") ? &ny : NULL;
    if (!v || (*v = atoi(argv[i + 1])) < 1) {
      fprintf(stderr, "insitu_heat: unknown option or bad value '%s %s' (--cycles N, --nx N, --ny N)\n", argv[i],
              argv[i + 1]);
      return 2;
    }
  }
  strip s = {.nx = nx, .ny = ny, .rank = clt_comm_rank(comm), .size = clt_comm_size(comm)};
  s.row0 = (int)((long)ny * s.rank / s.size);
  s.rows = (int)((long)ny * (s.rank + 1) / s.size) - s.row0;
  if (s.rows < W || nx < W) {
    fprintf(stderr, "insitu_heat: a strip of %d x %d rows is smaller than a %d x %d patch: fewer ranks or a larger grid\n",
            s.rows, nx, W, W);
    return 2;
  }
  s.u = calloc((size_t)(s.rows + 2) * nx, sizeof *s.u);
  s.v = calloc((size_t)(s.rows + 2) * nx, sizeof *s.v);
  float *snap = calloc((size_t)(s.rows + 2) * nx, sizeof *snap);
  int maxn = ((s.rows - W) / STRIDE + 1) * ((nx - W) / STRIDE + 1);
  float *x = malloc((size_t)maxn * W * W * sizeof *x), *y = malloc((size_t)maxn * P * P * sizeof *y);
  float *pred = malloc((size_t)maxn * P * P * sizeof *pred), *px = malloc((size_t)maxn * W * W * sizeof *px);

  /* The surrogate: W*W values in, P*P out, mean squared error. */
  char spec[256];
  snprintf(spec, sizeof spec, "input %d\nlinear 256 act=tanh\nlinear %d\nloss mse\n", W * W, P * P);
  clt_devices *all, *mine;
  clt_model *model;
  clt_trainer *tr;
  if (clt_model_parse(spec, "surrogate", &model) < 0) return fail("model");
  if (clt_devices_discover(&all) < 0) return fail("devices");
  char one[16];
  snprintf(one, sizeof one, "%d", clt_comm_default_device(comm, all));
  if (clt_devices_select(all, one, &mine) < 0) return fail("devices");
  clt_train_options o;
  clt_train_options_defaults(&o);
  clt_optimizer_defaults(CLT_OPT_ADAM, &o.optimizer);
  o.schedule.lr = 3e-3f;
  o.batch = maxn; /* the most any replica runs at once */
  if (clt_trainer_create(model, mine, comm, &o, &tr) < 0) return fail("trainer");

  /* Warm up the field, then time the solver alone. */
  int step = 0;
  unsigned seed = 42;
  for (int i = 0; i < 8; i++) add_blob(&s, &seed);
  for (; step < 100; step++) solve_step(&s);
  double t0 = now();
  for (int i = 0; i < 50; i++, step++) solve_step(&s);
  double alone = (now() - t0) / 50;

  double first = NAN, last = NAN, persist = NAN, t_train = 0, t_solve = 0;
  int have_pred = 0, npred = 0;
  for (int c = 0; c < cycles; c++) {
    if (c % 4 == 0) { /* new heat, seen by the forecast made from the field after it */
      add_blob(&s, &seed);
      have_pred = 0;
    }
    memcpy(snap, s.u, (size_t)(s.rows + 2) * nx * sizeof *snap);
    double t1 = now();
    for (int i = 0; i < K; i++, step++) solve_step(&s);
    exchange(&s);
    t_solve += now() - t1;
    double t2 = now();
    int n = patches(&s, snap, s.u, x, y);
    if (have_pred) { /* the surrogate's forecast of this cycle, against the solver */
      double se = 0, pe = 0; /* the forecast's, and that of "nothing changes" */
      for (int i = 0; i < npred * P * P; i++) {
        se += (double)(pred[i] - y[i]) * (pred[i] - y[i]) / (DSCALE * DSCALE);
        pe += (double)y[i] * y[i] / (DSCALE * DSCALE);
      }
      double count = sum_all((double)npred * P * P), rmse = sqrt(sum_all(se) / count);
      persist = sqrt(sum_all(pe) / count);
      if (isnan(first)) first = rmse;
      last = rmse;
      if (s.rank == 0 && (c % 20 == 1 || c == cycles - 1))
        printf("cycle %d (solver step %d): surrogate forecast rmse %.5f (persistence %.5f)\n", c, step, rmse, persist);
    }
    clt_step_result r;
    if (clt_trainer_step_targets(tr, x, y, n, (int64_t)n * P * P, &r) < 0) return fail("training step");
    npred = patches(&s, s.u, NULL, px, NULL);
    if (clt_trainer_forward(tr, px, NULL, npred, pred, (int64_t)npred * P * P, NULL) < 0) return fail("forecast");
    have_pred = 1;
    t_train += now() - t2;
  }
  if (s.rank == 0) {
    printf("surrogate forecast rmse: %.5f at the first cycle, %.5f at the last (persistence: %.5f)\n", first, last,
           persist);
    printf("solver: %.3f ms a step alone, %.3f ms a step with training every %d steps (training %.3f ms a cycle)\n",
           alone * 1e3, (t_solve + t_train) / (cycles * K) * 1e3, K, t_train / cycles * 1e3);
  }
  clt_trainer_destroy(tr);
  clt_model_destroy(model);
  clt_devices_destroy(mine);
  clt_devices_destroy(all);
  clt_comm_destroy(comm);
  free(s.u), free(s.v), free(snap), free(x), free(y), free(pred), free(px);
#if USE_MPI
  MPI_Finalize();
#endif
  return 0;
}
