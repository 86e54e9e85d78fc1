# cli_lib.sh: what the tool's shell tests share (sourced, not run). The
# caller sets CLTRAIN, out and err (files) and fail=0.

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

# has FILE PATTERN DESCRIPTION: FILE holds PATTERN (a grep pattern).
has() {
  if ! grep -q -- "$2" "$1"; then
    echo "FAIL: $3: no '$2' in:"; sed 's/^/  /' "$1"; fail=1
  fi
}
