/*
 * optim.c: the optimizers, one row each of the table below (optim.h): SGD
 * with momentum/Nesterov/weight decay, Adam, AdamW and Lion, each with its
 * settings' check, its host step here and its fused kernel over the whole
 * parameter arena (cl/optim.cl); the public optimizer functions, which go
 * through the table; and the learning-rate schedules (constant, step,
 * cosine, each with linear warm-up).
 */
#include "core/internal.h"
#include "core/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const schedule_names[] = {"constant", "step", "cosine"};

/* A setting outside its range: which optimizer, which setting, its value,
 * what it must be and its default. */
static int bad_setting(const clt_optimizer_config *cfg, const char *setting, float value, float dflt,
                       const char *range) {
  return clt__error(CLT_EINVAL, "the %s optimizer's %s must be %s, not %g (clt_optimizer_config.%s; its default "
                    "is %g)", clt_optimizer_name(cfg->kind), setting, range, (double)value, setting, (double)dflt);
}

static int weight_decay_check(const clt_optimizer_config *c, const clt_optimizer_config *d) {
  if (!(c->weight_decay >= 0)) return bad_setting(c, "weight_decay", c->weight_decay, d->weight_decay, "at least 0");
  return CLT_OK;
}

/* The weight decay of parameter i: none where the mask says so. */
#define WD(i) (decay && !decay[i] ? 0.0f : cfg->weight_decay)

/* ---- SGD --------------------------------------------------------------------- */

static int sgd_state_per_param(const clt_optimizer_config *cfg) { return cfg->momentum != 0.0f ? 1 : 0; }

static int sgd_check(const clt_optimizer_config *c) {
  const clt_optimizer_config *d = &clt__optimizer_of(c->kind)->defaults;
  if (!(c->momentum >= 0 && c->momentum < 1)) return bad_setting(c, "momentum", c->momentum, d->momentum, "in [0, 1)");
  return weight_decay_check(c, d);
}

static void sgd_host(const clt_optimizer_config *cfg, int64_t t, float lr, float gscale, float *p, const float *grad,
                     float *state, size_t n, const uint8_t *decay) {
  const float mu = cfg->momentum;
  (void)t;
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
}

/* sgd_step(..., mu, wd_all, nesterov, ...) */
static int sgd_args(cl_kernel k, cl_uint *arg, const clt_optimizer_config *cfg, int64_t t) {
  int rc = CLT_OK;
  cl_int nesterov = cfg->nesterov;
  (void)t;
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->momentum));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->weight_decay));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof nesterov, &nesterov));
fail:
  return rc;
}

/* ---- Adam and AdamW ------------------------------------------------------------ */

static int adam_check(const clt_optimizer_config *c) {
  const clt_optimizer_config *d = &clt__optimizer_of(c->kind)->defaults;
  if (!(c->beta1 >= 0 && c->beta1 < 1)) return bad_setting(c, "beta1", c->beta1, d->beta1, "in [0, 1)");
  if (!(c->beta2 >= 0 && c->beta2 < 1)) return bad_setting(c, "beta2", c->beta2, d->beta2, "in [0, 1)");
  if (!(c->eps > 0)) return bad_setting(c, "eps", c->eps, d->eps, "above 0");
  return weight_decay_check(c, d);
}

/* The bias corrections 1 - beta^t, in double, as the kernel gets them. */
static float bias_correction(float beta, int64_t t) { return (float)(1.0 - pow(beta, (double)t)); }

static void adam_host(const clt_optimizer_config *cfg, int64_t t, float lr, float gscale, float *p, const float *grad,
                      float *state, size_t n, const uint8_t *decay) {
  const float beta1 = cfg->beta1, beta2 = cfg->beta2, eps = cfg->eps;
  const int decoupled = clt__optimizer_of(cfg->kind)->decoupled_decay;
  const float bc1 = bias_correction(beta1, t), bc2 = bias_correction(beta2, t);
  float *m = state, *v = state + n;
  for (size_t i = 0; i < n; i++) {
    const float wd = WD(i);
    float w = p[i];
    float g = grad[i] * gscale;
    if (decoupled)
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
}

/* adam_step(..., beta1, beta2, eps, wd_all, decoupled, bc1, bc2, ...) */
static int adam_args(cl_kernel k, cl_uint *arg, const clt_optimizer_config *cfg, int64_t t) {
  int rc = CLT_OK;
  cl_int decoupled = clt__optimizer_of(cfg->kind)->decoupled_decay;
  float bc1 = bias_correction(cfg->beta1, t), bc2 = bias_correction(cfg->beta2, t);
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->beta1));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->beta2));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->eps));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->weight_decay));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof decoupled, &decoupled));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof bc1, &bc1));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof bc2, &bc2));
fail:
  return rc;
}

/* ---- Lion ------------------------------------------------------------------------- */

/* Chen et al. 2023 (arXiv:2302.06675), as lion-pytorch's update_fn. */
static int lion_check(const clt_optimizer_config *c) {
  const clt_optimizer_config *d = &clt__optimizer_of(c->kind)->defaults;
  if (!(c->beta1 >= 0 && c->beta1 <= 1)) return bad_setting(c, "beta1", c->beta1, d->beta1, "in [0, 1]");
  if (!(c->beta2 >= 0 && c->beta2 <= 1)) return bad_setting(c, "beta2", c->beta2, d->beta2, "in [0, 1]");
  return weight_decay_check(c, d);
}

/* torch.sign's: 0 for 0 (the parameter only decays), NaN stays NaN. */
static float lion_sign(float c) { return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c == 0.0f ? 0.0f : c; }

static void lion_host(const clt_optimizer_config *cfg, int64_t t, float lr, float gscale, float *p, const float *grad,
                      float *state, size_t n, const uint8_t *decay) {
  const float beta1 = cfg->beta1, beta2 = cfg->beta2;
  float *m = state;
  (void)t;
  for (size_t i = 0; i < n; i++) {
    const float wd = WD(i);
    float w = p[i] * (1.0f - lr * wd);
    float g = grad[i] * gscale;
    float c = beta1 * m[i] + (1.0f - beta1) * g;
    p[i] = w - lr * lion_sign(c);
    m[i] = beta2 * m[i] + (1.0f - beta2) * g;
  }
}

/* lion_step(..., beta1, beta2, wd_all, ...) */
static int lion_args(cl_kernel k, cl_uint *arg, const clt_optimizer_config *cfg, int64_t t) {
  int rc = CLT_OK;
  (void)t;
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->beta1));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->beta2));
  CLT_CL_TRY(clSetKernelArg(k, (*arg)++, sizeof(float), &cfg->weight_decay));
fail:
  return rc;
}

#undef WD

/* ---- the table ------------------------------------------------------------------ */

/* Settings an optimizer does not read keep these (SGD's betas and eps, Adam's
 * momentum): they are saved in checkpoints' metadata as they are. */
#define COMMON_DEFAULTS .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f

static const clt__optimizer optimizers[CLT_OPT_COUNT] = {
    [CLT_OPT_SGD] = {.name = "sgd", .nslots = 1, .slots = {"momentum"}, .state_per_param = sgd_state_per_param,
                     .defaults = {COMMON_DEFAULTS, .momentum = 0.9f}, .reads = "momentum nesterov weight_decay",
                     .check = sgd_check,
                     .step_host = sgd_host, .kernel = "sgd_step", .set_args = sgd_args},
    [CLT_OPT_ADAM] = {.name = "adam", .nslots = 2, .slots = {"m", "v"}, .defaults = {COMMON_DEFAULTS},
                      .reads = "beta1 beta2 eps weight_decay", .check = adam_check, .exact_div_sqrt = 1, .step_host = adam_host, .kernel = "adam_step",
                      .set_args = adam_args},
    [CLT_OPT_ADAMW] = {.name = "adamw", .nslots = 2, .slots = {"m", "v"},
                       .defaults = {COMMON_DEFAULTS, .weight_decay = 0.01f}, .reads = "beta1 beta2 eps weight_decay",
                       .check = adam_check,
                       .exact_div_sqrt = 1, .decoupled_decay = 1, .step_host = adam_host, .kernel = "adam_step",
                       .set_args = adam_args},
    [CLT_OPT_LION] = {.name = "lion", .nslots = 1, .slots = {"m"},
                      .defaults = {.beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f}, .reads = "beta1 beta2 weight_decay",
                      .check = lion_check,
                      .decoupled_decay = 1, .step_host = lion_host, .kernel = "lion_step", .set_args = lion_args},
};

const clt__optimizer *clt__optimizer_of(clt_optimizer_kind kind) {
  /* A kind without its row would have no name: the table misses one. */
  return (unsigned)kind < CLT_OPT_COUNT && optimizers[kind].name ? &optimizers[kind] : NULL;
}

/* "sgd, adam or adamw", for messages. */
static const char *optimizer_list(char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  for (int k = 0; k < CLT_OPT_COUNT && len < size; k++)
    len += (size_t)snprintf(buf + len, size - len, "%s%s", k == 0 ? "" : k + 1 < CLT_OPT_COUNT ? ", " : " or ",
                            clt_optimizer_name((clt_optimizer_kind)k));
  return buf;
}

static int unknown_kind(clt_optimizer_kind kind) {
  char names[256];
  return clt__error(CLT_EINVAL, "optimizer kind %d (clt_optimizer_config.kind) is none of cltrain's (%s: CLT_OPT_*)",
                    (int)kind, optimizer_list(names, sizeof names));
}

int clt__optimizer_check(const clt_optimizer_config *cfg) {
  if (!cfg) return clt__error(CLT_EINVAL, "no optimizer configuration (NULL)");
  const clt__optimizer *o = clt__optimizer_of(cfg->kind);
  if (o && cfg->nesterov != 0 && cfg->nesterov != 1) /* a flag, whichever kind reads it */
    return clt__error(CLT_EINVAL, "clt_optimizer_config.nesterov must be 0 or 1, not %d", cfg->nesterov);
  return o ? o->check(cfg) : unknown_kind(cfg->kind);
}

/* ---- the public functions, through the table ------------------------------------ */

int clt_optimizer_reads(clt_optimizer_kind kind, const char *setting) {
  static const char *const fields[] = {"momentum", "nesterov", "beta1", "beta2", "eps", "weight_decay"};
  CLT_ARG(setting);
  const clt__optimizer *o = clt__optimizer_of(kind);
  if (!o) return unknown_kind(kind);
  int known = 0;
  for (size_t i = 0; setting && i < sizeof fields / sizeof *fields; i++) known |= strcmp(setting, fields[i]) == 0;
  if (!known)
    return clt__error(CLT_EINVAL, "clt_optimizer_reads: '%s' is no setting of clt_optimizer_config (momentum, "
                      "nesterov, beta1, beta2, eps, weight_decay)", setting ? setting : "(null)");
  size_t n = strlen(setting);
  for (const char *r = o->reads; (r = strstr(r, setting)); r += n)
    if ((r == o->reads || r[-1] == ' ') && (r[n] == ' ' || r[n] == 0)) return 1;
  return 0;
}

void clt_optimizer_defaults(clt_optimizer_kind kind, clt_optimizer_config *cfg) {
  const clt__optimizer *o = clt__optimizer_of(kind);
  if (!cfg) return;
  if (o)
    *cfg = o->defaults;
  else
    memset(cfg, 0, sizeof *cfg);
  cfg->kind = kind;
}

int clt_optimizer_parse(const char *text, clt_optimizer_kind *out) {
  char names[256];
  CLT_ARG(out);
  CLT_ARG(text);
  for (int k = 0; k < CLT_OPT_COUNT; k++)
    if (text && strcmp(text, clt_optimizer_name((clt_optimizer_kind)k)) == 0) {
      *out = (clt_optimizer_kind)k;
      return CLT_OK;
    }
  return clt__error(CLT_EINVAL, "unknown optimizer '%s' (%s)", text ? text : "(null)",
                    optimizer_list(names, sizeof names));
}

const char *clt_optimizer_name(clt_optimizer_kind kind) {
  const clt__optimizer *o = clt__optimizer_of(kind);
  return o ? o->name : "?";
}

int clt_optimizer_state_per_param(const clt_optimizer_config *cfg) {
  const clt__optimizer *o = cfg ? clt__optimizer_of(cfg->kind) : NULL;
  if (!o) return 0;
  return o->state_per_param ? o->state_per_param(cfg) : o->nslots;
}

int clt_optimizer_decoupled_decay(clt_optimizer_kind kind) {
  const clt__optimizer *o = clt__optimizer_of(kind);
  return o ? o->decoupled_decay : 0;
}

/* Does this step need the host (a device that rounds divide or sqrt loosely)? */
int clt_optimizer_needs_host(const clt_optimizer_config *cfg, const clt_device_info *dev) {
  const clt__optimizer *o = cfg ? clt__optimizer_of(cfg->kind) : NULL;
  return o && dev && o->exact_div_sqrt && !dev->fp32_exact_div_sqrt;
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
  const clt__optimizer *o = cfg ? clt__optimizer_of(cfg->kind) : NULL;
  if (!o || n == 0 || !p || !grad || (clt_optimizer_state_per_param(cfg) && !state)) return;
  o->step_host(cfg, t, lr, gscale, p, grad, state, n, decay);
}

/* The arguments of clt_optimizer_step(_masked), fn, as cltrain/opencl.h names them. */
static int check_step_args(const char *fn, const clt_context *ctx, const clt_optimizer_config *cfg,
                           const clt_tensor *params, const clt_tensor *grads, const clt_tensor *state) {
  if (!ctx) return clt__null_arg(fn, "ctx", "context");
  if (!cfg) return clt__null_arg(fn, "cfg", NULL);
  if (!params) return clt__null_arg(fn, "params", NULL);
  if (!grads) return clt__null_arg(fn, "grads", NULL);
  if (!state && clt_optimizer_state_per_param(cfg) > 0)
    return clt__error(CLT_EINVAL, "%s: state is NULL, but the %s optimizer keeps %d floats of state per parameter",
                      fn, clt_optimizer_name(cfg->kind), clt_optimizer_state_per_param(cfg));
  return CLT_OK;
}

int clt_optimizer_step(clt_context *ctx, const clt_optimizer_config *cfg, int64_t t, float lr, float grad_scale,
                       const clt_tensor *params, const clt_tensor *grads, const clt_tensor *state) {
  int rc = check_step_args(__func__, ctx, cfg, params, grads, state);
  return rc < 0 ? rc : clt_optimizer_step_masked(ctx, cfg, t, lr, grad_scale, params, grads, state, NULL);
}

int clt_optimizer_step_masked(clt_context *ctx, const clt_optimizer_config *cfg, int64_t t, float lr,
                              float grad_scale, const clt_tensor *params, const clt_tensor *grads,
                              const clt_tensor *state, const clt_tensor *decay) {
  int rc = check_step_args(__func__, ctx, cfg, params, grads, state);
  cl_kernel k;
  if (rc < 0) return rc;
  const clt__optimizer *o = clt__optimizer_of(cfg->kind);
  if (!o) return unknown_kind(cfg->kind);
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
                      o->name, per, (unsigned long long)n, clt_tensor_shape_str(state, s1, sizeof s1));
  if (t < 1) return clt__error(CLT_EINVAL, "optimizer step: step numbers start at 1, not %lld", (long long)t);
  if (decay && (decay->dtype != CLT_U8 || (cl_ulong)clt_tensor_numel(decay) != n))
    return clt__error(CLT_ESHAPE, "optimizer step: the decay mask must be %llu u8 values, not %s",
                      (unsigned long long)n, clt_tensor_shape_str(decay, s1, sizeof s1));
  if (o->exact_div_sqrt && !ctx->info.fp32_exact_div_sqrt)
    return clt__error(CLT_EUNSUPPORTED, "%s on %s (%s): the device cannot round float divide and sqrt "
                      "correctly, so its result would differ from other devices'; use the host step",
                      o->name, ctx->info.name, ctx->info.platform_name);
  cl_mem mask = decay ? decay->buf : NULL;
  cl_ulong moff = decay ? (cl_ulong)decay->offset : 0;

  cl_ulong poff = params->offset / sizeof(float), goff = grads->offset / sizeof(float);
  cl_ulong soff = per ? state->offset / sizeof(float) : 0;
  cl_mem sbuf = per ? state->buf : params->buf; /* an optimizer without state never touches it */
  cl_uint arg = 9;
  CLT_TRY(clt_context_kernel(ctx, "optim", o->kernel, o->exact_div_sqrt ? "-cl-fp32-correctly-rounded-divide-sqrt"
                                                                       : NULL, &k));
  /* The arguments every optimizer kernel begins with, its own, and the
   * decay mask every one ends with. */
  CLT_CL_TRY(clSetKernelArg(k, 0, sizeof(cl_mem), &params->buf));
  CLT_CL_TRY(clSetKernelArg(k, 1, sizeof poff, &poff));
  CLT_CL_TRY(clSetKernelArg(k, 2, sizeof(cl_mem), &grads->buf));
  CLT_CL_TRY(clSetKernelArg(k, 3, sizeof goff, &goff));
  CLT_CL_TRY(clSetKernelArg(k, 4, sizeof(cl_mem), &sbuf));
  CLT_CL_TRY(clSetKernelArg(k, 5, sizeof soff, &soff));
  CLT_CL_TRY(clSetKernelArg(k, 6, sizeof n, &n));
  CLT_CL_TRY(clSetKernelArg(k, 7, sizeof lr, &lr));
  CLT_CL_TRY(clSetKernelArg(k, 8, sizeof grad_scale, &grad_scale));
  CLT_TRY(o->set_args(k, &arg, cfg, t));
  CLT_CL_TRY(clSetKernelArg(k, arg, sizeof mask, mask ? &mask : NULL));
  CLT_CL_TRY(clSetKernelArg(k, arg + 1, sizeof moff, &moff));
  CLT_TRY(clt_launch_1d(ctx, k, n, 0));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s step on %s", o->name, ctx->info.name);
}

/* ---- learning-rate schedules ----------------------------------------------------- */

int clt_schedule_parse(const char *text, clt_schedule_kind *out) {
  CLT_ARG(out);
  CLT_ARG(text);
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
  if (!s) return NAN;
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
