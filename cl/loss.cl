// loss.cl: softmax cross-entropy over rows of C logits, forward and
// backward fused, computed in float. logits and dlogits are stored as act_t
// (cl/prelude.cl); the losses are float. One work-group per row (a power of
// two); the loss of the batch is then summed by one work-group in a fixed
// order, so the same logits give the same bits every run.

// Row n: loss = log(sum_j exp(z_j - m)) - (z_label - m) with m the row
// maximum, which keeps every exp in (0, 1] whatever the logits;
// dlogits = scale * (softmax - onehot(label)); correct += argmax == label.
// A label equal to `ignore` (a negative ignore index: padding, say) gives
// loss 0 and a zero gradient row and is not counted as correct; any other
// label outside [0, C) gives NaN loss and gradient. scale is the loss
// scale under mixed precision (up to 65536): a gradient beyond the stored
// type's range is stored as inf, which the trainer's overflow check sees.
__kernel void xent_rows(__global const act_t *logits, const ulong loff, __global const int *labels,
                        const ulong laboff, const int ignore, __global act_t *dlogits, const ulong doff,
                        const int has_grad,
                        __global float *losses, const ulong lsoff, __global int *correct, const ulong coff,
                        const int has_correct, const uint C, const float scale, __local float *fscratch,
                        __local int *iscratch) {
  const uint row = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const ulong base = (ulong)row * C;
  const int label = labels[laboff + row];
  // An ignored row runs the same code (no early return before barriers,
  // which PoCL's work-group loops do not take) and stores zeros at the end.
  const int ignored = label == ignore;
  const int valid = label >= 0 && label < (int)C;
  // Read before the first barrier: with dlogits == logits (in place), the
  // gradient overwrites the row only after every item has passed it.
  const float zlabel = valid ? ALOAD(logits, loff + base + label) : 0.0f;

  // Row maximum and its first index: each item scans its own elements in
  // order, then pairs merge keeping the larger value, the lower index on ties.
  float best = -INFINITY;
  int besti = (int)C;
  for (uint j = lid; j < C; j += wgs) {
    float v = ALOAD(logits, loff + base + j);
    if (v > best || besti == (int)C) {
      best = v;
      besti = (int)j;
    }
  }
  fscratch[lid] = best;
  iscratch[lid] = besti;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = wgs / 2; s > 0; s >>= 1) {
    if (lid < s) {
      float ov = fscratch[lid + s];
      int oi = iscratch[lid + s];
      float mv = fscratch[lid];
      int mi = iscratch[lid];
      if (oi < (int)C && (mi == (int)C || ov > mv || (ov == mv && oi < mi))) {
        fscratch[lid] = ov;
        iscratch[lid] = oi;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float m = fscratch[0];
  const int argmax = iscratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);

  float s = 0.0f;
  for (uint j = lid; j < C; j += wgs) s += exp(ALOAD(logits, loff + base + j) - m);
  fscratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint t = wgs / 2; t > 0; t >>= 1) {
    if (lid < t) fscratch[lid] += fscratch[lid + t];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float sum = fscratch[0];

  if (has_grad) {
    const float inv = 1.0f / sum;
    for (uint j = lid; j < C; j += wgs) {
      float p = exp(ALOAD(logits, loff + base + j) - m) * inv;
      float g = ignored ? 0.0f : valid ? scale * (p - ((int)j == label ? 1.0f : 0.0f)) : NAN;
      ASTORE(dlogits, doff + base + j, g);
    }
  }
  if (lid == 0) {
    losses[lsoff + row] = ignored ? 0.0f : valid ? log(sum) - (zlabel - m) : NAN;
    if (has_correct && valid && argmax == label) atomic_inc(&correct[coff]);
  }
}

// loss[0] = the sum of losses[0..N), in a fixed order.
__kernel void xent_sum(__global const float *losses, const ulong lsoff, const uint N, __global float *loss,
                       const ulong loff, __local float *scratch) {
  const uint lid = get_local_id(0), wgs = get_local_size(0);
  float s = 0.0f;
  for (uint i = lid; i < N; i += wgs) s += losses[lsoff + i];
  scratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint t = wgs / 2; t > 0; t >>= 1) {
    if (lid < t) scratch[lid] += scratch[lid + t];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) loss[loff] = scratch[0];
}
