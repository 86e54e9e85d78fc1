/*
 * cltrain_shim.c: the C half of the Fortran module (src/fortran/cltrain.f90),
 * for what the module cannot bind to directly.
 *
 * Training options. clt_train_options holds pointers, a callback, nested
 * structs and enums, and it grows as features land; a bind(C) copy of it in
 * Fortran would go on compiling after a field is added on the C side and
 * then read every later field from the wrong offset. So the module's
 * clt_options_t is a flat struct of plain numbers that belongs to this
 * binding (clt_f_options below, mirrored field for field in the module and
 * built into the same library from the same commit; clt_f_options_size lets
 * the module check the two agree), and clt_f_trainer_create copies it into
 * a clt_train_options over clt_train_options_defaults, so any option the
 * binding does not carry keeps the library's default.
 *
 * These functions are hidden: the library exports only the module.
 */
#include <stddef.h>
#include <stdint.h>

#include <cltrain.h>

#define CLT_F_HIDDEN __attribute__((visibility("hidden")))

/* The module's clt_options_t, field for field (64-bit fields first, so
 * neither side pads between them). */
typedef struct clt_f_options {
  int64_t batch;        /* global batch per optimizer step */
  int64_t seed;         /* initialisation and dropout (uint64 in C; Fortran has no unsigned) */
  int64_t warmup_steps; /* linear warm-up */
  int64_t total_steps;  /* cosine schedule: the whole run */
  int64_t step_size;    /* step schedule: steps between decays */
  int64_t check_every;  /* compare the replicas' parameters every N steps; 0: never */
  double bucket_mb;     /* gradient bucket size, MiB */
  int32_t accumulate;   /* micro-batches per step */
  int32_t optimizer;    /* CLT_OPT_* */
  int32_t nesterov;     /* SGD with momentum */
  int32_t schedule;     /* CLT_SCHED_* */
  int32_t precision;    /* CLT_F32 or CLT_F16 */
  int32_t decay_all;    /* AdamW: decay every parameter */
  float lr;             /* base learning rate */
  float momentum;       /* SGD */
  float weight_decay;
  float beta1, beta2, eps; /* Adam, AdamW */
  float clip;           /* global-norm clipping; 0: off */
  float gamma;          /* step schedule: decay factor */
  float min_lr;         /* cosine schedule: final learning rate */
  float loss_scale;     /* CLT_F16: the first dynamic loss scale */
} clt_f_options;

CLT_F_HIDDEN size_t clt_f_options_size(void);
CLT_F_HIDDEN void clt_f_options_defaults(clt_f_options *f, int optimizer);
CLT_F_HIDDEN int clt_f_trainer_create(const clt_model *m, const clt_devices *devs, clt_comm *comm,
                                      const clt_f_options *f, clt_trainer **out);
CLT_F_HIDDEN const char *clt_f_device_name(const clt_devices *devs, int i);
CLT_F_HIDDEN int clt_f_device_type(const clt_devices *devs, int i);

size_t clt_f_options_size(void) { return sizeof(clt_f_options); }

/* The library's defaults, with optimizer's own (AdamW's weight decay, SGD's
 * momentum) when optimizer is a CLT_OPT_* kind. */
void clt_f_options_defaults(clt_f_options *f, int optimizer) {
  clt_train_options o;
  clt_train_options_defaults(&o);
  if (optimizer >= 0 && optimizer < CLT_OPT_COUNT)
    clt_optimizer_defaults((clt_optimizer_kind)optimizer, &o.optimizer);
  f->batch = o.batch;
  f->seed = (int64_t)o.seed;
  f->warmup_steps = o.schedule.warmup_steps;
  f->total_steps = o.schedule.total_steps;
  f->step_size = o.schedule.step_size;
  f->check_every = o.check_every;
  f->bucket_mb = o.bucket_mb;
  f->accumulate = o.accumulate;
  f->optimizer = (int32_t)o.optimizer.kind;
  f->nesterov = o.optimizer.nesterov;
  f->schedule = (int32_t)o.schedule.kind;
  f->precision = (int32_t)o.precision;
  f->decay_all = o.decay_all;
  f->lr = o.schedule.lr;
  f->momentum = o.optimizer.momentum;
  f->weight_decay = o.optimizer.weight_decay;
  f->beta1 = o.optimizer.beta1;
  f->beta2 = o.optimizer.beta2;
  f->eps = o.optimizer.eps;
  f->clip = o.clip;
  f->gamma = o.schedule.gamma;
  f->min_lr = o.schedule.min_lr;
  f->loss_scale = o.loss_scale;
}

int clt_f_trainer_create(const clt_model *m, const clt_devices *devs, clt_comm *comm, const clt_f_options *f,
                         clt_trainer **out) {
  clt_train_options o;
  clt_train_options_defaults(&o);
  if (f) {
    o.batch = f->batch;
    o.seed = (uint64_t)f->seed;
    o.schedule.warmup_steps = f->warmup_steps;
    o.schedule.total_steps = f->total_steps;
    o.schedule.step_size = f->step_size;
    o.check_every = f->check_every;
    o.bucket_mb = f->bucket_mb;
    o.accumulate = f->accumulate;
    o.optimizer.kind = (clt_optimizer_kind)f->optimizer;
    o.optimizer.nesterov = f->nesterov;
    o.schedule.kind = (clt_schedule_kind)f->schedule;
    o.precision = (clt_dtype)f->precision;
    o.decay_all = f->decay_all;
    o.schedule.lr = f->lr;
    o.optimizer.momentum = f->momentum;
    o.optimizer.weight_decay = f->weight_decay;
    o.optimizer.beta1 = f->beta1;
    o.optimizer.beta2 = f->beta2;
    o.optimizer.eps = f->eps;
    o.clip = f->clip;
    o.schedule.gamma = f->gamma;
    o.schedule.min_lr = f->min_lr;
    o.loss_scale = f->loss_scale;
  }
  return clt_trainer_create(m, devs, comm, &o, out);
}

/* clt_device_info is a struct of fixed-size strings and sizes that the
 * module does not mirror either; these give what a Fortran program prints. */
const char *clt_f_device_name(const clt_devices *devs, int i) {
  const clt_device_info *info = clt_devices_info(devs, i);
  return info ? info->name : NULL;
}

int clt_f_device_type(const clt_devices *devs, int i) {
  const clt_device_info *info = clt_devices_info(devs, i);
  return info ? (int)info->type : 0;
}
