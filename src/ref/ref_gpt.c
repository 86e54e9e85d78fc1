/* ref_gpt.c: plain-C references of the transformer's layers (see ref_gpt.h). */
#include "ref/ref_gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int ref_token_ok(float t, int V) { return t >= 0.0f && t < (float)V && t == floorf(t); }

void ref_embedding_forward(int N, int V, int C, const float *tokens, const double *wte, double *y) {
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++)
      y[(size_t)i * C + c] = ref_token_ok(tokens[i], V) ? wte[(size_t)tokens[i] * C + c] : NAN;
}

void ref_embedding_backward(int N, int V, int C, const float *tokens, const double *dy, double *dwte) {
  memset(dwte, 0, (size_t)V * C * sizeof *dwte);
  for (int i = 0; i < N; i++)
    if (ref_token_ok(tokens[i], V))
      for (int c = 0; c < C; c++) dwte[(size_t)tokens[i] * C + c] += dy[(size_t)i * C + c];
}

void ref_embedding_backward_f32(int N, int V, int C, const float *tokens, const float *dy, float *dwte) {
  for (int i = 0; i < N; i++)
    if (ref_token_ok(tokens[i], V))
      for (int c = 0; c < C; c++) dwte[(size_t)tokens[i] * C + c] += dy[(size_t)i * C + c];
}

void ref_posembed_forward(int B, int T, int C, const double *x, const double *wpe, double *y) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) {
        size_t e = ((size_t)b * T + t) * C + c;
        y[e] = x[e] + wpe[(size_t)t * C + c];
      }
}

void ref_posembed_backward(int B, int T, int C, const double *dy, double *dwpe) {
  memset(dwpe, 0, (size_t)T * C * sizeof *dwpe);
  for (int b = 0; b < B; b++)
    for (size_t e = 0; e < (size_t)T * C; e++) dwpe[e] += dy[(size_t)b * T * C + e];
}

/* Element d of head h's q (part 0), k (1) or v (2) at position t of sample b. */
static size_t qkv_at(int T, int C, int D, int b, int t, int part, int h, int d) {
  return ((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * D + d;
}

/* The probabilities p[0..i] of query i of (b, h); returns their lse. */
static double probs(int T, int C, int D, const double *qkv, int b, int h, int i, double *p) {
  double scale = 1.0 / sqrt((double)D), m = -INFINITY, sum = 0;
  for (int j = 0; j <= i; j++) {
    double s = 0;
    for (int d = 0; d < D; d++) s += qkv[qkv_at(T, C, D, b, i, 0, h, d)] * qkv[qkv_at(T, C, D, b, j, 1, h, d)];
    p[j] = s * scale;
    if (p[j] > m) m = p[j];
  }
  for (int j = 0; j <= i; j++) sum += exp(p[j] - m);
  double lse = m + log(sum);
  for (int j = 0; j <= i; j++) p[j] = exp(p[j] - lse);
  return lse;
}

void ref_attention_forward(int B, int T, int C, int heads, const double *qkv, double *y, double *lse) {
  int D = C / heads;
  double *p = malloc((size_t)T * sizeof *p);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < T; i++) {
        lse[((size_t)b * heads + h) * T + i] = probs(T, C, D, qkv, b, h, i, p);
        for (int d = 0; d < D; d++) {
          double s = 0;
          for (int j = 0; j <= i; j++) s += p[j] * qkv[qkv_at(T, C, D, b, j, 2, h, d)];
          y[((size_t)b * T + i) * C + (size_t)h * D + d] = s;
        }
      }
  free(p);
}

void ref_attention_backward(int B, int T, int C, int heads, const double *qkv, const double *dy, double *dqkv) {
  int D = C / heads;
  double scale = 1.0 / sqrt((double)D);
  double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
  memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof *dqkv);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < T; i++) {
        probs(T, C, D, qkv, b, h, i, p);
        const double *g = dy + ((size_t)b * T + i) * C + (size_t)h * D;
        double pdp = 0; /* sum_j p_j dp_j */
        for (int j = 0; j <= i; j++) {
          dp[j] = 0;
          for (int d = 0; d < D; d++) dp[j] += g[d] * qkv[qkv_at(T, C, D, b, j, 2, h, d)];
          pdp += p[j] * dp[j];
        }
        for (int j = 0; j <= i; j++) {
          double ds = p[j] * (dp[j] - pdp) * scale;
          for (int d = 0; d < D; d++) {
            dqkv[qkv_at(T, C, D, b, j, 2, h, d)] += p[j] * g[d];
            dqkv[qkv_at(T, C, D, b, i, 0, h, d)] += ds * qkv[qkv_at(T, C, D, b, j, 1, h, d)];
            dqkv[qkv_at(T, C, D, b, j, 1, h, d)] += ds * qkv[qkv_at(T, C, D, b, i, 0, h, d)];
          }
        }
      }
  free(p), free(dp);
}

void ref_add(size_t n, const double *a, const double *b, double *y) {
  for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
