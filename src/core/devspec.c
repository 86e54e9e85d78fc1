/*
 * devspec.c: choose devices by a spec string ("gpu", "pocl,rusticl:0",
 * "0:1,2", "nvidia") from --devices or CLT_DEVICES. The grammar is in
 * cltrain.h above clt_devices_select().
 */
#include "core/internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parse a whole decimal number; 0 when s is not one. */
static int parse_index(const char *s, int *out) {
  if (!*s) return 0;
  long v = 0;
  for (const char *p = s; *p; p++) {
    if (!isdigit((unsigned char)*p)) return 0;
    v = v * 10 + (*p - '0');
    if (v > 1000000) return 0;
  }
  *out = (int)v;
  return 1;
}

/* Does a term without an index (all, gpu, a name fragment) choose e? */
static int term_matches(const char *term, const clt_device_info *e) {
  if (strcmp(term, "all") == 0) return 1;
  if (strcmp(term, "gpu") == 0) return e->type == CLT_DEVICE_GPU;
  if (strcmp(term, "cpu") == 0) return e->type == CLT_DEVICE_CPU;
  if (strcmp(term, "accelerator") == 0) return e->type == CLT_DEVICE_ACCELERATOR;
  /* "pocl" is the short name users type; its platform calls itself
   * "Portable Computing Language". */
  if (strcmp(term, "pocl") == 0 && clt__contains_nocase(e->platform_name, "Portable Computing Language"))
    return 1;
  return clt__contains_nocase(e->platform_name, term) || clt__contains_nocase(e->platform_vendor, term) ||
         clt__contains_nocase(e->vendor, term) || clt__contains_nocase(e->name, term);
}

/* A list of what exists, for error messages. */
static void describe_devices(const clt_devices *all, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  if (all->count == 0) {
    snprintf(buf, len, "no OpenCL devices exist");
    return;
  }
  used += snprintf(buf, len, "devices that exist:");
  for (int i = 0; i < all->count && used < len; i++) {
    const clt_device_info *e = &all->entries[i].info;
    used += snprintf(buf + used, len - used, " [%d] %d:%d %s (%s, %s)%s", i, e->platform_index,
                     e->device_index, e->name, e->platform_name, clt_device_type_name(e->type),
                     i + 1 < all->count ? ";" : "");
  }
}

/* Add the devices that one term chooses to sel (without repeats); returns
 * the number the term matched, or a negative status for a malformed term. */
static int select_term(const clt_devices *all, const char *term, int *sel, int *nsel) {
  int p, d, n = -1;
  char base[256];
  const char *colon = strrchr(term, ':');

  clt__strlcpy(base, term, sizeof base);
  if (colon) {
    char left[256];
    clt__strlcpy(left, term, sizeof left);
    left[colon - term] = '\0';
    if (parse_index(left, &p) && parse_index(colon + 1, &d)) { /* P:D */
      for (int i = 0; i < all->count; i++) {
        const clt_device_info *e = &all->entries[i].info;
        if (e->platform_index == p && e->device_index == d) {
          int seen = 0;
          for (int j = 0; j < *nsel; j++) seen |= sel[j] == i;
          if (!seen) sel[(*nsel)++] = i;
          return 1;
        }
      }
      return 0;
    }
    if (!parse_index(colon + 1, &n))
      return clt__error(CLT_EINVAL, "'%s': the part after ':' must be a device number (as in rusticl:0 or 0:1)",
                        term);
    clt__strlcpy(base, left, sizeof base);
  }
  if (!base[0]) return clt__error(CLT_EINVAL, "'%s': empty device term", term);

  int global;
  if (!colon && parse_index(base, &global)) { /* N: position in the whole list */
    if (global >= all->count) return 0;
    int seen = 0;
    for (int j = 0; j < *nsel; j++) seen |= sel[j] == global;
    if (!seen) sel[(*nsel)++] = global;
    return 1;
  }

  int matched = 0;
  for (int i = 0; i < all->count; i++) {
    if (!term_matches(base, &all->entries[i].info)) continue;
    if (n >= 0 && matched++ != n) continue;
    if (n < 0) matched++;
    int seen = 0;
    for (int j = 0; j < *nsel; j++) seen |= sel[j] == i;
    if (!seen) sel[(*nsel)++] = i;
    if (n >= 0) return 1;
  }
  return n >= 0 ? 0 : matched;
}

int clt_devices_select(const clt_devices *all, const char *spec, clt_devices **out) {
  int rc = CLT_OK;
  int *sel = NULL, nsel = 0;
  char *copy = NULL;
  clt_devices *res = NULL;

  CLT_ARG(out);
  *out = NULL;
  CLT_HANDLE(all, "device list");
  if (!spec || !*spec) spec = getenv("CLT_DEVICES");
  if (!spec || !*spec) spec = "all";

  copy = clt__strdup(spec);
  sel = clt__calloc(all->count + 1, sizeof *sel);
  if (!copy || !sel) { rc = CLT_ENOMEM; goto fail; }

  char *save = NULL;
  int nterms = 0;
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*tok)) tok++;
    char *end = tok + strlen(tok);
    while (end > tok && isspace((unsigned char)end[-1])) *--end = '\0';
    for (char *c = tok; *c; c++) *c = (char)tolower((unsigned char)*c);
    nterms++;
    int matched = select_term(all, tok, sel, &nsel);
    if (matched < 0) {
      rc = clt__error_prefix(matched, "device spec '%s'", spec);
      goto fail;
    }
    if (matched == 0) {
      char list[2048];
      describe_devices(all, list, sizeof list);
      rc = clt__error(CLT_ENOMATCH, "device spec '%s': '%s' matches no device; %s", spec, tok, list);
      goto fail;
    }
  }
  if (nterms == 0) {
    rc = clt__error(CLT_EINVAL, "device spec '%s' names no device (try all, gpu, cpu, pocl or 0:0)", spec);
    goto fail;
  }

  res = clt__calloc(1, sizeof *res);
  if (!res || !(res->entries = clt__calloc(nsel, sizeof *res->entries))) { rc = CLT_ENOMEM; goto fail; }
  for (int i = 0; i < nsel; i++) res->entries[i] = all->entries[sel[i]];
  res->count = nsel;
  *out = res;
  free(copy);
  free(sel);
  return CLT_OK;

fail:
  free(copy);
  free(sel);
  clt_devices_destroy(res);
  return rc;
}
