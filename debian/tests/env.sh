# env.sh: what the tests share (sourced): a scratch directory, PoCL on one
# thread a rank, and mpirun as a container's root may run it.
tmp=${AUTOPKGTEST_TMP:-$(mktemp -d)}
export POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1
mpirun_np() { np=$1; shift; timeout -k 10 300 mpirun -np "$np" --oversubscribe --bind-to none "$@"; }
