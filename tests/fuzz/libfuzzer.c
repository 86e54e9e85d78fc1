/*
 * libfuzzer.c: libFuzzer entry points for the targets of tests/fuzz/fuzz_targets.h,
 * one program per target chosen by -DFUZZ_TARGET_<NAME> (see Makefile.am;
 * built only by ./configure --enable-fuzz CC=clang). Run one with a corpus
 * directory, for example:
 *
 *   tests/fuzz/fuzz_spec -max_total_time=60 corpus-spec/
 *
 * A contract breach (a refusal without a message naming the input) aborts,
 * so libFuzzer saves the input like a crash.
 */
#include "fuzz_targets.h"

#include <stdio.h>
#include <stdlib.h>

#include <cltrain.h>

static char dir[4096];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  const char *t = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/cltrain-libfuzzer-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    exit(1);
  }
  clt_log_set_level(CLT_LOG_NONE);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  int rc;
  clt_clear_error();
#if defined(FUZZ_TARGET_SPEC)
  rc = fuzz_spec(data, n);
#elif defined(FUZZ_TARGET_IDX_IMAGES)
  rc = fuzz_idx_images(dir, data, n);
#elif defined(FUZZ_TARGET_IDX_LABELS)
  rc = fuzz_idx_labels(dir, data, n);
#elif defined(FUZZ_TARGET_RAW)
  rc = fuzz_raw(dir, data, n);
#elif defined(FUZZ_TARGET_NPY)
  rc = fuzz_npy(dir, data, n);
#elif defined(FUZZ_TARGET_NPZ)
  rc = fuzz_npz(dir, data, n);
#elif defined(FUZZ_TARGET_CSV)
  rc = fuzz_csv(dir, data, n);
#elif defined(FUZZ_TARGET_TOKENS)
  rc = fuzz_tokens(dir, data, n);
#elif defined(FUZZ_TARGET_SAFETENSORS)
  rc = fuzz_safetensors(dir, data, n);
#elif defined(FUZZ_TARGET_TOKENIZER)
  rc = fuzz_tokenizer(data, n);
#else
#error "define one FUZZ_TARGET_*"
#endif
  if (rc < 0) abort();
  return 0;
}
