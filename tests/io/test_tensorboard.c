/*
 * test_tensorboard.c: the TensorBoard writer (src/io/tensorboard.c) read
 * back by hand: CRC-32C against the standard's check value, every record's
 * framing and masked CRCs as TensorFlow's reader checks them, the first
 * event the file version, and scalar events decoding (protobuf-c) to the
 * tags, steps and float32 values written, non-finite values left out; a
 * directory that cannot be made is refused naming it. tests/io/tensorboard.sh
 * reads cltrain's files with TensorBoard itself. Needs no OpenCL device.
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datautil.h"
#include "core/internal.h"
#include "io/tb_event.pb-c.h"
#include "io/tensorboard.h"

static char *tmp;
static void setup(void) { tmp = du_mkdtemp(); }
static void teardown(void) {
  du_rmdir(tmp);
  tmp = NULL;
}

static uint32_t masked(const void *p, size_t n) {
  uint32_t c = clt__crc32c(0, p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const unsigned char *b, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | b[i];
  return v;
}

START_TEST(crc32c_check_value) {
  /* RFC 3720 (iSCSI) B.4 and the CRC catalogue's check value. */
  ck_assert_uint_eq(clt__crc32c(0, "123456789", 9), 0xe3069283u);
  unsigned char zeros[32] = {0};
  ck_assert_uint_eq(clt__crc32c(0, zeros, 32), 0x8a9136aau);
  /* running: in two pieces as in one */
  ck_assert_uint_eq(clt__crc32c(clt__crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}
END_TEST

START_TEST(records_decode) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/a/b", tmp);
  clt__tb *w;
  ck_assert_msg(clt__tb_open(dir, &w) == 0, "%s", clt_last_error());
  const char *tags[] = {"loss", "lr", "nan", "replica0/share"};
  double v1[] = {2.5, 0.01, NAN, 32}, v2[] = {1.25, 0.005, INFINITY, 31};
  ck_assert_int_eq(clt__tb_scalars(w, 7, 4, tags, v1), 0);
  ck_assert_int_eq(clt__tb_scalars(w, 8, 4, tags, v2), 0);
  char path[4096];
  snprintf(path, sizeof path, "%s", clt__tb_path(w));
  clt__tb_close(w);
  ck_assert_ptr_nonnull(strstr(path, "/events.out.tfevents."));

  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, f), at = 0;
  fclose(f);
  int events = 0;
  while (at < n) {
    ck_assert_uint_ge(n - at, 12);
    uint64_t len = le(buf + at, 8);
    ck_assert_uint_eq(le(buf + at + 8, 4), masked(buf + at, 8));
    ck_assert_uint_ge(n - at - 12, len + 4);
    const unsigned char *data = buf + at + 12;
    ck_assert_uint_eq(le(data + len, 4), masked(data, len));
    Tensorboard__Event *ev = tensorboard__event__unpack(NULL, len, data);
    ck_assert_ptr_nonnull(ev);
    ck_assert(ev->wall_time > 1e9);
    if (events == 0) {
      ck_assert_int_eq(ev->what_case, TENSORBOARD__EVENT__WHAT_FILE_VERSION);
      ck_assert_str_eq(ev->file_version, "brain.Event:2");
    } else {
      const double *v = events == 1 ? v1 : v2;
      ck_assert_int_eq(ev->step, events == 1 ? 7 : 8);
      ck_assert_int_eq(ev->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
      ck_assert_uint_eq(ev->summary->n_value, 3); /* the non-finite one left out */
      const int idx[] = {0, 1, 3};
      for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(ev->summary->value[i]->tag, tags[idx[i]]);
        ck_assert_int_eq(ev->summary->value[i]->value_case, TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
        ck_assert(ev->summary->value[i]->simple_value == (float)v[idx[i]]);
      }
    }
    tensorboard__event__free_unpacked(ev, NULL);
    at += 12 + len + 4;
    events++;
  }
  ck_assert_int_eq(events, 3);
}
END_TEST

START_TEST(unwritable_directory) {
  char file[4096], dir[4096];
  snprintf(file, sizeof file, "%s/plain", tmp);
  FILE *f = fopen(file, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  snprintf(dir, sizeof dir, "%s/sub", file);
  clt__tb *w = (clt__tb *)1;
  ck_assert_int_eq(clt__tb_open(dir, &w), CLT_EIO);
  ck_assert_ptr_null(w);
  ck_assert_msg(strstr(clt_last_error(), "the TensorBoard directory") && strstr(clt_last_error(), dir), "%s",
                clt_last_error());
}
END_TEST

int main(void) {
  Suite *s = suite_create("tensorboard");
  TCase *tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, crc32c_check_value);
  tcase_add_test(tc, records_decode);
  tcase_add_test(tc, unwritable_directory);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
