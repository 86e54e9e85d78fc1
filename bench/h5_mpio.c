/*
 * h5_mpio.c: how a rank best reads its slice of shuffled batches from an
 * HDF5 dataset, when cltrain is built with parallel HDF5: each rank takes
 * 128 scattered rows of 1 KiB (its half of a batch of 256 on 2 ranks) by
 * one H5Dread of a hyperslab union through MPI-IO with collective
 * transfer, the same with independent transfer, the same through the sec2
 * (POSIX) driver, and by one pread(2) of each row at the dataset's offset
 * in the file (what cltrain does with a contiguous dataset: src/data/hdf5.c
 * maps it). Prints wall and CPU microseconds a batch, rank by rank.
 * Timings, not a test.
 *
 *   mpirun -np 2 bench/h5_mpio [MiB] [DIR]     (default 256 MiB, $TMPDIR)
 *
 * Writes DIR/h5_mpio.h5 (rank 0, serial) and removes it.
 */
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { F = 256, B = 256, STEPS = 100 };

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  int provided, rank, np;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  const double mib = argc > 1 ? atof(argv[1]) : 256;
  const char *dir = argc > 2 ? argv[2] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  const long N = (long)(mib * 1048576 / (4.0 * F));
  char path[4096];
  snprintf(path, sizeof path, "%s/h5_mpio.h5", dir);
  if (rank == 0) { /* (N, F) float32, contiguous */
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {(hsize_t)N, F};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t ds = H5Dcreate2(file, "/x", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    float *v = malloc((size_t)N * F * sizeof *v);
    for (long i = 0; i < N * F; i++) v[i] = (float)(i % 1000) * 0.01f;
    H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    free(v);
    H5Dclose(ds), H5Sclose(space), H5Fclose(file);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int mine = B / np;
  float *buf = malloc((size_t)mine * F * sizeof *buf);
  long *rows = malloc(sizeof *rows * STEPS * B);
  for (long i = 0; i < (long)STEPS * B; i++) /* distinct, scattered: a hyperslab union of them has every row once */
    rows[i] = (long)(((unsigned long long)i * 2654435761ull + 12345) % (unsigned long long)N);
  const char *names[] = {"mpio collective", "mpio independent", "sec2 hyperslab", "pread a row"};
  for (int mode = 0; mode < 4; mode++) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (mode < 2) {
      H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
      H5Pset_dxpl_mpio(dxpl, mode == 0 ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
    }
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, mode < 3 ? fapl : H5P_DEFAULT);
    hid_t ds = H5Dopen2(file, "/x", H5P_DEFAULT);
    const off_t at = (off_t)H5Dget_offset(ds);
    int fd = open(path, O_RDONLY);
    hsize_t mdims[2] = {(hsize_t)mine, F};
    hid_t mspace = H5Screate_simple(2, mdims, NULL);
    MPI_Barrier(MPI_COMM_WORLD);
    double c0 = cpu_s(), w0 = MPI_Wtime();
    for (int s = 0; s < STEPS; s++) {
      const long *my = rows + (long)s * B + (long)rank * mine;
      if (mode == 3) {
        for (int i = 0; i < mine; i++)
          if (pread(fd, buf + (long)i * F, F * 4, at + (off_t)my[i] * F * 4) != F * 4) return perror("pread"), 1;
        continue;
      }
      hid_t fs = H5Dget_space(ds);
      H5Sselect_none(fs);
      for (int i = 0; i < mine; i++) {
        hsize_t st[2] = {(hsize_t)my[i], 0}, cnt[2] = {1, F};
        H5Sselect_hyperslab(fs, H5S_SELECT_OR, st, NULL, cnt, NULL);
      }
      if (H5Dread(ds, H5T_NATIVE_FLOAT, mspace, fs, dxpl, buf) < 0) return fprintf(stderr, "H5Dread failed\n"), 1;
      H5Sclose(fs);
    }
    double wall = MPI_Wtime() - w0, cpu = cpu_s() - c0;
    printf("rank %d %-17s %8.0f us/batch wall %7.0f us CPU (%d rows of %d B)\n", rank, names[mode],
           wall / STEPS * 1e6, cpu / STEPS * 1e6, mine, F * 4);
    fflush(stdout);
    close(fd);
    H5Sclose(mspace), H5Dclose(ds), H5Fclose(file), H5Pclose(dxpl), H5Pclose(fapl);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  free(buf), free(rows);
  if (rank == 0) remove(path);
  MPI_Finalize();
  return 0;
}
