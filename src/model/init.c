/*
 * init.c: seeded parameter initialisation on the host. He (Kaiming) or
 * Xavier (Glorot) uniform for weights, zeros for biases, ones and zeros for
 * layernorm's gamma and beta. The generator is splitmix64 keyed by (seed,
 * parameter index), so the values do not depend on the device, the number
 * of replicas or the order anything runs in.
 */
#include "internal.h"
#include "model/model.h"

#include <math.h>

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

void clt__model_init_params(const clt_model_spec *spec, uint64_t seed, float *params) {
  for (int li = 0; li < spec->nlayers; li++) {
    const clt_layer_spec *l = &spec->layers[li];
    float *w = params + l->param_offset, *b = w + l->weight_count;
    if (l->kind == CLT_LAYER_LAYERNORM) {
      for (int64_t i = 0; i < l->weight_count; i++) w[i] = 1.0f;
      for (int64_t i = 0; i < l->bias_count; i++) b[i] = 0.0f;
      continue;
    }
    if (l->weight_count == 0) continue;
    /* fan_in = inputs feeding one output; fan_out = outputs fed by one input */
    double fan_in, fan_out;
    if (l->kind == CLT_LAYER_CONV2D) {
      fan_in = (double)l->in_shape.dims[0] * l->kernel * l->kernel;
      fan_out = (double)l->out * l->kernel * l->kernel;
    } else {
      fan_in = l->in_shape.dims[0];
      fan_out = l->out;
    }
    /* Uniform(-a, a) has variance a^2/3: He wants 2/fan_in, Xavier 2/(fan_in+fan_out). */
    double a = l->init == CLT_INIT_XAVIER ? sqrt(6.0 / (fan_in + fan_out)) : sqrt(6.0 / fan_in);
    for (int64_t i = 0; i < l->weight_count; i++)
      w[i] = (float)(a * uniform_pm1(seed, (uint64_t)(l->param_offset + i)));
    for (int64_t i = 0; i < l->bias_count; i++) b[i] = 0.0f;
  }
}
