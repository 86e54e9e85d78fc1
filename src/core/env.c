/*
 * env.c: the library's on/off environment switches, one table: each takes
 * 0 (off) or 1 (on, where the device can; the default when unset), and
 * anything else is refused when a context or communicator is made, as the
 * other CLT_* variables are (a typo such as CLT_IN_PLACE=O must not be
 * taken silently for "on").
 */
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  const char *off, *on; /* what 0 and 1 do, for the message */
} switches[] = {
    {"CLT_SHARED_BUFFERS", "ordinary buffers", "host-shared ones where the device's memory is the host's"},
    {"CLT_IN_PLACE", "gradients copied out and back", "summed in place where the buffers are host memory"},
    {"CLT_COPY_OUT", "gradient buckets read from the device", "copied out as the backward closes them"},
    {"CLT_HOST_BLAS", "CPU devices' GEMMs on CLBlast", "on the host BLAS"},
    {"CLT_HOST_BLAS_NATIVE", "host GEMMs on the calling thread", "as native kernels where the device runs them"},
    {"CLT_CPU_GEMM", "no GEMM on cltrain's own tiles", "every CPU device's on them"},
    {"CLT_CONV_IMPLICIT", "convolutions through im2col and a GEMM", "stride-1 ones as implicit GEMMs where the CPU tiles run"},
    {"CLT_BLAS_TUNED", "CLBlast's own parameters", "src/core/blas.c's tuned ones"},
};

int clt__env_switch(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return -1;
  return strcmp(v, "0") == 0 ? 0 : strcmp(v, "1") == 0 ? 1 : -1;
}

int clt__env_check(void) {
  for (size_t i = 0; i < sizeof switches / sizeof *switches; i++) {
    const char *v = getenv(switches[i].name);
    if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
      return clt__error(CLT_EINVAL, "%s='%s' is not a switch: give 0 (%s) or 1 (%s), or leave it unset", switches[i].name,
                        v, switches[i].off, switches[i].on);
  }
  return CLT_OK;
}
