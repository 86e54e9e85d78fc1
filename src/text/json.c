/*
 * json.c: reading the members of tokenizer.json's components with jansson,
 * each fault a CLT_EFORMAT that names the file, the component's path in
 * the file ("pre_tokenizer.pretokenizers[1]") and the member.
 */
#include "text/text.h"

#include <stdio.h>
#include <string.h>

void clt__jctx_sub(clt__jctx *sub, const clt__jctx *c, const char *key, int index) {
  char where[sizeof sub->where]; /* sub may be c */
  if (key)
    snprintf(where, sizeof where, "%.400s%s%.100s", c->where, c->where[0] ? "." : "", key);
  else
    snprintf(where, sizeof where, "%.400s[%d]", c->where, index);
  sub->file = c->file;
  memcpy(sub->where, where, sizeof where);
}

static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE: case JSON_FALSE: return "a boolean";
  default: return "null";
  }
}

static int wrong(const clt__jctx *c, const char *key, const json_t *v, const char *want) {
  if (!v)
    return clt__error(CLT_EFORMAT, "%s: %s%shas no \"%s\" (%s)", c->file, c->where, c->where[0] ? " " : "", key,
                      want);
  return clt__error(CLT_EFORMAT, "%s: %s%s\"%s\" is %s, not %s", c->file, c->where, c->where[0] ? ": " : "", key,
                    type_name(v), want);
}

int clt__json_string(const clt__jctx *c, json_t *obj, const char *key, const char **s, size_t *n) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_string(v)) return wrong(c, key, v, "a string");
  *s = json_string_value(v);
  *n = json_string_length(v);
  return CLT_OK;
}

int clt__json_string_or_null(const clt__jctx *c, json_t *obj, const char *key, const char **s, size_t *n) {
  json_t *v = json_object_get(obj, key);
  *s = NULL, *n = 0;
  if (!v || json_is_null(v)) return CLT_OK;
  return clt__json_string(c, obj, key, s, n);
}

int clt__json_bool(const clt__jctx *c, json_t *obj, const char *key, int dflt, int *out) {
  json_t *v = json_object_get(obj, key);
  if (!v || (dflt >= 0 && json_is_null(v))) {
    if (dflt < 0) return wrong(c, key, v, "true or false");
    *out = dflt;
    return CLT_OK;
  }
  if (!json_is_boolean(v)) return wrong(c, key, v, "true or false");
  *out = json_is_true(v);
  return CLT_OK;
}

int clt__json_uint(const clt__jctx *c, json_t *obj, const char *key, int64_t max, int64_t *out) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_integer(v)) return wrong(c, key, v, "a whole number");
  const json_int_t x = json_integer_value(v);
  if (x < 0 || x > max)
    return clt__error(CLT_EFORMAT, "%s: %s%s\"%s\" is %lld, not 0 to %lld", c->file, c->where,
                      c->where[0] ? ": " : "", key, (long long)x, (long long)max);
  *out = x;
  return CLT_OK;
}

int clt__json_kind(const clt__jctx *c, json_t *obj, const char *what, const void *table, size_t stride, int n,
                   int *kind) {
  if (!json_is_object(obj))
    return clt__error(CLT_EFORMAT, "%s: %s is %s, not an object (a %s)", c->file, c->where, type_name(obj), what);
  const char *type;
  size_t len;
  int rc = clt__json_string(c, obj, "type", &type, &len);
  if (rc < 0) return rc;
  char names[512] = "";
  for (int i = 0; i < n; i++) {
    const char *name = *(const char *const *)((const char *)table + (size_t)i * stride);
    if (strlen(name) == len && memcmp(name, type, len) == 0) {
      *kind = i;
      return CLT_OK;
    }
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", name);
  }
  return clt__error(CLT_EFORMAT, "%s: %s type \"%.*s\" is not supported; cltrain reads the %ss %s", c->file,
                    c->where, (int)(len > 100 ? 100 : len), type, what, names);
}
