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
  const char *what; /* what 0 switches off, for the message */
} switches[] = {
    {"CLT_SHARED_BUFFERS", "host-shared buffers on devices whose memory is the host's"},
    {"CLT_IN_PLACE", "summing the gradients in place (and in the node's shared memory)"},
    {"CLT_COPY_OUT", "copying each gradient bucket out as the backward closes it"},
    {"CLT_HOST_BLAS", "the host BLAS for CPU devices' GEMMs"},
    {"CLT_HOST_BLAS_NATIVE", "host GEMMs as native kernels on the device's queue"},
    {"CLT_CPU_GEMM", "cltrain's own GEMM tiles on CPU devices (1: on every CPU device)"},
    {"CLT_BLAS_TUNED", "the tuned CLBlast parameters of src/core/blas.c"},
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
      return clt__error(CLT_EINVAL, "%s='%s' is not a switch: give 0 (no %s) or 1, or leave it unset",
                        switches[i].name, v, switches[i].what);
  }
  return CLT_OK;
}
