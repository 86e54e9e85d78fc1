/*
 * text.h: the tokenizers' internals (src/text). A clt_tokenizer is read from
 * a Hugging Face tokenizer.json and runs its pipeline as the `tokenizers`
 * library does (tokenizers/src/tokenizer/mod.rs):
 *
 *   text -> valid UTF-8 (utf8.c) -> added tokens that are not normalized
 *   (added.c) -> the normalizer (normalizer.c) -> the added tokens that are
 *   -> the pre-tokenizer's steps (pretokenizer.c, bytelevel.c) -> the BPE
 *   model (bpe.c) -> the post-processor's special tokens (postproc.c)
 *
 * and decodes ids back through the decoder's steps (decoder.c). Every kind
 * of component is a row of its file's table (name, parse, run), and a kind
 * not in a table is refused by name when the file is read. Regular
 * expressions are PCRE2's (regex.c), in UTF mode with Unicode properties, the
 * JSON is jansson's; the only Unicode knowledge here is UTF-8's structure.
 */
#ifndef CLT_TEXT_H
#define CLT_TEXT_H

#include "core/internal.h"

#include <jansson.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---- buffers -------------------------------------------------------------- */

/* A growable byte string (not NUL-terminated unless put so). */
typedef struct clt__buf {
  char *p;
  size_t n, cap;
} clt__buf;

int clt__buf_reserve(clt__buf *b, size_t more);
int clt__buf_put(clt__buf *b, const void *p, size_t n);
void clt__buf_free(clt__buf *b);

/* A growable array of token ids. */
typedef struct clt__ids {
  uint32_t *p;
  size_t n, cap;
} clt__ids;

int clt__ids_reserve(clt__ids *v, size_t more);
static inline int clt__ids_push(clt__ids *v, uint32_t id) {
  if (v->n == v->cap && clt__ids_reserve(v, 1) < 0) return CLT_ENOMEM;
  v->p[v->n++] = id;
  return CLT_OK;
}

/* ---- maps (strmap.c) -------------------------------------------------------- */

uint64_t clt__hash_bytes(const void *p, size_t n);

/* Byte strings to uint32 values, open addressing; the keys are copied. */
typedef struct clt__strmap_entry {
  uint64_t hash;
  size_t key; /* offset of the key in keys */
  uint32_t len, value;
} clt__strmap_entry;

typedef struct clt__strmap {
  uint32_t *slots; /* entry index + 1; 0 empty */
  size_t mask;
  clt__strmap_entry *e;
  size_t n, cap;
  clt__buf keys;
} clt__strmap;

/* Set key -> value; *had (if not NULL) says whether the key was there (its
 * value is then replaced). */
int clt__strmap_put(clt__strmap *m, const char *key, size_t len, uint32_t value, int *had);
/* 1 and *value when the key is there, else 0. */
int clt__strmap_get(const clt__strmap *m, const char *key, size_t len, uint32_t *value);
static inline const char *clt__strmap_key(const clt__strmap *m, size_t i) { return m->keys.p + m->e[i].key; }
void clt__strmap_clear(clt__strmap *m);
void clt__strmap_free(clt__strmap *m);

/* Pairs of ids to (rank, id) (BPE's merges). */
typedef struct clt__pairmap {
  uint64_t *keys; /* (a << 32 | b) + 1; 0 empty */
  uint32_t *rank, *id;
  size_t mask, n;
} clt__pairmap;

int clt__pairmap_put(clt__pairmap *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id);
static inline int clt__pairmap_get(const clt__pairmap *m, uint32_t a, uint32_t b, uint32_t *rank, uint32_t *id) {
  if (!m->keys) return 0;
  const uint64_t k = ((uint64_t)a << 32 | b) + 1;
  for (size_t i = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;; i = (i + 1) & m->mask) {
    if (m->keys[i] == k) {
      *rank = m->rank[i], *id = m->id[i];
      return 1;
    }
    if (!m->keys[i]) return 0;
  }
}
void clt__pairmap_free(clt__pairmap *m);

/* ---- UTF-8 (utf8.c) ----------------------------------------------------------- */

/* The length of the UTF-8 character at s[0] in valid text (1 to 4). */
static inline size_t clt__utf8_len(unsigned char c) { return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }
/* s[0..n) with each ill-formed part replaced by U+FFFD as Python's
 * bytes.decode(errors="replace") and Rust's String::from_utf8_lossy do (one
 * U+FFFD per maximal subpart, Unicode 3.9 "U+FFFD substitution"). *out is
 * s itself when s is valid, else out_buf's bytes. */
int clt__utf8_valid(const char *s, size_t n, const char **out, size_t *out_n, clt__buf *out_buf);
/* Append the UTF-8 of code point c (below 0x110000) to b. */
int clt__utf8_put(clt__buf *b, uint32_t c);
/* The code point at s[0..n) and its length, for valid UTF-8. */
uint32_t clt__utf8_decode(const char *s, size_t n, size_t *len);

/* ---- regular expressions (regex.c) --------------------------------------------- */

/* A PCRE2 pattern in UTF mode with Unicode properties, JIT-compiled. */
typedef struct clt__regex {
  pcre2_code *code;
  pcre2_match_data *md;
  pcre2_match_context *mctx;
  pcre2_jit_stack *stack;
  int jit;
} clt__regex;

/* Compile pattern[0..n) as the tokenizers library's Oniguruma reads it, or as
 * literal text; a pattern PCRE2 refuses, or one using a construct whose
 * meaning differs between the two, is CLT_EFORMAT naming `where`. */
int clt__regex_compile(clt__regex *re, const char *pattern, size_t n, int literal, const char *file,
                       const char *where);
void clt__regex_free(clt__regex *re);

/* The matches of a pattern in s[0..n), as the tokenizers library's
 * Oniguruma iterator finds them (an empty match right after the last match
 * is skipped by one character). */
typedef struct clt__regex_iter {
  clt__regex *re;
  const char *s;
  size_t n, next, last_match_end;
  int any, utf_checked;
} clt__regex_iter;

void clt__regex_iter_init(clt__regex_iter *it, clt__regex *re, const char *s, size_t n, int utf_checked);
/* 1 and the match [*start, *end); 0 when no more; < 0 on an error. */
int clt__regex_next(clt__regex_iter *it, size_t *start, size_t *end);

/* A range of a string and whether it is a match of the pattern. */
typedef struct clt__span {
  size_t start, end;
  int match;
} clt__span;

typedef struct clt__spans {
  clt__span *p;
  size_t n, cap;
} clt__spans;

/* s[0..n) cut into matches and what lies between them (the tokenizers
 * library's Pattern::find_matches), flags inverted when invert. */
int clt__regex_spans(clt__regex *re, const char *s, size_t n, int invert, int utf_checked, clt__spans *out);
/* Every match of re in s[0..n) replaced by content, appended to out. */
int clt__regex_replace(clt__regex *re, const char *s, size_t n, const char *content, size_t cn, int utf_checked,
                       clt__buf *out);

/* ---- JSON helpers (tokenizer_json.c) -------------------------------------------- */

/* What the parsers share: the file named in messages, and the JSON path of
 * the component being read ("pre_tokenizer.pretokenizers[1]"). */
typedef struct clt__jctx {
  const char *file;
  char where[512];
} clt__jctx;

/* A member that must be a string, bool, unsigned integer...; missing or of
 * another type is CLT_EFORMAT naming file, path and key. */
int clt__json_string(const clt__jctx *c, json_t *obj, const char *key, const char **s, size_t *n);
int clt__json_string_or_null(const clt__jctx *c, json_t *obj, const char *key, const char **s, size_t *n);
int clt__json_bool(const clt__jctx *c, json_t *obj, const char *key, int dflt, int *out);
int clt__json_uint(const clt__jctx *c, json_t *obj, const char *key, int64_t max, int64_t *out);
/* The "type" of a component; *kind is the row of table (a char* name as
 * each row's first member, rows of stride bytes, n rows) or CLT_EFORMAT
 * naming the type and what is read. */
int clt__json_kind(const clt__jctx *c, json_t *obj, const char *what, const void *table, size_t stride, int n,
                   int *kind);
/* c's path extended by ".key" or "[i]" into sub. */
void clt__jctx_sub(clt__jctx *sub, const clt__jctx *c, const char *key, int index);

/* {"String": s} or {"Regex": r} at obj.key, compiled into re (the pattern
 * of Replace and Split). */
int clt__parse_pattern(const clt__jctx *c, json_t *obj, const char *key, clt__regex *re);

/* Metaspace's members, read for the pre-tokenizer and the decoder alike. */
int clt__parse_metaspace(const clt__jctx *c, json_t *j, char *rep, size_t *rep_n, int *prepend);

/* ---- the byte-level alphabet (bytelevel.c) -------------------------------------------- */

/* GPT-2's map of the 256 bytes to printable code points (bytes_to_unicode):
 * the UTF-8 of each, and the byte of each code point below 0x144 (-1 where
 * none). */
typedef struct clt__bytelevel_map {
  char utf8[256][3];
  uint8_t len[256];
  int16_t byte_of[0x144];
} clt__bytelevel_map;

const clt__bytelevel_map *clt__bytelevel(void);
/* Append the byte-level form of s[0..n) to out. */
int clt__bytelevel_map_bytes(const char *s, size_t n, clt__buf *out);
/* Append the bytes s[0..n) stands for when every character of it is in the
 * alphabet, else s itself (the ByteLevel decoder, per token). */
int clt__bytelevel_unmap(const char *s, size_t n, clt__buf *out);

/* ---- components ------------------------------------------------------------------------ */

typedef struct clt__tokenizer_impl clt__tokenizer_impl;

/* The normalizer (normalizer.c): a Sequence is flattened into steps. */
typedef struct clt__norm_step {
  int kind;
  char *text; /* Prepend's prefix, Replace's content */
  size_t text_n;
  clt__regex re; /* Replace's pattern */
} clt__norm_step;

typedef struct clt__normalizer {
  clt__norm_step *steps;
  int n;
  clt__buf tmp[2];
} clt__normalizer;

int clt__normalizer_parse(const clt__jctx *c, json_t *j, clt__normalizer *out);
/* s[0..n) normalized into out (replaced); *res, *res_n point at the result. */
int clt__normalizer_run(clt__normalizer *nz, const char *s, size_t n, int utf_checked, const char **res,
                        size_t *res_n);
void clt__normalizer_free(clt__normalizer *nz);

/* The pre-tokenizer (pretokenizer.c): a Sequence is flattened into steps,
 * each cutting a piece into pieces that go on to the next step. */
enum { CLT__PREPEND_NEVER, CLT__PREPEND_ALWAYS, CLT__PREPEND_FIRST };
enum { CLT__SPLIT_REMOVED, CLT__SPLIT_ISOLATED, CLT__SPLIT_MERGED_PREV, CLT__SPLIT_MERGED_NEXT, CLT__SPLIT_CONTIGUOUS };

typedef struct clt__pretok_step {
  int kind;
  clt__regex re;          /* Split, Digits; ByteLevel's own when use_regex */
  int behavior, invert;   /* Split */
  int add_prefix_space;   /* ByteLevel */
  int use_regex;          /* ByteLevel */
  char rep[8];            /* Metaspace's replacement character */
  size_t rep_n;
  int prepend, split;     /* Metaspace: CLT__PREPEND_*, split at rep */
  clt__spans spans;       /* scratch */
  clt__buf with_space, mapped;
} clt__pretok_step;

typedef struct clt__pretokenizer {
  clt__pretok_step *steps;
  int n;
} clt__pretokenizer;

/* Where a step sends its pieces: on to step `step` (the model after the
 * last). */
typedef int (*clt__piece_fn)(void *user, int step, const char *s, size_t n, int first);

int clt__pretokenizer_parse(const clt__jctx *c, json_t *j, clt__pretokenizer *out);
/* first: the piece starts where the text does (Metaspace's prepend_scheme
 * "first" asks). */
int clt__pretokenizer_step(clt__pretokenizer *pt, int step, const char *s, size_t n, int first, clt__piece_fn next,
                           void *user);
void clt__pretokenizer_free(clt__pretokenizer *pt);

/* The BPE model (bpe.c). */
typedef struct clt__bpe_symbol {
  uint32_t id;
  int32_t prev, next;
  uint32_t len; /* bytes of the word it covers; 0: merged away */
} clt__bpe_symbol;

typedef struct clt__bpe_merge {
  uint32_t rank, pos, id;
} clt__bpe_merge;

typedef struct clt__bpe {
  clt__strmap vocab;     /* token -> id */
  clt__pairmap merges;   /* (left id, right id) -> (rank, merged id) */
  int byte_fallback, fuse_unk, ignore_merges, has_unk;
  uint32_t unk_id;
  int32_t byte_id[256];  /* <0xXX>'s id, -1 when not in the vocabulary */
  char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix */
  size_t prefix_n, suffix_n;
  /* the words seen and their ids: key -> offset in cache_ids of (n, ids...) */
  clt__strmap cache;
  clt__ids cache_ids;
  /* scratch of one word */
  clt__bpe_symbol *sym;
  size_t nsym, symcap;
  clt__bpe_merge *heap;
  size_t nheap, heapcap;
  clt__buf piece;
} clt__bpe;

int clt__bpe_parse(const clt__jctx *c, json_t *model, clt__bpe *out);
/* The ids of one word appended to out. */
int clt__bpe_tokenize(clt__bpe *m, const char *s, size_t n, clt__ids *out);
void clt__bpe_free(clt__bpe *m);

/* Added tokens (added.c). */
typedef struct clt__added_token {
  char *content;
  size_t n;
  uint32_t id;
  int special, lstrip, rstrip, normalized, single_word;
} clt__added_token;

/* The tokens matched on text before (raw) or after (normalized) the
 * normalizer, each as its pattern: leftmost-longest, as aho-corasick's
 * MatchKind::LeftmostLongest. */
typedef struct clt__added_set {
  struct clt__added_pattern {
    char *p;
    size_t n;
    int token; /* index into the tokens */
  } *pat;
  int n;
  int first[257]; /* patterns starting with byte b: pat[first[b] .. first[b+1]), longest first */
} clt__added_set;

typedef struct clt__added {
  clt__added_token *tok;
  int n;
  clt__added_set raw, normalized;
  clt__regex word, space; /* Rust regex's \w and \s, for single_word, lstrip, rstrip */
  int have_word;
} clt__added;

/* Read "added_tokens" and give each its id as the library does (the
 * model's id of its content, else the next id after the vocabulary). */
int clt__added_parse(const clt__jctx *c, json_t *list, const clt__bpe *model, clt__added *out);
/* Build the two matching sets (after the normalizer is known). */
int clt__added_build(clt__added *a, clt__normalizer *nz, const clt__jctx *c);
/* Cut s[0..n) at the set's tokens: piece(user, s, n) for text between them,
 * token(user, id) for each token, in order. */
int clt__added_split(clt__added *a, const clt__added_set *set, const char *s, size_t n,
                     int (*piece)(void *user, const char *s, size_t n, size_t at),
                     int (*token)(void *user, uint32_t id),
                     void *user);
/* The added token with this id, or NULL. */
const clt__added_token *clt__added_by_id(const clt__added *a, uint32_t id);
const clt__added_token *clt__added_by_content(const clt__added *a, const char *s, size_t n);
void clt__added_free(clt__added *a);

/* The post-processor (postproc.c): the single-sequence template as a list
 * of items, each the sequence or special token ids. */
typedef struct clt__post_item {
  int is_sequence;
  uint32_t *ids;
  int n;
} clt__post_item;

typedef struct clt__postproc {
  struct clt__post_pass {
    clt__post_item *items;
    int n;
  } *pass;
  int n;
} clt__postproc;

int clt__postproc_parse(const clt__jctx *c, json_t *j, clt__postproc *out);
/* ids with every pass's special tokens around them (in place in v). */
int clt__postproc_run(const clt__postproc *pp, clt__ids *v, clt__ids *tmp);
/* The ids the template puts before and after the sequence (its first pass). */
void clt__postproc_ends(const clt__postproc *pp, const uint32_t **before, int *nbefore, const uint32_t **after,
                        int *nafter);
void clt__postproc_free(clt__postproc *pp);

/* The decoder (decoder.c): a list of strings through each step. */
typedef struct clt__toklist {
  clt__buf text;
  size_t *off, *len;
  size_t n, cap;
} clt__toklist;

int clt__toklist_add(clt__toklist *l, const char *s, size_t n);
void clt__toklist_free(clt__toklist *l);

typedef struct clt__dec_step {
  int kind;
  clt__regex re;     /* Replace */
  char *text;        /* Replace's content, Strip's character */
  size_t text_n;
  int64_t start, stop; /* Strip */
  int prepend;         /* Metaspace: CLT__PREPEND_* */
} clt__dec_step;

typedef struct clt__decoder {
  clt__dec_step *steps;
  int n;
} clt__decoder;

int clt__decoder_parse(const clt__jctx *c, json_t *j, clt__decoder *out);
/* in through every step; in and tmp are scratch; the result's strings are
 * joined into out. */
int clt__decoder_run(clt__decoder *d, clt__toklist *in, clt__toklist *tmp, clt__buf *out);
void clt__decoder_free(clt__decoder *d);

/* ---- the tokenizer ---------------------------------------------------------------------- */

struct clt_tokenizer {
  char *path; /* the tokenizer.json read, for messages */
  clt__normalizer norm;
  int has_norm;
  clt__pretokenizer pre;
  clt__bpe bpe;
  clt__added added;
  clt__postproc post;
  clt__decoder dec;
  int has_dec;
  uint32_t vocab_size;
  /* id -> token string (the model's vocabulary; added tokens in added) */
  const char **tok;
  uint32_t *tok_len;
  char *special; /* 1 for the special tokens (skipped by CLT_DECODE_SKIP_SPECIAL) */
  int raw_first; /* the piece between added tokens being encoded starts the text */
  /* tokenizer_config.json: bos_token, eos_token, add_bos_token, add_eos_token */
  int64_t bos, eos;
  int add_bos, add_eos; /* -1: not said */
  /* scratch of one call */
  clt__buf utf8, norm_out;
  clt__ids out, tmp;
  clt__toklist dl[2];
  clt__buf dtext;
};

#endif
