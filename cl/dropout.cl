// dropout.cl: inverted dropout with a counter-based RNG, so the mask is a
// pure function of (seed, step, element index): the same bits on every
// device and in the plain-C reference (src/ref/ref_nn.c), nothing stored
// between forward and backward.
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11; checked against Random123's known-answer vectors in the
// tests). Element e uses word e % 4 of philox(counter = (e/4 low, e/4 high,
// step low, step high), key = (seed low, seed high)) and is kept when
// (word >> 8) >= threshold, threshold = round(p * 2^24) from the host: an
// integer comparison, so no float rounding can make devices disagree.
// x and y are stored as act_t (cl/prelude.cl); the mask does not depend on
// it.

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

// The rounds are unrolled: PoCL splits its work-item loop at every loop left
// in a kernel, which made a 64x128 dropout take 1 ms.
uint4 philox4x32_10(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; r++) {
    if (r) {
      k.x += PHILOX_W0;
      k.y += PHILOX_W1;
    }
    uint hi0 = mul_hi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
    uint hi1 = mul_hi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
    c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

// y[i] = x[i] * (keep(base + i) ? scale : 0), for the forward (x, y) and the
// backward (dy, dx) alike, element e = base + i kept when word e % 4 of
// Philox block e / 4 has (word >> 8) >= threshold. One work-item per block,
// for the elements of its four that lie in [base, base + n): one Philox
// evaluation per four elements instead of one per element. A
// multiplication, not a select, so a NaN or inf in x still shows in y (as
// NaN) and the trainer's non-finite check sees it.
__kernel void dropout_apply(__global const act_t *x, const ulong xoff, __global act_t *y, const ulong yoff,
                            const ulong n, const ulong seed, const ulong step, const ulong base,
                            const uint threshold, const float scale) {
  const ulong block = (base >> 2) + get_global_id(0), first = block << 2;
  if (first >= base + n) return;
  const uint4 r = philox4x32_10((uint4)((uint)block, (uint)(block >> 32), (uint)step, (uint)(step >> 32)),
                                (uint2)((uint)seed, (uint)(seed >> 32)));
  const uint w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    const ulong e = first + j;
    if (e < base || e >= base + n) continue;
    const ulong i = e - base;
    ASTORE(y, yoff + i, ALOAD(x, xoff + i) * ((w[j] >> 8) >= threshold ? scale : 0.0f));
  }
}
