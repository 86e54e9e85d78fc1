/*
 * cli_options.c: the commands' option parsing: getopt_long with the tool's
 * own message for an option it cannot take, "cltrain: train: unrecognized
 * option '--bogus'", in the "cltrain: what: detail" form of every failure
 * (cltrain(1), EXIT STATUS). getopt's own messages would start with the
 * command's name alone ("train: unrecognized option"), since each command
 * gets the argument vector from its name on.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The message for a long option getopt_long refused with '?': unknown,
 * ambiguous (several options start with it), or given a value it takes
 * none of. */
static void long_refused(const char *cmd, const char *arg, const struct option *longopts) {
  size_t n = strcspn(arg + 2, "=");
  const struct option *hit = NULL;
  int matches = 0;
  for (const struct option *o = longopts; o->name; o++) {
    if (strncmp(o->name, arg + 2, n) != 0) continue;
    if (strlen(o->name) == n) { /* exact: no ambiguity */
      hit = o, matches = 1;
      break;
    }
    hit = o, matches++;
  }
  if (matches == 1 && hit->has_arg == no_argument && arg[2 + n] == '=') {
    fprintf(stderr, "cltrain: %s: option '--%s' takes no value, not '%s'", cmd, hit->name, arg + 3 + n);
  } else if (matches > 1) {
    fprintf(stderr, "cltrain: %s: option '--%.*s' is ambiguous: it begins", cmd, (int)n, arg + 2);
    int k = 0;
    for (const struct option *o = longopts; o->name; o++)
      if (strncmp(o->name, arg + 2, n) == 0) fprintf(stderr, "%s --%s", k++ ? "," : "", o->name);
  } else {
    fprintf(stderr, "cltrain: %s: unrecognized option '%.*s'", cmd, (int)(n + 2), arg);
  }
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts, const char *cmd) {
  char spec[128];
  /* A leading ':' makes a missing value ':' instead of '?'. */
  snprintf(spec, sizeof spec, ":%s", shortopts);
  opterr = 0;
  int before = optind;
  int c = getopt_long(argc, argv, spec, longopts, NULL);
  if (c != '?' && c != ':') return c;
  /* A long option always moves optind on in the call that reads it; a
   * short one inside a cluster ("-qz") may not, and then argv[optind - 1]
   * is an earlier argument. */
  const char *arg = optind > before && optind - 1 < argc ? argv[optind - 1] : "";
  int is_long = strncmp(arg, "--", 2) == 0 && arg[2];
  if (c == ':' && is_long)
    fprintf(stderr, "cltrain: %s: option '%.*s' needs a value", cmd, (int)strcspn(arg, "="), arg);
  else if (c == ':')
    fprintf(stderr, "cltrain: %s: option '-%c' needs a value", cmd, optopt);
  else if (is_long)
    long_refused(cmd, arg, longopts);
  else if (optopt > ' ' && optopt < 127)
    fprintf(stderr, "cltrain: %s: unrecognized option '-%c'", cmd, optopt);
  else
    fprintf(stderr, "cltrain: %s: unrecognized option '%s'", cmd, arg);
  fprintf(stderr, " ('cltrain %s --help' lists the options)\n", cmd);
  return '?';
}
