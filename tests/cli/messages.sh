#!/bin/sh
# messages.sh: what the tool refuses from its environment, and messages that
# name the thing actually wrong (issue 38, items 9 and 11):
#   - an on/off switch (CLT_IN_PLACE, CLT_SHARED_BUFFERS, ...) holding
#     anything but 0 or 1 stops `cltrain train` before it starts, naming the
#     variable and its value; 0 and 1 train;
#   - with no OpenCL driver, the message names the directory the ICD loader
#     searched: OCL_ICD_VENDORS's when it is set;
#   - `--pipeline 3` on 2 ranks (the default batch of 64, which 3 does not
#     divide) names the ranks and the stages, not `--micro-batches 3`, which
#     was never given; on 3 ranks it says the pipeline's 3 micro-batches are
#     its default.
# The MPI case is skipped without a launcher; all of it without a device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh" # expect, has, mkidx
mkidx "$tmp" train 64
mkidx "$tmp" t10k 16
printf 'input 1 4 4\nflatten\nlinear 16\nrelu\nlinear 10\n' >"$tmp/m.model"
train="train $tmp/m.model --data $tmp -e 1 -b 8 -q -d 0"

# the on/off switches
for pair in CLT_IN_PLACE=7 CLT_SHARED_BUFFERS=maybe; do # all seven: tests/api/test_args
  name=${pair%%=*} value=${pair#*=}
  if env "$pair" "$CLTRAIN" $train >"$out" 2>"$err"; then
    echo "FAIL: $pair: cltrain train exited 0"; fail=1
  elif grep -q "$name='$value' is not a switch" "$err"; then
    echo "ok: $pair: $(cat "$err")"
  else
    echo "FAIL: $pair is not named:"; sed 's/^/  /' "$err"; fail=1
  fi
done
for pair in CLT_IN_PLACE=0 CLT_SHARED_BUFFERS=1; do
  if env "$pair" "$CLTRAIN" $train >"$out" 2>"$err"; then echo "ok: $pair trains"
  else echo "FAIL: $pair: exited non-zero:"; sed 's/^/  /' "$err"; fail=1; fi
done

# no driver where OCL_ICD_VENDORS points
mkdir "$tmp/vendors"
OCL_ICD_VENDORS=$tmp/vendors "$CLTRAIN" devices >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ]; then
  echo "SKIP: the ICD loader here ignores OCL_ICD_VENDORS (a driver was found)"
else
  has "$err" "$tmp/vendors" "the message names OCL_ICD_VENDORS's directory"
  if grep -q "/etc/OpenCL/vendors" "$err"; then
    echo "FAIL: the message names /etc/OpenCL/vendors, which was not searched:"; sed 's/^/  /' "$err"; fail=1
  else
    echo "ok: no driver in OCL_ICD_VENDORS: $(cat "$err")"
  fi
fi

# --pipeline 3 on 2 ranks, and on 3, with the default batch
sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
if [ $? -eq 77 ]; then
  echo "SKIP: no MPI launcher for the pipeline's messages"
else
  pipe="train $tmp/m.model --data $tmp -e 1 -q --pipeline 3"
  CLT_TEST_LIMIT=60 CLT_TIMEOUT=10 sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" $pipe >"$out" 2>"$err"
  if [ $? -eq 0 ]; then
    echo "FAIL: --pipeline 3 on 2 ranks exited 0"; fail=1
  elif grep -q -- "--micro-batches 3" "$err" || ! grep -q -- "--pipeline 3 on 2 ranks" "$err"; then
    echo "FAIL: --pipeline 3 on 2 ranks blames the wrong thing:"; sed 's/^/  /' "$err"; fail=1
  else
    echo "ok: --pipeline 3 on 2 ranks: $(grep -m1 -- "--pipeline 3 on 2 ranks" "$err")"
  fi
  CLT_TEST_LIMIT=60 CLT_TIMEOUT=10 sh "$srcdir/tests/lib/mpi_run.sh" 3 "$CLTRAIN" $pipe >"$out" 2>"$err"
  if [ $? -eq 0 ]; then
    echo "FAIL: --pipeline 3 with a batch of 64 exited 0"; fail=1
  elif grep -q -- "--micro-batches 3 must" "$err" || ! grep -q "unless --micro-batches says" "$err"; then
    echo "FAIL: --pipeline 3 with a batch of 64 blames the wrong thing:"; sed 's/^/  /' "$err"; fail=1
  else
    echo "ok: --pipeline 3, batch 64, on 3 ranks: $(grep -m1 "unless --micro-batches says" "$err")"
  fi
fi
exit $fail
