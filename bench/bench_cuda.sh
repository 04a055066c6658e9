#!/usr/bin/env bash
# CUDA benchmarks for a GPU machine (nvcc, PyTorch, JAX; no network needed):
#   bench/bench_cuda.sh BUILD_DIR [--results FILE] [--tests CTEST_LOG]
# 1. a fused elementwise chain over 256M f32 (Hodu eager and compiled cuda)
#    against a device-to-device copy, as GB/s;
# 2. matmul f32/bf16 at 4096 and 8192 against cuBLAS called directly;
# 3. MLP forward sizes (Hodu eager and compiled cuda, whose calls replay one
#    CUDA Graph) against PyTorch eager, torch.compile and jax.jit;
# 4. host time per call on tiny tensors against PyTorch eager, a CUDA
#    Graph replay and torch.compile(mode="reduce-overhead"), and
#    bench_cuda_host (the real driver);
# 5. the profiler's host and device times per op over the cases that
#    missed their targets before (bench/cuda/profile.hodu).
# Every timing synchronizes (Hodu: .item() of a reduction at the end).
# A part that fails is reported and the others still run. The log goes to
# BUILD_DIR/bench_cuda.log, and bench/cuda/results.py makes of it a
# RESULTS.md section with the GPU's name and each figure against its
# target: printed, written to BUILD_DIR/bench_cuda.md, and with --results
# put into FILE (bench/RESULTS.md) before its first section. --tests adds
# the summary of a ctest log. HODU_BENCH_COMMIT names the build where the
# tree has no git.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: bench/bench_cuda.sh BUILD_DIR [--results FILE] [--tests CTEST_LOG]}
shift
results=() tests=()
while [ $# -gt 0 ]; do
    case $1 in
    --results) results=(--insert "$2"); shift 2 ;;
    --tests) tests=(--tests "$2"); shift 2 ;;
    *) echo "bench_cuda.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
hodu=$build/hodu
log=$build/bench_cuda.log
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export HODU_CACHE_DIR=${HODU_CACHE_DIR:-$tmp/cache}

part() { # title, command...: runs it, says so if it fails
    echo "== $1"
    shift
    "$@" || echo "!! failed with status $?: $*"
}
# (results.py copies this part's tables into the section)
profile_part="where the device time goes (the profiler)"
reference() { nvcc -O2 -o "$tmp/ref" "$here/cuda/ref.cu" -lcublas && "$tmp/ref"; }

{
    part "device" nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    part "cuBLAS and copy reference (nvcc)" reference
    part "hodu" "$hodu" "$here/cuda/bench.hodu"
    part "peers (PyTorch eager, torch.compile, jax.jit)" python3 "$here/cuda/peers_cuda.py"
    part "host time per call (the real driver)" env HODU_BENCH_GPU=1 "$here/bench_cuda_host.sh" "$build"
    part "$profile_part" "$hodu" "$here/cuda/profile.hodu"
} 2>&1 | tee "$log"

commit=${HODU_BENCH_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)}
python3 "$here/cuda/results.py" "$log" "${tests[@]}" "${results[@]}" --commit "$commit" \
    --command "bench/bench_cuda.sh $build" | tee "$build/bench_cuda.md"
