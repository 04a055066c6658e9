#!/usr/bin/env bash
# Attention on the cpu: the fused kernel behind nn.scaled_dot_product_attention
# against the same formula written out in Hodu (time and peak memory), and
# PyTorch's F.scaled_dot_product_attention (time) at the same sizes, on
# THREADS threads (default 1; peers pinned with taskset).
# Usage: [THREADS=2] bench/bench_attention.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
threads=${THREADS:-1}
export HODU_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"
cmake --build "$build" -j2 --target hodu >/dev/null
cores="0"; [ "$threads" -gt 1 ] && cores="0-$((threads - 1))"
echo "== machine: $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); threads: $threads"
echo "== load: $(cut -d' ' -f1-3 /proc/loadavg)"
for size in "8 128 64" "8 512 64" "8 2048 64" "8 512 64 causal" "8 2048 64 causal"; do
    # shellcheck disable=SC2086
    "$build/hodu" bench/attention/sdpa.hodu $size
    if command -v python3 >/dev/null; then
        set -- $size
        taskset -c "$cores" python3 bench/attention/sdpa_peers.py "$1" "$2" "$3" "$threads" ${4:-}
    fi
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
