#!/usr/bin/env bash
# The llvm compiler's benchmarks (bench_llvm: MLP calls, the fused chain
# against memcpy, compile time cold and cached) and the peers' figures for
# the same in the same run: NumPy, PyTorch (eager, torch.compile) and JAX
# (jit), each where installed (pip install numpy torch jax).
# Usage: bench/bench_llvm.sh [BUILD_DIR] [CALLS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
calls=${2:-1000}
cmake --build "$build" -j2 --target bench_llvm >/dev/null
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== hodu"
"$build/bench/bench_llvm" "$calls"
if python3 -c 'import numpy' 2>/dev/null; then
    echo "== peers"
    python3 bench/peers_llvm.py "$calls" 2>&1 | grep -v -i warning
else
    echo "== numpy not installed: pip install numpy (torch, jax) for the peer figures"
fi
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
