/*
 * optim.h: the optimizers as a table (src/core/optim.c). Each kind of
 * clt_optimizer_kind has one row: its name, the names of its state slots,
 * its defaults, the check of its settings, its host step and its kernel.
 * Whatever asks "which optimizer is this?" (the step, the checkpoint's
 * tensor names, the trainer's decay mask, the help texts) reads the row, so
 * a new optimizer is its enum value (cltrain.h), its row and host step
 * (optim.c), its kernel (cl/optim.cl), its plain-C reference
 * (src/ref/ref_optim.c) and its tests.
 */
#ifndef CLT_CORE_OPTIM_H
#define CLT_CORE_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include <cltrain.h>
#include <cltrain/opencl.h>

/* The most floats of state one parameter has (Adam's m and v). */
#define CLT__OPTIM_MAX_SLOTS 2

typedef struct clt__optimizer {
  /* --optimizer's word and the checkpoint's "kind": "adamw". */
  const char *name;
  /* Its state per parameter: nslots floats, each a tensor of the checkpoint
   * named "optim/<slot>/<i>.weight" (doc/checkpoint.md), in the order the
   * state arena holds them (slot k's n floats from k * n). */
  int nslots;
  const char *slots[CLT__OPTIM_MAX_SLOTS];
  /* The floats of state this configuration uses, fewer than nslots when a
   * setting turns state off (SGD without momentum keeps none). (optional:
   * NULL means nslots) */
  int (*state_per_param)(const clt_optimizer_config *cfg);
  /* What clt_optimizer_defaults fills in (kind aside). Settings the update
   * does not read keep the library's usual values. */
  clt_optimizer_config defaults;
  /* The clt_optimizer_config settings its update reads, by field name,
   * space-separated ("beta1 beta2 eps weight_decay"): what
   * clt_optimizer_reads answers, so that a command line can refuse a
   * setting the optimizer would ignore. */
  const char *reads;
  /* Refuse the settings the update cannot work with (CLT_EINVAL), naming
   * the setting, its value and what it must be. */
  int (*check)(const clt_optimizer_config *cfg);
  /* 1: the update divides or takes a square root, so its kernel is built
   * with -cl-fp32-correctly-rounded-divide-sqrt, and a device that cannot
   * round them so takes the host step instead (clt_optimizer_needs_host). */
  int exact_div_sqrt;
  /* 1: weight decay is decoupled from the gradient (p shrinks by lr * wd
   * before the update) and, as in GPT-2, the trainer applies it to the
   * matrices of linear, conv and attention only unless decay_all;
   * 0: it is L2, added to the gradient, on every parameter. */
  int decoupled_decay;
  /* The step in plain C on host memory: operation for operation the
   * kernel's float arithmetic (the library is built with
   * -ffp-contract=off), so the same bits. decay: NULL, or n values, 0
   * where weight decay does not apply. */
  void (*step_host)(const clt_optimizer_config *cfg, int64_t t, float lr, float gscale, float *p,
                    const float *grad, float *state, size_t n, const uint8_t *decay);
  /* Its kernel in cl/optim.cl. Every optimizer kernel's arguments begin
   * (p, poff, grad, goff, state, soff, n, lr, gscale) and end (decay, doff);
   * set_args sets the optimizer's own between them, from *arg on, and
   * leaves *arg at the first after them. */
  const char *kernel;
  int (*set_args)(cl_kernel k, cl_uint *arg, const clt_optimizer_config *cfg, int64_t t);
} clt__optimizer;

/* The row of a kind; NULL for a value that is no kind. */
const clt__optimizer *clt__optimizer_of(clt_optimizer_kind kind);

/* The row's check of cfg's settings (and that its kind is one): CLT_OK, or
 * CLT_EINVAL saying which setting and what it must be. */
int clt__optimizer_check(const clt_optimizer_config *cfg);

#endif
