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
/* Read a weights file (or a checkpoint's "params/" tensors) into params
 * (s->param_count floats), checking every tensor's name and shape against
 * s: what clt_trainer_load_weights does on rank 0, without a trainer. */
int clt__weights_read(const clt_model_spec *s, const char *path, float *params);

#endif
