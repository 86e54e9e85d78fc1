/* ref_gpt.h: plain-C references for the transformer's layer kernels
 * (src/nn/embedding.c, attention.c, residual.c), forward and backward, in
 * double so that the tests can take finite differences of them; and the
 * token embedding's backward in float, in the kernel's summation order, to
 * compare bit for bit. Not part of libcltrain. Shapes are those of
 * src/nn/nn.h; every gradient here is OVERWRITTEN unless it says so. */
#ifndef CLT_REF_GPT_H
#define CLT_REF_GPT_H

#include <stddef.h>

/* tokens (N) as floats; a token that is not an integer in [0, V) is bad. */
int ref_token_ok(float t, int V);

/* y (N, C) = wte (V, C) rows by token, NaN rows for bad tokens. */
void ref_embedding_forward(int N, int V, int C, const float *tokens, const double *wte, double *y);
/* dwte (V, C) = the scatter-add of dy (N, C) by token (bad tokens add
 * nothing). */
void ref_embedding_backward(int N, int V, int C, const float *tokens, const double *dy, double *dwte);
/* dwte (V, C) += dy rows in float, row by row in increasing order: the
 * kernel's order, so its result is the same bits (ACCUMULATED). */
void ref_embedding_backward_f32(int N, int V, int C, const float *tokens, const float *dy, float *dwte);

/* y (B, T, C) = x + wpe[t] (wpe (>= T, C)). */
void ref_posembed_forward(int B, int T, int C, const double *x, const double *wpe, double *y);
/* dwpe (T, C) = the sum over b of dy[b] (rows T.. of a larger table are the
 * caller's). */
void ref_posembed_backward(int B, int T, int C, const double *dy, double *dwpe);

/* Causal self-attention with `heads` heads over qkv (B, T, 3C) (q | k | v,
 * head h at columns h*D of each third): y (B, T, C), lse (B, heads, T). */
void ref_attention_forward(int B, int T, int C, int heads, const double *qkv, double *y, double *lse);
/* dqkv (B, T, 3C) from dy (B, T, C), by the definition (softmax Jacobian). */
void ref_attention_backward(int B, int T, int C, int heads, const double *qkv, const double *dy, double *dqkv);

/* y = a + b over n elements. */
void ref_add(size_t n, const double *a, const double *b, double *y);

#endif
