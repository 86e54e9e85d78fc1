/*
 * token_targets.c: a token dataset's targets, for fine-tuning: a targets
 * shard beside each token shard says which tokens count as targets (the
 * position before a masked token contributes no loss and no gradient, as
 * PyTorch's ignore_index). Its format (doc/data.md, cltrain.h above
 * clt_dataset_tokens_targets) is llm.c's header of 256 int32 with its own
 * magic, then one int32 a token: the token itself, or -1 where it is no
 * target, which is Hugging Face's `labels` with -1 for -100, unshifted. The
 * dataset keeps one byte a token and each window's count of targets that
 * count, which the prefetcher adds up for the global batch's mean.
 */
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_INTS 256
#define TARGETS_MAGIC 20250301 /* no magic of llm.c's */
#define TARGETS_VERSION 1

static uint32_t token_at(const clt_dataset *ds, int64_t i) {
  return ds->token_bytes == 2 ? ((const uint16_t *)ds->x)[i] : ((const uint32_t *)ds->x)[i];
}

/* One targets shard, read into mask[at, at + n) where n is its count: each
 * value is -1 or the token at that place of the stream. */
static int read_targets(const clt_dataset *ds, const char *path, int64_t at, uint8_t *mask, int64_t *n) {
  int rc = CLT_OK;
  clt__reader r;
  unsigned char head[4 * HEADER_INTS], *vals = NULL;
  char what[96];
  CLT_TRY(clt__reader_open(&r, path));
  CLT_TRY(clt__reader_read(&r, head, sizeof head, "the header (256 int32)"));
  const int32_t magic = (int32_t)clt__le32(head), version = (int32_t)clt__le32(head + 4);
  const int32_t count = (int32_t)clt__le32(head + 8);
  if (magic != TARGETS_MAGIC) {
    rc = clt__error(CLT_EFORMAT, "%s: not a targets shard: its magic is %d, a targets shard's is %d (a token shard's "
                    "is 20240520 or 20240801: give the token shard as the data, its targets shard beside it)", path,
                    (int)magic, TARGETS_MAGIC);
    goto fail;
  }
  if (version != TARGETS_VERSION) {
    rc = clt__error(CLT_EFORMAT, "%s: targets shard version %d; cltrain reads version %d", path, (int)version,
                    TARGETS_VERSION);
    goto fail;
  }
  if (count <= 0 || at + count > ds->ntokens) {
    rc = clt__error(CLT_EFORMAT, "%s: the header declares %d targets, but the token shards hold %lld tokens, %lld of "
                    "them left for this shard: each targets shard has one target per token of its token shard", path,
                    (int)count, (long long)ds->ntokens, (long long)(ds->ntokens - at));
    goto fail;
  }
  snprintf(what, sizeof what, "the %d int32 targets", (int)count);
  CLT_TRY(clt__reader_read_alloc(&r, (uint64_t)count * 4, what, (void **)&vals));
  CLT_TRY(clt__reader_expect_end(&r, what));
  for (int64_t i = 0; i < count; i++) {
    const int32_t v = (int32_t)clt__le32(vals + 4 * i);
    const uint32_t tok = token_at(ds, at + i);
    if (v != -1 && (v < 0 || (uint32_t)v != tok)) {
      rc = clt__error(CLT_EFORMAT, "%s: target %lld is %d, but the token there is %u: a target is its token (it "
                      "counts) or -1 (masked; Hugging Face's -100 is written -1), aligned with the tokens, not "
                      "shifted", path, (long long)i, (int)v, (unsigned)tok);
      goto fail;
    }
    mask[at + i] = v != -1;
  }
  *n = count;
fail:
  free(vals);
  clt__reader_close(&r);
  return rc;
}

int clt_dataset_tokens_targets(clt_dataset *ds, const char *const *paths, int npaths) {
  int rc = CLT_OK;
  uint8_t *mask = NULL;
  int32_t *windows = NULL;
  CLT_HANDLE(ds, "dataset");
  CLT_ARG(paths);
  if (npaths < 1)
    return clt__error(CLT_EINVAL, "clt_dataset_tokens_targets: npaths is %d: give at least one targets shard", npaths);
  if (!ds->token_bytes)
    return clt__error(CLT_EINVAL, "%s: targets shards go with a token dataset (clt_dataset_open_tokens), not this "
                      "one", paths[0] ? paths[0] : "(null)");
  if (ds->target) return clt__error(CLT_EINVAL, "%s: the dataset has its targets already", ds->path);
  for (int i = 0; i < npaths; i++)
    if (!paths[i]) return clt__error(CLT_EINVAL, "clt_dataset_tokens_targets: file name %d of %d is NULL", i, npaths);
  if (!(mask = clt__calloc((size_t)ds->ntokens, 1)) || !(windows = clt__calloc((size_t)ds->count, sizeof *windows))) {
    rc = CLT_ENOMEM;
    goto fail;
  }
  int64_t at = 0;
  for (int i = 0; i < npaths; i++) {
    int64_t n = 0;
    CLT_TRY(read_targets(ds, paths[i], at, mask, &n));
    at += n;
  }
  if (at != ds->ntokens) {
    rc = clt__error(CLT_EFORMAT, "%s: the targets shards hold %lld targets, the token shards %lld tokens (%s): one "
                    "targets shard per token shard, one target per token", paths[npaths - 1], (long long)at,
                    (long long)ds->ntokens, ds->path);
    goto fail;
  }
  const int64_t T = ds->sample_size;
  int64_t total = 0;
  for (int64_t w = 0; w < ds->count; w++) { /* window w's targets: tokens w T + 1 .. w T + T */
    int32_t c = 0;
    for (int64_t j = 1; j <= T; j++) c += mask[w * T + j];
    windows[w] = c;
    total += c;
  }
  ds->target = mask;
  ds->window_labels = windows;
  ds->labels_counted = total;
  return CLT_OK;
fail:
  free(mask);
  free(windows);
  return rc;
}

int clt_tokens_write_targets(const char *path, const int32_t *targets, int64_t n) {
  int rc = CLT_OK;
  gzFile gz = NULL;
  unsigned char head[4 * HEADER_INTS] = {0}, buf[65536];
  CLT_PATH_ARG(path);
  CLT_ARG(targets);
  if (n < 1 || n > INT32_MAX)
    return clt__error(CLT_EINVAL, "%s: cannot write %lld targets; a shard holds 1 to 2^31 - 1", path, (long long)n);
  for (int64_t i = 0; i < n; i++)
    if (targets[i] < -1)
      return clt__error(CLT_EINVAL, "%s: target %lld is %d; a target is a token id or -1 (masked)", path,
                        (long long)i, (int)targets[i]);
  size_t len = strlen(path);
  int compress = len > 3 && strcmp(path + len - 3, ".gz") == 0;
  errno = 0;
  gz = gzopen(path, compress ? "wb6" : "wbT");
  if (!gz) return clt__error(CLT_EIO, "%s: cannot create: %s", path, errno ? strerror(errno) : "zlib failed");
  clt__put_le32(head, TARGETS_MAGIC);
  clt__put_le32(head + 4, TARGETS_VERSION);
  clt__put_le32(head + 8, (uint32_t)n);
  CLT_TRY(clt__gz_write_all(gz, path, head, sizeof head));
  for (int64_t at = 0; at < n; at += (int64_t)sizeof buf / 4) {
    const int64_t k = n - at < (int64_t)sizeof buf / 4 ? n - at : (int64_t)sizeof buf / 4;
    for (int64_t i = 0; i < k; i++) clt__put_le32(buf + 4 * i, (uint32_t)targets[at + i]);
    CLT_TRY(clt__gz_write_all(gz, path, buf, (size_t)k * 4));
  }
  int zerr = gzclose_w(gz);
  gz = NULL;
  if (zerr != Z_OK)
    return clt__error(CLT_EIO, "%s: finishing the file failed: %s", path, zerr == Z_ERRNO ? strerror(errno) : zError(zerr));
  return CLT_OK;
fail:
  if (gz) gzclose_w(gz);
  return rc;
}
