// residual.cl: the transformer's residual adds over activations stored as
// act_t (cl/prelude.cl), computed in float, over exactly n items
// (clt__launch_exact_1d): no bound test, which would keep PoCL from
// vectorizing.

// y = x + skip; y may be x or skip (each item reads before it writes).
__kernel void residual_add(__global const act_t *x, const ulong xoff, __global const act_t *skip, const ulong soff,
                           __global act_t *y, const ulong yoff, const ulong n) {
  const ulong i = get_global_id(0);
  ASTORE(y, yoff + i, ALOAD(x, xoff + i) + ALOAD(skip, soff + i));
}

// g += dy.
__kernel void accumulate(__global const act_t *dy, const ulong dyoff, __global act_t *g, const ulong goff,
                         const ulong n) {
  const ulong i = get_global_id(0);
  ASTORE(g, goff + i, ALOAD(g, goff + i) + ALOAD(dy, dyoff + i));
}
