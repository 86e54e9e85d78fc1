/*
 * testutil.h: what the Check suites share: one context per OpenCL device
 * (made once, outside Check's forked children, which can lose the OpenCL
 * platform), seeded random data and a runner that exits 77 when there is no
 * device at all.
 */
#ifndef CLT_TESTUTIL_H
#define CLT_TESTUTIL_H

#include <check.h>
#include <cltrain.h>
#include <cltrain/opencl.h>

#include "ref/ref.h"

#define TU_SKIP 77

extern clt_devices *tu_devices;  /* every discovered device */
extern clt_context **tu_ctx;     /* one context per device */
extern int tu_ndev;

/* Discover devices and make a context on each; returns 0, or TU_SKIP when
 * there are none (after saying so), or 1 on a failure. */
int tu_setup(void);
void tu_teardown(void);

/* Run a suite without forking (OpenCL state lives in this process) and
 * return the process exit code. */
int tu_run(Suite *s);

/* A float32 device buffer holding n floats copied from host (or zeros). */
cl_mem tu_buffer(clt_context *ctx, const float *host, size_t n);
/* Read n floats at element offset off. */
void tu_read(clt_context *ctx, cl_mem buf, size_t off, float *host, size_t n);

/* The first n samples of Fashion-MNIST's split ("train" or "test", pixels
 * in [0, 1]) written as a raw dataset file at path, each sample of ndims
 * dims (784 values in all); edit, when not NULL, changes the n * 784
 * values first. For a suite's setup, before Check runs: 0, or -1 after
 * printing why. */
int tu_fashion_raw(const char *split, int64_t n, int ndims, const int64_t *dims,
                   void (*edit)(float *x, int64_t n, void *user), void *user, const char *path);

/* "name (platform)" for messages. */
const char *tu_name(clt_context *ctx);

#endif
