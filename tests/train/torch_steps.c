/*
 * torch_steps.c: cltrain's gradient and AdamW (or Lion) steps on given
 * batches, for tests/train/torch_check.py to compare with PyTorch's:
 *
 *   torch_steps [options] MODEL WEIGHTS X.i32 Y.i32 GRAD.safetensors
 *
 * X and Y hold K batches of n samples of T little-endian int32 tokens
 * (inputs and their next tokens; T the model's context, n --batch). Writes
 * to GRAD the gradient of the mean loss on batch 0 at the given weights
 * (clt_trainer_gradient), as a weights file (the tensors of
 * clt_trainer_save_weights, which `cltrain hf export` turns into GPT-2's
 * names and layout), then takes one clt_trainer_step per batch, in order,
 * with AdamW or --optimizer's (constant learning rate, no warm-up, no
 * clipping; decoupled weight decay on the matrices of linear and attention
 * layers only, cltrain's default), and with --save writes the weights
 * after them. Prints one line of JSON: {"loss0": the gradient's mean loss, "labels":
 * its labels, "losses": [each step's mean loss, before its update],
 * "grad_norms": [...]}. One device: the first of CLT_DEVICES (default:
 * device 0). Exit 77 without a device, 2 for bad usage.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driverutil.h"
#include "io/safetensors.h"
#include "train/trainer.h"

/* grad (the parameter arena's layout) as a weights file. */
static int write_grad(const clt_model *m, const float *grad, const char *path) {
  int rc = CLT_OK, n = 0;
  const clt_model_spec *s = m->spec;
  clt__st_tensor *t = clt__calloc((size_t)s->nlayers * CLT_MAX_LAYER_PARAMS, sizeof *t);
  if (!t) return CLT_ENOMEM;
  CLT_TRY(clt__arena_tensors(s, "", grad, t, &n));
  const char *meta[] = {"format", "cltrain-weights", "version", "1", "model", clt_model_text(m), NULL};
  CLT_TRY(clt__st_write(path, t, n, meta));
fail:
  free(t);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: torch_steps [options] MODEL WEIGHTS X.i32 Y.i32 GRAD.safetensors\n"
             "  -b, --batch N         samples per batch (4)\n"
             "      --optimizer NAME  adamw or lion (adamw); the others' settings default to its own\n"
             "      --lr X            the learning rate (1e-3)\n"
             "      --beta1 X         (0.9)\n"
             "      --beta2 X         (adamw 0.999, lion 0.99)\n"
             "      --eps X           (1e-8)\n"
             "      --weight-decay X  decoupled, on linear and attention matrices only (adamw 0.01, lion 0)\n"
             "      --save FILE       the weights after the steps (as clt_trainer_save_weights)\n");
}

int main(int argc, char **argv) {
  clt_train_options o;
  clt_train_options_defaults(&o);
  clt_optimizer_kind kind = CLT_OPT_ADAMW;
  float beta1 = NAN, beta2 = NAN, eps = NAN, wd = NAN; /* NAN: the optimizer's default */
  const char *save = NULL;
  o.schedule.lr = 1e-3f;
  o.batch = 4;
  o.check_every = 0;
  static const struct option opts[] = {{"batch", required_argument, NULL, 'b'},
                                       {"optimizer", required_argument, NULL, 'o'},
                                       {"lr", required_argument, NULL, 'l'},
                                       {"beta1", required_argument, NULL, '1'},
                                       {"beta2", required_argument, NULL, '2'},
                                       {"eps", required_argument, NULL, 'e'},
                                       {"weight-decay", required_argument, NULL, 'w'},
                                       {"save", required_argument, NULL, 's'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "b:h", opts, NULL)) != -1;) {
    switch (c) {
    case 'b': o.batch = atoll(optarg); break;
    case 'o':
      if (clt_optimizer_parse(optarg, &kind) < 0) {
        fprintf(stderr, "torch_steps: --optimizer: %s\n", clt_last_error());
        return 2;
      }
      break;
    case 'l': o.schedule.lr = strtof(optarg, NULL); break;
    case '1': beta1 = strtof(optarg, NULL); break;
    case '2': beta2 = strtof(optarg, NULL); break;
    case 'e': eps = strtof(optarg, NULL); break;
    case 'w': wd = strtof(optarg, NULL); break;
    case 's': save = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (argc - optind != 5 || o.batch < 1) {
    usage(stderr);
    return 2;
  }
  clt_optimizer_defaults(kind, &o.optimizer);
  if (!isnan(beta1)) o.optimizer.beta1 = beta1;
  if (!isnan(beta2)) o.optimizer.beta2 = beta2;
  if (!isnan(eps)) o.optimizer.eps = eps;
  if (!isnan(wd)) o.optimizer.weight_decay = wd;
  char **arg = argv + optind;
  clt_model *m = NULL;
  clt_devices *all = NULL, *one = NULL;
  clt_trainer *t = NULL;
  int rc, ec = 1;
  int64_t nx, ny;
  int32_t *x32 = du_read_i32(arg[2], &nx), *y = du_read_i32(arg[3], &ny);
  float *x = NULL, *grad = NULL;
  double *losses = NULL, *norms = NULL;
  if (!x32 || !y || nx != ny) {
    fprintf(stderr, "torch_steps: %s and %s must hold the same number of int32 tokens\n", arg[2], arg[3]);
    ec = 2;
    goto out;
  }
  if ((rc = clt_model_load(arg[0], &m)) < 0) { ec = du_die("torch_steps", rc, arg[0]); goto out; }
  int64_t T = clt_model_input_size(m), P = clt_model_param_count(m), per = o.batch * T, K = nx / per;
  if (nx % per) {
    fprintf(stderr, "torch_steps: %lld tokens are not whole batches of %lld x %lld\n", (long long)nx,
            (long long)o.batch, (long long)T);
    ec = 2;
    goto out;
  }
  if ((ec = du_trainer("torch_steps", m, &o, arg[1], &t, &all, &one)) != 0) goto out;
  x = malloc((size_t)nx * sizeof *x);
  grad = malloc((size_t)P * sizeof *grad);
  losses = calloc((size_t)K, sizeof *losses);
  norms = calloc((size_t)K, sizeof *norms);
  if (!x || !grad || !losses || !norms) { ec = du_die("torch_steps", CLT_ENOMEM, "memory"); goto out; }
  for (int64_t i = 0; i < nx; i++) x[i] = (float)x32[i];

  double loss0;
  if ((rc = clt_trainer_gradient(t, x, y, o.batch, grad, P, &loss0)) < 0) { ec = du_die("torch_steps", rc, "gradient"); goto out; }
  if ((rc = write_grad(m, grad, arg[4])) < 0) { ec = du_die("torch_steps", rc, arg[4]); goto out; }
  for (int64_t k = 0; k < K; k++) {
    clt_step_result r;
    if ((rc = clt_trainer_step(t, x + k * per, y + k * per, o.batch, &r)) < 0) { ec = du_die("torch_steps", rc, "step"); goto out; }
    losses[k] = r.loss, norms[k] = r.grad_norm;
  }
  if (save && (rc = clt_trainer_save_weights(t, save)) < 0) { ec = du_die("torch_steps", rc, save); goto out; }
  printf("{\"loss0\": %.9g, \"labels\": %lld, \"losses\": [", loss0, (long long)per);
  for (int64_t k = 0; k < K; k++) printf("%s%.9g", k ? ", " : "", losses[k]);
  printf("], \"grad_norms\": [");
  for (int64_t k = 0; k < K; k++) printf("%s%.9g", k ? ", " : "", norms[k]);
  printf("]}\n");
  ec = 0;
out:
  clt_trainer_destroy(t);
  clt_devices_destroy(one);
  clt_devices_destroy(all);
  clt_model_destroy(m);
  free(x32), free(y), free(x), free(grad), free(losses), free(norms);
  return ec;
}
