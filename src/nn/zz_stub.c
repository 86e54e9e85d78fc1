/* TEMPORARY: not committed */
#include "nn/nn.h"
int clt_nn_embedding_forward(clt_context *c, const clt_tensor *a, const clt_tensor *b, const clt_tensor *d){return CLT_EINTERNAL;}
int clt_nn_embedding_backward(clt_context *c, const clt_tensor *a, const clt_tensor *b, const clt_tensor *d){return CLT_EINTERNAL;}
int clt_nn_posembed_forward(clt_context *c, const clt_tensor *a, const clt_tensor *b, const clt_tensor *d){return CLT_EINTERNAL;}
int clt_nn_posembed_backward(clt_context *c, const clt_tensor *a, const clt_tensor *b){return CLT_EINTERNAL;}
int clt_nn_attention_forward(clt_context *c, int h, const clt_tensor *a, const clt_tensor *b, const clt_tensor *d){return CLT_EINTERNAL;}
int clt_nn_attention_backward(clt_context *c, int h, const clt_tensor *a, const clt_tensor *b, const clt_tensor *d, const clt_tensor *e, const clt_tensor *f){return CLT_EINTERNAL;}
size_t clt_nn_attention_scratch_bytes(int64_t B, int64_t T, int64_t C, int heads, clt_dtype dtype){return 0;}
int clt_nn_residual_forward(clt_context *c, const clt_tensor *x, const clt_tensor *s, const clt_tensor *y){return clt_add(c,x,s,y);}
int clt_nn_accumulate(clt_context *c, const clt_tensor *dy, const clt_tensor *g){return clt_axpy(c,1.0f,dy,g);}
