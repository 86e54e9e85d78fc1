/*
 * trace.c: a rank's timeline for a Chrome / Perfetto trace
 * (clt_trainer_trace_start, src/train/trace.c): spans of named work on
 * lanes (the host thread, each replica's device), in nanoseconds since the
 * trace's start. The trainer starts every rank's trace right after a
 * barrier, so one time axis holds all ranks to within the barrier's skew.
 *
 * Spans are recorded by the thread that drives training only (the device's
 * are read from its markers after a run), so no lock is needed. Each span
 * becomes one complete event ("ph": "X") of the Trace Event Format: pid the
 * rank, tid the lane, ts and dur in microseconds.
 */
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct trace_span {
  char name[48];
  const char *cat;
  int64_t t0, t1; /* ns since the trace's start */
  int lane;
} trace_span;

struct clt__trace {
  int64_t start; /* clt__trace_ns() at the start */
  trace_span *spans;
  size_t n, cap;
  char lanes[CLT__TRACE_LANES][64];
  int nlanes;
  int full; /* spans were dropped at CLT__TRACE_MAX_SPANS */
};

int64_t clt__trace_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int clt__trace_create(clt__trace **out) {
  clt__trace *tr = clt__calloc(1, sizeof *tr);
  if (!tr) return CLT_ENOMEM;
  tr->start = clt__trace_ns();
  *out = tr;
  return CLT_OK;
}

void clt__trace_destroy(clt__trace *tr) {
  if (!tr) return;
  free(tr->spans);
  free(tr);
}

int clt__trace_lane(clt__trace *tr, const char *name) {
  if (!tr) return 0;
  for (int i = 0; i < tr->nlanes; i++)
    if (strcmp(tr->lanes[i], name) == 0) return i;
  if (tr->nlanes == CLT__TRACE_LANES) return CLT__TRACE_LANES - 1;
  snprintf(tr->lanes[tr->nlanes], sizeof tr->lanes[0], "%s", name);
  return tr->nlanes++;
}

void clt__trace_span(clt__trace *tr, int lane, const char *cat, int64_t t0, int64_t t1, const char *fmt, ...) {
  if (!tr) return;
  if (tr->n == tr->cap) {
    size_t cap = tr->cap ? 2 * tr->cap : 4096;
    trace_span *s = cap <= CLT__TRACE_MAX_SPANS ? realloc(tr->spans, cap * sizeof *s) : NULL;
    if (!s) {
      tr->full = 1;
      return;
    }
    tr->spans = s, tr->cap = cap;
  }
  trace_span *s = &tr->spans[tr->n++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->name, sizeof s->name, fmt, ap);
  va_end(ap);
  s->cat = cat;
  s->t0 = t0 - tr->start;
  s->t1 = (t1 > t0 ? t1 : t0) - tr->start;
  s->lane = lane;
}

int clt__trace_dropped(const clt__trace *tr) { return tr && tr->full; }

/* A JSON string's contents: the names here are ours (layer kinds, device
 * names), but a device name may hold anything. */
static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
}

int clt__trace_events(const clt__trace *tr, int pid, const char *process, char **out, size_t *len) {
  int rc = CLT_OK;
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  if (!f) return CLT_ENOMEM;
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"", pid);
  put_escaped(f, process);
  fprintf(f, "\"}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
          pid, pid);
  for (int i = 0; i < tr->nlanes; i++) {
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"", pid, i);
    put_escaped(f, tr->lanes[i]);
    fprintf(f, "\"}}");
  }
  for (size_t k = 0; k < tr->n; k++) {
    const trace_span *s = &tr->spans[k];
    fprintf(f, ",\n{\"name\":\"");
    put_escaped(f, s->name);
    fprintf(f, "\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}", s->cat, pid, s->lane,
            (double)s->t0 / 1e3, (double)(s->t1 - s->t0) / 1e3);
  }
  if (fclose(f) != 0) rc = CLT_ENOMEM;
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  *len = size;
  return CLT_OK;
}
