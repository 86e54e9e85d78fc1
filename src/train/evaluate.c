/*
 * evaluate.c: clt_trainer_evaluate, the mean loss and accuracy over a
 * dataset on every device of the job at once (for a regression model the
 * mean loss and the RMSE over its float targets): the set checked on every
 * rank, each rank's part evaluated as the strategy splits it (src/dp:
 * over every replica in proportion to its share, the fast ones taking
 * more; src/pp: each pipeline a part, streamed through its stages), and
 * the sums added over the ranks.
 */
#include "train/trainer.h"

#include <math.h>

/* The set's checks, after those of the arguments (rc), on every rank at
 * once (they sum their results). */
static int check_set(clt_trainer *t, const clt_dataset *ds, int rc) {
  int64_t in = clt_model_input_size(t->model), lps = clt_model_labels_per_sample(t->model);
  if (rc < 0) (void)0;
  else if (!ds)
    rc = clt__null_arg("clt_trainer_evaluate", "ds", "dataset");
  else if (clt_dataset_sample_size(ds) != in)
    rc = clt__error(CLT_ESHAPE, "%s has samples of %lld values but the model's input takes %lld",
                    clt_dataset_path(ds), (long long)clt_dataset_sample_size(ds), (long long)in);
  else if ((clt_model_loss(t->model) != CLT_LOSS_CROSSENTROPY) != (clt_dataset_targets_per_sample(ds) > 0))
    rc = clt__trainer_targets_mismatch(t, ds);
  else if (clt_dataset_targets_per_sample(ds) > 0 && clt_dataset_targets_per_sample(ds) != clt_model_labels_per_sample(t->model))
    rc = clt__error(CLT_ESHAPE, "%s has %lld targets per sample but the model gives %d outputs (a target column for each: "
                    "--target COLS)", clt_dataset_path(ds), (long long)clt_dataset_targets_per_sample(ds),
                    clt_model_labels_per_sample(t->model));
  else if (clt_dataset_labels_per_sample(ds) != lps)
    rc = clt__error(CLT_ESHAPE, "%s has %lld labels per sample but the model takes %lld (%s)", clt_dataset_path(ds),
                    (long long)clt_dataset_labels_per_sample(ds), (long long)lps,
                    lps == 1 ? "a classifier, and this is a token dataset" : "one per position");
  /* As fit checks: a label past the model's scores would read past them. */
  else if (clt_dataset_num_classes(ds) > clt_model_num_classes(t->model))
    rc = clt__error(CLT_ESHAPE, "%s has %d classes but the model's last layer gives %d scores",
                    clt_dataset_path(ds), clt_dataset_num_classes(ds), clt_model_num_classes(t->model));
  rc = clt__trainer_all_ok(t, rc, "checking the evaluation set");
  return rc < 0 ? rc : clt__trainer_same_data(t, ds, "evaluates on");
}


int clt_trainer_evaluate(clt_trainer *t, const clt_dataset *ds, double *loss, double *accuracy) {
  CLT_HANDLE(t, "trainer");
  int rc = check_set(t, ds, !loss ? clt__null_arg(__func__, "loss", NULL)
                             : !accuracy ? clt__null_arg(__func__, "accuracy", NULL) : CLT_OK);
  double total[2] = {0, 0}; /* loss, correct */
  int64_t labels = clt_dataset_label_count(ds); /* less masked targets */
  if (rc < 0) return rc;
  if (labels == 0)
    return clt__error(CLT_EINVAL, "evaluating on %s: every target is masked (-1 in its targets shards); the mean "
                      "needs at least one that counts", clt_dataset_path(ds));
  CLT_TRY(t->s.i->evaluate(t->s.self, ds, total));
  CLT_TRY(clt__trainer_sum(t, total, 2));
  *loss = total[0] / (double)labels; /* the mean over labels, as training reports it */
  /* a regression model's second sum is its squared error: the RMSE */
  *accuracy = clt_dataset_targets_per_sample(ds) > 0 ? sqrt(total[1] / (double)labels) : total[1] / (double)labels;
fail:
  return rc < 0 ? clt__error_prefix(rc, "evaluating on %s", clt_dataset_path(ds)) : CLT_OK;
}
