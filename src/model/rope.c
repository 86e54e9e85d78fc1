/*
 * rope.c: an attention layer's rotary position embeddings (model/rope.h).
 *
 * The inverse frequencies are transformers' to the bit as far as float32
 * arithmetic goes: its _compute_default_rope_parameters makes
 * 1 / theta^(2i / D) from a float32 exponent, and
 * _compute_llama3_parameters rescales them (Llama 3.1 and 3.2's
 * rope_scaling of type llama3) with float32 tensor operations in which the
 * Python numbers take part as float32, in the order written below. Only
 * the power is computed differently (in double, then rounded), which can
 * differ from torch's float pow by an ulp: an angle error of at most 2^-24
 * t radians at position t, within the float32 rounding of the angle itself.
 * Other scaling types (linear, dynamic, yarn, longrope) are refused by
 * name: their frequencies depend on the sequence or change attention's
 * scale, which the kernels do not do.
 */
#include "model/rope.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PI 3.14159265358979323846

/* The options that only rope_scaling=llama3 takes. */
static const char *const llama3_keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                          "original_max_position_embeddings"};

/* The column of key=... on the line, or 0. */
static int key_col(const clt__spec_line *lc, const char *key) {
  size_t n = strlen(key);
  for (int t = 1; t < lc->ntok; t++)
    if (strncmp(lc->tok[t].text, key, n) == 0 && lc->tok[t].text[n] == '=') return lc->tok[t].col;
  return 0;
}

int clt__rope_parse(clt__spec_line *lc, clt_rope_spec *r) {
  int rc = CLT_OK, col = 0;
  const char *scaling = NULL;
  memset(r, 0, sizeof *r);
  CLT_TRY(clt__opt_float(lc, "rope_theta", 0, 1e12, 1, &r->theta));
  CLT_TRY(clt__opt_word(lc, "rope_scaling", &scaling, &col));
  if (!scaling) {
    for (size_t k = 0; k < sizeof llama3_keys / sizeof *llama3_keys; k++)
      if ((col = key_col(lc, llama3_keys[k])))
        return clt__line_error(lc, col, "%s= is an option of rope_scaling=llama3 (give rope_scaling=llama3 with "
                               "factor=, low_freq_factor=, high_freq_factor= and original_max_position_embeddings=)",
                               llama3_keys[k]);
    return CLT_OK;
  }
  if (strcmp(scaling, "llama3") != 0)
    return clt__line_error(lc, col, "rope_scaling=%s is not supported: cltrain implements rope_scaling=llama3 (Llama "
                           "3.1 and 3.2), not linear, dynamic, yarn, longrope or others", scaling);
  if (r->theta == 0)
    return clt__line_error(lc, col, "rope_scaling=llama3 scales a rotary embedding: give rope_theta= too");
  r->scaling = CLT_ROPE_LLAMA3;
  float *at[] = {&r->factor, &r->low_freq_factor, &r->high_freq_factor};
  for (int k = 0; k < 3; k++) {
    if (!key_col(lc, llama3_keys[k]))
      return clt__line_error(lc, col, "rope_scaling=llama3 needs %s= (as in the model's config.json)", llama3_keys[k]);
    CLT_TRY(clt__opt_float(lc, llama3_keys[k], 0, 1e6, 1, at[k]));
  }
  if (!key_col(lc, llama3_keys[3]))
    return clt__line_error(lc, col, "rope_scaling=llama3 needs %s= (as in the model's config.json)", llama3_keys[3]);
  CLT_TRY(clt__opt_int(lc, llama3_keys[3], 1, 1 << 30, &r->original_max));
  if (!(r->high_freq_factor > r->low_freq_factor))
    return clt__line_error(lc, key_col(lc, "high_freq_factor"), "high_freq_factor (%g) must be above low_freq_factor "
                           "(%g)", (double)r->high_freq_factor, (double)r->low_freq_factor);
fail:
  return rc;
}

/* 1 / theta^(2i / D), the exponent a float32 division as torch's. */
static void default_inv_freq(clt_rope_spec *r, int64_t D) {
  for (int i = 0; i < r->pairs; i++) {
    float e = (float)(2 * i) / (float)D;
    r->inv_freq[i] = 1.0f / (float)pow((double)r->theta, (double)e);
  }
}

/* transformers' _compute_llama3_parameters: wavelengths longer than the
 * original context / low_freq_factor are divided by factor, shorter than
 * original / high_freq_factor kept, and those between interpolated. */
static void llama3_inv_freq(clt_rope_spec *r) {
  const double old = r->original_max;
  const float low_wavelen = (float)(old / r->low_freq_factor), high_wavelen = (float)(old / r->high_freq_factor);
  const float factor = r->factor, span = (float)((double)r->high_freq_factor - (double)r->low_freq_factor);
  for (int i = 0; i < r->pairs; i++) {
    const float f = r->inv_freq[i], wavelen = (float)(2 * PI) / f;
    float scaled = wavelen > low_wavelen ? f / factor : f;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth = ((float)old / wavelen - r->low_freq_factor) / span;
      const float a = (1.0f - smooth) * scaled, b = smooth * scaled;
      scaled = a / factor + b;
    }
    r->inv_freq[i] = scaled;
  }
}

int clt__rope_infer(clt__spec_line *lc, clt_rope_spec *r, int64_t D) {
  if (r->theta == 0) return CLT_OK;
  if (D % 2 || D / 2 > CLT_ROPE_MAX_PAIRS)
    return clt__line_error(lc, key_col(lc, "rope_theta"), "rope_theta= rotates pairs of a head's values: the head "
                           "width %lld must be even and at most %d", (long long)D, 2 * CLT_ROPE_MAX_PAIRS);
  r->pairs = (int)(D / 2);
  default_inv_freq(r, D);
  if (r->scaling == CLT_ROPE_LLAMA3) llama3_inv_freq(r);
  return CLT_OK;
}

void clt__rope_describe(const clt_rope_spec *r, char *buf, size_t len) {
  if (r->theta == 0) snprintf(buf, len, "%s", "");
  else if (r->scaling == CLT_ROPE_LLAMA3) snprintf(buf, len, " rope %g llama3 x%g", (double)r->theta, (double)r->factor);
  else snprintf(buf, len, " rope %g", (double)r->theta);
}
