# CLT_CHECK_MPI: --with-mpi=auto|yes|no.
# Looks for MPI through pkg-config (ompi-c, mpich, mpi-c) and falls back to
# asking the mpicc wrapper for its flags. Sets MPI_CFLAGS, MPI_LIBS,
# HAVE_MPI (AC_DEFINE and AM_CONDITIONAL), CLT_HAVE_MPI (1 or 0, for
# cltrain/version.h), what cltrain-mpi.pc needs for cltrain/mpi.h (MPI_PC: the
# pkg-config module in Requires, or MPI_PC_CFLAGS and MPI_PC_LIBS where MPI
# came from the wrapper) and clt_mpi_summary.
# MPI flags are applied only to the sources that need MPI: CC is never mpicc.
AC_DEFUN([CLT_CHECK_MPI], [
AC_ARG_WITH([mpi],
  [AS_HELP_STRING([--with-mpi@<:@=auto|yes|no@:>@],
    [build the MPI communicator (default: auto). 'no' builds a one-rank library that still trains on several devices in one process])],
  [], [with_mpi=auto])
clt_have_mpi=no
clt_mpi_summary=no
AS_CASE([$with_mpi], [yes|no|auto], [],
  [AC_MSG_ERROR([--with-mpi must be auto, yes or no, not '$with_mpi'])])
AS_IF([test "x$with_mpi" != xno], [
  for clt_mpi_pc in ompi-c mpich mpi-c; do
    PKG_CHECK_EXISTS([$clt_mpi_pc], [
      MPI_CFLAGS=`$PKG_CONFIG --cflags $clt_mpi_pc`
      MPI_LIBS=`$PKG_CONFIG --libs $clt_mpi_pc`
      clt_have_mpi=yes
      clt_mpi_summary="yes (pkg-config $clt_mpi_pc)"
      MPI_PC=$clt_mpi_pc
      break])
  done
  AS_IF([test "x$clt_have_mpi" = xno], [
    AC_PATH_PROGS([MPICC], [mpicc], [])
    AS_IF([test -n "$MPICC"], [
      dnl Open MPI's wrapper answers --showme:*, MPICH's answers -compile_info.
      MPI_CFLAGS=`$MPICC --showme:compile 2>/dev/null` || MPI_CFLAGS=
      MPI_LIBS=`$MPICC --showme:link 2>/dev/null` || MPI_LIBS=
      AS_IF([test -z "$MPI_LIBS"], [
        MPI_CFLAGS=`$MPICC -compile_info 2>/dev/null | cut -d' ' -f2- | tr ' ' '\n' | grep -E '^-(I|D|pthread)' | tr '\n' ' '`
        MPI_LIBS=`$MPICC -link_info 2>/dev/null | cut -d' ' -f2- | tr ' ' '\n' | grep -E '^-(L|l|Wl|pthread)' | tr '\n' ' '`])
      AS_IF([test -n "$MPI_LIBS"],
        [clt_have_mpi=yes; clt_mpi_summary="yes ($MPICC wrapper)"])])
  ])
  AS_IF([test "x$clt_have_mpi" = xyes], [
    save_CFLAGS=$CFLAGS; save_LIBS=$LIBS
    CFLAGS="$CFLAGS $MPI_CFLAGS"; LIBS="$MPI_LIBS $LIBS"
    AC_MSG_CHECKING([whether an MPI program links])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>]],
                     [[int f = 0; MPI_Initialized(&f); return f;]])],
      [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no]); clt_have_mpi=no; clt_mpi_summary=no])
    CFLAGS=$save_CFLAGS; LIBS=$save_LIBS])
  AS_IF([test "x$with_mpi" = xyes && test "x$clt_have_mpi" = xno],
    [AC_MSG_ERROR([--with-mpi=yes was given but no usable MPI was found (tried pkg-config ompi-c, mpich, mpi-c and mpicc): install libopenmpi-dev])])
])
AS_IF([test "x$clt_have_mpi" = xyes],
  [AC_DEFINE([HAVE_MPI], [1], [Define if cltrain is built with MPI])
   CLT_HAVE_MPI=1
   AS_IF([test -z "$MPI_PC"], [MPI_PC_CFLAGS=$MPI_CFLAGS; MPI_PC_LIBS=$MPI_LIBS])],
  [MPI_CFLAGS=; MPI_LIBS=; MPI_PC=; CLT_HAVE_MPI=0])
AC_SUBST([MPI_CFLAGS])
AC_SUBST([MPI_LIBS])
AC_SUBST([MPI_PC])
AC_SUBST([MPI_PC_CFLAGS])
AC_SUBST([MPI_PC_LIBS])
AC_SUBST([CLT_HAVE_MPI])
AM_CONDITIONAL([HAVE_MPI], [test "x$clt_have_mpi" = xyes])
])

# AX_PTHREAD_SIMPLE: -pthread for the prefetch thread and tests.
AC_DEFUN([AX_PTHREAD_SIMPLE], [
  PTHREAD_CFLAGS=-pthread
  PTHREAD_LIBS=-pthread
  AC_SUBST([PTHREAD_CFLAGS])
  AC_SUBST([PTHREAD_LIBS])
])
