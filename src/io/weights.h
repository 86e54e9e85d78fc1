/*
 * weights.h: a model's parameter arena as safetensors tensors, named as
 * PyTorch's nn.Sequential names the same layers, and weights files read
 * into an arena (weights.c). The trainer's save and load (train/weights.c),
 * checkpoints and the Hugging Face import and export use them.
 */
#ifndef CLT_IO_WEIGHTS_H
#define CLT_IO_WEIGHTS_H

#include "io/safetensors.h"
#include "model/spec.h"

/* The safetensors tensors of a parameter arena at base, named as
 * nn.Sequential names the layers ("0.weight", "0.bias", ...) after prefix;
 * t needs room for 2 * (layers) entries. */
int clt__arena_tensors(const clt_model_spec *s, const char *prefix, const float *base, clt__st_tensor *t, int *n);
/* The same, unprefixed, into an array of its own (*out, freed by the
 * caller even on failure). */
int clt__arena_tensors_alloc(const clt_model_spec *s, const float *params, clt__st_tensor **out, int *n);
/* "; the specs differ from line 3 of the checkpoint's ('linear 32') and
 * line 3 of dp.model ('linear 16')" (whose: "the checkpoint's"), or ""
 * when the saved spec text and now's say the same line for line. */
void clt__spec_difference(const char *saved, const char *whose, const clt_model_spec *now, char *out, size_t len);
/* The first tensor of f that is not one of the model's tensors after one
 * of the NULL-ended prefixes ('*' stands for one path component:
 * "optim/ * /"), or NULL when there is none; *count (may be NULL) gets how
 * many there are. */
const char *clt__weights_stranger(clt__st_file *f, const clt_model_spec *s, const char *const *prefixes, int *count);
/* Read a weights file (or a checkpoint's "params/" tensors) into params
 * (s->param_count floats), checking every tensor's name and shape against
 * s, and that it holds no tensor s lacks (a checkpoint's optimizer state
 * aside): what clt_trainer_load_weights does on rank 0, without a
 * trainer. A spec saved in the file that differs while every tensor fits
 * is a warning. */
int clt__weights_read(const clt_model_spec *s, const char *path, float *params);

#endif
