/*
 * cmd_summary.c: `cltrain summary MODEL`: the layers of a model spec with
 * their output shapes and parameter counts.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cmd_summary(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: cltrain summary MODEL\n\nPrints each layer of the model spec file MODEL with its output shape\n"
           "and parameter count.\n");
    return CLI_EXIT_OK;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: cltrain summary MODEL\n");
    return CLI_EXIT_USAGE;
  }
  clt_model *m;
  int rc = clt_model_load(argv[1], &m);
  if (rc < 0) return cli_fail(rc, "summary");
  char *text;
  if ((rc = clt_model_summary(m, &text)) < 0) {
    clt_model_destroy(m);
    return cli_fail(rc, "summary");
  }
  fputs(text, stdout);
  free(text);
  clt_model_destroy(m);
  return CLI_EXIT_OK;
}
