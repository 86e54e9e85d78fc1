/* ref_optim.h: plain-C references of the optimizer kernels (cl/optim.cl). */
#ifndef CLT_REF_OPTIM_H
#define CLT_REF_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include <cltrain.h>

/* One step over n parameters, same semantics as clt_optimizer_step. */
void ref_optimizer_step(const clt_optimizer_config *cfg, int64_t t, float lr, float grad_scale, float *p,
                        const float *g, float *state, size_t n);

#endif
