/*
 * log.c: the logging callback. Messages go to a user callback or stderr;
 * the level comes from clt_log_set_level() or CLT_LOG_LEVEL.
 */
#include "core/internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static clt_log_fn log_fn;
static void *log_user;
static int log_level = -1; /* -1: not read from the environment yet */

static const char *const level_names[] = {"none", "error", "warn", "info", "debug", "trace"};

const char *clt_log_level_name(clt_log_level level) {
  if ((int)level < 0 || level > CLT_LOG_TRACE) return "?";
  return level_names[level];
}

int clt_log_level_parse(const char *text) {
  if (!text) return -1;
  for (int i = 0; i <= CLT_LOG_TRACE; i++)
    if (strcmp(text, level_names[i]) == 0) return i;
  if (strcmp(text, "warning") == 0) return CLT_LOG_WARN;
  if (text[0] >= '0' && text[0] <= '5' && text[1] == '\0') return text[0] - '0';
  return -1;
}

clt_log_level clt_log_get_level(void) {
  pthread_mutex_lock(&log_lock);
  if (log_level < 0) {
    const char *env = getenv("CLT_LOG_LEVEL");
    int parsed = clt_log_level_parse(env);
    log_level = parsed >= 0 ? parsed : CLT_LOG_WARN;
    if (env && parsed < 0)
      fprintf(stderr, "cltrain: warning: CLT_LOG_LEVEL='%s' is not a level "
                      "(none|error|warn|info|debug|trace or 0..5); using warn\n", env);
  }
  int level = log_level;
  pthread_mutex_unlock(&log_lock);
  return (clt_log_level)level;
}

void clt_log_set_level(clt_log_level level) {
  pthread_mutex_lock(&log_lock);
  log_level = level;
  pthread_mutex_unlock(&log_lock);
}

void clt_log_set(clt_log_fn fn, void *user) {
  pthread_mutex_lock(&log_lock);
  log_fn = fn;
  log_user = user;
  pthread_mutex_unlock(&log_lock);
}

void clt__log(clt_log_level level, const char *fmt, ...) {
  if (level == CLT_LOG_NONE || level > clt_log_get_level()) return;
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&log_lock);
  clt_log_fn fn = log_fn;
  void *user = log_user;
  pthread_mutex_unlock(&log_lock);
  if (fn)
    fn(level, msg, user);
  else
    fprintf(stderr, "cltrain: %s: %s\n", clt_log_level_name(level), msg);
}
