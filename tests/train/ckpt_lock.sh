#!/bin/sh
# ckpt_lock.sh: two runs never share a --checkpoint-dir. While one run
# trains with checkpoints in DIR (it holds DIR/.cltrain-lock), a second run
# on DIR, of one rank or of two, is refused at once, naming the first's PID
# and host, and the first's checkpoints are as they were; a run of two
# ranks itself is no conflict (only rank 0 writes checkpoints, so only it
# takes the lock). Killed with SIGKILL, the first run's lock goes with it:
# the next run takes the directory and resumes from its newest checkpoint.
# Exits 77 (skipped) when no OpenCL device exists; the runs of two ranks are
# left out without an MPI launcher.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
tmp=$(mktemp -d)
first=
cleanup() {
  [ -n "$first" ] && kill -9 "$first" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >"$out" 2>"$err"
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device: $(cat "$err")"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh" # mkidx, expect, same
mkidx "$tmp" train 64
printf 'input 1 4 4\nflatten\nlinear 10\n' >"$tmp/m.model"
dir=$tmp/ck
args="train $tmp/m.model --data $tmp -b 16 -d 0 -q --checkpoint-dir $dir --checkpoint-every 100"

# The first run: long enough to be killed, not waited for.
"$CLTRAIN" $args -e 1000000 >"$tmp/first.out" 2>"$tmp/first.err" &
first=$!
i=0
until ls "$dir"/ckpt-*.safetensors >/dev/null 2>&1; do
  i=$((i + 1))
  if [ $i -gt 600 ] || ! kill -0 "$first" 2>/dev/null; then
    echo "FAIL: the first run wrote no checkpoint in 60 s:"; cat "$tmp/first.out" "$tmp/first.err"
    exit 1
  fi
  sleep 0.1
done
kill -STOP "$first" # its checkpoints stay as they are while the others try
if grep -q "^pid $first host $(hostname) since " "$dir/.cltrain-lock" 2>/dev/null; then
  echo "ok: the first run (PID $first) holds $dir/.cltrain-lock: $(cat "$dir/.cltrain-lock")"
else
  echo "FAIL: the first run (PID $first) has not written itself into $dir/.cltrain-lock"; fail=1
fi
cp -r "$dir" "$tmp/before"

# refused NP DESCRIPTION: a run of NP ranks on the held directory fails,
# naming the holder, and changes nothing there.
refused() {
  if [ "$1" -eq 1 ]; then
    timeout -k 5 60 "$CLTRAIN" $args -e 1 >"$out" 2>"$err"
  else
    CLT_TEST_LIMIT=60 sh "$srcdir/tests/lib/mpi_run.sh" "$1" "$CLTRAIN" $args -e 1 >"$out" 2>"$err"
  fi
  rc=$?
  if [ $rc -eq 77 ]; then echo "SKIP (part): $2: no MPI launcher"; return; fi
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    echo "FAIL: $2: exit $rc"; sed 's/^/  /' "$out" "$err"; fail=1; return
  fi
  if grep -qF "is in use by another run: PID $first on host $(hostname)" "$err" && grep -qF "$dir" "$err"; then
    echo "ok: $2: $(grep -m1 "in use" "$err")"
  else
    echo "FAIL: $2: the holder is not named:"; sed 's/^/  /' "$err"; fail=1
  fi
  if grep -q "epoch 1/" "$out"; then echo "FAIL: $2: it trained first"; fail=1; fi
  if diff -r "$dir" "$tmp/before" >/dev/null; then echo "ok: $2: the directory is as it was"
  else echo "FAIL: $2: the first run's directory changed:"; diff -r "$dir" "$tmp/before"; fail=1; fi
}
refused 1 "a second run on the same --checkpoint-dir"
refused 2 "a second run of two ranks on it"
ln -s ck "$tmp/ck-link"
args="train $tmp/m.model --data $tmp -b 16 -d 0 -q --checkpoint-dir $tmp/ck-link --checkpoint-every 100"
refused 1 "a second run through a link to it"

# The first run dies; the kernel drops its lock with it.
kill -9 "$first"
wait "$first" 2>/dev/null
first=
args="train $tmp/m.model --data $tmp -b 16 -d 0 -q --checkpoint-dir $dir --checkpoint-every 100"
expect 0 "a run after the first was killed resumes in its directory" -- $args -e 2 --resume latest
has "$out" "resumed from $dir/ckpt-" "it resumed from the killed run's checkpoint"
if sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1; then
  CLT_TEST_LIMIT=60 sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" $args -e 3 --resume latest >"$out" 2>"$err"
  if [ $? -eq 0 ] && grep -q "resumed from" "$out"; then echo "ok: a run of two ranks takes the directory (one lock)"
  else echo "FAIL: a run of two ranks on a free directory:"; sed 's/^/  /' "$out" "$err"; fail=1; fi
fi
exit $fail
