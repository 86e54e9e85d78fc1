// embedding.cl: the transformer's token embedding (a gather of rows of wte
// by token) and learned position embedding (a broadcast add of wpe's rows),
// forward and backward. Embedding tables and their gradients are float;
// activations are stored as act_t (cl/prelude.cl). Tokens are floats
// holding exact integer ids.
//
// The token gradient is a scatter-add in which rows with equal tokens
// collide. It is kept deterministic without atomics: embedding_links gives
// each row the next row holding its token, then one work-item per
// (channel, first row of a token) walks that chain in increasing row order,
// adding into one float, as a single thread walking all rows would.

// Is t an integer token id in [0, V)? (NaN is not.)
int token_ok(const float t, const uint V) { return t >= 0.0f && t < (float)V && t == floor(t); }

// y[i][c] = wte[tokens[i]][c], NaN for a bad token. Launched over exactly
// (C, N, 1) items.
__kernel void embedding_forward(__global const float *tokens, const ulong toff, __global const float *wte,
                                const ulong woff, __global act_t *y, const ulong yoff, const uint V) {
  const uint c = get_global_id(0), i = get_global_id(1), C = get_global_size(0);
  const float t = tokens[toff + i];
  const float v = token_ok(t, V) ? wte[woff + (ulong)(uint)t * C + c] : NAN;
  ASTORE(y, yoff + (ulong)i * C + c, v);
}

// link[i] = the next row j > i with tokens[j] == tokens[i] (N when none),
// stored as is when i is the first row of its token and as -1 - next when
// an earlier row holds it too. Each item scans forward to the next row
// with its token and backward to the previous one, stopping at the first:
// a token's rows split the sequence into gaps that its items' scans cover
// about twice, so the work is a few times N per distinct token (N^2 only
// when no token repeats), where comparing every pair of rows was always
// N^2. Launched over exactly N items.
__kernel void embedding_links(__global const float *tokens, const ulong toff, const uint N, __global int *link,
                              const ulong loff) {
  const uint i = get_global_id(0);
  const float t = tokens[toff + i];
  uint next = i + 1;
  while (next < N && tokens[toff + next] != t) next++;
  uint prev = i;
  while (prev > 0 && tokens[toff + prev - 1] != t) prev--;
  link[loff + i] = prev == 0 ? (int)next : -1 - (int)next;
}

// dwte[tokens[i]][c] += dy[i][c] over the chain of rows starting at the
// first row i of each token, in increasing order, in one float. Launched
// over exactly (C, N, 1) items; items of rows that are not first of their
// token (or hold a bad token) have nothing to do.
__kernel void embedding_backward(__global const float *tokens, const ulong toff, __global const int *link,
                                 const ulong loff, __global const act_t *dy, const ulong dyoff, __global float *dwte,
                                 const ulong woff, const uint N, const uint V) {
  const uint c = get_global_id(0), i = get_global_id(1), C = get_global_size(0);
  const float t = tokens[toff + i];
  if (link[loff + i] < 0 || !token_ok(t, V)) return;
  const ulong w = woff + (ulong)(uint)t * C + c;
  float acc = dwte[w];
  for (uint j = i; j < N;) {
    acc += ALOAD(dy, dyoff + (ulong)j * C + c);
    const int l = link[loff + j];
    j = l < 0 ? (uint)(-1 - l) : (uint)l;
  }
  dwte[w] = acc;
}

// y[b][t][c] = x[b][t][c] + wpe[t][c], over exactly (C, T, B) items; y may
// be x.
__kernel void posembed_forward(__global const act_t *x, const ulong xoff, __global const float *wpe,
                               const ulong woff, __global act_t *y, const ulong yoff) {
  const uint c = get_global_id(0), t = get_global_id(1), b = get_global_id(2);
  const uint C = get_global_size(0), T = get_global_size(1);
  const ulong e = ((ulong)b * T + t) * C + c;
  ASTORE(y, yoff + e, ALOAD(x, xoff + e) + wpe[woff + (ulong)t * C + c]);
}

// dwpe[t][c] += dy[0][t][c], then dy[1][t][c], ... in one float, over
// exactly (C, T, 1) items.
__kernel void posembed_backward(__global const act_t *dy, const ulong dyoff, __global float *dwpe, const ulong woff,
                                const uint B) {
  const uint c = get_global_id(0), t = get_global_id(1);
  const uint C = get_global_size(0), T = get_global_size(1);
  const ulong w = woff + (ulong)t * C + c;
  float acc = dwpe[w];
  for (uint b = 0; b < B; b++) acc += ALOAD(dy, dyoff + ((ulong)b * T + t) * C + c);
  dwpe[w] = acc;
}
