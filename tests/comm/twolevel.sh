#!/bin/sh
# twolevel.sh: the two-level all-reduce (tests/comm/test_twolevel) on pretend
# nodes: 1 to 6 ranks, nodes of 1, 2 and 3 ranks, uneven ones (5 ranks in
# nodes of 2: 2,2,1; 3,2; 4,2), one run between pretend nodes over TCP
# (--mca btl tcp,self), and on 4 ranks a rank that never joins; then with
# Rabenseifner's all-reduce between nodes, up to 16 ranks (a rank that
# never joins, on 5 nodes of 1).
# A long sweep: make check-long runs it (CLT_LONG=1); make check skips it.
[ "${CLT_LONG:-0}" = 1 ] || { echo "SKIP: a long sweep (make check-long runs it)"; exit 77; }
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-30}
export CLT_TIMEOUT
status=77
run() { # NODE_SIZE NP [mpiexec args]
  k=$1 np=$2
  shift 2
  echo "== CLT_NODE_SIZE=$k on $np rank(s) $*"
  CLT_NODE_SIZE=$k sh "$srcdir/tests/lib/mpi_run.sh" "$np" "$@" ./tests/comm/test_twolevel
  rc=$?
  case $rc in
    0) [ $status -eq 77 ] && status=0 ;;
    77) ;;
    *) echo "FAIL: CLT_NODE_SIZE=$k on $np rank(s) exited $rc"; status=1 ;;
  esac
}
run 1 1
run 1 2
run 2 3
run 3 3
run 2 5
run 3,2 5
run 4,2 6
CT_ABSENT=1; export CT_ABSENT
run 2 4
unset CT_ABSENT
run 2 4 --mca btl tcp,self
# Rabenseifner's between nodes: one node (nothing between nodes), 4 nodes
# of 1 (a power of two; 4 nodes of 2, 8 ranks, is left to a run by hand), 3 and 5 nodes (the fold), uneven ones; and the model's own choice on 16
# ranks in 4 nodes of 4 (it takes this one for large messages there).
CT_TWOLEVEL=twolevel-rabenseifner; export CT_TWOLEVEL
run 3 3
run 1 4
run 2 5
run 3,2 5
CT_ABSENT=1; export CT_ABSENT
run 1 5
unset CT_ABSENT CT_TWOLEVEL
run 4 16
exit $status
