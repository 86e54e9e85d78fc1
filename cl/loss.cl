// loss.cl: softmax cross-entropy over rows of C logits, forward and
// backward fused, computed in float. logits and dlogits are stored as act_t
// (cl/prelude.cl); the losses are float. One work-group per row (a power of
// two); the loss of the batch is then summed by one work-group in a fixed
// order, so the same logits give the same bits every run.

// XENT_VW (-D, 8 when it divides C, else 1; 16 on PoCL where 16 divides
// C): each item takes its row's elements XENT_VW at a time, as one vector,
// so that exp runs that wide (on PoCL, where one item walks the whole row,
// a scalar exp per element was most of the cost; float16 in a function's
// arguments lets LLVM use 512-bit registers).
#ifndef XENT_VW
#define XENT_VW 1
#endif
#if XENT_VW == 16
typedef float16 xv_t;
typedef int16 xi_t;
#define LANES ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#define xload(p, i) ((float16)(aload8(p, i), aload8(p, (i) + 8)))
#define xstore(p, i, v) (astore8(p, i, (v).lo), astore8(p, (i) + 8, (v).hi))
float xsum(const float16 v) { return hsum8(v.lo + v.hi); }
float xmax(const float16 v) {
  const float8 a0 = fmax(v.lo, v.hi);
  const float4 a = fmax(a0.lo, a0.hi);
  const float2 b = fmax(a.lo, a.hi);
  return fmax(b.x, b.y);
}
int xmin(const int16 v) {
  const int8 a0 = min(v.lo, v.hi);
  const int4 a = min(a0.lo, a0.hi);
  const int2 b = min(a.lo, a.hi);
  return min(b.x, b.y);
}
#elif XENT_VW == 8
typedef float8 xv_t;
typedef int8 xi_t;
#define LANES ((int8)(0, 1, 2, 3, 4, 5, 6, 7))
#define xload(p, i) aload8(p, i)
#define xstore(p, i, v) astore8(p, i, v)
#define xsum(v) hsum8(v)
float xmax(const float8 v) {
  const float4 a = fmax(v.lo, v.hi);
  const float2 b = fmax(a.lo, a.hi);
  return fmax(b.x, b.y);
}
int xmin(const int8 v) {
  const int4 a = min(v.lo, v.hi);
  const int2 b = min(a.lo, a.hi);
  return min(b.x, b.y);
}
#else
typedef float xv_t;
typedef int xi_t;
#define LANES 0
#define xload(p, i) ALOAD(p, i)
#define xstore(p, i, v) ASTORE(p, i, v)
#define xsum(v) (v)
#define xmax(v) (v)
#define xmin(v) (v)
#endif

// Row n: loss = log(sum_j exp(z_j - m)) - (z_label - m) with m the row
// maximum, which keeps every exp in (0, 1] whatever the logits;
// dlogits = scale * (softmax - onehot(label)); correct += argmax == label,
// the argmax being the first index of the maximum. A label equal to
// `ignore` (a negative ignore index: padding, say) gives loss 0 and a zero
// gradient row and is not counted as correct; any other label outside
// [0, C) gives NaN loss and gradient. scale is the loss scale under mixed
// precision (up to 65536): a gradient beyond the stored type's range is
// stored as inf, which the trainer's overflow check sees.
__kernel void xent_rows(__global const act_t *logits, const ulong loff, __global const int *labels,
                        const ulong laboff, const int ignore, __global act_t *dlogits, const ulong doff,
                        const int has_grad,
                        __global float *losses, const ulong lsoff, __global int *correct, const ulong coff,
                        const int has_correct, const uint C, const float scale, __local float *fscratch,
                        __local int *iscratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint first = lid * XENT_VW, step = wgs * XENT_VW;
  const ulong base = loff + (ulong)row * C;
  const int label = labels[laboff + row];
  // An ignored row runs the same code (no early return before barriers,
  // which PoCL's work-group loops do not take) and stores zeros at the end.
  const int ignored = label == ignore;
  const int valid = label >= 0 && label < (int)C;
  // Read before the first barrier: with dlogits == logits (in place), the
  // gradient overwrites the row only after every item has passed it.
  const float zlabel = valid ? ALOAD(logits, base + label) : 0.0f;

  // The row maximum: each item's lanes, then a tree.
  xv_t mv = -INFINITY;
  for (uint j = first; j < C; j += step) mv = fmax(mv, xload(logits, base + j));
  fscratch[lid] = xmax(mv);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint t = wgs / 2; t > 0; t >>= 1) {
    if (lid < t) fscratch[lid] = fmax(fscratch[lid], fscratch[lid + t]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float m = fscratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);

  // sum_j exp(z_j - m), and the first index holding m, in one pass.
  xv_t sv = 0.0f;
  xi_t iv = (xi_t)(int)C;
  for (uint j = first; j < C; j += step) {
    const xv_t v = xload(logits, base + j);
    sv += exp(v - m);
    iv = min(iv, select((xi_t)(int)C, (xi_t)(int)j + LANES, v == m));
  }
  fscratch[lid] = xsum(sv);
  iscratch[lid] = xmin(iv);
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint t = wgs / 2; t > 0; t >>= 1) {
    if (lid < t) {
      fscratch[lid] += fscratch[lid + t];
      iscratch[lid] = min(iscratch[lid], iscratch[lid + t]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float sum = fscratch[0];
  const int argmax = iscratch[0];

  if (has_grad) {
    const float inv = 1.0f / sum;
    const xi_t bad = (xi_t)(valid - 1), skip = (xi_t)(-ignored); // all bits set when true
    for (uint j = first; j < C; j += step) {
      const xv_t onehot = select((xv_t)0.0f, (xv_t)1.0f, (xi_t)(int)j + LANES == (xi_t)label);
      xv_t g = scale * (exp(xload(logits, base + j) - m) * inv - onehot);
      g = select(select(g, (xv_t)NAN, bad), (xv_t)0.0f, skip);
      xstore(dlogits, doff + (ulong)row * C + j, g);
    }
  }
  if (lid == 0) {
    losses[lsoff + row] = ignored ? 0.0f : valid ? log(sum) - (zlabel - m) : NAN;
    if (has_correct && valid && argmax == label) atomic_inc(&correct[coff]);
  }
}

// loss[0] = the sum of losses[0..N), in a fixed order. Each item's run
// is summed with Kahan's compensation: on a CPU the group is often one
// item, and a plain float sum of a regression's ~10^6 values drifted
// 1.5e-4 from the exact sum (PyTorch's pairwise sum: 7e-9).
__kernel void xent_sum(__global const float *losses, const ulong lsoff, const uint N, __global float *loss,
                       const ulong loff, __local float *scratch) {
  const uint lid = get_local_id(0), wgs = get_local_size(0);
  float s = 0.0f, c = 0.0f;
  for (uint i = lid; i < N; i += wgs) {
    const float y = losses[lsoff + i] - c, t = s + y;
    c = (t - s) - y;
    s = t;
  }
  scratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint t = wgs / 2; t > 0; t >>= 1) {
    if (lid < t) scratch[lid] += scratch[lid + t];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) loss[loff] = scratch[0];
}

// Regression losses, one item per value (launched over exactly M items):
// d = y - target, and as PyTorch's MSELoss, L1Loss and HuberLoss before
// their reduction,
//   kind 1 (MSE)   d^2                                   gradient 2d
//   kind 2 (L1)    |d|                                   gradient sign(d), 0 at d = 0
//   kind 3 (Huber) 0.5 d^2 where |d| < delta,            gradient d clamped to
//                  else delta (|d| - 0.5 delta)          [-delta, delta]
// (the kinds are clt_loss_kind's values). losses[i] is the loss and sq[i]
// the squared error d^2 (what the RMSE is made of); dy = scale * gradient,
// NOT divided by the count: the trainer divides by the global batch's
// target values. A NaN output or target gives NaN loss and gradient.
__kernel void regress_elems(__global const act_t *y, const ulong yoff, __global const float *target,
                            const ulong toff, __global act_t *dy, const ulong doff, const int has_grad,
                            __global float *losses, const ulong lsoff, __global float *sq, const ulong sqoff,
                            const int kind, const float delta, const float scale) {
  const uint i = get_global_id(0);
  const float d = ALOAD(y, yoff + i) - target[toff + i], a = fabs(d);
  float l, g;
  if (kind == 1) {
    l = d * d;
    g = 2.0f * d;
  } else if (kind == 2) {
    l = a;
    g = d > 0.0f ? 1.0f : d < 0.0f ? -1.0f : d * 0.0f; // 0 at 0, NaN stays NaN
  } else {
    l = a < delta ? 0.5f * d * d : delta * (a - 0.5f * delta);
    g = d > delta ? delta : d < -delta ? -delta : d;
  }
  losses[lsoff + i] = l;
  sq[sqoff + i] = d * d;
  if (has_grad) ASTORE(dy, doff + i, scale * g);
}
