/*
 * nn_bench.c: milliseconds per call of every layer kernel that a training
 * step of the Fashion-MNIST models runs (examples/fashion_cnn.model and
 * fashion_mlp.model at batch 64; the MLP's with its SGD step), and of the
 * SGEMMs inside them, on one OpenCL device; with --gpt, of the tiny GPT's
 * layers instead (examples/gpt_tiny.model: context 128, width 128, 4 heads;
 * batch 16). Where the trainer's CLT_PROFILE=1 says which layer is
 * slow, this says which call inside it, without the trainer around it.
 *
 *   bench/nn_bench [--devices SPEC] [--iters N] [--batch B] [--gpt | --unet] [--only SUBSTRING]
 *
 * --unet: the convolutions of the U-Net benchmarks (bench/unet.sh) at
 * batch 8 unless --batch says otherwise; their PyTorch peer is
 * bench/conv3d_torch.py --unet.
 *
 * --only runs the ops whose names contain SUBSTRING ("attention", "sgemm").
 *
 * Each op is run once to build its kernels, then N times with the queue
 * drained after every call; the median and the minimum wall-clock times
 * and the mean CPU time of the process (all OpenCL threads) are printed.
 * On a loaded machine wall-clock time moves with the load while CPU time
 * stays close; with the machine to itself, wall = CPU / cores when the
 * device keeps every core busy.
 * Linked statically against libcltrain, like the nn tests, to reach the
 * internal nn layer (src/nn/nn.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "nn/nn.h"
#include "ref/ref.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (every OpenCL worker thread): on a
 * loaded machine this moves far less than wall-clock time does. */
static double cpu(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static clt_context *ctx;
static int iters = 20;
static const char *only; /* --only: the ops whose names contain it */

/* A float32 (or int32) tensor of the given shape, filled with uniform
 * values in [-1, 1) (int32: zeros). */
static clt_tensor make(int ndim, const int64_t *shape, clt_dtype dt) {
  clt_tensor t;
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  cl_mem buf;
  if (clt_buffer_create(ctx, (size_t)n * 4, &buf) < 0 || clt_tensor_view(buf, 0, dt, ndim, shape, &t) < 0) {
    fprintf(stderr, "nn_bench: %s\n", clt_last_error());
    exit(1);
  }
  if (dt == CLT_F32) {
    float *h = malloc((size_t)n * 4);
    ref_random(h, (size_t)n, (unsigned)n);
    clt_tensor_upload(ctx, &t, h, (size_t)n * 4);
    free(h);
  }
  return t;
}
#define T4(a, b, c, d) make(4, (const int64_t[]){a, b, c, d}, CLT_F32)
#define T2(a, b) make(2, (const int64_t[]){a, b}, CLT_F32)
#define T1(a) make(1, (const int64_t[]){a}, CLT_F32)

typedef int (*op_fn)(void *);

static double total_ms, total_cpu_ms;

static void bench(const char *name, op_fn f, void *arg) {
  if (only && !strstr(name, only)) return;
  double *t = malloc((size_t)iters * sizeof *t);
  if (f(arg) < 0 || clt_context_finish(ctx) < 0) {
    fprintf(stderr, "nn_bench: %s: %s\n", name, clt_last_error());
    exit(1);
  }
  double c0 = cpu();
  for (int i = 0; i < iters; i++) {
    double t0 = now();
    f(arg);
    clt_context_finish(ctx);
    t[i] = (now() - t0) * 1e3;
  }
  double c = (cpu() - c0) * 1e3 / iters;
  for (int i = 1; i < iters; i++) /* insertion sort: iters is small */
    for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
      double s = t[j];
      t[j] = t[j - 1], t[j - 1] = s;
    }
  printf("  %-34s %9.3f %9.3f %9.3f\n", name, t[iters / 2], t[0], c);
  total_ms += t[iters / 2];
  total_cpu_ms += c;
  free(t);
}

/* ---- the ops, as closures over their tensors ------------------------------ */

typedef struct conv_op {
  clt_nn_conv2d_cfg cfg;
  clt_tensor x, w, b, y, dy, dx, dw, db, ws;
  int need_dx;
} conv_op;
static int conv_fwd(void *p) {
  conv_op *c = p;
  return clt_nn_conv2d_forward(ctx, &c->cfg, &c->x, &c->w, &c->b, &c->y, &c->ws);
}
static int conv_bwd(void *p) {
  conv_op *c = p;
  return clt_nn_conv2d_backward(ctx, &c->cfg, &c->x, &c->w, &c->dy, c->need_dx ? &c->dx : NULL, &c->dw, &c->db,
                                &c->ws);
}
/* A k x k 'same' convolution (k odd). */
static conv_op make_conv_k(int64_t N, int64_t Cin, int64_t H, int64_t Cout, int k, int need_dx) {
  int p = k / 2;
  conv_op c = {{1, 1, p, p, CLT_NN_CONV_AUTO}, T4(N, Cin, H, H), T4(Cout, Cin, k, k), T1(Cout), T4(N, Cout, H, H),
               T4(N, Cout, H, H), T4(N, Cin, H, H), T4(Cout, Cin, k, k), T1(Cout), {0}, need_dx};
  int64_t ws = (int64_t)(clt_nn_conv2d_workspace_bytes(N, Cin, Cout, k, k, H, H) / 4);
  c.ws = make(1, &ws, CLT_F32);
  return c;
}
static conv_op make_conv(int64_t N, int64_t Cin, int64_t H, int64_t Cout, int need_dx) {
  conv_op c = {{1, 1, 1, 1, CLT_NN_CONV_AUTO}, T4(N, Cin, H, H), T4(Cout, Cin, 3, 3), T1(Cout), T4(N, Cout, H, H), T4(N, Cout, H, H),
               T4(N, Cin, H, H), T4(Cout, Cin, 3, 3), T1(Cout), {0}, need_dx};
  int64_t ws = (int64_t)(clt_nn_conv2d_workspace_bytes(N, Cin, Cout, 3, 3, H, H) / 4);
  c.ws = make(1, &ws, CLT_F32);
  return c;
}

/* conv3d (src/nn/conv_nd.c): x (N, C, S, S, S), 3x3x3 'same'; peer:
 * bench/conv3d_torch.py with the same shapes. */
typedef struct conv3d_op {
  clt_nn_convnd_cfg cfg;
  clt_tensor x, w, b, y, dy, dx, dw, db, ws;
  int need_dx;
} conv3d_op;
static int conv3d_fwd(void *p) {
  conv3d_op *c = p;
  return clt_nn_convnd_forward(ctx, &c->cfg, &c->x, &c->w, &c->b, &c->y, &c->ws);
}
static int conv3d_bwd(void *p) {
  conv3d_op *c = p;
  return clt_nn_convnd_backward(ctx, &c->cfg, &c->x, &c->w, &c->dy, c->need_dx ? &c->dx : NULL, &c->dw, &c->db,
                                &c->ws);
}
#define T5(a, b, c, d, e) make(5, (const int64_t[]){a, b, c, d, e}, CLT_F32)
/* A k x k x k 'same' convolution (k odd). */
static conv3d_op make_conv3d_k(int64_t N, int64_t Cin, int64_t S, int64_t Cout, int k, int need_dx) {
  int p = k / 2;
  conv3d_op c = {{3, {1, 1, 1}, {p, p, p}, {1, 1, 1}}, T5(N, Cin, S, S, S), T5(Cout, Cin, k, k, k), T1(Cout),
                 T5(N, Cout, S, S, S), T5(N, Cout, S, S, S), T5(N, Cin, S, S, S), T5(Cout, Cin, k, k, k), T1(Cout),
                 {0}, need_dx};
  int64_t ws = (int64_t)(clt_nn_convnd_workspace_bytes(N, Cin, Cout, k * k * k, S * S * S) / 4);
  c.ws = make(1, &ws, CLT_F32);
  return c;
}
static conv3d_op make_conv3d(int64_t N, int64_t Cin, int64_t S, int64_t Cout) {
  conv3d_op c = {{3, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}, T5(N, Cin, S, S, S), T5(Cout, Cin, 3, 3, 3), T1(Cout),
                 T5(N, Cout, S, S, S), T5(N, Cout, S, S, S), T5(N, Cin, S, S, S), T5(Cout, Cin, 3, 3, 3), T1(Cout),
                 {0}, 1};
  int64_t ws = (int64_t)(clt_nn_convnd_workspace_bytes(N, Cin, Cout, 27, S * S * S) / 4);
  c.ws = make(1, &ws, CLT_F32);
  return c;
}

typedef struct act_op {
  clt_tensor x, y, dy, dx;
} act_op;
static int relu_fwd(void *p) {
  act_op *a = p;
  return clt_nn_act_forward(ctx, CLT_NN_RELU, 0, &a->x, &a->y);
}
static int relu_bwd(void *p) {
  act_op *a = p;
  return clt_nn_act_backward(ctx, CLT_NN_RELU, 0, &a->x, &a->y, &a->dy, &a->dx);
}

static int dropout_fwd(void *p) {
  act_op *a = p;
  return clt_nn_dropout_forward(ctx, 0.25f, 42, 1, 0, &a->x, &a->y);
}
static int dropout_bwd(void *p) {
  act_op *a = p;
  return clt_nn_dropout_backward(ctx, 0.25f, 42, 1, 0, &a->dy, &a->dx);
}

typedef struct pool_op {
  clt_nn_pool2d_cfg cfg;
  clt_tensor x, y, arg, dy, dx;
} pool_op;
static int pool_fwd(void *p) {
  pool_op *o = p;
  return clt_nn_maxpool2d_forward(ctx, &o->cfg, &o->x, &o->y, &o->arg);
}
static int pool_bwd(void *p) {
  pool_op *o = p;
  return clt_nn_maxpool2d_backward(ctx, &o->cfg, &o->arg, &o->dy, &o->dx);
}
static pool_op make_pool(int64_t N, int64_t C, int64_t H) {
  pool_op o = {{2, 2, 2, 2, 0, 0}, T4(N, C, H, H), T4(N, C, H / 2, H / 2),
               make(4, (const int64_t[]){N, C, H / 2, H / 2}, CLT_I32), T4(N, C, H / 2, H / 2), T4(N, C, H, H)};
  return o;
}

typedef struct lin_op {
  clt_tensor x, w, b, y, dy, dx, dw, db;
  int need_dx;
} lin_op;
static int lin_fwd(void *p) {
  lin_op *l = p;
  return clt_nn_linear_forward(ctx, &l->x, &l->w, &l->b, &l->y);
}
static int lin_bwd(void *p) {
  lin_op *l = p;
  return clt_nn_linear_backward(ctx, &l->x, &l->w, &l->dy, l->need_dx ? &l->dx : NULL, &l->dw, &l->db);
}
static lin_op make_lin(int64_t N, int64_t in, int64_t out, int need_dx) {
  lin_op l = {T2(N, in), T2(out, in), T1(out), T2(N, out), T2(N, out), T2(N, in), T2(out, in), T1(out), need_dx};
  return l;
}

typedef struct gemm_op {
  int ta, tb;
  size_t m, n, k;
  cl_mem a, b, c;
} gemm_op;
static int gemm(void *p) {
  gemm_op *g = p;
  clt_matrix a = {g->a, 0, g->ta ? g->m : g->k}, b = {g->b, 0, g->tb ? g->k : g->n}, c = {g->c, 0, g->n};
  return clt_sgemm(ctx, g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, b, 0.0f, c);
}
static void bench_gemm(int ta, int tb, size_t m, size_t n, size_t k) {
  gemm_op g = {ta, tb, m, n, k, NULL, NULL, NULL};
  int64_t sa = (int64_t)(m * k), sb = (int64_t)(k * n), sc = (int64_t)(m * n);
  g.a = make(1, &sa, CLT_F32).buf, g.b = make(1, &sb, CLT_F32).buf, g.c = make(1, &sc, CLT_F32).buf;
  char name[64];
  snprintf(name, sizeof name, "sgemm %c%c %zux%zux%zu", ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k);
  bench(name, gemm, &g);
  clt_buffer_release(g.a), clt_buffer_release(g.b), clt_buffer_release(g.c);
}

/* ---- the tiny GPT's layers ---------------------------------------------------- */

typedef struct attn_op {
  int heads;
  clt_tensor qkv, y, lse, dy, dqkv;
} attn_op;
static int attn_fwd(void *p) {
  attn_op *a = p;
  return clt_nn_attention_forward(ctx, a->heads, &a->qkv, &a->y, &a->lse);
}
static int attn_bwd(void *p) {
  attn_op *a = p;
  return clt_nn_attention_backward(ctx, a->heads, &a->qkv, &a->y, &a->lse, &a->dy, &a->dqkv);
}

typedef struct ln_op {
  clt_tensor x, g, b, y, mean, rstd, dy, dx, dg, db;
} ln_op;
static int ln_fwd(void *p) {
  ln_op *l = p;
  return clt_nn_layernorm_forward(ctx, 1e-5f, &l->x, &l->g, &l->b, &l->y, &l->mean, &l->rstd);
}
static int ln_bwd(void *p) {
  ln_op *l = p;
  return clt_nn_layernorm_backward(ctx, &l->x, &l->g, &l->mean, &l->rstd, &l->dy, &l->dx, &l->dg, &l->db);
}

static int gelu_fwd(void *p) {
  act_op *a = p;
  return clt_nn_act_forward(ctx, CLT_NN_GELU, 0, &a->x, &a->y);
}
static int gelu_bwd(void *p) {
  act_op *a = p;
  return clt_nn_act_backward(ctx, CLT_NN_GELU, 0, &a->x, &a->y, &a->dy, &a->dx);
}

typedef struct xent_op {
  clt_tensor logits, labels, dlogits, losses, loss, correct;
} xent_op;
static int xent(void *p) {
  xent_op *x = p;
  return clt_nn_softmax_xent(ctx, &x->logits, &x->labels, -1, 1.0f, &x->dlogits, &x->losses, &x->loss, &x->correct);
}

typedef struct opt_op {
  clt_optimizer_config cfg;
  clt_tensor p, g, state, mask;
} opt_op;
static int opt_step(void *arg) {
  opt_op *o = arg;
  return clt_optimizer_step_masked(ctx, &o->cfg, 1, 1e-3f, 1.0f, &o->p, &o->g, &o->state, o->mask.buf ? &o->mask : NULL);
}

typedef struct emb_op {
  clt_tensor tokens, wte, y, dy, dwte;
} emb_op;
static int emb_fwd(void *p) {
  emb_op *e = p;
  return clt_nn_embedding_forward(ctx, &e->tokens, &e->wte, &e->y);
}
static int emb_bwd(void *p) {
  emb_op *e = p;
  return clt_nn_embedding_backward(ctx, &e->tokens, &e->dy, &e->dwte);
}

static void bench_gpt(int64_t B) {
  const int64_t T = 128, C = 128, H = 4, V = 256, N = B * T;
  printf("GPT (B=%lld, T=%lld, C=%lld, %lld heads)\n", (long long)B, (long long)T, (long long)C, (long long)H);
  int64_t sq[3] = {B, T, 3 * C}, sy[3] = {B, T, C}, sl[3] = {B, H, T};
  attn_op a = {(int)H, make(3, sq, CLT_F32), make(3, sy, CLT_F32), make(3, sl, CLT_F32), make(3, sy, CLT_F32),
               make(3, sq, CLT_F32)};
  ln_op l = {T2(N, C), T1(C), T1(C), T2(N, C), T1(N), T1(N), T2(N, C), T2(N, C), T1(C), T1(C)};
  act_op g = {T2(N, 4 * C), T2(N, 4 * C), T2(N, 4 * C), T2(N, 4 * C)};
  lin_op qkv = make_lin(N, C, 3 * C, 1), proj = make_lin(N, C, C, 1), fc = make_lin(N, C, 4 * C, 1);
  lin_op fc2 = make_lin(N, 4 * C, C, 1), head = make_lin(N, C, V, 1);
  xent_op x = {T2(N, V), make(1, &N, CLT_I32), T2(N, V), T1(N), T1(1), make(1, (const int64_t[]){1}, CLT_I32)};
  emb_op e = {make(1, &N, CLT_F32), T2(V, C), T2(N, C), T2(N, C), T2(V, C)};
  {
    float *tok = malloc((size_t)N * sizeof *tok); /* byte tokens, as text gives */
    for (int64_t i = 0; i < N; i++) tok[i] = (float)((i * 7919 + i / 3) % 97 + 32);
    clt_tensor_upload(ctx, &e.tokens, tok, (size_t)N * sizeof *tok);
    free(tok);
  }
  total_ms = total_cpu_ms = 0;
  bench("token embedding forward", emb_fwd, &e);
  bench("token embedding backward", emb_bwd, &e);
  bench("attention core forward", attn_fwd, &a);
  bench("attention core backward", attn_bwd, &a);
  bench("layernorm forward", ln_fwd, &l);
  bench("layernorm backward", ln_bwd, &l);
  bench("gelu forward", gelu_fwd, &g);
  bench("gelu backward", gelu_bwd, &g);
  bench("linear 128-384 forward", lin_fwd, &qkv);
  bench("linear 128-384 backward", lin_bwd, &qkv);
  bench("linear 128-128 forward", lin_fwd, &proj);
  bench("linear 128-128 backward", lin_bwd, &proj);
  bench("linear 128-512 forward", lin_fwd, &fc);
  bench("linear 128-512 backward", lin_bwd, &fc);
  bench("linear 512-128 forward", lin_fwd, &fc2);
  bench("linear 512-128 backward", lin_bwd, &fc2);
  bench("linear 128-256 forward", lin_fwd, &head);
  bench("linear 128-256 backward", lin_bwd, &head);
  bench("softmax_xent", xent, &x);
  /* AdamW over the model's 445952 parameters, matrices decayed */
  const int64_t P = 445952, P2 = 2 * P;
  opt_op o = {{0}, make(1, &P, CLT_F32), make(1, &P, CLT_F32), make(1, &P2, CLT_F32), make(1, &P, CLT_U8)};
  clt_optimizer_defaults(CLT_OPT_ADAMW, &o.cfg);
  bench("adamw step (445952 parameters)", opt_step, &o);
  printf("  %-34s %9.3f %9s %9.3f\n", "sums", total_ms, "", total_cpu_ms);
  printf("SGEMMs inside the GPT's linears (forward NT, dw TN, dx NN)\n");
  const int64_t widths[][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}};
  for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
    size_t in = (size_t)widths[i][0], out = (size_t)widths[i][1], n = (size_t)N;
    bench_gemm(0, 1, n, out, in);
    bench_gemm(1, 0, out, in, n);
    bench_gemm(0, 0, n, in, out);
  }
}

/* The convolutions of bench/unet2d.model and bench/unet3d.model (issue
 * 40's speed targets), each 'same', the first without dx; peer:
 * bench/conv3d_torch.py --unet. */
static const int unet_convs[][6] = {
    /* dims, Cin, Cout, size, kernel, dx */
    {2, 2, 16, 64, 3, 0},  {2, 16, 16, 64, 3, 1}, {2, 16, 32, 32, 3, 1}, {2, 32, 32, 32, 3, 1},
    {2, 32, 64, 16, 3, 1}, {2, 64, 64, 16, 3, 1}, {2, 64, 32, 32, 3, 1}, {2, 32, 16, 64, 3, 1},
    {2, 16, 2, 64, 1, 1},  {3, 1, 8, 16, 3, 0},   {3, 8, 16, 8, 3, 1},   {3, 16, 16, 8, 3, 1},
    {3, 24, 8, 16, 3, 1},  {3, 8, 1, 16, 1, 1}};

static void bench_unet(int64_t N) {
  printf("U-Net convolutions (bench/unet2d.model, unet3d.model)\n");
  total_ms = total_cpu_ms = 0;
  for (size_t i = 0; i < sizeof unet_convs / sizeof unet_convs[0]; i++) {
    const int *u = unet_convs[i];
    char name[3][64];
    for (int b = 0; b < 3; b++)
      snprintf(name[b], sizeof name[b], "conv%dd %d-%d %d^%d k%d %s", u[0], u[1], u[2], u[3], u[0], u[4],
               b == 0 ? "forward" : b == 1 && u[5] ? "backward" : "backward (no dx)");
    /* with dx, the weight gradient alone too (the rest is dx's) */
    if (u[0] == 2) {
      conv_op c = make_conv_k(N, u[1], u[3], u[2], u[4], u[5]);
      bench(name[0], conv_fwd, &c);
      bench(name[1], conv_bwd, &c);
      if (c.need_dx) c.need_dx = 0, bench(name[2], conv_bwd, &c);
    } else {
      conv3d_op c = make_conv3d_k(N, u[1], u[3], u[2], u[4], u[5]);
      bench(name[0], conv3d_fwd, &c);
      bench(name[1], conv3d_bwd, &c);
      if (c.need_dx) c.need_dx = 0, bench(name[2], conv3d_bwd, &c);
    }
  }
  printf("  %-34s %9.3f %9s %9.3f\n", "sums", total_ms, "", total_cpu_ms);
  printf("SGEMMs of one sample of the two slowest (32-16 64^2, 24-8 16^3)\n");
  bench_gemm(0, 0, 16, 4096, 288);
  bench_gemm(0, 1, 16, 288, 4096);
  bench_gemm(1, 0, 288, 4096, 16);
  bench_gemm(0, 0, 8, 4096, 648);
  bench_gemm(0, 1, 8, 648, 4096);
  bench_gemm(1, 0, 648, 4096, 8);
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"devices", required_argument, 0, 'd'},
                                       {"iters", required_argument, 0, 'i'},
                                       {"batch", required_argument, 0, 'b'},
                                       {"gpt", no_argument, 0, 'g'},
                                       {"unet", no_argument, 0, 'u'},
                                       {"only", required_argument, 0, 'o'},
                                       {"help", no_argument, 0, 'h'},
                                       {0}};
  const char *spec = "pocl";
  int64_t N = 0;
  int c, gpt = 0, unet = 0;
  while ((c = getopt_long(argc, argv, "d:i:b:guo:h", opts, NULL)) != -1) {
    switch (c) {
    case 'd': spec = optarg; break;
    case 'i': iters = atoi(optarg); break;
    case 'b': N = atoll(optarg); break;
    case 'g': gpt = 1; break;
    case 'u': unet = 1; break;
    case 'o': only = optarg; break;
    default:
      fprintf(c == 'h' ? stdout : stderr,
              "usage: nn_bench [--devices SPEC] [--iters N] [--batch B] [--gpt | --unet] [--only SUBSTRING]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  if (iters < 1) iters = 1;
  if (N < 1) N = gpt ? 16 : unet ? 8 : 64;
  clt_devices *all = NULL, *sel = NULL;
  if (clt_devices_discover(&all) < 0 || clt_devices_select(all, spec, &sel) < 0 || clt_devices_count(sel) < 1) {
    fprintf(stderr, "nn_bench: no device for '%s': %s\n", spec, clt_last_error());
    return 77;
  }
  if (clt_context_create(sel, 0, &ctx) < 0) {
    fprintf(stderr, "nn_bench: %s\n", clt_last_error());
    return 1;
  }
  printf("# %s, batch %lld: ms per call: wall median, wall min, CPU mean (all threads) of %d\n", clt_context_device(ctx)->name, (long long)N, iters);

  if (gpt) {
    bench_gpt(N);
    goto done;
  }
  if (unet) {
    bench_unet(N);
    goto done;
  }
  printf("CNN\n");
  conv_op c1 = make_conv(N, 1, 28, 32, 0), c2 = make_conv(N, 32, 14, 64, 1);
  act_op a1 = {T4(N, 32, 28, 28), T4(N, 32, 28, 28), T4(N, 32, 28, 28), T4(N, 32, 28, 28)};
  act_op a2 = {T4(N, 64, 14, 14), T4(N, 64, 14, 14), T4(N, 64, 14, 14), T4(N, 64, 14, 14)};
  pool_op p1 = make_pool(N, 32, 28), p2 = make_pool(N, 64, 14);
  lin_op l1 = make_lin(N, 3136, 128, 1), l2 = make_lin(N, 128, 10, 1);
  act_op d1 = {T2(N, 128), T2(N, 128), T2(N, 128), T2(N, 128)};
  total_ms = total_cpu_ms = 0;
  bench("conv1 forward", conv_fwd, &c1);
  bench("relu1 forward", relu_fwd, &a1);
  bench("maxpool1 forward", pool_fwd, &p1);
  bench("conv2 forward", conv_fwd, &c2);
  bench("relu2 forward", relu_fwd, &a2);
  bench("maxpool2 forward", pool_fwd, &p2);
  bench("linear 3136-128 forward", lin_fwd, &l1);
  bench("dropout forward", dropout_fwd, &d1);
  bench("linear 128-10 forward", lin_fwd, &l2);
  bench("linear 128-10 backward", lin_bwd, &l2);
  bench("dropout backward", dropout_bwd, &d1);
  bench("linear 3136-128 backward", lin_bwd, &l1);
  bench("maxpool2 backward", pool_bwd, &p2);
  bench("relu2 backward", relu_bwd, &a2);
  bench("conv2 backward", conv_bwd, &c2);
  bench("maxpool1 backward", pool_bwd, &p1);
  bench("relu1 backward", relu_bwd, &a1);
  bench("conv1 backward (no dx)", conv_bwd, &c1);
  printf("  %-34s %9.3f %9s %9.3f\n", "sums", total_ms, "", total_cpu_ms);
  printf("SGEMMs inside the CNN's layers\n");
  size_t n = (size_t)N;
  bench_gemm(0, 0, 32, n * 784, 9);
  bench_gemm(0, 1, 32, 9, n * 784);
  bench_gemm(0, 0, 64, n * 196, 288);
  bench_gemm(0, 1, 64, 288, n * 196);
  bench_gemm(1, 0, 288, n * 196, 64);
  printf("The same for one chunk of 4 samples (a CPU device's, src/nn/conv.c)\n");
  bench_gemm(0, 0, 64, 4 * 196, 288);
  bench_gemm(0, 1, 64, 288, 4 * 196);
  bench_gemm(1, 0, 288, 4 * 196, 64);
  printf("conv3d (batch %d)\n", (int)N);
  conv3d_op v1 = make_conv3d(N, 8, 16, 16), v2 = make_conv3d(N, 16, 8, 32);
  total_ms = total_cpu_ms = 0;
  bench("conv3d 8-16 16^3 forward", conv3d_fwd, &v1);
  bench("conv3d 8-16 16^3 backward", conv3d_bwd, &v1);
  bench("conv3d 16-32 8^3 forward", conv3d_fwd, &v2);
  bench("conv3d 16-32 8^3 backward", conv3d_bwd, &v2);
  printf("  %-34s %9.3f %9s %9.3f\n", "sums", total_ms, "", total_cpu_ms);
  printf("MLP\n");
  lin_op m1 = make_lin(N, 784, 256, 0), m2 = make_lin(N, 256, 128, 1), m3 = make_lin(N, 128, 10, 1);
  act_op r1 = {T2(N, 256), T2(N, 256), T2(N, 256), T2(N, 256)}, r2 = {T2(N, 128), T2(N, 128), T2(N, 128), T2(N, 128)};
  total_ms = total_cpu_ms = 0;
  bench("linear 784-256 forward", lin_fwd, &m1);
  bench("relu forward", relu_fwd, &r1);
  bench("linear 256-128 forward", lin_fwd, &m2);
  bench("relu forward", relu_fwd, &r2);
  bench("linear 128-10 forward", lin_fwd, &m3);
  bench("linear 128-10 backward", lin_bwd, &m3);
  bench("relu backward", relu_bwd, &r2);
  bench("linear 256-128 backward", lin_bwd, &m2);
  bench("relu backward", relu_bwd, &r1);
  bench("linear 784-256 backward (no dx)", lin_bwd, &m1);
  /* SGD over the MLP's 235146 parameters (cltrain train's default optimizer) */
  const int64_t P = 235146;
  opt_op o = {{0}, make(1, &P, CLT_F32), make(1, &P, CLT_F32), make(1, &P, CLT_F32), {0}}; /* no decay mask */
  clt_optimizer_defaults(CLT_OPT_SGD, &o.cfg);
  bench("sgd step (235146 parameters)", opt_step, &o);
  printf("  %-34s %9.3f %9s %9.3f\n", "sums", total_ms, "", total_cpu_ms);
done:
  clt_context_destroy(ctx);
  clt_devices_destroy(sel);
  clt_devices_destroy(all);
  return 0;
}
