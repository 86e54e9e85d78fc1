#!/bin/sh
# ckpt_shards.sh: sharded checkpoints (doc/checkpoint.md, "Sharded
# checkpoints"). A run of 2 ranks at --zero 2 saves every 3 steps, keeping 2:
# each checkpoint is an index and one shard file per rank, and rotation takes
# step 3's shards with its index. Step 6 resumed at 2 ranks (--zero 2 and
# --zero 1) ends at step 9 with the uninterrupted run's weights bit for bit,
# at 1 rank (--zero 0), 3 ranks (--zero 1) and as a pipeline of 2 stages
# within 1e-6; export writes the
# weights the uninterrupted run has at step 9 (read from the shards), and
# the same as a --checkpoint-one-file save of the same run (a version-1
# file, still read), and the same file cut by hand into 3 uneven shards
# (tests/train/ckpt_cut.py, the format of doc/checkpoint.md) exports and
# resumes to its bits. Refused, each naming the file: a truncated shard, a
# shard with a value changed (its CRC32), a missing shard, an index whose
# ranges do not cover the parameters (its CRC32 made right again: the
# index's own check); and `--resume latest` skips both, saying why. Exits 77
# without an OpenCL device or MPI.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
export CLT_TIMEOUT
close=./tests/train/weights_close
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh" # mkidx
mkidx "$tmp" train 96
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 16\nrelu\nlinear 10\n' >"$tmp/m.model"
# small buckets: several per rank, so a shard is several ranges
train="train $tmp/m.model --data $tmp --normalize scale -e 2 -b 12 -d 0 -q -o adamw --bucket-mb 0.001"

mpi() { np=$1; shift; sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" "$@"; }

# run WHAT NP ARGS...: must exit 0
run() {
  what=$1; shift
  mpi "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 77 ]; then echo "SKIP: no MPI"; exit 77; fi
  if [ $rc -ne 0 ]; then echo "FAIL: $what: exit $rc"; sed 's/^/  /' "$tmp/err"; fail=1; return 1; fi
  return 0
}

# refused WHAT TEXT ARGS...: one rank, a non-zero exit and TEXT in stderr
refused() {
  what=$1 text=$2; shift 2
  "$CLTRAIN" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -eq 0 ] || ! grep -q -- "$text" "$tmp/err"; then
    echo "FAIL: $what: exit $rc, no '$text' in:"; sed 's/^/  /' "$tmp/err"; fail=1
  else
    echo "ok: $what: $(grep -m1 -- "$text" "$tmp/err")"
  fi
}

# near WHAT A B TOL
near() {
  if "$close" "$2" "$3" "$4" >"$tmp/close" 2>&1; then echo "ok: $1: $(cat "$tmp/close")"
  else echo "FAIL: $1:"; sed 's/^/  /' "$tmp/close"; fail=1; fi
}

ck=$tmp/ck
run "2 ranks --zero 2, saving" 2 $train --zero 2 --max-steps 9 --checkpoint-every 3 --checkpoint-dir "$ck" --keep 2 \
  --save "$tmp/full.safetensors" || exit 1
idx=$ck/ckpt-0000000006.safetensors
n6=$(ls "$ck" | grep -c '^ckpt-0000000006\.[0-9a-f]*\.shard-0000[01]-of-00002\.safetensors$')
n3=$(ls "$ck" | grep -c '^ckpt-0000000003')
if [ -f "$idx" ] && [ "$n6" -eq 2 ] && [ "$n3" -eq 0 ] && [ "$(ls "$ck" | grep -c shard)" -eq 4 ]; then
  echo "ok: each checkpoint an index and 2 shards; step 3's went with its index"
else
  echo "FAIL: the checkpoint directory holds:"; ls -la "$ck" | sed 's/^/  /'; fail=1
fi
shard1=$(ls "$ck"/ckpt-0000000006.*.shard-00001-of-00002.safetensors)

for c in "2 --zero 2 0" "2 --zero 1 0" "1 --zero 0 1e-6" "3 --zero 1 1e-6" "2 --pipeline 2 1e-6"; do
  set -- $c
  run "resumed on $1 rank(s) $2 $3" "$1" $train $2 $3 --max-steps 9 --resume "$idx" --save "$tmp/r.safetensors" &&
    near "step 6 resumed on $1 rank(s) $2 $3 ends at the uninterrupted run's step 9 (within $4)" \
      "$tmp/full.safetensors" "$tmp/r.safetensors" "$4"
done

"$CLTRAIN" export "$ck/ckpt-0000000009.safetensors" "$tmp/ex.safetensors" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: export:"; sed 's/^/  /' "$tmp/err"; fail=1; }
near "export reads the shards" "$tmp/full.safetensors" "$tmp/ex.safetensors" 0
run "--checkpoint-one-file" 2 $train --zero 2 --max-steps 9 --checkpoint-every 9 --checkpoint-dir "$tmp/one" \
  --checkpoint-one-file &&
  if ls "$tmp/one" | grep -q shard; then echo "FAIL: --checkpoint-one-file wrote shards"; fail=1; fi
"$CLTRAIN" export "$tmp/one/ckpt-0000000009.safetensors" "$tmp/ex1.safetensors" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: export of one file:"; sed 's/^/  /' "$tmp/err"; fail=1; }
near "one file and shards hold the same weights" "$tmp/ex1.safetensors" "$tmp/ex.safetensors" 0

# Shards of any sizes, in any order: the one-file checkpoint cut by hand
# into 3 uneven shards (tests/train/ckpt_cut.py) exports the same weights and
# resumes (to step 11, one rank) to the same bits as the file it was cut from.
need_python "a checkpoint"
"$py" "$srcdir/tests/train/ckpt_cut.py" "$tmp/one/ckpt-0000000009.safetensors" "$tmp/cut" ||
  { echo "FAIL: ckpt_cut.py"; fail=1; }
"$CLTRAIN" export "$tmp/cut/cut.safetensors" "$tmp/excut.safetensors" >/dev/null 2>"$tmp/err" ||
  { echo "FAIL: export of uneven shards:"; sed 's/^/  /' "$tmp/err"; fail=1; }
near "uneven shards export the weights of the file they were cut from" "$tmp/ex1.safetensors" "$tmp/excut.safetensors" 0
for c in one/ckpt-0000000009 cut/cut; do
  run "resumed from $c" 1 $train --zero 0 --max-steps 11 --resume "$tmp/$c.safetensors" \
    --save "$tmp/$(dirname $c).safetensors"
done
near "uneven shards resume to the bits of the file they were cut from" "$tmp/one.safetensors" "$tmp/cut.safetensors" 0

resume="$train --max-steps 9 --resume"
bad=$tmp/bad
cp -r "$ck" "$bad"
badshard=$bad/$(basename "$shard1")
head -c 1000 "$shard1" >"$badshard"
refused "a truncated shard" "$badshard: truncated" $resume "$bad/ckpt-0000000006.safetensors"
cp "$shard1" "$badshard"
size=$(wc -c <"$shard1")
printf '\377\377\377\177' | dd of="$badshard" bs=1 seek=$((size - 4)) conv=notrunc 2>/dev/null # the last float
refused "a shard with a flipped value" "$badshard: the tensor data fails its CRC32 check" \
  $resume "$bad/ckpt-0000000006.safetensors"
rm -f "$badshard"
refused "a missing shard" "its shard $badshard is missing" $resume "$bad/ckpt-0000000006.safetensors"
refused "a missing shard, in export" "its shard $badshard is missing" export "$bad/ckpt-0000000006.safetensors" \
  "$tmp/no.safetensors"
need_python "an index"
"$py" - "$bad/ckpt-0000000009.safetensors" <<'EOF'
import json, struct, sys, zlib
p = sys.argv[1]
b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); m = h['__metadata__']
s = json.loads(m['shards']); s['files'][1]['ranges'][0][0] += 1  # a gap and an overlap
m['shards'] = json.dumps(s, separators=(',', ':'), sort_keys=True)
m.pop('header_crc32')
m['header_crc32'] = '%08x' % zlib.crc32(json.dumps(h, separators=(',', ':'), sort_keys=True).encode())
hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
open(p, 'wb').write(struct.pack('<Q', len(hb)) + hb + b[8 + n:])
EOF
refused "a bad index" "$bad/ckpt-0000000009.safetensors: the index of shards is bad" \
  $resume "$bad/ckpt-0000000009.safetensors"
refused "--resume latest skips both" "skipping a damaged checkpoint: $bad/ckpt-0000000006.safetensors" \
  $train --max-steps 9 --resume latest --checkpoint-dir "$bad" --checkpoint-every 100
exit $fail
