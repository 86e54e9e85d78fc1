#!/bin/sh
# symbols.sh: the shared libraries export exactly what debian/*.symbols
# list, so a new public function cannot reach the Debian packages without
# its symbols entry (lintian refuses the entry dpkg-gensymbols would add).
# Skipped (77) without nm, a shared build or the debian/ directory.
srcdir=${srcdir:-.}
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
fail=0 checked=0
for pair in "libcltrain.so.0:libcltrain0" "libcltrain_fortran.so.0:libcltrain-fortran0"; do
  lib=.libs/${pair%%:*} pkg=${pair#*:}
  syms=$srcdir/debian/$pkg.symbols
  [ -e "$lib" ] && [ -f "$syms" ] || continue
  nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | LC_ALL=C sort -u >symbols.have
  sed -n 's/^ \([^@ ]*\)@Base .*/\1/p' "$syms" | LC_ALL=C sort -u >symbols.want
  for s in $(LC_ALL=C comm -23 symbols.have symbols.want); do
    echo "FAIL: $lib exports $s, which $syms does not list (add \" $s@Base <version>\")"; fail=1
  done
  for s in $(LC_ALL=C comm -13 symbols.have symbols.want); do
    echo "FAIL: $syms lists $s, which $lib does not export"; fail=1
  done
  checked=$((checked + 1))
done
rm -f symbols.have symbols.want
[ $checked -gt 0 ] || { echo "SKIP: no shared library or symbols file here"; exit 77; }
[ $fail -eq 0 ] && echo "ok: $checked libraries export what their symbols files list"
exit $fail
