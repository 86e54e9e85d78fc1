/*
 * flatten.c: (N, ...) -> (N, prod(...)), a view change with no kernel; the
 * backward is the same view of dy.
 */
#include "nn/common.h"

int clt_nn_flatten(const clt_tensor *x, clt_tensor *out) {
  if (!x || !out) return clt__error(CLT_EINVAL, "flatten: tensor x or out is missing (NULL)");
  if (x->ndim < 1) {
    char s[128];
    return clt__error(CLT_ESHAPE, "flatten: x %s has no batch dimension", clt_tensor_shape_str(x, s, sizeof s));
  }
  clt_tensor t = *x;
  t.ndim = 2;
  t.shape[1] = x->ndim == 1 ? 1 : clt_tensor_numel(x) / x->shape[0];
  for (int i = 2; i < CLT_MAX_DIMS; i++) t.shape[i] = 0;
  *out = t;
  return CLT_OK;
}
