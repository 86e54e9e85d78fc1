/*
 * fashion.h: where the tests find Fashion-MNIST: $CLT_FASHION_MNIST_DIR,
 * else where Debian's dataset-fashion-mnist installs it.
 */
#ifndef CLT_TESTS_FASHION_H
#define CLT_TESTS_FASHION_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The directory, or NULL when it holds no training images (.gz or not). */
static inline const char *fashion_dir(void) {
  static char dir[4096];
  char path[4200];
  const char *env = getenv("CLT_FASHION_MNIST_DIR");
  snprintf(dir, sizeof dir, "%s", env && *env ? env : "/usr/share/datasets/fashion-mnist");
  snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", dir);
  if (access(path, R_OK) != 0) {
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte", dir);
    if (access(path, R_OK) != 0) return NULL;
  }
  return dir;
}

#endif
