/*
 * nn.h: the layer kernels of cltrain (layer 6 of DESIGN.md) as functional
 * host wrappers over explicit float32 tensor views: forward and backward of
 * linear, conv2d, max/average/global-average pooling, elementwise
 * activations, dropout, layernorm, softmax cross-entropy, flatten, and the
 * transformer's token and position embeddings, causal self-attention
 * (multi-head and grouped-query), rotary position embeddings, RMSNorm,
 * SwiGLU's gate and residual adds.
 *
 * Internal to the library (not installed): the layer structs of the model
 * layer call these. Each function checks every shape first and returns
 * CLT_ESHAPE with a message that names the op and the shapes; then it only
 * enqueues work on the context's in-order queue and returns without waiting.
 *
 * Conventions shared by every function here
 *   - Tensors are row-major views (clt_tensor); images are NCHW.
 *   - Outputs are overwritten, except parameter gradients (dw, db, dgamma,
 *     dbeta, dwte, dwpe), which are ACCUMULATED (+=): zero them once per
 *     optimizer step and several micro-batches' backward passes add up,
 *     which is gradient accumulation. Input gradients (dx) are always
 *     overwritten (clt_nn_accumulate adds one on purpose).
 *   - Outputs must not overlap inputs unless a function says so.
 *   - Sizes are limited to what 32-bit indices address (2^31 - 1 elements
 *     per tensor and per workspace chunk); larger is CLT_ESHAPE.
 *   - Mixed precision: the activations, dropout, layernorm, softmax
 *     cross-entropy, pooling and the transformer's layers take their
 *     activations and activation gradients (x, y, dy, dx, logits, dlogits,
 *     qkv, dqkv) as f32 or f16, all of one call alike (else CLT_ESHAPE
 *     naming both). f16 is storage only: the kernels compute in float and
 *     round each stored result to nearest even, so an f16 output is the f32
 *     path's on the same (half) inputs, rounded; beyond 65504 it is inf.
 *     Parameters, their gradients, saved statistics (mean, rstd, lse),
 *     losses and indices stay f32 / i32.
 */
#ifndef CLT_NN_H
#define CLT_NN_H

#include "core/internal.h"

/* ---- linear: y = x w^T + b ----------------------------------------------- */

/* x (N, in), w (out, in), b (out) or NULL, y (N, out). */
int clt_nn_linear_forward(clt_context *ctx, const clt_tensor *x, const clt_tensor *w, const clt_tensor *b,
                          const clt_tensor *y);
/* Bytes of the context's scratch space (clt__context_scratch) linear
 * forward and backward use for N samples with activations of dtype: none
 * for f32; f32 copies of x and y (or dy) for f16. */
size_t clt_nn_linear_scratch_bytes(int64_t N, int64_t in, int64_t out, clt_dtype dtype);
/* dy (N, out). dx (N, in) = dy w is overwritten; NULL skips it (the first
 * layer needs no input gradient). dw (out, in) += dy^T x and db (out) +=
 * sum over N of dy are accumulated; db is NULL when the layer has no bias. */
int clt_nn_linear_backward(clt_context *ctx, const clt_tensor *x, const clt_tensor *w, const clt_tensor *dy,
                           const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db);

/* ---- conv2d ---------------------------------------------------------------- */

/* How conv2d's forward is computed; the backward is always im2col + GEMM. */
typedef enum clt_nn_conv2d_algo {
  CLT_NN_CONV_AUTO = 0,   /* direct when Cin*KH*KW is small, else im2col */
  CLT_NN_CONV_IM2COL = 1, /* im2col + one GEMM per chunk of samples */
  CLT_NN_CONV_DIRECT = 2  /* one work-item per output (the workspace is checked but not used) */
} clt_nn_conv2d_algo;

typedef struct clt_nn_conv2d_cfg {
  int stride_h, stride_w;  /* >= 1 */
  int pad_h, pad_w;        /* >= 0, zero padding on both sides */
  clt_nn_conv2d_algo algo; /* forward only; 0 (auto) when left out of an initializer */
} clt_nn_conv2d_cfg;

/* Output size of a window op along one axis: (in + 2 pad - k) / stride + 1,
 * or 0 when the window does not fit. */
int64_t clt_nn_out_size(int64_t in, int64_t k, int stride, int pad);

/* Bytes of workspace that let conv2d forward and backward handle `samples`
 * samples per GEMM: samples * (cin*kh*kw + cout) * oh*ow floats. Any
 * workspace that holds at least one sample's share works: the batch is then
 * processed in chunks of as many samples as fit (more fit, fewer and larger
 * GEMMs, faster). */
size_t clt_nn_conv2d_workspace_bytes(int64_t samples, int64_t cin, int64_t cout, int64_t kh, int64_t kw, int64_t oh,
                                     int64_t ow);

/* x (N, Cin, H, W), w (Cout, Cin, KH, KW), b (Cout) or NULL,
 * y (N, Cout, OH, OW), workspace: any f32 view (its size counts, not its
 * shape; see clt_nn_conv2d_workspace_bytes). */
int clt_nn_conv2d_forward(clt_context *ctx, const clt_nn_conv2d_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                          const clt_tensor *b, const clt_tensor *y, const clt_tensor *workspace);
/* dy (N, Cout, OH, OW). dx (N, Cin, H, W) overwritten, or NULL to skip;
 * dw (Cout, Cin, KH, KW) and db (Cout, or NULL) accumulated. */
int clt_nn_conv2d_backward(clt_context *ctx, const clt_nn_conv2d_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                           const clt_tensor *dy, const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db,
                           const clt_tensor *workspace);

/* ---- pooling -------------------------------------------------------------- */

typedef struct clt_nn_pool2d_cfg {
  int kernel_h, kernel_w; /* >= 1 */
  int stride_h, stride_w; /* >= 1 */
  int pad_h, pad_w;       /* 0 <= pad <= kernel / 2, as in PyTorch */
} clt_nn_pool2d_cfg;

/* Max pooling. x (N, C, H, W), y (N, C, OH, OW), argmax (N, C, OH, OW) i32:
 * for each output, the index ih*W + iw in its input plane of the maximum
 * (the first one on ties; a NaN wins, so NaNs propagate). Padding never
 * wins. */
int clt_nn_maxpool2d_forward(clt_context *ctx, const clt_nn_pool2d_cfg *cfg, const clt_tensor *x, const clt_tensor *y,
                             const clt_tensor *argmax);
/* dx (N, C, H, W) = the gradient routed back through argmax (overwritten). */
int clt_nn_maxpool2d_backward(clt_context *ctx, const clt_nn_pool2d_cfg *cfg, const clt_tensor *argmax,
                              const clt_tensor *dy, const clt_tensor *dx);

/* Average pooling; padding counts as zeros (PyTorch's count_include_pad),
 * so every window divides by kernel_h * kernel_w. Shapes as for max. */
int clt_nn_avgpool2d_forward(clt_context *ctx, const clt_nn_pool2d_cfg *cfg, const clt_tensor *x, const clt_tensor *y);
int clt_nn_avgpool2d_backward(clt_context *ctx, const clt_nn_pool2d_cfg *cfg, const clt_tensor *dy,
                              const clt_tensor *dx);

/* Global average pooling: x (N, C, H, W) -> y (N, C) or (N, C, 1, 1). */
int clt_nn_global_avgpool_forward(clt_context *ctx, const clt_tensor *x, const clt_tensor *y);
int clt_nn_global_avgpool_backward(clt_context *ctx, const clt_tensor *dy, const clt_tensor *dx);

/* ---- elementwise activations ---------------------------------------------- */

typedef enum clt_nn_act {
  CLT_NN_RELU = 0,       /* max(x, 0) */
  CLT_NN_LEAKY_RELU = 1, /* x > 0 ? x : alpha x */
  CLT_NN_GELU = 2,       /* the tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
  CLT_NN_TANH = 3,
  CLT_NN_SIGMOID = 4,
  CLT_NN_SILU = 5        /* x sigmoid(x) (Llama's MLP) */
} clt_nn_act;

const char *clt_nn_act_name(clt_nn_act act);
/* 1 when the backward pass needs the forward's input x (leaky_relu, gelu, silu),
 * 0 when it needs the output y (relu, tanh, sigmoid). */
int clt_nn_act_backward_needs_input(clt_nn_act act);

/* y = act(x), same number of elements; alpha is leaky_relu's slope (ignored
 * by the others). y may be x (in place), but then the input is gone, so only
 * for acts whose backward needs the output. */
int clt_nn_act_forward(clt_context *ctx, clt_nn_act act, float alpha, const clt_tensor *x, const clt_tensor *y);
/* dx = dy act'(.), from the forward's input x or output y as
 * clt_nn_act_backward_needs_input says (the other may be NULL). dx may be
 * dy (in place). */
int clt_nn_act_backward(clt_context *ctx, clt_nn_act act, float alpha, const clt_tensor *x, const clt_tensor *y,
                        const clt_tensor *dy, const clt_tensor *dx);

/* ---- dropout -------------------------------------------------------------- */

/* Inverted dropout with drop probability p in [0, 1): each element is kept
 * with probability 1 - p and scaled by 1 / (1 - p). The mask is a pure
 * function of (seed, step, index_base + i): element e takes word e % 4 of
 * Philox4x32-10 with key (seed low, seed high) and counter (e/4 low,
 * e/4 high, step low, step high), and is kept when (word >> 8) >=
 * round(p * 2^24). So masks are bit-identical on every device and in the
 * plain-C reference, and nothing is stored between forward and backward.
 * index_base lets a data-parallel replica use the global position of its
 * samples (first global sample * features), so R replicas draw the same
 * mask as one device with the whole batch. For evaluation, do not call it
 * (the layer is the identity). y may be x. */
int clt_nn_dropout_forward(clt_context *ctx, float p, uint64_t seed, uint64_t step, uint64_t index_base,
                           const clt_tensor *x, const clt_tensor *y);
/* dx = dy * mask / (1 - p), the same mask as the forward with the same
 * (p, seed, step, index_base). dx may be dy. */
int clt_nn_dropout_backward(clt_context *ctx, float p, uint64_t seed, uint64_t step, uint64_t index_base,
                            const clt_tensor *dy, const clt_tensor *dx);

/* ---- layernorm over the last dimension ------------------------------------ */

/* x (..., D) seen as M rows of D; y like x; gamma, beta (D);
 * mean, rstd (M) saved for backward (rstd = 1 / sqrt(var + eps), with the
 * biased variance, as PyTorch). */
int clt_nn_layernorm_forward(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *gamma,
                             const clt_tensor *beta, const clt_tensor *y, const clt_tensor *mean,
                             const clt_tensor *rstd);
/* dx like x (overwritten; may be dy); dgamma, dbeta (D) accumulated. */
int clt_nn_layernorm_backward(clt_context *ctx, const clt_tensor *x, const clt_tensor *gamma, const clt_tensor *mean,
                              const clt_tensor *rstd, const clt_tensor *dy, const clt_tensor *dx,
                              const clt_tensor *dgamma, const clt_tensor *dbeta);

/* ---- softmax cross-entropy (forward and backward fused) ------------------ */

/* logits (N, C), labels (N) i32 in [0, C).
 *   losses (N): each sample's -log softmax(logits)[label] (overwritten);
 *   loss (1): the SUM of losses over the batch, summed in a fixed order;
 *   correct (1) i32 or NULL: how many rows' argmax (first on ties) is the
 *     label (overwritten, not accumulated);
 *   dlogits (N, C) or NULL: grad_scale * (softmax - onehot(label)), the
 *     gradient of grad_scale * loss, NOT divided by N: the trainer divides by
 *     the global batch (grad_scale is for loss scaling; 1 otherwise).
 * ignore_index must be negative (else CLT_EINVAL): a row whose label equals
 * it (padding of a language model's last sequence, say) gives loss 0, a
 * zero dlogits row and does not count in correct; pass -1 when no label is
 * ever negative. Stable for any logits whose row maximum minus minimum is a
 * finite float (the row maximum is subtracted before exponentiating). Any
 * other label outside [0, C) makes that row's loss and dlogits NaN, which
 * the trainer's non-finite check reports. dlogits may be logits (in place).
 * One work-group per row reduces it in local memory, so a vocabulary of
 * 50257 is read by 256 items at once. */
int clt_nn_softmax_xent(clt_context *ctx, const clt_tensor *logits, const clt_tensor *labels, int ignore_index,
                        float grad_scale, const clt_tensor *dlogits, const clt_tensor *losses, const clt_tensor *loss,
                        const clt_tensor *correct);

/* ---- regression losses (forward and backward fused) ---------------------- */

/* kind CLT_LOSS_MSE, CLT_LOSS_L1 or CLT_LOSS_HUBER (with delta > 0; the
 * others ignore it) over M values: y (M) act, targets (M) f32.
 *   losses (M) f32: each value's loss (PyTorch's, reduction='none');
 *   sq_errors (M) f32: each (y - target)^2, what an RMSE is made of;
 *   loss, sq_error (1) f32: the SUMS of losses and sq_errors, each summed
 *     in a fixed order (as softmax_xent's loss);
 *   dy (M) act or NULL: grad_scale * d(loss)/dy, the gradient of
 *     grad_scale * loss, NOT divided by M (the trainer divides by the
 *     global count of target values). L1's gradient is 0 where y equals
 *     the target, as PyTorch's. dy may be y (in place).
 * A NaN output or target gives a NaN loss and gradient there. */
int clt_nn_regression_loss(clt_context *ctx, clt_loss_kind kind, float delta, const clt_tensor *y,
                           const clt_tensor *targets, float grad_scale, const clt_tensor *dy, const clt_tensor *losses,
                           const clt_tensor *sq_errors, const clt_tensor *loss, const clt_tensor *sq_error);

/* ---- the transformer's layers (GPT-2) --------------------------------------
 * Activations ("act": x, y, dy, qkv, dqkv) are f32 or f16 as above, all of
 * one call alike; embedding tables, their gradients and lse are f32.
 * Tokens travel as f32 holding exact integer ids (exact below 2^24). */

/* ---- token embedding ---- */
/* tokens (N) f32, wte (V, C) f32, y (N, C) act: y[i] = wte[tokens[i]]. A
 * token that is not an integer in [0, V) gives a NaN row (the trainer's
 * non-finite check reports it). */
int clt_nn_embedding_forward(clt_context *ctx, const clt_tensor *tokens, const clt_tensor *wte, const clt_tensor *y);
/* dwte (V, C) f32 += the scatter-add of the rows of dy (N, C) act by token.
 * DETERMINISTIC: dwte[v][c] becomes (((dwte[v][c] + dy[i0][c]) + dy[i1][c])
 * + ...) over the rows i0 < i1 < ... holding token v, in increasing order,
 * as one thread walking the rows would leave it: the same bits on every
 * run and device, with no atomics. Rows whose token is invalid (NaN in the
 * forward) add nothing. Uses N ints of the context's scratch space
 * (clt_nn_embedding_scratch_bytes): each row's next row with the same
 * token. */
int clt_nn_embedding_backward(clt_context *ctx, const clt_tensor *tokens, const clt_tensor *dy, const clt_tensor *dwte);
size_t clt_nn_embedding_scratch_bytes(int64_t N);

/* ---- learned position embedding ---- */
/* x (B, T, C) act, wpe (Tmax, C) f32 with T <= Tmax, y (B, T, C) act =
 * x + wpe[t]; y may be x. */
int clt_nn_posembed_forward(clt_context *ctx, const clt_tensor *x, const clt_tensor *wpe, const clt_tensor *y);
/* dwpe (Tmax, C) f32 rows 0..T-1 += the sum over b (in increasing order,
 * added one by one) of dy[b][t] (dy (B, T, C) act); rows T.. are left
 * alone. The input gradient is dy itself. */
int clt_nn_posembed_backward(clt_context *ctx, const clt_tensor *dy, const clt_tensor *dwpe);

/* ---- causal multi-head self-attention core ----
 * Between the fused QKV linear and the output linear (which the model layer
 * runs with clt_nn_linear_*). heads must divide C; D = C / heads. */
/* qkv (B, T, 3C) act: for each position q | k | v, each C wide, head h at
 * columns [h*D, (h+1)*D) of each third (GPT-2's c_attn layout).
 * y (B, T, C) act (overwritten): per head softmax(q k^T / sqrt(D), causal)
 * v, heads concatenated in the same column layout.
 * lse (B, heads, T) f32 (overwritten): each query row's log-sum-exp of the
 * scaled, masked scores, saved for the backward.
 * Fused (cl/attention.cl): the T x T scores are never stored; the backward
 * recomputes them from qkv and lse. */
int clt_nn_attention_forward(clt_context *ctx, int heads, const clt_tensor *qkv, const clt_tensor *y,
                             const clt_tensor *lse);
/* dy (B, T, C) act; dqkv (B, T, 3C) act is overwritten (q, k and v parts).
 * qkv, y and lse are the forward's. */
int clt_nn_attention_backward(clt_context *ctx, int heads, const clt_tensor *qkv, const clt_tensor *y,
                              const clt_tensor *lse, const clt_tensor *dy, const clt_tensor *dqkv);
/* Bytes of the context's scratch space the backward uses: one float per
 * query row and head (B x heads x T), rowsum(dy * y) passed between its
 * two kernels; the forward uses none. For the model layer to reserve when
 * it builds a replica. */
size_t clt_nn_attention_scratch_bytes(int64_t B, int64_t T, int64_t C, int heads, clt_dtype dtype);

/* Grouped-query attention (Llama's): `heads` query heads share `kv_heads`
 * key and value heads (kv_heads divides heads; G = heads / kv_heads query
 * heads a group; kv_heads = heads is the multi-head attention above, the
 * same bits, and kv_heads = 1 multi-query). qkv (B, T, (H + 2K) D) act:
 * each row q | k | v, query head h at columns h D, its key head h / G at
 * H D + (h / G) D, its value head at (H + K) D + (h / G) D; y and dy (B,
 * T, C = H D), lse (B, H, T) as above; dqkv like qkv, overwritten (the key
 * and value gradients summed over each group's query heads in a fixed
 * order). The scratch: (B H T + 2 B (H + K) D TP) floats, TP = T rounded up
 * to 16; nothing of size T x T. */
int clt_nn_gqa_forward(clt_context *ctx, int heads, int kv_heads, const clt_tensor *qkv, const clt_tensor *y,
                       const clt_tensor *lse);
int clt_nn_gqa_backward(clt_context *ctx, int heads, int kv_heads, const clt_tensor *qkv, const clt_tensor *y,
                        const clt_tensor *lse, const clt_tensor *dy, const clt_tensor *dqkv);
size_t clt_nn_gqa_scratch_bytes(int64_t B, int64_t T, int64_t C, int heads, int kv_heads, clt_dtype dtype);

/* ---- rotary position embeddings (RoPE) ----
 * In place on the query and key heads of a fused qkv (B, T, (H + 2K) D)
 * act (as clt_nn_gqa_*), transformers' rotate-half convention: each head's
 * halves x1, x2 become x1 cos a - x2 sin a and x2 cos a + x1 sin a with a =
 * t inv_freq[i] (a float product), t the row's position in its sequence
 * (0 .. T-1); inv_freq (D / 2) f32. The backward applies the transposed
 * rotation to dqkv's query and key heads (the gradient at the rotated
 * values becomes the gradient at the unrotated ones); values untouched. */
int clt_nn_rope_forward(clt_context *ctx, int heads, int kv_heads, const clt_tensor *inv_freq, const clt_tensor *qkv);
int clt_nn_rope_backward(clt_context *ctx, int heads, int kv_heads, const clt_tensor *inv_freq,
                         const clt_tensor *dqkv);

/* ---- Llama's RMSNorm over the last dimension ---- */
/* x (..., D) act seen as M rows of D; w (D) f32; y like x; rstd (M) f32 =
 * 1 / sqrt(mean(x^2) + eps) saved for the backward: y = (x rstd) w. */
int clt_nn_rmsnorm_forward(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *w, const clt_tensor *y,
                           const clt_tensor *rstd);
/* dx like x (overwritten; may be dy); dw (D) accumulated. */
int clt_nn_rmsnorm_backward(clt_context *ctx, const clt_tensor *x, const clt_tensor *w, const clt_tensor *rstd,
                            const clt_tensor *dy, const clt_tensor *dx, const clt_tensor *dw);

/* ---- SwiGLU's gate ---- */
/* gu (N, 2I) act, the fused gate and up projections [g | u] of each row;
 * h (N, I) act = silu(g) u (overwritten). */
int clt_nn_swiglu_forward(clt_context *ctx, const clt_tensor *gu, const clt_tensor *h);
/* dh (N, I) act; dgu like gu (overwritten; may be gu): [dh u silu'(g) |
 * dh silu(g)]. */
int clt_nn_swiglu_backward(clt_context *ctx, const clt_tensor *gu, const clt_tensor *dh, const clt_tensor *dgu);

/* ---- residual ---- */
/* y = x + skip, all act alike with the same element count; y may be x or
 * skip. */
int clt_nn_residual_forward(clt_context *ctx, const clt_tensor *x, const clt_tensor *skip, const clt_tensor *y);
/* g += dy (act alike, the same element count): the skip branch's gradient
 * added where the branch started. */
int clt_nn_accumulate(clt_context *ctx, const clt_tensor *dy, const clt_tensor *g);

/* ---- flatten -------------------------------------------------------------- */

/* A view change, no kernel: x (N, ...) as out (N, prod(...)); its backward
 * is the same view of dy. */
int clt_nn_flatten(const clt_tensor *x, clt_tensor *out);

/* ---- concat along the first dimension after the batch (src/nn/concat.c) -- */
/* y (N, A + B, ...) = [a (N, A, ...) | b (N, B, ...)] per sample, all act
 * of one dtype (a flat sample's features alike). */
int clt_nn_concat_forward(clt_context *ctx, const clt_tensor *a, const clt_tensor *b, const clt_tensor *y);
/* da = dy's first part, db = its second (overwritten); either may be NULL
 * (not wanted: its size is dy's less the other's). */
int clt_nn_concat_backward(clt_context *ctx, const clt_tensor *dy, const clt_tensor *da, const clt_tensor *db);

/* ---- groupnorm (src/nn/groupnorm.c) ---------------------------------------- */
/* torch.nn.GroupNorm(G, C): x (N, C, S...) with C % G == 0 seen as N * G
 * rows of (C / G) * S values; y like x = (x - mean) rstd w[c] + b[c]; w, b
 * (C) f32; mean, rstd (N * G) f32 saved (biased variance, as PyTorch). */
int clt_nn_groupnorm_forward(clt_context *ctx, int groups, float eps, const clt_tensor *x, const clt_tensor *w,
                             const clt_tensor *b, const clt_tensor *y, const clt_tensor *mean, const clt_tensor *rstd);
/* dx like x (overwritten; NULL: not wanted); dw, db (C) accumulated. */
int clt_nn_groupnorm_backward(clt_context *ctx, int groups, const clt_tensor *x, const clt_tensor *w,
                              const clt_tensor *mean, const clt_tensor *rstd, const clt_tensor *dy,
                              const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db);
/* ---- 1-D, 3-D and dilated convolutions, 1-D and 3-D pooling (conv_nd.c, pool_nd.c) ----
 * Tensors are (N, C, spatial...) with 1 to 3 spatial axes, in PyTorch's
 * order (L; H, W; D, H, W); the per-axis options are in that order too. */
#define CLT_NN_MAX_SPATIAL 3

typedef struct clt_nn_convnd_cfg {
  int dims;                             /* spatial axes: 1, 2 or 3 */
  int stride[CLT_NN_MAX_SPATIAL];       /* >= 1 */
  int pad[CLT_NN_MAX_SPATIAL];          /* >= 0, zeros on both sides */
  int dilation[CLT_NN_MAX_SPATIAL];     /* >= 1 (0 is taken as 1) */
} clt_nn_convnd_cfg;

/* Output size along one axis of a dilated window: (in + 2 pad - dil (k - 1)
 * - 1) / stride + 1, or 0 when the dilated window does not fit. */
int64_t clt_nn_out_size_dilated(int64_t in, int64_t k, int stride, int pad, int dilation);
/* Workspace for `samples` samples per GEMM: samples * (cin * kernel_elems +
 * cout) * out_elems floats (kernel_elems, out_elems: products over the
 * spatial axes); one sample's share is enough, more makes fewer GEMMs. */
size_t clt_nn_convnd_workspace_bytes(int64_t samples, int64_t cin, int64_t cout, int64_t kernel_elems,
                                     int64_t out_elems);
/* The context's scratch a convolution's backward may take for `samples`
 * samples (the CPU devices' implicit GEMMs keep each sample's weight
 * gradient there, at most 16 MB of them a pass); conv1d/2d/3d alike. */
size_t clt_nn_conv_scratch_bytes(int64_t samples, int64_t cin, int64_t cout, int64_t kernel_elems);
/* x (N, Cin, S...), w (Cout, Cin, K...), b (Cout) or NULL, y (N, Cout, O...). */
int clt_nn_convnd_forward(clt_context *ctx, const clt_nn_convnd_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                          const clt_tensor *b, const clt_tensor *y, const clt_tensor *workspace);
/* dx overwritten (or NULL to skip), dw and db (or NULL) accumulated. */
int clt_nn_convnd_backward(clt_context *ctx, const clt_nn_convnd_cfg *cfg, const clt_tensor *x, const clt_tensor *w,
                           const clt_tensor *dy, const clt_tensor *dx, const clt_tensor *dw, const clt_tensor *db,
                           const clt_tensor *workspace);

typedef struct clt_nn_poolnd_cfg {
  int dims;                         /* spatial axes: 1, 2 or 3 */
  int kernel[CLT_NN_MAX_SPATIAL];   /* >= 1 */
  int stride[CLT_NN_MAX_SPATIAL];   /* >= 1; no padding */
} clt_nn_poolnd_cfg;

/* Max pooling: x (N, C, S...), y and argmax (i32) (N, C, O...); argmax is
 * the index of each window's maximum in its input volume ((id*H + ih)*W +
 * iw), the first on ties, a NaN winning. */
int clt_nn_maxpoolnd_forward(clt_context *ctx, const clt_nn_poolnd_cfg *cfg, const clt_tensor *x, const clt_tensor *y,
                             const clt_tensor *argmax);
int clt_nn_maxpoolnd_backward(clt_context *ctx, const clt_nn_poolnd_cfg *cfg, const clt_tensor *argmax,
                              const clt_tensor *dy, const clt_tensor *dx);
/* Average pooling (the mean of each window); dx overwritten. */
int clt_nn_avgpoolnd_forward(clt_context *ctx, const clt_nn_poolnd_cfg *cfg, const clt_tensor *x, const clt_tensor *y);
int clt_nn_avgpoolnd_backward(clt_context *ctx, const clt_nn_poolnd_cfg *cfg, const clt_tensor *dy,
                              const clt_tensor *dx);
/* ---- upsample (src/nn/upsample.c) -------------------------------------------- */

/* torch.nn.Upsample(scale_factor=S, align_corners=False): nearest, or
 * linear / bilinear / trilinear by the number of spatial axes. */
typedef enum clt_nn_upsample_mode { CLT_NN_UPSAMPLE_NEAREST = 0, CLT_NN_UPSAMPLE_LINEAR = 1 } clt_nn_upsample_mode;

/* x (N, C, L), (N, C, H, W) or (N, C, D, H, W) act; y act of the same rank
 * with every spatial axis `scale` (1 to 64) times x's. */
int clt_nn_upsample_forward(clt_context *ctx, clt_nn_upsample_mode mode, int scale, const clt_tensor *x,
                            const clt_tensor *y);
/* dx like x (overwritten) from dy like y: each input cell gathers the
 * outputs that read it (no atomics; the same bits on every run). */
int clt_nn_upsample_backward(clt_context *ctx, clt_nn_upsample_mode mode, int scale, const clt_tensor *dy,
                             const clt_tensor *dx);

/* ---- transposed convolution (src/nn/convtranspose.c) ------------------------ */

/* Per spatial axis, outermost first (only the tensors' axes are read):
 * stride >= 1, zero padding >= 0 taken off both sides of the output, and
 * output padding from 0 to stride - 1 added at its end (PyTorch's). */
typedef struct clt_nn_convt_cfg {
  int stride[3], pad[3], output_pad[3];
} clt_nn_convt_cfg;

/* Output size along one axis: (in - 1) stride - 2 pad + k + output_pad, or
 * 0 when that leaves nothing. */
int64_t clt_nn_convt_out_size(int64_t in, int64_t k, int stride, int pad, int output_pad);
/* Bytes of workspace for `samples` samples per GEMM: samples * (cout *
 * kernel_cells + cin) * in_cells floats; any workspace that holds one
 * sample's share works (then more chunks). */
size_t clt_nn_convtranspose_workspace_bytes(int64_t samples, int64_t cin, int64_t cout, int64_t kernel_cells,
                                            int64_t in_cells);
/* x (N, Cin, spatial...) act with 1 to 3 spatial axes, w (Cin, Cout,
 * kernel...) f32 as torch.nn.ConvTranspose*d's weight, b (Cout) or NULL,
 * y (N, Cout, out...) act, workspace any f32 view. */
int clt_nn_convtranspose_forward(clt_context *ctx, const clt_nn_convt_cfg *cfg, const clt_tensor *x,
                                 const clt_tensor *w, const clt_tensor *b, const clt_tensor *y,
                                 const clt_tensor *workspace);
/* dy like y. dx like x overwritten, or NULL to skip; dw like w and db
 * (Cout, or NULL) accumulated. */
int clt_nn_convtranspose_backward(clt_context *ctx, const clt_nn_convt_cfg *cfg, const clt_tensor *x,
                                  const clt_tensor *w, const clt_tensor *dy, const clt_tensor *dx,
                                  const clt_tensor *dw, const clt_tensor *db, const clt_tensor *workspace);
/* ---- batchnorm over the channels of x (N, C, S) (nn/batchnorm.c) -------- */

/* part (C, 2): per channel c the mean of its N*S values and the sum of their
 * squared deviations from it (what a replica gives towards the global
 * batch's statistics). */
int clt_nn_batchnorm_stats(clt_context *ctx, const clt_tensor *x, const clt_tensor *part);
/* y = (x - mean) / sqrt(var + eps) * w + b per channel; mean, var, w, b (C). */
int clt_nn_batchnorm_forward(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *mean,
                             const clt_tensor *var, const clt_tensor *w, const clt_tensor *b, const clt_tensor *y);
/* Per channel the sums over x's values of dy and dy * xhat (xhat = (x -
 * mean) / sqrt(var + eps)): accumulated into db and dw (C), and written to
 * part (C, 2) as (sum dy, sum dy * xhat). */
int clt_nn_batchnorm_backward_sums(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *mean,
                                   const clt_tensor *var, const clt_tensor *dy, const clt_tensor *dw,
                                   const clt_tensor *db, const clt_tensor *part);
/* dx = w / sqrt(var + eps) * (dy - gdy - xhat * gdyx), gdy and gdyx (C) the
 * means of dy and dy * xhat over the global batch (overwritten). */
int clt_nn_batchnorm_backward_input(clt_context *ctx, float eps, const clt_tensor *x, const clt_tensor *mean,
                                    const clt_tensor *var, const clt_tensor *w, const clt_tensor *gdy,
                                    const clt_tensor *gdyx, const clt_tensor *dy, const clt_tensor *dx);
/* Tests only: 1 makes batchnorm's kernels those of devices whose items run
 * side by side (GPUs) on every device, 0 chooses by device. */
void clt__nn_batchnorm_strided(int on);
/* The statistics of one device's batch without a trip to the host: from
 * part (C, 2) of clt_nn_batchnorm_stats over count values a channel,
 * stats (3C) = the means, the biased variances and the unbiased ones. */
int clt_nn_batchnorm_finish_stats(clt_context *ctx, double count, const clt_tensor *part, const clt_tensor *stats);
/* The running statistics (C) moved towards the batch's: rmean = (1 - m)
 * rmean + m mean, rvar = (1 - m) rvar + m uvar, in float multiplies and
 * adds, never fused: the host's bits on every device. */
int clt_nn_batchnorm_running(clt_context *ctx, float momentum, const clt_tensor *mean, const clt_tensor *uvar,
                             const clt_tensor *rmean, const clt_tensor *rvar);
/* g (2C) = part (C, 2) of clt_nn_batchnorm_backward_sums over count values
 * a channel as means: g[c] = part[2c] / count (of dy), g[C + c] = part[2c +
 * 1] / count (of dy * xhat); one device's batch, without a trip to the host. */
int clt_nn_batchnorm_means(clt_context *ctx, double count, const clt_tensor *part, const clt_tensor *g);

#endif /* CLT_NN_H */
