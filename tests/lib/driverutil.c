/*
 * driverutil.c: the Python checks' drivers' shared helpers (driverutil.h).
 */
#include "driverutil.h"

#include <stdio.h>
#include <stdlib.h>


int du_die(const char *prog, int rc, const char *what) {
  fprintf(stderr, "%s: %s: %s\n", prog, what, rc < 0 ? clt_last_error() : "");
  return rc == CLT_ENOICD || rc == CLT_ENODEV ? 77 : 1;
}

int32_t *du_read_i32(const char *path, int64_t *n) {
  FILE *f = fopen(path, "rb");
  *n = 0;
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

int du_trainer(const char *prog, const clt_model *m, const clt_train_options *o, const char *weights,
               clt_trainer **t, clt_devices **all, clt_devices **one) {
  clt_devices *sel = NULL;
  const char *spec = getenv("CLT_DEVICES");
  char first[16];
  int rc, ec = 0;
  *t = NULL, *all = *one = NULL;
  if ((rc = clt_devices_discover(all)) < 0) return du_die(prog, rc, "devices");
  if (clt_devices_count(*all) == 0) return du_die(prog, CLT_ENODEV, "no OpenCL device");
  if ((rc = clt_devices_select(*all, spec && *spec ? spec : "0", &sel)) < 0) return du_die(prog, rc, "devices");
  snprintf(first, sizeof first, "%d", clt_devices_info(sel, 0)->index);
  clt_devices_destroy(sel);
  if ((rc = clt_devices_select(*all, first, one)) < 0) ec = du_die(prog, rc, "devices");
  else if ((rc = clt_trainer_create(m, *one, NULL, o, t)) < 0) ec = du_die(prog, rc, "trainer");
  else if ((rc = clt_trainer_load_weights(*t, weights)) < 0) ec = du_die(prog, rc, weights);
  return ec;
}
