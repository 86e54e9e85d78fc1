/*
 * fingerprint.c: a dataset's fingerprint (data.h), what the ranks of a job
 * compare to know that they read the same data: the shape, a hash of the
 * files' headers taken as the readers read them, and hashes of the
 * samples at a few fixed positions. Sizes alone would let two files of the
 * same shape (another split, another shuffle, a copy half rewritten) train
 * as one; hashing every byte would cost a pass over data that can be many
 * GB. The probes cost the same for a file of any size.
 */
#include "data/data.h"

#include <string.h>

/* At most this many bytes of a probed sample are hashed (its first and
 * last halves of it), so a dataset of huge samples costs no more. */
#define PROBE_BYTES (64 * 1024)

int64_t clt__probe_sample(int64_t count, int i) {
  if (count <= 1) return 0;
  return (int64_t)((double)i * (double)(count - 1) / (CLT__DATA_PROBES - 1) + 0.5);
}

static uint64_t hash_span(uint64_t h, const unsigned char *p, size_t n) {
  if (n <= PROBE_BYTES) return clt__hash(h, p, n);
  h = clt__hash(h, p, PROBE_BYTES / 2);
  return clt__hash(h, p + n - PROBE_BYTES / 2, PROBE_BYTES / 2);
}

/* Sample k: its values as stored and its label; for a token dataset its
 * window of T + 1 tokens as uint32 (a uint16 and a uint32 file of the
 * same tokens give the same). */
static uint64_t probe(const clt_dataset *ds, int64_t k) {
  uint64_t h = CLT__HASH_START;
  if (ds->token_bytes) {
    const int64_t T = ds->sample_size, first = k * T;
    for (int64_t j = first; j <= first + T && j < ds->ntokens && j - first < PROBE_BYTES / 4; j++) {
      uint32_t v = ds->token_bytes == 2 ? ((const uint16_t *)ds->x)[j] : ((const uint32_t *)ds->x)[j];
      h = clt__hash(h, &v, sizeof v);
    }
    return h;
  }
  const int64_t row = ds->elem && ds->row_len ? ds->row_len : ds->sample_size;
  const size_t bytes = (size_t)row * (size_t)(ds->elem ? ds->elem->size : ds->dtype == CLT_U8 ? 1 : 4);
  h = hash_span(h, (const unsigned char *)ds->x + (size_t)k * bytes, bytes);
  if (ds->targets) return clt__hash(h, ds->targets + k * ds->labels_per_sample, (size_t)ds->labels_per_sample * 4);
  return clt__hash(h, &ds->y[k], sizeof ds->y[k]);
}

void clt__dataset_fingerprint(const clt_dataset *ds, clt__data_fingerprint *out) {
  memset(out, 0, sizeof *out);
  out->count = ds->count;
  out->sample_size = ds->sample_size;
  out->labels_per_sample = ds->labels_per_sample;
  out->ntokens = ds->ntokens;
  out->ndims = ds->ndims;
  for (int i = 0; i < ds->ndims; i++) out->dims[i] = ds->dims[i];
  out->num_classes = ds->num_classes;
  out->dtype = ds->token_bytes ? 0 : (int32_t)ds->dtype;
  out->token_bytes = ds->token_bytes;
  out->header = ds->header_hash;
  for (int i = 0; i < CLT__DATA_PROBES && ds->count > 0; i++) out->probe[i] = probe(ds, clt__probe_sample(ds->count, i));
  out->mean = ds->mean;
  out->std = ds->std;
  clt__strlcpy(out->path, ds->path, sizeof out->path);
}
