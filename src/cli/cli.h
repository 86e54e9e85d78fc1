/*
 * cli.h: what the cltrain tool's commands share. The tool is a thin shell
 * over the public API: it parses options, calls the library and decides how
 * to die.
 */
#ifndef CLT_CLI_H
#define CLT_CLI_H

#include <cltrain.h>

/* Exit codes of the cltrain tool. */
enum {
  CLI_EXIT_OK = 0,
  CLI_EXIT_ERROR = 1,     /* the operation failed */
  CLI_EXIT_USAGE = 2,     /* bad command line */
  CLI_EXIT_NODEVICE = 3,  /* no OpenCL platform or device, or the spec matched none */
  CLI_EXIT_CHECK = 4      /* a self-check found wrong results */
};

/* Print "cltrain: <what>: <library detail>" to stderr and give the exit
 * code that fits the status. */
int cli_fail(int status, const char *what);

/* Record this process's rank and the job's size (cli_fail names the rank
 * in a job of several). */
void cli_set_job(int rank, int size);
/* Note that the command line itself is at fault: every rank parses it
 * alike, so each ends by itself, exit 2, without MPI_Abort. Any other
 * failure of train or eval ends the whole job at once (main.c). */
void cli_argv_error(void);

/* getopt_long (cli_options.c) for the command cmd ("train", "bench gemm"):
 * an option it cannot take (unknown, ambiguous, a missing or unwanted
 * value) is reported as "cltrain: CMD: ..." with a pointer to CMD's --help,
 * then '?' is returned; getopt prints nothing itself. */
struct option;
int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts, const char *cmd);

/* Whether name is one of clt_allreduce_algorithms() ("auto" included). */
int cli_allreduce_known(const char *name);
/* A help entry into buf (returned): lead ("      --allreduce ALG     "),
 * then text's words in lines of at most width columns, each line after
 * the first indented as far as lead reaches; ends with a newline. For
 * texts made at run time, such as the library's list of algorithms. */
const char *cli_help_entry(char *buf, size_t size, const char *lead, const char *text, int width);

/* For help texts, from the library's optimizers, into buf (returned): the
 * names of those whose weight decay is decoupled (decoupled 1), L2 (0), or
 * of all (-1), with sep between them and last before the last one:
 * (-1, ", ", " or ") "sgd, adam or adamw", (0, "/", "/") "sgd/adam". */
const char *cli_optimizer_names(int decoupled, const char *sep, const char *last, char *buf, size_t size);
/* "; adamw 0.01": each optimizer whose default weight decay is not 0, with it. */
const char *cli_optimizer_decays(char *buf, size_t size);
/* The optimizers whose update reads the setting ("beta1", "eps"), joined
 * by sep; and "adam 0.9,0.999; ..." the betas of those that read them. */
const char *cli_optimizers_reading(const char *setting, const char *sep, char *buf, size_t size);
const char *cli_betas_defaults(char *buf, size_t size);

/* "1.5 GiB": bytes for messages, into buf (returned). */
const char *cli_bytes(double b, char *buf, size_t size);

/* ---- a command's files (cli_paths.c) ------------------------------------ */

/* One of a command's files: the option (or operand) that names it, its
 * path (NULL: not given) and whether the command writes it. */
typedef struct cli_file {
  const char *opt, *path;
  int output;
} cli_file;
/* Whether a and b are one file: the same device and inode where both exist
 * (links included), else the same absolute path. */
int cli_same_file(const char *a, const char *b);
/* CLI_EXIT_OK, or CLI_EXIT_USAGE after naming the first two of files that
 * are one file where at least one of them is an output. */
int cli_check_distinct(const char *cmd, const cli_file *files, int n);
/* Write text to path whole (a temporary file beside it, renamed over it;
 * a symbolic link's regular file is replaced): CLI_EXIT_OK, or
 * CLI_EXIT_ERROR after saying why, path left as it was. */
int cli_write_whole(const char *path, const char *text);

/* ---- users' own data (cli_data.c) ------------------------------------ */

/* train's and eval's options about a data file (--data FILE). */
typedef struct cli_data_args {
  const char *data, *labels, *target, *features; /* --data FILE, --labels, --target, --features */
  const char *val, *val_labels;                  /* --val FRACTION|FILE|none, --val-labels */
  const char *normalize;                         /* --normalize standard|minmax|none (train) */
  const char *weights;                           /* eval: the weights, whose normalisation applies */
  int eval;
} cli_data_args;
/* The normalisation the data got: kind, n features, shift and scale. */
typedef struct cli_norm {
  clt_normalize_kind kind;
  int64_t n;
  float *shift, *scale;
} cli_norm;
/* Open --data (classification or regression by m's loss), its validation
 * part, and normalise both (train: statistics of the training split from
 * all ranks of comm together, collective; eval: the weights'). Returns
 * CLI_EXIT_OK, or the exit code after saying what failed. */
int cli_data_open(const cli_data_args *a, const clt_model *m, clt_comm *comm, clt_dataset **train,
                  clt_dataset **test, cli_norm *norm);
void cli_norm_free(cli_norm *n);

/* Discover devices and apply the spec (NULL: CLT_DEVICES, else all). */
int cli_select_devices(const char *spec, clt_devices **all, clt_devices **sel);

/* This rank's devices (cli_mpi.c): the spec (or CLT_DEVICES) if given, else one device
 * per rank by local rank when there are several ranks, else all. */
int cli_rank_devices(const char *spec, int threads, clt_comm *comm, clt_devices **all, clt_devices **sel);

int cmd_devices(int argc, char **argv);
int cmd_train(int argc, char **argv, clt_comm *comm);
int cmd_eval(int argc, char **argv, clt_comm *comm);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_summary(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_hf(int argc, char **argv);
int cmd_generate(int argc, char **argv);

/* ---- MPI (cli_mpi.c): the tool, not the library, starts and ends MPI --- */

/* MPI_Init_thread with MPI_THREAD_FUNNELED (a no-op without MPI). */
int cli_mpi_init(int *argc, char ***argv);
void cli_mpi_finalize(void);
/* A communicator over MPI_COMM_WORLD (one rank without MPI). */
int cli_comm_create(clt_comm **out);
/* Like cli_fail, with the rank in front; in a job of several ranks it then
 * calls MPI_Abort, since the other ranks would wait for this one forever. */
int cli_comm_fail(const clt_comm *comm, int status, const char *what);
/* After a failure already reported: in a job of several ranks, MPI_Abort,
 * since the others may be waiting in a collective; else nothing. */
void cli_abort_job(const clt_comm *comm, int exit_code);
/* Seconds from a monotonic clock. */
double cli_now(void);
int cmd_bench_allreduce(int argc, char **argv);
/* `cltrain bench allreduce --fit FILE` (cmd_bench_fit.c); chunk_bytes: --chunk, or 0. */
int cli_bench_fit(const char *path, size_t chunk_bytes);
/* qsort's order of doubles. */
int cli_cmp_double(const void *a, const void *b);
/* The slowest rank's time of each iteration (times is overwritten with
 * them, sorted), then the median of those. Collective over MPI_COMM_WORLD. */
double cli_p50_over_ranks(double *times, long n);

#endif
