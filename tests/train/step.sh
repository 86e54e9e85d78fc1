#!/bin/sh
# step.sh: clt_trainer_step in the application's own loop (tests/train/test_step)
# and clt_trainer_step_targets on a regression model
# (tests/train/test_step_regress), on 1 and 2 ranks of this machine: against fit,
# against one device, against plain-C losses, and bad input.
srcdir=${srcdir:-.}
CLT_TIMEOUT=${CLT_TIMEOUT:-60}
CLT_TEST_LIMIT=${CLT_TEST_LIMIT:-300}
export CLT_TIMEOUT CLT_TEST_LIMIT
sh "$srcdir/tests/lib/mpi_run.sh" --each "1 2" ./tests/train/test_step || exit $?
exec sh "$srcdir/tests/lib/mpi_run.sh" --each "1 2" ./tests/train/test_step_regress
