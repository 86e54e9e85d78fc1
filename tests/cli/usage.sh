#!/bin/sh
# usage.sh: what the tool says about its own command line (issue 39).
#   - every command of `cltrain --help` refuses an unknown option in the
#     form cltrain(1) promises for every failure, "cltrain: what: detail"
#     ("cltrain: summary: unrecognized option '--no-such-flag'"), exit 2:
#     not getopt's "summary: unrecognized option", not "cltrain summary:";
#   - so do a short option it lacks, an option without its value, a value
#     for a switch, an ambiguous abbreviation, and the commands' other
#     command-line faults (a missing operand or command, an unknown
#     benchmark or hf subcommand, an operand bench gemm takes none of: it
#     ran the benchmark);
#   - `cltrain help COMMAND` prints what `cltrain COMMAND --help` prints,
#     not the top-level help.
# Needs no device.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err
. "$srcdir/tests/lib/cli_lib.sh" # expect

# first_line WANT DESCRIPTION: stderr's first line is WANT exactly, up to
# the pointer to --help that may follow it.
first_line() {
  line=$(head -n 1 "$err")
  case $line in
    "$1" | "$1 ("*) echo "ok: $2: $line" ;;
    *) echo "FAIL: $2: stderr begins '$line', not '$1'"; sed 's/^/  /' "$err"; fail=1 ;;
  esac
}

"$CLTRAIN" --help >"$tmp/top" 2>&1 || { echo "FAIL: cltrain --help failed"; cat "$tmp/top"; exit 1; }
# "  bench gemm   check GEMM ...": the name, then two spaces or more.
sed -n '/^commands:/,/^$/p' "$tmp/top" | grep '^  [a-z]' | sed -e 's/^  //' -e 's/  .*//' >"$tmp/commands"
[ "$(wc -l <"$tmp/commands")" -ge 10 ] || { echo "FAIL: no list of commands in 'cltrain --help'"; exit 1; }

while read -r cmd; do
  case $cmd in
    help | version) continue ;; # below
  esac
  # shellcheck disable=SC2086 # "bench gemm" is two words
  expect 2 "$cmd --no-such-flag" -- $cmd --no-such-flag </dev/null &&
    first_line "cltrain: $cmd: unrecognized option '--no-such-flag'" "$cmd names itself and the option"
  # shellcheck disable=SC2086
  "$CLTRAIN" help $cmd >"$tmp/via_help" 2>&1
  rc=$?
  # shellcheck disable=SC2086
  "$CLTRAIN" $cmd --help >"$tmp/via_flag" 2>&1
  if [ $rc -ne 0 ]; then
    echo "FAIL: 'cltrain help $cmd' exited $rc"; sed 's/^/  /' "$tmp/via_help"; fail=1
  elif cmp -s "$tmp/via_help" "$tmp/top"; then
    echo "FAIL: 'cltrain help $cmd' prints the top-level help, not $cmd's"; fail=1
  elif ! cmp -s "$tmp/via_help" "$tmp/via_flag"; then
    echo "FAIL: 'cltrain help $cmd' differs from 'cltrain $cmd --help':"
    diff "$tmp/via_flag" "$tmp/via_help" | head -n 10 | sed 's/^/  /'; fail=1
  else
    echo "ok: cltrain help $cmd is $cmd's help"
  fi
done <"$tmp/commands"

expect 2 "version --no-such-flag" -- version --no-such-flag &&
  first_line "cltrain: version: takes no option, not '--no-such-flag'" "version refuses an option"
expect 2 "help of no such command" -- help no-such-command &&
  first_line "cltrain: unknown command 'no-such-command'" "help names the unknown command"
expect 0 "help help" -- help help
same "$out" "$tmp/top" "cltrain help help is the top-level help"

# getopt's other refusals, in our words (on commands that start no MPI,
# which takes a second: every command parses with the same function)
expect 2 "a short option devices lacks" -- devices -Z &&
  first_line "cltrain: devices: unrecognized option '-Z'" "the short option is named"
expect 2 "a short option in a cluster" -- tokenize -qZ &&
  first_line "cltrain: tokenize: unrecognized option '-Z'" "the short option in a cluster is named"
expect 2 "an option without its value" -- summary m.model --batch &&
  first_line "cltrain: summary: option '--batch' needs a value" "the option missing its value is named"
expect 2 "a short option without its value" -- devices -d &&
  first_line "cltrain: devices: option '-d' needs a value" "the short option missing its value is named"
expect 2 "a value for a switch" -- tokenize t.txt -o t.bin --quiet=yes &&
  first_line "cltrain: tokenize: option '--quiet' takes no value, not 'yes'" "the switch and the value are named"
expect 2 "an ambiguous abbreviation" -- summary m.model --b 1 &&
  first_line "cltrain: summary: option '--b' is ambiguous: it begins --batch, --bucket-mb" \
    "the abbreviation and what it may mean are named"
expect 2 "an unknown option after the operands" -- generate m.model --weights w --no-such-flag &&
  first_line "cltrain: generate: unrecognized option '--no-such-flag'" "after an operand too"
expect 2 "train's pointer to --help comes once" -- train --no-such-flag
[ "$(grep -c -- "--help" "$err")" -eq 1 ] && echo "ok: one pointer to --help" ||
  { echo "FAIL: not one pointer to --help:"; sed 's/^/  /' "$err"; fail=1; }

# the commands' other command-line faults
expect 2 "summary without a MODEL" -- summary &&
  first_line "cltrain: summary: the MODEL spec file is missing" "summary says what is missing"
expect 2 "an unknown benchmark" -- bench nothing &&
  first_line "cltrain: bench: unknown benchmark 'nothing': gemm or allreduce" "bench names it"
expect 2 "an unknown hf subcommand" -- hf nothing &&
  first_line "cltrain: hf: unknown subcommand 'nothing' (import or export)" "hf names it"
expect 2 "export with one file" -- export only.ckpt &&
  first_line "cltrain: export: a CHECKPOINT and an OUT.safetensors file are needed, not fewer" "export says what it needs"
expect 2 "hf without a subcommand" -- hf &&
  first_line "cltrain: hf: which conversion? import or export" "hf asks which"
expect 2 "no command" -- &&
  first_line "cltrain: no command given" "the tool says the command is missing"
expect 2 "bench gemm with an operand" -- bench gemm extra &&
  first_line "cltrain: bench gemm: unexpected argument 'extra'" "bench gemm refuses it, not runs"
expect 2 "hf import without -o" -- hf import somewhere &&
  first_line "cltrain: hf import: one DIR and -o PREFIX are needed" "hf import says what it needs"

exit $fail
