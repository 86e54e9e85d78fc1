/*
 * fuzz_targets.h: one input through each of cltrain's file parsers: the
 * model spec parser, the IDX, raw and token dataset readers, users' data
 * (.npy, .npz, CSV), the safetensors
 * reader behind clt_trainer_load_weights, and the tokenizer.json reader. Shared by the seeded mutation
 * test (tests/fuzz/fuzz_inputs.c, run by `make check`) and the libFuzzer
 * harnesses (tests/fuzz/, built by --enable-fuzz).
 *
 * Each target returns 1 when the input was accepted and could be used, 0
 * when it was refused with a message that names the input, and -1 (after
 * printing why) when the parser broke its contract without crashing. A crash, a sanitizer report or a hang is a failure the caller
 * sees without help.
 */
#ifndef CLT_FUZZ_TARGETS_H
#define CLT_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

/* The spec text (need not be NUL-terminated or free of NULs). */
int fuzz_spec(const uint8_t *data, size_t n);
/* An IDX image file, paired with a valid label file of 8 labels. dir is a
 * scratch directory for the files. */
int fuzz_idx_images(const char *dir, const uint8_t *data, size_t n);
/* An IDX label file, paired with a valid image file of 8 images. */
int fuzz_idx_labels(const char *dir, const uint8_t *data, size_t n);
/* A raw dataset file. */
int fuzz_raw(const char *dir, const uint8_t *data, size_t n);
/* An llm.c token shard, opened with T = 4 and no vocabulary. */
int fuzz_tokens(const char *dir, const uint8_t *data, size_t n);
/* Users' data through clt_dataset_open, for regression: an .npy (a 2-D
 * table, the last column the target), an .npz (members x, y), a CSV file. */
int fuzz_npy(const char *dir, const uint8_t *data, size_t n);
int fuzz_npz(const char *dir, const uint8_t *data, size_t n);
int fuzz_csv(const char *dir, const uint8_t *data, size_t n);
/* Seeds: 0 an .npy of (4, 3) float32, 1 a stored .npz, 2 a deflated one. */
void fuzz_seed_npy(int which, uint8_t **out, size_t *n);
extern const char *const fuzz_seed_csv;
/* A safetensors file: opened, and every tensor found is read. */
int fuzz_safetensors(const char *dir, const uint8_t *data, size_t n);

/* A Hugging Face tokenizer.json: read, then a text with special tokens and
 * bytes that are not UTF-8 encoded, and its ids decoded. */
int fuzz_tokenizer(const uint8_t *data, size_t n);

/* Valid inputs to start mutating from: *out is malloc'd, free() it. */
void fuzz_seed_idx_images(uint8_t **out, size_t *n);
void fuzz_seed_idx_labels(uint8_t **out, size_t *n);
void fuzz_seed_raw(const char *dir, uint8_t **out, size_t *n);
/* A shard of 41 tokens, uint16 or (wide) uint32. */
void fuzz_seed_tokens(const char *dir, int wide, uint8_t **out, size_t *n);
void fuzz_seed_safetensors(const char *dir, uint8_t **out, size_t *n);
/* NULL-terminated list of valid spec texts. */
extern const char *const fuzz_seed_specs[];
/* NULL-terminated list of valid tokenizer.json texts (a byte-level BPE and
 * two SentencePiece-style ones, every component kind cltrain reads). */
extern const char *const fuzz_seed_tokenizers[];

/* Write n bytes to path; exits on failure (a broken test machine). */
void fuzz_write_file(const char *path, const uint8_t *data, size_t n);

#endif
