// rope.cl: rotary position embeddings (RoPE), rotating the query and key
// heads of a fused qkv row in place, in float, as transformers' Llama does
// (apply_rotary_pos_emb with rotate_half): for each head of D values, with
// halves x1 = x[0, D/2) and x2 = x[D/2, D) and the angle a = t * inv_freq[i]
// of the row's position t in its sequence,
//   x1' = x1 cos a - x2 sin a,   x2' = x2 cos a + x1 sin a.
// The backward applies the transposed rotation (sin negated: sign = -1).
// The angle is the float product t * inv_freq[i], as transformers forms it
// (a float32 matmul of one term); inv_freq comes from the host, computed in
// float32 in transformers' order (src/model/rope.c).
//
// qkv (B, T, ld) act_t (cl/prelude.cl); the first nrot heads of each row
// are rotated (the H query heads and the K key heads, which lie side by
// side). Launched over exactly (D / 2, T, B) items: one sincos an item,
// used for every head.
__kernel void rope_rotate(__global act_t *qkv, const ulong qoff, const uint ld, const uint nrot, const uint D,
                          __global const float *inv_freq, const ulong foff, const float sign) {
  const uint i = get_global_id(0), t = get_global_id(1), b = get_global_id(2);
  const uint half_d = get_global_size(0), T = get_global_size(1);
  const float a = (float)t * inv_freq[foff + i];
  float c;
  const float s = sign * sincos(a, &c);
  ulong p = qoff + ((ulong)b * T + t) * ld + i;
  for (uint h = 0; h < nrot; h++, p += D) {
    const float x1 = ALOAD(qkv, p), x2 = ALOAD(qkv, p + half_d);
    ASTORE(qkv, p, x1 * c - x2 * s);
    ASTORE(qkv, p + half_d, x2 * c + x1 * s);
  }
}
