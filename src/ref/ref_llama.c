/* ref_llama.c: plain-C references of the Llama-family layers (see ref_llama.h). */
#include "ref/ref_llama.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ref_rmsnorm_forward(int M, int D, double eps, const double *x, const double *w, double *y, double *rstd) {
  for (int m = 0; m < M; m++) {
    const double *r = x + (size_t)m * D;
    double ss = 0;
    for (int d = 0; d < D; d++) ss += r[d] * r[d];
    double s = 1 / sqrt(ss / D + eps);
    for (int d = 0; d < D; d++) y[(size_t)m * D + d] = r[d] * s * w[d];
    if (rstd) rstd[m] = s;
  }
}

/* y_j = w_j x_j s with s = (mean(x^2) + eps)^(-1/2), ds/dx_j = -s^3 x_j / D:
 * dx_j = s g_j - s^3 x_j mean(g x), g = dy w; dw_j = sum over rows of dy_j x_j s. */
void ref_rmsnorm_backward(int M, int D, double eps, const double *x, const double *w, const double *dy, double *dx,
                          double *dw) {
  memset(dw, 0, (size_t)D * sizeof *dw);
  for (int m = 0; m < M; m++) {
    const double *r = x + (size_t)m * D, *g = dy + (size_t)m * D;
    double ss = 0, gx = 0;
    for (int d = 0; d < D; d++) ss += r[d] * r[d], gx += g[d] * w[d] * r[d];
    double s = 1 / sqrt(ss / D + eps);
    for (int d = 0; d < D; d++) {
      dx[(size_t)m * D + d] = s * g[d] * w[d] - s * s * s * r[d] * gx / D;
      dw[d] += g[d] * r[d] * s;
    }
  }
}

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

void ref_swiglu_forward(int N, int I, const double *gu, double *h) {
  for (int n = 0; n < N; n++)
    for (int i = 0; i < I; i++) {
      double g = gu[(size_t)n * 2 * I + i], u = gu[(size_t)n * 2 * I + I + i];
      h[(size_t)n * I + i] = g * sigmoid(g) * u;
    }
}

void ref_swiglu_backward(int N, int I, const double *gu, const double *dh, double *dgu) {
  for (int n = 0; n < N; n++)
    for (int i = 0; i < I; i++) {
      size_t at = (size_t)n * 2 * I + i;
      double g = gu[at], u = gu[at + I], s = sigmoid(g), d = dh[(size_t)n * I + i];
      dgu[at] = d * u * s * (1 + g * (1 - s));
      dgu[at + I] = d * g * s;
    }
}

/* Every operation in float, in transformers' order (its tensors are
 * float32; Python scalars meet them as float32). */
void ref_rope_inv_freq(int D, const ref_rope_cfg *cfg, float *inv_freq) {
  for (int i = 0; i < D / 2; i++) {
    float e = (float)(2 * i) / (float)D;
    inv_freq[i] = 1.0f / (float)pow(cfg->theta, (double)e);
  }
  if (!cfg->llama3) return;
  float factor = (float)cfg->factor, old = (float)cfg->original_max;
  float lo_wavelen = (float)(cfg->original_max / cfg->low_freq_factor);
  float hi_wavelen = (float)(cfg->original_max / cfg->high_freq_factor);
  float span = (float)(cfg->high_freq_factor - cfg->low_freq_factor);
  for (int i = 0; i < D / 2; i++) {
    float f = inv_freq[i], wavelen = (float)(2 * 3.14159265358979323846) / f;
    float scaled = wavelen > lo_wavelen ? f / factor : f;
    if (!(wavelen < hi_wavelen) && !(wavelen > lo_wavelen)) {
      float s = (old / wavelen - (float)cfg->low_freq_factor) / span;
      float a = (1.0f - s) * scaled, b = s * scaled;
      scaled = a / factor + b;
    }
    inv_freq[i] = scaled;
  }
}

void ref_rope(int B, int T, int ld, int nrot, int D, const float *inv_freq, int inverse, double *x) {
  int half = D / 2;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int i = 0; i < half; i++) {
        double a = (double)((float)t * inv_freq[i]), c = cos(a), s = inverse ? -sin(a) : sin(a);
        for (int h = 0; h < nrot; h++) {
          double *p = x + ((size_t)b * T + t) * ld + (size_t)h * D;
          double x1 = p[i], x2 = p[i + half];
          p[i] = x1 * c - x2 * s;
          p[i + half] = x2 * c + x1 * s;
        }
      }
}

typedef struct gqa {
  int T, D, H, K;
} gqa;

static size_t row_width(const gqa *g) { return (size_t)(g->H + 2 * g->K) * g->D; }
static size_t q_at(const gqa *g, int b, int t, int h, int d) {
  return ((size_t)b * g->T + t) * row_width(g) + (size_t)h * g->D + d;
}
static size_t k_at(const gqa *g, int b, int t, int h, int d) {
  return ((size_t)b * g->T + t) * row_width(g) + (size_t)(g->H + h / (g->H / g->K)) * g->D + d;
}
static size_t v_at(const gqa *g, int b, int t, int h, int d) { return k_at(g, b, t, h, d) + (size_t)g->K * g->D; }

/* The probabilities p[0..i] of query i of (b, h); returns their lse. */
static double probs(const gqa *g, const double *qkv, int b, int h, int i, double *p) {
  double scale = 1.0 / sqrt((double)g->D), m = -INFINITY, sum = 0;
  for (int j = 0; j <= i; j++) {
    double s = 0;
    for (int d = 0; d < g->D; d++) s += qkv[q_at(g, b, i, h, d)] * qkv[k_at(g, b, j, h, d)];
    p[j] = s * scale;
    if (p[j] > m) m = p[j];
  }
  for (int j = 0; j <= i; j++) sum += exp(p[j] - m);
  double lse = m + log(sum);
  for (int j = 0; j <= i; j++) p[j] = exp(p[j] - lse);
  return lse;
}

void ref_gqa_forward(int B, int T, int D, int heads, int kv_heads, const double *qkv, double *y, double *lse) {
  gqa g = {T, D, heads, kv_heads};
  double *p = malloc((size_t)T * sizeof *p);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < T; i++) {
        lse[((size_t)b * heads + h) * T + i] = probs(&g, qkv, b, h, i, p);
        for (int d = 0; d < D; d++) {
          double s = 0;
          for (int j = 0; j <= i; j++) s += p[j] * qkv[v_at(&g, b, j, h, d)];
          y[((size_t)b * T + i) * heads * D + (size_t)h * D + d] = s;
        }
      }
  free(p);
}

void ref_gqa_backward(int B, int T, int D, int heads, int kv_heads, const double *qkv, const double *dy,
                      double *dqkv) {
  gqa g = {T, D, heads, kv_heads};
  double scale = 1.0 / sqrt((double)D);
  double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
  memset(dqkv, 0, (size_t)B * T * row_width(&g) * sizeof *dqkv);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < T; i++) {
        probs(&g, qkv, b, h, i, p);
        const double *gr = dy + ((size_t)b * T + i) * heads * D + (size_t)h * D;
        double pdp = 0; /* sum_j p_j dp_j */
        for (int j = 0; j <= i; j++) {
          dp[j] = 0;
          for (int d = 0; d < D; d++) dp[j] += gr[d] * qkv[v_at(&g, b, j, h, d)];
          pdp += p[j] * dp[j];
        }
        for (int j = 0; j <= i; j++) {
          double ds = p[j] * (dp[j] - pdp) * scale;
          for (int d = 0; d < D; d++) {
            dqkv[v_at(&g, b, j, h, d)] += p[j] * gr[d];
            dqkv[q_at(&g, b, i, h, d)] += ds * qkv[k_at(&g, b, j, h, d)];
            dqkv[k_at(&g, b, j, h, d)] += ds * qkv[q_at(&g, b, i, h, d)];
          }
        }
      }
  free(p), free(dp);
}
