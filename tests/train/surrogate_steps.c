/*
 * surrogate_steps.c: cltrain's side of tests/train/surrogate_check.py (the
 * U-Nets and conv nets of issue 40 against PyTorch) and of bench/unet.sh:
 * a regression model trained through the public step API on batches taken
 * from a .npy dataset in file order, on 1 rank or under mpirun on several.
 *
 *   surrogate_steps [options] MODEL X.npy Y.npy
 *
 * X holds the samples (N, input shape...) and Y their targets (N, output
 * shape...), both float; global batch k is samples [k B, (k + 1) B) (B
 * --batch), of which rank r of R passes [k B + B r / R, k B + B (r + 1) / R)
 * to clt_trainer_step_targets, so that R ranks must give what one gives on
 * the whole batch. The parameters start from --seed's initialisation
 * (cltrain's own, which --init writes before the first step, for the
 * check to load into PyTorch); --final writes them after the last step.
 * SGD with --lr and --momentum (PyTorch's SGD: no dampening), constant
 * learning rate, no clipping, no weight decay. --steps runs that many
 * steps, wrapping round the batches of the file (default: one pass).
 *
 * Prints, on rank 0, one line of JSON: {"losses": [each step's mean loss,
 * before its update], "step_s": [each step's seconds], "samples_per_s":
 * global samples per second over the steps after the first (which builds
 * the kernels), "ranks": R}. One device per rank: the first of CLT_DEVICES
 * (default: device 0); its threads as POCL_MAX_PTHREAD_COUNT says. Exit
 * 77 without a device, 2 for bad usage, 1 for any other failure.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cltrain.h>
#if CLT_HAVE_MPI && defined(CLT_USE_MPI)
#define USE_MPI 1
#include <cltrain/mpi.h>
#include <mpi.h>
#else
#define USE_MPI 0
#endif

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "surrogate_steps: WHAT: the library's last error"; the exit code: 77 when
 * there is no OpenCL device, else 1. */
static int fail(int rank, int rc, const char *what) {
  fprintf(stderr, "surrogate_steps (rank %d): %s: %s\n", rank, what, rc < 0 ? clt_last_error() : "");
  return rc == CLT_ENOICD || rc == CLT_ENODEV ? 77 : 1;
}

static void usage(FILE *f) {
  fprintf(f, "usage: surrogate_steps [options] MODEL X.npy Y.npy\n"
             "  -b, --batch N       global samples per step, over all ranks (8)\n"
             "      --lr X          SGD's learning rate (0.01)\n"
             "      --momentum X    SGD's momentum, PyTorch's (0.9)\n"
             "      --seed N        the initialisation (42)\n"
             "      --steps N       steps, wrapping round the file's batches (default: one pass)\n"
             "      --init FILE     the weights before the first step\n"
             "      --final FILE    the weights after the last step\n"
             "      --devices SPEC  one replica on each device SPEC selects (default: the first of CLT_DEVICES)\n");
}

int main(int argc, char **argv) {
  int rank = 0, nranks = 1, ec = 1, rc;
  clt_train_options o;
  clt_train_options_defaults(&o);
  clt_optimizer_defaults(CLT_OPT_SGD, &o.optimizer);
  o.batch = 8;
  o.schedule.lr = 0.01f;
  o.optimizer.momentum = 0.9f;
  o.check_every = 0;
  o.log_every = 0;
  long long steps = 0;
  const char *init = NULL, *final = NULL, *devices = NULL;
  static const struct option opts[] = {{"batch", required_argument, NULL, 'b'},
                                       {"lr", required_argument, NULL, 'l'},
                                       {"momentum", required_argument, NULL, 'm'},
                                       {"seed", required_argument, NULL, 's'},
                                       {"steps", required_argument, NULL, 'n'},
                                       {"init", required_argument, NULL, 'i'},
                                       {"final", required_argument, NULL, 'f'},
                                       {"devices", required_argument, NULL, 'd'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "b:h", opts, NULL)) != -1;) {
    switch (c) {
    case 'b': o.batch = atoll(optarg); break;
    case 'l': o.schedule.lr = strtof(optarg, NULL); break;
    case 'm': o.optimizer.momentum = strtof(optarg, NULL); break;
    case 's': o.seed = strtoull(optarg, NULL, 10); break;
    case 'n': steps = atoll(optarg); break;
    case 'i': init = optarg; break;
    case 'f': final = optarg; break;
    case 'd': devices = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (argc - optind != 3 || o.batch < 1 || steps < 0) {
    usage(stderr);
    return 2;
  }
  char **arg = argv + optind;
  clt_comm *comm = NULL;
  clt_model *m = NULL;
  clt_dataset *ds = NULL;
  clt_devices *all = NULL, *one = NULL;
  clt_trainer *t = NULL;
  float *x = NULL, *y = NULL;
  double *losses = NULL, *secs = NULL;
#if USE_MPI
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if ((rc = clt_comm_create(MPI_COMM_WORLD, &comm)) < 0) {
    ec = fail(rank, rc, "communicator");
    goto out;
  }
#endif
  const char *devspec = getenv("CLT_DEVICES");
  clt_data_options d = {0};
  d.labels = arg[2];
  d.regression = 1;
  if ((rc = clt_model_load(arg[0], &m)) < 0) { ec = fail(rank, rc, arg[0]); goto out; }
  if ((rc = clt_dataset_open(arg[1], &d, &ds)) < 0) { ec = fail(rank, rc, arg[1]); goto out; }
  const int64_t F = clt_model_input_size(m), L = clt_model_labels_per_sample(m), N = clt_dataset_count(ds);
  const int64_t K = N / o.batch;
  if (clt_dataset_sample_size(ds) != F || clt_dataset_targets_per_sample(ds) != L || K < 1) {
    fprintf(stderr, "surrogate_steps: %s has %lld samples of %lld values and %lld targets; the model takes %lld "
            "and %lld, in batches of %lld\n", arg[1], (long long)N, (long long)clt_dataset_sample_size(ds),
            (long long)clt_dataset_targets_per_sample(ds), (long long)F, (long long)L, (long long)o.batch);
    ec = 2;
    goto out;
  }
  if (steps == 0) steps = K;
  if ((rc = clt_devices_discover(&all)) < 0) { ec = fail(rank, rc, "devices"); goto out; }
  if (clt_devices_count(all) == 0) { ec = fail(rank, CLT_ENODEV, "no OpenCL device"); goto out; }
  if (devices) {
    if ((rc = clt_devices_select(all, devices, &one)) < 0) { ec = fail(rank, rc, "devices"); goto out; }
  } else {
    clt_devices *sel = NULL;
    char first[16];
    if ((rc = clt_devices_select(all, devspec && *devspec ? devspec : "0", &sel)) < 0) {
      ec = fail(rank, rc, "devices");
      goto out;
    }
    snprintf(first, sizeof first, "%d", clt_devices_info(sel, 0)->index);
    clt_devices_destroy(sel);
    if ((rc = clt_devices_select(all, first, &one)) < 0) { ec = fail(rank, rc, "devices"); goto out; }
  }
  if ((rc = clt_trainer_create(m, one, comm, &o, &t)) < 0) { ec = fail(rank, rc, "trainer"); goto out; }
  if (init && (rc = clt_trainer_save_weights(t, init)) < 0) { ec = fail(rank, rc, init); goto out; }
  x = malloc((size_t)(o.batch * F) * sizeof *x);
  y = malloc((size_t)(o.batch * L) * sizeof *y);
  losses = calloc((size_t)steps, sizeof *losses);
  secs = calloc((size_t)steps, sizeof *secs);
  int64_t *idx = malloc((size_t)o.batch * sizeof *idx);
  if (!x || !y || !losses || !secs || !idx) {
    free(idx);
    ec = fail(rank, CLT_ENOMEM, "memory");
    goto out;
  }
  for (long long k = 0; k < steps; k++) {
    const int64_t base = (k % K) * o.batch, lo = o.batch * rank / nranks, hi = o.batch * (rank + 1) / nranks;
    for (int64_t i = lo; i < hi; i++) idx[i - lo] = base + i;
    if ((rc = clt_dataset_get_batch_targets(ds, idx, hi - lo, x, y)) < 0) { free(idx); ec = fail(rank, rc, arg[1]); goto out; }
    clt_step_result r;
    double t0 = now();
    if ((rc = clt_trainer_step_targets(t, x, y, hi - lo, (hi - lo) * L, &r)) < 0) {
      free(idx);
      ec = fail(rank, rc, "step");
      goto out;
    }
    secs[k] = now() - t0;
    losses[k] = r.loss;
  }
  free(idx);
  if (final && (rc = clt_trainer_save_weights(t, final)) < 0) { ec = fail(rank, rc, final); goto out; }
  if (rank == 0) {
    double timed = 0, rate = 0;
    for (long long k = 1; k < steps; k++) timed += secs[k];
    if (steps > 1 && timed > 0) rate = (double)(steps - 1) * (double)o.batch / timed;
    printf("{\"ranks\": %d, \"replicas\": %d, \"batch\": %lld, \"steps\": %lld, \"samples_per_s\": %.6g, "
           "\"losses\": [", nranks, clt_devices_count(one), (long long)o.batch, steps, rate);
    for (long long k = 0; k < steps; k++) printf("%s%.9g", k ? ", " : "", losses[k]);
    printf("], \"step_s\": [");
    for (long long k = 0; k < steps; k++) printf("%s%.6g", k ? ", " : "", secs[k]);
    printf("]}\n");
  }
  ec = 0;
out:
  clt_trainer_destroy(t);
  clt_devices_destroy(one);
  clt_devices_destroy(all);
  clt_dataset_destroy(ds);
  clt_model_destroy(m);
  free(x), free(y), free(losses), free(secs);
  clt_comm_destroy(comm);
#if USE_MPI
  /* one rank's failure is the job's: the worst exit code everywhere */
  int worst = ec;
  MPI_Allreduce(&ec, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  ec = worst;
#endif
  return ec;
}
