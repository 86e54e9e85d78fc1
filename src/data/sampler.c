/*
 * sampler.c: which samples each replica takes at each step.
 *
 * Every epoch is one permutation of [0, count) that depends on (seed, epoch)
 * alone, so all ranks compute the same one without communicating:
 *
 *   mix64(z)  = splitmix64's finaliser:
 *               z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB; z ^ z>>31
 *   state     = mix64(seed) ^ mix64(epoch + 1)
 *   next()    = mix64(state += 0x9E3779B97F4A7C15)                (splitmix64)
 *   below(m)  = draw r = next() until r >= (2^64 - m) mod m; return r mod m   (unbiased)
 *   perm      = 0, 1, ..., count-1; for i = count-1 down to 1: swap perm[i], perm[below(i+1)]
 *
 * (Fisher-Yates with splitmix64: Steele, Lea and Flood, OOPSLA 2014.) All of
 * it is 64-bit integer arithmetic, so any platform gets the same bits.
 *
 * Global batch `step` is perm[step*B, step*B + B); replica r takes the
 * slice at offset b_0 + ... + b_(r-1) of length b_r. The last, partial batch
 * (kept unless CLT_SAMPLER_DROP_LAST) is split in proportion to the shares by
 * the same largest-remainder rule the load balancer uses.
 */
#include "data/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct clt_sampler {
  int64_t count, batch;
  uint64_t seed;
  unsigned flags;
  int64_t steps;      /* global batches per epoch */
  int64_t last_size;  /* samples in the last one (== batch unless it is partial) */
  int nrep;
  int64_t *shares, *offsets;            /* (nrep), (nrep+1): full batches */
  int64_t *last_shares, *last_offsets;  /* the same for the last batch */
  clt_sampler_pos pos;
  int64_t *perm;       /* (count): the permutation of perm_epoch */
  int64_t perm_epoch;  /* -1: none yet */
};

#define SPLITMIX_GAMMA UINT64_C(0x9E3779B97F4A7C15)

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static uint64_t splitmix_next(uint64_t *state) { return mix64(*state += SPLITMIX_GAMMA); }

static uint64_t below(uint64_t *state, uint64_t m) {
  const uint64_t threshold = (0 - m) % m; /* 2^64 mod m: the biased low values */
  uint64_t r;
  do r = splitmix_next(state);
  while (r < threshold);
  return r % m;
}

static void make_permutation(clt_sampler *s, int64_t epoch) {
  for (int64_t i = 0; i < s->count; i++) s->perm[i] = i;
  if (!(s->flags & CLT_SAMPLER_NO_SHUFFLE)) {
    uint64_t state = mix64(s->seed) ^ mix64((uint64_t)epoch + 1);
    for (int64_t i = s->count - 1; i > 0; i--) {
      int64_t j = (int64_t)below(&state, (uint64_t)i + 1);
      int64_t t = s->perm[i];
      s->perm[i] = s->perm[j];
      s->perm[j] = t;
    }
  }
  s->perm_epoch = epoch;
}

/* Largest remainder in integers: quota_i = total * w_i / W with W = sum(w).
 * Needs total * W below 2^63; the callers keep both below 2^31. */
static int largest_remainder(int n, const int64_t *w, int64_t total, int64_t min_each, int64_t *out) {
  int64_t W = 0, sum = 0;
  int64_t *d = clt__calloc((size_t)n, sizeof *d); /* W * (quota_i - out_i) */
  if (!d) return CLT_ENOMEM;
  for (int i = 0; i < n; i++) W += w[i];
  for (int i = 0; i < n; i++) {
    const int64_t num = total * w[i];
    out[i] = num / W > min_each ? num / W : min_each;
    d[i] = num - out[i] * W;
    sum += out[i];
  }
  while (sum < total) { /* short: the largest quota - share gains one */
    int best = 0;
    for (int i = 1; i < n; i++)
      if (d[i] > d[best]) best = i;
    out[best]++;
    d[best] -= W;
    sum++;
  }
  while (sum > total) { /* over (from min_each): the smallest quota - share above min_each loses one */
    int best = -1;
    for (int i = 0; i < n; i++)
      if (out[i] > min_each && (best < 0 || d[i] < d[best])) best = i;
    out[best]--;
    d[best] += W;
    sum--;
  }
  free(d);
  return CLT_OK;
}

int clt_shares_from_weights(int n, const double *weights, int64_t total, int64_t min_each, int64_t *shares) {
  CLT_ARG(weights);
  CLT_ARG(shares);
  if (n < 1 || n > (1 << 20))
    return clt__error(CLT_EINVAL, "clt_shares_from_weights: n is %d: give 1 to 2^20 replicas", n);
  if (total < 0 || total > INT32_MAX || min_each < 0)
    return clt__error(CLT_EINVAL, "clt_shares_from_weights: total %lld must be in [0, 2^31) and min_each %lld >= 0",
                      (long long)total, (long long)min_each);
  if (min_each > total / n)
    return clt__error(CLT_EINVAL, "cannot give %d replicas at least %lld sample%s each out of %lld", n,
                      (long long)min_each, min_each == 1 ? "" : "s", (long long)total);
  double sum = 0.0;
  for (int i = 0; i < n; i++) {
    if (!isfinite(weights[i]) || weights[i] < 0.0)
      return clt__error(CLT_EINVAL, "clt_shares_from_weights: weight %d is %g; weights must be finite and >= 0", i,
                        weights[i]);
    sum += weights[i];
  }
  if (!(sum > 0.0) || !isfinite(sum))
    return clt__error(CLT_EINVAL, "clt_shares_from_weights: the weights sum to %g; they must sum to a finite "
                      "number > 0", sum);
  /* One correctly rounded scaling to integers below 2^30 each (and 2^31 in
   * sum); from here on, integers only. */
  int64_t *w = clt__calloc((size_t)n, sizeof *w);
  if (!w) return CLT_ENOMEM;
  for (int i = 0; i < n; i++) w[i] = (int64_t)floor(weights[i] / sum * 1073741824.0);
  int64_t W = 0;
  for (int i = 0; i < n; i++) W += w[i];
  if (W == 0) w[0] = 1; /* unreachable: the largest weight gets at least 2^30 / n */
  int rc = largest_remainder(n, w, total, min_each, shares);
  free(w);
  return rc;
}

/* Shares of the full and the last batch, and their prefix sums. */
static int apply_shares(clt_sampler *s, int nrep, const int64_t *shares) {
  int64_t *mem = clt__calloc(4 * (size_t)nrep + 2, sizeof *mem);
  if (!mem) return CLT_ENOMEM;
  int64_t *sh = mem, *off = mem + nrep, *lsh = off + nrep + 1, *loff = lsh + nrep;
  for (int r = 0; r < nrep; r++) sh[r] = shares ? shares[r] : s->batch / nrep + (r < s->batch % nrep);
  if (largest_remainder(nrep, sh, s->last_size, 0, lsh) < 0) {
    free(mem);
    return CLT_ENOMEM;
  }
  for (int r = 0; r < nrep; r++) {
    off[r + 1] = off[r] + sh[r];
    loff[r + 1] = loff[r] + lsh[r];
  }
  free(s->shares);
  s->shares = sh;
  s->offsets = off;
  s->last_shares = lsh;
  s->last_offsets = loff;
  s->nrep = nrep;
  return CLT_OK;
}

int clt_sampler_create(int64_t count, int64_t global_batch, uint64_t seed, unsigned flags, clt_sampler **out) {
  int rc = CLT_OK;
  CLT_ARG(out);
  *out = NULL;
  if (flags & ~(unsigned)(CLT_SAMPLER_DROP_LAST | CLT_SAMPLER_NO_SHUFFLE))
    return clt__error(CLT_EINVAL, "clt_sampler_create: unknown flags 0x%x: give a sum of CLT_SAMPLER_DROP_LAST (1) and "
                      "CLT_SAMPLER_NO_SHUFFLE (2)", flags);
  if (count < 1) return clt__error(CLT_EINVAL, "sampler: the dataset has %lld samples; it needs at least 1",
                                   (long long)count);
  if (global_batch < 1 || global_batch > INT32_MAX)
    return clt__error(CLT_EINVAL, "sampler: global batch size %lld is not in [1, 2^31)", (long long)global_batch);
  if (global_batch > count)
    return clt__error(CLT_EINVAL, "sampler: the global batch (%lld) is larger than the dataset (%lld samples)",
                      (long long)global_batch, (long long)count);
  clt_sampler *s = clt__calloc(1, sizeof *s);
  if (!s) return CLT_ENOMEM;
  s->count = count;
  s->batch = global_batch;
  s->seed = seed;
  s->flags = flags;
  s->perm_epoch = -1;
  s->steps = count / global_batch;
  s->last_size = global_batch;
  if (count % global_batch && !(flags & CLT_SAMPLER_DROP_LAST)) {
    s->steps++;
    s->last_size = count % global_batch;
  }
  s->perm = malloc((size_t)count * sizeof *s->perm);
  if (!s->perm) {
    rc = clt__error(CLT_ENOMEM, "sampler: cannot allocate a permutation of %lld samples", (long long)count);
    goto fail;
  }
  CLT_TRY(apply_shares(s, 1, NULL));
  *out = s;
  return CLT_OK;
fail:
  clt_sampler_destroy(s);
  return rc;
}

int clt_sampler_clone(const clt_sampler *s, clt_sampler **out) {
  int rc = CLT_OK;
  clt_sampler *c = NULL;
  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(s, "sampler");
  CLT_TRY(clt_sampler_create(s->count, s->batch, s->seed, s->flags, &c));
  CLT_TRY(apply_shares(c, s->nrep, s->shares));
  c->pos = s->pos;
  *out = c;
  return CLT_OK;
fail:
  clt_sampler_destroy(c);
  return rc;
}

void clt_sampler_destroy(clt_sampler *s) {
  if (!s) return;
  free(s->perm);
  free(s->shares);
  free(s);
}

int clt_sampler_set_shares(clt_sampler *s, int nreplicas, const int64_t *shares) {
  CLT_HANDLE(s, "sampler");
  if (nreplicas < 1 || (!shares && nreplicas > s->batch))
    return clt__error(CLT_EINVAL, "sampler: %d replicas cannot share a global batch of %lld evenly (each needs at "
                      "least 1 sample; give shares, 0 allowed)", nreplicas, (long long)s->batch);
  if (nreplicas > (1 << 20))
    return clt__error(CLT_EINVAL, "sampler: %d replicas; at most 2^20", nreplicas);
  if (shares) {
    int64_t sum = 0;
    for (int r = 0; r < nreplicas; r++) {
      if (shares[r] < 0 || shares[r] > s->batch)
        return clt__error(CLT_EINVAL, "sampler: replica %d's share is %lld; each share must be in [0, %lld]", r,
                          (long long)shares[r], (long long)s->batch);
      sum += shares[r];
    }
    if (sum != s->batch)
      return clt__error(CLT_EINVAL, "sampler: the %d shares sum to %lld but the global batch is %lld", nreplicas,
                        (long long)sum, (long long)s->batch);
  }
  return apply_shares(s, nreplicas, shares);
}

int clt_sampler_replicas(const clt_sampler *s) { return s ? s->nrep : 0; }
int64_t clt_sampler_share(const clt_sampler *s, int r) { return s && r >= 0 && r < s->nrep ? s->shares[r] : 0; }
int64_t clt_sampler_count(const clt_sampler *s) { return s ? s->count : 0; }
int64_t clt_sampler_global_batch(const clt_sampler *s) { return s ? s->batch : 0; }
int64_t clt_sampler_steps_per_epoch(const clt_sampler *s) { return s ? s->steps : 0; }

int64_t clt_sampler_batch_size(const clt_sampler *s, int64_t step) {
  if (!s || step < 0 || step >= s->steps) return 0;
  return step == s->steps - 1 ? s->last_size : s->batch;
}

int clt_sampler_slice(clt_sampler *s, int64_t epoch, int64_t step, int replica, int64_t *indices, int64_t *n) {
  CLT_HANDLE(s, "sampler");
  CLT_ARG(indices);
  CLT_ARG(n);
  *n = 0;
  if (epoch < 0 || step < 0 || step >= s->steps)
    return clt__error(CLT_EINVAL, "sampler: position (epoch %lld, step %lld) does not exist; an epoch has %lld "
                      "steps", (long long)epoch, (long long)step, (long long)s->steps);
  if (replica < 0 || replica >= s->nrep)
    return clt__error(CLT_EINVAL, "sampler: replica %d does not exist; the sampler has %d", replica, s->nrep);
  if (s->perm_epoch != epoch) make_permutation(s, epoch);
  const int last = step == s->steps - 1;
  const int64_t *off = last ? s->last_offsets : s->offsets;
  const int64_t start = step * s->batch + off[replica];
  *n = off[replica + 1] - off[replica];
  memcpy(indices, s->perm + start, (size_t)*n * sizeof *indices);
  return CLT_OK;
}

void clt_sampler_next(clt_sampler *s, clt_sampler_pos *pos) {
  if (!s) return;
  if (pos) *pos = s->pos;
  if (++s->pos.step >= s->steps) {
    s->pos.step = 0;
    s->pos.epoch++;
  }
}

void clt_sampler_get_position(const clt_sampler *s, clt_sampler_pos *pos) {
  if (s && pos) *pos = s->pos;
}

int clt_sampler_set_position(clt_sampler *s, clt_sampler_pos pos) {
  CLT_HANDLE(s, "sampler");
  if (pos.epoch < 0 || pos.step < 0 || pos.step >= s->steps)
    return clt__error(CLT_EINVAL, "sampler: cannot resume at epoch %lld step %lld: an epoch has %lld steps (was "
                      "the checkpoint made with another dataset or batch size?)", (long long)pos.epoch,
                      (long long)pos.step, (long long)s->steps);
  s->pos = pos;
  return CLT_OK;
}
