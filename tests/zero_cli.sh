#!/bin/sh
# zero_cli.sh: `cltrain train --zero` refusals and the one-rank no-op, on a
# small synthetic IDX set: --zero 3 and --zero 2 are refused with a message
# and a non-zero exit; --zero 1 on one rank trains and says it changes
# nothing; on 2 ranks (when mpirun exists) ranks that ask for different
# stages are refused, both naming --zero, and --zero 1 trains.
# `cltrain summary --zero 1 --ranks N` counts the largest shard's state, and
# --max-device-memory refuses a replica that needs more, naming the cap.
# Exits 77 without an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
export CLT_TIMEOUT
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi

byte() { printf "\\$(printf %03o "$1")"; }
be32() { byte $(($1 >> 24 & 255)); byte $(($1 >> 16 & 255)); byte $(($1 >> 8 & 255)); byte $(($1 & 255)); }
mkidx() {
  { printf '\000\000\010\003'; be32 "$3"; be32 4; be32 4; head -c $(($3 * 16)) /dev/urandom; } \
    >"$1/$2-images-idx3-ubyte"
  { printf '\000\000\010\001'; be32 "$3"; tr -dc '\000-\011' </dev/urandom | head -c "$3"; } \
    >"$1/$2-labels-idx1-ubyte"
}
mkidx "$tmp" train 96
printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 10\n' >"$tmp/m.model"
train="train $tmp/m.model --data $tmp --normalize scale -e 1 -b 12 -d 0 -q --max-steps 3"

# expect RC WHAT TEXT -- ARGS...: exit status RC (any non-zero for "fail")
# and TEXT in stderr (unless TEXT is empty).
expect() {
  want=$1 what=$2 text=$3
  shift 4
  "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if { [ "$want" = fail ] && [ $rc -eq 0 ]; } || { [ "$want" != fail ] && [ $rc -ne "$want" ]; } ||
     { [ -n "$text" ] && ! grep -q -- "$text" "$tmp/err"; }; then
    echo "FAIL: $what: exit $rc, stderr:"; sed 's/^/  /' "$tmp/err"; fail=1
  else
    echo "ok: $what${text:+: $(grep -m1 -- "$text" "$tmp/err")}"
  fi
}

expect fail "--zero 3" "--zero must be a whole number from 0 to 2, not '3'" -- $CLTRAIN $train --zero 3
expect fail "--zero 2" "--zero 2 (gradients sharded too) is not implemented yet" -- $CLTRAIN $train --zero 2
expect 0 "--zero 1 on one rank" "on one rank: there is nothing to shard" -- $CLTRAIN $train --zero 1

expect fail "--max-device-memory junk" "--max-device-memory must be a size in bytes" -- \
  $CLTRAIN $train --max-device-memory 12Q
expect fail "--max-device-memory 4K" "--max-device-memory 4.0 KiB" -- $CLTRAIN $train --max-device-memory 4K
expect 0 "--max-device-memory 1G" "" -- $CLTRAIN $train --max-device-memory 1G

# summary: the state of the largest of 3 shards of 1 bucket of 874
# parameters (segments 292, 291, 291) under AdamW (2 floats each).
s0=$($CLTRAIN summary "$tmp/m.model" -o adamw --bucket-mb 0) || { echo "FAIL: summary"; fail=1; }
s1=$($CLTRAIN summary "$tmp/m.model" -o adamw --bucket-mb 0 --zero 1 --ranks 3) || { echo "FAIL: summary --zero 1"; fail=1; }
if echo "$s1" | grep -q "optimizer state for at most 292 of 874 parameters" &&
   echo "$s1" | grep -q "optimizer state  *2.3 KiB" && echo "$s0" | grep -q "optimizer state  *6.8 KiB"; then
  echo "ok: summary --zero 1 --ranks 3"
else
  echo "FAIL: summary --zero 1 --ranks 3:"; echo "$s1" | sed 's/^/  /'; echo "$s0" | sed 's/^/  /'; fail=1
fi
expect fail "summary --zero 2" "not implemented yet" -- $CLTRAIN summary "$tmp/m.model" --zero 2
expect 0 "summary --zero 1 on one rank" "" -- $CLTRAIN summary "$tmp/m.model" --zero 1
grep -q "on one rank changes nothing" "$tmp/out" && echo "ok: summary says --zero 1 on one rank is a no-op" ||
  { echo "FAIL: summary --zero 1 on one rank:"; sed 's/^/  /' "$tmp/out"; fail=1; }

MPIEXEC=${MPIEXEC:-mpiexec}
if command -v "$MPIEXEC" >/dev/null 2>&1; then
  expect fail "ranks asking for different stages" "rank 1 disagrees with rank 0 on --zero" -- \
    sh "$srcdir/tests/mpi_run.sh" 1 $CLTRAIN $train --zero 0 : -np 1 $CLTRAIN $train --zero 1
  n=$(grep -c "disagrees with rank 0 on --zero" "$tmp/err")
  if [ "$n" -ge 2 ]; then echo "ok: named on both ranks"; else echo "FAIL: named on $n rank(s)"; fail=1; fi
  if sh "$srcdir/tests/mpi_run.sh" 2 $CLTRAIN $train --zero 1 >"$tmp/out" 2>"$tmp/err"; then
    echo "ok: --zero 1 on 2 ranks trains"
  else
    echo "FAIL: --zero 1 on 2 ranks:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
  # Every replica steps its rank's shard: none may sit steps out.
  expect fail "--zero 1 with a weight of 0" "--balance weight 2 is 0, but under --zero 1 every replica" -- \
    sh "$srcdir/tests/mpi_run.sh" 2 $CLTRAIN $train --zero 1 --balance 1,0
  if sh "$srcdir/tests/mpi_run.sh" 2 $CLTRAIN $train --zero 1 --balance auto --balance-every 1 >"$tmp/out" 2>"$tmp/err"; then
    echo "ok: --zero 1 with --balance auto trains"
  else
    echo "FAIL: --zero 1 with --balance auto:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
fi
exit $fail
