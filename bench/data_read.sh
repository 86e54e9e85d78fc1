#!/bin/sh
# data_read.sh: the data sources' reading rate from the page cache on one
# core against memcpy of the same rows (bench/data_read.c), from the build
# directory:
#
#   sh ../bench/data_read.sh [MiB]      (default 256)
#
# Writes its files into $TMPDIR (or /tmp) and removes them.
here=$(dirname "$0")
exec taskset -c 0 ./bench/data_read "${1:-256}" "${TMPDIR:-/tmp}"
