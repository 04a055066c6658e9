#!/usr/bin/env bash
# Runtime benchmarks: eager overhead, elementwise throughput against memcpy,
# matmul against cblas_sgemm, and NumPy's figures for the same in the same
# run (pip install numpy). Usage: bench/bench_runtime.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" -j2 --target bench_elementwise bench_matmul >/dev/null
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== hodu elementwise"
"$build/bench/bench_elementwise"
echo "== hodu matmul"
"$build/bench/bench_matmul"
if python3 -c 'import numpy' 2>/dev/null; then
    echo "== numpy $(python3 -c 'import numpy; print(numpy.__version__)')"
    python3 bench/peers_runtime.py
else
    echo "== numpy not installed: pip install numpy for the peer figures"
fi
