#!/usr/bin/env bash
# linalg against NumPy and PyTorch on one thread (all three through LAPACK;
# Hodu's is OpenBLAS's). Usage: bench/bench_linalg.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 HODU_NUM_THREADS=1
echo "== machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== hodu"
"$build/hodu" bench/linalg/bench.hodu
python3 bench/linalg/peers.py
