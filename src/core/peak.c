/*
 * peak.c: a device's peak float32 FLOP/s, the divisor of MFU (model FLOPs
 * utilisation, as torchtitan and llm.c report it): the GEMM rate `cltrain
 * bench gemm` measured on the device, cached one line a device in the
 * user's cache directory, else an estimate from the device's properties.
 * The cache outlives a run because measuring takes longer than a short
 * run's first steps, and a device's rate does not change between runs.
 */
#include "core/internal.h"
#include "core/outfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* $CLT_PEAK_CACHE, else $XDG_CACHE_HOME/cltrain/peak-flops, else
 * ~/.cache/cltrain/peak-flops; *dir_len: where its directory ends. */
static int cache_path(char *buf, size_t len, size_t *dir_len) {
  const char *env = getenv("CLT_PEAK_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (env && *env) n = snprintf(buf, len, "%s", env);
  else if (xdg && *xdg) n = snprintf(buf, len, "%s/cltrain/peak-flops", xdg);
  else if (home && *home) n = snprintf(buf, len, "%s/.cache/cltrain/peak-flops", home);
  else return clt__error(CLT_ENOTFOUND, "no cache directory for the measured peak FLOP/s: set XDG_CACHE_HOME or HOME "
                         "(or CLT_PEAK_CACHE to the file)");
  if (n < 0 || (size_t)n >= len) return clt__error(CLT_EINVAL, "the peak FLOP/s cache's path is too long");
  const char *slash = strrchr(buf, '/');
  *dir_len = slash ? (size_t)(slash - buf) : 0;
  return CLT_OK;
}

/* The device's key: what tells one device (and its driver) from another. */
static void device_key(const clt_device_info *d, char *buf, size_t len) {
  snprintf(buf, len, "%s|%s|%s|%s", d->name, d->platform_name, d->driver_version, d->pci_bus_id);
  for (char *p = buf; *p; p++)
    if (*p == '\t' || *p == '\n') *p = ' ';
}

/* A line "PEAK<TAB>KEY\n" -> *peak when KEY is key. */
static int line_matches(const char *line, const char *key, double *peak) {
  const char *tab = strchr(line, '\t');
  if (!tab) return 0;
  size_t n = strcspn(tab + 1, "\n");
  if (n != strlen(key) || strncmp(tab + 1, key, n) != 0) return 0;
  char *end;
  double v = strtod(line, &end);
  if (end != tab || !(v > 0)) return 0;
  *peak = v;
  return 1;
}

int clt_device_peak_flops(const clt_device_info *info, double *flops, const char **source) {
  CLT_ARG(info);
  CLT_ARG(flops);
  char path[4096], key[512], line[1024];
  size_t dir_len;
  device_key(info, key, sizeof key);
  *flops = 0;
  if (cache_path(path, sizeof path, &dir_len) == CLT_OK) {
    FILE *f = fopen(path, "r");
    double v = 0;
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = line_matches(line, key, &v);
    if (f) fclose(f);
    if (found) {
      *flops = v;
      if (source) *source = "measured";
      return CLT_OK;
    }
  }
  /* An estimate, meant as an upper bound (a peak no run should pass): a
   * fused multiply-add (2 FLOPs) on every float lane of every compute unit
   * each cycle; a CPU unit (a core) with two AVX-512 FMA ports, 32 lanes
   * (the reported clock is often the base clock, below what cores run
   * at: with AVX2's 8 lanes a 2-core PoCL device showed an MFU of 135%),
   * a GPU's with 64 (AMD's CU; NVIDIA's SM has 128, Intel's EU 8 to 16: a
   * measured rate is better, hence the cache). */
  double lanes = info->type == CLT_DEVICE_CPU ? 32.0 : 64.0;
  *flops = (double)info->compute_units * info->clock_mhz * 1e6 * 2.0 * lanes;
  if (source) *source = "properties";
  return CLT_OK;
}

int clt_device_peak_flops_save(const clt_device_info *info, double flops) {
  CLT_ARG(info);
  if (!(flops > 0) || flops > 1e21)
    return clt__error(CLT_EINVAL, "clt_device_peak_flops_save: %g FLOP/s for %s; give a measured rate above 0", flops,
                      info->name);
  char path[4096], key[512], line[1024];
  size_t dir_len;
  int rc = cache_path(path, sizeof path, &dir_len);
  if (rc < 0) return rc;
  device_key(info, key, sizeof key);
  /* mkdir -p the directory */
  for (size_t i = 1; i <= dir_len; i++)
    if (i == dir_len || path[i] == '/') {
      char c = path[i];
      path[i] = 0;
      int bad = mkdir(path, 0755) < 0 && errno != EEXIST;
      int err = errno;
      path[i] = c;
      if (bad)
        return clt__error(CLT_EIO, "cannot make the cache directory %.*s: %s", (int)i, path, strerror(err));
    }
  char *tmp = clt__tmp_path(path), *target = NULL;
  if (!tmp) return CLT_ENOMEM;
  FILE *in = NULL, *out = NULL;
  if ((rc = clt__output_resolve("the peak FLOP/s cache", path, &target)) < 0) goto done;
  if (!(out = fopen(tmp, "w"))) {
    rc = clt__error(CLT_EIO, "cannot write %s: %s", tmp, strerror(errno));
    goto done;
  }
  if ((in = fopen(target, "r"))) {
    double old;
    while (fgets(line, sizeof line, in))
      if (!line_matches(line, key, &old)) fputs(line, out);
    fclose(in);
  }
  fprintf(out, "%.6g\t%s\n", flops, key);
  if (fclose(out) != 0) {
    out = NULL;
    remove(tmp);
    rc = clt__error(CLT_EIO, "writing %s failed: %s", tmp, strerror(errno));
    goto done;
  }
  out = NULL;
  if ((rc = clt__output_regular("the peak FLOP/s cache", target)) == CLT_OK) rc = clt__output_replace(tmp, target);
  else remove(tmp);
done:
  if (out) fclose(out), remove(tmp);
  free(tmp);
  free(target);
  return rc;
}
