/*
 * checkpoint.c: a trainer's whole state to and from one .safetensors file
 * (doc/checkpoint.md): the parameters and optimizer state as tensors
 * ("params/0.weight", "optim/m/0.weight", ...), and as metadata everything
 * else a run needs to go on exactly where it stopped: optimizer steps,
 * dropout counter, sampler position, the epoch's sums so far, the balancer's
 * shares. Rank 0 writes (every replica holds the same bits) and rank 0 reads
 * and broadcasts, so a checkpoint resumes on any number of ranks and
 * devices, of any vendor. Directories of checkpoints (periodic saves,
 * rotation, "latest") are in checkpoint_dir.c.
 */
#include "train/checkpoint.h"
#include "pp/pp.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/optim.h"
#include "io/safetensors.h"
#include "io/weights.h"

/* Names of the optimizer-state tensors: "optim/<slot>/", the name of the
 * optimizer's state slot in its row of the table (src/core/optim.c), slot
 * after slot in the order the state arena holds them. */
static const char *state_prefix(const clt_trainer *t, int slot, char *buf, size_t size) {
  snprintf(buf, size, "optim/%s/", clt__optimizer_of(t->opts.optimizer.kind)->slots[slot]);
  return buf;
}

/* ---- saving ---------------------------------------------------------------- */

static json_t *position_json(const clt_trainer *t) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I}", "epoch", (json_int_t)t->progress.pos.epoch, "step", (json_int_t)t->progress.pos.step,
                   "micro_batch", (json_int_t)t->s.micro_batch, "samples_in_epoch",
                   (json_int_t)(t->progress.pos.step * t->s.micro_batch), "train_samples", (json_int_t)t->progress.count);
}

/* A float32 setting as the shortest decimal that reads back as the same
 * float ("0.9", not 0.89999997615814209). */
static json_t *real(float f) {
  char buf[32];
  for (int digits = 1; digits <= 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
    if (strtof(buf, NULL) == f) break;
  }
  return json_real(strtod(buf, NULL));
}

static json_t *optimizer_json(const clt_train_options *o) {
  const clt_optimizer_config *c = &o->optimizer;
  const clt_schedule *s = &o->schedule;
  return json_pack("{s:s, s:o, s:b, s:o, s:o, s:o, s:o, s:o, s:s, s:o, s:I, s:I, s:I, s:o, s:o}", "kind",
                   clt_optimizer_name(c->kind), "momentum", real(c->momentum), "nesterov", c->nesterov,
                   "weight_decay", real(c->weight_decay), "beta1", real(c->beta1), "beta2", real(c->beta2), "eps",
                   real(c->eps), "clip", real(o->clip), "schedule", clt_schedule_name(s->kind), "lr", real(s->lr),
                   "warmup_steps", (json_int_t)s->warmup_steps, "total_steps", (json_int_t)s->total_steps,
                   "step_size", (json_int_t)s->step_size, "gamma", real(s->gamma), "min_lr", real(s->min_lr));
}

static json_t *training_json(const clt_trainer *t) {
  static const char *const balance[] = {"equal", "weights", "auto"};
  json_t *shares = json_array();
  for (int r = 0; r < clt__dp_replicas(t->s.dp); r++) json_array_append_new(shares, json_integer(clt__dp_shares(t->s.dp)[r]));
  return json_pack("{s:I, s:I, s:i, s:i, s:s, s:o}", "batch", (json_int_t)t->opts.batch, "accumulate",
                   (json_int_t)t->opts.accumulate, "ranks", t->nranks, "replicas", clt__dp_replicas(t->s.dp), "balance",
                   (unsigned)t->opts.balance < 3 ? balance[t->opts.balance] : "?", "shares", shares);
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A fresh run's id: 64 random bits as hex (the clock and pid if
 * /dev/urandom cannot be read). */
static void new_run_id(char *out, size_t size) {
  uint64_t r = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
  FILE *f = fopen("/dev/urandom", "rb");
  if (f) {
    if (fread(&r, sizeof r, 1, f) != 1) r ^= (uint64_t)now_ns();
    fclose(f);
  }
  snprintf(out, size, "%016llx", (unsigned long long)r);
}

/* The run record; a run that neither resumed nor saved before gets its
 * identity now (doc/checkpoint.md). */
static json_t *run_json(clt_trainer *t) {
  if (!t->run.id[0]) {
    new_run_id(t->run.id, sizeof t->run.id);
    t->run.branch = 0;
    t->run.started = now_ns();
  }
  return json_pack("{s:s, s:I, s:I}", "id", t->run.id, "branched_from", (json_int_t)t->run.branch, "started",
                   (json_int_t)t->run.started);
}

/* The metadata's JSON values, as strings (safetensors metadata is a map of
 * strings to strings). */
static char *dump(json_t *v, size_t flags) {
  char *s = v ? json_dumps(v, JSON_COMPACT | flags) : NULL;
  json_decref(v);
  return s;
}

/* Rank 0: write the gathered parameters and state, or with `shards` (the
 * index's record of them, checkpoint_shards.c) an index of no tensors. */
int clt__checkpoint_write(clt_trainer *t, const char *path, const float *buf, const char *shards) {
  int rc = CLT_OK, n = 0;
  const clt_model_spec *spec = t->model->spec;
  int64_t P = spec->param_count;
  int per = clt_optimizer_state_per_param(&t->opts.optimizer);
  clt__st_tensor *tensors = clt__calloc((size_t)spec->nlayers * CLT_MAX_LAYER_PARAMS * (1 + per), sizeof *tensors);
  char *position = NULL, *rng = NULL, *optim = NULL, *training = NULL, *progress = NULL, *scaling = NULL, *run = NULL;
  if (!tensors) { rc = CLT_ENOMEM; goto fail; }
  double t0 = clt__now();
  int k;
  char pre[64];
  if (!shards) CLT_TRY(clt__arena_tensors(spec, "params/", buf, tensors, &n));
  for (int slot = 0; !shards && slot < per; slot++) {
    CLT_TRY(clt__arena_tensors(spec, state_prefix(t, slot, pre, sizeof pre), buf + (size_t)P * (1 + slot), tensors + n, &k));
    n += k;
  }

  char step[32], epoch[32], params[32], seed[32], scale[32];
  snprintf(scale, sizeof scale, "%.17g", t->scaler.scale);
  snprintf(step, sizeof step, "%lld", (long long)t->steps_done);
  snprintf(epoch, sizeof epoch, "%lld", (long long)t->progress.pos.epoch);
  snprintf(params, sizeof params, "%lld", (long long)P);
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)t->opts.seed);
  position = dump(position_json(t), 0);
  rng = dump(json_pack("{s:s, s:s, s:I}", "generator", "philox4x32-10", "seed", seed, "dropout_step",
                       (json_int_t)t->micro_steps), 0);
  optim = dump(optimizer_json(&t->opts), JSON_REAL_PRECISION(9)); /* 9 digits hold any float */
  training = dump(training_json(t), 0);
  progress = dump(json_pack("{s:I, s:f, s:f, s:f}", "steps", (json_int_t)t->progress.ep_steps, "loss_sum", t->progress.ep_sums[0],
                            "correct", t->progress.ep_sums[1], "samples", t->progress.ep_sums[2]), 0); /* 17 digits: exact */
  run = dump(run_json(t), 0);
  scaling = dump(json_pack("{s:s, s:I, s:I}", "precision", t->opts.precision == CLT_F16 ? "fp16" : "fp32",
                           "clean_steps", (json_int_t)t->scaler.clean_steps, "skipped", (json_int_t)t->scaler.skipped), 0);
  if (!position || !rng || !optim || !training || !progress || !scaling || !run) { rc = clt__error(CLT_ENOMEM, "%s: out of memory", path); goto fail; }
  const char *meta[] = {"format", CLT__CKPT_FORMAT, "format_version",
                        shards ? CLT__CKPT_SHARDED_VERSION_STR : CLT__CKPT_VERSION_STR, "cltrain_version",
                        clt_version(), "model", clt_model_text(t->model), "param_count", params, "step", step,
                        "epoch", epoch, "sampler_position", position, "rng", rng, "loss_scale", scale,
                        "loss_scaling", scaling, "optimizer", optim, "training", training,
                        "epoch_progress", progress, "run", run, shards ? "shards" : NULL, shards, NULL};
  CLT_TRY(clt__st_write(path, tensors, n, meta));
  char size[32];
  clt__log(CLT_LOG_INFO, "saved checkpoint %s (step %lld, %s%s) in %.3f s", path, (long long)t->steps_done,
           clt__fmt_bytes((uint64_t)P * (1 + per) * 4, size, sizeof size), shards ? " in shards" : "",
           clt__now() - t0);
fail:
  free(tensors);
  free(position), free(rng), free(optim), free(training), free(progress), free(scaling), free(run);
  return rc;
}

int clt__checkpoint_gather(clt_trainer *t, float **out) {
  int64_t P = clt_model_param_count(t->model);
  int per = clt_optimizer_state_per_param(&t->opts.optimizer);
  float *buf = clt__calloc((size_t)(P * (1 + per)) + 1, sizeof *buf);
  int rc = clt__trainer_all_ok(t, buf ? CLT_OK : CLT_ENOMEM, "allocating for a checkpoint");
  if (rc == CLT_OK) rc = t->s.i->get_state(t->s.self, buf, per ? buf + P : NULL, 0);
  if (rc < 0) free(buf), buf = NULL;
  *out = buf;
  return rc;
}

int clt_trainer_save_checkpoint(clt_trainer *t, const char *path) {
  float *buf;
  CLT_HANDLE(t, "trainer");
  /* only rank 0 writes, but every rank learns of a bad path, so none waits */
  int rc = clt__trainer_args_ok(t, clt__path_arg(__func__, "path", path), "clt_trainer_save_checkpoint");
  if (rc < 0) return rc;
  int sharded;
  clt__state_shard sh;
  rc = clt__checkpoint_shard(t, &sharded, &sh);
  if (rc < 0 || sharded) {
    if (rc == CLT_OK) rc = clt__checkpoint_save_sharded(t, path, &sh);
    clt__state_shard_free(&sh);
    return rc;
  }
  rc = clt__checkpoint_gather(t, &buf);
  if (rc < 0) return rc;
  rc = t->rank == 0 ? clt__checkpoint_write(t, path, buf, NULL) : CLT_OK;
  free(buf);
  return clt__trainer_share_status(t, rc);
}

/* ---- reading ----------------------------------------------------------------- */

static const char *shape_str(const clt__st_tensor *t, char *buf, size_t len) {
  size_t at = (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < t->ndim && at < len; d++)
    at += (size_t)snprintf(buf + at, len - at, d ? ", %lld" : "%lld", (long long)t->shape[d]);
  if (at < len) snprintf(buf + at, len - at, ")");
  return buf;
}

int clt__checkpoint_open(const char *path, int check_data, clt__st_file **out) {
  int rc = CLT_OK;
  clt__st_file *f = NULL;
  *out = NULL;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return clt__error(CLT_EINVAL, "%s is a directory, not a checkpoint file; to go on from the newest checkpoint in "
                      "it, resume 'latest' with it as the checkpoint directory (--resume latest --checkpoint-dir %s)",
                      path, path);
  CLT_TRY(clt__st_open(path, &f));
  const char *format = clt__st_metadata(f, "format"), *version = clt__st_metadata(f, "format_version");
  if (!format || strcmp(format, CLT__CKPT_FORMAT) != 0) {
    if (format && strcmp(format, "cltrain-weights") == 0)
      rc = clt__error(CLT_EFORMAT, "%s holds weights only, not a checkpoint (no optimizer state or position); start "
                      "from it with --weights (clt_trainer_load_weights)", path);
    else
      rc = clt__error(CLT_EFORMAT, "%s is a safetensors file but not a cltrain checkpoint (its metadata 'format' is "
                      "'%s', not '" CLT__CKPT_FORMAT "')", path, format ? format : "(none)");
    goto fail;
  }
  int64_t v = 0;
  CLT_TRY(clt__ckpt_meta_whole(f, path, "format_version", 0, INT64_MAX, &v));
  if (v != CLT__CKPT_VERSION && v != CLT__CKPT_SHARDED_VERSION) {
    rc = clt__error(CLT_EFORMAT, "%s is checkpoint format version %s; this cltrain (%s) reads versions %d (one file) "
                    "and %d (an index of shards)%s", path, version, clt_version(), CLT__CKPT_VERSION,
                    CLT__CKPT_SHARDED_VERSION, v > CLT__CKPT_SHARDED_VERSION ? ": a newer cltrain wrote it" : "");
    goto fail;
  }
  /* Every checkpoint cltrain writes carries both CRCs and the data size:
   * one without is not whole (or not ours), and is not read unchecked. */
  const char *missing = !clt__st_metadata(f, "header_crc32") ? "header_crc32"
                        : !clt__st_metadata(f, "data_bytes") ? "data_bytes" : NULL;
  if (missing) {
    rc = clt__error(CLT_EFORMAT, "%s: the metadata '%s' is missing, which every checkpoint cltrain writes carries; "
                    "the file is damaged or was not written by cltrain", path, missing);
    goto fail;
  }
  if (check_data) CLT_TRY(clt__st_check_data(f, 1));
  /* An index: every shard it names there, whole (with check_data, to its data's CRC32). */
  if (v == CLT__CKPT_SHARDED_VERSION) {
    clt__ckpt_shards sh;
    CLT_TRY(clt__ckpt_shards_parse(f, path, &sh));
    rc = clt__ckpt_shards_check(&sh, path, check_data);
    clt__ckpt_shards_free(&sh);
    if (rc < 0) goto fail;
  }
  *out = f;
  return CLT_OK;
fail:
  clt__st_close(f);
  return rc;
}

/* Check that the file's tensors named prefix + the model's names exist
 * with the model's shapes, and read them into dst (the arena layout). */
static int read_arena(clt_trainer *t, clt__st_file *f, const char *path, const char *prefix, float *dst,
                      const char *saved_spec) {
  const clt_model_spec *spec = t->model->spec;
  int rc = CLT_OK, n;
  char diff[400], s1[96], s2[96];
  clt__st_tensor *want = clt__calloc((size_t)spec->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *want);
  if (!want) return CLT_ENOMEM;
  CLT_TRY(clt__arena_tensors(spec, prefix, dst, want, &n));
  for (int i = 0; i < n; i++) {
    clt__st_tensor have;
    int64_t count = 1;
    for (int d = 0; d < want[i].ndim; d++) count *= want[i].shape[d];
    rc = clt__st_find(f, want[i].name, &have);
    if (rc == CLT_ENOTFOUND) {
      clt__spec_difference(saved_spec, "the checkpoint's", spec, diff, sizeof diff);
      rc = clt__error(CLT_ESHAPE, "%s does not fit the model %s: it has no tensor '%s', which the model needs%s", path,
                      spec->name, want[i].name, diff);
      goto fail;
    }
    if (rc < 0) goto fail;
    int same = have.ndim == want[i].ndim;
    for (int d = 0; same && d < have.ndim; d++) same = have.shape[d] == want[i].shape[d];
    if (!same) {
      clt__spec_difference(saved_spec, "the checkpoint's", spec, diff, sizeof diff);
      rc = clt__error(CLT_ESHAPE, "%s does not fit the model %s: tensor '%s' is %s in the file and %s in the model%s",
                      path, spec->name, want[i].name, shape_str(&have, s1, sizeof s1), shape_str(&want[i], s2, sizeof s2),
                      diff);
      goto fail;
    }
    CLT_TRY(clt__st_read(f, &have, (float *)want[i].data, count));
  }
fail:
  free(want);
  return rc;
}

int clt__checkpoint_run_info(const char *path, int check_data, clt__run_info *out) {
  clt__st_file *f = NULL;
  int rc = clt__checkpoint_open(path, check_data, &f);
  memset(out, 0, sizeof *out);
  if (rc == CLT_OK) rc = clt__ckpt_run_read(f, path, out);
  clt__st_close(f);
  return rc;
}

/* The file holds the model's parameters and its optimizer kind's state
 * "and no more": a tensor of another name is a file edited or written for
 * another model, and is refused rather than ignored. */
static int check_no_others(clt_trainer *t, clt__st_file *f, const char *path, const char *kind) {
  const clt_model_spec *spec = t->model->spec;
  const int nslots = clt__optimizer_of(t->opts.optimizer.kind)->nslots; /* the file's kind: read_checkpoint checked */
  char prefixes[1 + CLT__OPTIM_MAX_SLOTS][64] = {"params/"};
  const char *list[2 + CLT__OPTIM_MAX_SLOTS] = {prefixes[0]};
  for (int slot = 0; slot < nslots; slot++)
    list[1 + slot] = state_prefix(t, slot, prefixes[1 + slot], sizeof prefixes[1 + slot]);
  list[1 + nslots] = NULL;
  const char *name = clt__weights_stranger(f, spec, list, NULL);
  if (name)
    return clt__error(CLT_EFORMAT, "%s holds a tensor '%s' that is neither a parameter of the model %s nor %s "
                      "optimizer state; the file was edited, or written for another model", path, name, spec->name,
                      kind);
  return CLT_OK;
}

/* The model: every parameter tensor with its shape (into payload), and a
 * warning when the parameters fit but the spec saved is another. */
static int read_model(clt_trainer *t, clt__st_file *f, const char *path, const clt__ckpt_meta *m, float *payload) {
  int rc = CLT_OK;
  const clt_model_spec *spec = t->model->spec;
  const char *saved_spec = m->spec;
  int64_t P = spec->param_count, file_params = m->param_count;
  char diff[400];
  CLT_TRY(read_arena(t, f, path, "params/", payload, saved_spec));
  clt__spec_difference(saved_spec, "the checkpoint's", spec, diff, sizeof diff);
  if (file_params != P)
    return clt__error(CLT_ESHAPE, "%s does not fit the model %s: it holds %lld parameters, the model has %lld%s", path,
                      spec->name, (long long)file_params, (long long)P, diff);
  if (diff[0])
    clt__log(CLT_LOG_WARN, "%s: the parameters fit the model %s, but its spec is not the one saved%s", path,
             spec->name, diff);
fail:
  return rc;
}

/* The optimizer: the same kind, the state this run needs (into payload
 * after the parameters, slot after slot), and no tensor of another name. */
static int read_optimizer(clt_trainer *t, clt__st_file *f, const char *path, const clt__ckpt_meta *m, float *payload) {
  int rc = CLT_OK;
  const clt_model_spec *spec = t->model->spec;
  const char *saved_spec = m->spec, *kind = clt_optimizer_name(m->optimizer.kind);
  int64_t P = spec->param_count;
  int per = clt_optimizer_state_per_param(&t->opts.optimizer);
  if (m->optimizer.kind != t->opts.optimizer.kind)
    return clt__error(CLT_EMISMATCH, "%s holds the state of the %s optimizer but this run uses %s; resume with "
                      "--optimizer %s, or start from its weights alone with --weights", path, kind,
                      clt_optimizer_name(t->opts.optimizer.kind), kind);
  int first = 1; /* the first layer with parameters: its weight's state tells whether there is any */
  while (first < spec->nlayers && !spec->layers[first].param_count) first++;
  const char *first_name = first < spec->nlayers ? spec->layers[first].param[0].name : "";
  char pre[64];
  for (int slot = 0; slot < per; slot++) {
    char probe[160];
    clt__st_tensor dummy;
    snprintf(probe, sizeof probe, "%s%d.%s", state_prefix(t, slot, pre, sizeof pre), first - 1, first_name);
    if (first < spec->nlayers && clt__st_find(f, probe, &dummy) == CLT_ENOTFOUND) {
      /* SGD saved without momentum has no state; this run needs some. */
      rc = clt__error(CLT_EMISMATCH, "%s has no %s optimizer state ('%s'): it was trained without momentum, and this "
                      "run uses momentum %g; resume with --momentum 0, or start from its weights with --weights",
                      path, kind, probe, (double)t->opts.optimizer.momentum);
      goto fail;
    }
    CLT_TRY(read_arena(t, f, path, pre, payload + (size_t)P * (1 + slot), saved_spec));
  }
  if (per == 0 && first < spec->nlayers) {
    char probe[160];
    clt__st_tensor dummy;
    snprintf(probe, sizeof probe, "%s%d.%s", state_prefix(t, 0, pre, sizeof pre), first - 1, first_name);
    if (clt__st_find(f, probe, &dummy) == CLT_OK)
      clt__log(CLT_LOG_WARN, "%s: this run uses no momentum, so the saved momentum is left out", path);
  }
  CLT_TRY(check_no_others(t, f, path, kind));
fail:
  return rc;
}

/* The steps done, the dropout key and the seed (which must be this run's),
 * and an fp16 checkpoint's loss scaling. */
static int read_rng_and_scale(clt_trainer *t, const clt__ckpt_meta *m, const char *path, clt__ckpt_header *h) {
  char mine[32];
  h->steps_done = m->steps_done;
  h->micro_steps = m->dropout_step;
  snprintf(mine, sizeof mine, "%llu", (unsigned long long)t->opts.seed);
  if (strcmp(m->seed, mine) != 0)
    return clt__error(CLT_EMISMATCH, "%s was trained with seed %s and this run has seed %s: the sample order and "
                      "dropout would not continue; resume with --seed %s", path, m->seed, mine, m->seed);
  /* An f16 run goes on with an f16 checkpoint's loss scaling; from an f32
   * one (or one older than 'loss_scaling') it starts afresh. */
  h->loss_scale = 0;
  if (t->opts.precision == CLT_F16 && m->fp16) {
    h->loss_scale = m->loss_scale;
    h->scale_clean_steps = m->clean_steps;
    h->skipped = m->skipped;
  }
  return CLT_OK;
}

/* The sampler position, in this run's micro-batches: the sample order of
 * an epoch does not depend on the batch size, so a position at a whole
 * number of this run's micro-batches carries over. */
static int read_position(clt_trainer *t, const clt__ckpt_meta *m, const char *path, clt__ckpt_header *h) {
  int64_t mb = m->micro_batch, samples = m->pos.step * mb; /* checked: no overflow, within the training set */
  h->epoch = m->pos.epoch;
  h->step = m->pos.step;
  h->count = m->train_samples;
  if (mb != t->s.micro_batch) {
    if (samples % t->s.micro_batch)
      return clt__error(CLT_EMISMATCH, "%s stopped after %lld samples of epoch %lld, in micro-batches of %lld; this "
                        "run's micro-batches of %lld do not end there (batch / accumulate); resume with a batch that "
                        "divides it", path, (long long)samples, (long long)h->epoch + 1, (long long)mb,
                        (long long)t->s.micro_batch);
    clt__log(CLT_LOG_WARN, "%s was trained with micro-batches of %lld samples, this run takes %lld: it goes on "
             "after sample %lld of epoch %lld", path, (long long)mb, (long long)t->s.micro_batch, (long long)samples,
             (long long)h->epoch + 1);
    h->step = samples / t->s.micro_batch;
  }
  return CLT_OK;
}

/* The epoch's sums so far, and the balancer's shares when they apply. */
static void read_progress(clt_trainer *t, const clt__ckpt_meta *m, clt__ckpt_header *h, int64_t *shares) {
  int R = clt__dp_replicas(clt__trainer_dp(t));
  h->ep_steps = m->ep_steps;
  memcpy(h->ep_sums, m->ep_sums, sizeof h->ep_sums);
  if (t->opts.balance != CLT_BALANCE_AUTO || m->replicas != R || m->micro_batch != t->s.micro_batch) return;
  for (int r = 0; r < R; r++)
    if (m->shares[r] < t->opts.balance_min_share) return;
  memcpy(shares, m->shares, (size_t)R * sizeof *shares);
  h->nshares = R;
}

/* Rank 0: read and check everything of path into h and payload (params,
 * then state). Nothing of the trainer changes here. */
static int read_checkpoint(clt_trainer *t, const char *path, clt__ckpt_header *h, int64_t *shares, float *payload) {
  int rc = CLT_OK;
  clt__st_file *f = NULL;
  clt__ckpt_meta m = {0};
  double t0 = clt__now();
  memset(h, 0, sizeof *h);
  clt__strlcpy(h->path, path, sizeof h->path);
  CLT_TRY(clt__checkpoint_open(path, 1, &f)); /* magic, version, both CRCs, size */
  CLT_TRY(clt__ckpt_meta_read(f, path, &m));  /* every field what some run can have written */
  if (clt__ckpt_is_sharded(f)) { /* an index: the model and optimizer state from its shards */
    CLT_TRY(clt__ckpt_read_sharded(t, f, path, &m, payload));
    CLT_TRY(clt__ckpt_meta_check_labels(&m, path, clt_model_labels_per_sample(t->model)));
  } else {
    CLT_TRY(read_model(t, f, path, &m, payload));
    CLT_TRY(clt__ckpt_meta_check_labels(&m, path, clt_model_labels_per_sample(t->model)));
    CLT_TRY(read_optimizer(t, f, path, &m, payload));
  }
  CLT_TRY(read_rng_and_scale(t, &m, path, h));
  clt__strlcpy(h->run_id, m.run.id, sizeof h->run_id);
  CLT_TRY(read_position(t, &m, path, h));
  read_progress(t, &m, h, shares);
  clt__log(CLT_LOG_INFO, "read checkpoint %s (step %lld, epoch %lld, batch %lld of the epoch) and checked it in %.3f s",
           path, (long long)h->steps_done, (long long)h->epoch + 1, (long long)h->step, clt__now() - t0);
fail:
  clt__ckpt_meta_free(&m);
  clt__st_close(f);
  return rc;
}

int clt__checkpoint_read(clt_trainer *t, const char *path, clt__ckpt_header *h, int64_t *shares, float *payload) {
  int rc = read_checkpoint(t, path, h, shares, payload);
  h->rc = rc;
  return rc;
}

/* Every rank: take rank 0's header, shares and payload, and put them in
 * place on every local replica. */
int clt__checkpoint_apply(clt_trainer *t, clt__ckpt_header *h, int64_t *shares, float *payload) {
  int rc = CLT_OK;
  int64_t P = clt_model_param_count(t->model);
  int per = clt_optimizer_state_per_param(&t->opts.optimizer);
  if (t->nranks > 1) {
    if (t->rank == 0) clt__strlcpy(h->msg, clt_last_error(), sizeof h->msg);
    CLT_TRY(clt_bcast(t->comm, h, sizeof *h, 0));
    if (h->rc < 0) return t->rank == 0 ? h->rc : clt__error(h->rc, "%s", h->msg);
    if (h->nshares > 0) CLT_TRY(clt_bcast(t->comm, shares, (size_t)h->nshares * sizeof *shares, 0));
    CLT_TRY(clt_bcast(t->comm, payload, (size_t)P * (1 + per) * sizeof *payload, 0));
  }
  if (h->rc < 0) return h->rc;
  /* The file holds the whole state: the strategy puts each rank's part of it on its replicas. */
  CLT_TRY(t->s.i->set_state(t->s.self, payload, per ? payload + P : NULL));
  t->steps_done = h->steps_done;
  t->micro_steps = h->micro_steps;
  if (t->opts.precision == CLT_F16) {
    t->scaler.scale = h->loss_scale > 0 ? h->loss_scale : t->opts.loss_scale;
    t->scaler.clean_steps = h->loss_scale > 0 ? h->scale_clean_steps : 0;
    t->scaler.skipped = h->loss_scale > 0 ? h->skipped : 0;
    t->scaler.in_row = 0;
  }
  t->progress.pos.epoch = h->epoch;
  t->progress.pos.step = h->step;
  t->progress.count = h->count;
  t->progress.ep_steps = h->ep_steps;
  memcpy(t->progress.ep_sums, h->ep_sums, sizeof t->progress.ep_sums);
  t->run.saved_step = h->steps_done; /* no need to save this state again */
  /* A resumed run goes on under the checkpoint's run id (a new one for a
   * file older than the record), as a session branched from this step. */
  if (h->run_id[0])
    clt__strlcpy(t->run.id, h->run_id, sizeof t->run.id);
  else
    t->run.id[0] = 0, new_run_id(t->run.id, sizeof t->run.id);
  t->run.branch = h->steps_done;
  t->run.started = now_ns();
  if (h->nshares == clt__dp_replicas(t->s.dp)) CLT_TRY(clt__dp_set_shares(t->s.dp, shares)); /* checked when read; collective */
  return CLT_OK;
fail:
  return clt__error_prefix(rc, "loading checkpoint %s", h->path);
}

int clt__checkpoint_alloc(clt_trainer *t, clt__ckpt_header **h, int64_t **shares, float **payload) {
  int64_t P = clt_model_param_count(t->model);
  int per = clt_optimizer_state_per_param(&t->opts.optimizer);
  *h = clt__calloc(1, sizeof **h);
  *shares = clt__calloc((size_t)clt__dp_replicas(t->s.dp), sizeof **shares);
  *payload = clt__calloc((size_t)P * (1 + per), sizeof **payload);
  if (*h && *shares && *payload) return CLT_OK;
  free(*h), free(*shares), free(*payload);
  *h = NULL, *shares = NULL, *payload = NULL;
  return CLT_ENOMEM;
}

int clt_trainer_load_checkpoint(clt_trainer *t, const char *path) {
  clt__ckpt_header *h = NULL;
  int64_t *shares = NULL;
  float *payload = NULL;
  CLT_HANDLE(t, "trainer");
  /* Every rank checks the path and allocates first, and all learn whether
   * all could, so no rank is left alone in the broadcasts. */
  int rc = clt__path_arg(__func__, "path", path);
  if (rc == CLT_OK) rc = clt__checkpoint_alloc(t, &h, &shares, &payload);
  rc = clt__trainer_args_ok(t, rc, "allocating for a checkpoint");
  if (rc < 0) {
    free(h), free(shares), free(payload);
    return rc;
  }
  if (t->rank == 0) clt__checkpoint_read(t, path, h, shares, payload);
  rc = clt__checkpoint_apply(t, h, shares, payload);
  free(h), free(shares), free(payload);
  return rc;
}

void clt_trainer_position(const clt_trainer *t, clt_sampler_pos *pos) {
  if (t && pos) *pos = t->progress.pos;
}
