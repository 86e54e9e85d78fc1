/*
 * ckptutil.h: what the checkpoint suites share: a slice of Fashion-MNIST
 * as a raw file, small models and options, trainers on a device spec, and
 * file surgery (copies that are cut short or have a bit flipped).
 */
#ifndef CLT_CKPTUTIL_H
#define CLT_CKPTUTIL_H

#include <stdint.h>

#include "testutil.h"

#define CU_NSAMPLES 512

extern clt_dataset *cu_data;  /* CU_NSAMPLES training images */
extern clt_dataset *cu_small; /* the first half of them */

extern const char *cu_mlp;    /* input 784, linear 32, relu, linear 10 */
extern const char *cu_cnn;    /* conv, pool, dropout, linear */

/* Make the datasets (before the suite runs); 0, TU_SKIP, or 1 after saying why. */
int cu_setup(void);
void cu_teardown(void);

/* batch 64, 2 epochs (16 steps), SGD momentum 0.9 lr 0.05, no events,
 * replicas compared every step. */
void cu_options(clt_train_options *o);

/* A trainer of model text on the devices spec picks (its model in *m:
 * destroy both with cu_done). */
clt_trainer *cu_trainer(const char *text, const char *devices, const clt_train_options *o, clt_model **m);
void cu_done(clt_trainer *t, clt_model *m);
/* A malloc'd copy of the parameters (clt_model_param_count(m) floats). */
float *cu_params(clt_trainer *t, const clt_model *m);
/* The largest absolute difference of two parameter vectors. */
double cu_maxdiff(const float *a, const float *b, int64_t n);

/* A new empty directory under /tmp, its path in out. */
void cu_tmpdir(char *out, size_t size);
/* Remove every file in dir, then dir. */
void cu_rmdir(const char *dir);
/* Copy from to to, keeping only the first `keep` bytes (-1: all) and
 * flipping bit 0 of byte `flip` (-1: none). */
void cu_copy(const char *from, const char *to, long keep, long flip);
long cu_size(const char *path);
int cu_exists(const char *path);
/* Where in path the data section starts (8 + the header length). */
long cu_data_start(const char *path);

/* Warnings the library logs, collected from cu_capture(1) (which forgets
 * earlier ones) to cu_capture(0). */
void cu_capture(int on);
const char *cu_captured(void);

#endif
