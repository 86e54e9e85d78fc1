#!/bin/sh
# cxx_mpi.sh: a C++ program that includes cltrain/mpi.h builds with
# `pkg-config --cflags --libs cltrain-mpi` alone and runs on 2 ranks: once
# with cltrain/mpi.h as its only MPI header, once with <mpi.h> included
# before it. Open MPI's mpi.h (before 5.0) declares MPI's C++ bindings in
# C++, whose inline code needs libmpi_cxx at link time ("undefined reference
# to MPI::Comm::Comm()"); the header and cltrain-mpi.pc turn them off.
# The pkg-config files are this build's, their libdir and includedir
# pointed at the build tree. Skipped (77) without g++, pkg-config, a shared
# build or MPI.
srcdir=${srcdir:-.}
CXX=${CLT_TEST_CXX:-g++}
command -v "$CXX" >/dev/null 2>&1 || { echo "SKIP: no C++ compiler ($CXX)"; exit 77; }
command -v pkg-config >/dev/null 2>&1 || { echo "SKIP: no pkg-config"; exit 77; }
[ -e .libs/libcltrain.so ] || { echo "SKIP: no shared libcltrain in .libs"; exit 77; }
grep -q 'define CLT_HAVE_MPI 1' include/cltrain/version.h || { echo "SKIP: a build without MPI"; exit 77; }
[ -f cltrain-mpi.pc ] || { echo "FAIL: an MPI build without cltrain-mpi.pc"; exit 1; }
top=$(pwd)
src=$(cd "$srcdir" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
for pc in cltrain cltrain-mpi; do
  sed -e "s|^libdir=.*|libdir=$top/.libs|" -e "s|^includedir=.*|includedir=$src/include|" $pc.pc >"$t/$pc.pc"
done
flags=$(PKG_CONFIG_PATH="$t${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" pkg-config --cflags --libs cltrain-mpi) || {
  echo "FAIL: pkg-config --cflags --libs cltrain-mpi"; exit 1; }
echo "pkg-config --cflags --libs cltrain-mpi: $flags"

cat >"$t/app.cc" <<'CXX'
// A C++ MPI application handing cltrain its communicator.
#ifdef MPI_FIRST
#include <mpi.h>
#endif
#include <cltrain/mpi.h>

#include <cstdio>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  clt_comm *comm = nullptr;
  if (clt_comm_create(MPI_COMM_WORLD, &comm) < 0) {
    std::fprintf(stderr, "app: %s\n", clt_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  std::printf("rank %d of %d\n", clt_comm_rank(comm), clt_comm_size(comm));
  clt_comm_destroy(comm);
  MPI_Finalize();
  return 0;
}
CXX

fail=0
for variant in "" -DMPI_FIRST; do
  # -I for the generated cltrain/version.h, in the build tree (the installed
  # headers are in one directory).
  if ! $CXX -Wall -Werror $variant "$t/app.cc" -I"$top/include" $flags -o "$t/app" 2>"$t/err"; then
    echo "FAIL: $CXX ${variant:+$variant }app.cc \$(pkg-config --cflags --libs cltrain-mpi):"
    head -5 "$t/err"
    fail=1; continue
  fi
  out=$(LD_LIBRARY_PATH="$top/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" sh "$srcdir/tests/lib/mpi_run.sh" 2 "$t/app" 2>&1)
  rc=$?
  [ $rc -eq 77 ] && { echo "$out"; exit 77; }
  if [ $rc -ne 0 ] || [ "$(echo "$out" | grep -c '^rank [01] of 2$')" -ne 2 ]; then
    echo "FAIL: the C++ program (${variant:-cltrain/mpi.h alone}) on 2 ranks exited $rc:"; echo "$out"; fail=1; continue
  fi
  echo "ok: C++, ${variant:-cltrain/mpi.h alone}: built with pkg-config alone, ran on 2 ranks"
done
exit $fail
