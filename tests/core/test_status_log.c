/*
 * test_status_log.c: status codes and their names, the last-error detail, the
 * logging callback and levels, and the version.
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

START_TEST(every_status_has_a_name_and_message) {
  static const int codes[] = {
#define X(name, value, msg) value,
      CLT_STATUS_MAP(X)
#undef X
  };
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    ck_assert_str_ne(clt_status_name(codes[i]), "CLT_UNKNOWN");
    ck_assert_str_ne(clt_strerror(codes[i]), "unknown status code");
  }
  ck_assert_str_eq(clt_status_name(CLT_EDEVMEM), "CLT_EDEVMEM");
  ck_assert_str_eq(clt_strerror(CLT_OK), "success");
  ck_assert_str_eq(clt_status_name(-9999), "CLT_UNKNOWN");
  ck_assert_str_eq(clt_strerror(12345), "unknown status code");
}
END_TEST

START_TEST(last_error_says_what_failed) {
  clt_devices *out = (clt_devices *)1;
  clt_clear_error();
  ck_assert_str_eq(clt_last_error(), "");
  ck_assert_int_eq(clt_devices_select(NULL, "all", &out), CLT_EINVAL);
  ck_assert_ptr_null(out);
  ck_assert_ptr_nonnull(strstr(clt_last_error(), "no device list"));
  clt_clear_error();
  ck_assert_str_eq(clt_last_error(), "");
}
END_TEST

static int log_calls;
static char log_last[512];
static void capture(clt_log_level level, const char *msg, void *user) {
  (void)level;
  *(int *)user += 1;
  strncpy(log_last, msg, sizeof log_last - 1);
}

START_TEST(log_callback_and_levels) {
  clt_devices *out;
  log_calls = 0;
  clt_log_set(capture, &log_calls);
  clt_log_set_level(CLT_LOG_DEBUG);
  ck_assert_int_eq(clt_log_get_level(), CLT_LOG_DEBUG);
  clt_devices_select(NULL, "all", &out); /* errors are logged at debug */
  ck_assert_int_ge(log_calls, 1);
  ck_assert_ptr_nonnull(strstr(log_last, "CLT_EINVAL"));
  int before = log_calls;
  clt_log_set_level(CLT_LOG_ERROR);
  clt_devices_select(NULL, "all", &out);
  ck_assert_int_eq(log_calls, before);
  clt_log_set(NULL, NULL);
  clt_log_set_level(CLT_LOG_WARN);

  ck_assert_int_eq(clt_log_level_parse("trace"), CLT_LOG_TRACE);
  ck_assert_int_eq(clt_log_level_parse("warning"), CLT_LOG_WARN);
  ck_assert_int_eq(clt_log_level_parse("3"), CLT_LOG_INFO);
  ck_assert_int_eq(clt_log_level_parse("loud"), -1);
  ck_assert_int_eq(clt_log_level_parse("9"), -1);
  ck_assert_int_eq(clt_log_level_parse(NULL), -1);
  ck_assert_str_eq(clt_log_level_name(CLT_LOG_INFO), "info");
}
END_TEST

START_TEST(version_matches_headers) {
  ck_assert_str_eq(clt_version(), CLT_VERSION_STRING);
  ck_assert_int_eq(clt_version_hex(), CLT_VERSION_HEX);
}
END_TEST

START_TEST(dtype_sizes) {
  ck_assert_uint_eq(clt_dtype_size(CLT_F32), 4);
  ck_assert_uint_eq(clt_dtype_size(CLT_F16), 2);
  ck_assert_uint_eq(clt_dtype_size(CLT_I32), 4);
  ck_assert_uint_eq(clt_dtype_size(CLT_U8), 1);
  ck_assert_str_eq(clt_dtype_name(CLT_F16), "f16");
}
END_TEST

int main(void) {
  Suite *s = suite_create("core");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, every_status_has_a_name_and_message);
  tcase_add_test(tc, last_error_says_what_failed);
  tcase_add_test(tc, log_callback_and_levels);
  tcase_add_test(tc, version_matches_headers);
  tcase_add_test(tc, dtype_sizes);
  suite_add_tcase(s, tc);
  return tu_run(s);
}
