# cli_lib.sh: what the tool's shell tests share (sourced, not run). The
# caller sets CLTRAIN, out and err (files) and fail=0.

# need_python WHAT: py is a python3 (to read WHAT), or the test is skipped
# (exit 77).
need_python() {
  py=
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1; then py=$p; break; fi
  done
  if [ -z "$py" ]; then echo "SKIP: no python3 to read $1"; exit 77; fi
}

# expect CODE DESCRIPTION -- ARGS: run cltrain and check its exit code.
expect() {
  want=$1 what=$2
  shift 3
  "$CLTRAIN" "$@" >"$out" 2>"$err"
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: 'cltrain $*' exited $got, expected $want"
    sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"
    fail=1
    return 1
  fi
  echo "ok: $what"
}

# mpi_expect NP CODE DESCRIPTION -- ARGS: run cltrain on NP ranks
# (tests/lib/mpi_run.sh; the caller sets srcdir) and check its exit code.
mpi_expect() {
  np=$1 want=$2 what=$3
  shift 4
  sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$CLTRAIN" "$@" >"$out" 2>"$err"
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: 'cltrain $*' on $np ranks exited $got, expected $want"
    sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"
    fail=1
    return 1
  fi
  echo "ok: $what"
}

# refuse DESCRIPTION TEXT -- ARGS: cltrain exits non-zero with TEXT (a grep
# pattern) in its stderr.
refuse() {
  what=$1 text=$2
  shift 3
  "$CLTRAIN" "$@" >"$out" 2>"$err"
  rc=$?
  if [ $rc -ne 0 ] && grep -q -- "$text" "$err"; then
    echo "ok: $what: $(grep -m1 -- "$text" "$err")"
  else
    echo "FAIL: $what: exit $rc, no '$text' in:"; sed 's/^/  /' "$err"; fail=1
  fi
}

# has FILE PATTERN DESCRIPTION: FILE holds PATTERN (a grep pattern).
has() {
  if ! grep -q -- "$2" "$1"; then
    echo "FAIL: $3: no '$2' in:"; sed 's/^/  /' "$1"; fail=1
  fi
}

# same A B DESCRIPTION: the two files hold the same bytes.
same() {
  if cmp -s "$1" "$2"; then echo "ok: $3"; else echo "FAIL: $3: $1 and $2 differ"; fail=1; fi
}

# same_data A B DESCRIPTION: two safetensors files hold the same tensors (the
# data section, every tensor's bytes): a resumed run's checkpoints differ
# from the uninterrupted run's in their run record (the step the session
# branched from, when it started), not in their state. Uses $tmp.
data() { tail -c +$(($(od -An -tu8 -N8 "$1") + 9)) "$1"; }
same_data() {
  data "$1" >"$tmp/data1"; data "$2" >"$tmp/data2"
  if [ -s "$tmp/data1" ] && cmp -s "$tmp/data1" "$tmp/data2"; then echo "ok: $3"; else echo "FAIL: $3: the tensors of $1 and $2 differ"; fail=1; fi
}

# tiny_gpt_spec: a GPT small enough to train in seconds (bytes, T = 16, two
# blocks, the output tied to the embedding) on standard output.
tiny_gpt_spec() {
  cat <<'SPEC'
input tokens 16 vocab=256
embedding 16 name=wte
posembedding
block repeat=2
  layernorm
  attention heads=2
  residual
  layernorm
  linear 32 init=normal
  gelu
  linear 16 init=normal
  residual
end
layernorm
linear 256 tie=wte bias=false
SPEC
}

# mkidx DIR NAME N: N random 4x4 one-channel images with labels 0..9 as
# DIR/NAME-images-idx3-ubyte and DIR/NAME-labels-idx1-ubyte (IDX, big-endian
# sizes): a small training set for tests that need one in seconds.
byte() { printf "\\$(printf %03o "$1")"; }
be32() { byte $(($1 >> 24 & 255)); byte $(($1 >> 16 & 255)); byte $(($1 >> 8 & 255)); byte $(($1 & 255)); }
mkidx() {
  { printf '\000\000\010\003'; be32 "$3"; be32 4; be32 4; head -c $(($3 * 16)) /dev/urandom; } \
    >"$1/$2-images-idx3-ubyte"
  { printf '\000\000\010\001'; be32 "$3"; tr -dc '\000-\011' </dev/urandom | head -c "$3"; } \
    >"$1/$2-labels-idx1-ubyte"
}
