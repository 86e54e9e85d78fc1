#!/bin/sh
# man.sh: the man pages cannot drift from what they describe. Every command
# of `cltrain --help` has its section in doc/cltrain.1, and every option
# that `cltrain COMMAND --help` defines has its entry there, in that
# command's section (short and long form as the help gives them), and no
# entry names an option the command lacks; every variable of the help's
# environment list is in its ENVIRONMENT. Every layer kind the spec parser
# knows (the list its unknown-layer error gives) has its entry under LAYERS
# in doc/cltrain-model.5. Every public function of the headers is named in
# doc/libcltrain.3. Every all-reduce algorithm of the library's table (the
# list `cltrain --help` gives for CLT_ALLREDUCE: clt_allreduce_algorithms())
# is in bold in doc/cltrain.1's entries of train's --allreduce, bench
# allreduce's --algorithm and CLT_ALLREDUCE, and in doc/libcltrain.3's
# CLT_ALLREDUCE entry, and in the CLT_ALLREDUCE entry of cltrain.h's
# environment list. Where groff is installed, each page formats
# without a warning (and so does `man --warnings -l`, lintian's check, where
# man runs). Needs no device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
page1=$srcdir/doc/cltrain.1
page5=$srcdir/doc/cltrain-model.5
page3=$srcdir/doc/libcltrain.3

nbad=0
bad() { echo "FAIL: $*"; fail=1; nbad=$((nbad + 1)); }

# norm PAGE: the page's text with roff's escapes undone, as the help writes
# it: '\-' is '-', font changes and quotes go, a font macro's arguments stay
# on its line (".BR \-\-data 's" is "--data 's"); comments are dropped.
norm() {
  sed -E -e '/^\.\\"/d' -e 's/\\-/-/g' -e 's/\\\(hy/-/g' -e "s/\\\\\\(aq/'/g" \
    -e 's/\\f[BIRP]//g' -e 's/\\f\(..//g' -e 's/\\&//g' -e 's/\\c$//' -e 's/\\%//g' \
    -e 's/^\.(B|I|BR|IR|RB|RI|BI|IB) //' -e 's/"//g' "$1"
}

# subsection FILE HEADING: the lines after the line HEADING up to the next
# .SS or .SH; section FILE HEADING: up to the next .SH.
subsection() { awk -v h="$2" '$0 == h { on = 1; next } on && /^\.S[SH]( |$)/ { exit } on' "$1"; }
section() { awk -v h="$2" '$0 == h { on = 1; next } on && /^\.SH( |$)/ { exit } on' "$1"; }
# tags: the tag lines of the .TP items on standard input.
tags() { awk 'tp { print; tp = 0; next } /^\.TP( |$)/ { tp = 1 }'; }

for p in "$page1" "$page5" "$page3"; do
  [ -f "$p" ] || { bad "$p is missing"; exit 1; }
done
norm "$page1" >"$tmp/page1"
norm "$page5" >"$tmp/page5"

# ---- cltrain(1): commands ------------------------------------------------------
if ! "$CLTRAIN" --help >"$tmp/top" 2>&1 </dev/null; then
  bad "'cltrain --help' failed:"; sed 's/^/  /' "$tmp/top"; exit 1
fi
# "  bench gemm   check GEMM ...": the name, then two spaces or more.
sed -n '/^commands:/,/^$/p' "$tmp/top" | grep '^  [a-z]' | sed -e 's/^  //' -e 's/  .*//' >"$tmp/commands"
[ -s "$tmp/commands" ] || bad "no commands found in 'cltrain --help' (has its 'commands:' list changed?)"
section "$tmp/page1" ".SH COMMANDS" | sed -n 's/^\.SS //p' >"$tmp/sections"
while read -r cmd; do
  grep -qxF "$cmd" "$tmp/sections" || bad "command '$cmd' of 'cltrain --help' has no section (.SS $cmd) under COMMANDS in doc/cltrain.1"
done <"$tmp/commands"
while read -r s; do
  grep -qxF "$s" "$tmp/commands" || bad "doc/cltrain.1 has a section for '$s', which 'cltrain --help' does not list"
done <"$tmp/sections"

# ---- cltrain(1): each command's options ---------------------------------------
# An option the help defines: a line "  -d, --devices SPEC ..." or
# "      --json ...": its key is "-d, --devices" or "--json".
while read -r cmd; do
  # shellcheck disable=SC2086 # "bench gemm" is two words
  if ! "$CLTRAIN" $cmd --help >"$tmp/help" 2>&1 </dev/null; then
    bad "'cltrain $cmd --help' failed:"; sed 's/^/  /' "$tmp/help"; continue
  fi
  grep -E '^ {2,}(-[A-Za-z0-9], +)?--[a-z0-9][a-z0-9-]*' "$tmp/help" |
    sed -E 's/^ +((-[A-Za-z0-9], +)?--[a-z0-9][a-z0-9-]*).*/\1/; s/, +/, /' >"$tmp/keys"
  sed -E 's/.*--//' "$tmp/keys" >"$tmp/longs"
  subsection "$tmp/page1" ".SS $cmd" | tags | grep -- '^-' >"$tmp/entries"
  n=0 before=$nbad
  while read -r key; do
    n=$((n + 1))
    # the entry's tag starts with the key: "-d, --devices SPEC"
    grep -qE -- "^$key([^A-Za-z0-9-]|\$)" "$tmp/entries" ||
      bad "option '$key' of 'cltrain $cmd --help' has no entry (a .TP item '$key ...') in the '$cmd' section of doc/cltrain.1"
  done <"$tmp/keys"
  while read -r entry; do
    long=$(printf '%s\n' "$entry" | sed -nE 's/^(-[A-Za-z0-9], )?--([a-z0-9][a-z0-9-]*).*/\2/p')
    if [ -z "$long" ] || ! grep -qxF -- "$long" "$tmp/longs"; then
      bad "doc/cltrain.1 documents '$entry' for '$cmd', which 'cltrain $cmd --help' does not define"
    fi
  done <"$tmp/entries"
  [ $nbad -eq $before ] && echo "ok: cltrain $cmd: its $n options in doc/cltrain.1"
done <"$tmp/commands"

# ---- cltrain(1): the environment ------------------------------------------------
sed -n '/^environment:/,/^$/p' "$tmp/top" | sed -nE 's/^  ([A-Z][A-Z0-9_]*) .*/\1/p' >"$tmp/vars"
[ -s "$tmp/vars" ] || bad "no variables found in the 'environment:' list of 'cltrain --help'"
section "$tmp/page1" ".SH ENVIRONMENT" | tags >"$tmp/envtags"
while read -r v; do
  grep -qxF "$v" "$tmp/envtags" || bad "$v of 'cltrain --help' has no entry under ENVIRONMENT in doc/cltrain.1"
done <"$tmp/vars"

# ---- cltrain-model(5): layer kinds --------------------------------------------
# "unknown layer 'bogus' (known: input, linear, ...; and block ... end)"
printf 'input 4\nbogus\n' >"$tmp/x.model"
"$CLTRAIN" summary "$tmp/x.model" >"$tmp/out" 2>&1 </dev/null
sed -n 's/.*(known: \(.*\))$/\1/p' "$tmp/out" | head -n 1 | sed -e 's/; and /, /' -e 's/ \.\.\. /, /g' |
  tr ',' '\n' | sed 's/^ *//; s/ *$//' | grep . >"$tmp/kinds"
if [ ! -s "$tmp/kinds" ]; then
  bad "no list of known layers in what 'cltrain summary' says of an unknown one:"; sed 's/^/  /' "$tmp/out"
fi
section "$tmp/page5" ".SH LAYERS" | tags | awk '{ print $1 }' >"$tmp/kindtags"
n=0 before=$nbad
while read -r k; do
  n=$((n + 1))
  grep -qxF "$k" "$tmp/kindtags" || bad "layer kind '$k' of the spec parser has no entry (a .TP item '$k ...') under LAYERS in doc/cltrain-model.5"
done <"$tmp/kinds"
[ $nbad -eq $before ] && echo "ok: the $n layer kinds in doc/cltrain-model.5"

# ---- libcltrain(3): every public function ---------------------------------------
# Each function the installed headers declare (CLT_API) is named in the page.
norm "$page3" >"$tmp/page3"
cat "$srcdir"/include/cltrain.h "$srcdir"/include/cltrain/*.h | grep -E '^CLT_API ' |
  grep -oE '\bclt_[a-z0-9_]+ *\(' | sed 's/ *(//' | sort -u >"$tmp/functions"
[ -s "$tmp/functions" ] || bad "no CLT_API functions found in $srcdir/include"
n=0 before=$nbad
while read -r f; do
  n=$((n + 1))
  grep -qw -- "$f" "$tmp/page3" || bad "$f, declared in include/, is not named in doc/libcltrain.3"
done <"$tmp/functions"
[ $nbad -eq $before ] && echo "ok: the $n public functions in doc/libcltrain.3"

# ---- the all-reduce algorithms ------------------------------------------------------
# "  CLT_ALLREDUCE    all-reduce algorithm: auto, ring, ... (auto: ...)", over
# as many lines as it takes, up to the next variable.
awk '/^  CLT_ALLREDUCE / { on = 1; print; next } on && /^  [^ ]/ { exit } on' "$tmp/top" | tr '\n' ' ' |
  sed -n 's/.*algorithm: \([^(]*\) (.*/\1/p' | tr ',' '\n' | sed 's/^ *//; s/ *$//' | grep . >"$tmp/algorithms"
if [ "$(wc -l <"$tmp/algorithms")" -lt 3 ]; then
  bad "no list of all-reduce algorithms in the CLT_ALLREDUCE entry of 'cltrain --help':"
  grep -A3 '^  CLT_ALLREDUCE ' "$tmp/top" | sed 's/^/  /'
fi
# bold PAGE TAG: the words set in bold (lines of .B, .BR, .RB) in the .TP
# item whose tag, its escapes and quotes undone, matches the extended
# regular expression TAG; one a line.
bold() {
  awk -v re="$2" '
    /^\.TP( |$)/ { tp = 1; on = 0; next }
    tp { tp = 0; t = $0; gsub(/\\-/, "-", t); gsub(/\\f[BIRP]/, "", t); gsub(/"/, "", t); sub(/^\.[BIR]+ /, "", t)
         on = (t ~ re); next }
    /^\.(SS|SH|PP)( |$)/ { on = 0 }
    on && /^\.(B|BR|RB) / { print }' "$1" |
    sed -E -e 's/^\.(B|BR|RB) //' -e 's/\\-/-/g' -e 's/"//g' | tr ' ,().;' '\n\n\n\n\n\n' | grep .
}
while IFS=';' read -r page tag name; do
  bold "$page" "$tag" >"$tmp/bold"
  [ -s "$tmp/bold" ] || { bad "doc/$name entry not found (a .TP item whose tag matches '$tag')"; continue; }
  n=0 before=$nbad
  while read -r a; do
    n=$((n + 1))
    grep -qxF -- "$a" "$tmp/bold" || bad "all-reduce algorithm '$a' (clt_allreduce_algorithms()) is not in bold in doc/$name entry"
  done <"$tmp/algorithms"
  [ $nbad -eq $before ] && echo "ok: the $n all-reduce algorithms in doc/$name entry"
done <<LIST
$page1;^--allreduce ;cltrain.1's --allreduce (train)
$page1;^-a, --algorithm ;cltrain.1's --algorithm (bench allreduce)
$page1;^CLT_ALLREDUCE\$;cltrain.1's CLT_ALLREDUCE
$page3;^CLT_ALLREDUCE( |,|\$);libcltrain.3's CLT_ALLREDUCE
LIST

# The installed header's CLT_ALLREDUCE entry (its environment list, from
# " *   CLT_ALLREDUCE " to the next variable) names each one as well.
header=$srcdir/include/cltrain.h
awk '/^ \*   CLT_ALLREDUCE / { on = 1; print; next } on && /^ \*   [A-Z]/ { exit } on && !/^ \* / { exit } on' "$header" |
  sed 's/^ \*//' | tr ' ,().;:' '\n\n\n\n\n\n\n' | grep . >"$tmp/header_words"
if [ ! -s "$tmp/header_words" ]; then
  bad "no CLT_ALLREDUCE entry in include/cltrain.h's environment list (' *   CLT_ALLREDUCE ...')"
else
  n=0 before=$nbad
  while read -r a; do
    n=$((n + 1))
    grep -qxF -- "$a" "$tmp/header_words" || bad "all-reduce algorithm '$a' (clt_allreduce_algorithms()) is not in include/cltrain.h's CLT_ALLREDUCE entry"
  done <"$tmp/algorithms"
  [ $nbad -eq $before ] && echo "ok: the $n all-reduce algorithms in include/cltrain.h's CLT_ALLREDUCE entry"
fi

# ---- formatting ------------------------------------------------------------------
if command -v groff >/dev/null 2>&1; then
  for p in "$page1" "$page5" "$page3"; do
    w=$(groff -man -Tutf8 -ww -z "$p" 2>&1)
    if [ -n "$w" ]; then bad "groff warns about $p:"; printf '%s\n' "$w" | sed 's/^/  /'; else echo "ok: groff formats $p"; fi
    # lintian's check (manpage-has-errors-from-man), where man runs
    if w=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$p" 2>&1 >/dev/null); then
      if [ -n "$w" ]; then bad "man --warnings -l warns about $p:"; printf '%s\n' "$w" | sed 's/^/  /'; fi
    fi
  done
else
  echo "SKIP (part): groff is not installed (apt-get install groff-base); the pages' formatting is not checked"
fi

[ $fail -eq 0 ] && echo "ok: the man pages match the tool and the spec parser"
exit $fail
