#!/bin/sh
# outputs.sh: the files a command writes never destroy what it did not make
# (CONVENTIONS #18), each refusal made with the bad path itself, and each
# checked to leave what was there as it was:
#   - an output that is not a regular file (a FIFO here; a device node in a
#     private tmpfs under `unshare -m`, never the real /dev, where this
#     machine lets us) through --save, --trace, --metrics, export, tokenize
#     -o, hf import -o, hf export -o, bench allreduce --fit, or a symbolic
#     link to one: refused before the first step, exit 1, naming the path
#     and what it is;
#   - a symbolic link to a regular file: followed, the link kept;
#   - two of a command's inputs and outputs that are one file (the same
#     inode, or the same path not yet there): --resume C --save C, --metrics
#     F --save F, --trace F --save F, --weights W --save W, --save MODEL, an
#     output onto the data, a checkpoint of --checkpoint-dir as --save,
#     tokenize a.txt -o a.txt, -o X --val-output X, export C C, hf import
#     over its own files, hf export over its --weights: refused, exit 2,
#     naming both.
# Exits 77 (skipped) when no OpenCL device exists.
CLTRAIN=${CLTRAIN:-./cltrain}
srcdir=${srcdir:-.}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out err=$tmp/err

"$CLTRAIN" devices >"$out" 2>"$err"
if [ $? -eq 3 ]; then echo "SKIP: no OpenCL device: $(cat "$err")"; exit 77; fi
. "$srcdir/tests/lib/cli_lib.sh" # mkidx, same

# run WANT DESCRIPTION -- ARGS: cltrain ARGS exits WANT, under a time limit
# (a FIFO opened for writing would wait for a reader forever).
run() {
  want=$1 what=$2
  shift 3
  timeout -k 5 60 "$CLTRAIN" "$@" >"$out" 2>"$err"
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: $what: 'cltrain $*' exited $got, expected $want"
    sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"
    fail=1; return 1
  fi
  echo "ok: $what: $(head -n1 "$err")"
}
says() { # PATTERN DESCRIPTION: the last run's stderr holds PATTERN (fixed string)
  grep -qF -- "$1" "$err" || { echo "FAIL: $2: no '$1' in stderr:"; sed 's/^/  /' "$err"; fail=1; }
}
untrained() {
  if grep -q "epoch 1/" "$out"; then echo "FAIL: $1: it trained before refusing"; fail=1; fi
}
kind() { # PATH KIND DESCRIPTION: PATH is still a FIFO / a character device / a link
  case $2 in
    fifo) [ -p "$1" ] ;;
    chr) [ -c "$1" ] ;;
    link) [ -L "$1" ] ;;
  esac || { echo "FAIL: $3: $1 is no longer a $2: $(ls -l "$1" 2>&1)"; fail=1; }
}
no_tmp() { # DIR: no temporary file left
  if ls "$1" | grep -q '\.tmp'; then echo "FAIL: temporary files left in $1: $(ls "$1")"; fail=1; fi
}

d=$tmp/data
mkdir "$d"
mkidx "$d" train 64
mkidx "$d" t10k 32
model=$tmp/m.model
printf 'input 1 4 4\nflatten\nlinear 10\n' >"$model"
tr1="train $model --data $d -e 1 -b 16 -d 0 -q"
run 0 "weights and a checkpoint to work with" -- $tr1 --save "$tmp/w.safetensors" --checkpoint-dir "$tmp/ck"
ckpt=$tmp/ck/ckpt-0000000004.safetensors
cp "$tmp/w.safetensors" "$tmp/w.orig"; cp "$ckpt" "$tmp/ckpt.orig"; cp "$model" "$tmp/model.orig"
printf 'some text to tokenize\n' >"$tmp/a.txt"; cp "$tmp/a.txt" "$tmp/a.orig"

# ---- outputs that are not regular files -------------------------------------
fifo=$tmp/fifo
mkfifo "$fifo"
ln -s fifo "$tmp/fifo-link"
for opt in --save --trace --metrics; do
  run 1 "$opt a FIFO" -- $tr1 "$opt" "$fifo"
  says "$opt: the output file $fifo is a FIFO, not a regular file" "$opt names the FIFO"
  untrained "$opt FIFO"; kind "$fifo" fifo "$opt"
done
run 1 "--save a link to a FIFO" -- $tr1 --save "$tmp/fifo-link"
says "$tmp/fifo-link is a symbolic link to $fifo, a FIFO" "the link and where it leads are named"
kind "$tmp/fifo-link" link "--save through a link"
ln -s nowhere "$tmp/nowhere-link"
run 1 "--save a link that leads nowhere" -- $tr1 --save "$tmp/nowhere-link"
says "leads to no file" "the dangling link is said"; kind "$tmp/nowhere-link" link "--save a dangling link"
run 1 "export to a FIFO" -- export "$ckpt" "$fifo"
says "$fifo is a FIFO" "export names the FIFO"; kind "$fifo" fifo "export"
run 1 "tokenize -o a FIFO" -- tokenize "$tmp/a.txt" -o "$fifo"
says "$fifo is a FIFO" "tokenize names the FIFO"; kind "$fifo" fifo "tokenize"
run 1 "tokenize --val-output a FIFO" -- tokenize "$tmp/a.txt" -o "$tmp/t.bin" --val-fraction 0.5 --val-output "$fifo"
says "$fifo is a FIFO" "tokenize names the FIFO"; kind "$fifo" fifo "tokenize --val-output"
[ -e "$tmp/t.bin" ] && { echo "FAIL: tokenize wrote -o before refusing --val-output"; fail=1; }
run 1 "bench allreduce --fit a FIFO" -- bench allreduce --fit "$fifo"
says "$fifo is a FIFO" "bench allreduce names the FIFO"; kind "$fifo" fifo "bench allreduce --fit"
ln -s fifo "$tmp/imp.safetensors"
run 1 "hf import -o onto a FIFO" -- hf import "$tmp/nohf" -o "$tmp/imp"
says "$tmp/imp.safetensors is a symbolic link to $fifo, a FIFO" "hf import names the FIFO"
no_tmp "$tmp"

# A device node, made in a tmpfs only this test's mount namespace sees.
if command -v unshare >/dev/null 2>&1 && unshare -m true 2>/dev/null; then
  mnt=$tmp/mnt
  mkdir "$mnt"
  cat >"$tmp/dev.sh" <<EOF
mount -t tmpfs none "$mnt" && mknod "$mnt/null" c 1 3 || exit 77
for opt in --save --trace --metrics; do
  timeout 60 "$CLTRAIN" $tr1 "\$opt" "$mnt/null" >"$tmp/dev.out" 2>"$tmp/dev.err"
  echo "\$opt \$? \$([ -c "$mnt/null" ] && echo chr || echo replaced) \$(grep -c "epoch 1/" "$tmp/dev.out")"
  cat "$tmp/dev.err" >&2
done
timeout 60 "$CLTRAIN" export "$ckpt" "$mnt/null" >/dev/null 2>>"$tmp/dev.err.all"
echo "export \$? \$([ -c "$mnt/null" ] && echo chr || echo replaced) 0"
timeout 60 "$CLTRAIN" tokenize "$tmp/a.txt" -o "$mnt/null" >/dev/null 2>>"$tmp/dev.err.all"
echo "tokenize \$? \$([ -c "$mnt/null" ] && echo chr || echo replaced) 0"
ln -s "$mnt/null" "$mnt/link"
timeout 60 "$CLTRAIN" $tr1 --save "$mnt/link" >/dev/null 2>>"$tmp/dev.err.all"
echo "link \$? \$([ -c "$mnt/null" ] && [ -L "$mnt/link" ] && echo chr || echo replaced) 0"
EOF
  unshare -m sh "$tmp/dev.sh" >"$tmp/dev.res" 2>"$tmp/dev.err.all"
  rc=$?
  if [ $rc -eq 77 ] || [ ! -s "$tmp/dev.res" ]; then
    echo "SKIP (part): no tmpfs or mknod in a private mount namespace here"
  else
    while read -r what code still trained; do
      if [ "$code" = 1 ] && [ "$still" = chr ] && [ "$trained" = 0 ]; then
        echo "ok: $what onto a character device: refused (exit 1), the device kept"
      else
        echo "FAIL: $what onto a character device: exit $code, device $still, trained: $trained line(s)"; fail=1
      fi
    done <"$tmp/dev.res"
    grep -qF "$mnt/null is a character device, not a regular file" "$tmp/dev.err.all" ||
      { echo "FAIL: no message names the device:"; sed 's/^/  /' "$tmp/dev.err.all"; fail=1; }
    grep -qF "$mnt/link is a symbolic link to $mnt/null, a character device" "$tmp/dev.err.all" ||
      { echo "FAIL: no message names the link to the device:"; sed 's/^/  /' "$tmp/dev.err.all"; fail=1; }
  fi
else
  echo "SKIP (part): unshare -m is not permitted here: device nodes untested (FIFOs were)"
fi

# ---- a symbolic link to a regular file is followed ---------------------------
cp "$tmp/w.orig" "$tmp/target.safetensors"
ln -s target.safetensors "$tmp/latest.safetensors"
printf '{"earlier":1}\n' >"$tmp/m.jsonl"; ln -s m.jsonl "$tmp/m-link.jsonl"
run 0 "--save and --metrics through links to regular files" -- $tr1 --seed 7 --save "$tmp/latest.safetensors" \
  --metrics "$tmp/m-link.jsonl"
kind "$tmp/latest.safetensors" link "--save through a link"; kind "$tmp/m-link.jsonl" link "--metrics through a link"
if cmp -s "$tmp/target.safetensors" "$tmp/w.orig"; then echo "FAIL: the link's file was not replaced"; fail=1; fi
run 0 "the link's file holds the new weights" -- eval "$model" --weights "$tmp/target.safetensors" --data "$d" -d 0
[ "$(head -n1 "$tmp/m.jsonl")" = '{"earlier":1}' ] && [ "$(wc -l <"$tmp/m.jsonl")" -gt 1 ] &&
  echo "ok: the metrics link's file was appended to" || { echo "FAIL: metrics through a link:"; cat "$tmp/m.jsonl"; fail=1; }

# ---- inputs and outputs that are one file -----------------------------------
nothing_lost() {
  same "$tmp/w.safetensors" "$tmp/w.orig" "$1: the weights are as they were"
  same "$ckpt" "$tmp/ckpt.orig" "$1: the checkpoint is as it was"
  same "$model" "$tmp/model.orig" "$1: the model is as it was"
}
run 2 "--resume C --save C" -- $tr1 --resume "$ckpt" --save "$ckpt"
says "--save $ckpt is --resume $ckpt" "both options are named"; untrained "--resume C --save C"; nothing_lost "--resume C --save C"
ln "$ckpt" "$tmp/hardlink.safetensors"
run 2 "--resume C --save a hard link to C" -- $tr1 --resume "$ckpt" --save "$tmp/hardlink.safetensors"
says "--save $tmp/hardlink.safetensors is --resume $ckpt" "the hard link is found"; nothing_lost "a hard link"
rm -f "$tmp/hardlink.safetensors"
run 2 "--weights W --save W" -- $tr1 --weights "$tmp/w.safetensors" --save "$tmp/w.safetensors"
says "--save $tmp/w.safetensors is --weights $tmp/w.safetensors" "both are named"; nothing_lost "--weights W --save W"
run 2 "--metrics F --save F" -- $tr1 --metrics "$tmp/w.safetensors" --save "$tmp/w.safetensors"
says "--save $tmp/w.safetensors and --metrics $tmp/w.safetensors are one file" "both are named"
nothing_lost "--metrics F --save F"
run 2 "--trace F --save F (F not there yet)" -- $tr1 --trace "$tmp/new.json" --save "$tmp/./new.json"
says "are one file" "the two outputs are said to be one"
[ -e "$tmp/new.json" ] && { echo "FAIL: $tmp/new.json was written"; fail=1; }
run 2 "--save MODEL" -- $tr1 --save "$model"
says "is MODEL $model" "the model is named"; nothing_lost "--save MODEL"
cp "$d/train-labels-idx1-ubyte" "$tmp/labels.orig"
run 2 "--metrics onto a data file" -- $tr1 --metrics "$d/train-labels-idx1-ubyte"
says "is --data $d/train-labels-idx1-ubyte" "the data file is named"
same "$d/train-labels-idx1-ubyte" "$tmp/labels.orig" "the data file is as it was"
run 2 "--save onto a checkpoint of --checkpoint-dir" -- $tr1 --checkpoint-dir "$tmp/ck" --save "$ckpt"
says "names a checkpoint of --checkpoint-dir" "the checkpoint directory is said"; nothing_lost "--save a checkpoint"
run 2 "export C C" -- export "$ckpt" "$ckpt"
nothing_lost "export C C"
run 2 "tokenize a.txt -o a.txt" -- tokenize "$tmp/a.txt" -o "$tmp/a.txt"
says "--output $tmp/a.txt is TEXT $tmp/a.txt" "tokenize names both"
same "$tmp/a.txt" "$tmp/a.orig" "tokenize: the text is as it was"
run 2 "tokenize -o X --val-output ./X" -- tokenize "$tmp/a.txt" -o "$tmp/x.bin" --val-fraction 0.5 --val-output "$tmp/./x.bin"
says "are one file" "tokenize names the two outputs"
# hf: an import whose output prefix lands on its own model.safetensors, an
# export into the directory its --weights come from.
tiny_gpt_spec >"$tmp/g.model"
i=0; while [ $i -lt 40 ]; do echo "line $i of some text for a tiny model to read"; i=$((i + 1)); done >"$tmp/g.txt"
"$CLTRAIN" tokenize -q "$tmp/g.txt" -o "$tmp/g_train.bin" &&
  "$CLTRAIN" train "$tmp/g.model" --data "$tmp/g_train.bin" --val none -b 4 --max-steps 1 -d 0 -q \
    --save "$tmp/g.safetensors" >/dev/null 2>"$err" &&
  "$CLTRAIN" hf export "$tmp/g.model" --weights "$tmp/g.safetensors" -o "$tmp/hf" >/dev/null 2>>"$err"
if [ -f "$tmp/hf/model.safetensors" ]; then
  cp "$tmp/hf/model.safetensors" "$tmp/hfmodel.orig"
  run 2 "hf import -o DIR/model (its own model.safetensors)" -- hf import "$tmp/hf" -o "$tmp/hf/model"
  says "would replace $tmp/hf/model.safetensors, which the import reads" "hf import names its input"
  same "$tmp/hf/model.safetensors" "$tmp/hfmodel.orig" "hf import: the checkpoint is as it was"
  mkdir "$tmp/hf2"; cp "$tmp/g.safetensors" "$tmp/hf2/model.safetensors"
  run 2 "hf export --weights DIR/model.safetensors -o DIR" -- hf export "$tmp/g.model" --weights "$tmp/hf2/model.safetensors" -o "$tmp/hf2"
  says "writing $tmp/hf2/model.safetensors would replace $tmp/hf2/model.safetensors, which the export reads" "hf export names its input"
  same "$tmp/hf2/model.safetensors" "$tmp/g.safetensors" "hf export: the weights are as they were"
  # A FIFO as config.json: refused before model.safetensors is replaced.
  rm -f "$tmp/hf/config.json"; mkfifo "$tmp/hf/config.json"
  run 1 "hf export with a FIFO as DIR/config.json" -- hf export "$tmp/g.model" --weights "$tmp/g.safetensors" -o "$tmp/hf"
  says "$tmp/hf/config.json is a FIFO" "hf export names the FIFO"; kind "$tmp/hf/config.json" fifo "hf export"
  same "$tmp/hf/model.safetensors" "$tmp/hfmodel.orig" "hf export: model.safetensors is as it was"
else
  echo "FAIL: could not make a Hugging Face directory to import:"; sed 's/^/  /' "$err"; fail=1
fi
no_tmp "$tmp"
exit $fail
