/*
 * rope.h: an attention layer's rotary position embeddings as a spec line
 * gives them (rope_theta=, and rope_scaling=llama3 with its four numbers),
 * checked where they are written, and their inverse frequencies, computed
 * as transformers computes them (rope.c).
 */
#ifndef CLT_MODEL_ROPE_H
#define CLT_MODEL_ROPE_H

#include "model/layer.h"

/* Read the line's rope options into r (left zero when there are none). */
int clt__rope_parse(clt__spec_line *lc, clt_rope_spec *r);
/* With the head width D known: D even and at most 2 CLT_ROPE_MAX_PAIRS,
 * and r->inv_freq filled; nothing without rope_theta. */
int clt__rope_infer(clt__spec_line *lc, clt_rope_spec *r, int64_t D);
/* " rope 10000", " rope 500000 llama3 x8" for the summary ("" without). */
void clt__rope_describe(const clt_rope_spec *r, char *buf, size_t len);

#endif
