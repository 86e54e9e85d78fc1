/*
 * test_tokens.c: token datasets (llm.c's .bin shards): the writer's bytes,
 * round trips of uint16 and uint32 shards, plain and gzip; windows whose x
 * and y are exactly the stream and the stream shifted by one; shards of
 * either width concatenated, windows spanning their boundaries; the
 * vocabulary as num_classes; no normalisation; batches through the
 * prefetcher carrying n*T labels; and every broken input, each refused with
 * a message naming the file and the fault. Needs no OpenCL device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data.h" /* the fingerprint: internal */
#include "datautil.h"

static char *tmp; /* scratch directory of the running test */
static char p1[4096], p2[4096], p3[4096];

static void setup(void) { tmp = du_mkdtemp(); }
static void teardown(void) {
  du_rmdir(tmp);
  tmp = NULL;
}

/* n tokens of a deterministic stream below limit. */
static uint32_t *make_tokens(int64_t n, uint32_t limit, uint32_t salt) {
  uint32_t *t = malloc((size_t)n * sizeof *t);
  for (int64_t i = 0; i < n; i++) t[i] = (uint32_t)((uint64_t)(i + salt) * 2654435761u % limit);
  return t;
}

static uint32_t le32_at(const unsigned char *b, size_t off) {
  return (uint32_t)b[off] | (uint32_t)b[off + 1] << 8 | (uint32_t)b[off + 2] << 16 | (uint32_t)b[off + 3] << 24;
}

/* Every window of ds against the stream it came from: x[j] = stream[i*T + j]
 * and y[j] = stream[i*T + j + 1], taken in reverse order to see the index
 * used. */
static void check_windows(const clt_dataset *ds, const uint32_t *stream, int64_t ntokens, int64_t T) {
  const int64_t count = clt_dataset_count(ds);
  ck_assert_int_eq(count, (ntokens - 1) / T);
  ck_assert_int_eq(clt_dataset_sample_size(ds), T);
  ck_assert_int_eq(clt_dataset_labels_per_sample(ds), T);
  int64_t *idx = malloc((size_t)count * sizeof *idx);
  float *x = malloc((size_t)(count * T) * sizeof *x);
  int32_t *y = malloc((size_t)(count * T) * sizeof *y);
  for (int64_t i = 0; i < count; i++) idx[i] = count - 1 - i;
  du_ok(clt_dataset_get_batch(ds, idx, count, x, y));
  for (int64_t i = 0; i < count; i++)
    for (int64_t j = 0; j < T; j++) {
      const int64_t at = idx[i] * T + j;
      ck_assert_msg(x[i * T + j] == (float)stream[at], "window %lld x[%lld] is %g, not token %lld = %u",
                    (long long)idx[i], (long long)j, (double)x[i * T + j], (long long)at, stream[at]);
      ck_assert_msg(y[i * T + j] == (int32_t)stream[at + 1], "window %lld y[%lld] is %d, not token %lld = %u",
                    (long long)idx[i], (long long)j, y[i * T + j], (long long)at + 1, stream[at + 1]);
    }
  /* Either output may be left out, and gives the same values. */
  float *x2 = malloc((size_t)(count * T) * sizeof *x2);
  int32_t *y2 = malloc((size_t)(count * T) * sizeof *y2);
  du_ok(clt_dataset_get_batch(ds, idx, count, x2, NULL));
  du_ok(clt_dataset_get_batch(ds, idx, count, NULL, y2));
  ck_assert_mem_eq(x2, x, (size_t)(count * T) * sizeof *x);
  ck_assert_mem_eq(y2, y, (size_t)(count * T) * sizeof *y);
  free(idx), free(x), free(y), free(x2), free(y2);
}

/* ---- the format -------------------------------------------------------------- */

START_TEST(write_bytes_u16) {
  const uint32_t tokens[5] = {0, 1, 255, 256, 65535};
  du_join(p1, sizeof p1, tmp, "a.bin");
  du_ok(clt_tokens_write(p1, tokens, 5, 0));
  size_t n;
  unsigned char *b = du_read(p1, &n);
  ck_assert_uint_eq(n, 1024 + 2 * 5);
  ck_assert_uint_eq(le32_at(b, 0), 20240520);
  ck_assert_uint_eq(le32_at(b, 4), 1);
  ck_assert_uint_eq(le32_at(b, 8), 5);
  for (size_t i = 12; i < 1024; i++) ck_assert_uint_eq(b[i], 0);
  const unsigned char want[10] = {0, 0, 1, 0, 255, 0, 0, 1, 255, 255};
  ck_assert_mem_eq(b + 1024, want, 10);
  free(b);
}
END_TEST

START_TEST(write_bytes_u32) {
  const uint32_t tokens[3] = {7, 65536, 128255};
  du_join(p1, sizeof p1, tmp, "a.bin");
  du_ok(clt_tokens_write(p1, tokens, 3, 0)); /* 65536 does not fit uint16: uint32 without asking */
  size_t n;
  unsigned char *b = du_read(p1, &n);
  ck_assert_uint_eq(n, 1024 + 4 * 3);
  ck_assert_uint_eq(le32_at(b, 0), 20240801);
  ck_assert_uint_eq(le32_at(b, 4), 7);
  ck_assert_uint_eq(le32_at(b, 8), 3);
  for (int i = 0; i < 3; i++) ck_assert_uint_eq(le32_at(b, 1024 + 4 * (size_t)i), tokens[i]);
  free(b);
  du_ok(clt_tokens_write(p1, tokens, 1, 1)); /* small tokens, wide asked for */
  b = du_read(p1, &n);
  ck_assert_uint_eq(n, 1024 + 4);
  ck_assert_uint_eq(le32_at(b, 0), 20240801);
  free(b);
}
END_TEST

START_TEST(roundtrip) {
  /* uint16 and uint32 shards, plain and gzip, T dividing ntokens - 1 and not */
  static const struct { int wide, gz; int64_t n, T; uint32_t limit; } cases[] = {
      {0, 0, 1000, 8, 50257}, {0, 1, 1001, 8, 50257}, {1, 0, 777, 16, 128256}, {1, 1, 65, 64, 1u << 24},
      {0, 0, 2, 1, 256}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    uint32_t *t = make_tokens(cases[c].n, cases[c].limit, (uint32_t)c);
    du_join(p1, sizeof p1, tmp, cases[c].gz ? "r.bin.gz" : "r.bin");
    du_ok(clt_tokens_write(p1, t, cases[c].n, cases[c].wide));
    clt_dataset *ds = NULL;
    const char *paths[1] = {p1};
    du_ok(clt_dataset_open_tokens(paths, 1, cases[c].T, 0, &ds));
    uint32_t max = 0;
    for (int64_t i = 0; i < cases[c].n; i++) max = t[i] > max ? t[i] : max;
    ck_assert_int_eq(clt_dataset_num_classes(ds), (int)max + 1);
    int64_t dims[CLT_DATASET_MAX_DIMS];
    ck_assert_int_eq(clt_dataset_sample_shape(ds, dims), 1);
    ck_assert_int_eq(dims[0], cases[c].T);
    ck_assert_str_eq(clt_dataset_path(ds), p1);
    check_windows(ds, t, cases[c].n, cases[c].T);
    clt_dataset_destroy(ds);
    free(t);
  }
}
END_TEST

START_TEST(windows_exact) {
  /* 23 tokens 100..122, T = 5: windows start at 0, 5, 10, 15; tokens 21 and
   * 22 make no whole window (21 would need 26 as its last label). */
  uint32_t t[23];
  for (int i = 0; i < 23; i++) t[i] = 100 + (uint32_t)i;
  du_join(p1, sizeof p1, tmp, "w.bin");
  du_ok(clt_tokens_write(p1, t, 23, 0));
  clt_dataset *ds = NULL;
  const char *paths[1] = {p1};
  du_ok(clt_dataset_open_tokens(paths, 1, 5, 200, &ds));
  ck_assert_int_eq(clt_dataset_count(ds), 4);
  ck_assert_int_eq(clt_dataset_num_classes(ds), 200);
  int64_t idx[2] = {3, 0};
  float x[10];
  int32_t y[10];
  du_ok(clt_dataset_get_batch(ds, idx, 2, x, y));
  const float wx[10] = {115, 116, 117, 118, 119, 100, 101, 102, 103, 104};
  const int32_t wy[10] = {116, 117, 118, 119, 120, 101, 102, 103, 104, 105};
  ck_assert_mem_eq(x, wx, sizeof wx);
  ck_assert_mem_eq(y, wy, sizeof wy);
  idx[0] = 4;
  du_expect_error(clt_dataset_get_batch(ds, idx, 2, x, y), CLT_EINVAL, p1, "sample index 4", "[0, 4)");
  /* exactly T + 1 tokens: one window */
  du_ok(clt_tokens_write(p1, t, 6, 0));
  clt_dataset_destroy(ds);
  du_ok(clt_dataset_open_tokens(paths, 1, 5, 0, &ds));
  ck_assert_int_eq(clt_dataset_count(ds), 1);
  ck_assert_int_eq(clt_dataset_num_classes(ds), 106);
  clt_dataset_destroy(ds);
}
END_TEST

START_TEST(shards_concatenate) {
  /* uint16, uint32, uint16: the stream widens when the uint32 shard comes
   * and the last shard is widened as it is appended; windows run across the
   * boundaries as over one file. */
  const int64_t n[3] = {37, 20, 44}, total = 37 + 20 + 44, T = 6;
  uint32_t *all = make_tokens(total, 70000, 3);
  for (int64_t i = 0; i < n[0]; i++) all[i] %= 65536;
  for (int64_t i = n[0] + n[1]; i < total; i++) all[i] %= 65536;
  all[n[0]] = 69999; /* the uint32 shard needs its width */
  char *paths[3] = {p1, p2, p3};
  du_join(p1, sizeof p1, tmp, "s0.bin");
  du_join(p2, sizeof p2, tmp, "s1.bin");
  du_join(p3, sizeof p3, tmp, "s2.bin.gz");
  du_ok(clt_tokens_write(p1, all, n[0], 0));
  du_ok(clt_tokens_write(p2, all + n[0], n[1], 0));
  du_ok(clt_tokens_write(p3, all + n[0] + n[1], n[2], 0));
  size_t len;
  unsigned char *b = du_read(p2, &len);
  ck_assert_uint_eq(le32_at(b, 0), 20240801);
  free(b);
  clt_dataset *ds = NULL;
  du_ok(clt_dataset_open_tokens((const char *const *)paths, 3, T, 70000, &ds));
  ck_assert_ptr_nonnull(strstr(clt_dataset_path(ds), "+2 more shards"));
  check_windows(ds, all, total, T);
  clt_dataset_destroy(ds);
  /* only uint16 shards stay uint16 and give the same windows */
  for (int64_t i = 0; i < total; i++) all[i] %= 65536;
  du_ok(clt_tokens_write(p2, all + n[0], n[1], 0));
  du_ok(clt_dataset_open_tokens((const char *const *)paths, 3, T, 0, &ds));
  check_windows(ds, all, total, T);
  clt_dataset_destroy(ds);
  /* uint32 first, uint16 after */
  du_ok(clt_tokens_write(p1, all, n[0], 1));
  du_ok(clt_dataset_open_tokens((const char *const *)paths, 3, T, 0, &ds));
  check_windows(ds, all, total, T);
  clt_dataset_destroy(ds);
  free(all);
}
END_TEST

START_TEST(no_normalisation) {
  uint32_t t[9] = {5, 4, 3, 2, 1, 0, 9, 8, 7};
  du_join(p1, sizeof p1, tmp, "n.bin");
  du_ok(clt_tokens_write(p1, t, 9, 0));
  clt_dataset *ds = NULL;
  const char *paths[1] = {p1};
  du_ok(clt_dataset_open_tokens(paths, 1, 4, 0, &ds));
  float mean = -1, std = -1;
  du_ok(clt_dataset_stats(ds, &mean, &std));
  ck_assert_float_eq(mean, 0.0f);
  ck_assert_float_eq(std, 1.0f);
  du_ok(clt_dataset_normalize(ds, mean, std)); /* what a caller that normalises everything does */
  du_expect_error(clt_dataset_normalize(ds, 4.5f, 2.8f), CLT_EINVAL, p1, "token dataset is not normalised");
  clt_dataset_get_normalization(ds, &mean, &std);
  ck_assert_float_eq(mean, 0.0f);
  ck_assert_float_eq(std, 1.0f);
  int64_t i1 = 1;
  float x[4];
  du_ok(clt_dataset_get_batch(ds, &i1, 1, x, NULL));
  ck_assert_float_eq(x[0], 1.0f);
  ck_assert_float_eq(x[3], 8.0f);
  clt_dataset_destroy(ds);
  /* image datasets keep one label per sample */
  float rx[4] = {1, 2, 3, 4};
  int32_t ry[2] = {0, 1};
  int64_t d = 2;
  du_join(p2, sizeof p2, tmp, "i.raw");
  du_ok(clt_dataset_write_raw(p2, 2, 1, &d, 2, rx, ry));
  du_ok(clt_dataset_open_raw(p2, &ds));
  ck_assert_int_eq(clt_dataset_labels_per_sample(ds), 1);
  clt_dataset_destroy(ds);
  ck_assert_int_eq(clt_dataset_labels_per_sample(NULL), 0);
}
END_TEST

START_TEST(prefetch_windows) {
  /* 10 windows of T = 7, global batch 4 over two replicas (3 + 1): every
   * batch has n*T labels, exactly those of clt_dataset_get_batch. */
  enum { T = 7, N = 10 * T + 3 };
  uint32_t *t = make_tokens(N, 50257, 11);
  du_join(p1, sizeof p1, tmp, "p.bin");
  du_ok(clt_tokens_write(p1, t, N, 0));
  clt_dataset *ds = NULL;
  const char *paths[1] = {p1};
  du_ok(clt_dataset_open_tokens(paths, 1, T, 50257, &ds));
  ck_assert_int_eq(clt_dataset_count(ds), 10);
  clt_sampler *s = NULL;
  du_ok(clt_sampler_create(10, 4, 5, 0, &s));
  const int64_t shares[2] = {3, 1};
  du_ok(clt_sampler_set_shares(s, 2, shares));
  for (int r = 0; r < 2; r++) {
    clt_prefetcher *pf = NULL;
    clt_sampler *ref = NULL;
    du_ok(clt_sampler_clone(s, &ref));
    du_ok(clt_prefetcher_create(ds, s, r, NULL, &pf));
    for (int k = 0; k < 7; k++) { /* 3 steps an epoch, the last partial: over two epochs */
      clt_batch b;
      du_ok(clt_prefetcher_next(pf, &b));
      ck_assert_int_eq(b.labels_per_sample, T);
      ck_assert_int_eq(b.sample_size, T);
      int64_t idx[3], n;
      du_ok(clt_sampler_slice(ref, b.epoch, b.step, r, idx, &n));
      ck_assert_int_eq(b.n, n);
      float x[3 * T];
      int32_t y[3 * T];
      du_ok(clt_dataset_get_batch(ds, idx, n, x, y));
      ck_assert_mem_eq(b.x, x, (size_t)(n * T) * sizeof *x);
      ck_assert_mem_eq(b.y, y, (size_t)(n * T) * sizeof *y);
      for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < T; j++) ck_assert_int_eq(b.y[i * T + j], (int32_t)t[idx[i] * T + j + 1]);
    }
    clt_prefetcher_destroy(pf);
    clt_sampler_destroy(ref);
  }
  clt_sampler_destroy(s);
  clt_dataset_destroy(ds);
  free(t);
}
END_TEST

/* ---- every broken input ------------------------------------------------------------ */

/* A shard as bytes, to break: the header, then ntok tokens of width bytes. */
static size_t shard_bytes(unsigned char *b, int32_t magic, int32_t version, int32_t count, const uint32_t *t,
                          int ntok, int width) {
  memset(b, 0, 1024);
  const int32_t h[3] = {magic, version, count};
  memcpy(b, h, sizeof h); /* the tests run on little-endian hosts */
  for (int i = 0; i < ntok; i++) {
    if (width == 2) {
      uint16_t v = (uint16_t)t[i];
      memcpy(b + 1024 + 2 * i, &v, 2);
    } else {
      memcpy(b + 1024 + 4 * i, &t[i], 4);
    }
  }
  return 1024 + (size_t)ntok * (size_t)width;
}

static void expect_bad(const unsigned char *b, size_t n, int64_t T, int vocab, int want, const char *needle) {
  for (int gz = 0; gz < 2; gz++) {
    du_join(p1, sizeof p1, tmp, gz ? "bad.bin.gz" : "bad.bin");
    du_write(p1, b, n, gz);
    clt_dataset *ds = NULL;
    const char *paths[1] = {p1};
    du_expect_error(clt_dataset_open_tokens(paths, 1, T, vocab, &ds), want, p1, needle);
    ck_assert_ptr_null(ds);
  }
}

START_TEST(bad_magic) {
  ck_assert_int_eq(((const unsigned char *)&(uint16_t){1})[0], 1); /* little-endian host */
  static unsigned char b[1024 + 64];
  uint32_t t[16];
  for (int i = 0; i < 16; i++) t[i] = (uint32_t)i;
  size_t n = shard_bytes(b, 20240521, 1, 16, t, 16, 2);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "not an llm.c token shard: it starts with 89 d8 34 01 (magic 20240521)");
  n = shard_bytes(b, 20240522, 1, 16, t, 16, 2);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "llm.c evaluation file");
  memcpy(b, "Once upon a time", 16);
  expect_bad(b, 16, 4, 0, CLT_EFORMAT, "starts with the text \"Once\"");
  memcpy(b, "CLTRAW1", 8);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "cltrain raw file");
  expect_bad(b, 3, 4, 0, CLT_EFORMAT, "truncated: the file ends after 3 of the 4 bytes of the magic number");
  expect_bad(b, 0, 4, 0, CLT_EFORMAT, "0 of the 4 bytes of the magic number");
}
END_TEST

START_TEST(bad_version) {
  static unsigned char b[1024 + 64];
  uint32_t t[16] = {0};
  size_t n = shard_bytes(b, 20240520, 7, 16, t, 16, 2);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "token shard version 7; with the magic 20240520 cltrain reads version 1");
  n = shard_bytes(b, 20240801, 1, 16, t, 16, 4);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "token shard version 1; with the magic 20240801 cltrain reads version 7");
}
END_TEST

START_TEST(bad_count) {
  static unsigned char b[1024 + 64];
  uint32_t t[16] = {0};
  /* the header declares 12 tokens, the file holds 11 (uint16) or 11.5 (uint32) */
  size_t n = shard_bytes(b, 20240520, 1, 12, t, 11, 2);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "truncated: the file ends after 22 of the 24 bytes of the 12 uint16 tokens");
  n = shard_bytes(b, 20240801, 1 + 6, 12, t, 12, 4);
  expect_bad(b, n - 2, 4, 0, CLT_EFORMAT, "46 of the 48 bytes of the 12 uint32 tokens");
  /* a header cut short */
  expect_bad(b, 500, 4, 0, CLT_EFORMAT, "truncated: the file ends after 496 of the 1020 bytes of the header");
  /* a count far beyond the file fails as truncated, without allocating it */
  n = shard_bytes(b, 20240801, 7, INT32_MAX, t, 16, 4);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "truncated: the file ends after 64 of the 8589934588 bytes");
  /* trailing bytes: 16 tokens declared, 16 + 1 byte there */
  n = shard_bytes(b, 20240520, 1, 16, t, 16, 2);
  b[n] = 0x55;
  expect_bad(b, n + 1, 4, 0, CLT_EFORMAT, "1 bytes of trailing data after the 16 uint16 tokens");
  n = shard_bytes(b, 20240520, 1, 8, t, 16, 2); /* declares fewer than it holds */
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "16 bytes of trailing data after the 8 uint16 tokens");
  n = shard_bytes(b, 20240520, 1, 0, t, 0, 2);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "the header declares 0 tokens");
  n = shard_bytes(b, 20240520, 1, -3, t, 0, 2);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "the header declares -3 tokens");
}
END_TEST

START_TEST(too_few_tokens) {
  static unsigned char b[1024 + 64];
  uint32_t t[16] = {0};
  size_t n = shard_bytes(b, 20240520, 1, 5, t, 5, 2);
  expect_bad(b, n, 5, 0, CLT_EFORMAT, "5 tokens make no window of T + 1 = 6 tokens");
  n = shard_bytes(b, 20240520, 1, 1, t, 1, 2);
  expect_bad(b, n, 1, 0, CLT_EFORMAT, "1 tokens make no window of T + 1 = 2");
  /* two shards that together make one window */
  du_join(p2, sizeof p2, tmp, "a.bin");
  du_join(p3, sizeof p3, tmp, "b.bin");
  du_ok(clt_tokens_write(p2, t, 3, 0));
  du_ok(clt_tokens_write(p3, t, 3, 0));
  const char *paths[2] = {p2, p3};
  clt_dataset *ds = NULL;
  du_ok(clt_dataset_open_tokens(paths, 2, 5, 0, &ds));
  ck_assert_int_eq(clt_dataset_count(ds), 1);
  clt_dataset_destroy(ds);
  du_expect_error(clt_dataset_open_tokens(paths, 2, 6, 0, &ds), CLT_EFORMAT, p2, "+1 more shard)",
                  "6 tokens make no window of T + 1 = 7");
}
END_TEST

START_TEST(token_out_of_range) {
  static unsigned char b[1024 + 64];
  uint32_t t[16];
  for (int i = 0; i < 16; i++) t[i] = (uint32_t)i;
  size_t n = shard_bytes(b, 20240520, 1, 16, t, 16, 2);
  expect_bad(b, n, 4, 15, CLT_EFORMAT, "the token at index 15 is 15, not below the vocabulary size 15");
  expect_bad(b, n, 4, 10, CLT_EFORMAT,
             "the token at index 10 is 10, not below the vocabulary size 10 (6 bad tokens in all)");
  t[3] = 1u << 24;
  n = shard_bytes(b, 20240801, 7, 16, t, 16, 4);
  expect_bad(b, n, 4, 0, CLT_EFORMAT, "the token at index 3 is 16777216; cltrain takes token ids below 2^24");
  /* the index is the token's place in its own file, and the file is named */
  du_join(p2, sizeof p2, tmp, "fine.bin");
  du_join(p3, sizeof p3, tmp, "bad-second.bin");
  t[3] = 3;
  t[9] = 300;
  du_ok(clt_tokens_write(p2, t, 8, 0));
  du_ok(clt_tokens_write(p3, t, 16, 0));
  const char *paths[2] = {p2, p3};
  clt_dataset *ds = NULL;
  du_expect_error(clt_dataset_open_tokens(paths, 2, 4, 256, &ds), CLT_EFORMAT, p3, "the token at index 9 is 300");
  ck_assert_ptr_null(ds);
}
END_TEST

START_TEST(bad_arguments) {
  uint32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  du_join(p1, sizeof p1, tmp, "ok.bin");
  du_ok(clt_tokens_write(p1, t, 8, 0));
  const char *paths[2] = {p1, NULL};
  clt_dataset *ds = NULL;
  du_expect_error(clt_dataset_open_tokens(paths, 1, 0, 0, &ds), CLT_EINVAL, p1, "context of 0 tokens");
  du_expect_error(clt_dataset_open_tokens(paths, 1, 4, -1, &ds), CLT_EINVAL, p1, "vocabulary of -1");
  du_expect_error(clt_dataset_open_tokens(paths, 1, 4, (1 << 24) + 1, &ds), CLT_EINVAL, "vocabulary");
  du_expect_error(clt_dataset_open_tokens(paths, 0, 4, 0, &ds), CLT_EINVAL, "no token files");
  du_expect_error(clt_dataset_open_tokens(paths, 2, 4, 0, &ds), CLT_EINVAL, "file name 1 of 2 is NULL");
  du_expect_error(clt_dataset_open_tokens(paths, 1, 4, 0, NULL), CLT_EINVAL, "out is NULL");
  du_join(p2, sizeof p2, tmp, "missing.bin");
  paths[0] = p2;
  du_expect_error(clt_dataset_open_tokens(paths, 1, 4, 0, &ds), CLT_ENOTFOUND, p2);
  ck_assert_ptr_null(ds);
  /* the writer refuses what the reader would */
  du_expect_error(clt_tokens_write(p1, t, 0, 0), CLT_EINVAL, p1, "0 tokens");
  t[5] = 1u << 24;
  du_expect_error(clt_tokens_write(p1, t, 8, 0), CLT_EINVAL, p1, "the token at index 5 is 16777216");
  t[5] = 6;
  du_expect_error(clt_tokens_write("/nonexistent/dir/t.bin", t, 8, 0), CLT_EIO, "/nonexistent/dir/t.bin");
  du_expect_error(clt_tokens_write(NULL, t, 8, 0), CLT_EINVAL, "NULL");
}
END_TEST

/* The fingerprint the ranks of a job compare (train/same_data.c): a
 * uint16 and a uint32 shard of the same tokens probe alike (their headers
 * differ), a plain and a gzip copy are the same, and a token changed in a
 * probed window changes that probe. */
START_TEST(fingerprint) {
  const int64_t n = 4001, T = 16; /* 250 windows */
  uint32_t *t = make_tokens(n, 50257, 3);
  clt__data_fingerprint fp[4];
  const struct { const char *name; int wide; } files[3] = {{"f.bin", 0}, {"f.bin.gz", 0}, {"w.bin", 1}};
  for (int i = 0; i < 4; i++) {
    if (i == 3) t[clt__probe_sample(250, 7) * T + 3] ^= 1;
    du_join(p1, sizeof p1, tmp, files[i % 3].name);
    du_ok(clt_tokens_write(p1, t, n, files[i % 3].wide));
    clt_dataset *ds = NULL;
    const char *paths[1] = {p1};
    du_ok(clt_dataset_open_tokens(paths, 1, T, 0, &ds));
    clt__dataset_fingerprint(ds, &fp[i]);
    clt_dataset_destroy(ds);
  }
  ck_assert(fp[0].header == fp[1].header && memcmp(fp[0].probe, fp[1].probe, sizeof fp[0].probe) == 0);
  ck_assert(fp[0].header != fp[2].header && memcmp(fp[0].probe, fp[2].probe, sizeof fp[0].probe) == 0);
  for (int k = 0; k < CLT__DATA_PROBES; k++)
    ck_assert_msg((fp[0].probe[k] != fp[3].probe[k]) == (k == 7), "probe %d", k);
  free(t);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("tokens");
  TCase *tc = tcase_create("format");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, write_bytes_u16);
  tcase_add_test(tc, write_bytes_u32);
  tcase_add_test(tc, roundtrip);
  tcase_add_test(tc, windows_exact);
  tcase_add_test(tc, shards_concatenate);
  tcase_add_test(tc, no_normalisation);
  tcase_add_test(tc, prefetch_windows);
  tcase_add_test(tc, fingerprint);
  suite_add_tcase(s, tc);
  tc = tcase_create("bad");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, bad_magic);
  tcase_add_test(tc, bad_version);
  tcase_add_test(tc, bad_count);
  tcase_add_test(tc, too_few_tokens);
  tcase_add_test(tc, token_out_of_range);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
