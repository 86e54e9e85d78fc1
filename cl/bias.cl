// bias.cl: per-channel bias for tensors seen as (N, C, P): linear layers
// (P = 1) and convolutions (P = OH*OW). y and dy are stored as act_t
// (cl/prelude.cl); the bias and its gradient are float.

// y[n, c, p] += b[c], over exactly (P, C, N) items: no division per
// element (a modulo by C per element kept PoCL from vectorizing, and cost a
// linear layer more than its GEMM).
__kernel void bias_add(__global act_t *y, const ulong yoff, __global const float *b, const ulong boff) {
  const uint p = get_global_id(0), c = get_global_id(1), n = get_global_id(2);
  const uint P = get_global_size(0), C = get_global_size(1);
  const ulong i = yoff + ((ulong)n * C + c) * P + p;
  ASTORE(y, i, ALOAD(y, i) + b[boff + c]);
}

// The same for P = 1 (a linear layer), over exactly (C, N, 1) items, so
// that the fastest index runs along a row.
__kernel void bias_add_rows(__global act_t *y, const ulong yoff, __global const float *b, const ulong boff) {
  const uint c = get_global_id(0), n = get_global_id(1), C = get_global_size(0);
  const ulong i = yoff + (ulong)n * C + c;
  ASTORE(y, i, ALOAD(y, i) + b[boff + c]);
}

// db[c] += sum over n, p of dy[n, c, p]. One work-group per channel; item t
// sums elements t, t + W, ... of each of the channel's N rows of P (of its
// N*P elements in a row when P < W, as a linear layer's P = 1), then a tree
// in local memory: a fixed order, so the same bits every run. W is a power
// of two. (Walking the rows saves a division per element, which cost PoCL
// more than the sum.)
__kernel void bias_grad(__global const act_t *dy, const ulong dyoff, __global float *db, const ulong dboff,
                        const uint N, const uint C, const uint P, __local float *scratch) {
  const uint c = get_group_id(0), lid = get_local_id(0), wgs = get_local_size(0);
  const uint count = N * P;
  float acc = 0.0f;
  if (P >= wgs) {
    for (uint n = 0; n < N; n++)
      for (uint p = lid; p < P; p += wgs) acc += ALOAD(dy, dyoff + ((ulong)n * C + c) * P + p);
  } else {
    for (uint j = lid; j < count; j += wgs) {
      uint n = j / P, p = j - n * P;
      acc += ALOAD(dy, dyoff + ((ulong)n * C + c) * P + p);
    }
  }
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = wgs / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) db[dboff + c] += scratch[0];
}

// The same for P = 1 (a linear layer): one work-item per ROWS_VW
// neighbouring channels walks the N rows in order, summing each channel
// in one float; over exactly (C / ROWS_VW, 1, 1) items. ROWS_VW (-D, 8
// when it divides C, else 1) makes each row's read one 32-byte piece: a
// group per channel read one float per row, C floats apart, which with C
// a power of two is the worst case of a CPU's cache (2048 x 512: 4 ms).
#ifndef ROWS_VW
#define ROWS_VW 1
#endif
__kernel void bias_grad_rows(__global const act_t *dy, const ulong dyoff, __global float *db, const ulong dboff,
                             const uint N) {
  const uint c0 = get_global_id(0) * ROWS_VW, C = get_global_size(0) * ROWS_VW;
#if ROWS_VW == 8
  float8 acc = 0.0f;
  for (uint n = 0; n < N; n++) {
    const ulong i = dyoff + (ulong)n * C + c0;
    acc += aload8(dy, i);
  }
  vstore8(vload8(0, db + dboff + c0) + acc, 0, db + dboff + c0);
#else
  float acc = 0.0f;
  for (uint n = 0; n < N; n++) acc += ALOAD(dy, dyoff + (ulong)n * C + c0);
  db[dboff + c0] += acc;
#endif
}
