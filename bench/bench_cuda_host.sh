#!/usr/bin/env bash
# Host time of CUDA calls (bench_cuda_host.c): an eager elementwise op on
# one-element tensors and a compiled call (CUDA Graph replay) of a narrow
# MLP, plus the driver calls each makes.
#   bench/bench_cuda_host.sh BUILD_DIR [calls]
# Without a GPU it runs on the emulator (tests/cuda_emu) with
# HODU_EMU_NOLAUNCH=1, launches that do nothing: the figures are the
# backend's host code plus the emulator's entry points, not a driver's.
# With HODU_CUDA_DRIVER unset and a GPU present it measures the real driver
# (bench_cuda.sh runs it so).
set -euo pipefail
build=${1:?usage: bench/bench_cuda_host.sh BUILD_DIR [calls]}
calls=${2:-20000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export HODU_CACHE_DIR=${HODU_CACHE_DIR:-$tmp/cache}
emu=$build/tests/libhodu_cuda_emu.so
if [ "${HODU_BENCH_GPU:-0}" = 0 ] && [ -e "$emu" ]; then
    export HODU_CUDA_DRIVER=$emu HODU_CUDA_NVRTC=$emu HODU_CUDA_BLAS=$emu HODU_CUDA_SOLVER=$emu
    export HODU_EMU_NOLAUNCH=1
    echo "== the CUDA emulator, launches doing nothing"
fi
"$build/bench/bench_cuda_host" "$calls"
