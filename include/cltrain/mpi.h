/*
 * cltrain/mpi.h: MPI interop (opt-in; includes mpi.h). Only in builds
 * configured with MPI (HAVE_MPI in the library's config; the header is
 * installed either way but the function exists only then).
 *
 * cltrain never calls MPI_Init or MPI_Finalize: the application initialises
 * MPI (MPI_THREAD_FUNNELED is enough), makes communicators from its own
 * MPI_Comm, destroys them before MPI_Finalize, and decides what to do when a
 * collective fails (MPI_Abort, usually).
 *
 * In C++, mpi.h of Open MPI (before 5.0) and MPICH declares MPI's C++
 * bindings too, whose inline code needs libmpi_cxx (or libmpicxx) at link
 * time: a C++ program that includes this header and links with
 * `pkg-config --libs cltrain-mpi` would fail with undefined MPI:: symbols.
 * The bindings left MPI in 3.0; this header turns them off unless mpi.h
 * came first (cltrain-mpi.pc's Cflags turn them off in that order too).
 */
#ifndef CLTRAIN_MPI_H
#define CLTRAIN_MPI_H

#if defined(__cplusplus) && !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#endif
#if defined(__cplusplus) && !defined(MPICH_SKIP_MPICXX)
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cltrain.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator over the ranks of `comm`, which is duplicated (so cltrain's
 * messages never meet the application's) and set to return errors instead
 * of aborting. Collective over comm, with the CLT_TIMEOUT deadline. The
 * local rank (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED) is computed
 * here; clt_comm_default_device() uses it. CLT_TIMEOUT and
 * CLT_ALLREDUCE_CHUNK are read here; junk in them is CLT_EINVAL. */
CLT_API int clt_comm_create(MPI_Comm comm, clt_comm **out);
/* The same from a Fortran handle (an INTEGER of `use mpi`, or comm%MPI_VAL
 * of an mpi_f08 type(MPI_Comm)), for the Fortran module (use cltrain):
 * converted by MPI_Comm_f2c and checked first, locally, so a handle that
 * names no communicator (garbage, a freed one, MPI_COMM_NULL) is
 * CLT_EINVAL naming it on the rank that gave it, not a crash or a hang.
 * A build without MPI has it too and returns CLT_EUNSUPPORTED. */
CLT_API int clt_comm_create_f(MPI_Fint comm, clt_comm **out);

#ifdef __cplusplus
}
#endif
#endif /* CLTRAIN_MPI_H */
