#!/usr/bin/env bash
# Install the Debian packages Hodu builds and tests with (run as root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    build-essential cmake pkg-config ca-certificates \
    libopenblas-dev re2c bison libedit-dev zlib1g-dev llvm-dev \
    >/dev/null
# Python runs the check of bench/cuda/results.py (the GPU benchmark's
# results section); the benchmarks' peers need it too.
apt-get install -y -qq --no-install-recommends python3 >/dev/null
# Distributed runs (the dist module, tests/dist): Open MPI's mpirun and
# library (hodu opens it at run time, so it needs no -dev package), and
# iproute2 for the two test hosts made of network namespaces.
apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi3 iproute2 >/dev/null
# The fuzz targets (scripts/fuzz.sh): clang, its OpenMP, and compiler-rt,
# whose libFuzzer and sanitizer runtimes Debian ships apart from clang
# (only recommended by it, so --no-install-recommends leaves them out).
apt-get install -y -qq --no-install-recommends clang libomp-dev libclang-rt-dev >/dev/null
# oneDNN, whose sgemm runs the larger f32 products where it is installed
# (docs/runtime.md, "Which gemm"; hodu opens it at run time, so no -dev
# package): Debian 12 ships it as libdnnl2, later releases as libdnnl3.
dnnl=libdnnl2
if apt-cache show libdnnl3 >/dev/null 2>&1; then dnnl=libdnnl3; fi
apt-get install -y -qq --no-install-recommends "$dnnl" >/dev/null
