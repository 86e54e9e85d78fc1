// optim.cl: fused optimizer steps over the whole parameter arena.
//
// Every kernel first forms g = grad * gscale, where gscale folds the
// division by the global batch size and the gradient-clipping factor into
// one multiply, then applies weight decay and the update in one pass over
// parameters, gradients and state.
//
// Replicas on different vendors' devices must stay bitwise identical, so
// every operation here is a single correctly rounded IEEE operation: no
// contraction into FMA (the pragma), no mad(), and the host builds this file
// with -cl-fp32-correctly-rounded-divide-sqrt (devices without it get the
// same arithmetic from clt__optimizer_step_host in src/core/optim.c instead).
#pragma OPENCL FP_CONTRACT OFF

// decay (NULL: every parameter) says per parameter whether weight decay
// applies: GPT-2's AdamW skips biases, norms and embeddings. A parameter it
// skips is updated with wd = 0. Its entries start at doff (a sharded step
// over part of the arena reads the mask of that part).
//
// SGD with momentum mu (PyTorch semantics, no dampening):
//   g += wd * p;  buf = mu * buf + g;  g = nesterov ? g + mu * buf : buf;  p -= lr * g
// With mu == 0 the momentum buffer is neither read nor written.
// p, grad and buf start at element offsets poff, goff and boff.
__kernel void sgd_step(__global float *p, const ulong poff, __global const float *grad, const ulong goff,
                       __global float *buf, const ulong boff, const ulong n, const float lr, const float gscale,
                       const float mu, const float wd_all, const int nesterov, __global const uchar *decay,
                       const ulong doff) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  p += poff;
  grad += goff;
  buf += boff;
  const float wd = decay && !decay[doff + i] ? 0.0f : wd_all;
  float w = p[i];
  float g = grad[i] * gscale + wd * w;
  if (mu != 0.0f) {
    float b = mu * buf[i] + g;
    buf[i] = b;
    g = nesterov ? g + mu * b : b;
  }
  p[i] = w - lr * g;
}

// Adam (decoupled == 0: L2 weight decay added to the gradient) and AdamW
// (decoupled == 1: p -= lr * wd * p before the update). bc1 = 1 - beta1^t and
// bc2 = 1 - beta2^t are the bias corrections, computed on the host in double.
// The state holds m in its first n floats and v in the next n.
__kernel void adam_step(__global float *p, const ulong poff, __global const float *grad, const ulong goff,
                        __global float *state, const ulong soff, const ulong n, const float lr, const float gscale,
                        const float beta1, const float beta2, const float eps, const float wd_all, const int decoupled,
                        const float bc1, const float bc2, __global const uchar *decay, const ulong doff) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  const float wd = decay && !decay[doff + i] ? 0.0f : wd_all;
  p += poff;
  grad += goff;
  __global float *m = state + soff;
  __global float *v = m + n;
  float w = p[i];
  float g = grad[i] * gscale;
  if (decoupled)
    w -= lr * wd * w;
  else
    g = g + wd * w;
  float mi = beta1 * m[i] + (1.0f - beta1) * g;
  float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  float mhat = mi / bc1;
  float vhat = vi / bc2;
  p[i] = w - lr * mhat / (sqrt(vhat) + eps);
}

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"),
// as lion-pytorch's update_fn, with one state slot m (n floats):
//   p *= 1 - lr * wd;  p -= lr * sign(beta1 * m + (1 - beta1) * g);
//   m = beta2 * m + (1 - beta2) * g
// Weight decay is decoupled (masked as AdamW's). sign is torch.sign's: 0
// for 0 (the parameter only decays), NaN stays NaN. There is no divide or
// square root, so every device gives these bits without build options.
__kernel void lion_step(__global float *p, const ulong poff, __global const float *grad, const ulong goff,
                        __global float *state, const ulong soff, const ulong n, const float lr, const float gscale,
                        const float beta1, const float beta2, const float wd_all, __global const uchar *decay,
                        const ulong doff) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  const float wd = decay && !decay[doff + i] ? 0.0f : wd_all;
  p += poff;
  grad += goff;
  __global float *m = state + soff;
  float w = p[i] * (1.0f - lr * wd);
  float g = grad[i] * gscale;
  float c = beta1 * m[i] + (1.0f - beta1) * g;
  float u = c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c == 0.0f ? 0.0f : c;
  p[i] = w - lr * u;
  m[i] = beta2 * m[i] + (1.0f - beta2) * g;
}
