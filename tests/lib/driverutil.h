/*
 * driverutil.h: what the small programs the Python checks call
 * (tests/io/hf_logits for hf_check.py, tests/train/torch_steps for torch_check.py)
 * share: how they fail, and reading a file of int32 tokens.
 */
#ifndef CLT_DRIVERUTIL_H
#define CLT_DRIVERUTIL_H

#include <stdint.h>

#include <cltrain.h>

/* Print "PROG: WHAT: the library's last error" and give the exit code: 77
 * (skipped) when there is no OpenCL device, else 1. */
int du_die(const char *prog, int rc, const char *what);
/* The whole file as int32 values (malloc'd), *n of them; NULL when it
 * cannot be read or is not a whole number of int32s. */
int32_t *du_read_i32(const char *path, int64_t *n);

/* A trainer of m with options o on one device (the first that
 * CLT_DEVICES selects, else device 0), its weights loaded from `weights`:
 * 0, or the exit code after a message. Destroy *all and *one after the
 * trainer. */
int du_trainer(const char *prog, const clt_model *m, const clt_train_options *o, const char *weights,
               clt_trainer **t, clt_devices **all, clt_devices **one);

#endif
