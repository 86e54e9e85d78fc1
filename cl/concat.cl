// concat.cl: rows of a batch copied between tensors of other row lengths,
// torch.cat's pieces (src/nn/concat.c): dst[r * dp + i] = src[r * sp + i]
// for the W values i of each of the rows r, stored as act_t (cl/prelude.cl;
// a half is widened and rounded back, exactly). A kernel rather than
// clEnqueueCopyBufferRect: both tensors often lie in one buffer (the
// activation arena), where a rectangle copy must keep one pitch.
__kernel void copy_rows(__global const act_t *src, const ulong soff, const uint sp, __global act_t *dst,
                        const ulong doff, const uint dp) {
  const uint i = get_global_id(0), r = get_global_id(1);
  ASTORE(dst, doff + (ulong)r * dp + i, ALOAD(src, soff + (ulong)r * sp + i));
}
