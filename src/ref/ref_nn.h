/* ref_nn.h: plain-C references for the nn layer kernels (src/nn/), forward
 * and backward, in double so that the tests can also take finite
 * differences of them. Not part of libcltrain: compiled into the tests and
 * benchmarks. Shapes and conventions are those of src/nn/nn.h, except that
 * every gradient here is OVERWRITTEN (the library accumulates dw, db, ...). */
#ifndef CLT_REF_NN_H
#define CLT_REF_NN_H

#include <stddef.h>
#include <stdint.h>

/* linear: x (N, in), w (out, in), b (out) or NULL, y (N, out). */
void ref_linear_forward(int N, int in, int out, const double *x, const double *w, const double *b, double *y);
/* dx (N, in) or NULL, dw (out, in), db (out) or NULL. */
void ref_linear_backward(int N, int in, int out, const double *x, const double *w, const double *dy, double *dx,
                         double *dw, double *db);

/* Geometry of a 2-D window op (conv or pool) on NCHW tensors. */
typedef struct ref_window {
  int N, C, H, W; /* input; C is Cin for conv */
  int Cout;       /* conv only */
  int KH, KW, sh, sw, ph, pw;
  int OH, OW; /* filled by ref_window_init */
} ref_window;
/* Work out OH, OW; 0 when the window does not fit. */
int ref_window_init(ref_window *g);

/* conv2d: x (N, C, H, W), w (Cout, C, KH, KW), b (Cout) or NULL, y (N, Cout, OH, OW). */
void ref_conv2d_forward(const ref_window *g, const double *x, const double *w, const double *b, double *y);
void ref_conv2d_backward(const ref_window *g, const double *x, const double *w, const double *dy, double *dx,
                         double *dw, double *db);

/* maxpool: argmax (N, C, OH, OW) gets ih*W + iw of each window's maximum
 * (first on ties, NaN wins), as the kernel. */
void ref_maxpool_forward(const ref_window *g, const double *x, double *y, int32_t *argmax);
void ref_maxpool_backward(const ref_window *g, const int32_t *argmax, const double *dy, double *dx);
/* avgpool, padding counted as zeros. */
void ref_avgpool_forward(const ref_window *g, const double *x, double *y);
void ref_avgpool_backward(const ref_window *g, const double *dy, double *dx);
/* global average pool over planes of HW elements: x (NC, HW), y (NC). */
void ref_global_avgpool_forward(int NC, int HW, const double *x, double *y);
void ref_global_avgpool_backward(int NC, int HW, const double *dy, double *dx);

/* Activations, numbered as clt_nn_act: 0 relu, 1 leaky_relu, 2 gelu (tanh
 * approximation), 3 tanh, 4 sigmoid, 5 silu. Backward from the input x. */
void ref_act_forward(int act, double alpha, size_t n, const double *x, double *y);
void ref_act_backward(int act, double alpha, size_t n, const double *x, const double *dy, double *dx);

/* Philox4x32-10 (Random123's philox4x32 with 10 rounds). */
void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* The dropout recipe of nn.h: threshold and scale from p, and whether
 * element e is kept. */
uint32_t ref_dropout_threshold(float p);
float ref_dropout_scale(float p);
int ref_dropout_keep(uint64_t seed, uint64_t step, uint64_t e, uint32_t threshold);
/* y[i] = x[i] * (keep(base + i) ? scale : 0) in float, bit for bit as the
 * kernel; and the same in double for finite differences. */
void ref_dropout_f32(float p, uint64_t seed, uint64_t step, uint64_t base, size_t n, const float *x, float *y);
void ref_dropout(float p, uint64_t seed, uint64_t step, uint64_t base, size_t n, const double *x, double *y);

/* layernorm over rows of D: x (M, D), gamma, beta (D), mean, rstd (M). */
void ref_layernorm_forward(int M, int D, double eps, const double *x, const double *gamma, const double *beta,
                           double *y, double *mean, double *rstd);
void ref_layernorm_backward(int M, int D, const double *x, const double *gamma, const double *mean, const double *rstd,
                            const double *dy, double *dx, double *dgamma, double *dbeta);

/* softmax cross-entropy: logits (N, C), labels (N); losses (N), *loss their
 * sum, *correct the rows whose argmax (first on ties) is the label, dlogits
 * (N, C) = softmax - onehot, or NULL. A row labelled ignore_index gives
 * loss 0 and a zero gradient and is not counted; other labels outside
 * [0, C) give NaN. */
void ref_softmax_xent(int N, int C, const double *logits, const int32_t *labels, int ignore_index, double *losses,
                      double *loss, int *correct, double *dlogits);

/* Regression losses over M values (kind as clt_loss_kind: 1 MSE, 2 L1,
 * 3 Huber with delta), PyTorch's before the reduction: losses (M), *loss
 * their sum, *sq_error the sum of (y - t)^2, dy (M) the gradient of *loss
 * (L1's is 0 where y equals t), or NULL. */
void ref_regression_loss(int kind, double delta, int M, const double *y, const double *t, double *losses,
                         double *loss, double *sq_error, double *dy);

/* groupnorm (torch.nn.GroupNorm(G, C)) on x (N, C, S): w, b (C); mean,
 * rstd (N * G) or NULL; dw, db (C) overwritten. */
void ref_groupnorm_forward(int N, int C, int S, int G, double eps, const double *x, const double *w, const double *b,
                           double *y, double *mean, double *rstd);
void ref_groupnorm_backward(int N, int C, int S, int G, const double *x, const double *w, const double *mean,
                            const double *rstd, const double *dy, double *dx, double *dw, double *db);
/* N-d window ops (conv1d/2d/3d with dilation, 1-D/3-D pooling), every
 * geometry seen as 3-D (D, H, W) with leading axes of 1: x (N, C, D, H, W),
 * w (Cout, C, KD, KH, KW). Pooling uses k and s only (no padding). */
typedef struct ref_vol {
  int N, C, Cout;
  int in[3], k[3], s[3], p[3], d[3]; /* d: dilation, >= 1 */
  int out[3];                        /* filled by ref_vol_init */
} ref_vol;
/* Work out out[]; 0 when a (dilated) window does not fit. */
int ref_vol_init(ref_vol *g);
void ref_convnd_forward(const ref_vol *g, const double *x, const double *w, const double *b, double *y);
void ref_convnd_backward(const ref_vol *g, const double *x, const double *w, const double *dy, double *dx, double *dw,
                         double *db);
/* argmax: (id*H + ih)*W + iw of each window's maximum (first on ties). */
void ref_maxpoolnd_forward(const ref_vol *g, const double *x, double *y, int32_t *argmax);
void ref_maxpoolnd_backward(const ref_vol *g, const int32_t *argmax, const double *dy, double *dx);
void ref_avgpoolnd_forward(const ref_vol *g, const double *x, double *y);
void ref_avgpoolnd_backward(const ref_vol *g, const double *dy, double *dx);
/* upsample by a whole factor S along the spatial axes (D, H, W) of
 * planes (NC) (1s for the axes a tensor lacks, and S_axis 1 there):
 * x (NC, D, H, W), y (NC, S D, S H, S W); nearest, or linear with
 * align_corners=False (torch.nn.Upsample). The backward scatters each
 * output's gradient onto the cells it read (the kernel gathers). */
void ref_upsample_forward(int linear, int NC, const int in[3], const int scale[3], const double *x, double *y);
void ref_upsample_backward(int linear, int NC, const int in[3], const int scale[3], const double *dy, double *dx);

/* A transposed convolution's geometry on (D, H, W) axes (1 for kernel,
 * stride and size, 0 for paddings, on the axes a tensor lacks). */
typedef struct ref_convt {
  int N, Cin, Cout;
  int in[3], k[3], s[3], p[3], op[3];
  int out[3]; /* filled by ref_convt_init: (in - 1) s - 2 p + k + op */
} ref_convt;
/* Work out out; 0 when an axis has no output. */
int ref_convt_init(ref_convt *g);
/* x (N, Cin, in), w (Cin, Cout, k), b (Cout) or NULL, y (N, Cout, out):
 * every input cell i sends x w[k] to output cell i s - p + k. */
void ref_convtranspose_forward(const ref_convt *g, const double *x, const double *w, const double *b, double *y);
/* dx (or NULL), dw, db (or NULL) overwritten. */
void ref_convtranspose_backward(const ref_convt *g, const double *x, const double *w, const double *dy, double *dx,
                                double *dw, double *db);
/* batchnorm in training over the channels of x (N, C, S): each channel's
 * batch mean and biased variance over its N*S values (mean, var (C)), y =
 * (x - mean) / sqrt(var + eps) * w + b; the backward of the same through
 * the batch statistics (PyTorch's BatchNorm, training): dx, and dw, db (C)
 * overwritten. */
void ref_batchnorm_forward(int N, int C, int S, double eps, const double *x, const double *w, const double *b,
                           double *y, double *mean, double *var);
void ref_batchnorm_backward(int N, int C, int S, double eps, const double *x, const double *w, const double *dy,
                            double *dx, double *dw, double *db);

#endif
