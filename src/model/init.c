/*
 * init.c: seeded parameter initialisation on the host, as each parameter
 * tensor of the layer table asks (model/spec.h clt_param_init): uniform
 * (He or Xavier bounds), normal (GPT-2's 0.02), zeros or ones. The
 * generator is splitmix64 keyed by (seed, parameter index), so the values
 * do not depend on the device, the number of replicas or the order
 * anything runs in.
 */
#include "core/internal.h"
#include "model/model.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Uniform in [-1, 1) from (seed, i): 24 random bits, exact in float. */
static float uniform_pm1(uint64_t seed, uint64_t i) {
  uint64_t r = splitmix64(seed ^ splitmix64(i));
  return (float)(r >> 40) / 8388608.0f - 1.0f;
}

/* Normal with standard deviation 1 from (seed, i): Box-Muller on two
 * uniforms in (0, 1] keyed by 2i and 2i + 1. */
static double normal(uint64_t seed, uint64_t i) {
  double u1 = (uniform_pm1(seed, 2 * i) + 1.0) * 0.5, u2 = (uniform_pm1(seed, 2 * i + 1) + 1.0) * 0.5;
  if (u1 <= 0) u1 = 1.0 / 16777216.0;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void clt__model_init_params(const clt_model_spec *spec, uint64_t seed, float *params) {
  for (int li = 0; li < spec->nlayers; li++) {
    const clt_layer_spec *l = &spec->layers[li];
    for (int k = 0; k < l->nparams; k++) {
      const clt_param_spec *p = &l->param[k];
      if (p->tied) continue;
      float *w = params + p->offset;
      for (int64_t i = 0; i < p->count; i++) {
        uint64_t at = (uint64_t)(p->offset + i);
        switch (p->init) {
        case CLT_PINIT_UNIFORM: w[i] = (float)(p->scale * uniform_pm1(seed, at)); break;
        case CLT_PINIT_NORMAL: w[i] = (float)(p->scale * normal(seed ^ 0x6e6f726d616c7321ull, at)); break;
        case CLT_PINIT_ONES: w[i] = 1.0f; break;
        default: w[i] = 0.0f; break;
        }
      }
    }
  }
}

void clt__model_decay_mask(const clt_model_spec *spec, uint8_t *out) {
  for (int li = 0; li < spec->nlayers; li++) {
    const clt_layer_spec *l = &spec->layers[li];
    for (int k = 0; k < l->nparams; k++)
      if (!l->param[k].tied) memset(out + l->param[k].offset, l->param[k].decay ? 1 : 0, (size_t)l->param[k].count);
  }
}
