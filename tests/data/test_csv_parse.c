/*
 * test_csv_parse.c: CSV numbers read bit for bit as (float)strtod reads
 * them (csv.c's fast decimal path must be exact, not close): random
 * fields of 1 to 25 digits with and without a point and an exponent, and
 * the edges — significands past 2^53 divided by a power of ten beside a
 * float32 midpoint (where rounding twice gives the other float), 17 and
 * 19 digits, subnormals of both types, powers of
 * ten past 10^22, -0, long exponents, hex — each in a comma-, tab- and
 * space-separated file; NumPy's savetxt format (%.18e) of doubles and
 * of float32 midpoints; and the fields that are not finite as float32
 * (inf, nan, 1e39) refused naming the line and the column.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datautil.h"

static char *tmp;
static char path[4096];

static void setup(void) { tmp = du_mkdtemp(); }
static void teardown(void) {
  du_rmdir(tmp);
  tmp = NULL;
}

static const char *const edges[] = {
    /* significands past 2^53 over a power of ten, beside the midpoint of
     * two float32: rounded twice (the significand to a double, then the
     * quotient) they land on the other float than strtod's one rounding
     * (the parser before this test read these three wrong) */
    "10309470937499999e-10", "4750042343749999999e-13", "4750042343750000001e-13", "1152921573326323713", "-1152921573326323713", "1152921573326323713e-10", "115292157332632371.3",
    "9007199254740993", "9007199254740992", "9007199254740991", "18014398509481985", "123456789012345678",
    "1234567890123456789", "0.1000000000000000055511151231257827", "0.10000000000000001", "3.1415926535897932",
    "2.7182818284590452354", "1e22", "1e23", "9e22", "123e20", "1e-22", "1e-23", "4.9406564584124654e-324",
    "2.2250738585072011e-308", "1.17549435e-38", "1.1754942e-38", "1.4e-45", "7e-46", "7.1e-46", "1e-45",
    "3.4028234e38", "3.40282347e+38", "-0", "-0.0", "+0e5", "0e999999", "-0e-999999", "0.000000000000000000000000001",
    "00000000000000000000001.5", "1e000001", "1E+0000000000000000002", "1.", ".5", "-.5e1", "+7", "0x10", "0x1.8p1",
    "16777217", "16777216.5", "33554435", "1.00000005960464477539", "1.0000000596046448", "0.3", "2.5e-3", "-12.75"};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* A random decimal field: sign, 0..12 integer and 0..12 fraction digits
 * (at least one), an exponent half the time. */
static void random_field(char *buf, size_t len) {
  size_t n = 0;
  if (next() % 4 == 0) buf[n++] = next() % 2 ? '-' : '+';
  int id = (int)(next() % 13), fd = (int)(next() % 13);
  if (id + fd == 0) id = 1;
  for (int i = 0; i < id; i++) buf[n++] = (char)('0' + next() % 10);
  if (fd || next() % 8 == 0) buf[n++] = '.';
  for (int i = 0; i < fd; i++) buf[n++] = (char)('0' + next() % 10);
  if (next() % 2) n += (size_t)snprintf(buf + n, len - n, "e%d", (int)(next() % 81) - 45);
  buf[n] = '\0';
}

/* A file of the fields, two a line (sep between), and a 0 target: every
 * one must read as (float)strtod. */
static void check_fields(char **fields, int n, char sep) {
  size_t cap = 64;
  for (int i = 0; i < n; i++) cap += strlen(fields[i]) + 4;
  char *text = malloc(cap), *p = text;
  p += sprintf(p, "a%cb%cy\n", sep, sep);
  for (int i = 0; i + 1 < n; i += 2) p += sprintf(p, "%s%c%s%c0\n", fields[i], sep, fields[i + 1], sep);
  du_write(du_join(path, sizeof path, tmp, "f.csv"), text, (size_t)(p - text), 0);
  free(text);
  clt_data_options o = {.regression = 1, .target = "y"};
  clt_dataset *ds;
  du_ok(clt_dataset_open(path, &o, &ds));
  const int64_t rows = n / 2;
  ck_assert_int_eq(clt_dataset_count(ds), rows);
  float *x = malloc((size_t)rows * 2 * sizeof *x), *t = malloc((size_t)rows * sizeof *t);
  int64_t *idx = malloc((size_t)rows * sizeof *idx);
  for (int64_t i = 0; i < rows; i++) idx[i] = i;
  du_ok(clt_dataset_get_batch_targets(ds, idx, rows, x, t));
  for (int i = 0; i < 2 * rows; i++) {
    float want = (float)strtod(fields[i], NULL);
    ck_assert_msg(memcmp(&x[i], &want, 4) == 0, "sep '%c': '%s' read as %a, strtod's is %a", sep, fields[i],
                  (double)x[i], (double)want);
  }
  free(x), free(t), free(idx);
  clt_dataset_destroy(ds);
}

START_TEST(as_strtod) {
  enum { RANDOM = 20000, SAVETXT = 4000 };
  const int ne = (int)(sizeof edges / sizeof edges[0]);
  char **fields = malloc((size_t)(RANDOM + ne + 1) * sizeof *fields);
  int n = 0;
  for (int i = 0; i < ne; i++) fields[n++] = strdup(edges[i]);
  while (n < RANDOM + ne) {
    char buf[64];
    random_field(buf, sizeof buf);
    if (isfinite((float)strtod(buf, NULL))) fields[n++] = strdup(buf);
  }
  /* NumPy's savetxt ("%.18e", 19 digits) of doubles of every size, and of
   * the midpoints between two float32 and their neighbours, where reading
   * the digits in doubles is not enough to round to float32 */
  fields = realloc(fields, (size_t)(n + 3 * SAVETXT + 1) * sizeof *fields);
  for (int i = 0; i < SAVETXT; i++) {
    char buf[64];
    double d = ldexp((double)(next() >> 11), (int)(next() % 200) - 153) * (next() % 2 ? 1 : -1);
    if (!isfinite((float)d) || d == 0) d = 1.5;
    snprintf(buf, sizeof buf, "%.18e", d);
    fields[n++] = strdup(buf);
    float f = (float)d, g = nextafterf(f, INFINITY);
    double mid = ((double)f + (double)g) / 2;
    snprintf(buf, sizeof buf, "%.18e", mid);
    fields[n++] = strdup(buf);
    snprintf(buf, sizeof buf, "%.16e", nextafter(mid, (next() % 2) ? INFINITY : -INFINITY));
    fields[n++] = strdup(buf);
  }
  if (n % 2) fields[n++] = strdup("1");
  check_fields(fields, n, ',');
  check_fields(fields, n, '\t');
  check_fields(fields, n, ' ');
  for (int i = 0; i < n; i++) free(fields[i]);
  free(fields);
}
END_TEST

/* Not finite as a float32: refused, naming the line, column and field. */
START_TEST(not_finite) {
  static const char *const bad[] = {"inf", "-Infinity", "nan", "1e39", "3.4028236e38", "1e400", "-1e999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[128];
    int n = snprintf(text, sizeof text, "1,2\n3,%s\n", bad[i]);
    du_write(du_join(path, sizeof path, tmp, "bad.csv"), text, (size_t)n, 0);
    clt_data_options o = {.regression = 1};
    clt_dataset *ds = NULL;
    du_expect_error(clt_dataset_open(path, &o, &ds), CLT_EFORMAT, "bad.csv", "line 2", "column 2", bad[i],
                    "not finite");
    ck_assert_ptr_null(ds);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("csv_parse");
  TCase *tc = tcase_create("numbers");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, as_strtod);
  tcase_add_test(tc, not_finite);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
