#!/bin/sh
# install-debian-deps.sh: the Debian 12 packages cltrain needs to build,
# test and run on any machine, GPU or not: PoCL and Mesa rusticl give two
# independent OpenCL implementations on the CPU; Fashion-MNIST (images) and
# fortunes (English text for language models, scripts/make-fortunes-data.sh)
# are the data cltrain trains on out of the box; OpenBLAS (optional for the
# build) runs CPU devices' GEMMs on the host (src/core/blas_host.c); PCRE2
# runs the tokenizers' patterns (src/text). As root it
# installs directly (a fresh Debian container has no sudo); otherwise
# through sudo.
set -e
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "$0: run as root, or install sudo" >&2; exit 1; }
  exec sudo sh "$0" "$@"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
  build-essential gfortran autoconf automake libtool pkg-config \
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd mesa-opencl-icd libclblast-dev \
  libopenmpi-dev openmpi-bin check zlib1g-dev libjansson-dev libpcre2-dev libprotobuf-c-dev protobuf-c-compiler libopenblas-dev \
  libhdf5-dev \
  dataset-fashion-mnist fortunes
