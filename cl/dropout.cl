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

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

uint4 philox4x32_10(uint4 c, uint2 k) {
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

// Is element e kept?
int dropout_keep(ulong seed, ulong step, ulong e, uint threshold) {
  ulong block = e >> 2;
  uint4 r = philox4x32_10((uint4)((uint)block, (uint)(block >> 32), (uint)step, (uint)(step >> 32)),
                          (uint2)((uint)seed, (uint)(seed >> 32)));
  uint w;
  switch ((uint)(e & 3)) {
  case 0: w = r.x; break;
  case 1: w = r.y; break;
  case 2: w = r.z; break;
  default: w = r.w; break;
  }
  return (w >> 8) >= threshold;
}

// y[i] = x[i] * (keep(base + i) ? scale : 0), for the forward (x, y) and the
// backward (dy, dx) alike. A multiplication, not a select, so a NaN or inf
// in x still shows in y (as NaN) and the trainer's non-finite check sees it.
__kernel void dropout_apply(__global const float *x, const ulong xoff, __global float *y, const ulong yoff,
                            const ulong n, const ulong seed, const ulong step, const ulong base,
                            const uint threshold, const float scale) {
  size_t i = get_global_id(0);
  if (i >= n) return;
  y[yoff + i] = x[xoff + i] * (dropout_keep(seed, step, base + i, threshold) ? scale : 0.0f);
}

