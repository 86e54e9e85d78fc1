/*
 * tokenizer.c: clt_tokenizer, a Hugging Face tokenizer.json read and run:
 * the file's top level and its components (each read by its own file's
 * table), tokenizer_config.json's BOS and EOS beside it, and the two
 * pipelines of text.h, encode and decode, behind the public API.
 */
#include "text/text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE (1ll << 31) /* a tokenizer.json larger than 2 GiB is no tokenizer */

static const char *const model_kinds[] = {"BPE"};

/* The whole of a file, NUL-ended. */
static int read_file(const char *path, char **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  *out = NULL;
  if (!f) return clt__error(errno == ENOENT ? CLT_ENOTFOUND : CLT_EIO, "%s: cannot open: %s", path, strerror(errno));
  clt__buf b = {0};
  for (;;) {
    if (clt__buf_reserve(&b, 1 << 16) < 0) {
      fclose(f);
      clt__buf_free(&b);
      return CLT_ENOMEM;
    }
    size_t k = fread(b.p + b.n, 1, b.cap - b.n - 1, f);
    b.n += k;
    if (k == 0 || (int64_t)b.n > MAX_FILE) break;
  }
  const int bad = ferror(f);
  fclose(f);
  if (bad || (int64_t)b.n > MAX_FILE) {
    clt__buf_free(&b);
    return clt__error(CLT_EIO, "%s: %s", path, bad ? "read error" : "larger than 2 GiB; not a tokenizer file");
  }
  b.p[b.n] = 0;
  *out = b.p, *len = b.n;
  return CLT_OK;
}

/* Whether jansson refused an integer beyond int64_t. */
static int integer_overflow(const json_error_t *err) {
#if JANSSON_VERSION_HEX >= 0x020b00
  return json_error_code(err) == json_error_numeric_overflow;
#else
  return strstr(err->text, "too big") != NULL;
#endif
}

/* The JSON object of text. big_as_real: integers beyond int64_t are read
 * as reals, for a file whose numbers are not read (tokenizer_config.json:
 * transformers writes "model_max_length": 1000000000000000019884624838656,
 * its VERY_LARGE_INTEGER, into every one saved without a length). */
static int parse_json(const char *file, const char *text, size_t n, int big_as_real, json_t **out) {
  json_error_t err;
  *out = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
  if (!*out && big_as_real && integer_overflow(&err))
    *out = json_loadb(text, n, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &err);
  if (!*out)
    return clt__error(CLT_EFORMAT, "%s: not valid JSON: %s (line %d, column %d)", file, err.text, err.line, err.column);
  if (!json_is_object(*out)) {
    json_decref(*out);
    *out = NULL;
    return clt__error(CLT_EFORMAT, "%s: the top level is not a JSON object", file);
  }
  return CLT_OK;
}

/* A component that may be null or absent: NULL then. */
static json_t *optional(json_t *root, const char *key) {
  json_t *v = json_object_get(root, key);
  return v && !json_is_null(v) ? v : NULL;
}

/* id -> token for the model's vocabulary and the added tokens, which take
 * precedence as in the library's id_to_token; vocab_size is the largest id
 * + 1. Two tokens of the vocabulary with one id are refused. */
static int build_ids(clt_tokenizer *t) {
  const clt__strmap *v = &t->bpe.vocab;
  uint32_t size = 0;
  for (size_t i = 0; i < v->n; i++)
    if (v->e[i].value + 1 > size) size = v->e[i].value + 1;
  for (int i = 0; i < t->added.n; i++)
    if (t->added.tok[i].id + 1 > size) size = t->added.tok[i].id + 1;
  t->vocab_size = size;
  t->tok = calloc(size ? size : 1, sizeof *t->tok);
  t->tok_len = calloc(size ? size : 1, sizeof *t->tok_len);
  t->special = calloc(size ? size : 1, 1);
  if (!t->tok || !t->tok_len || !t->special) return clt__error(CLT_ENOMEM, "out of host memory for %u tokens", size);
  for (size_t i = 0; i < v->n; i++) {
    const uint32_t id = v->e[i].value;
    if (t->tok[id])
      return clt__error(CLT_EFORMAT, "%s: model.vocab: \"%s\" and \"%s\" both have the id %u", t->path, t->tok[id],
                        clt__strmap_key(v, i), id);
    t->tok[id] = clt__strmap_key(v, i), t->tok_len[id] = v->e[i].len;
  }
  for (int i = 0; i < t->added.n; i++) {
    const clt__added_token *a = &t->added.tok[i];
    t->tok[a->id] = a->content, t->tok_len[a->id] = (uint32_t)a->n, t->special[a->id] = (char)a->special;
  }
  return CLT_OK;
}

/* tokenizer_config.json's "bos_token" / "eos_token": a string, or an
 * object with "content"; -1 when not given. */
static int config_token(clt_tokenizer *t, const char *file, json_t *cfg, const char *key, int64_t *id) {
  json_t *v = json_object_get(cfg, key);
  *id = -1;
  if (!v || json_is_null(v)) return CLT_OK;
  if (json_is_object(v)) v = json_object_get(v, "content");
  if (!json_is_string(v))
    return clt__error(CLT_EFORMAT, "%s: \"%s\" is not a string or an object with a string \"content\"", file, key);
  uint32_t got;
  if (clt_tokenizer_token_to_id(t, json_string_value(v), json_string_length(v), &got) < 0)
    return clt__error(CLT_EFORMAT, "%s: \"%s\" is \"%s\", which is no token of %s", file, key, json_string_value(v),
                      t->path);
  *id = got;
  return CLT_OK;
}

static int read_config(clt_tokenizer *t, const char *file) {
  char *text = NULL;
  size_t n;
  json_t *cfg = NULL;
  int rc = CLT_OK, b;
  CLT_TRY(read_file(file, &text, &n));
  CLT_TRY(parse_json(file, text, n, 1, &cfg)); /* only strings and booleans are read */
  CLT_TRY(config_token(t, file, cfg, "bos_token", &t->bos));
  CLT_TRY(config_token(t, file, cfg, "eos_token", &t->eos));
  const clt__jctx c = {file, ""};
  if (json_object_get(cfg, "add_bos_token")) {
    CLT_TRY(clt__json_bool(&c, cfg, "add_bos_token", 0, &b));
    t->add_bos = b;
  }
  if (json_object_get(cfg, "add_eos_token")) {
    CLT_TRY(clt__json_bool(&c, cfg, "add_eos_token", 0, &b));
    t->add_eos = b;
  }
fail:
  json_decref(cfg);
  free(text);
  return rc;
}

static int refuse_set(const char *file, json_t *root, const char *key) {
  if (!optional(root, key)) return CLT_OK;
  return clt__error(CLT_EFORMAT, "%s: \"%s\" is set; cltrain encodes whole texts, so it reads tokenizer.json files "
                    "whose %s is null", file, key, key);
}

static int parse_tokenizer(clt_tokenizer *t, json_t *root) {
  int rc, kind;
  json_t *v;
  clt__jctx c = {t->path, ""}, sub;
  if ((v = json_object_get(root, "version")) && (!json_is_string(v) || strcmp(json_string_value(v), "1.0") != 0))
    return clt__error(CLT_EFORMAT, "%s: \"version\" is %s%s%s; cltrain reads tokenizer.json version \"1.0\"", t->path,
                      json_is_string(v) ? "\"" : "", json_is_string(v) ? json_string_value(v) : "not a string",
                      json_is_string(v) ? "\"" : "");
  if ((rc = refuse_set(t->path, root, "truncation")) < 0 || (rc = refuse_set(t->path, root, "padding")) < 0)
    return rc;
  clt__jctx_sub(&sub, &c, "model", 0);
  if (!(v = json_object_get(root, "model"))) return clt__error(CLT_EFORMAT, "%s: there is no \"model\"", t->path);
  if ((rc = clt__json_kind(&sub, v, "model", model_kinds, sizeof *model_kinds, 1, &kind)) < 0 ||
      (rc = clt__bpe_parse(&sub, v, &t->bpe)) < 0)
    return rc;
  clt__jctx_sub(&sub, &c, "normalizer", 0);
  if ((v = optional(root, "normalizer"))) {
    if ((rc = clt__normalizer_parse(&sub, v, &t->norm)) < 0) return rc;
    t->has_norm = 1;
  }
  clt__jctx_sub(&sub, &c, "pre_tokenizer", 0);
  if ((v = optional(root, "pre_tokenizer")) && (rc = clt__pretokenizer_parse(&sub, v, &t->pre)) < 0) return rc;
  if ((rc = clt__added_parse(&c, json_object_get(root, "added_tokens"), &t->bpe, &t->added)) < 0 ||
      (rc = clt__added_build(&t->added, t->has_norm ? &t->norm : NULL, &c)) < 0)
    return rc;
  clt__jctx_sub(&sub, &c, "post_processor", 0);
  if ((v = optional(root, "post_processor")) && (rc = clt__postproc_parse(&sub, v, &t->post)) < 0) return rc;
  clt__jctx_sub(&sub, &c, "decoder", 0);
  if ((v = optional(root, "decoder"))) {
    if ((rc = clt__decoder_parse(&sub, v, &t->dec)) < 0) return rc;
    t->has_dec = 1;
  }
  if ((rc = build_ids(t)) < 0) return rc;
  /* every id encode can give is a token, so it decodes */
  for (int p = 0; p < t->post.n; p++)
    for (int i = 0; i < t->post.pass[p].n; i++)
      for (int k = 0; k < t->post.pass[p].items[i].n; k++) {
        const uint32_t id = t->post.pass[p].items[i].ids[k];
        if (id >= t->vocab_size || !t->tok[id])
          return clt__error(CLT_EFORMAT, "%s: post_processor: the special token id %u is no token of the vocabulary",
                            t->path, id);
      }
  return CLT_OK;
}

static int load(const char *name, const char *text, size_t len, clt_tokenizer **out) {
  int rc;
  json_t *root = NULL;
  clt_tokenizer *t = clt__calloc(1, sizeof *t);
  if (!t || !(t->path = clt__strdup(name))) {
    free(t);
    return CLT_ENOMEM;
  }
  t->bos = t->eos = -1, t->add_bos = t->add_eos = -1;
  CLT_TRY(parse_json(name, text, len, 0, &root));
  CLT_TRY(parse_tokenizer(t, root));
  json_decref(root);
  *out = t;
  return CLT_OK;

fail:
  json_decref(root);
  clt_tokenizer_destroy(t);
  return rc;
}

int clt_tokenizer_load_json(const char *json, size_t len, const char *name, clt_tokenizer **out) {
  CLT_ARG(out);
  *out = NULL;
  CLT_ARG(json);
  return load(name ? name : "tokenizer.json", json, len, out);
}

int clt_tokenizer_load(const char *path, clt_tokenizer **out) {
  char file[4096], config[4096];
  struct stat st;
  char *text = NULL;
  size_t len;
  int rc;
  CLT_ARG(out);
  *out = NULL;
  CLT_PATH_ARG(path);
  if (stat(path, &st) != 0)
    return clt__error(errno == ENOENT ? CLT_ENOTFOUND : CLT_EIO, "%s: %s; give a tokenizer.json or the directory "
                      "that holds one", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
    snprintf(config, sizeof config, "%s/tokenizer_config.json", path);
    if (stat(file, &st) != 0) {
      char spm[4096];
      snprintf(spm, sizeof spm, "%s/tokenizer.model", path);
      return clt__error(CLT_ENOTFOUND, "%s: no tokenizer.json here%s", path,
                        stat(spm, &st) == 0 ? " (a SentencePiece tokenizer.model alone is not read: save the "
                                              "tokenizer with transformers' save_pretrained, which writes "
                                              "tokenizer.json)" : "");
    }
  } else {
    snprintf(file, sizeof file, "%s", path);
    const char *slash = strrchr(path, '/');
    snprintf(config, sizeof config, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0, path);
  }
  if ((rc = read_file(file, &text, &len)) < 0) return rc;
  rc = load(file, text, len, out);
  free(text);
  if (rc == CLT_OK && stat(config, &st) == 0 && (rc = read_config(*out, config)) < 0) {
    clt_tokenizer_destroy(*out);
    *out = NULL;
  }
  return rc;
}

void clt_tokenizer_destroy(clt_tokenizer *t) {
  if (!t) return;
  clt__normalizer_free(&t->norm);
  clt__pretokenizer_free(&t->pre);
  clt__bpe_free(&t->bpe);
  clt__added_free(&t->added);
  clt__postproc_free(&t->post);
  clt__decoder_free(&t->dec);
  free(t->tok), free(t->tok_len), free(t->special);
  clt__buf_free(&t->utf8);
  free(t->out.p), free(t->tmp.p);
  clt__toklist_free(&t->dl[0]);
  clt__toklist_free(&t->dl[1]);
  clt__buf_free(&t->dtext);
  free(t->path);
  free(t);
}

int64_t clt_tokenizer_vocab_size(const clt_tokenizer *tok) { return tok ? (int64_t)tok->vocab_size : 0; }

const char *clt_tokenizer_path(const clt_tokenizer *tok) { return tok ? tok->path : ""; }

/* ---- encode ------------------------------------------------------------------ */

static int on_token(void *user, uint32_t id) { return clt__ids_push(&((clt_tokenizer *)user)->out, id); }

/* A piece on to pre-tokenizer step `step`, or to the model after the last. */
static int on_word(void *user, int step, const char *s, size_t n, int first) {
  clt_tokenizer *t = user;
  if (!n) return CLT_OK;
  if (step == t->pre.n) return clt__bpe_tokenize(&t->bpe, s, n, &t->out);
  return clt__pretokenizer_step(&t->pre, step, s, n, first, on_word, t);
}

static int on_normalized(void *user, const char *s, size_t n, size_t at) {
  return on_word(user, 0, s, n, ((clt_tokenizer *)user)->raw_first && at == 0);
}

/* Text between the added tokens that are not normalized: normalized, then
 * cut at the ones that are. */
static int on_raw(void *user, const char *s, size_t n, size_t at) {
  clt_tokenizer *t = user;
  t->raw_first = at == 0;
  if (t->has_norm) {
    int rc = clt__normalizer_run(&t->norm, s, n, 1, &s, &n);
    if (rc < 0) return rc;
  }
  return clt__added_split(&t->added, &t->added.normalized, s, n, on_normalized, on_token, t);
}

int clt_tokenizer_encode(clt_tokenizer *tok, const char *text, size_t len, int flags, uint32_t **ids, int64_t *n) {
  int rc;
  const char *s;
  size_t sn;
  CLT_ARG(ids);
  CLT_ARG(n);
  *ids = NULL, *n = 0;
  CLT_HANDLE(tok, "tokenizer");
  if (!text && len) return clt__null_arg(__func__, "text", NULL);
  clt_tokenizer *t = tok;
  if (flags & ~CLT_ENCODE_SPECIAL)
    return clt__error(CLT_EINVAL, "clt_tokenizer_encode: unknown flags 0x%x", (unsigned)(flags & ~CLT_ENCODE_SPECIAL));
  t->out.n = 0;
  if ((rc = clt__utf8_valid(text ? text : "", len, &s, &sn, &t->utf8)) < 0) return rc;
  if ((rc = clt__added_split(&t->added, &t->added.raw, s, sn, on_raw, on_token, t)) < 0) return rc;
  if ((flags & CLT_ENCODE_SPECIAL) && (rc = clt__postproc_run(&t->post, &t->out, &t->tmp)) < 0) return rc;
  if (!(*ids = malloc((t->out.n ? t->out.n : 1) * sizeof **ids)))
    return clt__error(CLT_ENOMEM, "out of host memory for %zu token ids", t->out.n);
  if (t->out.n) memcpy(*ids, t->out.p, t->out.n * sizeof **ids);
  *n = (int64_t)t->out.n;
  return CLT_OK;
}

/* ---- decode ------------------------------------------------------------------ */

int clt_tokenizer_decode(clt_tokenizer *tok, const uint32_t *ids, int64_t n, int flags, char **text, size_t *len) {
  int rc;
  CLT_ARG(text);
  *text = NULL;
  if (len) *len = 0;
  CLT_HANDLE(tok, "tokenizer");
  if (!ids && n) return clt__null_arg(__func__, "ids", NULL);
  if (n < 0) return clt__error(CLT_EINVAL, "clt_tokenizer_decode: n is %lld; it must be 0 or more", (long long)n);
  clt_tokenizer *t = tok;
  if (flags & ~CLT_DECODE_SKIP_SPECIAL)
    return clt__error(CLT_EINVAL, "clt_tokenizer_decode: unknown flags 0x%x",
                      (unsigned)(flags & ~CLT_DECODE_SKIP_SPECIAL));
  clt__toklist *in = &t->dl[0];
  in->n = 0, in->text.n = 0;
  for (int64_t i = 0; i < n; i++) {
    const uint32_t id = ids[i];
    if (id >= t->vocab_size || !t->tok[id])
      return clt__error(CLT_EINVAL, "clt_tokenizer_decode: the id %u at index %lld is %s of %s (%u ids)", id,
                        (long long)i, id >= t->vocab_size ? "outside the vocabulary" : "no token", t->path,
                        t->vocab_size);
    if ((flags & CLT_DECODE_SKIP_SPECIAL) && t->special[id]) continue;
    if (t->has_dec || !in->n) {
      if ((rc = clt__toklist_add(in, t->tok[id], t->tok_len[id])) < 0) return rc;
    } else { /* no decoder: the tokens joined by spaces, as the library does */
      if ((rc = clt__buf_put(&in->text, " ", 1)) < 0 || (rc = clt__buf_put(&in->text, t->tok[id], t->tok_len[id])) < 0)
        return rc;
      in->len[0] = in->text.n;
    }
  }
  if (t->has_dec) {
    if ((rc = clt__decoder_run(&t->dec, &t->dl[0], &t->dl[1], &t->dtext)) < 0) return rc;
  } else {
    t->dtext.n = 0;
    if ((rc = clt__buf_put(&t->dtext, in->text.p, in->text.n)) < 0) return rc;
  }
  if (!(*text = malloc(t->dtext.n + 1))) return clt__error(CLT_ENOMEM, "out of host memory for decoded text");
  if (t->dtext.n) memcpy(*text, t->dtext.p, t->dtext.n);
  (*text)[t->dtext.n] = 0;
  if (len) *len = t->dtext.n;
  return CLT_OK;
}

/* ---- the vocabulary ---------------------------------------------------------- */

int clt_tokenizer_token_to_id(const clt_tokenizer *tok, const char *token, size_t len, uint32_t *id) {
  CLT_HANDLE(tok, "tokenizer");
  CLT_ARG(token);
  CLT_ARG(id);
  const clt_tokenizer *t = tok;
  const clt__added_token *a = clt__added_by_content(&t->added, token, len);
  if (a) return *id = a->id, CLT_OK;
  if (clt__strmap_get(&t->bpe.vocab, token, len, id)) return CLT_OK;
  return clt__error(CLT_ENOTFOUND, "%s: \"%.*s\" is no token", t->path, (int)(len > 100 ? 100 : len), token);
}

const char *clt_tokenizer_id_to_token(const clt_tokenizer *t, uint32_t id, size_t *len) {
  if (!t || id >= t->vocab_size || !t->tok[id]) return NULL;
  if (len) *len = t->tok_len[id];
  return t->tok[id];
}

int clt_tokenizer_is_special(const clt_tokenizer *t, uint32_t id) {
  return t && id < t->vocab_size && t->special[id];
}

/* BOS or EOS: tokenizer_config.json's, else the post-processor's token
 * before / after the sequence; whether the tokenizer adds it likewise. */
static int end_token(const clt_tokenizer *t, int eos, uint32_t *id, int *add) {
  const uint32_t *before, *after;
  int nb, na;
  clt__postproc_ends(&t->post, &before, &nb, &after, &na);
  const int64_t cfg = eos ? t->eos : t->bos;
  const int cfg_add = eos ? t->add_eos : t->add_bos;
  const uint32_t *tmpl = eos ? after : before;
  const int ntmpl = eos ? na : nb;
  int64_t got = cfg >= 0 ? cfg : ntmpl == 1 ? (int64_t)tmpl[0] : -1;
  if (got < 0)
    return clt__error(CLT_ENOTFOUND, "%s: no %s token is known: its post-processor puts none %s the text, and no "
                      "tokenizer_config.json beside it names an %s", t->path, eos ? "EOS" : "BOS",
                      eos ? "after" : "before", eos ? "eos_token" : "bos_token");
  if (id) *id = (uint32_t)got;
  if (add) *add = cfg_add >= 0 ? cfg_add : (ntmpl == 1 && tmpl[0] == (uint32_t)got);
  return CLT_OK;
}

int clt_tokenizer_bos(const clt_tokenizer *tok, uint32_t *id, int *add) {
  CLT_HANDLE(tok, "tokenizer");
  return end_token(tok, 0, id, add);
}

int clt_tokenizer_eos(const clt_tokenizer *tok, uint32_t *id, int *add) {
  CLT_HANDLE(tok, "tokenizer");
  return end_token(tok, 1, id, add);
}
