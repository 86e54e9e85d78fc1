#!/bin/sh
# zero_cli.sh: `cltrain train --zero` refusals and the one-rank no-op, on a
# small synthetic IDX set: --zero 4 is refused with a message and a non-zero
# exit; --zero 1 and 2 on one rank train and say they change nothing; on 2
# ranks (when mpirun exists) ranks that ask for different stages are
# refused, both naming --zero, --zero 1 and 2 train, and a balancer weight
# of 0 is refused at both. `cltrain summary --zero 1|2 --ranks N` counts the
# largest shard's state (and at 2 its gradients with the bucket buffers),
# and --max-device-memory refuses a replica that needs more, naming the cap.
# The parameters' allgather takes both of its paths on 2 and 3 ranks, each
# giving the weights of --zero 0 bit for bit (with a checkpoint between
# steps: at --zero 1 one file, whose state gather runs while the last
# gather's writes may be pending; at 2 each rank's shard): the blocks in a
# window of their own (one node, the default and --allreduce shm) and the ring's copies (--allreduce ring), each told by
# the plan's line in the debug log, against --zero 0 under the same
# --allreduce. Exits 77 without an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
export CLT_TIMEOUT
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi

. "$srcdir/tests/lib/cli_lib.sh" # mkidx
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

expect fail "--zero 4" "--zero must be a whole number from 0 to 3, not '4'" -- $CLTRAIN $train --zero 4
expect 0 "--zero 3 on one rank" "--zero 3 on one rank: there is nothing to shard" -- $CLTRAIN $train --zero 3
expect 0 "--zero 1 on one rank" "on one rank: there is nothing to shard" -- $CLTRAIN $train --zero 1
expect 0 "--zero 2 on one rank" "--zero 2 on one rank: there is nothing to shard" -- $CLTRAIN $train --zero 2

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
# --zero 2: gradients for the shard (292) and one bucket buffer of all 874:
# (292 + 874) x 4 bytes: one bucket of a small model gains nothing. A
# model of many layers does.
s2=$($CLTRAIN summary "$tmp/m.model" -o adamw --bucket-mb 0 --zero 2 --ranks 3) || { echo "FAIL: summary --zero 2"; fail=1; }
if echo "$s2" | grep -q "optimizer state and gradients for at most 292 of 874 parameters" &&
   echo "$s2" | grep -q "gradients  *4.6 KiB"; then
  echo "ok: summary --zero 2 --ranks 3"
else
  echo "FAIL: summary --zero 2 --ranks 3:"; echo "$s2" | sed 's/^/  /'; fail=1
fi
printf 'input 16\nlinear 256\nrelu\nlinear 256\nrelu\nlinear 256\nrelu\nlinear 256\nrelu\nlinear 256\nrelu\nlinear 10\n' >"$tmp/wide.model"
# 270090 parameters, the shard at most 67523; the largest bucket the output
# layer with the one below, 2570 + 65792 floats, and the next 65792 in the
# other of 2 buffers: gradients (67523 + 68362 + 65792) x 4 bytes =
# 787.8 KiB at stage 2, all 1.0 MiB at 1.
w1=$($CLTRAIN summary "$tmp/wide.model" -o adamw --bucket-mb 0.25 --zero 1 --ranks 4)
w2=$($CLTRAIN summary "$tmp/wide.model" -o adamw --bucket-mb 0.25 --zero 2 --ranks 4)
if echo "$w1" | grep -q "gradients  *1.0 MiB" && echo "$w2" | grep -q "gradients  *787.8 KiB" &&
   echo "$w1" | grep -q "total  *3.3 MiB" && echo "$w2" | grep -q "total  *3.1 MiB"; then
  echo "ok: summary of a deep MLP on 4 ranks: gradients 787.8 KiB at --zero 2, 1.0 MiB at --zero 1"
else
  echo "FAIL: summary of a deep MLP:"; echo "$w1" "$w2" | sed 's/^/  /'; fail=1
fi
expect fail "summary --zero 4" "--zero must be a whole number from 0 to 3, not '4'" -- $CLTRAIN summary "$tmp/m.model" --zero 4
expect 0 "summary --zero 1 on one rank" "" -- $CLTRAIN summary "$tmp/m.model" --zero 1
grep -q "on one rank changes nothing" "$tmp/out" && echo "ok: summary says --zero 1 on one rank is a no-op" ||
  { echo "FAIL: summary --zero 1 on one rank:"; sed 's/^/  /' "$tmp/out"; fail=1; }

MPIEXEC=${MPIEXEC:-mpiexec}
if command -v "$MPIEXEC" >/dev/null 2>&1; then
  expect fail "ranks asking for different stages" "rank 1 disagrees with rank 0 on --zero" -- \
    sh "$srcdir/tests/lib/mpi_run.sh" 1 $CLTRAIN $train --zero 0 : -np 1 $CLTRAIN $train --zero 1
  n=$(grep -c "disagrees with rank 0 on --zero" "$tmp/err")
  if [ "$n" -ge 2 ]; then echo "ok: named on both ranks"; else echo "FAIL: named on $n rank(s)"; fail=1; fi
  for z in 1 2; do
    if sh "$srcdir/tests/lib/mpi_run.sh" 2 $CLTRAIN $train --zero $z >"$tmp/out" 2>"$tmp/err"; then
      echo "ok: --zero $z on 2 ranks trains"
    else
      echo "FAIL: --zero $z on 2 ranks:"; sed 's/^/  /' "$tmp/err"; fail=1
    fi
    # Every replica steps its rank's shard: none may sit steps out.
    expect fail "--zero $z with a weight of 0" "--balance weight 2 is 0, but under --zero $z every replica" -- \
      sh "$srcdir/tests/lib/mpi_run.sh" 2 $CLTRAIN $train --zero $z --balance 1,0
  done
  # The allgather's two paths (src/dp/zero_gather.c), against --zero 0.
  printf 'input 1 4 4\nflatten\nlinear 32\nrelu\nlinear 32\nrelu\nlinear 10\n' >"$tmp/g.model"
  gtrain="train $tmp/g.model --data $tmp --normalize scale -e 1 -b 12 -d 0 -q --max-steps 4 -o adamw --bucket-mb 0"
  gtrain="$gtrain --checkpoint-every 2 --checkpoint-dir $tmp/ck"
  # --zero 0 under the same --allreduce: on 3 ranks the ring sums in
  # another order than shm (doc/scaling.md), so the reference is its own.
  for n in 2 3; do
    for alg in shm ring; do
      rm -rf "$tmp/ck"
      sh "$srcdir/tests/lib/mpi_run.sh" $n $CLTRAIN $gtrain --zero 0 --allreduce $alg --save "$tmp/g0.safetensors" \
        >"$tmp/out" 2>"$tmp/err" || { echo "FAIL: --zero 0 --allreduce $alg on $n ranks:"; sed 's/^/  /' "$tmp/err"; fail=1; }
      for z in 1 2; do
        want=$alg what="the ring's copies"
        [ $alg = shm ] && what="a window of its own"
        rm -rf "$tmp/ck" "$tmp/g.safetensors"
        one=
        [ $z = 1 ] && one=--checkpoint-one-file # the state's gather; at 2 each rank writes its shard
        if CLT_LOG_LEVEL=debug sh "$srcdir/tests/lib/mpi_run.sh" $n $CLTRAIN $gtrain --zero $z --allreduce $alg $one \
             --save "$tmp/g.safetensors" >"$tmp/out" 2>"$tmp/err" &&
           grep -q "allgather plan #.*, $want, " "$tmp/err" && cmp -s "$tmp/g0.safetensors" "$tmp/g.safetensors"; then
          echo "ok: --zero $z on $n ranks, the allgather through $what: the weights of --zero 0 (--allreduce $alg)"
        else
          echo "FAIL: --zero $z --allreduce $alg on $n ranks (plan: $(grep -m1 "allgather plan #" "$tmp/err"))"
          cmp "$tmp/g0.safetensors" "$tmp/g.safetensors"; tail -5 "$tmp/err" | sed 's/^/  /'; fail=1
        fi
      done
    done
  done
  if sh "$srcdir/tests/lib/mpi_run.sh" 2 $CLTRAIN $train --zero 2 --balance auto --balance-every 1 >"$tmp/out" 2>"$tmp/err"; then
    echo "ok: --zero 2 with --balance auto trains"
  else
    echo "FAIL: --zero 2 with --balance auto:"; sed 's/^/  /' "$tmp/err"; fail=1
  fi
fi
exit $fail
