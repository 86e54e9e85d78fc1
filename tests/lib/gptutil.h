/*
 * gptutil.h: what the GPT training suites share (test_gpt_train, and
 * test_gpt_dp under MPI): a small GPT spec, deterministic pseudo-text as
 * an llm.c token file, and the parameter layout of that GPT, so a test
 * can tell matrices from biases, norms and embeddings.
 */
#ifndef CLT_GPTUTIL_H
#define CLT_GPTUTIL_H

#include <stdint.h>

/* Context 16, width 16, 2 heads, 2 blocks, vocabulary 37 (space, a-z,
 * 0-9), the output tied to the token embedding: 5328 parameters. */
extern const char *gu_spec;
/* The same with dropout 0.1 after each GELU (dropout masks drawn per step
 * and sample: what a resumed run must draw again). */
extern const char *gu_spec_dropout;

#define GU_T 16
#define GU_VOCAB 37
#define GU_PARAMS 5328

/* n tokens of pseudo-text, from seed: words of a fixed list (and now and
 * then a number) separated by spaces, so that the next letter of a word is
 * easy to guess and the next word is not. Token ids: space 0, a-z 1-26,
 * 0-9 27-36. */
void gu_text(uint32_t *tokens, int64_t n, uint64_t seed);
/* Write gu_text(n, seed) as a token file at path (clt_tokens_write): 0, or
 * -1 after printing why. */
int gu_write_tokens(const char *path, int64_t n, uint64_t seed);

/* The kinds of parameter tensor, for the weight-decay mask. */
typedef enum gu_class { GU_MATRIX, GU_BIAS, GU_NORM, GU_EMBEDDING } gu_class;

typedef struct gu_tensor {
  const char *name;
  int64_t offset, count;
  gu_class cls;
} gu_tensor;

/* gu_spec's parameter tensors in arena order (gu_spec_dropout's are the
 * same: dropout has none); returns their number, at most max. The offsets
 * add up from the layer table's order (spec.h): each layer's tensors as
 * its infer() adds them; a tied tensor has no place of its own. */
int gu_layout(gu_tensor *out, int max);

const char *gu_class_name(gu_class c);

/* 1 when parameter i is an element of an attention layer's key bias (the
 * middle third of qkv.bias). Its gradient is zero in exact arithmetic:
 * adding q . b_k to every score of a row leaves the row's softmax as it
 * is. In float it is rounding noise alone, which Adam, dividing by its
 * own running size, turns into steps of up to lr: those values wander
 * differently under any other summation order and change nothing the
 * model computes. */
int gu_is_key_bias(int64_t i);

#endif
