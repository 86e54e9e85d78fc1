/*
 * tokens.c: token datasets for language models. llm.c's .bin shards (a
 * header of 256 little-endian int32: magic, version, token count; then the
 * tokens as uint16 or uint32) are read through the checked reader, joined
 * into one token stream kept as stored, and served as windows of T+1 tokens
 * at stride T (clt_dataset_open_tokens); clt_tokens_write writes the format.
 * cltrain.h (above clt_dataset_open_tokens) and doc/data.md describe it.
 */
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_INTS 256
#define TOKEN_LIMIT (1 << 24)  /* float32 holds every integer below 2^24 exactly */
#define MAGIC_EVAL 20240522    /* llm.c's multiple-choice evaluation files, not token shards */

/* The shard formats llm.c writes (dev/data/data_common.py, HEADERS_INFO). */
typedef struct shard_format {
  int32_t magic, version;
  int token_bytes;
  const char *type, *model; /* for messages */
} shard_format;

static const shard_format formats[] = {
    {20240520, 1, 2, "uint16", "GPT-2"},
    {20240801, 7, 4, "uint32", "LLaMA-3"},
};
#define NFORMATS ((int)(sizeof formats / sizeof *formats))

static const shard_format *format_of_magic(int32_t magic) {
  for (int i = 0; i < NFORMATS; i++)
    if (formats[i].magic == magic) return &formats[i];
  return NULL;
}

static const shard_format *format_of_width(int token_bytes) {
  for (int i = 0; i < NFORMATS; i++)
    if (formats[i].token_bytes == token_bytes) return &formats[i];
  return NULL;
}

static int is_text(const unsigned char *b, int n) {
  for (int i = 0; i < n; i++)
    if (!(b[i] >= 0x20 && b[i] < 0x7f) && b[i] != '\n' && b[i] != '\r' && b[i] != '\t') return 0;
  return 1;
}

/* The first four bytes are no magic we read: say what the file seems to be. */
static int bad_magic(const char *path, const unsigned char *b) {
  const int32_t magic = (int32_t)clt__le32(b);
  if (magic == MAGIC_EVAL)
    return clt__error(CLT_EFORMAT, "%s: this is an llm.c evaluation file (magic %d: multiple-choice examples such "
                      "as HellaSwag), not a token shard", path, MAGIC_EVAL);
  if (memcmp(b, "CLTR", 4) == 0)
    return clt__error(CLT_EFORMAT, "%s: this is a cltrain raw file, not a token shard; open it with "
                      "clt_dataset_open_raw", path);
  if (b[0] == 0 && b[1] == 0 && b[2] == 0x08)
    return clt__error(CLT_EFORMAT, "%s: this looks like an IDX file, not a token shard; open it with "
                      "clt_dataset_open_idx_files", path);
  if (is_text(b, 4))
    return clt__error(CLT_EFORMAT, "%s: not an llm.c token shard: it starts with the text \"%c%c%c%c\"; to train "
                      "on a text file, make a shard of it with `cltrain tokenize`", path, b[0], b[1], b[2], b[3]);
  return clt__error(CLT_EFORMAT, "%s: not an llm.c token shard: it starts with %02x %02x %02x %02x (magic %d), "
                    "and a shard starts with the magic %d (%s tokens, llm.c's %s shards) or %d (%s, %s)", path,
                    b[0], b[1], b[2], b[3], (int)magic, formats[0].magic, formats[0].type, formats[0].model,
                    formats[1].magic, formats[1].type, formats[1].model);
}

/* Little-endian tokens in place (a no-op on little-endian hosts). */
static void from_le(void *tokens, int64_t n, int token_bytes) {
  if (!clt__host_is_big_endian()) return;
  unsigned char *p = tokens;
  for (int64_t i = 0; i < n; i++, p += token_bytes) {
    if (token_bytes == 2) {
      uint16_t v = (uint16_t)(p[0] | p[1] << 8);
      memcpy(p, &v, 2);
    } else {
      uint32_t v = clt__le32(p);
      memcpy(p, &v, 4);
    }
  }
}

static uint32_t token_at(const void *tokens, int token_bytes, int64_t i) {
  return token_bytes == 2 ? ((const uint16_t *)tokens)[i] : ((const uint32_t *)tokens)[i];
}

/* One shard as stored: n tokens of token_bytes each, the largest max. */
typedef struct shard {
  void *tokens;
  int64_t n;
  int token_bytes;
  uint32_t max;
  uint64_t header;  /* clt__hash of its 256 header ints */
} shard;

/* Every token below limit (vocab, or 2^24 without one); errors name the
 * first offending index and how many there are. */
static int check_tokens(const char *path, const shard *sh, int vocab) {
  const uint32_t limit = vocab > 0 ? (uint32_t)vocab : TOKEN_LIMIT;
  int64_t first = -1, bad = 0;
  for (int64_t i = 0; i < sh->n; i++)
    if (token_at(sh->tokens, sh->token_bytes, i) >= limit) {
      if (first < 0) first = i;
      bad++;
    }
  if (!bad) return CLT_OK;
  char more[64] = "";
  if (bad > 1) snprintf(more, sizeof more, " (%lld bad tokens in all)", (long long)bad);
  const unsigned v = token_at(sh->tokens, sh->token_bytes, first);
  if (vocab > 0)
    return clt__error(CLT_EFORMAT, "%s: the token at index %lld is %u, not below the vocabulary size %d%s", path,
                      (long long)first, v, vocab, more);
  return clt__error(CLT_EFORMAT, "%s: the token at index %lld is %u; cltrain takes token ids below 2^24 = %d, "
                    "the integers float32 holds exactly%s", path, (long long)first, v, TOKEN_LIMIT, more);
}

static int read_shard(const char *path, int vocab, shard *sh) {
  int rc = CLT_OK;
  clt__reader r;
  unsigned char head[4 * HEADER_INTS];
  char what[96];

  memset(sh, 0, sizeof *sh);
  CLT_TRY(clt__reader_open(&r, path));
  CLT_TRY(clt__reader_read(&r, head, 4, "the magic number"));
  const shard_format *f = format_of_magic((int32_t)clt__le32(head));
  if (!f) {
    rc = bad_magic(path, head);
    goto fail;
  }
  CLT_TRY(clt__reader_read(&r, head + 4, sizeof head - 4, "the header (256 int32)"));
  sh->header = clt__hash(CLT__HASH_START, head, sizeof head);
  const int32_t version = (int32_t)clt__le32(head + 4), count = (int32_t)clt__le32(head + 8);
  if (version != f->version) {
    rc = clt__error(CLT_EFORMAT, "%s: token shard version %d; with the magic %d cltrain reads version %d (%s "
                    "tokens)", path, (int)version, (int)f->magic, (int)f->version, f->type);
    goto fail;
  }
  if (count <= 0) {
    rc = clt__error(CLT_EFORMAT, "%s: the header declares %d tokens; a shard holds at least 1", path, (int)count);
    goto fail;
  }
  snprintf(what, sizeof what, "the %d %s tokens", (int)count, f->type);
  CLT_TRY(clt__reader_read_alloc(&r, (uint64_t)count * (uint64_t)f->token_bytes, what, &sh->tokens));
  CLT_TRY(clt__reader_expect_end(&r, what));
  clt__reader_close(&r);
  sh->n = count;
  sh->token_bytes = f->token_bytes;
  from_le(sh->tokens, sh->n, sh->token_bytes);
  CLT_TRY(check_tokens(path, sh, vocab));
  for (int64_t i = 0; i < sh->n; i++) {
    uint32_t v = token_at(sh->tokens, sh->token_bytes, i);
    if (v > sh->max) sh->max = v;
  }
  return CLT_OK;

fail:
  clt__reader_close(&r);
  free(sh->tokens);
  sh->tokens = NULL;
  return rc;
}

/* uint16 tokens [0, n) of buf widened in place to uint32 (buf has room for
 * 4n bytes). From the back, so every token is read before it is written
 * over; through memcpy, as the two views of the bytes may not alias. */
static void widen_in_place(void *buf, int64_t n) {
  unsigned char *p = buf;
  for (int64_t i = n - 1; i >= 0; i--) {
    uint16_t narrow;
    memcpy(&narrow, p + 2 * i, 2);
    const uint32_t wide = narrow;
    memcpy(p + 4 * i, &wide, 4);
  }
}

/* Append a shard to the dataset's stream (which takes the wider of the two
 * widths) and free the shard's memory. */
static int append_shard(clt_dataset *ds, shard *sh) {
  ds->header_hash = clt__hash(ds->header_hash, &sh->header, sizeof sh->header);
  if (!ds->x) { /* the first shard becomes the stream as it is */
    ds->x = sh->tokens;
    ds->ntokens = sh->n;
    ds->token_bytes = sh->token_bytes;
    sh->tokens = NULL;
    return CLT_OK;
  }
  const int width = sh->token_bytes > ds->token_bytes ? sh->token_bytes : ds->token_bytes;
  unsigned char *grown = realloc(ds->x, (size_t)(ds->ntokens + sh->n) * (size_t)width);
  if (!grown) {
    free(sh->tokens);
    sh->tokens = NULL;
    return clt__error(CLT_ENOMEM, "%s: cannot allocate %lld tokens of %d bytes", ds->path,
                      (long long)(ds->ntokens + sh->n), width);
  }
  ds->x = grown;
  if (width > ds->token_bytes) widen_in_place(ds->x, ds->ntokens);
  ds->token_bytes = width;
  if (sh->token_bytes == width) {
    memcpy(grown + (size_t)ds->ntokens * (size_t)width, sh->tokens, (size_t)sh->n * (size_t)width);
  } else { /* a uint16 shard after uint32 ones */
    uint32_t *dst = (uint32_t *)grown + ds->ntokens;
    const uint16_t *src = sh->tokens;
    for (int64_t i = 0; i < sh->n; i++) dst[i] = src[i];
  }
  ds->ntokens += sh->n;
  free(sh->tokens);
  sh->tokens = NULL;
  return CLT_OK;
}

int clt_dataset_open_tokens(const char *const *paths, int npaths, int64_t T, int vocab, clt_dataset **out) {
  int rc = CLT_OK;
  clt_dataset *ds = NULL;
  shard sh = {0};
  uint32_t max = 0;
  char name[4096];

  CLT_ARG(out);
  *out = NULL;
  CLT_ARG(paths);
  if (npaths < 1) return clt__error(CLT_EINVAL, "clt_dataset_open_tokens: npaths is %d: no token files given", npaths);
  for (int i = 0; i < npaths; i++)
    if (!paths[i] || !*paths[i])
      return clt__error(CLT_EINVAL, "clt_dataset_open_tokens: file name %d of %d is %s (paths[%d])", i, npaths,
                        paths[i] ? "an empty string" : "NULL", i);
  if (T < 1 || T >= TOKEN_LIMIT)
    return clt__error(CLT_EINVAL, "%s: a context of %lld tokens; T must be 1 to 2^24 - 1", paths[0], (long long)T);
  if (vocab < 0 || vocab > TOKEN_LIMIT)
    return clt__error(CLT_EINVAL, "%s: a vocabulary of %d tokens; give 1 to 2^24 = %d, or 0 for the largest token "
                      "+ 1", paths[0], vocab, TOKEN_LIMIT);
  if (npaths == 1)
    snprintf(name, sizeof name, "%s", paths[0]);
  else
    snprintf(name, sizeof name, "%s (+%d more shard%s)", paths[0], npaths - 1, npaths > 2 ? "s" : "");
  if (!(ds = clt__dataset_alloc(name))) return CLT_ENOMEM;
  for (int i = 0; i < npaths; i++) {
    CLT_TRY(read_shard(paths[i], vocab, &sh));
    if (sh.max > max) max = sh.max;
    CLT_TRY(append_shard(ds, &sh));
  }
  if (ds->ntokens - 1 < T) {
    rc = clt__error(CLT_EFORMAT, "%s: %lld tokens make no window of T + 1 = %lld tokens (T, the context, is "
                    "%lld); give more text or a shorter context", ds->path, (long long)ds->ntokens,
                    (long long)T + 1, (long long)T);
    goto fail;
  }
  ds->count = (ds->ntokens - 1) / T;
  ds->ndims = 1;
  ds->dims[0] = T;
  ds->sample_size = T;
  ds->labels_per_sample = T;
  ds->num_classes = vocab > 0 ? vocab : (int)max + 1;
  *out = ds;
  return CLT_OK;

fail:
  clt_dataset_destroy(ds);
  return rc;
}

void clt__tokens_get_batch(const clt_dataset *ds, const int64_t *indices, int64_t n, float *x, int32_t *y) {
  const int64_t T = ds->sample_size;
  for (int64_t i = 0; i < n; i++) {
    const int64_t start = indices[i] * T; /* window i: tokens [start, start + T] */
    float *xi = x ? x + i * T : NULL;     /* (T) */
    int32_t *yi = y ? y + i * T : NULL;   /* (T) */
    if (ds->token_bytes == 2) {
      const uint16_t *t = (const uint16_t *)ds->x + start;
      for (int64_t j = 0; xi && j < T; j++) xi[j] = (float)t[j];
      for (int64_t j = 0; yi && j < T; j++) yi[j] = (int32_t)t[j + 1];
    } else {
      const uint32_t *t = (const uint32_t *)ds->x + start;
      for (int64_t j = 0; xi && j < T; j++) xi[j] = (float)t[j];
      for (int64_t j = 0; yi && j < T; j++) yi[j] = (int32_t)t[j + 1];
    }
    const uint8_t *ok = ds->target ? ds->target + start + 1 : NULL; /* the targets shard's mask */
    for (int64_t j = 0; ok && yi && j < T; j++)
      if (!ok[j]) yi[j] = CLT_IGNORE_LABEL;
  }
}

/* ---- writer ---------------------------------------------------------------- */

/* Tokens as little-endian uint16 or uint32 through a bounded staging buffer. */
static int write_tokens(gzFile gz, const char *path, const uint32_t *tokens, int64_t n, int token_bytes) {
  unsigned char buf[65536];
  const int64_t per = (int64_t)sizeof buf / token_bytes;
  for (int64_t at = 0; at < n; at += per) {
    const int64_t k = n - at < per ? n - at : per;
    for (int64_t i = 0; i < k; i++) {
      const uint32_t v = tokens[at + i];
      if (token_bytes == 2) {
        buf[2 * i] = (unsigned char)v;
        buf[2 * i + 1] = (unsigned char)(v >> 8);
      } else {
        clt__put_le32(buf + 4 * i, v);
      }
    }
    int rc = clt__gz_write_all(gz, path, buf, (size_t)(k * token_bytes));
    if (rc < 0) return rc;
  }
  return CLT_OK;
}

int clt_tokens_write(const char *path, const uint32_t *tokens, int64_t n, int wide) {
  int rc = CLT_OK;
  clt__gz_out out = {0};
  unsigned char head[4 * HEADER_INTS] = {0};

  CLT_PATH_ARG(path);
  CLT_ARG(tokens);
  if (n < 1 || n > INT32_MAX)
    return clt__error(CLT_EINVAL, "%s: cannot write %lld tokens; a shard holds 1 to 2^31 - 1", path, (long long)n);
  for (int64_t i = 0; i < n; i++) {
    if (tokens[i] >= TOKEN_LIMIT)
      return clt__error(CLT_EINVAL, "%s: the token at index %lld is %u; cltrain takes token ids below 2^24 = %d", path,
                        (long long)i, (unsigned)tokens[i], TOKEN_LIMIT);
    if (tokens[i] > UINT16_MAX) wide = 1;
  }
  const shard_format *f = format_of_width(wide ? 4 : 2);
  CLT_TRY(clt__gz_out_open(&out, path));
  gzFile gz = out.gz;
  clt__put_le32(head, (uint32_t)f->magic);
  clt__put_le32(head + 4, (uint32_t)f->version);
  clt__put_le32(head + 8, (uint32_t)n);
  CLT_TRY(clt__gz_write_all(gz, path, head, sizeof head));
  CLT_TRY(write_tokens(gz, path, tokens, n, f->token_bytes));
  return clt__gz_out_commit(&out, path);

fail:
  clt__gz_out_abort(&out);
  return rc;
}
