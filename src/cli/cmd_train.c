/*
 * cmd_train.c: `cltrain train MODEL` and `cltrain eval MODEL`: parse the
 * options, open the data, pick this rank's devices, and hand everything to
 * the trainer; print progress on rank 0.
 */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"
/* Language models: scripts/make-fortunes-data.sh writes these. */
#define DEFAULT_TOKENS "data/fortunes_train.bin"

#define DEFAULT_CHECKPOINT_DIR "checkpoints"

#define MAX_WEIGHTS 1024

typedef struct train_args {
  const char *model, *data, *val, *devices, *normalize, *save, *weights, *resume, *trace;
  const char *targets, *val_targets; /* --targets, --val-targets: a token file's targets shard */
  const char *allreduce;     /* --allreduce: the all-reduce algorithm (NULL: CLT_ALLREDUCE) */
  int quiet;
  double progress;           /* --progress SECONDS (-1: not given) */
  char *command;             /* the command line as JSON, before getopt reorders it */
  char *run_json;            /* the run record's part of ours (clt_train_options.run_json) */
  int threads;               /* --threads: a CPU device's threads (0: the default) */
  int eval;                  /* cltrain eval: a language model's --val alone will do */
  int vocab;                 /* a language model's vocabulary, else 0 */
  double balance_weights[MAX_WEIGHTS];
  double shard_weights[MAX_WEIGHTS];  /* --shard-weights */
  clt_train_options o;
  /* users' own data (--data FILE: cli_data.c) */
  const char *labels, *target, *features, *val_labels;
  int user_data;             /* --data names a file (CSV, NumPy, HDF5, raw), not an IDX directory */
  int regression;            /* the model's loss is mse, l1 or huber: its metric is the RMSE */
  cli_norm norm;
} train_args;

/* --balance auto | equal | W1,W2,... */
static int parse_balance(const char *s, train_args *a) {
  if (strcmp(s, "auto") == 0) return a->o.balance = CLT_BALANCE_AUTO, 0;
  if (strcmp(s, "equal") == 0) return a->o.balance = CLT_BALANCE_EQUAL, 0;
  int n = 0, positive = 0;
  const char *p = s;
  while (*p) {
    char *end;
    double w = strtod(p, &end);
    if (end == p || !(w >= 0) || w > 1e12 || (*end && *end != ',') || (*end == ',' && !end[1]) || n == MAX_WEIGHTS) {
      fprintf(stderr, "cltrain: --balance must be auto, equal or weights like 3,1 (one per replica, 0 for none), "
                      "not '%s'\n", s);
      return -1;
    }
    positive += w > 0;
    a->balance_weights[n++] = w;
    p = *end ? end + 1 : end;
  }
  if (!positive) {
    fprintf(stderr, "cltrain: --balance %s gives every replica a weight of 0; at least one must take samples\n", s);
    return -1;
  }
  a->o.balance = CLT_BALANCE_WEIGHTS;
  a->o.balance_weights = a->balance_weights;
  a->o.balance_nweights = n;
  return 0;
}

/* --shard-weights W1,W2,...: one per rank, >= 0, not all 0. */
static int parse_shard_weights(const char *s, train_args *a) {
  int n = 0, positive = 0;
  const char *p = s;
  if (a->o.shard_by == CLT_SHARD_MEMORY) {
    fprintf(stderr, "cltrain: --shard-weights and --shard-by memory both size the ZeRO shards; give one\n");
    return -1;
  }
  while (*p) {
    char *end;
    double w = strtod(p, &end);
    if (end == p || !(w >= 0) || w > 1e12 || (*end && *end != ',') || (*end == ',' && !end[1]) || n == MAX_WEIGHTS) {
      fprintf(stderr, "cltrain: --shard-weights must be weights like 3,1 (one per rank, 0 for no shard), not '%s'\n",
              s);
      return -1;
    }
    positive += w > 0;
    a->shard_weights[n++] = w;
    p = *end ? end + 1 : end;
  }
  if (!positive) {
    fprintf(stderr, "cltrain: --shard-weights %s gives every rank 0; at least one must hold a shard\n", s);
    return -1;
  }
  a->o.shard_by = CLT_SHARD_WEIGHTS;
  a->o.shard_weights = a->shard_weights;
  a->o.shard_nweights = n;
  return 0;
}

/* The help's first half: data, training and the optimizer. */
static void help_training(FILE *to, const clt_train_options *d) {
  char all[256], l2[128], decoupled[128], decays[128], betas[128], bdef[128], epsn[128]; /* from the optimizers' table */
  clt_optimizer_config adam;
  clt_optimizer_defaults(CLT_OPT_ADAM, &adam);
  fprintf(to,
          "usage: cltrain train MODEL [OPTIONS]      (under mpirun for several ranks)\n"
          "\n"
          "Trains the model spec file MODEL on a labelled dataset, data-parallel over the\n"
          "selected devices of every rank.\n"
          "\n"
          "data\n"
          "  -D, --data DIR|FILE     IDX files (train-*/t10k-*-idx?-ubyte[.gz]) (default: %s\n"
          "                          when the dataset-fashion-mnist package is installed); your own\n"
          "                          data: a CSV file, NumPy .npy/.npz, HDF5 FILE.h5:/group/dataset\n"
          "                          or a raw file (doc/data.md); for a model of tokens, a token\n"
          "                          file (llm.c's .bin, cltrain tokenize) (default " DEFAULT_TOKENS ")\n"
          "      --labels FILE       the labels or targets of --data FILE in a file of their own\n"
          "                          (.npy, FILE.npz:member, FILE.h5:/dataset) (default: in --data:\n"
          "                          the target column, .npz member y)\n"
          "      --target COLS       the target column(s) of a CSV file or 2-D array, by header\n"
          "                          name or 0-based number, comma-separated (default: the last)\n"
          "      --features COLS     the feature columns (default: every other column)\n"
          "      --val FRACTION|FILE|none  validation data: the last FRACTION of --data FILE (0.1),\n"
          "                          or a file like --data; a language model's validation tokens\n"
          "                          (default: --data's name with 'train' made 'val', when that\n"
          "                          file exists)\n"
          "      --val-labels FILE   --val FILE's labels, as --labels\n"
          "      --targets FILE      a targets shard for --data's tokens: each token or -1 where it\n"
          "                          is no target (fine-tuning: no loss, no gradient there;\n"
          "                          cltrain(1), doc/data.md) (default: every token is one)\n"
          "      --val-targets FILE  the same for --val's tokens\n"
          "      --normalize MODE    standard (the training split's mean and std: per feature for a\n"
          "                          data file, over all pixels for IDX), minmax (per feature to\n"
          "                          [0,1]), none (as stored; scale: the same, pixels in [0,1]);\n"
          "                          saved with the weights (default standard)\n"
          "training\n"
          "  -e, --epochs N          passes over the training set (default %d)\n"
          "  -b, --batch N           global batch per optimizer step, over all replicas (default %lld)\n"
          "      --accumulate K      split each batch into K micro-batches (default 1)\n"
          "      --max-steps N       stop after N optimizer steps (default 0: no limit)\n"
          "      --seed N            initialisation, shuffling and dropout (default %llu)\n"
          "      --drop-last         leave out each epoch's last partial batch\n"
          "      --weights FILE      start from these weights (.safetensors, or a checkpoint's)\n"
          "                          instead of the seed's; the optimizer starts afresh\n"
          "optimizer\n"
          "  -o, --optimizer NAME    %s (default %s)\n"
          "      --lr X              learning rate (default %g)\n"
          "      --momentum X        SGD momentum (default 0.9)\n"
          "      --nesterov          Nesterov momentum\n"
          "      --betas B1,B2       the moments' decay rates of %s\n"
          "                          (default %s)\n"
          "      --eps X             the term added to Adam's denominator, for %s (default %g)\n"
          "      --weight-decay X    L2 for %s, decoupled for %s (default 0%s)\n"
          "      --decay-all         %s: decay biases, norms and embeddings too (by default, as\n"
          "                          in GPT-2, only the matrices of linear, conv, attention and\n"
          "                          swiglu: cltrain summary shows them)\n"
          "      --schedule NAME     constant, step or cosine (default constant)\n"
          "      --warmup N          linear warm-up steps (default 0)\n"
          "      --step-size N       step schedule: steps between decays (default: one epoch)\n"
          "      --gamma X           step schedule: decay factor (default 0.1)\n"
          "      --min-lr X          cosine schedule: final learning rate (default 0)\n"
          "      --clip X            clip the global gradient norm to X (default 0: off)\n"
          "      --precision P       fp32, or fp16: activations and their gradients stored as\n"
          "                          half (computed in fp32), fp32 master weights, gradients\n"
          "                          all-reduced as half, dynamic loss scaling (default fp32)\n"
          "      --loss-scale X      fp16: the first loss scale (default %g); halved and the step\n"
          "                          skipped when a gradient overflows, doubled after %lld clean\n"
          "                          steps; %d skips in a row stop training\n",
          DEFAULT_DATA, d->epochs, (long long)d->batch, (unsigned long long)d->seed,
          cli_optimizer_names(-1, ", ", " or ", all, sizeof all), clt_optimizer_name(d->optimizer.kind), d->schedule.lr,
          cli_optimizers_reading("beta1", "/", betas, sizeof betas), cli_betas_defaults(bdef, sizeof bdef),
          cli_optimizers_reading("eps", "/", epsn, sizeof epsn), (double)adam.eps,
          cli_optimizer_names(0, "/", "/", l2, sizeof l2), cli_optimizer_names(1, "/", "/", decoupled, sizeof decoupled),
          cli_optimizer_decays(decays, sizeof decays), decoupled, d->loss_scale,
          (long long)d->loss_scale_window, d->max_skips);
}

/* The help's second half: devices, parallelism, outputs and checkpoints. */
static void help_devices(FILE *to, const clt_train_options *d) {
  char allreduce[512], text[256];
  snprintf(text, sizeof text, "the gradients' all-reduce: %s (auto: the cost model's choice; default: "
           "CLT_ALLREDUCE, else auto; doc/scaling.md)", clt_allreduce_algorithms());
  fprintf(to,
          "devices and output\n"
          "  -d, --devices SPEC      this rank's devices (default: CLT_DEVICES, else one device\n"
          "                          per rank chosen by local rank, or all devices with one rank)\n"
          "      --threads N         threads of a CPU device (PoCL, rusticl) and of its host GEMMs\n"
          "                          (default: POCL_MAX_PTHREAD_COUNT if set, else the cores split\n"
          "                          evenly over the ranks on this node)\n"
          "      --balance MODE      split each batch over the replicas: equal, auto (by each one's\n"
          "                          measured fixed and per-sample cost, so the slowest is as quick\n"
          "                          as it can be; a replica that would only slow the step gets 0)\n"
          "                          or weights W1,W2,... one per replica, rank by rank, 0 for none\n"
          "                          (default equal)\n"
          "      --balance-every N   auto: re-split every N steps (default %lld)\n"
          "      --balance-min-share N  auto: at least N samples of each micro-batch per replica\n"
          "                          (default %lld: none, and one at 0 is probed now and then)\n"
          "      --bucket-mb X       all-reduce gradients in buckets of X MiB, overlapping the\n"
          "                          backward pass (default %g; 0: one bucket at the end)\n"
          "%s"
          "      --max-device-memory B  use at most B bytes of each device (like 512M or 2G;\n"
          "                          default: all of it); a replica that needs more is refused\n"
          "      --zero S            ZeRO sharding across ranks: 0 every rank keeps all optimizer\n"
          "                          state; 1 each keeps it for its shard of the parameters only;\n"
          "                          2 the reduced gradients too (the backward writes into a few\n"
          "                          bucket buffers; with --accumulate the whole local gradient\n"
          "                          is kept); 3 the parameters too (each layer's put on the device\n"
          "                          just before its forward and backward); same results bit for\n"
          "                          bit (default 0; no-op on one rank)\n"
          "      --shard-by memory   size each rank's ZeRO shard by the device memory it has free\n"
          "                          beside its unsharded buffers (default equal; --balance still\n"
          "                          sizes the batch's shares)\n"
          "      --shard-weights W1,W2,...  ZeRO shards in proportion to weights, one per rank\n"
          "      --offload optimizer  keep the optimizer state in host memory and step it on the\n"
          "                          host (same bits; saves nothing where device memory is the\n"
          "                          host's, as with PoCL; default none)\n"
          "      --pipeline P        cut the model into P stages on P ranks (ranks = P x D: D\n"
          "                          data-parallel replicas of each stage; default 1: none)\n"
          "      --micro-batches M   a pipeline step's micro-batches (default P); the batch\n"
          "                          must divide by M\n"
          "      --schedule-pipeline S  1f1b (default: at most P micro-batches' activations held\n"
          "                          per stage) or gpipe (all forwards, then all backwards)\n"
          "      --stages A,B,...    layers per stage (blocks expanded; default: as even as whole\n"
          "                          residual blocks allow); auto: by each layer's measured time\n"
          "                          on each stage's device, the slowest stage as fast as it can be\n"
          "      --recompute WHAT    blocks: keep only each block pass's input from the forward and\n"
          "                          run the pass again in the backward (activation checkpointing:\n"
          "                          less memory, one more forward; same results bit for bit);\n"
          "                          none (default) keeps every layer's activations\n"
          "      --check-every N     compare parameter checksums of all replicas every N steps\n"
          "                          (default %lld; 0: never)\n"
          "      --eval-every N      also evaluate every N steps (default 0: after each epoch)\n"
          "      --log-every N       a progress record every N steps (default %lld)\n"
          "      --metrics FILE      append JSON Lines metrics to FILE\n"
          "      --tensorboard DIR   write TensorBoard event files into DIR (made if missing)\n"
          "      --trace FILE        write a timeline of the run to FILE (Chrome / Perfetto trace\n"
          "                          JSON): every rank's steps, layers and gradient exchange\n"
          "  -s, --save FILE         save the trained weights as .safetensors (PyTorch loads it)\n"
          "checkpoints (doc/checkpoint.md)\n"
          "      --checkpoint-every N  save a checkpoint every N optimizer steps, and when training\n"
          "                          ends (default 0: with --checkpoint-dir, after every epoch)\n"
          "      --checkpoint-dir DIR  where: DIR/ckpt-<step>.safetensors (default %s\n"
          "                          once --checkpoint-every is given)\n"
          "      --keep K            keep the newest K checkpoints in DIR (default %d; 0: all)\n"
          "      --resume FILE|latest  go on from a checkpoint: FILE, or the newest whole one in\n"
          "                          the checkpoint directory (none there: start from the beginning)\n"
          "      --checkpoint-one-file  under --zero 1|2 on several ranks, gather the state to rank 0\n"
          "                          and write one file (default: each rank writes its shard beside\n"
          "                          the checkpoint, which indexes them)\n"
          "  -q, --quiet             no progress line\n"
          "      --progress S        a progress line on stderr at most every S seconds: step, epoch,\n"
          "                          loss, samples/s, tokens/s, ETA to the run's end (default: a\n"
          "                          live line on a terminal, else every 10 s; 0: none)\n"
          "  -h, --help              this text\n",
          (long long)d->balance_every, (long long)d->balance_min_share, d->bucket_mb,
          cli_help_entry(allreduce, sizeof allreduce, "      --allreduce ALG     ", text, 86),
          (long long)d->check_every, (long long)d->log_every, DEFAULT_CHECKPOINT_DIR, d->checkpoint_keep);
}

static void help(FILE *to) {
  clt_train_options d;
  clt_train_options_defaults(&d);
  help_training(to, &d);
  help_devices(to, &d);
}


/* A bad command line: every rank finds the same, so none needs the job
 * ended for it (main.c). */
static int argv_error(void) {
  cli_argv_error();
  return CLI_EXIT_USAGE;
}

static int parse_long(const char *opt, const char *s, long long lo, long long hi, long long *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "cltrain: %s must be a whole number from %lld to %lld, not '%s'\n", opt, lo, hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

/* "1048576", "512K", "64M", "2G" (binary units) into bytes, at least 1. */
static int parse_bytes(const char *opt, const char *s, uint64_t *out) {
  char *end;
  double v = strtod(s, &end);
  double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
              : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
  if (unit > 1) end++;
  if (end == s || *end || !(v * unit >= 1) || v * unit > 1e18) {
    fprintf(stderr, "cltrain: %s must be a size in bytes, like 512M or 2G, not '%s'\n", opt, s);
    return -1;
  }
  *out = (uint64_t)(v * unit);
  return 0;
}

static int parse_real(const char *opt, const char *s, double lo, double hi, float *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "cltrain: %s must be a number from %g to %g, not '%s'\n", opt, lo, hi, s);
    return -1;
  }
  *out = (float)v;
  return 0;
}

/* --betas B1,B2: two numbers in [0, 1). */
static int parse_betas(const char *s, float *out) {
  char *end;
  double b1 = strtod(s, &end), b2 = NAN;
  if (end != s && *end == ',') {
    const char *second = end + 1;
    b2 = strtod(second, &end);
    if (end == second) b2 = NAN;
  }
  if (*end || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) {
    fprintf(stderr, "cltrain: --betas must be two numbers from 0 up to (not including) 1, as B1,B2 (0.9,0.95), "
                    "not '%s'\n", s);
    return -1;
  }
  out[0] = (float)b1, out[1] = (float)b2;
  return 0;
}

/* --normalize standard | minmax | none | scale (IDX's name for none) */
static int parse_normalize(const char *s, train_args *a) {
  clt_normalize_kind k;
  if (strcmp(s, "scale") && clt_normalize_parse(s, &k) < 0) {
    fprintf(stderr, "cltrain: --normalize must be standard, minmax or none (or scale), not '%s'\n", s);
    return -1;
  }
  a->normalize = s;
  return 0;
}

/* Parse argv into a; returns -1 (after a message) on a bad command line,
 * -2 on an option cli_getopt refused (its message points at --help). */
static int parse_args(int argc, char **argv, train_args *a, int *help_asked) {
  enum { O_ACC = 256, O_MAXSTEPS, O_SEED, O_DROPLAST, O_LR, O_MOM, O_NEST, O_WD, O_SCHED, O_WARM, O_STEPSIZE,
         O_GAMMA, O_MINLR, O_CLIP, O_EVAL, O_LOG, O_METRICS, O_TENSORBOARD, O_NORM, O_WEIGHTS, O_BALANCE, O_BALEVERY, O_BALMIN, O_BUCKET, O_PRECISION, O_LOSS_SCALE,
         O_CHECK, O_CKPT_EVERY, O_CKPT_DIR, O_KEEP, O_RESUME, O_VAL, O_DECAY_ALL, O_THREADS, O_ZERO, O_MAXMEM,
         O_TRACE, O_ALLREDUCE, O_PIPELINE, O_MICRO, O_PIPE_SCHED, O_STAGES, O_BETAS, O_EPS, O_TARGETS,
         O_VAL_TARGETS, O_CKPT_ONE_FILE, O_PROGRESS, O_OFFLOAD, O_SHARD_BY, O_SHARD_WEIGHTS, O_LABELS, O_TARGET,
         O_FEATURES, O_VAL_LABELS, O_RECOMPUTE };
  static const struct option opts[] = {
      {"data", required_argument, 0, 'D'},        {"normalize", required_argument, 0, O_NORM},
      {"val", required_argument, 0, O_VAL},       {"epochs", required_argument, 0, 'e'},
      {"decay-all", no_argument, 0, O_DECAY_ALL},      {"batch", required_argument, 0, 'b'},
      {"accumulate", required_argument, 0, O_ACC}, {"max-steps", required_argument, 0, O_MAXSTEPS},
      {"seed", required_argument, 0, O_SEED},     {"drop-last", no_argument, 0, O_DROPLAST},
      {"optimizer", required_argument, 0, 'o'},   {"lr", required_argument, 0, O_LR},
      {"momentum", required_argument, 0, O_MOM},  {"nesterov", no_argument, 0, O_NEST},
      {"weight-decay", required_argument, 0, O_WD}, {"schedule", required_argument, 0, O_SCHED},
      {"betas", required_argument, 0, O_BETAS},   {"eps", required_argument, 0, O_EPS},
      {"targets", required_argument, 0, O_TARGETS}, {"val-targets", required_argument, 0, O_VAL_TARGETS},
      {"warmup", required_argument, 0, O_WARM},   {"step-size", required_argument, 0, O_STEPSIZE},
      {"gamma", required_argument, 0, O_GAMMA},   {"min-lr", required_argument, 0, O_MINLR},
      {"clip", required_argument, 0, O_CLIP},     {"devices", required_argument, 0, 'd'},
      {"threads", required_argument, 0, O_THREADS},
      {"eval-every", required_argument, 0, O_EVAL}, {"log-every", required_argument, 0, O_LOG},
      {"metrics", required_argument, 0, O_METRICS}, {"tensorboard", required_argument, 0, O_TENSORBOARD}, {"quiet", no_argument, 0, 'q'},
      {"trace", required_argument, 0, O_TRACE},
      {"save", required_argument, 0, 's'},        {"weights", required_argument, 0, O_WEIGHTS},
      {"balance", required_argument, 0, O_BALANCE}, {"balance-every", required_argument, 0, O_BALEVERY},
      {"balance-min-share", required_argument, 0, O_BALMIN},
      {"bucket-mb", required_argument, 0, O_BUCKET}, {"check-every", required_argument, 0, O_CHECK},
      {"precision", required_argument, 0, O_PRECISION}, {"loss-scale", required_argument, 0, O_LOSS_SCALE},
      {"checkpoint-every", required_argument, 0, O_CKPT_EVERY}, {"checkpoint-dir", required_argument, 0, O_CKPT_DIR},
      {"zero", required_argument, 0, O_ZERO},     {"max-device-memory", required_argument, 0, O_MAXMEM},
      {"allreduce", required_argument, 0, O_ALLREDUCE},
      {"keep", required_argument, 0, O_KEEP},     {"resume", required_argument, 0, O_RESUME},
      {"pipeline", required_argument, 0, O_PIPELINE}, {"micro-batches", required_argument, 0, O_MICRO},
      {"schedule-pipeline", required_argument, 0, O_PIPE_SCHED}, {"stages", required_argument, 0, O_STAGES},
      {"checkpoint-one-file", no_argument, 0, O_CKPT_ONE_FILE},
      {"progress", required_argument, 0, O_PROGRESS},
      {"offload", required_argument, 0, O_OFFLOAD}, {"shard-by", required_argument, 0, O_SHARD_BY},
      {"shard-weights", required_argument, 0, O_SHARD_WEIGHTS},
      {"labels", required_argument, 0, O_LABELS}, {"target", required_argument, 0, O_TARGET},
      {"features", required_argument, 0, O_FEATURES}, {"val-labels", required_argument, 0, O_VAL_LABELS},
      {"recompute", required_argument, 0, O_RECOMPUTE},
      {"help", no_argument, 0, 'h'},              {0}};
  clt_train_options *o = &a->o;
  long long v;
  int c, momentum_set = 0, wd_set = 0, betas_set = 0, eps_set = 0;
  float momentum = 0, wd = 0, betas[2] = {0, 0}, eps = 0;
  clt_optimizer_kind kind = CLT_OPT_SGD;
  *help_asked = 0;
  a->progress = -1;
  clt_train_options_defaults(o);
  a->normalize = "standard";
  while ((c = cli_getopt(argc, argv, "D:e:b:o:d:s:qh", opts, "train")) != -1) {
    switch (c) {
    case 'D': a->data = optarg; break;
    case O_VAL: a->val = optarg; break;
    case O_TARGETS: a->targets = optarg; break;
    case O_VAL_TARGETS: a->val_targets = optarg; break;
    case O_DECAY_ALL: o->decay_all = 1; break;
    case O_NORM:
      if (parse_normalize(optarg, a) < 0) return -1;
      break;
    case O_LABELS: a->labels = optarg; break;
    case O_TARGET: a->target = optarg; break;
    case O_FEATURES: a->features = optarg; break;
    case O_VAL_LABELS: a->val_labels = optarg; break;
    case 'e': if (parse_long("--epochs", optarg, 1, 1000000, &v)) return -1; o->epochs = (int)v; break;
    case 'b': if (parse_long("--batch", optarg, 1, 1 << 24, &v)) return -1; o->batch = v; break;
    case O_ACC: if (parse_long("--accumulate", optarg, 1, 1 << 16, &v)) return -1; o->accumulate = (int)v; break;
    case O_MAXSTEPS: if (parse_long("--max-steps", optarg, 0, 1LL << 40, &v)) return -1; o->max_steps = v; break;
    case O_SEED: if (parse_long("--seed", optarg, 0, 1LL << 62, &v)) return -1; o->seed = (uint64_t)v; break;
    case O_DROPLAST: o->drop_last = 1; break;
    case 'o':
      if (clt_optimizer_parse(optarg, &kind) < 0) {
        fprintf(stderr, "cltrain: --optimizer: %s\n", clt_last_error());
        return -1;
      }
      break;
    case O_LR: if (parse_real("--lr", optarg, 1e-12, 1e6, &o->schedule.lr)) return -1; break;
    case O_MOM: if (parse_real("--momentum", optarg, 0, 0.999999, &momentum)) return -1; momentum_set = 1; break;
    case O_NEST: o->optimizer.nesterov = 1; break;
    case O_WD: if (parse_real("--weight-decay", optarg, 0, 1e3, &wd)) return -1; wd_set = 1; break;
    case O_BETAS: if (parse_betas(optarg, betas)) return -1; betas_set = 1; break;
    case O_EPS: if (parse_real("--eps", optarg, 1e-30, 1, &eps)) return -1; eps_set = 1; break;
    case O_SCHED:
      if (clt_schedule_parse(optarg, &o->schedule.kind) < 0) {
        fprintf(stderr, "cltrain: --schedule: %s\n", clt_last_error());
        return -1;
      }
      break;
    case O_WARM: if (parse_long("--warmup", optarg, 0, 1LL << 40, &v)) return -1; o->schedule.warmup_steps = v; break;
    case O_STEPSIZE: if (parse_long("--step-size", optarg, 1, 1LL << 40, &v)) return -1; o->schedule.step_size = v; break;
    case O_GAMMA:
      if (parse_real("--gamma", optarg, 0, 1, &o->schedule.gamma)) return -1;
      if (o->schedule.gamma == 0) {
        fprintf(stderr, "cltrain: --gamma must be above 0 (the step schedule multiplies the rate by it; 0 stops "
                        "training after the first decay), not '%s'\n", optarg);
        return -1;
      }
      break;
    case O_MINLR: if (parse_real("--min-lr", optarg, 0, 1e6, &o->schedule.min_lr)) return -1; break;
    case O_CLIP: if (parse_real("--clip", optarg, 0, 1e30, &o->clip)) return -1; break;
    case 'd': a->devices = optarg; break;
    case O_THREADS: if (parse_long("--threads", optarg, 1, 4096, &v)) return -1; a->threads = (int)v; break;
    case O_EVAL: if (parse_long("--eval-every", optarg, 0, 1LL << 40, &v)) return -1; o->eval_every = v; break;
    case O_LOG: if (parse_long("--log-every", optarg, 0, 1LL << 40, &v)) return -1; o->log_every = v; break;
    case O_METRICS: o->metrics_path = optarg; break;
    case O_TENSORBOARD: o->tensorboard_dir = optarg; break;
    case 'q': a->quiet = 1; break;
    case O_PROGRESS: {
      float sec;
      if (parse_real("--progress", optarg, 0, 1e9, &sec)) return -1;
      a->progress = sec;
      break;
    }
    case 's': a->save = optarg; break;
    case O_TRACE: a->trace = optarg; break;
    case O_WEIGHTS: a->weights = optarg; break;
    case O_BALANCE:
      if (parse_balance(optarg, a) < 0) return -1;
      break;
    case O_BALEVERY: if (parse_long("--balance-every", optarg, 1, 1LL << 40, &v)) return -1; o->balance_every = v; break;
    case O_BALMIN: if (parse_long("--balance-min-share", optarg, 0, 1 << 24, &v)) return -1; o->balance_min_share = v; break;
    case O_CHECK: if (parse_long("--check-every", optarg, 0, 1LL << 40, &v)) return -1; o->check_every = v; break;
    case O_CKPT_EVERY:
      if (parse_long("--checkpoint-every", optarg, 1, 1LL << 40, &v)) return -1;
      o->checkpoint_every = v;
      break;
    case O_CKPT_DIR:
      if (!*optarg) {
        fprintf(stderr, "cltrain: --checkpoint-dir needs a directory\n");
        return -1;
      }
      o->checkpoint_dir = optarg;
      break;
    case O_MAXMEM: if (parse_bytes("--max-device-memory", optarg, &o->max_device_memory)) return -1; break;
    case O_ALLREDUCE:
      if (!cli_allreduce_known(optarg)) {
        fprintf(stderr, "cltrain: --allreduce must be one of %s, not '%s'\n", clt_allreduce_algorithms(), optarg);
        return -1;
      }
      a->allreduce = optarg;
      break;
    case O_ZERO: if (parse_long("--zero", optarg, 0, 3, &v)) return -1; o->zero = (int)v; break;
    case O_PIPELINE: if (parse_long("--pipeline", optarg, 1, 4096, &v)) return -1; o->pipeline = (int)v; break;
    case O_MICRO: if (parse_long("--micro-batches", optarg, 1, 1 << 20, &v)) return -1; o->micro_batches = (int)v; break;
    case O_PIPE_SCHED:
      if (strcmp(optarg, "1f1b") == 0) {
        o->pipeline_schedule = CLT_PIPELINE_1F1B;
      } else if (strcmp(optarg, "gpipe") == 0) {
        o->pipeline_schedule = CLT_PIPELINE_GPIPE;
      } else {
        fprintf(stderr, "cltrain: --schedule-pipeline must be 1f1b or gpipe, not '%s'\n", optarg);
        return -1;
      }
      break;
    case O_STAGES: o->stages = optarg; break;
    case O_CKPT_ONE_FILE: o->checkpoint_one_file = 1; break;
    case O_OFFLOAD:
      if (strcmp(optarg, "optimizer") == 0) {
        o->offload = CLT_OFFLOAD_OPTIMIZER;
      } else if (strcmp(optarg, "none") == 0) {
        o->offload = CLT_OFFLOAD_NONE;
      } else {
        fprintf(stderr, "cltrain: --offload must be optimizer or none, not '%s'\n", optarg);
        return -1;
      }
      break;
    case O_SHARD_BY:
      if (strcmp(optarg, "memory") == 0 && o->shard_by == CLT_SHARD_WEIGHTS) {
        fprintf(stderr, "cltrain: --shard-weights and --shard-by memory both size the ZeRO shards; give one\n");
        return -1;
      } else if (strcmp(optarg, "memory") == 0) {
        o->shard_by = CLT_SHARD_MEMORY;
      } else if (strcmp(optarg, "equal") == 0) {
        o->shard_by = CLT_SHARD_EQUAL, o->shard_weights = NULL, o->shard_nweights = 0;
      } else {
        fprintf(stderr, "cltrain: --shard-by must be memory or equal, not '%s' (--shard-weights W1,W2 gives "
                        "weights)\n", optarg);
        return -1;
      }
      break;
    case O_SHARD_WEIGHTS: if (parse_shard_weights(optarg, a)) return -1; break;
    case O_RECOMPUTE:
      if (strcmp(optarg, "blocks") && strcmp(optarg, "none")) {
        fprintf(stderr, "cltrain: --recompute must be blocks or none, not '%s'\n", optarg);
        return -1;
      }
      o->recompute = strcmp(optarg, "blocks") == 0 ? CLT_RECOMPUTE_BLOCKS : CLT_RECOMPUTE_NONE;
      break;
    case O_KEEP: if (parse_long("--keep", optarg, 0, 1 << 30, &v)) return -1; o->checkpoint_keep = (int)v; break;
    case O_RESUME:
      if (!*optarg) {
        fprintf(stderr, "cltrain: --resume needs a checkpoint file or 'latest'\n");
        return -1;
      }
      a->resume = optarg;
      break;
    case O_BUCKET: {
      float mb;
      if (parse_real("--bucket-mb", optarg, 0, 1e6, &mb)) return -1;
      o->bucket_mb = mb;
      break;
    }
    case O_PRECISION:
      if (strcmp(optarg, "fp32") == 0) {
        o->precision = CLT_F32;
      } else if (strcmp(optarg, "fp16") == 0) {
        o->precision = CLT_F16;
      } else {
        fprintf(stderr, "cltrain: --precision must be fp32 or fp16, not '%s'\n", optarg);
        return -1;
      }
      break;
    case O_LOSS_SCALE: if (parse_real("--loss-scale", optarg, 1, 1e30, &o->loss_scale)) return -1; break;
    case 'h': *help_asked = 1; return 0;
    default: return -2; /* cli_getopt said why, and where the options are listed */
    }
  }
  int nesterov = o->optimizer.nesterov;
  clt_optimizer_defaults(kind, &o->optimizer);
  o->optimizer.nesterov = nesterov;
  if (momentum_set) o->optimizer.momentum = momentum;
  if (wd_set) o->optimizer.weight_decay = wd;
  if ((betas_set && !clt_optimizer_reads(kind, "beta1")) || (eps_set && !clt_optimizer_reads(kind, "eps"))) {
    char names[128];
    const char *what = betas_set && !clt_optimizer_reads(kind, "beta1") ? "beta1" : "eps";
    fprintf(stderr, "cltrain: --%s sets what %s does not use: it is for %s (-o)\n", what[0] == 'b' ? "betas" : "eps",
            clt_optimizer_name(kind), cli_optimizers_reading(what, ", ", names, sizeof names));
    return -1;
  }
  if (betas_set) o->optimizer.beta1 = betas[0], o->optimizer.beta2 = betas[1];
  if (eps_set) o->optimizer.eps = eps;
  if (nesterov && (kind != CLT_OPT_SGD || o->optimizer.momentum == 0)) {
    fprintf(stderr, "cltrain: --nesterov needs the sgd optimizer with momentum\n");
    return -1;
  }
  if (o->schedule.min_lr > o->schedule.lr) {
    fprintf(stderr, "cltrain: --min-lr %g is above --lr %g: the cosine schedule falls from --lr to --min-lr\n",
            (double)o->schedule.min_lr, (double)o->schedule.lr);
    return -1;
  }
  if (o->checkpoint_every && !o->checkpoint_dir) o->checkpoint_dir = DEFAULT_CHECKPOINT_DIR;
  if (a->resume && a->weights) {
    fprintf(stderr, "cltrain: --resume and --weights both say where to start; give one\n");
    return -1;
  }
  if (optind != argc - 1) {
    fprintf(stderr, optind >= argc ? "cltrain: the MODEL spec file is missing\n"
                                   : "cltrain: one MODEL spec file is expected, then options; '%s' is extra\n",
            argv[argc - 1]);
    return -1;
  }
  a->model = argv[optind];
  return 0;
}

/* An evaluation's result: a classifier's test loss and accuracy; a
 * language model's validation loss per token, with bits per byte when the
 * tokens are bytes (cltrain tokenize), and its next-token accuracy. */
static void print_eval(const train_args *a, const char *lead, double loss, double acc) {
  if (a->regression) printf("%stest loss %.4f rmse %.4f", lead, loss, acc);
  else if (!a->vocab) printf("%stest loss %.4f accuracy %.4f", lead, loss, acc);
  else if (a->vocab == 256) printf("%sval loss %.4f bits per byte %.4f accuracy %.4f", lead, loss, loss / log(2.0), acc);
  else printf("%sval loss %.4f accuracy %.4f", lead, loss, acc);
}

/* h:mm:ss */
static void hms(double s, char *buf, size_t len) {
  long t = isfinite(s) && s > 0 ? (long)(s + 0.5) : 0;
  snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

/* A timed progress line (--progress): whole lines, for a pipe or a log. */
static void progress_line(const train_args *a, const clt_train_event *ev) {
  char eta[32], tok[64] = "";
  hms(ev->eta_s, eta, sizeof eta);
  if (isfinite(ev->tokens_per_s)) snprintf(tok, sizeof tok, "  %.0f tokens/s", ev->tokens_per_s);
  if (!a->quiet && isatty(STDERR_FILENO)) fprintf(stderr, "\r%80s\r", "");
  fprintf(stderr, "progress: step %lld/%lld  epoch %lld/%lld  loss %.4f  %.0f samples/s%s  ETA %s\n",
          (long long)ev->step, (long long)ev->steps_total, (long long)ev->epoch, (long long)ev->epochs, ev->loss,
          ev->samples_per_s, tok, eta);
}

/* Each device's achieved FLOP/s and MFU, for the epoch line. */
static void print_flops(const clt_train_event *ev) {
  int any = 0;
  for (int r = 0; ev->flops && ev->mfu && r < ev->nreplicas; r++) {
    if (!(ev->flops[r] > 0)) continue;
    printf("%s replica %d %.3g GFLOP/s", any ? "," : " |", r, ev->flops[r] / 1e9);
    if (isfinite(ev->mfu[r])) printf(" MFU %.1f%%", 100 * ev->mfu[r]);
    any = 1;
  }
}

/* Progress on rank 0: a rewritten line on a terminal, timed lines
 * (--progress), epoch lines always. */
static void progress(const clt_train_event *ev, void *user) {
  const train_args *a = user;
  if (ev->kind == CLT_EVENT_PROGRESS) {
    progress_line(a, ev);
    return;
  }
  if (ev->kind == CLT_EVENT_STEP && isfinite(ev->test_loss)) { /* --eval-every */
    if (ev->step == ev->steps_total) return; /* the epoch's line follows, with this evaluation */
    if (!a->quiet && isatty(STDERR_FILENO)) fprintf(stderr, "\r%80s\r", "");
    printf("step %lld/%lld: train loss %.4f", (long long)ev->step, (long long)ev->steps_total, ev->loss);
    print_eval(a, " | ", ev->test_loss, ev->test_accuracy);
    printf(" | %.1f s\n", ev->elapsed_s);
    fflush(stdout);
    return;
  }
  if (ev->kind == CLT_EVENT_STEP) {
    if (a->quiet || a->progress >= 0 || !isatty(STDERR_FILENO)) return; /* --progress: its own lines */
    char eta[32];
    hms(ev->eta_s, eta, sizeof eta);
    fprintf(stderr, "\repoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s   ",
            (long long)ev->epoch, (long long)ev->epochs, (long long)ev->step_in_epoch,
            (long long)ev->steps_per_epoch, ev->loss, ev->samples_per_s, eta);
    return;
  }
  if (!a->quiet && isatty(STDERR_FILENO)) fprintf(stderr, "\r%80s\r", "");
  printf("epoch %lld/%lld", (long long)ev->epoch, (long long)ev->epochs);
  if (ev->step_in_epoch < ev->steps_per_epoch) /* --max-steps ended it early */
    printf(" (stopped at step %lld of %lld, --max-steps)", (long long)ev->step_in_epoch, (long long)ev->steps_per_epoch);
  printf(": train loss %.4f %s %.4f", ev->loss, a->regression ? "rmse" : "accuracy", ev->accuracy);
  if (isfinite(ev->test_accuracy)) print_eval(a, " | ", ev->test_loss, ev->test_accuracy);
  printf(" | %.1f s", ev->elapsed_s);
  print_flops(ev);
  printf("\n");
  fflush(stdout);
}

/* A token file and, with its targets shard, the masked targets. */
static int open_token_file(const char *path, const char *targets, int64_t T, int V, clt_dataset **out) {
  int rc = clt_dataset_open_tokens(&path, 1, T, V, out);
  if (rc < 0 || !targets) return rc;
  if ((rc = clt_dataset_tokens_targets(*out, &targets, 1)) < 0) {
    clt_dataset_destroy(*out);
    *out = NULL;
  }
  return rc;
}

/* A language model's token files: --data and --val (with --targets and
 * --val-targets), or the fortunes corpus; the validation file is optional.
 * Evaluation needs no training set: with --val and no --data it opens
 * --val alone. */
static int open_tokens(const train_args *a, const clt_model *m, clt_dataset **train, clt_dataset **test) {
  const char *path = a->data ? a->data : DEFAULT_TOKENS;
  int64_t T = clt_model_input_size(m);
  int V = clt_model_vocab(m), rc;
  if (a->eval && a->val && !a->data) return open_token_file(a->val, a->val_targets, T, V, test);
  if (!a->data && access(path, R_OK) != 0) {
    fprintf(stderr, "cltrain: no --data FILE.bin given and %s is not there (make it with "
            "scripts/make-fortunes-data.sh, or tokenize text with cltrain tokenize)\n", path);
    return CLT_ENOTFOUND;
  }
  if ((rc = open_token_file(path, a->targets, T, V, train)) < 0) return rc;
  char guess[4096];
  const char *val = a->val;
  const char *at = strstr(path, "train");
  if (!val && at && strlen(path) < sizeof guess) {
    snprintf(guess, sizeof guess, "%.*sval%s", (int)(at - path), path, at + 5);
    if (access(guess, R_OK) == 0) val = guess;
  }
  if (val && strcmp(val, "none") == 0) val = NULL;
  if (!val && a->val_targets) {
    fprintf(stderr, "cltrain: --val-targets %s, but there are no validation tokens (--val)\n", a->val_targets);
    return CLT_EINVAL;
  }
  return val ? open_token_file(val, a->val_targets, T, V, test) : CLT_OK;
}

/* Open the training and test sets and normalise both alike. */
static int open_data(const train_args *a, const clt_model *m, clt_dataset **train, clt_dataset **test) {
  const char *dir = a->data;
  int rc;
  *train = *test = NULL;
  if (clt_model_vocab(m)) return open_tokens(a, m, train, test);
  if (a->targets || a->val_targets) {
    fprintf(stderr, "cltrain: --%s goes with a language model's token files; %s takes no tokens\n",
            a->targets ? "targets" : "val-targets", a->model);
    return CLT_EINVAL;
  }
  if (!dir) {
    if (access(DEFAULT_DATA, R_OK) != 0) {
      fprintf(stderr, "cltrain: no --data DIR given and %s is not there (install dataset-fashion-mnist)\n",
              DEFAULT_DATA);
      return CLT_ENOTFOUND;
    }
    dir = DEFAULT_DATA;
  }
  if (strcmp(a->normalize, "minmax") == 0) {
    fprintf(stderr, "cltrain: --normalize minmax is per feature, for --data FILE; IDX pixels take standard or none\n");
    return CLT_EINVAL;
  }
  if ((rc = clt_dataset_open_idx(dir, "train", train)) < 0) return rc;
  rc = clt_dataset_open_idx(dir, "test", test);
  if (rc == CLT_ENOTFOUND) { /* training without a test set is fine */
    *test = NULL;
    rc = CLT_OK;
  }
  if (rc < 0) return rc;
  if (strcmp(a->normalize, "standard") == 0) {
    float mean, std;
    if ((rc = clt_dataset_stats(*train, &mean, &std)) < 0) return rc;
    if ((rc = clt_dataset_normalize(*train, mean, std)) < 0) return rc;
    if (*test && (rc = clt_dataset_normalize(*test, mean, std)) < 0) return rc;
  }
  return CLT_OK;
}

/* What train and eval hold: the model, the data, this rank's devices and
 * the trainer over them. */
typedef struct session {
  clt_model *model;
  clt_devices *all, *sel;
  clt_dataset *train, *test;
  clt_trainer *tr;
} session;

/* Load the model, open the data and pick this rank's devices: CLI_EXIT_OK,
 * or the exit code after saying what failed (session_close either way). */
static int session_open(train_args *a, clt_comm *comm, session *s) {
  int rc;
  memset(s, 0, sizeof *s);
  if ((rc = clt_model_load(a->model, &s->model)) < 0) return cli_fail(rc, "model");
  a->vocab = clt_model_vocab(s->model);
  a->regression = clt_model_loss(s->model) != CLT_LOSS_CROSSENTROPY;
  struct stat st;
  a->user_data = !a->vocab && a->data && !(stat(a->data, &st) == 0 && S_ISDIR(st.st_mode));
  if (a->user_data) {
    cli_data_args d = {a->data, a->labels, a->target, a->features, a->val, a->val_labels, a->normalize, a->weights,
                       a->eval};
    int ec = cli_data_open(&d, s->model, comm, &s->train, &s->test, &a->norm);
    if (ec != CLI_EXIT_OK) return ec;
  } else if (a->labels || a->target || a->features || a->val_labels) {
    fprintf(stderr, "cltrain: --%s goes with --data FILE (CSV, NumPy, HDF5, raw), not with %s\n",
            a->labels ? "labels" : a->target ? "target" : a->features ? "features" : "val-labels",
            a->vocab ? "a language model's tokens" : "an IDX directory");
    return CLI_EXIT_USAGE;
  } else if (a->regression) {
    fprintf(stderr, "cltrain: %s is a regression model (its loss line); give it --data FILE with float targets "
            "(CSV, NumPy, HDF5: doc/data.md)\n", a->model);
    return CLI_EXIT_USAGE;
  } else if ((rc = open_data(a, s->model, &s->train, &s->test)) < 0) {
    return cli_fail(rc, "data");
  }
  return cli_rank_devices(a->devices, a->threads, comm, &s->all, &s->sel);
}

/* A batch larger than the training set, refused before anything is
 * allocated (the sampler would refuse it only after the replicas took
 * their memory). What does not fit a device, clt_trainer_create refuses
 * before it allocates (clt_replica_memory_check). */
static int check_batch(const train_args *a, const session *s) {
  if (s->train && a->o.batch > clt_dataset_count(s->train)) {
    fprintf(stderr, "cltrain: --batch %lld is larger than the %lld samples of %s; give at most %lld\n",
            (long long)a->o.batch, (long long)clt_dataset_count(s->train), clt_dataset_path(s->train),
            (long long)clt_dataset_count(s->train));
    return CLI_EXIT_USAGE;
  }
  return CLI_EXIT_OK;
}

/* Whether path names a checkpoint of dir (DIR/ckpt-*.safetensors), which
 * the run may write over or remove (--keep). */
static int names_checkpoint(const char *path, const char *dir) {
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  size_t n = strlen(base);
  if (!dir || strncmp(base, "ckpt-", 5) != 0 || n < 17 || strcmp(base + n - 12, ".safetensors") != 0) return 0;
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash == path ? 1 : slash - path) : 1, slash ? path : ".");
  return cli_same_file(parent, dir);
}

/* No two of the run's inputs and outputs are one file (rank 0, which
 * writes every output; after the data are open, so their files are known,
 * and before anything is written). --weights and --save may not be one
 * file either: see cltrain(1). */
static int check_files(const train_args *a, const session *s) {
  enum { MAX_FILES = 16 };
  static const char *const idx[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                    "t10k-labels-idx1-ubyte"};
  char names[8][PATH_MAX];
  cli_file f[MAX_FILES + 8];
  int n = 0, k = 0;
  f[n++] = (cli_file){"--save", a->save, 1};
  f[n++] = (cli_file){"--metrics", a->o.metrics_path, 1};
  f[n++] = (cli_file){"--trace", a->trace, 1};
  f[n++] = (cli_file){"MODEL", a->model, 0};
  f[n++] = (cli_file){"--weights", a->weights, 0};
  f[n++] = (cli_file){"--resume", a->resume && strcmp(a->resume, "latest") ? a->resume : NULL, 0};
  if (a->vocab) { /* token files: the ones opened */
    f[n++] = (cli_file){"--data", s->train ? clt_dataset_path(s->train) : NULL, 0};
    f[n++] = (cli_file){"--val", s->test ? clt_dataset_path(s->test) : NULL, 0};
  } else if (a->user_data) { /* a data file and its labels */
    f[n++] = (cli_file){"--data", a->data, 0};
    f[n++] = (cli_file){"--labels", a->labels, 0};
    f[n++] = (cli_file){"--val", s->test && a->val ? clt_dataset_path(s->test) : NULL, 0};
    f[n++] = (cli_file){"--val-labels", a->val_labels, 0};
  } else { /* an IDX directory's files, as the reader looks for them */
    const char *dir = a->data ? a->data : DEFAULT_DATA;
    for (int i = 0; i < 4; i++)
      for (int gz = 0; gz < 2; gz++) {
        snprintf(names[k], sizeof names[k], "%s/%s%s", dir, idx[i], gz ? ".gz" : "");
        if (access(names[k], F_OK) == 0) f[n++] = (cli_file){"--data", names[k++], 0};
      }
  }
  int ec = cli_check_distinct("train", f, n);
  for (int i = 0; ec == CLI_EXIT_OK && i < 3; i++)
    if (f[i].path && names_checkpoint(f[i].path, a->o.checkpoint_dir)) {
      fprintf(stderr, "cltrain: train: %s %s names a checkpoint of --checkpoint-dir %s, which the run writes and "
                      "removes (--keep); write %s to another file\n", f[i].opt, f[i].path, a->o.checkpoint_dir,
              f[i].opt);
      ec = CLI_EXIT_USAGE;
    }
  return ec;
}

static void session_close(session *s, train_args *a) {
  cli_norm_free(&a->norm);
  clt_trainer_destroy(s->tr);
  clt_dataset_destroy(s->train);
  clt_dataset_destroy(s->test);
  clt_devices_destroy(s->sel);
  clt_devices_destroy(s->all);
  clt_model_destroy(s->model);
}

/* --resume FILE|latest */
static int resume(const train_args *a, clt_trainer *tr, clt_comm *comm) {
  char path[PATH_MAX];
  int rc, root = clt_comm_rank(comm) == 0;
  if (strcmp(a->resume, "latest") == 0) {
    const char *dir = a->o.checkpoint_dir ? a->o.checkpoint_dir : DEFAULT_CHECKPOINT_DIR;
    rc = clt_trainer_resume_latest(tr, dir, path, sizeof path);
    if (rc == CLT_ENOTFOUND) {
      if (root) printf("cltrain: --resume latest: %s; starting from the beginning\n", clt_last_error());
      return CLI_EXIT_OK;
    }
  } else {
    snprintf(path, sizeof path, "%s", a->resume);
    rc = clt_trainer_load_checkpoint(tr, a->resume);
  }
  if (rc < 0) return cli_fail(rc, "--resume");
  if (root) {
    clt_sampler_pos pos;
    clt_trainer_position(tr, &pos);
    printf("cltrain: resumed from %s: step %lld, epoch %lld, batch %lld of the epoch\n", path,
           (long long)clt_trainer_steps_done(tr), (long long)pos.epoch + 1, (long long)pos.step);
    fflush(stdout);
  }
  return CLI_EXIT_OK;
}

/* The command line as a JSON array ("cltrain", "train", ...), taken
 * before getopt reorders argv. */
static char *command_json(int argc, char **argv) {
  json_t *cmd = json_array();
  json_array_append_new(cmd, json_string("cltrain"));
  for (int i = 0; i < argc; i++) json_array_append_new(cmd, json_string(argv[i]));
  char *text = json_dumps(cmd, JSON_COMPACT);
  json_decref(cmd);
  return text;
}

/* What the run record (clt_train_options.run_json) takes from us: the
 * command line and the options that are the tool's, not the trainer's. */
static char *run_json(const train_args *a) {
  json_t *o = json_object(), *cli = json_object();
  const char *s;
#define STR(x) ((s = (x)) ? json_string(s) : json_null())
  json_object_set_new(o, "command", a->command ? json_loads(a->command, 0, NULL) : json_null());
  json_object_set_new(cli, "model", STR(a->model));
  json_object_set_new(cli, "data", STR(a->data));
  json_object_set_new(cli, "val", STR(a->val));
  json_object_set_new(cli, "targets", STR(a->targets));
  json_object_set_new(cli, "val_targets", STR(a->val_targets));
  json_object_set_new(cli, "normalize", STR(a->normalize));
  json_object_set_new(cli, "devices", STR(a->devices));
  json_object_set_new(cli, "threads", json_integer(a->threads));
  json_object_set_new(cli, "allreduce", STR(a->allreduce));
  json_object_set_new(cli, "weights", STR(a->weights));
  json_object_set_new(cli, "resume", STR(a->resume));
  json_object_set_new(cli, "save", STR(a->save));
  json_object_set_new(cli, "trace", STR(a->trace));
  json_object_set_new(cli, "quiet", json_boolean(a->quiet));
  json_object_set_new(cli, "progress_s", json_real(a->o.progress_s));
#undef STR
  json_object_set_new(o, "cli", cli);
  char *text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return text;
}

int cmd_train(int argc, char **argv, clt_comm *comm) {
  train_args a;
  int help_asked, rc, ec = CLI_EXIT_OK;
  memset(&a, 0, sizeof a);
  a.command = command_json(argc, argv);
  if ((rc = parse_args(argc, argv, &a, &help_asked)) < 0) {
    free(a.command);
    if (rc == -1) fprintf(stderr, "(cltrain train --help lists the options)\n");
    return argv_error();
  }
  if (help_asked) {
    free(a.command);
    help(stdout);
    return CLI_EXIT_OK;
  }
  /* Timed progress lines where no one sees the live line: a pipe (mpirun,
   * srun), a log file; on a terminal when asked. */
  a.o.progress_s = a.progress >= 0 ? a.progress : a.quiet || isatty(STDERR_FILENO) ? 0 : 10;
  a.o.run_json = a.run_json = run_json(&a);
  /* Before the trainer makes its plans (every rank parsed the same line). */
  if (a.allreduce && (rc = clt_comm_set_allreduce(comm, a.allreduce)) < 0)
    return cli_comm_fail(comm, rc, "--allreduce");
  session s;
  memset(&s, 0, sizeof s);
  /* Rank 0 writes every output: find out now, not after the run, whether
   * it can (a failure here ends the whole job, main.c). */
  if (clt_comm_rank(comm) == 0) {
    const struct { const char *opt, *path; clt_output_kind kind; } outputs[] = {
        {"--save", a.save, CLT_OUTPUT_FILE},
        {"--metrics", a.o.metrics_path, CLT_OUTPUT_APPEND},
        {"--tensorboard", a.o.tensorboard_dir, CLT_OUTPUT_DIR},
        {"--checkpoint-dir", a.o.checkpoint_dir, CLT_OUTPUT_DIR},
        {"--trace", a.trace, CLT_OUTPUT_FILE}};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
      if (outputs[i].path && (rc = clt_check_output(outputs[i].path, outputs[i].kind)) < 0) {
        ec = cli_fail(rc, outputs[i].opt);
        goto out;
      }
  }
  if ((ec = session_open(&a, comm, &s)) != CLI_EXIT_OK) goto out;
  if ((ec = check_batch(&a, &s)) != CLI_EXIT_OK) goto out;
  if (clt_comm_rank(comm) == 0 && (ec = check_files(&a, &s)) != CLI_EXIT_OK) goto out;
  a.o.callback = progress;
  a.o.callback_user = &a;
  int64_t per_epoch = (clt_dataset_count(s.train) + a.o.batch - 1) / a.o.batch;
  if (!a.o.schedule.step_size) a.o.schedule.step_size = per_epoch; /* the step schedule decays once an epoch unless told */
  a.o.schedule.total_steps = a.o.max_steps > 0 ? a.o.max_steps : per_epoch * a.o.epochs;
  if ((rc = clt_trainer_create(s.model, s.sel, comm, &a.o, &s.tr)) < 0) { ec = cli_fail(rc, "train"); goto out; }
  if (clt_comm_rank(comm) == 0) {
    printf("cltrain: training %s (%lld parameters) on %d replica(s) over %d rank(s); batch %lld, %s lr %g%s\n",
           a.model, (long long)clt_model_param_count(s.model), clt_trainer_replicas(s.tr), clt_comm_size(comm),
           (long long)a.o.batch, clt_optimizer_name(a.o.optimizer.kind), a.o.schedule.lr,
           a.o.precision == CLT_F16 ? ", fp16" : "");
    int lines[65], P = clt_trainer_stages(s.tr, lines, 64);
    if (P > 1) {
      printf("cltrain: pipeline of %d stages x %d replica(s), %d micro-batches, %s:", P, clt_trainer_replicas(s.tr),
             a.o.micro_batches ? a.o.micro_batches : P, a.o.pipeline_schedule == CLT_PIPELINE_GPIPE ? "gpipe" : "1f1b");
      for (int i = 0; i < P && i < 64; i++) printf("%s stage %d lines %d-%d", i ? "," : "", i, lines[i], lines[i + 1] - 1);
      printf("\n");
    }
    fflush(stdout);
  }
  if (a.weights && (rc = clt_trainer_load_weights(s.tr, a.weights)) < 0) { ec = cli_fail(rc, "--weights"); goto out; }
  if (a.resume && (ec = resume(&a, s.tr, comm)) != CLI_EXIT_OK) goto out;
  /* after --weights, which brings the normalisation it was trained with: the data's own is what this run uses */
  if (a.user_data && (rc = clt_trainer_set_normalization(s.tr, a.norm.kind, a.norm.shift, a.norm.scale)) < 0) {
    ec = cli_fail(rc, "--normalize");
    goto out;
  }
  if (a.trace && (rc = clt_trainer_trace_start(s.tr)) < 0) { ec = cli_fail(rc, "--trace"); goto out; }
  if ((rc = clt_trainer_fit(s.tr, s.train, s.test)) < 0) { ec = cli_fail(rc, "train"); goto out; }
  if (a.trace) {
    if ((rc = clt_trainer_trace_save(s.tr, a.trace)) < 0) { ec = cli_fail(rc, "--trace"); goto out; }
    if (clt_comm_rank(comm) == 0) printf("cltrain: wrote the timeline to %s\n", a.trace);
  }
  if (a.save) {
    if ((rc = clt_trainer_save_weights(s.tr, a.save)) < 0) { ec = cli_fail(rc, "--save"); goto out; }
    if (clt_comm_rank(comm) == 0) printf("cltrain: saved the weights to %s\n", a.save);
  }
out:
  session_close(&s, &a);
  free(a.command);
  free(a.run_json);
  return ec;
}

static void eval_help(FILE *to) {
  fprintf(to, "usage: cltrain eval MODEL --weights FILE [OPTIONS]\n"
              "\n"
              "Loss and accuracy of saved weights on the test split of the data, split over\n"
              "the selected devices of every rank.\n"
              "\n"
              "  -w, --weights FILE    weights saved by 'cltrain train --save', or a checkpoint\n"
              "                        (required)\n"
              "  -D, --data DIR|FILE   as for train (default %s); a language model is evaluated\n"
              "                        on --val FILE, or on --data FILE.bin when there is none;\n"
              "                        your own data (--data FILE) on --val, else on all of it,\n"
              "                        normalised as the weights' metadata says\n"
              "      --labels FILE     as for train\n"
              "      --target COLS     as for train\n"
              "      --features COLS   as for train\n"
              "      --val-labels FILE as for train\n"
              "      --val FRACTION|FILE  as for train: the part evaluated\n"
              "      --val-targets FILE  --val's targets shard (as train's)\n"
              "      --normalize MODE  IDX: as for train, standard or none (default standard)\n"
              "  -b, --batch N         samples per device batch (default 256)\n"
              "  -d, --devices SPEC    as for train\n"
              "      --threads N       as for train\n"
              "  -h, --help            this text\n", DEFAULT_DATA);
}

int cmd_eval(int argc, char **argv, clt_comm *comm) {
  static const struct option opts[] = {{"weights", required_argument, 0, 'w'}, {"data", required_argument, 0, 'D'},
                                       {"val", required_argument, 0, 'V'},
                                       {"val-targets", required_argument, 0, 'T'},
                                       {"normalize", required_argument, 0, 'n'}, {"batch", required_argument, 0, 'b'},
                                       {"devices", required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'},
                                       {"threads", required_argument, 0, 't'},
                                       {"labels", required_argument, 0, 'L'}, {"target", required_argument, 0, 'G'},
                                       {"features", required_argument, 0, 'F'},
                                       {"val-labels", required_argument, 0, 'K'}, {0}};
  train_args a;
  long long v;
  int c, rc, ec = CLI_EXIT_OK;
  memset(&a, 0, sizeof a);
  clt_train_options_defaults(&a.o);
  a.o.batch = 256;
  a.normalize = "standard";
  a.eval = 1;
  while ((c = cli_getopt(argc, argv, "w:D:b:d:h", opts, "eval")) != -1) {
    switch (c) {
    case 'w': a.weights = optarg; break;
    case 'D': a.data = optarg; break;
    case 'V': a.val = optarg; break;
    case 'T': a.val_targets = optarg; break;
    case 'n':
      if (parse_normalize(optarg, &a) < 0) return argv_error();
      break;
    case 'L': a.labels = optarg; break;
    case 'G': a.target = optarg; break;
    case 'F': a.features = optarg; break;
    case 'K': a.val_labels = optarg; break;
    case 'b': if (parse_long("--batch", optarg, 1, 1 << 20, &v)) return argv_error(); a.o.batch = v; break;
    case 'd': a.devices = optarg; break;
    case 't': if (parse_long("--threads", optarg, 1, 4096, &v)) return argv_error(); a.threads = (int)v; break;
    case 'h': eval_help(stdout); return CLI_EXIT_OK;
    default: return argv_error();
    }
  }
  if (optind != argc - 1 || !a.weights) {
    fprintf(stderr, "cltrain: eval: one MODEL spec file and --weights FILE are needed\n");
    return argv_error();
  }
  a.model = argv[optind];
  session s;
  double loss, acc;
  if ((ec = session_open(&a, comm, &s)) != CLI_EXIT_OK) goto out;
  if (!s.test && a.vocab) { /* a language model evaluates on --val, else on --data itself */
    s.test = s.train;
    s.train = NULL;
  }
  if (!s.test) {
    fprintf(stderr, "cltrain: eval: the data has no test split (t10k-*-idx?-ubyte[.gz])\n");
    ec = CLI_EXIT_ERROR;
    goto out;
  }
  /* Evaluation runs batches of at most the test set: replicas made for
   * more would only take memory (each still needs a sample: at least one
   * per replica, as far as this rank can tell). */
  int64_t count = clt_dataset_count(s.test), least = (int64_t)clt_comm_size(comm) * clt_devices_count(s.sel);
  if (a.o.batch > count) a.o.batch = count > least ? count : least;
  if ((rc = clt_trainer_create(s.model, s.sel, comm, &a.o, &s.tr)) < 0) { ec = cli_fail(rc, "eval"); goto out; }
  if ((rc = clt_trainer_load_weights(s.tr, a.weights)) < 0) { ec = cli_fail(rc, "--weights"); goto out; }
  if ((rc = clt_trainer_evaluate(s.tr, s.test, &loss, &acc)) < 0) { ec = cli_fail(rc, "eval"); goto out; }
  if (clt_comm_rank(comm) == 0) {
    print_eval(&a, "", loss, acc);
    printf(" (%lld samples)\n", (long long)clt_dataset_count(s.test));
  }
out:
  session_close(&s, &a);
  return ec;
}

/* `cltrain export CKPT OUT`: a checkpoint's weights alone. */
int cmd_export(int argc, char **argv) {
  static const struct option opts[] = {{"help", no_argument, 0, 'h'}, {0}};
  int c;
  while ((c = cli_getopt(argc, argv, "h", opts, "export")) != -1) {
    if (c != 'h') return CLI_EXIT_USAGE;
    printf("usage: cltrain export CHECKPOINT OUT.safetensors\n"
           "\n"
           "Writes the parameters of a checkpoint (after checking it) as a weights file with\n"
           "PyTorch nn.Sequential names (\"0.weight\", ...), the file 'train --save' writes:\n"
           "'eval --weights' and 'train --weights' read it, and so does\n"
           "torch.nn.Sequential(...).load_state_dict(safetensors.torch.load_file(OUT)).\n");
    return CLI_EXIT_OK;
  }
  if (argc - optind != 2) {
    fprintf(stderr, "cltrain: export: a CHECKPOINT and an OUT.safetensors file are needed, %s (cltrain export "
                    "CHECKPOINT OUT.safetensors)\n", argc - optind < 2 ? "not fewer" : "no more");
    return CLI_EXIT_USAGE;
  }
  argv += optind - 1;
  /* OUT first: a device, a FIFO, a missing directory are refused before the checkpoint is read. */
  int rc = clt_check_output(argv[2], CLT_OUTPUT_FILE);
  if (rc == CLT_OK) rc = clt_checkpoint_export(argv[1], argv[2]);
  if (rc < 0) return cli_fail(rc, "export");
  printf("cltrain: wrote the weights of %s to %s\n", argv[1], argv[2]);
  return CLI_EXIT_OK;
}
