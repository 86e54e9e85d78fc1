#!/bin/sh
# install-debian-deps.sh: the Debian 12 packages cltrain needs to build,
# test and run on any machine, GPU or not: PoCL and Mesa rusticl give two
# independent OpenCL implementations on the CPU. Run as root (or via sudo).
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
  build-essential autoconf automake libtool pkg-config \
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd mesa-opencl-icd libclblast-dev \
  libopenmpi-dev openmpi-bin check zlib1g-dev libjansson-dev \
  dataset-fashion-mnist
