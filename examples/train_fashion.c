/*
 * train_fashion.c: training through libcltrain's public API, the way an
 * application embeds it: its own MPI_Init (when built with MPI), its own
 * communicator, a model spec, the Fashion-MNIST files, and a callback that
 * prints each epoch. Built with cltrain-mpi's flags it uses MPI (where the
 * library was built with it, CLT_HAVE_MPI); with cltrain's it needs no MPI
 * and trains on this machine's devices in one process.
 *
 *   cc train_fashion.c $(pkg-config --cflags --libs cltrain-mpi) -o train_fashion
 *   mpirun -np 2 ./train_fashion fashion_mlp.model [DATA_DIR]
 *   cc train_fashion.c $(pkg-config --cflags --libs cltrain) -o train_fashion
 *   ./train_fashion fashion_mlp.model [DATA_DIR]
 */
#include <stdio.h>
#include <stdlib.h>

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

static void on_event(const clt_train_event *ev, void *user) {
  (void)user;
  if (ev->kind == CLT_EVENT_EPOCH)
    printf("epoch %lld: train loss %.4f, test accuracy %.4f\n", (long long)ev->epoch, ev->loss, ev->test_accuracy);
}

/* Print the library's account of what failed and give up. */
static int fail(const char *what) {
  fprintf(stderr, "train_fashion: %s: %s\n", what, clt_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *spec = argc > 1 ? argv[1] : "fashion_mlp.model";
  const char *dir = argc > 2 ? argv[2] : "/usr/share/datasets/fashion-mnist";
  clt_comm *comm;
  clt_devices *all, *mine;
  clt_model *model;
  clt_dataset *train, *test;
  clt_trainer *trainer;
  float mean, std;
  int rc = 1;

#if USE_MPI
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0) return fail("communicator");
#else
  if (clt_comm_create_local(&comm) < 0) return fail("communicator");
#endif
  /* One device per rank, chosen by the rank's place on its node. */
  if (clt_devices_discover(&all) < 0) return fail("devices");
  int d = clt_comm_default_device(comm, all);
  if (d < 0) return fail("devices");
  char one[16];
  snprintf(one, sizeof one, "%d", d);
  if (clt_devices_select(all, one, &mine) < 0) return fail("devices");

  if (clt_model_load(spec, &model) < 0) return fail(spec);
  if (clt_dataset_open_idx(dir, "train", &train) < 0 || clt_dataset_open_idx(dir, "test", &test) < 0)
    return fail(dir);
  clt_dataset_stats(train, &mean, &std);
  clt_dataset_normalize(train, mean, std);
  clt_dataset_normalize(test, mean, std);

  clt_train_options o;
  clt_train_options_defaults(&o);
  o.epochs = 2;
  o.batch = 128; /* the global batch, split over every rank's device */
  o.schedule.lr = 0.02f;
  o.callback = on_event;
  if (clt_trainer_create(model, mine, comm, &o, &trainer) < 0) return fail("trainer");
  if (clt_trainer_fit(trainer, train, test) < 0) return fail("training");
  rc = 0;

  clt_trainer_destroy(trainer);
  clt_dataset_destroy(train);
  clt_dataset_destroy(test);
  clt_model_destroy(model);
  clt_devices_destroy(mine);
  clt_devices_destroy(all);
  clt_comm_destroy(comm);
#if USE_MPI
  MPI_Finalize();
#endif
  return rc;
}
