/*
 * test_args.c: every public function with NULL pointers and handles
 * never made, and the options' bad counts and kinds.
 *
 * The list of functions is the public headers' own: the test reads every
 * CLT_API prototype of include/cltrain.h and include/cltrain/ *.h and fails
 * when one has no CASE below (or a CASE names no function there), so a
 * function added to a header cannot be forgotten here. Each case runs in a
 * child process of its own (with a deadline), so a crash or a hang counts as
 * that case failing and the others still run; the objects it needs are made
 * once, in the parent, before. A case gives each pointer argument NULL in
 * turn, the others valid, and wants CLT_EINVAL with a message naming the
 * function and the argument; a function that returns a value rather than a
 * status wants the value cltrain.h says a NULL object gives (0, NULL, "",
 * NaN), and a void one must simply return.
 *
 * Then, in this process: clt_train_options with a bad count or kind (each
 * refused naming the field and the value), the on/off CLT_* switches set to
 * junk, and the messages of issue 38's item 11 that the C API gives.
 */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cltrain.h>
#include <cltrain/opencl.h>
#include <cltrain/version.h>
#if CLT_HAVE_MPI
#include <cltrain/mpi.h>
#endif

/* ---- the cases ---------------------------------------------------------- */

typedef struct {
  const char *name;
  void (*run)(void);
} api_case;

static api_case cases[400];
static int ncases;

static void add_case(const char *name, void (*run)(void)) {
  if (ncases < (int)(sizeof cases / sizeof *cases)) cases[ncases++] = (api_case){name, run};
}

/* A case for public function NAME, registered before main runs. */
#define CASE(name)                                                              \
  static void case_##name(void);                                                \
  __attribute__((constructor)) static void register_##name(void) { add_case(#name, case_##name); } \
  static void case_##name(void)

static const char *current; /* the case running (in the child) */
static int failures;        /* the child's */

static void fail(int line, const char *fmt, const char *a, const char *b) {
  printf("FAIL: %s (line %d): ", current, line);
  printf(fmt, a, b);
  printf("\n");
  failures++;
}

/* Whether text holds word, not inside a longer name. */
static int has_word(const char *text, const char *word) {
  size_t n = strlen(word);
  for (const char *p = text; (p = strstr(p, word)); p++) {
    int before = p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.');
    int after = isalnum((unsigned char)p[n]) || p[n] == '_';
    if (!before && !after) return 1;
  }
  return 0;
}

/* rc must be CLT_EINVAL and the last error name the case's function and arg. */
static void einval(int line, const char *arg, int rc) {
  const char *msg = clt_last_error();
  if (rc != CLT_EINVAL)
    fail(line, "%s NULL: got %s, not CLT_EINVAL", arg, clt_status_name(rc));
  else if (!strstr(msg, current) || !has_word(msg, arg))
    fail(line, "the message does not name the function and %s: '%s'", arg, msg);
  clt_clear_error();
}
#define EINVAL(arg, call) einval(__LINE__, arg, (call))
#define EXPECT(cond)                                                            \
  do {                                                                          \
    if (!(cond)) fail(__LINE__, "%s%s", #cond, " does not hold");               \
  } while (0)

/* ---- what the cases use, made in the parent ------------------------------ */

static clt_devices *devs, *one;
static clt_context *ctx;
static clt_comm *comm;
static clt_model *model;
static clt_trainer *tr;
static clt_train_options opts;
static clt_dataset *ds;
static clt_sampler *smp;
static clt_prefetcher *pf;
static clt_allreduce_plan *ar;
static clt_reduce_scatter_plan *rs;
static clt_allgather_plan *ag;
static cl_mem buf;
static cl_command_queue queue;
static cl_kernel kernel;
static clt_tensor tv;
static clt_pinned *pin;
static char dir[256], raw_path[300], spec_path[300];
static float host[64];
static int32_t labels[8];
static int64_t idx[4] = {0, 1, 2, 3};
static const int64_t dims4[1] = {4};
static clt_optimizer_config sgd;
static clt_replica_memory mem;

#define P_COUNT 15 /* input 4, linear 3: 4 x 3 + 3 parameters */

/* ---- status, version, logging, data types ------------------------------ */

CASE(clt_strerror) { EXPECT(strcmp(clt_strerror(12345), "unknown status code") == 0); }
CASE(clt_status_name) { EXPECT(strcmp(clt_status_name(-9999), "CLT_UNKNOWN") == 0); }
CASE(clt_last_error) { EXPECT(clt_last_error() != NULL); }
CASE(clt_clear_error) {
  clt_clear_error();
  EXPECT(clt_last_error()[0] == '\0');
}
CASE(clt_version) { EXPECT(clt_version() != NULL); }
CASE(clt_version_hex) { EXPECT(clt_version_hex() == CLT_VERSION_HEX); }
CASE(clt_log_set) { clt_log_set(NULL, NULL); }
CASE(clt_log_set_level) { clt_log_set_level(CLT_LOG_WARN); }
CASE(clt_log_get_level) { EXPECT(clt_log_get_level() <= CLT_LOG_TRACE); }
CASE(clt_log_level_parse) { EXPECT(clt_log_level_parse(NULL) == -1); }
CASE(clt_log_level_name) { EXPECT(strcmp(clt_log_level_name((clt_log_level)42), "?") == 0); }
CASE(clt_dtype_size) { EXPECT(clt_dtype_size((clt_dtype)42) == 0); }
CASE(clt_dtype_name) { EXPECT(strcmp(clt_dtype_name((clt_dtype)42), "?") == 0); }

/* ---- devices and contexts ------------------------------------------------ */

CASE(clt_devices_discover) { EINVAL("out", clt_devices_discover(NULL)); }
CASE(clt_devices_destroy) { clt_devices_destroy(NULL); }
CASE(clt_devices_count) { EXPECT(clt_devices_count(NULL) == 0); }
CASE(clt_devices_info) { EXPECT(clt_devices_info(NULL, 0) == NULL); }
CASE(clt_device_peak_flops) {
  double f;
  EINVAL("info", clt_device_peak_flops(NULL, &f, NULL));
  EINVAL("flops", clt_device_peak_flops(clt_devices_info(devs, 0), NULL, NULL));
}
CASE(clt_device_peak_flops_save) {
  EINVAL("info", clt_device_peak_flops_save(NULL, 1e9));
  EXPECT(clt_device_peak_flops_save(clt_devices_info(devs, 0), -1) == CLT_EINVAL); /* before any file is touched */
}
CASE(clt_device_type_name) { EXPECT(strcmp(clt_device_type_name((clt_device_type)42), "other") == 0); }
CASE(clt_devices_select) {
  clt_devices *out = NULL;
  EINVAL("all", clt_devices_select(NULL, "all", &out));
  EINVAL("out", clt_devices_select(devs, "all", NULL));
}
CASE(clt_context_create) {
  clt_context *out = NULL;
  EINVAL("devs", clt_context_create(NULL, 0, &out));
  EINVAL("out", clt_context_create(devs, 0, NULL));
}
CASE(clt_context_destroy) { clt_context_destroy(NULL); }
CASE(clt_context_device) { EXPECT(clt_context_device(NULL) == NULL); }
CASE(clt_context_finish) { EINVAL("ctx", clt_context_finish(NULL)); }
CASE(clt_devices_cl_platform) { EXPECT(clt_devices_cl_platform(NULL, 0) == NULL); }
CASE(clt_devices_cl_device) { EXPECT(clt_devices_cl_device(NULL, 0) == NULL); }
CASE(clt_context_cl) { EXPECT(clt_context_cl(NULL) == NULL); }
CASE(clt_context_queue) { EXPECT(clt_context_queue(NULL) == NULL); }
CASE(clt_context_transfer_queue) { EXPECT(clt_context_transfer_queue(NULL) == NULL); }
CASE(clt_context_cl_device) { EXPECT(clt_context_cl_device(NULL) == NULL); }
CASE(clt_context_kernel) {
  cl_kernel k;
  EINVAL("ctx", clt_context_kernel(NULL, "elementwise", "fill_f32", NULL, &k));
  EINVAL("source_name", clt_context_kernel(ctx, NULL, "fill_f32", NULL, &k));
  EINVAL("kernel_name", clt_context_kernel(ctx, "elementwise", NULL, NULL, &k));
  EINVAL("out", clt_context_kernel(ctx, "elementwise", "fill_f32", NULL, NULL));
}
CASE(clt_context_build) {
  cl_program p;
  const char *src = "kernel void k(global float *x) { x[0] = 1; }";
  EINVAL("ctx", clt_context_build(NULL, "mine", src, NULL, &p));
  EINVAL("name", clt_context_build(ctx, NULL, src, NULL, &p));
  EINVAL("source", clt_context_build(ctx, "mine", NULL, NULL, &p));
  EINVAL("out", clt_context_build(ctx, "mine", src, NULL, NULL));
}
CASE(clt_kernel_sources) { EXPECT(clt_kernel_sources() != NULL && clt_kernel_sources()[0] != NULL); }
CASE(clt_launch_1d) {
  EINVAL("ctx", clt_launch_1d(NULL, kernel, 16, 0));
  EINVAL("k", clt_launch_1d(ctx, NULL, 16, 0));
}
CASE(clt_buffer_create) {
  cl_mem b;
  EINVAL("ctx", clt_buffer_create(NULL, 64, &b));
  EINVAL("out", clt_buffer_create(ctx, 64, NULL));
}
CASE(clt_buffer_release) { clt_buffer_release(NULL); }
CASE(clt_buffer_size) { EXPECT(clt_buffer_size(NULL) == 0); }
CASE(clt_pinned_create) {
  clt_pinned *p;
  EINVAL("ctx", clt_pinned_create(NULL, 64, &p));
  EINVAL("out", clt_pinned_create(ctx, 64, NULL));
}
CASE(clt_pinned_destroy) { clt_pinned_destroy(NULL); }
CASE(clt_pinned_ptr) { EXPECT(clt_pinned_ptr(NULL) == NULL); }
CASE(clt_pinned_size) { EXPECT(clt_pinned_size(NULL) == 0); }

/* ---- tensors, kernels, GEMM, the optimizer's step ------------------------- */

CASE(clt_tensor_view) {
  clt_tensor t;
  int64_t shape[1] = {16};
  EINVAL("buf", clt_tensor_view(NULL, 0, CLT_F32, 1, shape, &t));
  EINVAL("shape", clt_tensor_view(buf, 0, CLT_F32, 1, NULL, &t));
  EINVAL("out", clt_tensor_view(buf, 0, CLT_F32, 1, shape, NULL));
}
CASE(clt_tensor_numel) { EXPECT(clt_tensor_numel(NULL) == 0); }
CASE(clt_tensor_bytes) { EXPECT(clt_tensor_bytes(NULL) == 0); }
CASE(clt_tensor_shape_str) {
  char s[32];
  EXPECT(clt_tensor_shape_str(NULL, s, sizeof s) == s);
  EXPECT(clt_tensor_shape_str(&tv, NULL, 0) == NULL);
}
CASE(clt_tensor_upload) {
  EINVAL("ctx", clt_tensor_upload(NULL, &tv, host, 64));
  EINVAL("t", clt_tensor_upload(ctx, NULL, host, 64));
  EINVAL("host", clt_tensor_upload(ctx, &tv, NULL, 64));
}
CASE(clt_tensor_upload_async) {
  EINVAL("ctx", clt_tensor_upload_async(NULL, &tv, host, 64));
  EINVAL("t", clt_tensor_upload_async(ctx, NULL, host, 64));
  EINVAL("host", clt_tensor_upload_async(ctx, &tv, NULL, 64));
}
CASE(clt_tensor_download) {
  EINVAL("ctx", clt_tensor_download(NULL, &tv, host, 64));
  EINVAL("t", clt_tensor_download(ctx, NULL, host, 64));
  EINVAL("host", clt_tensor_download(ctx, &tv, NULL, 64));
}
CASE(clt_fill) {
  EINVAL("ctx", clt_fill(NULL, &tv, 1));
  EINVAL("x", clt_fill(ctx, NULL, 1));
}
CASE(clt_scale) {
  EINVAL("ctx", clt_scale(NULL, &tv, 1));
  EINVAL("x", clt_scale(ctx, NULL, 1));
}
CASE(clt_axpy) {
  EINVAL("ctx", clt_axpy(NULL, 1, &tv, &tv));
  EINVAL("x", clt_axpy(ctx, 1, NULL, &tv));
  EINVAL("y", clt_axpy(ctx, 1, &tv, NULL));
}
CASE(clt_add) {
  EINVAL("ctx", clt_add(NULL, &tv, &tv, &tv));
  EINVAL("a", clt_add(ctx, NULL, &tv, &tv));
  EINVAL("b", clt_add(ctx, &tv, NULL, &tv));
  EINVAL("out", clt_add(ctx, &tv, &tv, NULL));
}
CASE(clt_mul) {
  EINVAL("ctx", clt_mul(NULL, &tv, &tv, &tv));
  EINVAL("a", clt_mul(ctx, NULL, &tv, &tv));
  EINVAL("b", clt_mul(ctx, &tv, NULL, &tv));
  EINVAL("out", clt_mul(ctx, &tv, &tv, NULL));
}
CASE(clt_sum) {
  float s;
  EINVAL("ctx", clt_sum(NULL, &tv, &s));
  EINVAL("x", clt_sum(ctx, NULL, &s));
  EINVAL("out", clt_sum(ctx, &tv, NULL));
}
CASE(clt_sumsq) {
  float s;
  EINVAL("ctx", clt_sumsq(NULL, &tv, &s));
  EINVAL("x", clt_sumsq(ctx, NULL, &s));
  EINVAL("out", clt_sumsq(ctx, &tv, NULL));
}
CASE(clt_convert) {
  EINVAL("ctx", clt_convert(NULL, &tv, &tv));
  EINVAL("src", clt_convert(ctx, NULL, &tv));
  EINVAL("dst", clt_convert(ctx, &tv, NULL));
}
CASE(clt_sgemm) {
  clt_matrix m = {buf, 0, 2}, none = {NULL, 0, 2};
  EINVAL("ctx", clt_sgemm(NULL, CLT_NO_TRANS, CLT_NO_TRANS, 2, 2, 2, 1, m, m, 0, m));
  EINVAL("a.buf", clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 2, 2, 2, 1, none, m, 0, m));
  EINVAL("b.buf", clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 2, 2, 2, 1, m, none, 0, m));
  EINVAL("c.buf", clt_sgemm(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 2, 2, 2, 1, m, m, 0, none));
  EINVAL("ta", clt_sgemm(ctx, (clt_transpose)7, CLT_NO_TRANS, 2, 2, 2, 1, m, m, 0, m));
}
CASE(clt_sgemm_batched) {
  clt_matrix m = {buf, 0, 2}, none = {NULL, 0, 2};
  EINVAL("ctx", clt_sgemm_batched(NULL, CLT_NO_TRANS, CLT_NO_TRANS, 2, 2, 2, 1, m, 4, m, 4, 0, m, 4, 2));
  EINVAL("a.buf", clt_sgemm_batched(ctx, CLT_NO_TRANS, CLT_NO_TRANS, 2, 2, 2, 1, none, 4, m, 4, 0, m, 4, 2));
  EINVAL("tb", clt_sgemm_batched(ctx, CLT_NO_TRANS, (clt_transpose)-1, 2, 2, 2, 1, m, 4, m, 4, 0, m, 4, 2));
}
CASE(clt_optimizer_step) {
  EINVAL("ctx", clt_optimizer_step(NULL, &sgd, 1, 0.1f, 1, &tv, &tv, &tv));
  EINVAL("cfg", clt_optimizer_step(ctx, NULL, 1, 0.1f, 1, &tv, &tv, &tv));
  EINVAL("params", clt_optimizer_step(ctx, &sgd, 1, 0.1f, 1, NULL, &tv, &tv));
  EINVAL("grads", clt_optimizer_step(ctx, &sgd, 1, 0.1f, 1, &tv, NULL, &tv));
  EINVAL("state", clt_optimizer_step(ctx, &sgd, 1, 0.1f, 1, &tv, &tv, NULL)); /* SGD's momentum needs one */
}
CASE(clt_optimizer_step_masked) {
  EINVAL("ctx", clt_optimizer_step_masked(NULL, &sgd, 1, 0.1f, 1, &tv, &tv, &tv, NULL));
  EINVAL("cfg", clt_optimizer_step_masked(ctx, NULL, 1, 0.1f, 1, &tv, &tv, &tv, NULL));
  EINVAL("params", clt_optimizer_step_masked(ctx, &sgd, 1, 0.1f, 1, NULL, &tv, &tv, NULL));
  EINVAL("grads", clt_optimizer_step_masked(ctx, &sgd, 1, 0.1f, 1, &tv, NULL, &tv, NULL));
  EINVAL("state", clt_optimizer_step_masked(ctx, &sgd, 1, 0.1f, 1, &tv, &tv, NULL, NULL));
}

/* ---- communicators and collectives ------------------------------------- */

CASE(clt_comm_create_local) { EINVAL("out", clt_comm_create_local(NULL)); }
CASE(clt_comm_destroy) { clt_comm_destroy(NULL); }
CASE(clt_comm_rank) { EXPECT(clt_comm_rank(NULL) == 0); }
CASE(clt_comm_size) { EXPECT(clt_comm_size(NULL) == 0); }
CASE(clt_comm_local_rank) { EXPECT(clt_comm_local_rank(NULL) == 0); }
CASE(clt_comm_local_size) { EXPECT(clt_comm_local_size(NULL) == 0); }
CASE(clt_comm_node) { EXPECT(clt_comm_node(NULL) == 0); }
CASE(clt_comm_node_count) { EXPECT(clt_comm_node_count(NULL) == 0); }
CASE(clt_allreduce_algorithms) { EXPECT(clt_allreduce_algorithms() != NULL); }
CASE(clt_comm_set_allreduce) {
  EINVAL("comm", clt_comm_set_allreduce(NULL, "ring"));
  EINVAL("algorithm", clt_comm_set_allreduce(comm, NULL));
}
CASE(clt_comm_bytes_sent) {
  uint64_t a = 1, b = 1;
  clt_comm_bytes_sent(NULL, &a, &b);
  EXPECT(a == 0 && b == 0);
  clt_comm_bytes_sent(comm, NULL, NULL);
}
CASE(clt_comm_model_predict) {
  double s;
  EINVAL("comm", clt_comm_model_predict(NULL, "ring", 64, &s));
  EINVAL("algorithm", clt_comm_model_predict(comm, NULL, 64, &s));
  EINVAL("seconds", clt_comm_model_predict(comm, "ring", 64, NULL));
}
CASE(clt_comm_default_device) {
  EINVAL("comm", clt_comm_default_device(NULL, devs));
  EINVAL("devs", clt_comm_default_device(comm, NULL));
}
CASE(clt_comm_set_timeout) { EINVAL("comm", clt_comm_set_timeout(NULL, 5)); }
CASE(clt_comm_timeout) { EXPECT(clt_comm_timeout(NULL) == 0); }
CASE(clt_comm_chunk_bytes) { EXPECT(clt_comm_chunk_bytes(NULL) == 0); }
CASE(clt_comm_shm_piece_bytes) { EXPECT(clt_comm_shm_piece_bytes(NULL) == 0); }
CASE(clt_reduce_op_name) { EXPECT(strcmp(clt_reduce_op_name((clt_reduce_op)42), "?") == 0); }
CASE(clt_allreduce_plan_create) {
  clt_allreduce_plan *p;
  EINVAL("comm", clt_allreduce_plan_create(NULL, 16, CLT_F32, CLT_SUM, NULL, &p));
  EINVAL("out", clt_allreduce_plan_create(comm, 16, CLT_F32, CLT_SUM, NULL, NULL));
}
CASE(clt_allreduce_plan_destroy) { clt_allreduce_plan_destroy(NULL); }
CASE(clt_allreduce_plan_count) { EXPECT(clt_allreduce_plan_count(NULL) == 0); }
CASE(clt_allreduce_plan_algorithm) { EXPECT(strcmp(clt_allreduce_plan_algorithm(NULL), "?") == 0); }
CASE(clt_allreduce_run) {
  EINVAL("plan", clt_allreduce_run(NULL, host));
  EINVAL("buf", clt_allreduce_run(ar, NULL));
}
CASE(clt_reduce_scatter_plan_create) {
  clt_reduce_scatter_plan *p;
  EINVAL("comm", clt_reduce_scatter_plan_create(NULL, 16, NULL, CLT_F32, CLT_SUM, NULL, &p));
  EINVAL("out", clt_reduce_scatter_plan_create(comm, 16, NULL, CLT_F32, CLT_SUM, NULL, NULL));
}
CASE(clt_reduce_scatter_plan_destroy) { clt_reduce_scatter_plan_destroy(NULL); }
CASE(clt_reduce_scatter_plan_count) { EXPECT(clt_reduce_scatter_plan_count(NULL) == 0); }
CASE(clt_reduce_scatter_plan_part) {
  size_t o, n;
  EINVAL("plan", clt_reduce_scatter_plan_part(NULL, 0, &o, &n));
  EINVAL("offset", clt_reduce_scatter_plan_part(rs, 0, NULL, &n));
  EINVAL("n", clt_reduce_scatter_plan_part(rs, 0, &o, NULL));
}
CASE(clt_reduce_scatter_plan_algorithm) { EXPECT(strcmp(clt_reduce_scatter_plan_algorithm(NULL), "?") == 0); }
CASE(clt_reduce_scatter_run) {
  EINVAL("plan", clt_reduce_scatter_run(NULL, host));
  EINVAL("buf", clt_reduce_scatter_run(rs, NULL));
}
CASE(clt_allgather_plan_create) {
  clt_allgather_plan *p;
  EINVAL("comm", clt_allgather_plan_create(NULL, 16, NULL, CLT_F32, NULL, &p));
  EINVAL("out", clt_allgather_plan_create(comm, 16, NULL, CLT_F32, NULL, NULL));
}
CASE(clt_allgather_plan_destroy) { clt_allgather_plan_destroy(NULL); }
CASE(clt_allgather_plan_count) { EXPECT(clt_allgather_plan_count(NULL) == 0); }
CASE(clt_allgather_plan_part) {
  size_t o, n;
  EINVAL("plan", clt_allgather_plan_part(NULL, 0, &o, &n));
  EINVAL("offset", clt_allgather_plan_part(ag, 0, NULL, &n));
  EINVAL("n", clt_allgather_plan_part(ag, 0, &o, NULL));
}
CASE(clt_allgather_run) {
  EINVAL("plan", clt_allgather_run(NULL, host));
  EINVAL("buf", clt_allgather_run(ag, NULL));
}
CASE(clt_bcast) {
  EINVAL("comm", clt_bcast(NULL, host, 16, 0));
  EINVAL("buf", clt_bcast(comm, NULL, 16, 0));
}
CASE(clt_allgather) {
  EINVAL("comm", clt_allgather(NULL, host, 16, host + 16));
  EINVAL("send", clt_allgather(comm, NULL, 16, host + 16));
  EINVAL("recv", clt_allgather(comm, host, 16, NULL));
}
CASE(clt_allreduce_run_device) {
  EINVAL("plan", clt_allreduce_run_device(NULL, queue, buf, 0));
  EINVAL("queue", clt_allreduce_run_device(ar, NULL, buf, 0));
  EINVAL("buf", clt_allreduce_run_device(ar, queue, NULL, 0));
}
CASE(clt_allreduce_run_devices) {
  size_t off = 0;
  EINVAL("plan", clt_allreduce_run_devices(NULL, 1, &queue, &buf, &off));
  EINVAL("queues", clt_allreduce_run_devices(ar, 1, NULL, &buf, &off));
  EINVAL("bufs", clt_allreduce_run_devices(ar, 1, &queue, NULL, &off));
}
CASE(clt_reduce_scatter_run_device) {
  EINVAL("plan", clt_reduce_scatter_run_device(NULL, queue, buf, 0));
  EINVAL("queue", clt_reduce_scatter_run_device(rs, NULL, buf, 0));
  EINVAL("buf", clt_reduce_scatter_run_device(rs, queue, NULL, 0));
}
CASE(clt_reduce_scatter_run_devices) {
  size_t off = 0;
  EINVAL("plan", clt_reduce_scatter_run_devices(NULL, 1, &queue, &buf, &off));
  EINVAL("queues", clt_reduce_scatter_run_devices(rs, 1, NULL, &buf, &off));
  EINVAL("bufs", clt_reduce_scatter_run_devices(rs, 1, &queue, NULL, &off));
}
CASE(clt_allgather_run_device) {
  EINVAL("plan", clt_allgather_run_device(NULL, queue, buf, 0));
  EINVAL("queue", clt_allgather_run_device(ag, NULL, buf, 0));
  EINVAL("buf", clt_allgather_run_device(ag, queue, NULL, 0));
}
CASE(clt_allgather_run_devices) {
  size_t off = 0;
  EINVAL("plan", clt_allgather_run_devices(NULL, 1, &queue, &buf, &off));
  EINVAL("queues", clt_allgather_run_devices(ag, 1, NULL, &buf, &off));
  EINVAL("bufs", clt_allgather_run_devices(ag, 1, &queue, NULL, &off));
}
CASE(clt_bcast_devices) {
  size_t off = 0;
  EINVAL("comm", clt_bcast_devices(NULL, 0, 16, 1, &queue, &buf, &off));
  EINVAL("queues", clt_bcast_devices(comm, 0, 16, 1, NULL, &buf, &off));
  EINVAL("bufs", clt_bcast_devices(comm, 0, 16, 1, &queue, NULL, &off));
}
CASE(clt_comm_create_f) { EINVAL("out", clt_comm_create_f(0, NULL)); }
#if CLT_HAVE_MPI
CASE(clt_comm_create) { EINVAL("out", clt_comm_create(MPI_COMM_WORLD, NULL)); }
#else
CASE(clt_comm_create) {} /* declared, in a build without MPI, but not built */
#endif

/* ---- data ---------------------------------------------------------------- */

CASE(clt_dataset_open_idx) {
  clt_dataset *d;
  EINVAL("dir", clt_dataset_open_idx(NULL, "train", &d));
  EINVAL("dir", clt_dataset_open_idx("", "train", &d));
  EINVAL("split", clt_dataset_open_idx(dir, NULL, &d));
  EINVAL("out", clt_dataset_open_idx(dir, "train", NULL));
}
CASE(clt_dataset_open_idx_files) {
  clt_dataset *d;
  EINVAL("images", clt_dataset_open_idx_files(NULL, raw_path, 0, &d));
  EINVAL("labels", clt_dataset_open_idx_files(raw_path, NULL, 0, &d));
  EINVAL("out", clt_dataset_open_idx_files(raw_path, raw_path, 0, NULL));
}
CASE(clt_dataset_open_raw) {
  clt_dataset *d;
  EINVAL("path", clt_dataset_open_raw(NULL, &d));
  EINVAL("out", clt_dataset_open_raw(raw_path, NULL));
}
CASE(clt_dataset_write_raw) {
  EINVAL("path", clt_dataset_write_raw(NULL, 1, 1, dims4, 3, host, labels));
  EINVAL("dims", clt_dataset_write_raw(raw_path, 1, 1, NULL, 3, host, labels));
  EINVAL("x", clt_dataset_write_raw(raw_path, 1, 1, dims4, 3, NULL, labels));
  EINVAL("y", clt_dataset_write_raw(raw_path, 1, 1, dims4, 3, host, NULL));
}
CASE(clt_dataset_open_tokens) {
  clt_dataset *d;
  const char *none[1] = {NULL};
  EINVAL("paths", clt_dataset_open_tokens(NULL, 1, 4, 0, &d));
  EINVAL("paths[0]", clt_dataset_open_tokens(none, 1, 4, 0, &d));
  EINVAL("out", clt_dataset_open_tokens(none, 1, 4, 0, NULL));
}
CASE(clt_tokens_write) {
  uint32_t tok[4] = {1, 2, 3, 4};
  EINVAL("path", clt_tokens_write(NULL, tok, 4, 0));
  EINVAL("tokens", clt_tokens_write(raw_path, NULL, 4, 0));
}
CASE(clt_dataset_destroy) { clt_dataset_destroy(NULL); }
CASE(clt_dataset_count) { EXPECT(clt_dataset_count(NULL) == 0); }
CASE(clt_dataset_num_classes) { EXPECT(clt_dataset_num_classes(NULL) == 0); }
CASE(clt_dataset_sample_shape) {
  int64_t d[8];
  EXPECT(clt_dataset_sample_shape(NULL, d) == 0);
}
CASE(clt_dataset_sample_size) { EXPECT(clt_dataset_sample_size(NULL) == 0); }
CASE(clt_dataset_labels_per_sample) { EXPECT(clt_dataset_labels_per_sample(NULL) == 0); }
CASE(clt_dataset_path) { EXPECT(strcmp(clt_dataset_path(NULL), "") == 0); }
CASE(clt_dataset_label_count) { EXPECT(clt_dataset_label_count(NULL) == 0); }
CASE(clt_dataset_tokens_targets) {
  const char *one[1] = {raw_path};
  EINVAL("ds", clt_dataset_tokens_targets(NULL, one, 1));
  EINVAL("paths", clt_dataset_tokens_targets(ds, NULL, 1));
}
CASE(clt_tokens_write_targets) {
  int32_t t[4] = {1, -1, 2, 3};
  EINVAL("path", clt_tokens_write_targets(NULL, t, 4));
  EINVAL("path", clt_tokens_write_targets("", t, 4));
  EINVAL("targets", clt_tokens_write_targets(raw_path, NULL, 4));
}

/* ---- text: tokenizers ---------------------------------------------------- */

CASE(clt_tokenizer_load) {
  clt_tokenizer *t;
  EINVAL("path", clt_tokenizer_load(NULL, &t));
  EINVAL("path", clt_tokenizer_load("", &t));
  EINVAL("out", clt_tokenizer_load("tokenizer.json", NULL));
}
CASE(clt_tokenizer_load_json) {
  clt_tokenizer *t;
  EINVAL("json", clt_tokenizer_load_json(NULL, 0, "x", &t));
  EINVAL("out", clt_tokenizer_load_json("{}", 2, "x", NULL));
}
CASE(clt_tokenizer_destroy) { clt_tokenizer_destroy(NULL); }
CASE(clt_tokenizer_vocab_size) { EXPECT(clt_tokenizer_vocab_size(NULL) == 0); }
CASE(clt_tokenizer_path) { EXPECT(strcmp(clt_tokenizer_path(NULL), "") == 0); }
CASE(clt_tokenizer_encode) {
  uint32_t *ids;
  int64_t n;
  EINVAL("tok", clt_tokenizer_encode(NULL, "a", 1, 0, &ids, &n));
  EINVAL("ids", clt_tokenizer_encode(NULL, "a", 1, 0, NULL, &n));
  EINVAL("n", clt_tokenizer_encode(NULL, "a", 1, 0, &ids, NULL));
}
CASE(clt_tokenizer_decode) {
  uint32_t ids[1] = {0};
  char *text;
  EINVAL("tok", clt_tokenizer_decode(NULL, ids, 1, 0, &text, NULL));
  EINVAL("text", clt_tokenizer_decode(NULL, ids, 1, 0, NULL, NULL));
}
CASE(clt_tokenizer_token_to_id) {
  uint32_t id;
  EINVAL("tok", clt_tokenizer_token_to_id(NULL, "a", 1, &id));
}
CASE(clt_tokenizer_id_to_token) { EXPECT(clt_tokenizer_id_to_token(NULL, 0, NULL) == NULL); }
CASE(clt_tokenizer_is_special) { EXPECT(clt_tokenizer_is_special(NULL, 0) == 0); }
CASE(clt_tokenizer_bos) { EINVAL("tok", clt_tokenizer_bos(NULL, NULL, NULL)); }
CASE(clt_tokenizer_eos) { EINVAL("tok", clt_tokenizer_eos(NULL, NULL, NULL)); }
CASE(clt_dataset_normalize) { EINVAL("ds", clt_dataset_normalize(NULL, 0, 1)); }
CASE(clt_dataset_get_normalization) {
  float m = 5, s = 5;
  clt_dataset_get_normalization(NULL, &m, &s);
  EXPECT(m == 0 && s == 1);
  clt_dataset_get_normalization(ds, NULL, NULL);
}
CASE(clt_dataset_stats) {
  float m, s;
  EINVAL("ds", clt_dataset_stats(NULL, &m, &s));
  EINVAL("mean", clt_dataset_stats(ds, NULL, &s));
  EINVAL("std", clt_dataset_stats(ds, &m, NULL));
}
CASE(clt_dataset_get_batch) {
  EINVAL("ds", clt_dataset_get_batch(NULL, idx, 1, host, labels));
  EINVAL("indices", clt_dataset_get_batch(ds, NULL, 1, host, labels));
}
CASE(clt_dataset_open) {
  clt_dataset *d;
  EINVAL("path", clt_dataset_open(NULL, NULL, &d));
  EINVAL("out", clt_dataset_open(raw_path, NULL, NULL));
}
CASE(clt_dataset_split) {
  clt_dataset *v;
  EINVAL("ds", clt_dataset_split(NULL, 0.5, &v));
  EINVAL("val", clt_dataset_split(ds, 0.5, NULL));
}
CASE(clt_dataset_targets_per_sample) { EXPECT(clt_dataset_targets_per_sample(NULL) == 0); }
CASE(clt_dataset_get_batch_targets) {
  EINVAL("ds", clt_dataset_get_batch_targets(NULL, idx, 1, host, NULL));
  EINVAL("indices", clt_dataset_get_batch_targets(ds, NULL, 1, host, NULL));
}
CASE(clt_normalize_name) { EXPECT(clt_normalize_name((clt_normalize_kind)42) == NULL); }
CASE(clt_normalize_parse) {
  clt_normalize_kind k;
  EINVAL("name", clt_normalize_parse(NULL, &k));
  EINVAL("kind", clt_normalize_parse("none", NULL));
}
CASE(clt_dataset_feature_stats) {
  double o[64];
  EINVAL("ds", clt_dataset_feature_stats(NULL, 0, 1, o));
  EINVAL("out", clt_dataset_feature_stats(ds, 0, 1, NULL));
}
CASE(clt_dataset_normalize_features) {
  EINVAL("ds", clt_dataset_normalize_features(NULL, CLT_NORMALIZE_NONE, NULL, NULL));
  EINVAL("shift", clt_dataset_normalize_features(ds, CLT_NORMALIZE_STANDARD, NULL, host));
}
CASE(clt_dataset_feature_normalization) {
  EXPECT(clt_dataset_feature_normalization(NULL, NULL, NULL) == CLT_NORMALIZE_NONE);
}
CASE(clt_sampler_create) {
  clt_sampler *s;
  EINVAL("out", clt_sampler_create(8, 4, 1, 0, NULL));
  EINVAL("flags", clt_sampler_create(8, 4, 1, 0x100, &s));
}
CASE(clt_sampler_clone) {
  clt_sampler *s;
  EINVAL("s", clt_sampler_clone(NULL, &s));
  EINVAL("out", clt_sampler_clone(smp, NULL));
}
CASE(clt_sampler_destroy) { clt_sampler_destroy(NULL); }
CASE(clt_sampler_set_shares) { EINVAL("s", clt_sampler_set_shares(NULL, 1, NULL)); }
CASE(clt_sampler_replicas) { EXPECT(clt_sampler_replicas(NULL) == 0); }
CASE(clt_sampler_share) { EXPECT(clt_sampler_share(NULL, 0) == 0); }
CASE(clt_sampler_count) { EXPECT(clt_sampler_count(NULL) == 0); }
CASE(clt_sampler_global_batch) { EXPECT(clt_sampler_global_batch(NULL) == 0); }
CASE(clt_sampler_steps_per_epoch) { EXPECT(clt_sampler_steps_per_epoch(NULL) == 0); }
CASE(clt_sampler_batch_size) { EXPECT(clt_sampler_batch_size(NULL, 0) == 0); }
CASE(clt_sampler_slice) {
  int64_t ind[8], n;
  EINVAL("s", clt_sampler_slice(NULL, 0, 0, 0, ind, &n));
  EINVAL("indices", clt_sampler_slice(smp, 0, 0, 0, NULL, &n));
  EINVAL("n", clt_sampler_slice(smp, 0, 0, 0, ind, NULL));
}
CASE(clt_sampler_next) {
  clt_sampler_pos pos = {7, 7};
  clt_sampler_next(NULL, &pos);
  EXPECT(pos.epoch == 7 && pos.step == 7);
  clt_sampler_next(smp, NULL);
}
CASE(clt_sampler_get_position) {
  clt_sampler_pos pos = {7, 7};
  clt_sampler_get_position(NULL, &pos);
  EXPECT(pos.epoch == 7 && pos.step == 7);
  clt_sampler_get_position(smp, NULL);
}
CASE(clt_sampler_set_position) {
  clt_sampler_pos pos = {0, 0};
  EINVAL("s", clt_sampler_set_position(NULL, pos));
}
CASE(clt_shares_from_weights) {
  double w[1] = {1};
  int64_t sh[1];
  EINVAL("weights", clt_shares_from_weights(1, NULL, 4, 0, sh));
  EINVAL("shares", clt_shares_from_weights(1, w, 4, 0, NULL));
}
CASE(clt_prefetcher_create) {
  clt_prefetcher *p;
  EINVAL("ds", clt_prefetcher_create(NULL, smp, 0, NULL, &p));
  EINVAL("s", clt_prefetcher_create(ds, NULL, 0, NULL, &p));
  EINVAL("out", clt_prefetcher_create(ds, smp, 0, NULL, NULL));
}
CASE(clt_prefetcher_next) {
  clt_batch b;
  EINVAL("pf", clt_prefetcher_next(NULL, &b));
  EINVAL("batch", clt_prefetcher_next(pf, NULL));
}
CASE(clt_prefetcher_position) {
  clt_sampler_pos pos = {7, 7};
  clt_prefetcher_position(NULL, &pos);
  EXPECT(pos.epoch == 7 && pos.step == 7);
  clt_prefetcher_position(pf, NULL);
}
CASE(clt_prefetcher_seek) {
  clt_sampler_pos pos = {0, 0};
  EINVAL("pf", clt_prefetcher_seek(NULL, pos));
}
CASE(clt_prefetcher_set_shares) { EINVAL("pf", clt_prefetcher_set_shares(NULL, 1, NULL)); }
CASE(clt_prefetcher_destroy) { clt_prefetcher_destroy(NULL); }

/* ---- models, Hugging Face, optimizers, schedules ------------------------- */

CASE(clt_model_load) {
  clt_model *m;
  EINVAL("path", clt_model_load(NULL, &m));
  EINVAL("path", clt_model_load("", &m));
  EINVAL("out", clt_model_load(spec_path, NULL));
}
CASE(clt_model_parse) {
  clt_model *m = NULL;
  EINVAL("text", clt_model_parse(NULL, "x.model", &m));
  EINVAL("out", clt_model_parse("input 4\nlinear 3\n", "x.model", NULL));
  EXPECT(clt_model_parse("input 4\nlinear 3\n", NULL, &m) == CLT_OK); /* name may be NULL */
  clt_model_destroy(m);
}
CASE(clt_model_destroy) { clt_model_destroy(NULL); }
CASE(clt_model_layer_count) { EXPECT(clt_model_layer_count(NULL) == 0); }
CASE(clt_model_param_count) { EXPECT(clt_model_param_count(NULL) == 0); }
CASE(clt_model_input_size) { EXPECT(clt_model_input_size(NULL) == 0); }
CASE(clt_model_num_classes) { EXPECT(clt_model_num_classes(NULL) == 0); }
CASE(clt_model_vocab) { EXPECT(clt_model_vocab(NULL) == 0); }
CASE(clt_model_labels_per_sample) { EXPECT(clt_model_labels_per_sample(NULL) == 0); }
CASE(clt_model_loss) { EXPECT((int)clt_model_loss(NULL) == -1); }
CASE(clt_model_huber_delta) { EXPECT(isnan(clt_model_huber_delta(NULL))); }
CASE(clt_loss_name) { EXPECT(clt_loss_name((clt_loss_kind)42) == NULL); }
CASE(clt_model_text) { EXPECT(strcmp(clt_model_text(NULL), "") == 0); }
CASE(clt_model_summary) {
  char *s;
  EINVAL("m", clt_model_summary(NULL, &s));
  EINVAL("out", clt_model_summary(model, NULL));
}
CASE(clt_hf_gpt2_import) {
  EINVAL("dir", clt_hf_gpt2_import(NULL, 0, raw_path, raw_path));
  EINVAL("model_path", clt_hf_gpt2_import(dir, 0, NULL, raw_path));
  EINVAL("weights_path", clt_hf_gpt2_import(dir, 0, raw_path, NULL));
}
CASE(clt_hf_gpt2_export) {
  EINVAL("model_path", clt_hf_gpt2_export(NULL, raw_path, dir));
  EINVAL("weights_path", clt_hf_gpt2_export(spec_path, NULL, dir));
  EINVAL("dir", clt_hf_gpt2_export(spec_path, raw_path, NULL));
}
CASE(clt_hf_import) {
  EINVAL("dir", clt_hf_import(NULL, 0, raw_path, raw_path));
  EINVAL("model_path", clt_hf_import(dir, 0, NULL, raw_path));
  EINVAL("weights_path", clt_hf_import(dir, 0, raw_path, NULL));
}
CASE(clt_hf_export_options_defaults) { clt_hf_export_options_defaults(NULL); }
CASE(clt_hf_export) {
  EINVAL("model_path", clt_hf_export(NULL, raw_path, dir, NULL));
  EINVAL("weights_path", clt_hf_export(spec_path, NULL, dir, NULL));
  EINVAL("dir", clt_hf_export(spec_path, raw_path, NULL, NULL));
}
CASE(clt_optimizer_defaults) {
  clt_optimizer_config c;
  clt_optimizer_defaults(CLT_OPT_SGD, NULL);
  clt_optimizer_defaults((clt_optimizer_kind)42, &c);
  EXPECT(c.kind == (clt_optimizer_kind)42 && c.momentum == 0);
}
CASE(clt_optimizer_parse) {
  clt_optimizer_kind k;
  EINVAL("text", clt_optimizer_parse(NULL, &k));
  EINVAL("out", clt_optimizer_parse("sgd", NULL));
}
CASE(clt_optimizer_name) { EXPECT(strcmp(clt_optimizer_name((clt_optimizer_kind)42), "?") == 0); }
CASE(clt_optimizer_state_per_param) { EXPECT(clt_optimizer_state_per_param(NULL) == 0); }
CASE(clt_optimizer_decoupled_decay) { EXPECT(clt_optimizer_decoupled_decay((clt_optimizer_kind)42) == 0); }
CASE(clt_optimizer_reads) {
  EINVAL("setting", clt_optimizer_reads(CLT_OPT_ADAMW, NULL));
  EXPECT(clt_optimizer_reads(CLT_OPT_ADAMW, "beta2") == 1);
}
CASE(clt_optimizer_step_host) {
  float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, s[4] = {0};
  clt_optimizer_step_host(NULL, 1, 0.1f, 1, p, g, s, 4);
  clt_optimizer_step_host(&sgd, 1, 0.1f, 1, NULL, g, s, 4);
  clt_optimizer_step_host(&sgd, 1, 0.1f, 1, p, NULL, s, 4);
  clt_optimizer_step_host(&sgd, 1, 0.1f, 1, p, g, NULL, 4);
  EXPECT(p[0] == 1 && p[3] == 4); /* nothing was done */
}
CASE(clt_optimizer_step_host_masked) {
  float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1};
  clt_optimizer_step_host_masked(NULL, 1, 0.1f, 1, p, g, NULL, 4, NULL);
  clt_optimizer_step_host_masked(&sgd, 1, 0.1f, 1, p, g, NULL, 4, NULL);
  EXPECT(p[0] == 1 && p[3] == 4);
}
CASE(clt_optimizer_needs_host) {
  EXPECT(clt_optimizer_needs_host(NULL, clt_devices_info(devs, 0)) == 0);
  EXPECT(clt_optimizer_needs_host(&sgd, NULL) == 0);
}
CASE(clt_schedule_parse) {
  clt_schedule_kind k;
  EINVAL("text", clt_schedule_parse(NULL, &k));
  EINVAL("out", clt_schedule_parse("constant", NULL));
}
CASE(clt_schedule_name) { EXPECT(strcmp(clt_schedule_name((clt_schedule_kind)42), "?") == 0); }
CASE(clt_schedule_lr) { EXPECT(isnan(clt_schedule_lr(NULL, 0))); }

/* ---- training ------------------------------------------------------------ */

CASE(clt_train_options_defaults) { clt_train_options_defaults(NULL); }
CASE(clt_model_replica_memory) {
  EINVAL("m", clt_model_replica_memory(NULL, NULL, &mem));
  EINVAL("out", clt_model_replica_memory(model, NULL, NULL));
}
CASE(clt_model_replica_memory_ranks) {
  EINVAL("m", clt_model_replica_memory_ranks(NULL, NULL, 1, &mem, NULL));
  EINVAL("out", clt_model_replica_memory_ranks(model, NULL, 1, NULL, NULL));
}
CASE(clt_replica_memory_check) {
  EINVAL("need", clt_replica_memory_check(NULL, clt_devices_info(devs, 0)));
  EINVAL("d", clt_replica_memory_check(&mem, NULL));
}
CASE(clt_trainer_create) {
  clt_trainer *t;
  EINVAL("m", clt_trainer_create(NULL, one, NULL, &opts, &t));
  EINVAL("devs", clt_trainer_create(model, NULL, NULL, &opts, &t));
  EINVAL("o", clt_trainer_create(model, one, NULL, NULL, &t));
  EINVAL("out", clt_trainer_create(model, one, NULL, &opts, NULL));
}
CASE(clt_trainer_destroy) { clt_trainer_destroy(NULL); }
CASE(clt_trainer_fit) {
  EINVAL("t", clt_trainer_fit(NULL, ds, NULL));
  EINVAL("train", clt_trainer_fit(tr, NULL, NULL));
}
CASE(clt_trainer_set_normalization) {
  EINVAL("t", clt_trainer_set_normalization(NULL, CLT_NORMALIZE_NONE, NULL, NULL));
  EINVAL("shift", clt_trainer_set_normalization(tr, CLT_NORMALIZE_STANDARD, NULL, host));
}
CASE(clt_weights_normalization) {
  clt_normalize_kind k;
  int64_t n;
  EINVAL("path", clt_weights_normalization(NULL, &k, NULL, NULL, 0, &n));
  EINVAL("kind", clt_weights_normalization(raw_path, NULL, NULL, NULL, 0, &n));
  EINVAL("n", clt_weights_normalization(raw_path, &k, NULL, NULL, 0, NULL));
}
CASE(clt_trainer_step) {
  EINVAL("t", clt_trainer_step(NULL, host, labels, 1, NULL));
  EINVAL("x", clt_trainer_step(tr, NULL, labels, 1, NULL));
  EINVAL("y", clt_trainer_step(tr, host, NULL, 1, NULL));
}
CASE(clt_trainer_step_targets) {
  EINVAL("t", clt_trainer_step_targets(NULL, host, host, 1, 3, NULL));
  EINVAL("x", clt_trainer_step_targets(tr, NULL, host, 1, 3, NULL));
}
CASE(clt_trainer_evaluate) {
  double l, a;
  EINVAL("t", clt_trainer_evaluate(NULL, ds, &l, &a));
  EINVAL("ds", clt_trainer_evaluate(tr, NULL, &l, &a));
  EINVAL("loss", clt_trainer_evaluate(tr, ds, NULL, &a));
  EINVAL("accuracy", clt_trainer_evaluate(tr, ds, &l, NULL));
}
CASE(clt_trainer_forward) {
  float out[3];
  EINVAL("t", clt_trainer_forward(NULL, host, NULL, 1, out, 3, NULL));
  EINVAL("x", clt_trainer_forward(tr, NULL, NULL, 1, out, 3, NULL));
  EINVAL("out", clt_trainer_forward(tr, host, NULL, 1, NULL, 3, NULL));
}
CASE(clt_trainer_forward_targets) {
  float out[3];
  EINVAL("t", clt_trainer_forward_targets(NULL, host, NULL, 1, out, 3, NULL, NULL));
  EINVAL("x", clt_trainer_forward_targets(tr, NULL, NULL, 1, out, 3, NULL, NULL));
  EINVAL("out", clt_trainer_forward_targets(tr, host, NULL, 1, NULL, 3, NULL, NULL));
}
CASE(clt_trainer_gradient) {
  float g[P_COUNT];
  EINVAL("t", clt_trainer_gradient(NULL, host, labels, 1, g, P_COUNT, NULL));
  EINVAL("x", clt_trainer_gradient(tr, NULL, labels, 1, g, P_COUNT, NULL));
  EINVAL("y", clt_trainer_gradient(tr, host, NULL, 1, g, P_COUNT, NULL));
  EINVAL("grad", clt_trainer_gradient(tr, host, labels, 1, NULL, P_COUNT, NULL));
}
CASE(clt_trainer_gradient_targets) {
  float g[P_COUNT];
  EINVAL("t", clt_trainer_gradient_targets(NULL, host, host, 1, g, P_COUNT, NULL));
  EINVAL("x", clt_trainer_gradient_targets(tr, NULL, host, 1, g, P_COUNT, NULL));
  EINVAL("targets", clt_trainer_gradient_targets(tr, host, NULL, 1, g, P_COUNT, NULL));
  EINVAL("grad", clt_trainer_gradient_targets(tr, host, host, 1, NULL, P_COUNT, NULL));
}
CASE(clt_trainer_params) {
  EINVAL("t", clt_trainer_params(NULL, host, P_COUNT));
  EINVAL("out", clt_trainer_params(tr, NULL, P_COUNT));
}
CASE(clt_trainer_steps_done) { EXPECT(clt_trainer_steps_done(NULL) == 0); }
CASE(clt_trainer_replicas) { EXPECT(clt_trainer_replicas(NULL) == 0); }
CASE(clt_trainer_stages) {
  int lines[4];
  EXPECT(clt_trainer_stages(NULL, lines, 3) == 0);
  EXPECT(clt_trainer_stages(tr, NULL, 0) == 1);
}
CASE(clt_trainer_save_weights) {
  EINVAL("t", clt_trainer_save_weights(NULL, raw_path));
  EINVAL("path", clt_trainer_save_weights(tr, NULL));
  EINVAL("path", clt_trainer_save_weights(tr, ""));
}
CASE(clt_trainer_load_weights) {
  EINVAL("t", clt_trainer_load_weights(NULL, raw_path));
  EINVAL("path", clt_trainer_load_weights(tr, NULL));
  EINVAL("path", clt_trainer_load_weights(tr, ""));
}
CASE(clt_trainer_save_checkpoint) {
  EINVAL("t", clt_trainer_save_checkpoint(NULL, raw_path));
  EINVAL("path", clt_trainer_save_checkpoint(tr, NULL));
  EINVAL("path", clt_trainer_save_checkpoint(tr, ""));
}
CASE(clt_trainer_load_checkpoint) {
  EINVAL("t", clt_trainer_load_checkpoint(NULL, raw_path));
  EINVAL("path", clt_trainer_load_checkpoint(tr, NULL));
  EINVAL("path", clt_trainer_load_checkpoint(tr, ""));
}
CASE(clt_trainer_resume_latest) {
  EINVAL("t", clt_trainer_resume_latest(NULL, dir, NULL, 0));
  EINVAL("dir", clt_trainer_resume_latest(tr, NULL, NULL, 0));
  EINVAL("dir", clt_trainer_resume_latest(tr, "", NULL, 0));
}
CASE(clt_trainer_trace_start) { EINVAL("t", clt_trainer_trace_start(NULL)); }
CASE(clt_trainer_trace_save) {
  EINVAL("t", clt_trainer_trace_save(NULL, raw_path));
  EINVAL("path", clt_trainer_trace_save(tr, NULL));
}
CASE(clt_check_output) {
  EINVAL("path", clt_check_output(NULL, CLT_OUTPUT_FILE));
  EINVAL("kind", clt_check_output(raw_path, (clt_output_kind)42));
}
CASE(clt_checkpoint_path) {
  char out[256];
  EINVAL("dir", clt_checkpoint_path(NULL, 0, out, sizeof out));
  EINVAL("out", clt_checkpoint_path(dir, 0, NULL, sizeof out));
}
CASE(clt_checkpoint_export) {
  EINVAL("checkpoint", clt_checkpoint_export(NULL, raw_path));
  EINVAL("out", clt_checkpoint_export(raw_path, NULL));
}
CASE(clt_trainer_position) {
  clt_sampler_pos pos = {7, 7};
  clt_trainer_position(NULL, &pos);
  EXPECT(pos.epoch == 7 && pos.step == 7);
  clt_trainer_position(tr, NULL);
}
CASE(clt_trainer_step_buffers) {
  EINVAL("t", clt_trainer_step_buffers(NULL, queue, buf, buf, 1, NULL));
  EINVAL("queue", clt_trainer_step_buffers(tr, NULL, buf, buf, 1, NULL));
  EINVAL("x", clt_trainer_step_buffers(tr, queue, NULL, buf, 1, NULL));
  EINVAL("y", clt_trainer_step_buffers(tr, queue, buf, NULL, 1, NULL));
}

/* ---- the headers' list ------------------------------------------------- */

/* Append the function names of every CLT_API prototype in path to names. */
static int read_header(const char *path, char names[][64], int *n, int cap) {
  FILE *f = fopen(path, "r");
  if (!f) {
    printf("FAIL: cannot read %s\n", path);
    return -1;
  }
  static char text[1 << 18], code[1 << 18];
  size_t len = fread(text, 1, sizeof text - 1, f), k = 0;
  fclose(f);
  text[len] = 0;
  /* Comments and preprocessor lines out (CLT_API's own #define among them). */
  for (size_t i = 0; i < len;) {
    if (text[i] == '/' && text[i + 1] == '*') {
      char *end = strstr(text + i + 2, "*/");
      i = end ? (size_t)(end - text) + 2 : len;
    } else if (text[i] == '/' && text[i + 1] == '/') {
      while (i < len && text[i] != '\n') i++;
    } else if (text[i] == '#' && (i == 0 || text[i - 1] == '\n')) {
      while (i < len && !(text[i] == '\n' && text[i - 1] != '\\')) i++;
    } else {
      code[k++] = text[i++];
    }
  }
  code[k] = 0;
  for (char *p = code; (p = strstr(p, "CLT_API")); p += 7) {
    char *paren = strchr(p, '('), *end = paren;
    if (!paren) break;
    while (end > p && isspace((unsigned char)end[-1])) end--;
    char *start = end;
    while (start > p && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) start--;
    if (end - start < 1 || end - start >= 64 || *n >= cap) continue;
    memcpy(names[*n], start, (size_t)(end - start));
    names[(*n)++][end - start] = 0;
  }
  return 0;
}

/* Every public function has a case, and every case a public function. */
static int check_list(void) {
  static char names[600][64];
  int n = 0, bad = 0;
  char path[512];
  snprintf(path, sizeof path, "%s/include/cltrain.h", SRCDIR);
  if (read_header(path, names, &n, 600) < 0) return 1;
  snprintf(path, sizeof path, "%s/include/cltrain", SRCDIR);
  DIR *d = opendir(path);
  if (!d) {
    printf("FAIL: cannot list %s\n", path);
    return 1;
  }
  for (struct dirent *e; (e = readdir(d));) {
    size_t l = strlen(e->d_name);
    if (l < 3 || strcmp(e->d_name + l - 2, ".h") != 0) continue;
    snprintf(path, sizeof path, "%s/include/cltrain/%s", SRCDIR, e->d_name);
    if (read_header(path, names, &n, 600) < 0) bad = 1;
  }
  closedir(d);
  for (int i = 0; i < n; i++) {
    int found = 0;
    for (int c = 0; c < ncases && !found; c++) found = strcmp(names[i], cases[c].name) == 0;
    if (!found) printf("FAIL: %s is public (a CLT_API prototype) but has no CASE here\n", names[i]), bad = 1;
  }
  for (int c = 0; c < ncases; c++) {
    int found = 0;
    for (int i = 0; i < n && !found; i++) found = strcmp(names[i], cases[c].name) == 0;
    if (!found) printf("FAIL: CASE(%s) names no public function of the headers\n", cases[c].name), bad = 1;
  }
  if (n < 150) printf("FAIL: only %d public functions read from the headers\n", n), bad = 1;
  printf("%s: %d public functions in the headers, %d cases\n", bad ? "FAIL" : "ok", n, ncases);
  return bad;
}

/* Run each case in a child of its own: a crash or hang fails it alone. */
static int run_cases(void) {
  int bad = 0;
  fflush(stdout);
  for (int c = 0; c < ncases; c++) {
    fflush(stdout); /* or the child writes the parent's buffer again */
    pid_t pid = fork();
    if (pid == 0) {
      current = cases[c].name;
      alarm(30);
      clt_clear_error();
      cases[c].run();
      fflush(stdout);
      _exit(failures ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st)) {
      printf("FAIL: %s: killed by signal %d (%s)\n", cases[c].name, WTERMSIG(st),
             WTERMSIG(st) == SIGALRM ? "a hang" : strsignal(WTERMSIG(st)));
      bad++;
    } else if (WEXITSTATUS(st) != 0) {
      bad++;
    }
  }
  printf("%s: %d of %d functions with NULL arguments\n", bad ? "FAIL" : "ok", ncases - bad, ncases);
  return bad > 0;
}

/* ---- the options' counts and kinds (item 9), the switches ----------------- */

static clt_trainer *made;

/* clt_trainer_create with o must be CLT_EINVAL naming field and value. */
static int refused(const char *what, const clt_train_options *o, const char *field, const char *value) {
  clt_clear_error();
  int rc = clt_trainer_create(model, one, NULL, o, &made);
  const char *msg = clt_last_error();
  if (rc == CLT_EINVAL && strstr(msg, field) && strstr(msg, value)) {
    printf("ok: %s: %s\n", what, msg);
    return 0;
  }
  printf("FAIL: %s: %s (%s), wanted CLT_EINVAL naming %s and %s\n", what, clt_status_name(rc), msg, field, value);
  clt_trainer_destroy(made);
  made = NULL;
  return 1;
}

static int check_options(void) {
  int bad = 0;
  clt_train_options o;
#define BAD(field, value, text)                                                 \
  o = opts;                                                                     \
  o.field = value;                                                              \
  bad |= refused(#field " = " #value, &o, text, #value);
  BAD(optimizer.kind, 42, "kind");
  BAD(balance, 7, "balance");
  BAD(max_steps, -3, "max_steps");
  BAD(schedule.warmup_steps, -3, "warmup_steps");
  BAD(schedule.total_steps, -1, "total_steps");
  BAD(schedule.step_size, -2, "step_size");
  BAD(schedule.kind, 9, "schedule.kind");
  BAD(eval_every, -1, "eval_every");
  BAD(log_every, -5, "log_every");
  BAD(check_every, -100, "check_every");
  BAD(balance_every, -1, "balance_every");
  BAD(balance_nweights, -1, "balance_nweights");
  BAD(checkpoint_every, -1, "checkpoint_every");
  BAD(checkpoint_keep, -1, "checkpoint_keep");
  BAD(loss_scale_window, -1, "loss_scale_window");
  BAD(max_skips, -1, "max_skips");
  BAD(zero, -1, "zero");
  BAD(pipeline_schedule, 5, "pipeline_schedule");
  BAD(decay_all, 2, "decay_all");
  BAD(drop_last, -1, "drop_last");
  BAD(optimizer.nesterov, 3, "nesterov");
  BAD(recompute, 2, "recompute");
#undef BAD
  /* item 11: weights that are not there, with a count that is */
  o = opts;
  o.balance = CLT_BALANCE_WEIGHTS;
  o.balance_weights = NULL;
  o.balance_nweights = 1;
  bad |= refused("balance_weights NULL with nweights 1", &o, "balance_weights", "NULL");

  /* the on/off switches: junk is refused when a context is made */
  static const struct {
    const char *name, *value;
  } junk[] = {{"CLT_IN_PLACE", "7"}, {"CLT_SHARED_BUFFERS", "maybe"}, {"CLT_COPY_OUT", "no"},
              {"CLT_HOST_BLAS", "off"}, {"CLT_CPU_GEMM", "2"}, {"CLT_BLAS_TUNED", "O"}, {"CLT_HOST_BLAS_NATIVE", "yes"}};
  for (size_t i = 0; i < sizeof junk / sizeof *junk; i++) {
    setenv(junk[i].name, junk[i].value, 1);
    char what[64];
    snprintf(what, sizeof what, "%s=%s", junk[i].name, junk[i].value);
    bad |= refused(what, &opts, junk[i].name, junk[i].value);
    clt_comm *c = NULL;
    int rc = clt_comm_create_local(&c);
    if (rc != CLT_EINVAL || !strstr(clt_last_error(), junk[i].name))
      printf("FAIL: %s: a communicator is made (%s)\n", what, clt_status_name(rc)), bad = 1;
    clt_comm_destroy(c);
    unsetenv(junk[i].name);
  }
  setenv("CLT_IN_PLACE", "0", 1); /* 0 and 1 are switches */
  setenv("CLT_CPU_GEMM", "1", 1);
  clt_context *c = NULL;
  int rc = clt_context_create(one, 0, &c);
  if (rc != CLT_OK) printf("FAIL: CLT_IN_PLACE=0 CLT_CPU_GEMM=1: %s\n", clt_last_error()), bad = 1;
  clt_context_destroy(c);
  unsetenv("CLT_IN_PLACE");
  unsetenv("CLT_CPU_GEMM");
  return bad;
}

/* item 11's messages that the C API gives: fit without a training set. */
static int check_messages(void) {
  int rc = clt_trainer_fit(tr, NULL, NULL);
  const char *msg = clt_last_error();
  if (rc == CLT_EINVAL && strstr(msg, "train is NULL") && !strstr(msg, "samples of 0 values")) {
    printf("ok: clt_trainer_fit(t, NULL, NULL): %s\n", msg);
    return 0;
  }
  printf("FAIL: clt_trainer_fit(t, NULL, NULL): %s: %s\n", clt_status_name(rc), msg);
  return 1;
}

/* ---- setup ------------------------------------------------------------- */

static int setup(void) {
  int rc = clt_devices_discover(&devs);
  if (rc == CLT_ENOICD || (rc == CLT_OK && clt_devices_count(devs) == 0)) {
    printf("SKIP: no OpenCL device (%s)\n", clt_last_error());
    exit(77);
  }
#define TRY(call)                                                               \
  if ((rc = (call)) < 0) {                                                      \
    printf("FAIL: setup: %s: %s\n", #call, clt_last_error());                   \
    return 1;                                                                   \
  }
  TRY(clt_devices_select(devs, "0", &one));
  TRY(clt_context_create(one, 0, &ctx));
  TRY(clt_comm_create_local(&comm));
  TRY(clt_model_parse("input 4\nlinear 3\n", "args.model", &model));
  clt_train_options_defaults(&opts);
  opts.batch = 4;
  opts.epochs = 1;
  TRY(clt_trainer_create(model, one, NULL, &opts, &tr));
  snprintf(dir, sizeof dir, "/tmp/clt_api_args.XXXXXX");
  if (!mkdtemp(dir)) return printf("FAIL: setup: mkdtemp\n"), 1;
  snprintf(raw_path, sizeof raw_path, "%s/d.raw", dir);
  snprintf(spec_path, sizeof spec_path, "%s/m.model", dir);
  FILE *f = fopen(spec_path, "w");
  if (f) fputs("input 4\nlinear 3\n", f), fclose(f);
  for (int i = 0; i < 64; i++) host[i] = (float)(i % 7) / 7;
  for (int i = 0; i < 8; i++) labels[i] = i % 3;
  TRY(clt_dataset_write_raw(raw_path, 8, 1, dims4, 3, host, labels));
  TRY(clt_dataset_open_raw(raw_path, &ds));
  TRY(clt_sampler_create(8, 4, 1, 0, &smp));
  TRY(clt_prefetcher_create(ds, smp, 0, NULL, &pf));
  TRY(clt_allreduce_plan_create(comm, 16, CLT_F32, CLT_SUM, NULL, &ar));
  TRY(clt_reduce_scatter_plan_create(comm, 16, NULL, CLT_F32, CLT_SUM, NULL, &rs));
  TRY(clt_allgather_plan_create(comm, 16, NULL, CLT_F32, NULL, &ag));
  TRY(clt_buffer_create(ctx, 64 * sizeof(float), &buf));
  int64_t shape[1] = {16};
  TRY(clt_tensor_view(buf, 0, CLT_F32, 1, shape, &tv));
  TRY(clt_pinned_create(ctx, 64, &pin));
  TRY(clt_context_kernel(ctx, "elementwise", "fill_f32", NULL, &kernel));
  queue = clt_context_queue(ctx);
  clt_optimizer_defaults(CLT_OPT_SGD, &sgd); /* momentum 0.9: one float of state per parameter */
  TRY(clt_model_replica_memory(model, NULL, &mem));
#undef TRY
  return 0;
}

int main(void) {
  int bad = check_list();
  int rc = setup();
  if (rc) return rc;
  bad |= run_cases();
  bad |= check_options();
  bad |= check_messages();
  clt_trainer_destroy(made);
  clt_trainer_destroy(tr);
  clt_prefetcher_destroy(pf);
  clt_sampler_destroy(smp);
  clt_dataset_destroy(ds);
  clt_allreduce_plan_destroy(ar);
  clt_reduce_scatter_plan_destroy(rs);
  clt_allgather_plan_destroy(ag);
  clt_pinned_destroy(pin);
  clt_buffer_release(buf);
  clt_context_destroy(ctx);
  clt_comm_destroy(comm);
  clt_model_destroy(model);
  clt_devices_destroy(one);
  clt_devices_destroy(devs);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  return bad ? 1 : 0;
}
