# CLT_PROG_FC (before LT_INIT), CLT_CHECK_FORTRAN (after CLT_CHECK_MPI):
# --enable-fortran=auto|yes|no (--disable-fortran).
# Finds a Fortran 2008 compiler with ISO_C_BINDING (FC; gfortran on
# Debian) for the module (use cltrain) and libcltrain_fortran. Sets
# ENABLE_FORTRAN (AM_CONDITIONAL), fmoddir (where cltrain.mod is
# installed), and, when the library has MPI, the flags of MPI's own Fortran
# module for the Fortran test and example: MPI_FCFLAGS, MPI_FCLIBS,
# MPI_FORT_PC (for cltrain-fortran.pc's Requires) or MPI_FORT_PC_FCFLAGS and
# MPI_FORT_PC_LIBS where they came from the wrapper, HAVE_MPI_FORTRAN
# (AM_CONDITIONAL) and clt_fortran_summary.
#
# Where the module goes: .mod files are specific to a compiler and its
# module format, so by default it goes where Debian's Fortran policy puts
# them, $libdir/fortran/<compiler>-mod-<version> (gfortran-mod-15 for
# gfortran 8 to 13), found from the file the compiler writes;
# --with-fortran-moddir=DIR chooses another (e.g. '${includedir}').
# cltrain-fortran.pc gives -I for it, so programs need not know.
AC_DEFUN([CLT_PROG_FC], [
AC_ARG_ENABLE([fortran],
  [AS_HELP_STRING([--disable-fortran],
    [do not build the Fortran module and libcltrain_fortran (default: build them when a Fortran 2008 compiler is found)])],
  [], [enable_fortran=auto])
AC_ARG_WITH([fortran-moddir],
  [AS_HELP_STRING([--with-fortran-moddir=DIR],
    [install cltrain.mod in DIR (default: LIBDIR/fortran/COMPILER-mod-VERSION)])],
  [], [with_fortran_moddir=])
AS_CASE([$enable_fortran], [yes|no|auto], [],
  [AC_MSG_ERROR([--enable-fortran must be yes, no or auto, not '$enable_fortran'])])
dnl AC_PROG_FC (which libtool extends with its Fortran tag) runs whatever
dnl is asked, before LT_INIT and outside any shell conditional; FC=no
dnl makes it, and libtool's tag, find nothing.
AS_IF([test "x$enable_fortran" = xno], [FC=no])
AC_PROG_FC([gfortran flang-new flang ifx ifort nagfor xlf2008 f95 f2008])
])

AC_DEFUN([CLT_CHECK_FORTRAN], [
clt_fortran=no
clt_fortran_summary=no
clt_have_mpi_fortran=no
AS_IF([test "x$enable_fortran" != xno], [
  AS_IF([test -n "$FC" && test "x$FC" != xno], [
    AC_LANG_PUSH([Fortran])
    AC_FC_SRCEXT([f90], [
      AC_MSG_CHECKING([whether $FC compiles Fortran 2008 with ISO_C_BINDING])
      AC_COMPILE_IFELSE([AC_LANG_SOURCE([[
module clt_conftest
  use, intrinsic :: iso_c_binding
  implicit none
  type, bind(C) :: pair
     integer(c_int64_t) :: a = 1
     real(c_float) :: b = 2
  end type pair
contains
  function f(x) result(n)
    real(c_float), intent(in), contiguous :: x(:, :)
    character(len=:), allocatable :: s
    integer(c_size_t) :: n
    s = 'x' // c_null_char
    n = c_sizeof(x(1, 1)) + len(s)
  end function f
end module clt_conftest]])],
        [AC_MSG_RESULT([yes]); clt_fortran=yes],
        [AC_MSG_RESULT([no])])],
      [AC_MSG_WARN([$FC cannot compile .f90 files: the Fortran module is not built])])
    dnl (.F90, the preprocessed form, for the test's MPI and no-MPI halves)
    AS_IF([test "x$clt_fortran" = xyes], [AC_FC_PP_SRCEXT([F90], [], [clt_fortran=no])])
    AS_IF([test "x$clt_fortran" = xyes], [
      AC_MSG_CHECKING([for the Fortran module directory])
      AS_IF([test -n "$with_fortran_moddir"], [fmoddir=$with_fortran_moddir], [
        dnl The module the test above wrote: gfortran's first line reads
        dnl "GFORTRAN module version '15' created from ..." (gzipped).
        clt_modver=
        for clt_mod in clt_conftest.mod CLT_CONFTEST.mod; do
          AS_IF([test -f "$clt_mod"], [
            clt_modver=`(gzip -dc "$clt_mod" 2>/dev/null || cat "$clt_mod") | sed -n "1s/^GFORTRAN module version '\([[0-9]]*\)'.*/\1/p"`
            break])
        done
        AS_IF([test -n "$clt_modver"], [clt_fc_modname="gfortran-mod-$clt_modver"],
          [clt_fc_modname=`basename "$FC"`])
        fmoddir="\${libdir}/fortran/$clt_fc_modname"])
      rm -f clt_conftest.mod CLT_CONFTEST.mod
      AC_MSG_RESULT([$fmoddir])
      clt_fortran_summary="yes ($FC; module in $fmoddir)"
      dnl MPI's own Fortran module, for the test and example that use it:
      dnl pkg-config first, then the wrapper (Debian 12's ompi-fort.pc lacks
      dnl the directory of mpi.mod, which mpifort --showme knows).
      AS_IF([test "x$clt_have_mpi" = xyes], [
        AC_PATH_PROGS([MPIFC], [mpifort mpif90], [])
        save_FCFLAGS=$FCFLAGS; save_LIBS=$LIBS
        clt_mpif_pc_any=
        for clt_mpif in pc:ompi-fort pc:mpich-fort pc:mpi-fort wrapper; do
          MPI_FORT_PC=; MPI_FORT_PC_FCFLAGS=; MPI_FORT_PC_LIBS=
          AS_CASE([$clt_mpif],
            [pc:*], [clt_mpif_pc=`echo "$clt_mpif" | sed "s/^pc://"`
                     $PKG_CONFIG --exists $clt_mpif_pc 2>/dev/null || continue
                     test -n "$clt_mpif_pc_any" || clt_mpif_pc_any=$clt_mpif_pc
                     MPI_FCFLAGS=`$PKG_CONFIG --cflags $clt_mpif_pc`
                     MPI_FCLIBS=`$PKG_CONFIG --libs $clt_mpif_pc`
                     MPI_FORT_PC=$clt_mpif_pc],
            [test -n "$MPIFC" || continue
             MPI_FCFLAGS=`$MPIFC --showme:compile 2>/dev/null` || continue
             MPI_FCLIBS=`$MPIFC --showme:link 2>/dev/null` || continue
             dnl For cltrain-fortran.pc: the .pc that exists (for its libraries)
             dnl and the wrapper's -I (for mpi.mod), else the wrapper's all.
             MPI_FORT_PC_FCFLAGS=$MPI_FCFLAGS
             AS_IF([test -n "$clt_mpif_pc_any"], [MPI_FORT_PC=$clt_mpif_pc_any],
               [MPI_FORT_PC_LIBS=`echo " $MPI_FCLIBS" | tr ' ' '\n' | grep -E '^-(L|l|Wl|pthread)' | tr '\n' ' '`])])
          FCFLAGS="$save_FCFLAGS $MPI_FCFLAGS"; LIBS="$MPI_FCLIBS $save_LIBS"
          AC_MSG_CHECKING([whether a Fortran program that uses MPI's module links with $clt_mpif's flags])
          AC_LINK_IFELSE([AC_LANG_SOURCE([[
program clt_conftest_mpi
  use mpi
  implicit none
  logical :: flag
  integer :: ierr
  call MPI_Initialized(flag, ierr)
end program clt_conftest_mpi]])],
            [AC_MSG_RESULT([yes]); clt_have_mpi_fortran=yes],
            [AC_MSG_RESULT([no])])
          test "x$clt_have_mpi_fortran" = xyes && break
        done
        AS_IF([test "x$clt_have_mpi_fortran" = xyes],
          [clt_fortran_summary="$clt_fortran_summary, MPI's Fortran module: $clt_mpif"],
          [MPI_FCFLAGS=; MPI_FCLIBS=; MPI_FORT_PC=; MPI_FORT_PC_FCFLAGS=; MPI_FORT_PC_LIBS=])
        FCFLAGS=$save_FCFLAGS; LIBS=$save_LIBS])
    ])
    AC_LANG_POP([Fortran])
  ])
  AS_IF([test "x$enable_fortran" = xyes && test "x$clt_fortran" = xno],
    [AC_MSG_ERROR([--enable-fortran was given but no Fortran 2008 compiler with ISO_C_BINDING was found: install gfortran (or set FC)])])
])
AC_SUBST([fmoddir])
AC_SUBST([MPI_FCFLAGS])
AC_SUBST([MPI_FCLIBS])
AC_SUBST([MPI_FORT_PC])
AC_SUBST([MPI_FORT_PC_FCFLAGS])
AC_SUBST([MPI_FORT_PC_LIBS])
AM_CONDITIONAL([ENABLE_FORTRAN], [test "x$clt_fortran" = xyes])
AM_CONDITIONAL([HAVE_MPI_FORTRAN], [test "x$clt_have_mpi_fortran" = xyes])
])
