#!/bin/bash
# gpu-bundle.sh BUILD_DIR DEST: a self-contained copy of a built cltrain for a
# machine that has a GPU but neither this system's libraries nor a network
# (bench/gpu-check.sh runs it there). DEST is wiped and made afresh:
#
#   DEST/bin/        cltrain and the benchmark programs (real ELF files, stripped)
#   DEST/tests/      the Check test programs (real ELF files, not libtool wrappers)
#   DEST/lib/        libcltrain and every library they need that is not glibc
#                    (ocl-icd's libOpenCL, CLBlast, jansson, subunit, zlib, Open MPI,
#                    PMIx, hwloc, libevent, munge, udev), by soname
#   DEST/lib/cxx/    libstdc++ and libgcc_s, to use only where the host's are older
#   DEST/lib/glibc/  this system's glibc and loader, to use only where the host's
#                    glibc is older than the bundle needs (through the loader)
#   DEST/mpi/        Open MPI relocated: bin/ (mpirun, orted), lib/openmpi3/ (the
#                    components that need nothing outside the bundle), share/openmpi/
#                    (help texts), etc/ (an MCA parameter file); PMIx's plugins and
#                    help texts in DEST/pmix/. bench/gpu-check.sh sets OPAL_* and
#                    PMIX_* so neither looks at /usr or /etc.
#   DEST/data/       the Fashion-MNIST IDX files; DEST/examples/ the model specs
#   DEST/MANIFEST    what was bundled, from which commit, and the glibc and
#                    libstdc++ versions the bundle needs; DEST/bundle.env the same
#                    needs as shell variables
#
# BUILD_DIR is a configured tree (configure run there); this script first
# makes in it the tool and the test programs, the MPI ones included
# (make all check TESTS=), unless --no-make is given.
# Run from anywhere; the source tree is the one this script lives in.
#
#   scripts/gpu-bundle.sh [--no-make] BUILD_DIR DEST
set -euo pipefail

domake=1
if [ "${1:-}" = --no-make ]; then domake=0; shift; fi
if [ $# -ne 2 ]; then
  echo "usage: $0 [--no-make] BUILD_DIR DEST" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
dest=$2
marker=.cltrain-gpu-bundle

# ---- wipe DEST, carefully ------------------------------------------------------
case "$dest" in "" | / | . | ..) echo "$0: refusing DEST '$dest'" >&2; exit 2 ;; esac
if [ -e "$dest" ]; then
  d=$(cd "$dest" && pwd)
  if [ "$d" = / ] || [ "$d" = "$src" ] || [ "$d" = "$build" ] || [ "$d" = "$HOME" ]; then
    echo "$0: refusing DEST '$dest' ($d)" >&2; exit 2
  fi
  if [ ! -e "$d/$marker" ] && [ -n "$(ls -A "$d")" ]; then
    echo "$0: $d is not empty and holds no $marker: not a bundle, not wiping it" >&2; exit 2
  fi
  rm -rf "$d"
fi
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
: >"$dest/$marker"
mkdir -p "$dest"/{bin,tests,lib/cxx,lib/glibc,mpi/bin,mpi/lib/openmpi3,mpi/share,mpi/etc,pmix/lib/pmix,pmix/share,pmix/etc,data,examples}

multiarch=/usr/lib/x86_64-linux-gnu

if [ $domake = 1 ]; then
  jobs=$(nproc 2>/dev/null || echo 2)
  echo "make in $build: all, the test programs (the MPI ones included)"
  make -C "$build" -s -j"$jobs" all >/dev/null
  make -C "$build" -s -j"$jobs" check TESTS= >/dev/null
fi
ompi_libdir=$multiarch/openmpi/lib
ompi_pkglibdir=$ompi_libdir/openmpi3
pmix_prefix=$multiarch/pmix2

is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = "177ELF" ]; }

# real PROGRAM: the ELF file behind a libtool program (its .libs/ twin when
# the program is a wrapper script).
real() {
  local p=$1 lt
  lt="$(dirname "$p")/.libs/$(basename "$p")"
  if [ -f "$lt" ] && is_elf "$lt"; then echo "$lt"
  elif is_elf "$p"; then echo "$p"
  fi
}

copy_strip() { # FILE DESTFILE
  cp -L "$1" "$2"
  chmod u+w "$2"
  strip --strip-unneeded "$2" 2>/dev/null || true
}

# ---- programs ------------------------------------------------------------------
elves=()
p=$(real "$build/cltrain")
[ -n "$p" ] || { echo "$0: no built cltrain in $build" >&2; exit 1; }
copy_strip "$p" "$dest/bin/cltrain"
elves+=("$dest/bin/cltrain")
for b in bench/gemm_tune bench/nn_bench bench/bench_nn examples/train_fashion; do
  p=$(real "$build/$b")
  if [ -n "$p" ]; then copy_strip "$p" "$dest/bin/$(basename "$b")"; elves+=("$dest/bin/$(basename "$b")"); fi
done
ntests=0
for t in "$build"/tests/*/test_* "$build"/tests/comm/app_split "$build"/tests/fuzz/fuzz_inputs; do
  [ -e "$t" ] || continue
  case "$t" in *.o | *.c | *.h | *.log | *.trs) continue ;; esac
  p=$(real "$t")
  [ -n "$p" ] || continue
  copy_strip "$p" "$dest/tests/$(basename "$t")"
  elves+=("$dest/tests/$(basename "$t")")
  ntests=$((ntests + 1))
done
for t in test_ops test_dense test_dp; do
  [ -e "$dest/tests/$t" ] || echo "$0: warning: tests/$t is not built in $build (make check TESTS=)" >&2
done

# libcltrain itself
for f in "$build"/.libs/libcltrain.so.*; do
  [ -L "$f" ] && continue
  so=$(objdump -p "$f" | awk '/SONAME/{print $2}')
  copy_strip "$f" "$dest/lib/$so"
done

# ---- Open MPI and PMIx, relocated ----------------------------------------------
have_mpi=0
if [ -x /usr/bin/orterun ] && [ -d "$ompi_pkglibdir" ]; then
  have_mpi=1
  for b in orterun orted ompi_info; do
    [ -x /usr/bin/$b ] && { copy_strip /usr/bin/$b "$dest/mpi/bin/$b"; elves+=("$dest/mpi/bin/$b"); }
  done
  cp "$dest/mpi/bin/orterun" "$dest/mpi/bin/mpirun"
  cp "$dest/mpi/bin/orterun" "$dest/mpi/bin/mpiexec"
  cp -r /usr/share/openmpi/. "$dest/mpi/share/openmpi/" 2>/dev/null || cp -r /usr/share/openmpi "$dest/mpi/share/"
  # Components, only those whose libraries are all glibc's, the bundle's or
  # Open MPI's own core (no UCX, libfabric, verbs, PSM, OpenSHMEM, MPI-IO,
  # monitoring): a component that is not there is not tried, so there are no
  # load warnings and no network stacks to bring.
  core='^(libc|libm|libdl|libpthread|librt|libutil|libz|libmpi|libopen-rte|libopen-pal|libhwloc|libevent[_a-z]*-2\.1|libudev|libpmix|libmunge|linux-vdso|ld-linux-x86-64|libmca_common_sm|libgcc_s)\.so'
  skipped=()
  for c in "$ompi_pkglibdir"/*.so; do
    extra=$(ldd "$c" 2>/dev/null | awk '/=>/{print $1}' | grep -Ev "$core" || true)
    if [ -z "$extra" ]; then
      copy_strip "$c" "$dest/mpi/lib/openmpi3/$(basename "$c")"
      elves+=("$dest/mpi/lib/openmpi3/$(basename "$c")")
    else
      skipped+=("$(basename "$c" .so)")
    fi
  done
  # Components Open MPI should not look for even though they are absent.
  cat >"$dest/mpi/etc/openmpi-mca-params.conf" <<'EOF'
# cltrain GPU bundle: one node, shared memory and TCP only.
btl_base_warn_component_unused = 0
pml = ob1
btl = self,vader,tcp
osc = ^ucx,pt2pt
btl_vader_single_copy_mechanism = none
rmaps_base_oversubscribe = 1
hwloc_base_binding_policy = none
EOF
  : >"$dest/mpi/etc/openmpi-default-hostfile"
  # PMIx: its plugins and help texts (libpmix itself goes to lib/ with the rest)
  for c in "$pmix_prefix"/lib/pmix/*.so; do
    [ -e "$c" ] || continue
    copy_strip "$c" "$dest/pmix/lib/pmix/$(basename "$c")"
    elves+=("$dest/pmix/lib/pmix/$(basename "$c")")
  done
  [ -d "$pmix_prefix/share/pmix" ] && cp -r "$pmix_prefix/share/pmix" "$dest/pmix/share/"
  : >"$dest/pmix/etc/pmix-mca-params.conf"
fi

# ---- the libraries they need: everything but glibc and the C++ runtime -------
glibc_re='^(libc|libm|libdl|libpthread|librt|libutil|libresolv|libanl|libnsl|libBrokenLocale|libmvec|libthread_db|ld-linux-x86-64|linux-vdso)\.so'
cxx_re='^(libstdc\+\+|libgcc_s)\.so'
declare -A seen=()
queue=("${elves[@]}")
while [ ${#queue[@]} -gt 0 ]; do
  f=${queue[0]}
  queue=("${queue[@]:1}")
  while read -r name path; do
    [ -n "$name" ] || continue
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    if [ "$path" = "not" ]; then
      [ "$name" = libcltrain.so.0 ] || [ -e "$dest/lib/$name" ] || echo "$0: warning: $f needs $name, which is not found here" >&2
      continue
    fi
    if [[ $name =~ $glibc_re ]]; then
      [ -e "$dest/lib/glibc/$name" ] || copy_strip "$path" "$dest/lib/glibc/$name"
    elif [[ $name =~ $cxx_re ]]; then
      [ -e "$dest/lib/cxx/$name" ] || copy_strip "$path" "$dest/lib/cxx/$name"
    elif [ ! -e "$dest/lib/$name" ]; then
      copy_strip "$path" "$dest/lib/$name"
      queue+=("$dest/lib/$name")
    fi
  done < <(LD_LIBRARY_PATH="$dest/lib" ldd "$f" 2>/dev/null | awk '/=>/{print $1, $3} /^\s*\/.*ld-linux/{n=$1; sub(".*/","",n); print n, $1}')
done
# the loader under its own name, for running through it (lib/glibc)
[ -e "$dest/lib/glibc/ld-linux-x86-64.so.2" ] || copy_strip /lib64/ld-linux-x86-64.so.2 "$dest/lib/glibc/ld-linux-x86-64.so.2"
for l in libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1; do
  [ -e "$dest/lib/glibc/$l" ] || { [ -e "$multiarch/$l" ] && copy_strip "$multiarch/$l" "$dest/lib/glibc/$l"; }
done
chmod 755 "$dest/lib/glibc/ld-linux-x86-64.so.2"

# ---- data and models -----------------------------------------------------------
data=${CLT_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  if [ -f "$data/$f" ]; then cp "$data/$f" "$dest/data/"; else echo "$0: warning: no $data/$f" >&2; fi
done
cp "$src"/examples/*.model "$dest/examples/"
# the GPT benchmark's tokens (scripts/make-fortunes-data.sh), when made
[ -f "$src/data/fortunes_train.bin" ] && cp "$src/data/fortunes_train.bin" "$dest/data/"

# ---- what the bundle needs of the host ------------------------------------------
needs() { # PATTERN: the highest symbol version of that family any bundled file asks for
  find "$dest/bin" "$dest/tests" "$dest/lib" "$dest/mpi" "$dest/pmix" -maxdepth 3 -type f \
    ! -path "$dest/lib/glibc/*" ! -path "$dest/lib/cxx/*" -print0 |
    { xargs -0 objdump -T 2>/dev/null || true; } | grep -o "$1[0-9.]*" | sed "s/^$1//" | sort -uV | tail -1
}
glibc_need=$(needs 'GLIBC_')
glibcxx_need=$(needs 'GLIBCXX_')
cxxabi_need=$(needs 'CXXABI_')
rev=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo "+dirty" || true)
cat >"$dest/bundle.env" <<EOF
BUNDLE_REV=$rev$dirty
BUNDLE_DATE='$(date -u +%Y-%m-%dT%H:%M:%SZ)'
BUNDLE_GLIBC_NEED=$glibc_need
BUNDLE_GLIBCXX_NEED=$glibcxx_need
BUNDLE_CXXABI_NEED=$cxxabi_need
BUNDLE_HAVE_MPI=$have_mpi
BUNDLE_BUILD_GLIBC=$(ldd --version | head -1 | awk '{print $NF}')
BUNDLE_BUILD_OS='$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")'
EOF
{
  echo "cltrain GPU bundle, made by scripts/gpu-bundle.sh"
  cat "$dest/bundle.env"
  echo "source: $src at $rev$dirty; build: $build"
  echo "cltrain: $(LD_LIBRARY_PATH="$dest/lib" "$dest/bin/cltrain" --version 2>/dev/null | head -1 || true)"
  echo "test programs: $ntests"
  [ $have_mpi = 1 ] && echo "Open MPI components left out (they need libraries the bundle does not carry): ${skipped[*]}"
  echo
  (cd "$dest" && find . -type f ! -name MANIFEST -printf '%10s %p\n' | sort -k2)
  echo
  echo "total: $(du -sh "$dest" | cut -f1)"
} >"$dest/MANIFEST"
echo "bundle $dest: $(du -sh "$dest" | cut -f1), $ntests test programs, glibc >= $glibc_need, GLIBCXX >= $glibcxx_need"
mib=$(($(du -sk "$dest" | cut -f1) / 1024))
if [ $mib -gt 55 ]; then
  echo "$0: warning: the bundle is $mib MiB; the device machine takes 64 MiB in all, the working tree included" >&2
fi
