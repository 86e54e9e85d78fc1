#!/bin/sh
# Generates configure and Makefile.in (they are not committed).
set -e
cd "$(dirname "$0")"
autoreconf --install --force "$@"
