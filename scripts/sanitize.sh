#!/bin/sh
# sanitize.sh [BUILDDIR] [-- MAKE CHECK ARGS]: build cltrain out of tree with
# AddressSanitizer and UndefinedBehaviorSanitizer and run the test suite.
#
#   scripts/sanitize.sh                      # builds in ./build-sanitize
#   scripts/sanitize.sh /tmp/bsan -- TESTS='tests/fuzz/fuzz_inputs tests/cli/fault_cli.sh'
#
# Any sanitizer report fails the test that triggered it (halt_on_error; UBSan
# is made fatal with -fno-sanitize-recover). Leak checking is off: the OpenCL
# drivers (PoCL's and Mesa's LLVM, the ICD loader) and Open MPI keep memory
# until exit by design, and LeakSanitizer cannot tell theirs from ours. To
# look for our own leaks, run one test with ASAN_OPTIONS=detect_leaks=1.
#
# The fuzz test runs longer here (FUZZ_SECONDS, default 3 s per target), since
# the sanitizers catch what a plain build lets slide.
# SANITIZE_CONFIGURE: more arguments for configure (CI builds the parallel
# HDF5 variant here: SANITIZE_CONFIGURE=--with-hdf5=parallel).
set -e
srcdir=$(cd "$(dirname "$0")/.." && pwd)
builddir=${1:-build-sanitize}
[ $# -gt 0 ] && shift
[ "$1" = "--" ] && shift
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
[ -x "$srcdir/configure" ] || (cd "$srcdir" && ./autogen.sh)
mkdir -p "$builddir"
cd "$builddir"
# shellcheck disable=SC2086 # SANITIZE_CONFIGURE is words
[ -f Makefile ] || "$srcdir/configure" ${SANITIZE_CONFIGURE:-} CFLAGS="-O1 -g $SAN" LDFLAGS="$SAN"
make -j"$(nproc 2>/dev/null || echo 2)"
# verify_asan_link_order=0: the ICD loader and drivers are dlopen'ed libraries
# not built with ASan, and mpiexec (not instrumented) starts the MPI tests.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:halt_on_error=1:abort_on_error=1:verify_asan_link_order=0:detect_odr_violation=0}
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
FUZZ_SECONDS=${FUZZ_SECONDS:-3}
export ASAN_OPTIONS UBSAN_OPTIONS FUZZ_SECONDS
make check "$@"
