/*
 * regex.c: the regular expressions of tokenizer.json (Split, Replace,
 * ByteLevel's own) on PCRE2, in UTF mode with Unicode properties (UCP) and
 * JIT-compiled, matched as the tokenizers library matches them with
 * Oniguruma (Ruby syntax): the same backtracking, leftmost-first
 * alternation and Unicode classes, with three differences bridged here:
 *
 *   - PCRE2's \s also takes U+180E, which left White_Space in Unicode 6.3;
 *     Oniguruma's \s is White_Space. \s and \S are compiled as
 *     \p{White_Space} and \P{White_Space}.
 *   - Ruby's ^ and $ are line anchors: the patterns are multi-line.
 *   - \w, \W, \b, \B (PCRE2's word is L and N, Oniguruma's L, M, Nd and
 *     Pc), \h, \H (Ruby's hex digit, PCRE2's horizontal space) and inline
 *     flags other than i, x and - (Ruby's m is PCRE2's s) mean different
 *     things: a pattern using one is refused, naming it.
 *
 * Matches are iterated as Oniguruma's find_iter does in the library: from
 * the end of the last match, an empty match right after it skipped by one
 * character.
 */
#include "text/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pattern with \s and \S spelt as White_Space, into out (NUL-ended), or
 * CLT_EFORMAT naming a construct whose meaning differs. */
static int translate(const char *p, size_t n, clt__buf *out, const char *file, const char *where) {
  for (size_t i = 0; i < n; i++) {
    if (p[i] == '\\' && i + 1 < n) {
      const char c = p[++i];
      if (c == 's' || c == 'S') {
        const char *w = c == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
        if (clt__buf_put(out, w, strlen(w)) < 0) return CLT_ENOMEM;
        continue;
      }
      if (strchr("wWbBhH", c) && c)
        return clt__error(CLT_EFORMAT, "%s: %s: the pattern uses \\%c, which Oniguruma (the tokenizers library) and "
                          "PCRE2 (cltrain) read differently; cltrain does not read it", file, where, c);
      char e[2] = {'\\', c};
      if (clt__buf_put(out, e, 2) < 0) return CLT_ENOMEM;
      continue;
    }
    if (p[i] == '(' && i + 2 < n && p[i + 1] == '?') {
      size_t j = i + 2;
      while (j < n && ((p[j] >= 'a' && p[j] <= 'z') || p[j] == '-')) j++;
      if (j > i + 2 && j < n && (p[j] == ':' || p[j] == ')'))
        for (size_t k = i + 2; k < j; k++)
          if (p[k] != 'i' && p[k] != 'x' && p[k] != '-')
            return clt__error(CLT_EFORMAT, "%s: %s: the pattern sets the inline flag '%c' (in \"%.*s\"), which "
                              "Oniguruma's Ruby syntax and PCRE2 read differently; cltrain reads only i and x", file,
                              where, p[k], (int)(j - i + 1), p + i);
    }
    if (clt__buf_put(out, p + i, 1) < 0) return CLT_ENOMEM;
  }
  return clt__buf_put(out, "", 1);
}

int clt__regex_compile(clt__regex *re, const char *pattern, size_t n, int literal, const char *file,
                       const char *where) {
  int rc = CLT_OK, err;
  PCRE2_SIZE at;
  clt__buf t = {0};
  pcre2_compile_context *cc = NULL;
  memset(re, 0, sizeof *re);
  if (!literal) {
    CLT_TRY(translate(pattern, n, &t, file, where));
    pattern = t.p, n = t.n - 1;
  }
  if (!(cc = pcre2_compile_context_create(NULL))) {
    rc = clt__error(CLT_ENOMEM, "out of host memory compiling a pattern");
    goto fail;
  }
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  const uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
  re->code = pcre2_compile((PCRE2_SPTR)pattern, n, opts, &err, &at, cc);
  if (!re->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    rc = clt__error(CLT_EFORMAT, "%s: %s: PCRE2 cannot compile the pattern \"%.*s\": %s at offset %zu", file, where,
                    (int)(n > 200 ? 200 : n), pattern, (const char *)msg, (size_t)at);
    goto fail;
  }
  re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
  re->md = pcre2_match_data_create_from_pattern(re->code, NULL);
  re->mctx = pcre2_match_context_create(NULL);
  if (!re->md || !re->mctx) {
    rc = clt__error(CLT_ENOMEM, "out of host memory for a pattern's match data");
    goto fail;
  }
  if (re->jit) { /* a larger stack than the 32 KiB default, for long runs of one class */
    if (!(re->stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL))) {
      rc = clt__error(CLT_ENOMEM, "out of host memory for a pattern's JIT stack");
      goto fail;
    }
    pcre2_jit_stack_assign(re->mctx, NULL, re->stack);
  }
  pcre2_compile_context_free(cc);
  clt__buf_free(&t);
  return CLT_OK;

fail:
  pcre2_compile_context_free(cc);
  clt__buf_free(&t);
  clt__regex_free(re);
  return rc;
}

void clt__regex_free(clt__regex *re) {
  if (!re) return;
  pcre2_match_data_free(re->md);
  pcre2_match_context_free(re->mctx);
  pcre2_jit_stack_free(re->stack);
  pcre2_code_free(re->code);
  memset(re, 0, sizeof *re);
}

void clt__regex_iter_init(clt__regex_iter *it, clt__regex *re, const char *s, size_t n, int utf_checked) {
  *it = (clt__regex_iter){re, s, n, 0, 0, 0, utf_checked};
}

int clt__regex_next(clt__regex_iter *it, size_t *start, size_t *end) {
  clt__regex *re = it->re;
  for (;;) {
    if (it->next > it->n) return 0;
    int rc = it->utf_checked && re->jit
                 ? pcre2_jit_match(re->code, (PCRE2_SPTR)it->s, it->n, it->next, 0, re->md, re->mctx)
                 : pcre2_match(re->code, (PCRE2_SPTR)it->s, it->n, it->next, 0, re->md, re->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return clt__error(CLT_EINVAL, "matching a tokenizer pattern at byte %zu of a %zu-byte piece of text failed: %s",
                        it->next, it->n, (const char *)msg);
    }
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(re->md);
    const size_t s = ov[0], e = ov[1];
    if (s == e && it->any && it->last_match_end == e) {
      it->next += it->next < it->n ? clt__utf8_len((unsigned char)it->s[it->next]) : 1;
      continue;
    }
    it->next = e, it->last_match_end = e, it->any = 1;
    *start = s, *end = e;
    return 1;
  }
}

static int spans_push(clt__spans *v, size_t start, size_t end, int match) {
  if (v->n == v->cap) {
    size_t want = v->cap ? v->cap * 2 : 64;
    clt__span *p = realloc(v->p, want * sizeof *p);
    if (!p) return clt__error(CLT_ENOMEM, "out of host memory for %zu pieces of text", want);
    v->p = p, v->cap = want;
  }
  v->p[v->n++] = (clt__span){start, end, match};
  return CLT_OK;
}

int clt__regex_spans(clt__regex *re, const char *s, size_t n, int invert, int utf_checked, clt__spans *out) {
  out->n = 0;
  if (n == 0) return spans_push(out, 0, 0, invert);
  clt__regex_iter it;
  clt__regex_iter_init(&it, re, s, n, utf_checked);
  size_t prev = 0, a, b;
  int rc;
  while ((rc = clt__regex_next(&it, &a, &b)) > 0) {
    if (prev != a && spans_push(out, prev, a, invert) < 0) return CLT_ENOMEM;
    if (spans_push(out, a, b, !invert) < 0) return CLT_ENOMEM;
    prev = b;
  }
  if (rc < 0) return rc;
  if (prev != n) return spans_push(out, prev, n, invert);
  return CLT_OK;
}

int clt__regex_replace(clt__regex *re, const char *s, size_t n, const char *content, size_t cn, int utf_checked,
                       clt__buf *out) {
  clt__regex_iter it;
  clt__regex_iter_init(&it, re, s, n, utf_checked);
  size_t prev = 0, a, b;
  int rc;
  if (n == 0) return CLT_OK;
  while ((rc = clt__regex_next(&it, &a, &b)) > 0) {
    if (clt__buf_put(out, s + prev, a - prev) < 0 || clt__buf_put(out, content, cn) < 0) return CLT_ENOMEM;
    prev = b;
  }
  if (rc < 0) return rc;
  return clt__buf_put(out, s + prev, n - prev);
}
