#!/bin/sh
# layers.sh: every file of src/ includes only headers of its own folder and
# of the layers below it, in the order of the ```layers block of
# doc/design.md (lowest first, one layer a line; folders on one line are
# peers and may not include each other). Prints each include that breaks
# the order as
#
#   src/io/hf_import.c:12: includes train/trainer.h (layer train), above its own layer io
#   src/io/x.c:3: includes data/data.h (layer data), a peer on its own line (io)
#
# and exits 1; 0 when the tree is clean, 99 when it cannot tell.
#
# How an include "..." is resolved to a folder of src/:
#   - "dir/x.h" where dir is a folder of src/: that folder (a generated
#     header such as io/tb_event.pb-c.h belongs to where it is made);
#   - "x.h" with no folder: the including file's own folder when the file
#     is there; otherwise it comes from -I (config.h, the build tree) and
#     is not checked, nor is "dir/x.h" whose dir is no folder of src/;
#   - src/ref (the plain-C references of the tests, cltrain's bench and
#     the benchmarks) is not in the library and in no layer: its files may
#     include only core and ref itself, and includes of ref's headers are
#     not checked (the library cannot link them: ref is not in libcltrain).
# Files directly in src/ (src/kernels_embedded.c, generated) are in no
# folder and not checked; a folder of src/ that doc/design.md does not
# place is an error. POSIX sh and awk only.
srcdir=${srcdir:-.}
design=$srcdir/doc/design.md
src=$srcdir/src
[ -f "$design" ] || { echo "ERROR: $design not found"; exit 99; }
[ -d "$src" ] || { echo "ERROR: $src not found"; exit 99; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# The layer order, one line a layer.
awk '/^```layers[ \t]*$/ { on = 1; next } on && /^```/ { exit } on && NF' "$design" >"$tmp/layers"
[ -s "$tmp/layers" ] || { echo "ERROR: no \`\`\`layers block in $design"; exit 99; }

# Every C file and header under src/, relative to src/, in a stable order.
(cd "$src" && find . -type f \( -name '*.c' -o -name '*.h' \)) | sed 's|^\./||' | LC_ALL=C sort >"$tmp/files"

cd "$src" || exit 99
LC_ALL=C awk -v layers="$tmp/layers" -v files="$tmp/files" '
BEGIN {
  n = 0
  while ((getline line < layers) > 0) {
    n++
    k = split(line, f, /[ \t]+/)
    for (i = 1; i <= k; i++) if (f[i] != "") { rank[f[i]] = n }
  }
  close(layers)
  bad = 0
  while ((getline p < files) > 0) {
    exists[p] = 1
    if (p !~ /\//) continue
    d = p; sub(/\/.*/, "", d)
    if (d != "ref" && !(d in rank) && !(d in unplaced)) {
      unplaced[d] = 1
      print "src/" d "/: a folder in no layer of doc/design.md"
      bad = 1
    }
    if (d == "ref" || (d in rank)) todo[++nfiles] = p
  }
  close(files)
  for (j = 1; j <= nfiles; j++) check(todo[j])
  exit bad
}
function check(p,    own, lineno, line, h, hd, what) {
  own = p; sub(/\/.*/, "", own)
  lineno = 0
  while ((getline line < p) > 0) {
    lineno++
    if (line !~ /^[ \t]*#[ \t]*include[ \t]*"/) continue
    h = line
    sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", h)
    sub(/".*/, "", h)
    if (h ~ /\//) {
      hd = h; sub(/\/.*/, "", hd)
      if (hd != "ref" && !(hd in rank)) continue
    } else if ((own "/" h) in exists) {
      hd = own
    } else {
      continue
    }
    if (hd == own) continue
    if (own == "ref") {
      if (hd != "core") {
        print "src/" p ":" lineno ": includes " h " (layer " hd "), but ref may include only core and itself"
        bad = 1
      }
      continue
    }
    if (hd == "ref") continue
    if (rank[hd] > rank[own]) {
      print "src/" p ":" lineno ": includes " h " (layer " hd "), above its own layer " own
      bad = 1
    } else if (rank[hd] == rank[own]) {
      print "src/" p ":" lineno ": includes " h " (layer " hd "), a peer on its own line (" own ")"
      bad = 1
    }
  }
  close(p)
}
'
