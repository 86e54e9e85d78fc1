/* ref_optim.c: plain-C references of the optimizer kernels, in double. */
#include "ref/ref_optim.h"

#include <math.h>

void ref_optimizer_step(const clt_optimizer_config *cfg, int64_t t, float lr, float grad_scale, float *p,
                        const float *g, float *state, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double w = p[i], gi = (double)g[i] * grad_scale;
    if (cfg->kind == CLT_OPT_SGD) {
      gi += cfg->weight_decay * w;
      if (cfg->momentum != 0) {
        double b = cfg->momentum * state[i] + gi;
        state[i] = (float)b;
        gi = cfg->nesterov ? gi + cfg->momentum * b : b;
      }
      p[i] = (float)(w - lr * gi);
    } else {
      if (cfg->kind == CLT_OPT_ADAMW)
        w -= (double)lr * cfg->weight_decay * w;
      else
        gi += cfg->weight_decay * w;
      double m = cfg->beta1 * (double)state[i] + (1 - cfg->beta1) * gi;
      double v = cfg->beta2 * (double)state[n + i] + (1 - cfg->beta2) * gi * gi;
      state[i] = (float)m;
      state[n + i] = (float)v;
      double mhat = m / (1 - pow(cfg->beta1, (double)t)), vhat = v / (1 - pow(cfg->beta2, (double)t));
      p[i] = (float)(w - lr * mhat / (sqrt(vhat) + cfg->eps));
    }
  }
}
