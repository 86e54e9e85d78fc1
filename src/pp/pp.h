/*
 * pp.h: pipeline parallelism (issue 17) as the trainer sees it: a strategy
 * (strategy/strategy.h) that cuts the model into P stages on P ranks, with
 * D data-parallel replicas of each stage (ranks = P x D: rank r is stage
 * r % P of pipeline r / P), data parallelism (src/dp) summing each stage's
 * gradients over its D replicas.
 *
 *   strategy.c   the plan (the grid, the stage's replica and its
 *                activation sets) and the strategy's functions;
 *   pp.c         the grid, the communicators, weights tied across stages,
 *                the whole model's state gathered to rank 0 and taken back;
 *   cut.c        where the model is cut: by hand, evenly, or by cost;
 *   stage_spec.c a stage of the model as a spec of its own;
 *   schedule.c   one step's micro-batches through the stages, 1F1B or GPipe;
 *   stage_run.c  a stage's forward and backward of one micro-batch.
 */
#ifndef CLT_PP_PP_H
#define CLT_PP_PP_H

#include "strategy/strategy.h"

/* The pipeline, for the trainer's table (clt_train_options.pipeline > 1). */
extern const clt__strategy_i clt__pp_strategy;

#endif
