/*
 * optim.c: optimizers (SGD with momentum/Nesterov/weight decay, Adam, AdamW)
 * as fused kernels over the whole parameter arena (cl/optim.cl), and the
 * learning-rate schedules (constant, step, cosine, each with linear warm-up).
 */
#include "core/internal.h"

#include <math.h>
#include <string.h>

static const char *const optimizer_names[] = {"sgd", "adam", "adamw"};
static const char *const schedule_names[] = {"constant", "step", "cosine"};

void clt_optimizer_defaults(clt_optimizer_kind kind, clt_optimizer_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->kind = kind;
  cfg->momentum = kind == CLT_OPT_SGD ? 0.9f : 0.0f;
  cfg->beta1 = 0.9f;
  cfg->beta2 = 0.999f;
  cfg->eps = 1e-8f;
  cfg->weight_decay = kind == CLT_OPT_ADAMW ? 0.01f : 0.0f;
}

int clt_optimizer_parse(const char *text, clt_optimizer_kind *out) {
  for (int i = 0; i < 3; i++)
    if (text && strcmp(text, optimizer_names[i]) == 0) {
      *out = (clt_optimizer_kind)i;
      return CLT_OK;
    }
  return clt__error(CLT_EINVAL, "unknown optimizer '%s' (sgd, adam or adamw)", text ? text : "(null)");
}

const char *clt_optimizer_name(clt_optimizer_kind kind) {
  return (unsigned)kind < 3 ? optimizer_names[kind] : "?";
}

int clt_optimizer_state_per_param(const clt_optimizer_config *cfg) {
  if (cfg->kind == CLT_OPT_SGD) return cfg->momentum != 0.0f ? 1 : 0;
  return 2;
}

int clt_schedule_parse(const char *text, clt_schedule_kind *out) {
  for (int i = 0; i < 3; i++)
    if (text && strcmp(text, schedule_names[i]) == 0) {
      *out = (clt_schedule_kind)i;
      return CLT_OK;
    }
  return clt__error(CLT_EINVAL, "unknown learning-rate schedule '%s' (constant, step or cosine)", text ? text : "(null)");
}

const char *clt_schedule_name(clt_schedule_kind kind) {
  return (unsigned)kind < 3 ? schedule_names[kind] : "?";
}

float clt_schedule_lr(const clt_schedule *s, int64_t step) {
  if (step < 0) step = 0;
  if (s->warmup_steps > 0 && step < s->warmup_steps)
    return s->lr * (float)(step + 1) / (float)s->warmup_steps;
  switch (s->kind) {
  case CLT_SCHED_STEP: {
    if (s->step_size <= 0) return s->lr;
    return s->lr * powf(s->gamma, (float)((step - s->warmup_steps) / s->step_size));
  }
  case CLT_SCHED_COSINE: {
    int64_t span = s->total_steps - s->warmup_steps;
    if (span <= 0) return s->lr;
    double frac = (double)(step - s->warmup_steps) / (double)span;
    if (frac > 1) frac = 1;
    return (float)(s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(M_PI * frac)));
  }
  default:
    return s->lr;
  }
}

/* The kernels' arithmetic, operation for operation, in float (the library
 * is built with -ffp-contract=off): the same bits as a device that rounds
 * divide and sqrt correctly. Used for devices that cannot. */
void clt_optimizer_step_host(const clt_optimizer_config *cfg, int64_t t, float lr, float gscale, float *p,
                              const float *grad, float *state, size_t n) {
  clt_optimizer_step_host_masked(cfg, t, lr, gscale, p, grad, state, n, NULL);
}

void clt_optimizer_step_host_masked(const clt_optimizer_config *cfg, int64_t t, float lr, float gscale, float *p,
                                    const float *grad, float *state, size_t n, const uint8_t *decay) {
  const float mu = cfg->momentum, beta1 = cfg->beta1, beta2 = cfg->beta2, eps = cfg->eps;
#define WD(i) (decay && !decay[i] ? 0.0f : cfg->weight_decay)
  if (cfg->kind == CLT_OPT_SGD) {
    for (size_t i = 0; i < n; i++) {
      const float wd = WD(i);
      float w = p[i];
      float g = grad[i] * gscale + wd * w;
      if (mu != 0.0f) {
        float b = mu * state[i] + g;
        state[i] = b;
        g = cfg->nesterov ? g + mu * b : b;
      }
      p[i] = w - lr * g;
    }
    return;
  }
  const float bc1 = (float)(1.0 - pow(beta1, (double)t)), bc2 = (float)(1.0 - pow(beta2, (double)t));
  float *m = state, *v = state + n;
  for (size_t i = 0; i < n; i++) {
    const float wd = WD(i);
    float w = p[i];
    float g = grad[i] * gscale;
    if (cfg->kind == CLT_OPT_ADAMW)
      w -= lr * wd * w;
    else
      g = g + wd * w;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1;
    float vhat = vi / bc2;
    p[i] = w - lr * mhat / (sqrtf(vhat) + eps);
  }
#undef WD
}

/* Does this step need the host (a device that rounds divide or sqrt loosely)? */
int clt_optimizer_needs_host(const clt_optimizer_config *cfg, const clt_device_info *dev) {
  return cfg->kind != CLT_OPT_SGD && !dev->fp32_exact_div_sqrt;
}

int clt_optimizer_step(clt_context *ctx, const clt_optimizer_config *cfg, int64_t t, float lr, float grad_scale,
                       const clt_tensor *params, const clt_tensor *grads, const clt_tensor *state) {
  return clt_optimizer_step_masked(ctx, cfg, t, lr, grad_scale, params, grads, state, NULL);
}

int clt_optimizer_step_masked(clt_context *ctx, const clt_optimizer_config *cfg, int64_t t, float lr,
                              float grad_scale, const clt_tensor *params, const clt_tensor *grads,
                              const clt_tensor *state, const clt_tensor *decay) {
  int rc = CLT_OK;
  cl_kernel k;
  cl_ulong n = (cl_ulong)clt_tensor_numel(params);
  int per = clt_optimizer_state_per_param(cfg);
  char s1[128], s2[128];

  if (params->dtype != CLT_F32 || grads->dtype != CLT_F32 || (per && state->dtype != CLT_F32))
    return clt__error(CLT_EINVAL, "optimizer step: parameters, gradients and state must be f32");
  if ((cl_ulong)clt_tensor_numel(grads) != n)
    return clt__error(CLT_ESHAPE, "optimizer step: parameters %s and gradients %s differ in size",
                      clt_tensor_shape_str(params, s1, sizeof s1), clt_tensor_shape_str(grads, s2, sizeof s2));
  if (per && (cl_ulong)clt_tensor_numel(state) != per * n)
    return clt__error(CLT_ESHAPE, "optimizer step: %s needs %d x %llu floats of state, the state tensor is %s",
                      clt_optimizer_name(cfg->kind), per, (unsigned long long)n,
                      clt_tensor_shape_str(state, s1, sizeof s1));
  if (t < 1) return clt__error(CLT_EINVAL, "optimizer step: step numbers start at 1, not %lld", (long long)t);
  if (decay && (decay->dtype != CLT_U8 || (cl_ulong)clt_tensor_numel(decay) != n))
    return clt__error(CLT_ESHAPE, "optimizer step: the decay mask must be %llu u8 values, not %s",
                      (unsigned long long)n, clt_tensor_shape_str(decay, s1, sizeof s1));
  cl_mem mask = decay ? decay->buf : NULL;
  cl_ulong moff = decay ? (cl_ulong)decay->offset : 0;

  cl_ulong poff = params->offset / sizeof(float), goff = grads->offset / sizeof(float);
  cl_ulong soff = per ? state->offset / sizeof(float) : 0;
  cl_mem sbuf = per ? state->buf : params->buf; /* SGD without momentum never touches it */
  if (cfg->kind == CLT_OPT_SGD) {
    cl_int nesterov = cfg->nesterov;
    CLT_TRY(clt_context_kernel(ctx, "optim", "sgd_step", NULL, &k));
    CLT_CL_TRY(clSetKernelArg(k, 6, sizeof n, &n));
    CLT_CL_TRY(clSetKernelArg(k, 7, sizeof lr, &lr));
    CLT_CL_TRY(clSetKernelArg(k, 8, sizeof grad_scale, &grad_scale));
    CLT_CL_TRY(clSetKernelArg(k, 9, sizeof(float), &cfg->momentum));
    CLT_CL_TRY(clSetKernelArg(k, 10, sizeof(float), &cfg->weight_decay));
    CLT_CL_TRY(clSetKernelArg(k, 11, sizeof nesterov, &nesterov));
    CLT_CL_TRY(clSetKernelArg(k, 12, sizeof mask, mask ? &mask : NULL));
    CLT_CL_TRY(clSetKernelArg(k, 13, sizeof moff, &moff));
  } else {
    cl_int decoupled = cfg->kind == CLT_OPT_ADAMW;
    float bc1 = (float)(1.0 - pow(cfg->beta1, (double)t)), bc2 = (float)(1.0 - pow(cfg->beta2, (double)t));
    if (!ctx->info.fp32_exact_div_sqrt)
      return clt__error(CLT_EUNSUPPORTED, "%s on %s (%s): the device cannot round float divide and sqrt "
                        "correctly, so its result would differ from other devices'; use the host step",
                        clt_optimizer_name(cfg->kind), ctx->info.name, ctx->info.platform_name);
    CLT_TRY(clt_context_kernel(ctx, "optim", "adam_step", "-cl-fp32-correctly-rounded-divide-sqrt", &k));
    CLT_CL_TRY(clSetKernelArg(k, 6, sizeof n, &n));
    CLT_CL_TRY(clSetKernelArg(k, 7, sizeof lr, &lr));
    CLT_CL_TRY(clSetKernelArg(k, 8, sizeof grad_scale, &grad_scale));
    CLT_CL_TRY(clSetKernelArg(k, 9, sizeof(float), &cfg->beta1));
    CLT_CL_TRY(clSetKernelArg(k, 10, sizeof(float), &cfg->beta2));
    CLT_CL_TRY(clSetKernelArg(k, 11, sizeof(float), &cfg->eps));
    CLT_CL_TRY(clSetKernelArg(k, 12, sizeof(float), &cfg->weight_decay));
    CLT_CL_TRY(clSetKernelArg(k, 13, sizeof decoupled, &decoupled));
    CLT_CL_TRY(clSetKernelArg(k, 14, sizeof bc1, &bc1));
    CLT_CL_TRY(clSetKernelArg(k, 15, sizeof bc2, &bc2));
    CLT_CL_TRY(clSetKernelArg(k, 16, sizeof mask, mask ? &mask : NULL));
    CLT_CL_TRY(clSetKernelArg(k, 17, sizeof moff, &moff));
  }
  /* The first six arguments are the same for both kernels. */
  CLT_CL_TRY(clSetKernelArg(k, 0, sizeof(cl_mem), &params->buf));
  CLT_CL_TRY(clSetKernelArg(k, 1, sizeof poff, &poff));
  CLT_CL_TRY(clSetKernelArg(k, 2, sizeof(cl_mem), &grads->buf));
  CLT_CL_TRY(clSetKernelArg(k, 3, sizeof goff, &goff));
  CLT_CL_TRY(clSetKernelArg(k, 4, sizeof(cl_mem), &sbuf));
  CLT_CL_TRY(clSetKernelArg(k, 5, sizeof soff, &soff));
  CLT_TRY(clt_launch_1d(ctx, k, n, 0));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s step on %s", clt_optimizer_name(cfg->kind), ctx->info.name);
}
