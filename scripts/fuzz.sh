#!/usr/bin/env bash
# Build the libFuzzer targets (tests/fuzz) with clang and run each one for
# SECONDS (default 60) on its seed corpus, up to HODU_JOBS targets at once.
#   scripts/fuzz.sh [-k] [SECONDS] [TARGET...]
# TARGETs: parser fmt script npy npz safetensors csv program (default: all).
# -k keeps going after a finding (libFuzzer's fork mode), for long runs.
# New inputs go to build-fuzz/fuzz-out/TARGET/corpus, findings (crash-*,
# leak-*, timeout-*, oom-*) to build-fuzz/fuzz-out/TARGET/findings, the log
# to build-fuzz/fuzz-out/TARGET/log. Exit status 1 when there is a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0
if [ "${1:-}" = -k ]; then
    keep=1
    shift
fi
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(parser fmt script npy npz safetensors csv program)
jobs=${HODU_JOBS:-$(nproc)}
dir=${HODU_FUZZ_DIR:-build-fuzz}
src=tests/fuzz
# undefined behaviour stops the run, so that libFuzzer keeps the input
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# LLVM <= 16's __tls_get_addr interceptor can crash LeakSanitizer's tracer
# at exit (see scripts/test.sh)
export ASAN_OPTIONS=${ASAN_OPTIONS:-intercept_tls_get_addr=0}

if [ ! -f "$dir/CMakeCache.txt" ]; then
    CC=${HODU_FUZZ_CC:-clang} cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DHODU_FUZZ=ON >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
else # configured again, so that a target added since is known
    cmake -S . -B "$dir" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
fi
cmake --build "$dir" -j "$jobs" --target "${targets[@]/#/fuzz_}"
# The seed corpora first, every file once: the findings kept as regressions.
ctest --test-dir "$dir" --output-on-failure -j "$jobs" \
    -R "^fuzz\.($(IFS='|'; echo "${targets[*]}"))_corpus\$"

# libFuzzer options of one target: dictionary, input size and the limits.
# The loaders work in a 1 MiB context, so a single malloc of 16 MiB, or an
# RSS of 1 GiB, means memory that escaped it.
fuzz_options() {
    case $1 in
    parser | fmt) echo "-dict=$src/parser.dict -max_len=4096 -timeout=10" ;;
    script) echo "-max_len=16384 -timeout=10" ;;
    npy | npz | safetensors | csv)
        echo "-dict=$src/$1.dict -max_len=16384 -timeout=10 -rss_limit_mb=1024 -malloc_limit_mb=16" ;;
    program) echo "-dict=$src/parser.dict -max_len=4096 -timeout=30 -rss_limit_mb=2048 -malloc_limit_mb=256" ;;
    *) echo "unknown fuzz target: $1" >&2; return 1 ;;
    esac
}

# Extra seed folders (read, never written).
fuzz_seeds() {
    case $1 in
    program) echo "$src/corpus_program $src/corpus_parser tests/golden" ;;
    fmt) echo "$src/corpus_fmt $src/corpus_parser tests/fmt/cases" ;;
    *) echo "$src/corpus_$1" ;;
    esac
}

fuzz_one() {
    local t=$1 out=$dir/fuzz-out/$1 mode
    mkdir -p "$out/corpus" "$out/findings"
    mode="-max_total_time=$secs"
    [ $keep = 1 ] && mode="$mode -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1"
    # shellcheck disable=SC2046,SC2086 # options are words
    "$dir/tests/fuzz/fuzz_$t" $mode $(fuzz_options "$t") -print_final_stats=1 \
        -artifact_prefix="$out/findings/" "$out/corpus" $(fuzz_seeds "$t") >"$out/log" 2>&1
}

running=0
for t in "${targets[@]}"; do
    fuzz_options "$t" >/dev/null
    fuzz_one "$t" &
    running=$((running + 1))
    if [ $running -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

status=0
for t in "${targets[@]}"; do
    out=$dir/fuzz-out/$t
    # the final stats, or (fork mode) the last "#N" progress line
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/log" | tail -1 | grep -o '[0-9]*$' ||
        grep -oE '^#[0-9]+' "$out/log" | tail -1 | tr -d '#' || true)
    found=$(find "$out/findings" -type f | wc -l)
    printf 'fuzz %-12s %6ss  %10s runs  %5s corpus  %s findings\n' "$t" "$secs" "${execs:-?}" \
        "$(find "$out/corpus" -type f | wc -l)" "$found"
    if [ "$found" -gt 0 ] || grep -q -E '^(==[0-9]+==ERROR|SUMMARY: )' "$out/log"; then
        status=1
        echo "--- $out/log (end) ---"
        tail -n 60 "$out/log"
        find "$out/findings" -type f
    fi
done
exit $status
