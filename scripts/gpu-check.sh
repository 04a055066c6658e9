#!/usr/bin/env bash
# Everything a GPU machine is for, in one command (docs/cuda.md, "On a GPU"):
#   scripts/gpu-check.sh BUILD_DIR OUT_DIR [TEST_SECONDS]
# BUILD_DIR was configured with -DHODU_TEST_GPU=ON. First the benchmarks
# (bench/bench_cuda.sh: Hodu against cuBLAS, PyTorch and JAX on this GPU),
# then the tests labelled cuda on the GPU for at most TEST_SECONDS (420):
# the cuda unit tests, the cuda golden programs and the GPU twin of every
# emulated-device test. OUT_DIR receives both logs, the results section
# (bench_cuda.md) and a copy of bench/RESULTS.md with the section put in
# before its first one, to copy over the tree's.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/gpu-check.sh BUILD_DIR OUT_DIR [TEST_SECONDS]}
out=${2:?usage: scripts/gpu-check.sh BUILD_DIR OUT_DIR [TEST_SECONDS]}
secs=${3:-420}
mkdir -p "$out"
bash bench/bench_cuda.sh "$build" >"$out/bench.log" 2>&1
timeout "$secs" ctest --test-dir "$build" -L '^cuda$' --output-on-failure \
    -j "${HODU_JOBS:-$(nproc)}" >"$out/ctest.log" 2>&1
echo "ctest: status $? (124: stopped after $secs s)" >>"$out/ctest.log"
cp "$build/bench_cuda.log" "$out/"
cp bench/RESULTS.md "$out/RESULTS.md"
commit=${HODU_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
python3 bench/cuda/results.py "$build/bench_cuda.log" --tests "$out/ctest.log" \
    --insert "$out/RESULTS.md" --commit "$commit" \
    --command "scripts/gpu-check.sh $build OUT_DIR" | tee "$out/bench_cuda.md"
grep -E "tests passed|\((Failed|Timeout|SEGFAULT)" "$out/ctest.log" | tail -20
