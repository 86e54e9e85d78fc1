/* ref_llama.h: plain-C references for the layers of Llama-family
 * transformers (src/nn/rmsnorm.c, swiglu.c, rope.c and the grouped-query
 * form of attention.c), forward and backward, in double so that the tests
 * can take finite differences of them. Not part of libcltrain. Shapes are
 * those of src/nn/nn.h; every gradient here is OVERWRITTEN. */
#ifndef CLT_REF_LLAMA_H
#define CLT_REF_LLAMA_H

#include <stddef.h>

/* RMSNorm over rows of D: y = x / sqrt(mean(x^2) + eps) * w; x (M, D),
 * w (D), rstd (M) = 1 / sqrt(mean(x^2) + eps). */
void ref_rmsnorm_forward(int M, int D, double eps, const double *x, const double *w, double *y, double *rstd);
void ref_rmsnorm_backward(int M, int D, double eps, const double *x, const double *w, const double *dy, double *dx,
                          double *dw);

/* SwiGLU's gate over rows of gu (N, 2I) = [g | u]: h (N, I) = silu(g) u;
 * dgu (N, 2I) from dh (N, I). */
void ref_swiglu_forward(int N, int I, const double *gu, double *h);
void ref_swiglu_backward(int N, int I, const double *gu, const double *dh, double *dgu);

/* The rotary embedding's inverse frequencies (D/2 of them) in float32 as
 * transformers computes them: 1 / theta^(2i / D), then, with llama3 set,
 * _compute_llama3_parameters' rescaling (factor, low_freq_factor,
 * high_freq_factor, original_max_position_embeddings). */
typedef struct ref_rope_cfg {
  double theta;
  int llama3;
  double factor, low_freq_factor, high_freq_factor, original_max;
} ref_rope_cfg;
void ref_rope_inv_freq(int D, const ref_rope_cfg *cfg, float *inv_freq);

/* Rotate, in place, heads [0, nrot) of D values in each row of x (B, T,
 * ld) at position t (the row's index in its sequence), as transformers'
 * apply_rotary_pos_emb (rotate-half): x1' = x1 cos - x2 sin, x2' = x2 cos
 * + x1 sin, x1 and x2 the head's halves, angle t * inv_freq[i]. inverse:
 * the transposed rotation (the backward). */
void ref_rope(int B, int T, int ld, int nrot, int D, const float *inv_freq, int inverse, double *x);

/* Causal self-attention with `heads` query heads sharing `kv_heads` key
 * and value heads (heads / kv_heads queries a group) over qkv (B, T, (H +
 * 2K) D): q | k | v, query head h at columns h D, its key at H D + (h /
 * G) D, its value at (H + K) D + (h / G) D. y (B, T, H D), lse (B, H, T). */
void ref_gqa_forward(int B, int T, int D, int heads, int kv_heads, const double *qkv, double *y, double *lse);
void ref_gqa_backward(int B, int T, int D, int heads, int kv_heads, const double *qkv, const double *dy, double *dqkv);

#endif
