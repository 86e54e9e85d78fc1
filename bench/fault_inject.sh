#!/bin/sh
# fault_inject.sh: the faults a training job must survive (issue 38), in one
# command, each with checkpoints being written, on 2 ranks of this machine
# with CLT_TIMEOUT=5 (a 784-256-128-10 MLP, examples/fashion_mlp.model, on
# 512 random 28x28 images):
#
#   - SIGKILL and SIGSTOP of rank 1 in a plain data-parallel run, under
#     --zero 2 and in a --pipeline 2 run;
#   - SIGKILL of rank 0, the rank that writes, while it writes a checkpoint;
#   - a full disk mid-run: the checkpoint directory on a tmpfs of 16 MiB in
#     a private mount namespace (unshare -m; skipped where that is not
#     permitted), filled up by another file once two checkpoints of 1.9 MB
#     are there;
#   - a read-only remount mid-run (mount -o remount,ro of such a tmpfs).
#
# For each: every rank ends within CLT_TIMEOUT + 5 s of the fault (the job
# ends), non-zero; the messages name the culprit (the rank killed or stalled,
# or the file and the system's reason); and the newest complete checkpoint
# in the directory loads and resumes (`--resume latest` on the same ranks
# and options names it and trains two steps more). The process faults
# share tests/lib/fault_lib.sh with tests/comm/fault_mpi.sh (make check's
# faster subset, without checkpoints).
#
# Run from the build directory: sh bench/fault_inject.sh (in a VPATH build,
# sh ../bench/fault_inject.sh). About a minute and a half; exits 1 if any
# case fails, 77 without MPI or an OpenCL device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
CLT_TIMEOUT=5
FAULT_SLACK=5
export CLT_TIMEOUT
fail=0
MODEL=$srcdir/examples/fashion_mlp.model
. "$srcdir/tests/lib/fault_lib.sh"
. "$srcdir/tests/lib/cli_lib.sh" # be32

# newest DIR: the newest complete checkpoint there (its name), or nothing.
newest() { ls "$1" 2>/dev/null | grep -E '^ckpt-[0-9]+\.safetensors$' | sort | tail -n 1; }

# resumes DIR TRAIN-ARGS...: the newest complete checkpoint in DIR loads: a
# run on the same 2 ranks with --resume latest names it and trains 2 steps
# more, exit 0.
resumes() {
  dir=$1
  shift
  last=$(newest "$dir")
  if [ -z "$last" ]; then
    echo "FAIL: no complete checkpoint in $dir: $(ls "$dir" | tr '\n' ' ')"; fail=1
    return
  fi
  step=$(echo "$last" | sed 's/^ckpt-0*\([0-9]*\)\.safetensors$/\1/')
  CLT_TEST_LIMIT=60 sh "$srcdir/tests/lib/mpi_run.sh" 2 "$CLTRAIN" train "$@" --resume latest \
    --max-steps $((step + 2)) -q >"$tmp/rout" 2>"$tmp/rerr"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q "resumed from $dir/$last: step $step" "$tmp/rout"; then
    echo "FAIL: --resume latest from $dir (newest complete: $last) exited $rc:"; sed 's/^/  /' "$tmp/rout" "$tmp/rerr"
    fail=1
    return
  fi
  echo "   resumed from $last (step $step) and trained to step $((step + 2)); $(ls "$dir" | wc -l) files left in $dir, the newest: $(ls "$dir" | tail -n 2 | tr "\n" " ")"
}

# has_checkpoint: the moment has come (FAULT_WHEN) once FAULT_CKPT is there.
has_checkpoint() { [ -f "$FAULT_CKPT" ]; }
# saving: a checkpoint is being written (its temporary file is in
# FAULT_CKPT_DIR), after a first one; builtins only, to poll fast.
saving() {
  for f in "$FAULT_CKPT_DIR"/ckpt-*.safetensors.tmp.*; do
    [ -e "$f" ] || return 1
    for g in "$FAULT_CKPT_DIR"/ckpt-*.safetensors; do [ -e "$g" ] && return 0; done
  done
  return 1
}

# fill_disk: the checkpoints' tmpfs filled up by another file.
fill_disk() { cat /dev/zero >"$tmp/fs/fill" 2>/dev/null; }

# make_ro: a read-only remount of the checkpoints' tmpfs, again until no
# file is open for writing there (EBUSY while a save writes).
make_ro() {
  k=0
  until mount -o remount,ro "$tmp/fs" 2>/dev/null || [ $k -ge 1000 ]; do k=$((k + 1)); done
}

# ---- the cases that need a private mount namespace ---------------------------
# sh fault_inject.sh --in-namespace CASE TMP: run CASE in this namespace,
# with TMP made by the parent; the tmpfs goes with the namespace.
if [ "$1" = --in-namespace ]; then
  tmp=$3
  mkdir -p "$tmp/fs"
  train="$MODEL --data $tmp/data --normalize scale -e 1000000 -b 32 -d 0 --checkpoint-dir $tmp/fs/ck --keep 0"
  case $2 in
    disk_full)
      mount -t tmpfs -o size=16m tmpfs "$tmp/fs" || exit 77
      FAULT_CKPT=$tmp/fs/ck/ckpt-0000000004.safetensors FAULT_WHEN=has_checkpoint FAULT_STEPS=1 FAULT_ACTION=fill_disk
      fault 2 0 - $train --checkpoint-every 2
      has "$tmp/err" "rank 0: train: .*$tmp/fs/ck/ckpt-[0-9]*\.safetensors.*No space left on device" \
        "rank 0 names the checkpoint it could not write and why"
      ls "$tmp/fs/ck" | grep -q '\.tmp\.' && { echo "FAIL: a temporary file is left: $(ls "$tmp/fs/ck")"; fail=1; }
      rm -f "$tmp/fs/fill" # room again
      ;;
    read_only)
      mount -t tmpfs -o size=64m tmpfs "$tmp/fs" || exit 77
      FAULT_CKPT=$tmp/fs/ck/ckpt-0000000004.safetensors FAULT_WHEN=has_checkpoint FAULT_STEPS=1 FAULT_ACTION=make_ro
      fault 2 0 - $train --checkpoint-every 2
      has "$tmp/err" "rank 0: train: .*$tmp/fs/ck/ckpt-[0-9]*\.safetensors.*Read-only file system" \
        "rank 0 names the checkpoint it could not write and why"
      mount -o remount,rw "$tmp/fs"
      ;;
  esac
  echo "   the checkpoints: $(ls "$tmp/fs/ck" | tr '\n' ' ')"
  resumes "$tmp/fs/ck" $train --checkpoint-every 2
  exit $fail
fi

# ---- the process faults --------------------------------------------------------
tmp=$(mktemp -d)
trap 'fault_cleanup; rm -rf "$tmp"' EXIT
"$CLTRAIN" devices >/dev/null 2>&1
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device"; exit 77; fi
sh "$srcdir/tests/lib/mpi_run.sh" 1 true >/dev/null 2>&1
case $? in 77) echo "SKIP: no MPI launcher"; exit 77 ;; esac
fault_setup
mkdir "$tmp/data"
{ printf '\000\000\010\003'; be32 512; be32 28; be32 28; head -c $((512 * 784)) /dev/urandom; } \
  >"$tmp/data/train-images-idx3-ubyte"
{ printf '\000\000\010\001'; be32 512; tr -dc '\000-\011' </dev/urandom | head -c 512; } >"$tmp/data/train-labels-idx1-ubyte"
record() { printf '  %-36s exit %3s after %5s s\n' "$1" "$fault_rc" "$fault_took" >>"$tmp/summary"; }

# SIGKILL and SIGSTOP of rank 1, with a checkpoint every 2 steps (5 steps
# logged: checkpoints 2 and 4 are there).
for mode in plain "zero 2" "pipeline 2"; do
  case $mode in plain) opt= ;; *) opt="--$mode" ;; esac
  for sig in KILL STOP; do
    dir=$tmp/ck-$(echo "$mode" | tr -d ' ')-$sig
    train="$MODEL --data $tmp/data --normalize scale -e 1000000 -b 32 -d 0 --checkpoint-dir $dir --keep 0 $opt"
    FAULT_STEPS=5 FAULT_WHEN=
    fault 2 1 $sig $train --checkpoint-every 2
    record "SIG$sig of rank 1, $mode"
    resumes "$dir" $train --checkpoint-every 2
  done
done

# SIGKILL of rank 0 (it writes the checkpoints, one every step) while its
# temporary file is there; again (at most 3 times) if the kill came after
# the rename. A wider MLP with Adam's state, so that a save (70 MB) takes
# long enough to be caught.
printf 'input 784\nlinear 2048\nrelu\nlinear 2048\nrelu\nlinear 10\n' >"$tmp/wide.model"
dir=$tmp/ck-midsave
train="$tmp/wide.model --data $tmp/data --normalize scale -e 1000000 -b 32 -d 0 -o adam --checkpoint-dir $dir --keep 2"
midsave=0
for try in 1 2 3; do
  rm -rf "$dir"
  FAULT_CKPT_DIR=$dir FAULT_STEPS=2 FAULT_WHEN=saving
  fault 2 0 KILL $train --checkpoint-every 1
  if ls "$dir" | grep -q '\.tmp\.'; then
    echo "   killed mid-save: $(ls "$dir" | grep '\.tmp\.') left"
    midsave=1
    break
  fi
  echo "   the kill came after the save (try $try)"
done
[ $midsave -eq 1 ] || { echo "FAIL: no kill came mid-save in 3 tries"; fail=1; }
record "SIGKILL of rank 0 mid-save"
resumes "$dir" $train --checkpoint-every 1

# The file system faults, each in a mount namespace of its own.
for case in disk_full read_only; do
  echo "== $case (unshare -m)"
  unshare -m sh "$0" --in-namespace "$case" "$tmp" >"$tmp/ns" 2>&1
  rc=$?
  cat "$tmp/ns"
  fault_took=$(sed -n 's/^   exit .* after \([0-9.]*\) s.*/\1/p' "$tmp/ns" | head -n 1)
  fault_rc=$(sed -n 's/^   exit \([0-9]*\) after.*/\1/p' "$tmp/ns" | head -n 1)
  case $rc in
    0) record "$case" ;;
    77) echo "   skipped: no private mount namespace or tmpfs here (root and unshare -m needed)"
        fault_rc=- fault_took=-; record "$case (skipped)" ;;
    *) fail=1; record "$case (FAILED)" ;;
  esac
  rm -rf "$tmp/fs"
done

echo
echo "every job's end after its fault (CLT_TIMEOUT=$CLT_TIMEOUT, at most $((CLT_TIMEOUT + FAULT_SLACK)) s):"
cat "$tmp/summary"
[ $fail -eq 0 ] && echo "fault_inject: all cases passed" || echo "fault_inject: FAILED"
exit $fail
