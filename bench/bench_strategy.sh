#!/usr/bin/env bash
# Execution strategies: checkpointing's peak memory and time on a 32-layer
# MLP (three shapes), the profiler's cost per eager op, modes "hybrid" and
# "lazy" against eager and compiled code, and memory "cached" (the memo)
# against "pooled".
# Usage: bench/bench_strategy.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" -j2 --target hodu >/dev/null
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "== load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/hodu" bench/strategy/checkpoint_mlp.hodu 4096 128 128
"$build/hodu" bench/strategy/checkpoint_mlp.hodu 1024 128 512
"$build/hodu" bench/strategy/checkpoint_mlp.hodu 4096 128 512
"$build/hodu" bench/strategy/profile_overhead.hodu
"$build/hodu" bench/strategy/lazy_chain.hodu
"$build/hodu" bench/strategy/memo.hodu 128 256
"$build/hodu" bench/strategy/memo.hodu 64 512
