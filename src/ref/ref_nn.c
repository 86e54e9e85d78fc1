/* ref_nn.c: plain-C references for the nn layer kernels (see ref_nn.h).
 * Written for clarity, loop by loop as the definitions read, in double. */
#include "ref_nn.h"

#include <math.h>
#include <string.h>

void ref_linear_forward(int N, int in, int out, const double *x, const double *w, const double *b, double *y) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < out; o++) {
      double acc = b ? b[o] : 0.0;
      for (int i = 0; i < in; i++) acc += x[n * in + i] * w[o * in + i];
      y[n * out + o] = acc;
    }
}

void ref_linear_backward(int N, int in, int out, const double *x, const double *w, const double *dy, double *dx,
                         double *dw, double *db) {
  if (dx)
    for (int n = 0; n < N; n++)
      for (int i = 0; i < in; i++) {
        double acc = 0;
        for (int o = 0; o < out; o++) acc += dy[n * out + o] * w[o * in + i];
        dx[n * in + i] = acc;
      }
  for (int o = 0; o < out; o++)
    for (int i = 0; i < in; i++) {
      double acc = 0;
      for (int n = 0; n < N; n++) acc += dy[n * out + o] * x[n * in + i];
      dw[o * in + i] = acc;
    }
  if (db)
    for (int o = 0; o < out; o++) {
      double acc = 0;
      for (int n = 0; n < N; n++) acc += dy[n * out + o];
      db[o] = acc;
    }
}

int ref_window_init(ref_window *g) {
  g->OH = g->OW = 0;
  if (g->H + 2 * g->ph < g->KH || g->W + 2 * g->pw < g->KW) return 0;
  g->OH = (g->H + 2 * g->ph - g->KH) / g->sh + 1;
  g->OW = (g->W + 2 * g->pw - g->KW) / g->sw + 1;
  return g->OH > 0 && g->OW > 0;
}

/* Index of x[n, c, ih, iw], or -1 in the padding. */
static long xidx(const ref_window *g, int n, int c, int ih, int iw) {
  if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) return -1;
  return (((long)n * g->C + c) * g->H + ih) * g->W + iw;
}

void ref_conv2d_forward(const ref_window *g, const double *x, const double *w, const double *b, double *y) {
  for (int n = 0; n < g->N; n++)
    for (int co = 0; co < g->Cout; co++)
      for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
          double acc = b ? b[co] : 0.0;
          for (int ci = 0; ci < g->C; ci++)
            for (int kh = 0; kh < g->KH; kh++)
              for (int kw = 0; kw < g->KW; kw++) {
                long i = xidx(g, n, ci, oh * g->sh - g->ph + kh, ow * g->sw - g->pw + kw);
                if (i >= 0) acc += x[i] * w[((co * g->C + ci) * g->KH + kh) * g->KW + kw];
              }
          y[(((long)n * g->Cout + co) * g->OH + oh) * g->OW + ow] = acc;
        }
}

void ref_conv2d_backward(const ref_window *g, const double *x, const double *w, const double *dy, double *dx,
                         double *dw, double *db) {
  size_t nx = (size_t)g->N * g->C * g->H * g->W, nw = (size_t)g->Cout * g->C * g->KH * g->KW;
  if (dx) memset(dx, 0, nx * sizeof *dx);
  memset(dw, 0, nw * sizeof *dw);
  if (db) memset(db, 0, (size_t)g->Cout * sizeof *db);
  for (int n = 0; n < g->N; n++)
    for (int co = 0; co < g->Cout; co++)
      for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
          double d = dy[(((long)n * g->Cout + co) * g->OH + oh) * g->OW + ow];
          if (db) db[co] += d;
          for (int ci = 0; ci < g->C; ci++)
            for (int kh = 0; kh < g->KH; kh++)
              for (int kw = 0; kw < g->KW; kw++) {
                long i = xidx(g, n, ci, oh * g->sh - g->ph + kh, ow * g->sw - g->pw + kw);
                long wi = ((co * g->C + ci) * g->KH + kh) * g->KW + kw;
                if (i < 0) continue;
                dw[wi] += d * x[i];
                if (dx) dx[i] += d * w[wi];
              }
        }
}

void ref_maxpool_forward(const ref_window *g, const double *x, double *y, int32_t *argmax) {
  for (int n = 0; n < g->N; n++)
    for (int c = 0; c < g->C; c++)
      for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
          double best = 0;
          int besti = -1;
          for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++) {
              int ih = oh * g->sh - g->ph + kh, iw = ow * g->sw - g->pw + kw;
              long i = xidx(g, n, c, ih, iw);
              if (i < 0) continue;
              if (besti < 0 || x[i] > best || (isnan(x[i]) && !isnan(best))) {
                best = x[i];
                besti = ih * g->W + iw;
              }
            }
          long o = (((long)n * g->C + c) * g->OH + oh) * g->OW + ow;
          y[o] = best;
          argmax[o] = besti;
        }
}

void ref_maxpool_backward(const ref_window *g, const int32_t *argmax, const double *dy, double *dx) {
  memset(dx, 0, (size_t)g->N * g->C * g->H * g->W * sizeof *dx);
  for (long plane = 0; plane < (long)g->N * g->C; plane++)
    for (int o = 0; o < g->OH * g->OW; o++)
      if (argmax[plane * g->OH * g->OW + o] >= 0)
        dx[plane * g->H * g->W + argmax[plane * g->OH * g->OW + o]] += dy[plane * g->OH * g->OW + o];
}

void ref_avgpool_forward(const ref_window *g, const double *x, double *y) {
  for (int n = 0; n < g->N; n++)
    for (int c = 0; c < g->C; c++)
      for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
          double acc = 0;
          for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++) {
              long i = xidx(g, n, c, oh * g->sh - g->ph + kh, ow * g->sw - g->pw + kw);
              if (i >= 0) acc += x[i];
            }
          y[(((long)n * g->C + c) * g->OH + oh) * g->OW + ow] = acc / (g->KH * g->KW);
        }
}

void ref_avgpool_backward(const ref_window *g, const double *dy, double *dx) {
  memset(dx, 0, (size_t)g->N * g->C * g->H * g->W * sizeof *dx);
  for (int n = 0; n < g->N; n++)
    for (int c = 0; c < g->C; c++)
      for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
          double d = dy[(((long)n * g->C + c) * g->OH + oh) * g->OW + ow] / (g->KH * g->KW);
          for (int kh = 0; kh < g->KH; kh++)
            for (int kw = 0; kw < g->KW; kw++) {
              long i = xidx(g, n, c, oh * g->sh - g->ph + kh, ow * g->sw - g->pw + kw);
              if (i >= 0) dx[i] += d;
            }
        }
}

void ref_global_avgpool_forward(int NC, int HW, const double *x, double *y) {
  for (int p = 0; p < NC; p++) {
    double acc = 0;
    for (int j = 0; j < HW; j++) acc += x[(long)p * HW + j];
    y[p] = acc / HW;
  }
}

void ref_global_avgpool_backward(int NC, int HW, const double *dy, double *dx) {
  for (int p = 0; p < NC; p++)
    for (int j = 0; j < HW; j++) dx[(long)p * HW + j] = dy[p] / HW;
}

#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_A 0.044715

void ref_act_forward(int act, double alpha, size_t n, const double *x, double *y) {
  for (size_t i = 0; i < n; i++) {
    double v = x[i];
    switch (act) {
    case 0: y[i] = v > 0 ? v : 0; break;
    case 1: y[i] = v > 0 ? v : alpha * v; break;
    case 2: y[i] = 0.5 * v * (1 + tanh(GELU_C * (v + GELU_A * v * v * v))); break;
    case 3: y[i] = tanh(v); break;
    case 5: y[i] = v / (1 + exp(-v)); break;
    default: y[i] = 1 / (1 + exp(-v)); break;
    }
  }
}

void ref_act_backward(int act, double alpha, size_t n, const double *x, const double *dy, double *dx) {
  for (size_t i = 0; i < n; i++) {
    double v = x[i], d;
    switch (act) {
    case 0: d = v > 0 ? 1 : 0; break;
    case 1: d = v > 0 ? 1 : alpha; break;
    case 2: {
      double t = tanh(GELU_C * (v + GELU_A * v * v * v));
      d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * GELU_C * (1 + 3 * GELU_A * v * v);
      break;
    }
    case 3: d = 1 - tanh(v) * tanh(v); break;
    case 5: {
      double s = 1 / (1 + exp(-v));
      d = s * (1 + v * (1 - s));
      break;
    }
    default: {
      double s = 1 / (1 + exp(-v));
      d = s * (1 - s);
      break;
    }
    }
    dx[i] = dy[i] * d;
  }
}

void ref_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

uint32_t ref_dropout_threshold(float p) { return (uint32_t)llround((double)p * 16777216.0); }

float ref_dropout_scale(float p) { return (float)(1.0 / (1.0 - (double)p)); }

int ref_dropout_keep(uint64_t seed, uint64_t step, uint64_t e, uint32_t threshold) {
  uint64_t block = e >> 2;
  uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)step, (uint32_t)(step >> 32)};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, r[4];
  ref_philox4x32_10(ctr, key, r);
  return (r[e & 3] >> 8) >= threshold;
}

void ref_dropout_f32(float p, uint64_t seed, uint64_t step, uint64_t base, size_t n, const float *x, float *y) {
  uint32_t t = ref_dropout_threshold(p);
  float scale = ref_dropout_scale(p);
  for (size_t i = 0; i < n; i++) y[i] = x[i] * (ref_dropout_keep(seed, step, base + i, t) ? scale : 0.0f);
}

void ref_dropout(float p, uint64_t seed, uint64_t step, uint64_t base, size_t n, const double *x, double *y) {
  uint32_t t = ref_dropout_threshold(p);
  double scale = ref_dropout_scale(p);
  for (size_t i = 0; i < n; i++) y[i] = x[i] * (ref_dropout_keep(seed, step, base + i, t) ? scale : 0.0);
}

void ref_layernorm_forward(int M, int D, double eps, const double *x, const double *gamma, const double *beta,
                           double *y, double *mean, double *rstd) {
  for (int m = 0; m < M; m++) {
    const double *r = x + (long)m * D;
    double mu = 0, var = 0;
    for (int d = 0; d < D; d++) mu += r[d];
    mu /= D;
    for (int d = 0; d < D; d++) var += (r[d] - mu) * (r[d] - mu);
    var /= D;
    double s = 1 / sqrt(var + eps);
    for (int d = 0; d < D; d++) y[(long)m * D + d] = (r[d] - mu) * s * gamma[d] + beta[d];
    if (mean) mean[m] = mu;
    if (rstd) rstd[m] = s;
  }
}

void ref_layernorm_backward(int M, int D, const double *x, const double *gamma, const double *mean, const double *rstd,
                            const double *dy, double *dx, double *dgamma, double *dbeta) {
  memset(dgamma, 0, (size_t)D * sizeof *dgamma);
  memset(dbeta, 0, (size_t)D * sizeof *dbeta);
  for (int m = 0; m < M; m++) {
    const double *r = x + (long)m * D, *g = dy + (long)m * D;
    double mg = 0, mgx = 0;
    for (int d = 0; d < D; d++) {
      double xhat = (r[d] - mean[m]) * rstd[m];
      mg += gamma[d] * g[d];
      mgx += gamma[d] * g[d] * xhat;
      dgamma[d] += g[d] * xhat;
      dbeta[d] += g[d];
    }
    mg /= D;
    mgx /= D;
    for (int d = 0; d < D; d++) {
      double xhat = (r[d] - mean[m]) * rstd[m];
      dx[(long)m * D + d] = rstd[m] * (gamma[d] * g[d] - mg - xhat * mgx);
    }
  }
}

void ref_softmax_xent(int N, int C, const double *logits, const int32_t *labels, int ignore_index, double *losses,
                      double *loss, int *correct, double *dlogits) {
  *loss = 0;
  *correct = 0;
  for (int n = 0; n < N; n++) {
    const double *z = logits + (long)n * C;
    int label = labels[n], valid = label >= 0 && label < C, argmax = 0;
    if (label == ignore_index) {
      losses[n] = 0;
      if (dlogits)
        for (int j = 0; j < C; j++) dlogits[(long)n * C + j] = 0;
      continue;
    }
    for (int j = 1; j < C; j++)
      if (z[j] > z[argmax]) argmax = j;
    double m = z[argmax], sum = 0;
    for (int j = 0; j < C; j++) sum += exp(z[j] - m);
    losses[n] = valid ? log(sum) - (z[label] - m) : NAN;
    *loss += losses[n];
    if (valid && argmax == label) ++*correct;
    if (dlogits)
      for (int j = 0; j < C; j++)
        dlogits[(long)n * C + j] = valid ? exp(z[j] - m) / sum - (j == label ? 1.0 : 0.0) : NAN;
  }
}

void ref_regression_loss(int kind, double delta, int M, const double *y, const double *t, double *losses,
                         double *loss, double *sq_error, double *dy) {
  *loss = *sq_error = 0;
  for (int i = 0; i < M; i++) {
    double d = y[i] - t[i], a = fabs(d), l, g;
    if (kind == 1) l = d * d, g = 2 * d;
    else if (kind == 2) l = a, g = d > 0 ? 1 : d < 0 ? -1 : 0;
    else l = a < delta ? 0.5 * d * d : delta * (a - 0.5 * delta), g = d > delta ? delta : d < -delta ? -delta : d;
    losses[i] = l;
    *loss += l;
    *sq_error += d * d;
    if (dy) dy[i] = g;
  }
}

/* torch.nn.GroupNorm(G, C) on x (N, C, S): rows of (C / G) * S values. */
void ref_groupnorm_forward(int N, int C, int S, int G, double eps, const double *x, const double *w, const double *b,
                           double *y, double *mean, double *rstd) {
  int cg = C / G, D = cg * S;
  for (int m = 0; m < N * G; m++) {
    const double *r = x + (long)m * D;
    double mu = 0, var = 0;
    for (int d = 0; d < D; d++) mu += r[d];
    mu /= D;
    for (int d = 0; d < D; d++) var += (r[d] - mu) * (r[d] - mu);
    var /= D;
    double s = 1 / sqrt(var + eps);
    for (int d = 0; d < D; d++) {
      int c = (m % G) * cg + d / S;
      y[(long)m * D + d] = (r[d] - mu) * s * w[c] + b[c];
    }
    if (mean) mean[m] = mu;
    if (rstd) rstd[m] = s;
  }
}

void ref_groupnorm_backward(int N, int C, int S, int G, const double *x, const double *w, const double *mean,
                            const double *rstd, const double *dy, double *dx, double *dw, double *db) {
  int cg = C / G, D = cg * S;
  memset(dw, 0, (size_t)C * sizeof *dw);
  memset(db, 0, (size_t)C * sizeof *db);
  for (int m = 0; m < N * G; m++) {
    const double *r = x + (long)m * D, *g = dy + (long)m * D;
    double mg = 0, mgx = 0;
    for (int d = 0; d < D; d++) {
      int c = (m % G) * cg + d / S;
      double xhat = (r[d] - mean[m]) * rstd[m];
      mg += w[c] * g[d];
      mgx += w[c] * g[d] * xhat;
      dw[c] += g[d] * xhat;
      db[c] += g[d];
    }
    mg /= D;
    mgx /= D;
    for (int d = 0; d < D; d++) {
      int c = (m % G) * cg + d / S;
      double xhat = (r[d] - mean[m]) * rstd[m];
      dx[(long)m * D + d] = rstd[m] * (w[c] * g[d] - mg - xhat * mgx);
    }
  }
}

/* ---- N-d window ops (ref_vol) ---- */

int ref_vol_init(ref_vol *g) {
  int ok = 1;
  for (int a = 0; a < 3; a++) {
    int span = (g->k[a] - 1) * g->d[a] + 1;
    g->out[a] = g->in[a] + 2 * g->p[a] < span ? 0 : (g->in[a] + 2 * g->p[a] - span) / g->s[a] + 1;
    ok = ok && g->out[a] > 0;
  }
  return ok;
}

/* Index of x[n, c] at the tap (kd, kh, kw) of output (od, oh, ow), or -1 in the padding. */
static long vol_idx(const ref_vol *g, int n, int c, const int *o, const int *k) {
  long i = (long)n * g->C + c;
  for (int a = 0; a < 3; a++) {
    int at = o[a] * g->s[a] - g->p[a] + k[a] * g->d[a];
    if (at < 0 || at >= g->in[a]) return -1;
    i = i * g->in[a] + at;
  }
  return i;
}

/* Visit every (n, co, output, ci, tap) of the convolution: f gets the output
 * index, the input index (or -1) and the weight index. */
#define VOL_LOOP(g, BODY)                                                                                      \
  for (int n = 0; n < (g)->N; n++)                                                                             \
    for (int co = 0; co < (g)->Cout; co++)                                                                     \
      for (int o0 = 0; o0 < (g)->out[0]; o0++)                                                                 \
        for (int o1 = 0; o1 < (g)->out[1]; o1++)                                                               \
          for (int o2 = 0; o2 < (g)->out[2]; o2++) {                                                           \
            const int o[3] = {o0, o1, o2};                                                                     \
            long yi = ((((long)n * (g)->Cout + co) * (g)->out[0] + o0) * (g)->out[1] + o1) * (g)->out[2] + o2; \
            for (int ci = 0; ci < (g)->C; ci++)                                                                \
              for (int k0 = 0; k0 < (g)->k[0]; k0++)                                                           \
                for (int k1 = 0; k1 < (g)->k[1]; k1++)                                                         \
                  for (int k2 = 0; k2 < (g)->k[2]; k2++) {                                                     \
                    const int kk[3] = {k0, k1, k2};                                                            \
                    long xi = vol_idx((g), n, ci, o, kk);                                                      \
                    long wi = ((((long)co * (g)->C + ci) * (g)->k[0] + k0) * (g)->k[1] + k1) * (g)->k[2] + k2; \
                    if (xi >= 0) { BODY }                                                                      \
                  }                                                                                            \
          }

void ref_convnd_forward(const ref_vol *g, const double *x, const double *w, const double *b, double *y) {
  long ny = (long)g->N * g->Cout * g->out[0] * g->out[1] * g->out[2], P = (long)g->out[0] * g->out[1] * g->out[2];
  for (long i = 0; i < ny; i++) y[i] = b ? b[(i / P) % g->Cout] : 0.0;
  VOL_LOOP(g, y[yi] += x[xi] * w[wi];)
}

void ref_convnd_backward(const ref_vol *g, const double *x, const double *w, const double *dy, double *dx, double *dw,
                         double *db) {
  long nx = (long)g->N * g->C * g->in[0] * g->in[1] * g->in[2];
  long nw = (long)g->Cout * g->C * g->k[0] * g->k[1] * g->k[2], P = (long)g->out[0] * g->out[1] * g->out[2];
  if (dx) memset(dx, 0, (size_t)nx * sizeof *dx);
  memset(dw, 0, (size_t)nw * sizeof *dw);
  if (db) {
    memset(db, 0, (size_t)g->Cout * sizeof *db);
    for (long i = 0; i < (long)g->N * g->Cout * P; i++) db[(i / P) % g->Cout] += dy[i];
  }
  VOL_LOOP(g, dw[wi] += dy[yi] * x[xi]; if (dx) dx[xi] += dy[yi] * w[wi];)
}

/* Visit each pooling window (plane, output) in order, then its taps. */
#define POOL_LOOP(g, START, TAP, END)                                                                          \
  for (long plane = 0; plane < (long)(g)->N * (g)->C; plane++)                                                \
    for (int o0 = 0; o0 < (g)->out[0]; o0++)                                                                   \
      for (int o1 = 0; o1 < (g)->out[1]; o1++)                                                                 \
        for (int o2 = 0; o2 < (g)->out[2]; o2++) {                                                             \
          long yi = ((plane * (g)->out[0] + o0) * (g)->out[1] + o1) * (g)->out[2] + o2;                        \
          START for (int k0 = 0; k0 < (g)->k[0]; k0++) for (int k1 = 0; k1 < (g)->k[1]; k1++)                  \
              for (int k2 = 0; k2 < (g)->k[2]; k2++) {                                                         \
            int at = ((o0 * (g)->s[0] + k0) * (g)->in[1] + o1 * (g)->s[1] + k1) * (g)->in[2] + o2 * (g)->s[2] + k2; \
            long xi = plane * (g)->in[0] * (g)->in[1] * (g)->in[2] + at;                                       \
            TAP                                                                                                \
          }                                                                                                    \
          END                                                                                                  \
        }

void ref_maxpoolnd_forward(const ref_vol *g, const double *x, double *y, int32_t *argmax) {
  POOL_LOOP(g, double best = 0; int besti = -1;,
            if (besti < 0 || x[xi] > best || (x[xi] != x[xi] && best == best)) { best = x[xi]; besti = at; },
            y[yi] = best; argmax[yi] = besti;)
}

void ref_maxpoolnd_backward(const ref_vol *g, const int32_t *argmax, const double *dy, double *dx) {
  long nx = (long)g->N * g->C * g->in[0] * g->in[1] * g->in[2];
  memset(dx, 0, (size_t)nx * sizeof *dx);
  POOL_LOOP(g, , if (at == argmax[yi]) dx[xi] += dy[yi];, )
}

void ref_avgpoolnd_forward(const ref_vol *g, const double *x, double *y) {
  double n = (double)g->k[0] * g->k[1] * g->k[2];
  POOL_LOOP(g, double acc = 0;, acc += x[xi];, y[yi] = acc / n;)
}

void ref_avgpoolnd_backward(const ref_vol *g, const double *dy, double *dx) {
  long nx = (long)g->N * g->C * g->in[0] * g->in[1] * g->in[2];
  double n = (double)g->k[0] * g->k[1] * g->k[2];
  memset(dx, 0, (size_t)nx * sizeof *dx);
  POOL_LOOP(g, , dx[xi] += dy[yi] / n;, )
}

/* Linear mode's source of output o along an axis of n cells, factor S:
 * cells i0, i1 with weights 1 - l1, l1 (PyTorch's align_corners=False). */
static void up_source(int o, int S, int n, int *i0, int *i1, double *l1) {
  double src = (o + 0.5) / S - 0.5;
  if (src < 0) src = 0;
  *i0 = (int)src;
  *i1 = *i0 + (*i0 < n - 1 ? 1 : 0);
  *l1 = src - *i0;
}

/* The input cells output (od, oh, ow) reads and their weights (up to 8). */
static int up_taps(int linear, const int in[3], const int scale[3], const int o[3], long at[8], double wt[8]) {
  int i0[3], i1[3];
  double l1[3];
  for (int a = 0; a < 3; a++) {
    if (linear) up_source(o[a], scale[a], in[a], &i0[a], &i1[a], &l1[a]);
    else i0[a] = i1[a] = o[a] / scale[a], l1[a] = 0;
  }
  int n = 0;
  for (int c = 0; c < 8; c++) {
    int id = c & 4 ? i1[0] : i0[0], ih = c & 2 ? i1[1] : i0[1], iw = c & 1 ? i1[2] : i0[2];
    double w = (c & 4 ? l1[0] : 1 - l1[0]) * (c & 2 ? l1[1] : 1 - l1[1]) * (c & 1 ? l1[2] : 1 - l1[2]);
    at[n] = ((long)id * in[1] + ih) * in[2] + iw;
    wt[n++] = w;
  }
  return n;
}

void ref_upsample_forward(int linear, int NC, const int in[3], const int scale[3], const double *x, double *y) {
  int out[3] = {in[0] * scale[0], in[1] * scale[1], in[2] * scale[2]};
  long nin = (long)in[0] * in[1] * in[2], nout = (long)out[0] * out[1] * out[2];
  for (int p = 0; p < NC; p++)
    for (int od = 0; od < out[0]; od++)
      for (int oh = 0; oh < out[1]; oh++)
        for (int ow = 0; ow < out[2]; ow++) {
          long at[8];
          double wt[8], acc = 0;
          int n = up_taps(linear, in, scale, (int[]){od, oh, ow}, at, wt);
          for (int t = 0; t < n; t++) acc += wt[t] * x[p * nin + at[t]];
          y[p * nout + ((long)od * out[1] + oh) * out[2] + ow] = acc;
        }
}

void ref_upsample_backward(int linear, int NC, const int in[3], const int scale[3], const double *dy, double *dx) {
  int out[3] = {in[0] * scale[0], in[1] * scale[1], in[2] * scale[2]};
  long nin = (long)in[0] * in[1] * in[2], nout = (long)out[0] * out[1] * out[2];
  memset(dx, 0, (size_t)(NC * nin) * sizeof *dx);
  for (int p = 0; p < NC; p++)
    for (int od = 0; od < out[0]; od++)
      for (int oh = 0; oh < out[1]; oh++)
        for (int ow = 0; ow < out[2]; ow++) {
          long at[8];
          double wt[8];
          int n = up_taps(linear, in, scale, (int[]){od, oh, ow}, at, wt);
          for (int t = 0; t < n; t++) dx[p * nin + at[t]] += wt[t] * dy[p * nout + ((long)od * out[1] + oh) * out[2] + ow];
        }
}

int ref_convt_init(ref_convt *g) {
  for (int a = 0; a < 3; a++) {
    g->out[a] = (g->in[a] - 1) * g->s[a] - 2 * g->p[a] + g->k[a] + g->op[a];
    if (g->out[a] < 1) return 0;
  }
  return 1;
}

/* Calls f for every (n, ci, input cell, co, kernel cell) that lands inside
 * the output, with the flat indices of x, w and y. */
#define CONVT_LOOP(g, BODY)                                                                                            \
  for (int n = 0; n < (g)->N; n++)                                                                                     \
    for (int ci = 0; ci < (g)->Cin; ci++)                                                                              \
      for (int id = 0; id < (g)->in[0]; id++)                                                                          \
        for (int ih = 0; ih < (g)->in[1]; ih++)                                                                        \
          for (int iw = 0; iw < (g)->in[2]; iw++)                                                                      \
            for (int co = 0; co < (g)->Cout; co++)                                                                     \
              for (int kd = 0; kd < (g)->k[0]; kd++)                                                                   \
                for (int kh = 0; kh < (g)->k[1]; kh++)                                                                 \
                  for (int kw = 0; kw < (g)->k[2]; kw++) {                                                             \
                    int od = id * (g)->s[0] - (g)->p[0] + kd, oh = ih * (g)->s[1] - (g)->p[1] + kh,                   \
                        ow = iw * (g)->s[2] - (g)->p[2] + kw;                                                          \
                    if (od < 0 || od >= (g)->out[0] || oh < 0 || oh >= (g)->out[1] || ow < 0 || ow >= (g)->out[2])   \
                      continue;                                                                                        \
                    long xi = ((((long)n * (g)->Cin + ci) * (g)->in[0] + id) * (g)->in[1] + ih) * (g)->in[2] + iw;    \
                    long wi = ((((long)ci * (g)->Cout + co) * (g)->k[0] + kd) * (g)->k[1] + kh) * (g)->k[2] + kw;     \
                    long yi = ((((long)n * (g)->Cout + co) * (g)->out[0] + od) * (g)->out[1] + oh) * (g)->out[2] + ow; \
                    BODY;                                                                                              \
                  }

void ref_convtranspose_forward(const ref_convt *g, const double *x, const double *w, const double *b, double *y) {
  long ocells = (long)g->out[0] * g->out[1] * g->out[2];
  for (int n = 0; n < g->N; n++)
    for (int co = 0; co < g->Cout; co++)
      for (long o = 0; o < ocells; o++) y[((long)n * g->Cout + co) * ocells + o] = b ? b[co] : 0.0;
  CONVT_LOOP(g, y[yi] += x[xi] * w[wi])
}

void ref_convtranspose_backward(const ref_convt *g, const double *x, const double *w, const double *dy, double *dx,
                                double *dw, double *db) {
  long icells = (long)g->in[0] * g->in[1] * g->in[2], ocells = (long)g->out[0] * g->out[1] * g->out[2];
  long kcells = (long)g->k[0] * g->k[1] * g->k[2];
  if (dx) memset(dx, 0, (size_t)(g->N * g->Cin * icells) * sizeof *dx);
  memset(dw, 0, (size_t)(g->Cin * g->Cout * kcells) * sizeof *dw);
  if (db) {
    memset(db, 0, (size_t)g->Cout * sizeof *db);
    for (int n = 0; n < g->N; n++)
      for (int co = 0; co < g->Cout; co++)
        for (long o = 0; o < ocells; o++) db[co] += dy[((long)n * g->Cout + co) * ocells + o];
  }
  CONVT_LOOP(g, {
    dw[wi] += x[xi] * dy[yi];
    if (dx) dx[xi] += w[wi] * dy[yi];
  })
}
/* ---- batchnorm ---- */

void ref_batchnorm_forward(int N, int C, int S, double eps, const double *x, const double *w, const double *b,
                           double *y, double *mean, double *var) {
  double M = (double)N * S;
  for (int c = 0; c < C; c++) {
    double s = 0, s2 = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) s += x[((size_t)n * C + c) * S + k];
    double mu = s / M;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        double d = x[((size_t)n * C + c) * S + k] - mu;
        s2 += d * d;
      }
    double v = s2 / M, r = 1.0 / sqrt(v + eps);
    if (mean) mean[c] = mu;
    if (var) var[c] = v;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        size_t i = ((size_t)n * C + c) * S + k;
        y[i] = (x[i] - mu) * r * w[c] + b[c];
      }
  }
}

void ref_batchnorm_backward(int N, int C, int S, double eps, const double *x, const double *w, const double *dy,
                            double *dx, double *dw, double *db) {
  double M = (double)N * S;
  for (int c = 0; c < C; c++) {
    double s = 0, s2 = 0, sd = 0, sdx = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) s += x[((size_t)n * C + c) * S + k];
    double mu = s / M;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        double d = x[((size_t)n * C + c) * S + k] - mu;
        s2 += d * d;
      }
    double r = 1.0 / sqrt(s2 / M + eps);
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        size_t i = ((size_t)n * C + c) * S + k;
        sd += dy[i];
        sdx += dy[i] * (x[i] - mu) * r;
      }
    dw[c] = sdx, db[c] = sd;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        size_t i = ((size_t)n * C + c) * S + k;
        dx[i] = w[c] * r * (dy[i] - sd / M - (x[i] - mu) * r * sdx / M);
      }
  }
}
