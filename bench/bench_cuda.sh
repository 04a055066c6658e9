#!/usr/bin/env bash
# CUDA benchmarks for a GPU machine (nvcc, PyTorch, JAX; no network needed):
#   bench/bench_cuda.sh BUILD_DIR
# 1. a fused elementwise chain over 256M f32 (Hodu eager and compiled cuda)
#    against a device-to-device copy, as GB/s;
# 2. matmul f32/bf16 at 4096 and 8192 against cuBLAS called directly;
# 3. MLP forward sizes (Hodu eager and compiled cuda, whose calls replay one
#    CUDA Graph) against PyTorch eager, torch.compile and jax.jit;
# 4. host time per eager op and per compiled call on tiny tensors
#    (bench_cuda_host, the real driver).
# Every timing synchronizes (Hodu: .item() of a reduction at the end).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: bench/bench_cuda.sh BUILD_DIR}
hodu=$build/hodu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export HODU_CACHE_DIR=${HODU_CACHE_DIR:-$tmp/cache}

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

echo "== cuBLAS and copy reference (nvcc)"
nvcc -O2 -o "$tmp/ref" "$here/cuda/ref.cu" -lcublas
"$tmp/ref"

echo "== hodu"
"$hodu" "$here/cuda/bench.hodu"

echo "== peers (PyTorch eager, torch.compile, jax.jit)"
python3 "$here/cuda/peers_cuda.py"

echo "== host time per call (the real driver)"
HODU_BENCH_GPU=1 "$here/bench_cuda_host.sh" "$build"
