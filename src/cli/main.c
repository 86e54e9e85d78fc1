/*
 * main.c: the cltrain tool's entry point: dispatch to a command.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *to) {
  char algorithms[512], text[256];
  snprintf(text, sizeof text, "all-reduce algorithm: %s (auto: the cost model's choice)", clt_allreduce_algorithms());
  fprintf(to,
          "usage: cltrain COMMAND [OPTIONS]\n"
          "\n"
          "Portable multi-vendor GPU training runtime (OpenCL + MPI).\n"
          "\n"
          "commands:\n"
          "  devices      list every OpenCL device (--json for machines)\n"
          "  bench gemm   check GEMM and the elementwise kernels against plain C,\n"
          "               then measure GEMM throughput on each selected device\n"
          "  train        train a model (run under mpirun for several ranks)\n"
          "  eval         loss and accuracy of saved weights on the test set\n"
          "  export       write a checkpoint's weights alone (PyTorch names)\n"
          "  summary      show a model spec's layers, shapes and parameter counts\n"
          "  tokenize     text files to an llm.c token shard (bytes or a tokenizer.json)\n"
          "  hf import    a Hugging Face GPT-2 checkpoint (save_pretrained's directory) as a\n"
          "               cltrain model spec and weights\n"
          "  hf export    a cltrain GPT and its weights as a Hugging Face GPT-2 checkpoint\n"
          "  generate     sample text from a language model\n"
          "  bench allreduce  (under mpirun) time cltrain's all-reduce on host and device\n"
          "               buffers against MPI_Allreduce, checking every result\n"
          "  version      print the version\n"
          "  help         this text; 'cltrain help COMMAND': COMMAND's options\n"
          "\n"
          "'cltrain COMMAND --help' (or 'cltrain help COMMAND') shows a command's options.\n"
          "\n"
          "environment:\n"
          "  CLT_DEVICES      default device spec (all, gpu, cpu, pocl, rusticl:0, 0:1, ...)\n"
          "  CLT_LOG_LEVEL    none|error|warn|info|debug|trace (default warn)\n"
          "  CLT_KERNEL_DIR   load OpenCL kernels from this directory instead of the built-in copies\n"
          "  CLT_TIMEOUT      seconds a collective waits for a peer before failing (default 300)\n"
          "  CLT_ALLREDUCE_CHUNK  bytes per pipelined all-reduce message (default 256K; 1M with 2 ranks)\n"
          "%s"
          "  CLT_NODE_SIZE    pretend nodes: k ranks each, or sizes such as 3,2 (default: shared memory)\n"
          "  CLT_COMM_MODEL   the cost model's file, from 'cltrain bench allreduce --fit FILE'\n"
          "  CLT_HOST_BLAS    0: CPU devices' GEMMs on CLBlast instead of the host BLAS (OpenBLAS)\n"
          "  CLT_HOST_BLAS_NATIVE  0: host GEMMs on the calling thread, never as native kernels\n",
          cli_help_entry(algorithms, sizeof algorithms, "  CLT_ALLREDUCE    ", text, 93));
}

/* This process's place in the job (cli_set_job), for messages. */
static int job_rank = 0, job_size = 1;
/* Set when the failure is in the command line itself, which every rank
 * parses alike and so finds alike (cli_argv_error). */
static int argv_failed = 0;

void cli_set_job(int rank, int size) {
  job_rank = rank;
  job_size = size;
}

void cli_argv_error(void) { argv_failed = 1; }

int cli_fail(int status, const char *what) {
  const char *detail = clt_last_error();
  if (!detail || !*detail) detail = clt_strerror(status);
  /* In a job of several ranks, say which one failed (the library's
   * communication errors name it already). */
  if (job_size > 1 && strncmp(what, "rank ", 5) != 0 && strncmp(detail, "rank ", 5) != 0)
    fprintf(stderr, "cltrain: rank %d: %s: %s\n", job_rank, what, detail);
  else
    fprintf(stderr, "cltrain: %s: %s\n", what, detail);
  switch (status) {
  case CLT_ENOICD:
  case CLT_ENODEV:
  case CLT_ENOMATCH:
    return CLI_EXIT_NODEVICE;
  case CLT_EINVAL:
    return CLI_EXIT_USAGE;
  default:
    return CLI_EXIT_ERROR;
  }
}

int cli_select_devices(const char *spec, clt_devices **all, clt_devices **sel) {
  int rc;
  *sel = NULL;
  if ((rc = clt_devices_discover(all)) < 0) return cli_fail(rc, "device discovery");
  if (clt_devices_count(*all) == 0) {
    fprintf(stderr, "cltrain: no OpenCL device found: the installed platforms list no devices "
                    "(for rusticl set RUSTICL_ENABLE=llvmpipe or your GPU driver's name)\n");
    return CLI_EXIT_NODEVICE;
  }
  if ((rc = clt_devices_select(*all, spec, sel)) < 0) return cli_fail(rc, "--devices");
  return CLI_EXIT_OK;
}

int cli_allreduce_known(const char *name) {
  size_t n = strlen(name);
  /* A whole name of the list: after its start or ", ", before "," or its end. */
  for (const char *at = clt_allreduce_algorithms(); n && (at = strstr(at, name)); at += n)
    if ((at == clt_allreduce_algorithms() || at[-1] == ' ') && (at[n] == ',' || at[n] == 0)) return 1;
  return 0;
}

const char *cli_help_entry(char *buf, size_t size, const char *lead, const char *text, int width) {
  size_t at = 0, indent = strlen(lead), col = indent;
#define PUT(...) (at += (size_t)snprintf(buf + at, at < size ? size - at : 0, __VA_ARGS__))
  PUT("%s", lead);
  for (const char *w = text + strspn(text, " "); *w; w += strspn(w, " ")) {
    size_t n = strcspn(w, " ");
    if (col > indent && col + 1 + n > (size_t)width) col = indent, PUT("\n%*s", (int)indent, "");
    else if (col > indent) col++, PUT(" ");
    PUT("%.*s", (int)n, w);
    col += n;
    w += n;
  }
  PUT("\n");
#undef PUT
  return buf;
}

const char *cli_optimizer_names(int decoupled, const char *sep, const char *last, char *buf, size_t size) {
  int kinds[CLT_OPT_COUNT], n = 0;
  size_t len = 0;
  for (int k = 0; k < CLT_OPT_COUNT; k++)
    if (decoupled < 0 || clt_optimizer_decoupled_decay((clt_optimizer_kind)k) == decoupled) kinds[n++] = k;
  buf[0] = 0;
  for (int i = 0; i < n && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s%s", i == 0 ? "" : i + 1 < n ? sep : last,
                            clt_optimizer_name((clt_optimizer_kind)kinds[i]));
  return buf;
}

const char *cli_optimizers_reading(const char *setting, const char *sep, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  for (int k = 0; k < CLT_OPT_COUNT && len < size; k++)
    if (clt_optimizer_reads((clt_optimizer_kind)k, setting) == 1)
      len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? sep : "", clt_optimizer_name((clt_optimizer_kind)k));
  return buf;
}

const char *cli_betas_defaults(char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  for (int k = 0; k < CLT_OPT_COUNT && len < size; k++) {
    clt_optimizer_config c;
    clt_optimizer_defaults((clt_optimizer_kind)k, &c);
    if (clt_optimizer_reads(c.kind, "beta1") == 1)
      len += (size_t)snprintf(buf + len, size - len, "%s%s %g,%g", len ? "; " : "", clt_optimizer_name(c.kind),
                              (double)c.beta1, (double)c.beta2);
  }
  return buf;
}

const char *cli_optimizer_decays(char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  for (int k = 0; k < CLT_OPT_COUNT && len < size; k++) {
    clt_optimizer_config c;
    clt_optimizer_defaults((clt_optimizer_kind)k, &c);
    if (c.weight_decay != 0)
      len += (size_t)snprintf(buf + len, size - len, "; %s %g", clt_optimizer_name(c.kind), (double)c.weight_decay);
  }
  return buf;
}

/* "1.5 GiB": bytes for messages. */
const char *cli_bytes(double b, char *buf, size_t size) {
  static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, u++;
  snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
  return buf;
}

static int run(int argc, char **argv);

/* `cltrain help COMMAND...`: what `cltrain COMMAND... --help` prints. */
static int help_for(int argc, char **argv) {
  char *args[16];
  if (argc > 14) {
    fprintf(stderr, "cltrain: help: too many words; give a command, such as 'cltrain help train'\n");
    return CLI_EXIT_USAGE;
  }
  args[0] = argv[0];
  for (int i = 2; i < argc; i++) args[i - 1] = argv[i];
  static char help_flag[] = "--help";
  args[argc - 1] = help_flag;
  args[argc] = NULL;
  return run(argc, args);
}

int main(int argc, char **argv) { return run(argc, argv); }

static int run(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "cltrain: no command given\n\n");
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "devices") == 0) return cmd_devices(argc - 1, argv + 1);
  if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
  if (strcmp(cmd, "summary") == 0) return cmd_summary(argc - 1, argv + 1);
  if (strcmp(cmd, "export") == 0) return cmd_export(argc - 1, argv + 1);
  if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc - 1, argv + 1);
  if (strcmp(cmd, "hf") == 0) return cmd_hf(argc - 1, argv + 1);
  if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 1, argv + 1);
  if (strcmp(cmd, "train") == 0 || strcmp(cmd, "eval") == 0) {
    clt_comm *comm = NULL;
    int rc, ec = cli_mpi_init(&argc, &argv);
    if (ec != CLI_EXIT_OK) return ec;
    if ((rc = cli_comm_create(&comm)) < 0) {
      ec = cli_comm_fail(NULL, rc, "making the communicator");
      cli_mpi_finalize();
      return ec;
    }
    cli_set_job(clt_comm_rank(comm), clt_comm_size(comm));
    ec = (strcmp(cmd, "train") == 0 ? cmd_train : cmd_eval)(argc - 1, argv + 1, comm);
    /* With several ranks a failure on one leaves the others waiting in a
     * collective until CLT_TIMEOUT: end the whole job now, whatever the
     * failure (a bad value in one rank's data is a usage error too, and
     * only that rank sees it). Only a bad command line, which every rank
     * parses alike before any MPI work, lets each rank end by itself. */
    if (ec != CLI_EXIT_OK && !argv_failed) cli_abort_job(comm, ec);
    clt_comm_destroy(comm);
    cli_mpi_finalize();
    return ec;
  }
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    if (argc > 2 && strcmp(argv[2], "--help") && strcmp(argv[2], "-h")) {
      fprintf(stderr, "cltrain: %s: takes no %s, not '%s'\n", cmd, argv[2][0] == '-' ? "option" : "argument", argv[2]);
      return CLI_EXIT_USAGE;
    }
    printf("cltrain %s\n", clt_version());
    return CLI_EXIT_OK;
  }
  if (strcmp(cmd, "help") == 0 && argc > 2) return help_for(argc, argv);
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  fprintf(stderr, "cltrain: unknown command '%s'\n\n", cmd);
  usage(stderr);
  return CLI_EXIT_USAGE;
}
