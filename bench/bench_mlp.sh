#!/usr/bin/env bash
# The upstream MLP benchmark (bench_mlp: a 3-layer MLP with GELU and a
# residual connection, forward only, f32, at three sizes; Hodu eager and
# llvm) and its peers in the same run (bench/peers_mlp.py: PyTorch eager,
# torch.compile, JAX jit, each where installed). Threads: THREADS (default
# 2) for Hodu and PyTorch; XLA sizes its own pool to the machine's cores.
# Usage: bench/bench_mlp.sh [BUILD_DIR] [ITERS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
iters=${2:-100}
rounds=${3:-5}
threads=${THREADS:-2}
cmake --build "$build" -j2 --target bench_mlp >/dev/null
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== hodu"
"$build/bench/bench_mlp" "$threads" "$iters" "$rounds"
if python3 -c 'import numpy' 2>/dev/null; then
    echo "== peers"
    python3 bench/peers_mlp.py "$threads" "$iters" "$rounds" 2>&1 | grep -v -i -e warning -e 'CUDA_HOME'
else
    echo "== numpy not installed: pip install numpy (torch, jax) for the peer figures"
fi
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
