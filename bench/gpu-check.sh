#!/bin/bash
# gpu-check.sh: exercise cltrain's OpenCL path on a GPU machine that has
# neither this project's build dependencies nor a network, from a bundle made
# by scripts/gpu-bundle.sh. From the repository root:
#
#   bash bench/gpu-check.sh [BUNDLE] [GROUPS]        (BUNDLE defaults to .gpu)
#
# On the device machine (the device tool's `run`, carrying .gpu):
#   bash bench/gpu-check.sh .gpu                     (timeout_s 430: it ends by itself in 390 s)
#
# It finds the NVIDIA OpenCL driver (libnvidia-opencl.so.1) wherever it is,
# points a private ICD directory at it, and runs, each under `timeout` and
# within an overall time budget, each failure recorded and the next step run:
#
#   env        machine facts: uname, glibc, libstdc++, nvidia-smi, OpenCL and MPI
#              libraries found, the relocated Open MPI's paths
#   devices    cltrain devices (table, and JSON to $OUT/devices.json)
#   bench      cltrain bench gemm (checks, then GFLOP/s at two sizes)
#   tests      the Check test programs, on every device the ICD shows (the GPU)
#   train      MLP and CNN training on Fashion-MNIST ($OUT/mlp.jsonl, cnn.jsonl)
#   peer       PyTorch on the same models on the GPU, same batch/optimizer/epochs
#   dp         2 ranks data-parallel on the same GPU (mpirun; $OUT/dp.jsonl)
#   allreduce  cltrain bench allreduce on 2 ranks ($OUT/allreduce.json)
#   profile    CLT_PROFILE=1 on a few CNN steps
#   mpitests   test_dp, test_collectives, test_checkpoint_dp on 2 ranks
#   nnbench    bench/nn_bench: every layer call of a CNN step
#   gpt        GPT-2 124M (examples/gpt2_124m.model, T = 1024) fp32 and fp16 against PyTorch
#              (bench/pytorch_gpt.py, AMP) on the GPU: tokens/s, ratio, model FLOPs utilisation
#
# GROUPS (or GPU_CHECK_ONLY) is a space- or comma-separated subset of those,
# e.g. GPU_CHECK_ONLY="devices tests train"; default: all of them.
# Other settings (environment):
#   OUT               where the results go (default /tmp/gpu-check-out); at most 8
#                     files: summary.txt, console.log, logs.tar.gz, devices.json,
#                     mlp.jsonl, cnn.jsonl, dp.jsonl, allreduce.json
#   GPU_CHECK_BUDGET  seconds for the whole run (default 390); a step gets at most
#                     what is left, and steps past the budget are skipped
#   GPU_CHECK_SMALL=1 small sizes and step counts (for a CPU-only machine)
#   GPU_CHECK_DEVICE  the device spec for cltrain (default: gpu when the NVIDIA
#                     driver is found, else 0, the first device there is)
#   GPU_CHECK_OPENCL_LIB  an OpenCL driver library to use instead of the NVIDIA
#                     one found; GPU_CHECK_NO_NVIDIA=1 ignores the NVIDIA driver
#   GPU_CHECK_BUNDLE_GLIBC=1  run through the bundle's glibc even when the host's
#                     is new enough (done anyway when the host's is older)
#   GPU_CHECK_TEST_LIMIT  seconds per test program (default 90)
#   GPU_CHECK_DP_ARGS more cltrain train options for the dp runs (--bucket-mb 0.25)
# Without the NVIDIA driver it falls back to the OpenCL drivers the machine
# registers in /etc/OpenCL/vendors (PoCL here), and says so.
set -u
T0=$(date +%s)

# ---- arguments ----------------------------------------------------------------------
B=.gpu
if [ $# -ge 1 ] && [ -d "$1" ]; then B=$1; shift; fi
ONLY=${GPU_CHECK_ONLY:-${*:-}}
ONLY=$(echo "$ONLY" | tr ',' ' ')
B=$(cd "$B" 2>/dev/null && pwd) || { echo "gpu-check: no bundle directory (run scripts/gpu-bundle.sh BUILD .gpu)"; exit 2; }
[ -x "$B/bin/cltrain" ] || { echo "gpu-check: $B holds no bin/cltrain: not a bundle"; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
SMALL=${GPU_CHECK_SMALL:-0}
BUDGET=${GPU_CHECK_BUDGET:-390}
DEADLINE=$((T0 + BUDGET))
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
LOG=$WORK/logs
mkdir -p "$LOG" "$WORK/tmp" "$WORK/icd" "$WORK/hwloc-plugins"
SUMMARY=$OUT/summary.txt
: >"$WORK/steps"
: >"$WORK/facts"
: >"$WORK/results"

exec 3>&1 4>&2
exec > >(tee -a "$OUT/console.log") 2>&1
TEE_PID=$!

want() { [ -z "$ONLY" ] && return 0; case " $ONLY " in *" $1 "*) return 0 ;; esac; return 1; }
fact() { echo "  $1: $2"; echo "$1: $2" >>"$WORK/facts"; }
result() { echo "  >> $*"; echo "$*" >>"$WORK/results"; write_summary; }
now() { date +%s; }

write_summary() {
  {
    echo "cltrain gpu-check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(now) - T0)) s so far; bundle $BUNDLE_REV"
    echo "mode: ${MODE:-?}; devices spec: ${DEV:-?}"
    echo
    echo "-- facts"
    cat "$WORK/facts"
    echo
    echo "-- steps (status, seconds, name)"
    cat "$WORK/steps"
    echo
    echo "-- results"
    cat "$WORK/results"
  } >"$SUMMARY.tmp" && mv "$SUMMARY.tmp" "$SUMMARY"
}

# step GROUP NAME LIMIT CMD...: CMD under timeout (LIMIT seconds, less when the
# budget is short), its output to $LOG/NN-NAME.log (STEP_LOG), the last lines
# shown; returns CMD's status, 125 when the budget is spent. Callers check
# `want GROUP` first.
NSTEP=0
TAILN=${GPU_CHECK_TAIL:-12}
step() {
  local group=$1 name=$2 lim=$3 left rc t0 dt st log
  shift 3
  left=$((DEADLINE - $(now)))
  NSTEP=$((NSTEP + 1))
  log=$LOG/$(printf %02d "$NSTEP")-$name.log
  STEP_LOG=$log
  if [ $left -lt 10 ]; then
    printf '%-8s %5s  %s\n' SKIPPED - "$group/$name (time budget spent)" >>"$WORK/steps"
    echo "=== [$NSTEP] $name: skipped, time budget spent"
    write_summary
    return 125
  fi
  [ "$lim" -gt $((left - 5)) ] && lim=$((left - 5))
  echo "=== [$NSTEP] $name (limit ${lim}s)"
  echo "$*" | cut -c1-400 | sed 's/^/  $ /'
  echo "\$ $*" >"$log"
  t0=$(date +%s.%N)
  timeout -k 5 "$lim" "$@" >>"$log" 2>&1 </dev/null
  rc=$?
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
  case $rc in
    0) st=ok ;;
    124 | 137) st=TIMEOUT ;;
    77) st=SKIP77 ;;
    *) st="FAIL($rc)" ;;
  esac
  tail -n +2 "$log" | tail -n "$TAILN" | cut -c1-300 | sed 's/^/    /'
  echo "  -> $st in ${dt}s"
  printf '%-8s %5s  %s\n' "$st" "$dt" "$group/$name" >>"$WORK/steps"
  write_summary
  return $rc
}

# host CMD...: a program of this machine, without the bundle's libraries
host() { env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$@"; }

LDCONFIG=$(command -v ldconfig || ls /sbin/ldconfig /usr/sbin/ldconfig 2>/dev/null | head -1)
ldconfig_p() { [ -n "$LDCONFIG" ] && "$LDCONFIG" -p 2>/dev/null; }
vercmp_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; } # A >= B

. "$B/bundle.env"
# in case the copy lost the executable bits
chmod u+x "$B"/bin/* "$B"/tests/* "$B"/mpi/bin/* "$B"/lib/glibc/ld-linux-x86-64.so.2 2>/dev/null
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}

echo "=== cltrain gpu-check: bundle $B (rev $BUNDLE_REV, built $BUNDLE_DATE on $BUNDLE_BUILD_OS), out $OUT"
echo "    groups: ${ONLY:-all}; budget ${BUDGET}s; small=$SMALL"

# ---- the machine ----------------------------------------------------------------------
echo "=== environment"
fact uname "$(uname -srm)"
fact os "$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
HOST_GLIBC=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
[ -n "$HOST_GLIBC" ] || HOST_GLIBC=$(ldd --version 2>/dev/null | head -1 | awk '{print $NF}')
fact glibc "${HOST_GLIBC:-unknown} (bundle needs >= $BUNDLE_GLIBC_NEED)"
fact cpus "$(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo) memory"
NVSMI=$(command -v nvidia-smi || { [ -x /usr/local/nvidia/bin/nvidia-smi ] && echo /usr/local/nvidia/bin/nvidia-smi; } || true)
if [ -n "$NVSMI" ]; then
  fact nvidia-smi "$(timeout 20 "$NVSMI" -L 2>&1 | head -4 | tr '\n' ' ')"
  fact gpu "$(timeout 20 "$NVSMI" --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | head -2 | tr '\n' ' ')"
else
  fact nvidia-smi "not found"
fi
fact /dev/nvidia "$(ls /dev/nvidia* 2>/dev/null | tr '\n' ' ')"

# libstdc++: the host's newest GLIBCXX against the bundle's need
HOST_CXX=$(ldconfig_p | awk '/libstdc\+\+\.so\.6 .*x86-64/{print $NF; exit}')
[ -n "$HOST_CXX" ] || for f in /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /usr/lib64/libstdc++.so.6 /lib/x86_64-linux-gnu/libstdc++.so.6; do
  [ -e "$f" ] && { HOST_CXX=$f; break; }
done
HOST_GLIBCXX=
[ -n "$HOST_CXX" ] && HOST_GLIBCXX=$(grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$HOST_CXX" 2>/dev/null | sed 's/GLIBCXX_//' | sort -uV | tail -1)
USE_CXX=0
if [ -z "$HOST_GLIBCXX" ] || ! vercmp_ge "$HOST_GLIBCXX" "$BUNDLE_GLIBCXX_NEED"; then USE_CXX=1; fi
fact libstdc++ "${HOST_CXX:-none} GLIBCXX ${HOST_GLIBCXX:-?} (bundle needs >= $BUNDLE_GLIBCXX_NEED): $([ $USE_CXX = 1 ] && echo "using the bundle's" || echo "using the host's")"

# glibc older than the bundle's: run every bundled program through its own loader
USE_GLIBC=0
if [ -n "$HOST_GLIBC" ] && ! vercmp_ge "$HOST_GLIBC" "$BUNDLE_GLIBC_NEED"; then USE_GLIBC=1; USE_CXX=1; fi
[ -n "${GPU_CHECK_BUNDLE_GLIBC:-}" ] && USE_GLIBC=1 USE_CXX=1 # to try that path on any machine

# ---- OpenCL: find the NVIDIA driver ------------------------------------------------------
find_nv() {
  local d f
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 \
    /usr/lib /usr/local/cuda/compat /usr/local/cuda/lib64 /usr/local/lib; do
    for f in "$d"/libnvidia-opencl.so.1 "$d"/libnvidia-opencl.so.[0-9]*; do [ -f "$f" ] && echo "$f"; done
  done
  ldconfig_p | awk '/libnvidia-opencl\.so/{print $NF}'
  for f in /etc/OpenCL/vendors/*.icd /usr/local/nvidia/etc/OpenCL/vendors/*.icd /usr/share/OpenCL/vendors/*.icd; do
    [ -f "$f" ] && grep -q nvidia "$f" && {
      local l
      l=$(head -1 "$f")
      case $l in /*) echo "$l" ;; *) ldconfig_p | awk -v n="$l" '$1 == n {print $NF}' ;; esac
    }
  done
}
NV_ALL=$(find_nv | awk '!seen[$0]++')
if [ -z "$NV_ALL" ]; then
  echo "  libnvidia-opencl not in the usual places; searching / (at most 40 s)"
  NV_ALL=$(timeout 40 find / \( -path /proc -o -path /sys -o -path /dev -o -path "$WORK" \) -prune -o \
    -name 'libnvidia-opencl.so*' -print 2>/dev/null | sort)
fi
NV=
for f in $NV_ALL; do [ -f "$f" ] && { NV=$f; break; }; done
fact libnvidia-opencl "$(echo ${NV_ALL:-none})"
fact libcuda "$( (ldconfig_p | awk '/libcuda\.so\.1/{print $NF}'; ls /usr/local/nvidia/lib64/libcuda.so.1 2>/dev/null) | sort -u | tr '\n' ' ')"
fact /etc/OpenCL/vendors "$(cd /etc/OpenCL/vendors 2>/dev/null && for f in *.icd; do printf '%s(%s) ' "$f" "$(head -1 "$f")"; done)"
fact libOpenCL "host: $( (ldconfig_p | awk '/libOpenCL\.so/{print $NF}'; ls /usr/local/nvidia/lib64/libOpenCL* /usr/local/cuda/lib64/libOpenCL* 2>/dev/null) | sort -u | tr '\n' ' ')(the bundle's ocl-icd is used)"
fact mpi "host: mpirun=$(command -v mpirun || echo none) libmpi.so.40=$(ldconfig_p | awk '/libmpi\.so\.40/{print $NF; exit}')$( [ "$BUNDLE_HAVE_MPI" = 1 ] && echo " (the bundle's Open MPI is used)")"

[ -n "${GPU_CHECK_OPENCL_LIB:-}" ] && NV=$GPU_CHECK_OPENCL_LIB && fact GPU_CHECK_OPENCL_LIB "$NV (instead of the NVIDIA driver)"
[ -n "${GPU_CHECK_NO_NVIDIA:-}" ] && NV=
if [ -n "$NV" ]; then
  MODE=nvidia
  [ -n "${GPU_CHECK_OPENCL_LIB:-}" ] && MODE=private-icd
  echo "$NV" >"$WORK/icd/nvidia.icd"
  export OCL_ICD_VENDORS=$WORK/icd
  NVDIR=$(dirname "$NV")
  DEV=${GPU_CHECK_DEVICE:-gpu}
else
  MODE=fallback
  NVDIR=
  DEV=${GPU_CHECK_DEVICE:-0}
  echo "  !! no NVIDIA OpenCL driver found: falling back to the machine's own ICDs (/etc/OpenCL/vendors); device spec $DEV"
fi
fact opencl "mode $MODE, OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-/etc/OpenCL/vendors (default)}"

# ---- the bundle's environment -----------------------------------------------------------
LP=$B/lib
[ $USE_CXX = 1 ] && LP=$LP:$B/lib/cxx
[ -n "$NVDIR" ] && LP=$LP:$NVDIR
[ -n "$ORIG_LD_LIBRARY_PATH" ] && LP=$LP:$ORIG_LD_LIBRARY_PATH
RUN=()
if [ $USE_GLIBC = 1 ]; then
  RUN=("$B/lib/glibc/ld-linux-x86-64.so.2" --library-path "$B/lib/glibc:$LP")
  fact loader "host glibc $HOST_GLIBC < $BUNDLE_GLIBC_NEED: every bundled program runs through $B/lib/glibc's loader"
fi
export LD_LIBRARY_PATH=$LP
# Open MPI and PMIx, relocated: nothing from /usr or /etc
M=$B/mpi
export OPAL_PREFIX=$M OPAL_EXEC_PREFIX=$M OPAL_BINDIR=$M/bin OPAL_SBINDIR=$M/bin OPAL_LIBEXECDIR=$M/bin \
  OPAL_LIBDIR=$B/lib OPAL_PKGLIBDIR=$M/lib/openmpi3 OPAL_DATAROOTDIR=$M/share OPAL_DATADIR=$M/share \
  OPAL_PKGDATADIR=$M/share/openmpi OPAL_SYSCONFDIR=$M/etc OPAL_INCLUDEDIR=$M/include OPAL_PKGINCLUDEDIR=$M/include
P=$B/pmix
export PMIX_PREFIX=$P PMIX_EXEC_PREFIX=$P PMIX_BINDIR=$P/bin PMIX_LIBDIR=$B/lib PMIX_PKGLIBDIR=$P/lib/pmix \
  PMIX_DATAROOTDIR=$P/share PMIX_DATADIR=$P/share PMIX_PKGDATADIR=$P/share/pmix PMIX_SYSCONFDIR=$P/etc \
  PMIX_INCLUDEDIR=$P/include PMIX_PKGINCLUDEDIR=$P/include
export OMPI_MCA_mca_base_component_path=$M/lib/openmpi3 PMIX_MCA_mca_base_component_path=$P/lib/pmix
export OMPI_MCA_mca_base_param_files=$M/etc/openmpi-mca-params.conf
export OMPI_MCA_orte_default_hostfile=$M/etc/openmpi-default-hostfile
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1
export OMPI_MCA_plm=isolated OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HWLOC_PLUGINS_PATH=$WORK/hwloc-plugins
# cltrain and the tests
export CK_DEFAULT_TIMEOUT=600 CK_VERBOSITY=normal CLT_TIMEOUT=60 CLT_FASHION_MNIST_DIR=$B/data TMPDIR=$WORK/tmp
export POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-$( [ "$MODE" = fallback ] && echo 1 || nproc)}
unset CLT_DEVICES RUSTICL_ENABLE

CLT=("${RUN[@]}" "$B/bin/cltrain")
# GPU_CHECK_MPI_WRAP: a command to put before mpirun (say, strace -f -o FILE)
# shellcheck disable=SC2206 # split on purpose
MPIRUN=(${GPU_CHECK_MPI_WRAP:-} "${RUN[@]}" "$M/bin/mpirun" --allow-run-as-root --oversubscribe --bind-to none)
DATA=(--data "$B/data")
EX=$B/examples
HAVE_MPI=$BUNDLE_HAVE_MPI

# python for the analysis (any) and for the PyTorch peer (the one with torch)
PY=$(command -v python3 || command -v python || true)
for p in "$PY" /opt/torch/.venv/bin/python3 /usr/bin/python3; do
  [ -n "$p" ] && [ -x "$p" ] && { PY=$p; break; }
done
AN=$WORK/analyze.py
cat >"$AN" <<'EOF'
import json, statistics, sys

def load(path):
    out = []
    try:
        for line in open(path):
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out

def train(path):
    r = load(path)
    steps = [x for x in r if x.get("event") == "step"]
    epochs = [x for x in r if x.get("event") == "epoch"]
    rates = [x["samples_per_s"] for x in steps[1:] if isinstance(x.get("samples_per_s"), (int, float))]
    if not steps:
        return "no step records"
    s = "%d steps" % steps[-1]["step"]
    if rates:
        s += ", samples/s mean %.0f median %.0f (of %d windows after the first)" % (
            statistics.mean(rates), statistics.median(rates), len(rates))
    comm = [x for x in steps[1:] if x.get("comm_s")]
    if comm:
        c = sum(x["comm_s"] for x in comm)
        h = sum(x["comm_s"] * (x.get("comm_hidden") or 0) for x in comm)
        s += ", all-reduce %.3f s, %.1f%% hidden behind backward" % (c, 100 * h / c if c else 0)
        tp = comm[-1].get("throughput")
        if tp:
            s += ", replica throughput " + "/".join("%.0f" % t for t in tp)
    for e in epochs:
        s += "; epoch %d loss %.4f test acc %s (%.1f s)" % (
            e["epoch"], e["loss"] if isinstance(e.get("loss"), (int, float)) else float("nan"),
            "%.4f" % e["test_accuracy"] if isinstance(e.get("test_accuracy"), (int, float)) else "n/a",
            e.get("elapsed_s") or 0)
    return s

def median_rate(path):
    r = [x["samples_per_s"] for x in load(path) if x.get("event") == "step" and
         isinstance(x.get("samples_per_s"), (int, float))][1:]
    return statistics.median(r) if r else 0

def allreduce(path):
    try:
        d = json.load(open(path))
    except Exception as e:
        return "no JSON (%s)" % e
    rows = d.get("results") or d.get("sizes") or d.get("rows") or []
    if not rows:
        return json.dumps(d)[:600]
    out = []
    for row in (rows[len(rows) // 2], rows[-1]) if len(rows) > 1 else rows[-1:]:
        parts = []
        for k, v in row.items():
            if isinstance(v, dict):
                parts.append("%s %.0f us %.2f GB/s busbw%s" % (k, v.get("p50_us", 0), v.get("busbw_GBps", 0),
                                                              "" if v.get("correct", True) else " WRONG"))
            elif k not in ("bytes", "count"):
                parts.append("%s %.2f" % (k, v) if isinstance(v, float) else "%s %s" % (k, v))
        out.append("%s bytes: %s" % (row.get("bytes"), ", ".join(parts)))
    return "ranks %s, device %s; " % (d.get("ranks"), d.get("device")) + " | ".join(out)

def main(cmd, args):
    if cmd == "train":
        return train(args[0])
    if cmd == "rate":  # empty when there is none
        r = median_rate(args[0])
        return "%.1f" % r if r else ""
    if cmd == "ratio":
        a, b = float(args[0] or 0), float(args[1] or 0)
        return "%.3f" % (a / b) if a and b else "n/a"
    if cmd == "allreduce":
        return allreduce(args[0])
    if cmd == "gptpeer":  # tokens/s of bench/pytorch_gpt.py's line
        for line in open(args[0]):
            if line.startswith("{"):
                return "%.0f" % json.loads(line)["tokens_per_s"]
        return ""
    if cmd == "mfu":  # tokens/s, parameters, layers, context, width, peak FLOP/s: PaLM's 6N + 12 L T C per token
        tok, n, l, t, c, peak = (float(a) for a in args)
        f = tok * (6 * n + 12 * l * t * c)
        return "%.1f TFLOP/s, MFU %.1f%% of %.0f TFLOP/s" % (f / 1e12, 100 * f / peak, peak / 1e12)
    if cmd in ("peer", "peerrate"):
        for line in open(args[0]):
            if line.startswith("{"):
                d = json.loads(line)
                if cmd == "peerrate":
                    return "%.1f" % d["samples_per_s"] if d.get("model") == args[1] else ""
                return "%s on %s: %.0f samples/s, test acc %.4f, batch %s, %s steps, torch %s" % (
                    d.get("model"), d.get("gpu") or d.get("device"), d["samples_per_s"], d["test_accuracy"],
                    d.get("batch"), d.get("steps"), d.get("torch"))
        return "" if cmd == "peerrate" else "no result line"
    return "unknown analysis " + cmd

try:
    out = main(sys.argv[1], sys.argv[2:])
except Exception as e:  # one line, whatever went wrong
    out = "" if sys.argv[1] in ("rate", "peerrate") else "n/a (%s: %s)" % (type(e).__name__, e)
if out:
    print(out)
EOF
an() { [ -n "$PY" ] && host timeout 60 "$PY" "$AN" "$@" 2>&1 | head -5; }

fact bundle "rev $BUNDLE_REV built $BUNDLE_DATE on $BUNDLE_BUILD_OS (glibc $BUNDLE_BUILD_GLIBC)"
fact python "${PY:-none}"
write_summary

# ---- env: the relocated Open MPI and the library resolution -----------------------------------
if want env; then
  if [ -n "$NV" ] && [ -n "$PY" ]; then
    # the driver alone, without the ICD loader: how many platforms, or its error
    cat >"$WORK/probe.py" <<'EOF2'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
n = ctypes.c_uint(0)
f, how = None, ""
try:
    f, how = lib.clIcdGetPlatformIDsKHR, "clIcdGetPlatformIDsKHR"
except AttributeError:
    try:
        gefa = lib.clGetExtensionFunctionAddress
        gefa.restype = ctypes.c_void_p
        gefa.argtypes = [ctypes.c_char_p]
        a = gefa(b"clIcdGetPlatformIDsKHR")
        if a:
            f = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint))(a)
            how = "clIcdGetPlatformIDsKHR via clGetExtensionFunctionAddress"
    except AttributeError:
        pass
    if f is None:
        f, how = lib.clGetPlatformIDs, "clGetPlatformIDs"
rc = f(0, None, ctypes.byref(n))
print("%s: %s -> %d, %d platform(s)" % (sys.argv[1], how, rc, n.value))
sys.exit(0 if rc == 0 and n.value > 0 else 1)
EOF2
    step env probe-driver 30 env LD_LIBRARY_PATH="$NVDIR${ORIG_LD_LIBRARY_PATH:+:$ORIG_LD_LIBRARY_PATH}" "$PY" "$WORK/probe.py" "$NV"
    result "driver probe: $(tail -n 1 "$STEP_LOG")"
  fi
  step env ldd 30 bash -c 'for f in "$@"; do echo "== $f"; ldd "$f"; done' _ "$B/bin/cltrain" "$B/tests/test_ops" \
    "$B/lib/libclblast.so.1" $NV
  grep -q "not found" "$STEP_LOG" && result "ldd: MISSING libraries: $(grep 'not found' "$STEP_LOG" | sort -u | tr -s ' \t' ' ' | tr '\n' ';')"
  if [ "$HAVE_MPI" = 1 ]; then
    step env ompi_info 30 "${RUN[@]}" "$M/bin/ompi_info" --path all
    step env mpirun-hostname 30 "${MPIRUN[@]}" -np 2 hostname
  fi
fi

# ---- devices ---------------------------------------------------------------------------------
if want devices; then
  TAILN=30 step devices devices 60 "${CLT[@]}" devices
  step devices devices-json 60 bash -c '"$@" devices --json >"$OUT/devices.json"' _ "${CLT[@]}"
fi
# the device spec must select something; else the first device there is
if ! timeout 60 "${CLT[@]}" devices --devices "$DEV" >/dev/null 2>&1; then
  result "devices: spec '$DEV' selects nothing: $(timeout 60 "${CLT[@]}" devices --devices "$DEV" 2>&1 | tail -1 | cut -c1-300)"
  if [ "$DEV" != 0 ] && timeout 60 "${CLT[@]}" devices --devices 0 >/dev/null 2>&1; then
    DEV=0
    result "!! using device 0 instead"
  fi
fi
result "device ($DEV): $(timeout 60 "${CLT[@]}" devices --devices "$DEV" 2>/dev/null | sed -n 2p | tr -s ' ')"

# ---- GEMM --------------------------------------------------------------------------------------
if [ "$SMALL" = 1 ]; then G1=(256 5) G2=(128 5); else G1=(4096 20) G2=(1024 50); fi
if want bench; then
  for sz in "${G1[0]}:${G1[1]}" "${G2[0]}:${G2[1]}"; do
    step bench "gemm-${sz%%:*}" 90 "${CLT[@]}" bench gemm --devices "$DEV" --size "${sz%%:*}" --iters "${sz##*:}"
    rc=$?
    [ $rc -ne 125 ] && result "gemm ${sz%%:*} (device check max-error GFLOP/s): $(grep -v -e '^device' -e '^\$' "$STEP_LOG" | tr -s ' ' | tail -1)$( [ $rc -ne 0 ] && echo " EXIT $rc")"
  done
fi

# ---- the Check tests ------------------------------------------------------------------------------
TL=${GPU_CHECK_TEST_LIMIT:-90}
# the ones that exercise kernels first, then any other the bundle holds, except
# those run under mpirun below and test_spec (it reads the source tree by the
# build's absolute path)
TESTS_FIRST="test_ops test_blas test_dense test_conv_pool test_optim test_fit test_mixed test_device test_status_log"
TESTS_NOT=" test_dp test_collectives test_collectives_fail test_checkpoint_dp test_spec app_split fuzz_inputs "
TESTS_ALL=$TESTS_FIRST
for f in "$B"/tests/test_*; do
  t=$(basename "$f")
  case " $TESTS_ALL $TESTS_NOT " in *" $t "*) ;; *) TESTS_ALL="$TESTS_ALL $t" ;; esac
done
for t in $TESTS_ALL; do
  [ -x "$B/tests/$t" ] && want tests || continue
  step tests "$t" "$TL" "${RUN[@]}" "$B/tests/$t"
  rc=$?
  [ $rc -ne 125 ] && result "$t: $(grep -E '^[0-9]+%: Checks' "$STEP_LOG" | tail -1)$(grep -m1 -E '^device 0' "$STEP_LOG" | sed 's/^/ on /')$( [ $rc -ne 0 ] && echo " EXIT $rc")"
done

# ---- training, one device -------------------------------------------------------------------------
if [ "$SMALL" = 1 ]; then
  LE=5 MLP=(--epochs 1 --max-steps 60) CNN=(--epochs 1 --max-steps 20 --batch 128) DPA=(--epochs 1 --max-steps 20 --batch 128)
  PEER_MLP=(--epochs 1 --max-steps 60) PEER_CNN=(--epochs 1 --max-steps 20 --batch 128)
else
  LE=20 MLP=(--epochs 3) CNN=(--epochs 2 --batch 128) DPA=(--epochs 1 --batch 128)
  PEER_MLP=(--epochs 3) PEER_CNN=(--epochs 2 --batch 128)
fi
rm -f "$OUT/mlp.jsonl" "$OUT/cnn.jsonl" "$OUT/dp.jsonl"
if want train; then
  step train train-mlp 120 "${CLT[@]}" train "$EX/fashion_mlp.model" "${DATA[@]}" --devices "$DEV" "${MLP[@]}" \
    --log-every "$LE" --quiet --metrics "$OUT/mlp.jsonl"
  [ $? -ne 125 ] && result "cltrain mlp (${MLP[*]}): $(an train "$OUT/mlp.jsonl")"
  step train train-cnn 180 "${CLT[@]}" train "$EX/fashion_cnn.model" "${DATA[@]}" --devices "$DEV" "${CNN[@]}" \
    --log-every "$LE" --quiet --metrics "$OUT/cnn.jsonl"
  [ $? -ne 125 ] && result "cltrain cnn (${CNN[*]}): $(an train "$OUT/cnn.jsonl")"
  step train train-cnn-fp16 150 "${CLT[@]}" train "$EX/fashion_cnn.model" "${DATA[@]}" --devices "$DEV" "${CNN[@]}" \
    --precision fp16 --log-every "$LE" --quiet --metrics "$LOG/cnn-fp16.jsonl"
  [ $? -ne 125 ] && result "cltrain cnn fp16 (${CNN[*]}): $(an train "$LOG/cnn-fp16.jsonl")"
  c1=$(an rate "$OUT/cnn.jsonl") c2=$(an rate "$LOG/cnn-fp16.jsonl")
  [ -n "$c1" ] && [ -n "$c2" ] && result "cnn fp16 / fp32 on one device: $(an ratio "$c2" "$c1") ($c2 vs $c1 samples/s)"
fi

# ---- the PyTorch peer -----------------------------------------------------------------------------------
PEER=$SRC/bench/pytorch_fashion.py # --device auto: the GPU when torch sees one
if want peer; then
  if [ -z "$PY" ] || ! timeout 90 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
    printf '%-8s %5s  %s\n' SKIPPED - "peer (no python3 with torch and numpy: ${PY:-no python})" >>"$WORK/steps"
    result "peer: skipped, no python3 with torch"
  else
    step peer peer-cnn 150 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 "$PY" "$PEER" \
      --data "$B/data" --device auto --model cnn "${PEER_CNN[@]}"
    [ $? -ne 125 ] && cp "$STEP_LOG" "$WORK/peer-cnn.out" && result "pytorch $(an peer "$WORK/peer-cnn.out")"
    step peer peer-mlp 90 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 "$PY" "$PEER" \
      --data "$B/data" --device auto --model mlp "${PEER_MLP[@]}"
    [ $? -ne 125 ] && cp "$STEP_LOG" "$WORK/peer-mlp.out" && result "pytorch $(an peer "$WORK/peer-mlp.out")"
    step peer peer-cnn-amp 120 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 "$PY" "$PEER" \
      --data "$B/data" --device auto --amp --model cnn "${PEER_CNN[@]}"
    [ $? -ne 125 ] && cp "$STEP_LOG" "$WORK/peer-cnn-amp.out" && result "pytorch amp $(an peer "$WORK/peer-cnn-amp.out")"
    for m in cnn mlp; do
      c=$(an rate "$OUT/$m.jsonl") p=$(an peerrate "$WORK/peer-$m.out" "$m")
      [ -n "$c" ] && [ -n "$p" ] && result "$m throughput cltrain/PyTorch: $(an ratio "$c" "$p") ($c vs $p samples/s, cltrain median window)"
    done
  fi
fi

# ---- GPT-2 124M (T = 1024) against PyTorch on the same GPU ----------------------------------------
# The issue's target: at least 0.8x PyTorch's tokens/s, fp32 and fp16 (against AMP), with the model
# FLOPs utilisation (against the H200's 67 TFLOP/s of fp32 without tensor cores: cltrain's GEMMs are
# fp32 in both precisions). Tokens: the fortunes bytes, valid ids of GPT-2's vocabulary.
GPT_TOK=$B/data/fortunes_train.bin
if want gpt && [ -f "$GPT_TOK" ]; then
  GB=${GPU_CHECK_GPT_BATCH:-8}
  if [ "$SMALL" = 1 ]; then GS=3; else GS=24; fi
  for prec in fp32 fp16; do
    step gpt gpt2-$prec 200 "${CLT[@]}" train "$EX/gpt2_124m.model" --data "$GPT_TOK" --val none --devices "$DEV" \
      -o adamw --lr 3e-4 -b "$GB" --max-steps "$GS" --log-every 4 --precision "$prec" --quiet --metrics "$LOG/gpt2-$prec.jsonl"
    r=$(an rate "$LOG/gpt2-$prec.jsonl")
    [ -n "$r" ] && result "cltrain gpt2-124m $prec batch $GB: $(an train "$LOG/gpt2-$prec.jsonl"); $(an mfu "$(an ratio "$r" 0.0009765625)" 124439808 12 1024 768 67e12)"
  done
  if [ -n "$PY" ]; then
    for amp in "" --amp; do
      step gpt gpt2-peer$amp 200 env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" PYTHONUNBUFFERED=1 "$PY" "$SRC/bench/pytorch_gpt.py" \
        --data "$GPT_TOK" --device cuda --layers 12 --width 768 --heads 12 --context 1024 --vocab 50257 --batch "$GB" \
        --lr 3e-4 --steps "$GS" $amp
      [ $? -ne 125 ] && cp "$STEP_LOG" "$WORK/gpt2-peer$amp.out"
    done
    for pair in "fp32:" "fp16:--amp"; do
      prec=${pair%%:*} amp=${pair#*:}
      c=$(an rate "$LOG/gpt2-$prec.jsonl") p=$(an gptpeer "$WORK/gpt2-peer$amp.out")
      [ -n "$c" ] && [ -n "$p" ] && result "gpt2-124m $prec tokens/s cltrain/PyTorch${amp:+ AMP}: $(an ratio "$(an ratio "$c" 0.0009765625)" "$p") ($(an ratio "$c" 0.0009765625) vs $p)"
    done
  fi
fi

# ---- data-parallel: 2 ranks on the same device ------------------------------------------------
if [ "$HAVE_MPI" = 1 ] && want dp; then
  step dp dp-cnn-2ranks 150 "${MPIRUN[@]}" -np 2 "${CLT[@]}" train "$EX/fashion_cnn.model" "${DATA[@]}" --devices "$DEV" \
    "${DPA[@]}" ${GPU_CHECK_DP_ARGS:-} --log-every "$LE" --quiet --metrics "$OUT/dp.jsonl"
  [ $? -ne 125 ] && result "cltrain cnn 2 ranks on one device (${DPA[*]}): $(an train "$OUT/dp.jsonl")"
  c1=$(an rate "$OUT/cnn.jsonl") c2=$(an rate "$OUT/dp.jsonl")
  [ -n "$c1" ] && [ -n "$c2" ] && result "cnn 2 ranks / 1 rank on the same device: $(an ratio "$c2" "$c1") ($c2 vs $c1 samples/s)"
  step dp dp-cnn-2ranks-fp16 120 "${MPIRUN[@]}" -np 2 "${CLT[@]}" train "$EX/fashion_cnn.model" "${DATA[@]}" --devices "$DEV" \
    "${DPA[@]}" ${GPU_CHECK_DP_ARGS:-} --precision fp16 --log-every "$LE" --quiet --metrics "$LOG/dp-fp16.jsonl"
  [ $? -ne 125 ] && result "cltrain cnn 2 ranks fp16 (${DPA[*]}): $(an train "$LOG/dp-fp16.jsonl")"
fi
if [ "$HAVE_MPI" = 1 ] && want allreduce; then
  if [ "$SMALL" = 1 ]; then AR=(--max-bytes 1M --iters 3); else AR=(--max-bytes 64M --iters 10); fi
  step allreduce allreduce-2ranks 90 bash -c '"$@" >"$OUT/allreduce.json"' _ "${MPIRUN[@]}" -np 2 "${CLT[@]}" bench allreduce \
    --devices "$DEV" "${AR[@]}" --json
  [ $? -ne 125 ] && result "allreduce: $(an allreduce "$OUT/allreduce.json")"
fi

# ---- where a CNN step's time goes -------------------------------------------------------------
want profile && TAILN=40 step profile profile-cnn 90 env CLT_PROFILE=1 "${CLT[@]}" train "$EX/fashion_cnn.model" "${DATA[@]}" --devices "$DEV" \
  --epochs 1 --max-steps "$([ "$SMALL" = 1 ] && echo 10 || echo 60)" --batch 128 --quiet
want profile && TAILN=40 step profile profile-cnn-fp16 90 env CLT_PROFILE=1 "${CLT[@]}" train "$EX/fashion_cnn.model" "${DATA[@]}" \
  --devices "$DEV" --epochs 1 --max-steps "$([ "$SMALL" = 1 ] && echo 10 || echo 60)" --batch 128 --quiet --precision fp16

# ---- the MPI tests ----------------------------------------------------------------------------
if [ "$HAVE_MPI" = 1 ] && want mpitests; then
  for t in test_dp test_collectives test_checkpoint_dp; do
    [ -x "$B/tests/$t" ] || continue
    step mpitests "$t-2ranks" 150 "${MPIRUN[@]}" -np 2 "${RUN[@]}" "$B/tests/$t"
    rc=$?
    [ $rc -ne 125 ] && result "$t 2 ranks: $(grep -E '^[0-9]+%: Checks' "$STEP_LOG" | tail -1)$( [ $rc -ne 0 ] && echo " EXIT $rc")"
  done
fi

# ---- every layer call of a training step ----------------------------------------------------------
[ -x "$B/bin/nn_bench" ] && want nnbench && TAILN=60 step nnbench nn_bench 90 "${RUN[@]}" "$B/bin/nn_bench" --devices "$DEV" \
  --iters "$([ "$SMALL" = 1 ] && echo 2 || echo 20)" --batch 128

# ---- summary ---------------------------------------------------------------------------------------
write_summary
echo
echo "=================================== summary ($(($(now) - T0)) s) ==================================="
sed -n '/^-- steps/,$p' "$SUMMARY"
cp "$B/MANIFEST" "$LOG/MANIFEST" 2>/dev/null
cp "$WORK"/peer-*.out "$LOG/" 2>/dev/null
exec 1>&3 2>&4
for _ in $(seq 50); do kill -0 "$TEE_PID" 2>/dev/null || break; sleep 0.1; done # a leftover process may hold tee open
cp "$OUT/console.log" "$LOG/" 2>/dev/null
tar -C "$WORK" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
rm -rf "$WORK"
grep -q -E '^(FAIL|TIMEOUT)' "$SUMMARY" && exit 1
exit 0
