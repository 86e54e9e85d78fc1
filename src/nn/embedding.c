/*
 * embedding.c: the transformer's token embedding (y = wte[tokens]) and
 * learned position embedding (y = x + wpe[t]), forward and backward
 * (cl/embedding.cl). Tables and their gradients are f32; y, x and dy are
 * f32, or f16 under mixed precision. The token gradient is a deterministic
 * scatter-add: see clt_nn_embedding_backward in nn.h for the order.
 */
#include "nn/common.h"

/* Tokens are exact in a float below 2^24, so no table may be larger. */
#define MAX_VOCAB ((int64_t)1 << 24)

/* tokens (N) f32, wte (V, C) f32, rows (N, C) act. */
static int check_embedding(const char *op, const clt_tensor *tokens, const clt_tensor *wte, const char *wname,
                           const clt_tensor *rows, const char *rname) {
  int rc;
  if ((rc = clt__nn_check(op, "tokens", tokens, CLT_F32, 1, "(N) of token ids")) < 0) return rc;
  if ((rc = clt__nn_check(op, wname, wte, CLT_F32, 2, "(V, C)")) < 0) return rc;
  if ((rc = clt__nn_check_act(op, rname, rows, 2, "(N, C)")) < 0) return rc;
  clt__nn_named ts[] = {{"tokens", tokens}, {wname, wte}, {rname, rows}};
  if (rows->shape[0] != tokens->shape[0] || rows->shape[1] != wte->shape[1])
    return clt__nn_shape_error(op, ts, 3, "%s must be (%lld, %lld): one row of %s's width per token", rname,
                               (long long)tokens->shape[0], (long long)wte->shape[1], wname);
  if (wte->shape[0] > MAX_VOCAB)
    return clt__nn_shape_error(op, ts, 3, "%s has more than 2^24 rows, which tokens stored as floats cannot name",
                               wname);
  return CLT_OK;
}

size_t clt_nn_embedding_scratch_bytes(int64_t N) { return (size_t)N * sizeof(cl_int); }

int clt_nn_embedding_forward(clt_context *ctx, const clt_tensor *tokens, const clt_tensor *wte, const clt_tensor *y) {
  static const char op[] = "embedding forward";
  int rc = check_embedding(op, tokens, wte, "wte", y, "y");
  if (rc < 0) return rc;
  cl_kernel k;
  cl_ulong toff = clt__nn_off(tokens), woff = clt__nn_off(wte), yoff = clt__nn_off(y);
  cl_uint V = (cl_uint)wte->shape[0];
  CLT_TRY(clt_context_kernel(ctx, "embedding", "embedding_forward", clt__nn_act_opt(y), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(tokens->buf), NN_VAL(toff), NN_VAL(wte->buf), NN_VAL(woff), NN_VAL(y->buf),
                      NN_VAL(yoff), NN_VAL(V)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)wte->shape[1], (size_t)tokens->shape[0], 1));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_embedding_backward(clt_context *ctx, const clt_tensor *tokens, const clt_tensor *dy,
                              const clt_tensor *dwte) {
  static const char op[] = "embedding backward";
  int rc = check_embedding(op, tokens, dwte, "dwte", dy, "dy");
  if (rc < 0) return rc;
  int64_t N = tokens->shape[0];
  cl_kernel k;
  cl_mem links;
  cl_ulong toff = clt__nn_off(tokens), dyoff = clt__nn_off(dy), woff = clt__nn_off(dwte), loff = 0;
  cl_uint n = (cl_uint)N, V = (cl_uint)dwte->shape[0];
  CLT_TRY(clt__context_scratch(ctx, clt_nn_embedding_scratch_bytes(N), &links));

  /* Each row's next row with its token, and whether it is the first. */
  CLT_TRY(clt_context_kernel(ctx, "embedding", "embedding_links", NULL, &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(tokens->buf), NN_VAL(toff), NN_VAL(n), NN_VAL(links), NN_VAL(loff)));
  CLT_TRY(clt__launch_exact_1d(ctx, k, (size_t)N));

  /* One item per (channel, row): the first row of each token walks its chain. */
  CLT_TRY(clt_context_kernel(ctx, "embedding", "embedding_backward", clt__nn_act_opt(dy), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(tokens->buf), NN_VAL(toff), NN_VAL(links), NN_VAL(loff), NN_VAL(dy->buf),
                      NN_VAL(dyoff), NN_VAL(dwte->buf), NN_VAL(woff), NN_VAL(n), NN_VAL(V)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)dwte->shape[1], (size_t)N, 1));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

/* x (B, T, C) act, wpe (Tmax, C) f32 with T <= Tmax. */
static int check_posembed(const char *op, const char *xname, const clt_tensor *x, const char *wname,
                          const clt_tensor *wpe) {
  int rc;
  if ((rc = clt__nn_check_act(op, xname, x, 3, "(B, T, C)")) < 0) return rc;
  if ((rc = clt__nn_check(op, wname, wpe, CLT_F32, 2, "(Tmax, C)")) < 0) return rc;
  clt__nn_named ts[] = {{xname, x}, {wname, wpe}};
  if (x->shape[2] != wpe->shape[1])
    return clt__nn_shape_error(op, ts, 2, "%s has %lld channels, %s %lld", xname, (long long)x->shape[2], wname,
                               (long long)wpe->shape[1]);
  if (x->shape[1] > wpe->shape[0])
    return clt__nn_shape_error(op, ts, 2, "T = %lld positions, but %s holds only %lld", (long long)x->shape[1], wname,
                               (long long)wpe->shape[0]);
  return CLT_OK;
}

int clt_nn_posembed_forward(clt_context *ctx, const clt_tensor *x, const clt_tensor *wpe, const clt_tensor *y) {
  static const char op[] = "posembed forward";
  int rc = check_posembed(op, "x", x, "wpe", wpe);
  if (rc < 0) return rc;
  if ((rc = clt__nn_check_like(op, "y", y, "x", x)) < 0) return rc;
  cl_kernel k;
  cl_ulong xoff = clt__nn_off(x), woff = clt__nn_off(wpe), yoff = clt__nn_off(y);
  CLT_TRY(clt_context_kernel(ctx, "embedding", "posembed_forward", clt__nn_act_opt(x), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(x->buf), NN_VAL(xoff), NN_VAL(wpe->buf), NN_VAL(woff), NN_VAL(y->buf), NN_VAL(yoff)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)x->shape[2], (size_t)x->shape[1], (size_t)x->shape[0]));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}

int clt_nn_posembed_backward(clt_context *ctx, const clt_tensor *dy, const clt_tensor *dwpe) {
  static const char op[] = "posembed backward";
  int rc = check_posembed(op, "dy", dy, "dwpe", dwpe);
  if (rc < 0) return rc;
  cl_kernel k;
  cl_ulong dyoff = clt__nn_off(dy), woff = clt__nn_off(dwpe);
  cl_uint B = (cl_uint)dy->shape[0];
  CLT_TRY(clt_context_kernel(ctx, "embedding", "posembed_backward", clt__nn_act_opt(dy), &k));
  CLT_TRY(NN_SET_ARGS(k, NN_VAL(dy->buf), NN_VAL(dyoff), NN_VAL(dwpe->buf), NN_VAL(woff), NN_VAL(B)));
  CLT_TRY(clt__nn_launch_3d(ctx, k, (size_t)dy->shape[2], (size_t)dy->shape[1], 1));
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "%s on %s", op, ctx->info.name);
}
