// swiglu.cl: the gate of Llama's MLP, elementwise over rows of the fused
// gate-and-up projection gu (N, 2I) = [g | u]: h = silu(g) * u (N, I), as
// transformers' LlamaMLP computes act_fn(gate_proj(x)) * up_proj(x), and
// its backward, both in float; gu, h, dh and dgu are stored as act_t
// (cl/prelude.cl). Launched over exactly (I, N) items (no bound tests,
// which would keep PoCL from vectorizing the rows).

// silu(g) = g sigmoid(g); sigmoid as 1 / (1 + exp(-g)), which saturates to
// exactly 0 or 1 (exp overflowing to inf gives 0, and silu -0).
__kernel void swiglu_forward(__global const act_t *gu, const ulong guoff, __global act_t *h, const ulong hoff) {
  const uint i = get_global_id(0), n = get_global_id(1), I = get_global_size(0);
  const ulong row = guoff + (ulong)n * 2 * I + i;
  const float g = ALOAD(gu, row), u = ALOAD(gu, row + I);
  ASTORE(h, hoff + (ulong)n * I + i, g / (1.0f + exp(-g)) * u);
}

// dg = dh u silu'(g) with silu'(g) = s (1 + g (1 - s)), s = sigmoid(g);
// du = dh silu(g). dgu may be gu (in place: each item reads its two values
// before writing them).
__kernel void swiglu_backward(__global const act_t *gu, const ulong guoff, __global const act_t *dh,
                              const ulong dhoff, __global act_t *dgu, const ulong dguoff) {
  const uint i = get_global_id(0), n = get_global_id(1), I = get_global_size(0);
  const ulong at = (ulong)n * 2 * I + i;
  const float g = ALOAD(gu, guoff + at), u = ALOAD(gu, guoff + at + I), d = ALOAD(dh, dhoff + (ulong)n * I + i);
  const float s = 1.0f / (1.0f + exp(-g));
  ASTORE(dgu, dguoff + at, d * u * (s * (1.0f + g * (1.0f - s))));
  ASTORE(dgu, dguoff + at + I, d * (g * s));
}
