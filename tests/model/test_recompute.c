/*
 * test_recompute.c: --recompute blocks in a replica (model/replica.c,
 * model/run.c): the gradient of a training run is the same bits with and
 * without it, on every device, in f32 and f16, for a small GPT, a small
 * Llama (RMSNorm, grouped-query attention with rotary positions, SwiGLU),
 * a residual MLP whose blocks end in dropout (active: the masks must come
 * out the same when the pass runs again) with a residual after the block
 * that adds a layer inside it, nested blocks, and a U-Net's save/concat
 * skips into, inside and out of block passes; a forward-only run's
 * output is the same bits too. The activations it counts drop by what the
 * formula says: every block pass's layers but its last are held once, for
 * the largest pass, instead of once a pass; the replica measures what was
 * counted; and the count is at most "the blocks' inputs plus one block's"
 * (the layers outside blocks besides), within 5%. A spec without a block
 * is refused, naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/layer.h"
#include "model/model.h"
#include "model/replica.h"
#include "ref/ref.h"
#include "testutil.h"

static const char *gpt_spec = "input tokens 6 vocab=13\n"
                              "embedding 8 name=wte std=0.5\n"
                              "posembedding std=0.5\n"
                              "block repeat=3\n"
                              "  layernorm\n"
                              "  attention heads=2 std=0.4\n"
                              "  residual\n"
                              "  layernorm\n"
                              "  linear 16 init=normal std=0.4 act=gelu\n"
                              "  linear 8 init=normal std=0.4\n"
                              "  residual\n"
                              "end\n"
                              "layernorm\n"
                              "linear 13 tie=wte bias=false\n";

static const char *llama_spec = "input tokens 6 vocab=17\n"
                                "embedding 8\n"
                                "block repeat=2\n"
                                "  rmsnorm eps=1e-5\n"
                                "  attention heads=4 kv_heads=2 rope_theta=10000 bias=none\n"
                                "  residual\n"
                                "  rmsnorm eps=1e-5\n"
                                "  swiglu 12\n"
                                "  residual\n"
                                "end\n"
                                "rmsnorm eps=1e-5\n"
                                "linear 17 bias=false init=normal\n";

/* Each pass ends in dropout, whose output the next pass starts from; the
 * residual after the block adds the last pass's residual, a layer inside
 * it (kept, so the layer after the block can read it). */
static const char *dropout_spec = "input 10\n"
                                  "linear 12\n"
                                  "block repeat=2\n"
                                  "  tanh\n"
                                  "  linear 12\n"
                                  "  residual\n"
                                  "  dropout 0.3\n"
                                  "end\n"
                                  "linear 12\n"
                                  "residual\n"
                                  "linear 5 init=he\n";

/* Nested blocks: the outer pass is the unit. */
static const char *nested_spec = "input 10\n"
                                 "linear 12\n"
                                 "block repeat=2\n"
                                 "  block repeat=2\n"
                                 "    layernorm\n"
                                 "    linear 12 act=tanh\n"
                                 "    residual\n"
                                 "  end\n"
                                 "  linear 12\n"
                                 "end\n"
                                 "linear 5 init=he\n";

/* U-Net skips across block passes: e1 saved outside the blocks and read in
 * the second pass, e2 saved and read inside the first (both run again),
 * e3 saved in the second and read after it (its storage, the concat's
 * output, kept). */
static const char *unet_spec = "input 2 6 6\n"
                               "conv2d 4 kernel=3 pad=1 act=tanh\n"
                               "save e1\n"
                               "block\n"
                               "  conv2d 4 kernel=3 pad=1 act=tanh\n"
                               "  save e2\n"
                               "  groupnorm 2\n"
                               "  conv2d 4 kernel=3 pad=1 act=tanh\n"
                               "  concat e2\n"
                               "end\n"
                               "block\n"
                               "  conv2d 4 kernel=3 pad=1 act=tanh\n"
                               "  concat e1\n"
                               "  save e3\n"
                               "  conv2d 4 kernel=1\n"
                               "end\n"
                               "concat e3\n"
                               "flatten\n"
                               "linear 5 init=he\n";

static const char *cnn_spec = "input 1 12 12\nconv2d 4 kernel=3 pad=1\nrelu\nmaxpool 2\nflatten\nlinear 16\nrelu\n"
                              "dropout 0.25\nlinear 10\n";

#define N 5

typedef struct run_out {
  float *grad, *logits, loss, eval_loss;
  clt_replica_memory counted;
  clt__replica_bytes measured;
} run_out;

/* A training run and a forward-only one of N samples on a fresh replica. */
static void run_once(clt_context *ctx, const clt_model_spec *s, clt_dtype dt, int recompute, run_out *o) {
  int64_t P = s->param_count, in = clt__shape_numel(&s->layers[0].out_shape), labels = N * s->labels_per_sample;
  int64_t outs = N * clt__shape_numel(&s->layers[s->nlayers - 1].out_shape);
  int vocab = s->layers[0].out_shape.vocab;
  float *params = malloc((size_t)P * 4), *x = malloc((size_t)(N * in) * 4);
  int32_t *y = malloc((size_t)labels * 4);
  clt__replica *r;
  clt__replica_config cfg = {.max_batch = N, .act_dtype = dt, .state_params = P, .recompute = recompute};
  clt__model_init_params(s, 7, params);
  ref_random(x, (size_t)(N * in), 5);
  for (int64_t i = 0; vocab && i < N * in; i++) x[i] = (float)((i * 7 + i / 5) % vocab);
  for (int64_t i = 0; i < labels; i++) y[i] = (int32_t)((i * 5 + 3) % s->num_classes);
  ck_assert_msg(clt__replica_create_with(ctx, s, &cfg, params, &r) == 0, "%s", clt_last_error());
  clt__replica_memory(s, &cfg, &o->counted);
  clt__replica_device_bytes(r, &o->measured);
  o->grad = malloc((size_t)P * 4), o->logits = malloc((size_t)outs * 4);
  double metric;
  clt__pass train = {.train = 1, .seed = 11, .step = 3, .global_first = 40, .loss_scale = dt == CLT_F16 ? 256 : 0};
  ck_assert_msg(clt__replica_run(r, x, y, N, &train) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt__replica_read_loss(r, &o->loss, &metric), 0);
  clt_tensor g = clt__replica_grads(r);
  ck_assert_int_eq(clt_tensor_download(ctx, &g, o->grad, (size_t)P * 4), 0);
  clt__pass eval = {.logits = o->logits};
  ck_assert_msg(clt__replica_run(r, x, y, N, &eval) == 0, "%s", clt_last_error());
  ck_assert_int_eq(clt__replica_read_loss(r, &o->eval_loss, &metric), 0);
  clt__replica_destroy(r);
  free(params), free(x), free(y);
}

static void run_free(run_out *o) { free(o->grad), free(o->logits); }

START_TEST(gradients_are_the_same_bits) {
  const char *specs[] = {gpt_spec, llama_spec, dropout_spec, nested_spec, unet_spec};
  const char *names[] = {"GPT", "Llama", "blocks ending in dropout", "nested blocks", "U-Net skips"};
  for (int k = 0; k < 5; k++)
    for (int d = 0; d < (k == 2 || k == 3 ? 1 : tu_ndev); d++) /* the kinds of those two: on the first device */
      for (int h = 0; h < 2; h++) {
        clt_dtype dt = h ? CLT_F16 : CLT_F32;
        clt_model_spec *s;
        run_out a, b;
        ck_assert_msg(clt__spec_parse(specs[k], "t.model", &s) == 0, "%s", clt_last_error());
        int64_t P = s->param_count, outs = N * clt__shape_numel(&s->layers[s->nlayers - 1].out_shape);
        run_once(tu_ctx[d], s, dt, 0, &a);
        run_once(tu_ctx[d], s, dt, 1, &b);
        ck_assert_msg(b.counted.activations < a.counted.activations, "%s: recomputation saves nothing (%llu bytes)",
                      names[k], (unsigned long long)a.counted.activations);
        int64_t bad = -1, nonzero = 0;
        for (int64_t i = 0; i < P; i++) {
          if (bad < 0 && memcmp(&a.grad[i], &b.grad[i], 4) != 0) bad = i;
          nonzero += a.grad[i] != 0;
        }
        ck_assert_msg(bad < 0, "%s, %s on %s: gradient %lld is %.9g with --recompute blocks, %.9g without", names[k],
                      clt_dtype_name(dt), tu_name(tu_ctx[d]), (long long)bad, bad < 0 ? 0 : b.grad[bad],
                      bad < 0 ? 0 : a.grad[bad]);
        ck_assert_msg(nonzero > P / 2, "%s: only %lld of %lld gradients are not zero", names[k], (long long)nonzero,
                      (long long)P);
        ck_assert_msg(memcmp(&a.loss, &b.loss, 4) == 0 && memcmp(&a.eval_loss, &b.eval_loss, 4) == 0,
                      "%s: losses %.9g / %.9g with, %.9g / %.9g without", names[k], b.loss, b.eval_loss, a.loss,
                      a.eval_loss);
        ck_assert_msg(memcmp(a.logits, b.logits, (size_t)outs * 4) == 0, "%s: a forward's outputs differ", names[k]);
        run_free(&a), run_free(&b);
        clt__spec_destroy(s);
      }
}
END_TEST

/* Bytes layer i takes in an activation set: its output (a view's is its
 * input's storage) and what it keeps for its backward. */
static uint64_t layer_bytes(const clt_model_spec *s, int i, clt_dtype dt) {
  const clt_layer_spec *l = &s->layers[i];
  int64_t out = (l->kind->flags & CLT_KIND_VIEW) ? 0 : clt__shape_numel(&l->out_shape);
  return (uint64_t)((out + l->saved_act) * N) * clt_dtype_size(dt) + (uint64_t)(l->saved_f32 * N) * 4;
}

/* For GPTs and Llamas (blocks whose passes end in a residual, and nothing
 * outside a pass reads inside it): a pass p's layers but its last take
 * T(p), held once for the largest pass: the activations drop by
 * sum T(p) - max T(p). The rest is counted against "the blocks' inputs and
 * one block's, besides the layers outside blocks": at most that, and within
 * 5% of it (the difference is a block's output: the first pass's input is
 * a layer outside blocks, which the formula counts twice). The small specs
 * above and the examples, GPT-2 124M among them (counted only). */
START_TEST(activations_drop_as_the_formula_says) {
  const char *texts[] = {gpt_spec, llama_spec, NULL, NULL, NULL};
  const char *files[] = {NULL, NULL, SRCDIR "/examples/gpt_tiny.model", SRCDIR "/examples/llama_tiny.model",
                         SRCDIR "/examples/gpt2_124m.model"};
  const int nblocks[] = {3, 2, 2, 2, 12};
  for (int k = 0; k < 5; k++)
    for (int h = 0; h < 2; h++) {
      clt_dtype dt = h ? CLT_F16 : CLT_F32;
      clt_model *m = NULL;
      clt_model_spec *s;
      if (texts[k]) {
        ck_assert_msg(clt__spec_parse(texts[k], "t.model", &s) == 0, "%s", clt_last_error());
      } else {
        ck_assert_msg(clt_model_load(files[k], &m) == 0, "%s", clt_last_error());
        s = m->spec;
      }
      enum { MAXP = 64 };
      uint64_t inner[MAXP] = {0}, whole[MAXP] = {0}, inputs = 0, outside = 0, most_inner = 0, sum_inner = 0, most = 0;
      for (int i = 1; i < s->nlayers; i++) {
        const clt_layer_spec *l = &s->layers[i];
        int p = l->block, last = i + 1 == s->nlayers || s->layers[i + 1].block != p;
        if (p < 0) { outside += layer_bytes(s, i, dt); continue; }
        ck_assert_int_lt(p, MAXP);
        whole[p] += layer_bytes(s, i, dt);
        if (!last) inner[p] += layer_bytes(s, i, dt);
        if (s->layers[i - 1].block != p) inputs += (uint64_t)(clt__shape_numel(&l->in_shape) * N) * clt_dtype_size(dt);
      }
      ck_assert_int_eq(s->nblocks, nblocks[k]);
      for (int p = 0; p < s->nblocks; p++) {
        sum_inner += inner[p];
        if (inner[p] > most_inner) most_inner = inner[p];
        if (whole[p] > most) most = whole[p];
      }
      clt_replica_memory none, blocks;
      clt__replica_config cfg = {.max_batch = N, .act_dtype = dt, .state_params = s->param_count};
      clt__replica_memory(s, &cfg, &none);
      cfg.recompute = 1;
      clt__replica_memory(s, &cfg, &blocks);
      ck_assert_msg(none.activations - blocks.activations == sum_inner - most_inner,
                    "spec %d %s: the activations drop from %llu to %llu bytes, by %llu; the formula says by %llu", k,
                    clt_dtype_name(dt), (unsigned long long)none.activations, (unsigned long long)blocks.activations,
                    (unsigned long long)(none.activations - blocks.activations),
                    (unsigned long long)(sum_inner - most_inner));
      ck_assert_uint_eq(none.total - blocks.total, none.activations - blocks.activations);
      /* The set's other buffers: the input as f32 or ids, labels, losses, scalars. */
      uint64_t counted_layers = 0;
      for (int i = 1; i < s->nlayers; i++) counted_layers += layer_bytes(s, i, dt);
      uint64_t besides = none.activations - counted_layers;
      uint64_t bound = outside + inputs + most + besides, got = blocks.activations;
      ck_assert_msg(got <= bound && got >= bound * 0.95, "spec %d %s: %llu bytes of activations with --recompute "
                    "blocks; the blocks' inputs and one block's, besides the rest, are %llu", k, clt_dtype_name(dt),
                    (unsigned long long)got, (unsigned long long)bound);
      if (m) clt_model_destroy(m);
      else clt__spec_destroy(s);
    }
}
END_TEST

/* What clt__replica_memory counts under --recompute blocks is what the
 * replica's buffers measure, part by part; a pipeline stage's further
 * activation set is the kept part only (the block buffers are the
 * replica's, shared by every set). */
START_TEST(what_is_counted_is_allocated) {
  const char *specs[] = {gpt_spec, llama_spec, dropout_spec, nested_spec};
  for (int k = 0; k < 4; k++)
    for (int h = 0; h < 2; h++) {
      clt_dtype dt = h ? CLT_F16 : CLT_F32;
      clt_model_spec *s;
      clt__replica *r;
      clt_replica_memory need;
      clt__replica_bytes got;
      ck_assert_msg(clt__spec_parse(specs[k], "t.model", &s) == 0, "%s", clt_last_error());
      float *params = calloc((size_t)s->param_count, 4);
      clt__replica_config cfg = {.max_batch = 7, .act_dtype = dt, .state_per_param = 2, .state_params = s->param_count,
                                 .recompute = 1};
      ck_assert_msg(clt__replica_create_with(tu_ctx[0], s, &cfg, params, &r) == 0, "%s", clt_last_error());
      clt__replica_memory(s, &cfg, &need);
      clt__replica_device_bytes(r, &got);
      ck_assert_msg(got.activations == need.activations, "spec %d %s: activations measured %llu, counted %llu", k,
                    clt_dtype_name(dt), (unsigned long long)got.activations, (unsigned long long)need.activations);
      ck_assert_uint_eq(got.activation_grads, need.activation_grads);
      ck_assert_uint_eq(got.parameters + got.gradients + got.optimizer_state,
                        need.parameters + need.gradients + need.optimizer_state);
      ck_assert(r->block_act != NULL);
      clt__act_set set;
      ck_assert_msg(clt__act_set_create(r, &set) == 0, "%s", clt_last_error());
      uint64_t set_bytes = clt_buffer_size(set.act) + clt_buffer_size(set.aux) +
                           (set.input32 ? clt_buffer_size(set.input32) : 0);
      ck_assert_uint_eq(set_bytes, clt__act_set_bytes(s, 7, dt, 1));
      ck_assert_msg(set_bytes < clt__act_set_bytes(s, 7, dt, 0), "spec %d: a further set does not shrink", k);
      clt__act_set_destroy(&set);
      clt__replica_destroy(r);
      free(params);
      clt__spec_destroy(s);
    }
}
END_TEST

/* The spec says which top-level block pass each layer is in: a nested
 * block's passes are its outer pass's; an act= layer is its line's. */
START_TEST(layers_know_their_block_pass) {
  clt_model_spec *s;
  ck_assert_msg(clt__spec_parse(nested_spec, "t.model", &s) == 0, "%s", clt_last_error());
  /* input, linear, then 2 x (2 x (layernorm, linear, tanh, residual), linear), linear */
  ck_assert_int_eq(s->nlayers, 2 + 2 * 9 + 1);
  ck_assert_int_eq(s->nblocks, 2);
  ck_assert_int_eq(s->layers[0].block, -1);
  ck_assert_int_eq(s->layers[1].block, -1);
  for (int i = 2; i < 11; i++) ck_assert_int_eq(s->layers[i].block, 0);
  for (int i = 11; i < 20; i++) ck_assert_int_eq(s->layers[i].block, 1);
  ck_assert_int_eq(s->layers[20].block, -1);
  clt__spec_destroy(s);
}
END_TEST

/* A spec without a block is refused, naming it, by the trainer's check and
 * by the public memory estimate; one with blocks is not. */
START_TEST(a_spec_without_blocks_is_refused) {
  clt_model *cnn, *gpt;
  ck_assert_int_eq(clt_model_parse(cnn_spec, "cnn.model", &cnn), 0);
  ck_assert_int_eq(clt_model_parse(gpt_spec, "gpt.model", &gpt), 0);
  ck_assert_int_eq(clt__model_check_recompute(cnn, CLT_RECOMPUTE_NONE), 0);
  ck_assert_int_eq(clt__model_check_recompute(gpt, CLT_RECOMPUTE_BLOCKS), 0);
  ck_assert_int_eq(clt__model_check_recompute(cnn, CLT_RECOMPUTE_BLOCKS), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "cnn.model has no block"), "%s", clt_last_error());
  clt_train_options o;
  clt_replica_memory m;
  clt_train_options_defaults(&o);
  o.recompute = CLT_RECOMPUTE_BLOCKS;
  ck_assert_int_eq(clt_model_replica_memory(cnn, &o, &m), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "--recompute blocks: cnn.model"), "%s", clt_last_error());
  ck_assert_int_eq(clt_model_replica_memory(gpt, &o, &m), 0);
  o.recompute = (clt_recompute)2;
  ck_assert_int_eq(clt_model_replica_memory(gpt, &o, &m), CLT_EINVAL);
  ck_assert_msg(strstr(clt_last_error(), "recompute is 2"), "%s", clt_last_error());
  clt_model_destroy(cnn);
  clt_model_destroy(gpt);
}
END_TEST

int main(void) {
  int rc = tu_setup();
  if (rc) return rc;
  Suite *s = suite_create("recompute");
  TCase *tc = tcase_create("recompute");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, gradients_are_the_same_bits);
  tcase_add_test(tc, activations_drop_as_the_formula_says);
  tcase_add_test(tc, what_is_counted_is_allocated);
  tcase_add_test(tc, layers_know_their_block_pass);
  tcase_add_test(tc, a_spec_without_blocks_is_refused);
  suite_add_tcase(s, tc);
  rc = tu_run(s);
  tu_teardown();
  return rc;
}
