/* ref_optim.c: plain-C references of the optimizer kernels, in double, one
 * function per kind of optimizer (the table at the end). */
#include "ref/ref_optim.h"

#include <math.h>

static void ref_sgd(const clt_optimizer_config *cfg, int64_t t, double lr, double gscale, float *p, const float *g,
                    float *state, size_t n) {
  (void)t;
  for (size_t i = 0; i < n; i++) {
    double w = p[i], gi = (double)g[i] * gscale;
    gi += cfg->weight_decay * w;
    if (cfg->momentum != 0) {
      double b = cfg->momentum * state[i] + gi;
      state[i] = (float)b;
      gi = cfg->nesterov ? gi + cfg->momentum * b : b;
    }
    p[i] = (float)(w - lr * gi);
  }
}

/* Adam (L2 weight decay) and AdamW (decoupled). */
static void ref_adam(const clt_optimizer_config *cfg, int64_t t, double lr, double gscale, float *p, const float *g,
                     float *state, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double w = p[i], gi = (double)g[i] * gscale;
    if (cfg->kind == CLT_OPT_ADAMW)
      w -= lr * cfg->weight_decay * w;
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

/* Lion: lion-pytorch's update_fn, with torch.sign (0 for 0). */
static void ref_lion(const clt_optimizer_config *cfg, int64_t t, double lr, double gscale, float *p, const float *g,
                     float *state, size_t n) {
  (void)t;
  for (size_t i = 0; i < n; i++) {
    double w = p[i] * (1 - lr * cfg->weight_decay), gi = (double)g[i] * gscale, m = state[i];
    double c = cfg->beta1 * m + (1 - cfg->beta1) * gi;
    p[i] = (float)(w - lr * ((c > 0) - (c < 0)));
    state[i] = (float)(cfg->beta2 * m + (1 - cfg->beta2) * gi);
  }
}

typedef void ref_step_fn(const clt_optimizer_config *cfg, int64_t t, double lr, double gscale, float *p,
                         const float *g, float *state, size_t n);
static ref_step_fn *const ref_steps[CLT_OPT_COUNT] = {
    [CLT_OPT_SGD] = ref_sgd,
    [CLT_OPT_ADAM] = ref_adam,
    [CLT_OPT_ADAMW] = ref_adam,
    [CLT_OPT_LION] = ref_lion,
};

void ref_optimizer_step(const clt_optimizer_config *cfg, int64_t t, float lr, float grad_scale, float *p,
                        const float *g, float *state, size_t n) {
  ref_steps[cfg->kind](cfg, t, lr, grad_scale, p, g, state, n);
}
