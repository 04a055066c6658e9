#!/usr/bin/env bash
# Everything a GPU machine is for, in one command (docs/cuda.md, "On a GPU"):
#   scripts/gpu-check.sh BUILD_DIR OUT_DIR [SECONDS]
# BUILD_DIR was configured with -DHODU_TEST_GPU=ON. First the benchmarks
# (bench/bench_cuda.sh: Hodu against cuBLAS, PyTorch and JAX on this GPU),
# whose RESULTS.md section is written at once; then the tests labelled
# cuda (the cuda unit tests, the cuda golden programs and the GPU twin of
# every emulated-device test) for what is left of SECONDS (540: a machine
# lent for ten minutes a call still returns everything), and the section
# again with the tests' summary. OUT_DIR receives both logs, the section
# (bench_cuda.md) and a copy of bench/RESULTS.md with the section put in
# before its first one, to copy over the tree's. HODU_BENCH_COMMIT names
# the build where the tree has no git.
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/gpu-check.sh BUILD_DIR OUT_DIR [SECONDS]"
build=${1:?$usage}
out=${2:?$usage}
budget=${3:-540}
mkdir -p "$out"
commit=${HODU_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

section() { # [--tests LOG]: the section, and RESULTS.md with it, into OUT_DIR
    cp bench/RESULTS.md "$out/RESULTS.md"
    python3 bench/cuda/results.py "$build/bench_cuda.log" "$@" --insert "$out/RESULTS.md" \
        --commit "$commit" --command "scripts/gpu-check.sh $build OUT_DIR" >"$out/bench_cuda.md"
}

bash bench/bench_cuda.sh "$build" >"$out/bench.log" 2>&1
cp "$build/bench_cuda.log" "$out/"
# HODU_GPU_SHIM: a library that counts and times the driver calls in front
# of libcuda.so.1 (docs/cuda.md); bench_cuda_host's calls go through it
if [ -n "${HODU_GPU_SHIM:-}" ]; then
    HODU_CUDA_DRIVER=$HODU_GPU_SHIM "$build/bench/bench_cuda_host" 10000 >"$out/shim.log" 2>&1
    cat "$out/shim.log" >>"$build/bench_cuda.log"
fi
section
left=$((budget - SECONDS - 15))
if [ "$left" -gt 30 ]; then
    timeout "$left" ctest --test-dir "$build" -L '^cuda$' --output-on-failure \
        -j "${HODU_JOBS:-$(nproc)}" >"$out/ctest.log" 2>&1
    echo "ctest: status $? (124: stopped after $left s)" >>"$out/ctest.log"
    section --tests "$out/ctest.log"
else
    echo "ctest: not run (the benchmarks left $left s of $budget)" >"$out/ctest.log"
fi
cat "$out/bench_cuda.md"
grep -E "tests passed|\*\*\*(Failed|Timeout|Exception)" "$out/ctest.log" | tail -20
