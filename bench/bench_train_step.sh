#!/usr/bin/env bash
# Eager training step of the MLP 512-256-128-2, batch 64, SGD
# (bench/train/mlp_step.hodu): page faults per step and time per step.
#
# Page faults per step are counted by `perf stat -e page-faults` over a run
# of STEPS steps less a run of 0 steps (start-up, imports, warm-up), divided
# by STEPS: deterministic up to a few faults. Time per step is what the
# program measures around its loop, over PASSES runs (min and max shown).
#
#   bench/bench_train_step.sh [hodu ...]      (default: build/hodu)
#   STEPS=500 PASSES=5 THREADS=1 bench/bench_train_step.sh old/hodu build/hodu
set -u
here="$(cd "$(dirname "$0")" && pwd)"
steps="${STEPS:-500}"
passes="${PASSES:-5}"
threads="${THREADS:-1}"
export HODU_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"
[ $# -gt 0 ] || set -- "$here/../build/hodu"
prog="$here/train/mlp_step.hodu"

faults() { # hodu steps -> page faults of the whole run
    perf stat -x, -e page-faults "$1" "$prog" "$2" 2>&1 >/dev/null | awk -F, '/page-faults/ { print $1 }'
}

echo "machine: $(uname -m), $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "threads: $threads, $steps steps, $passes passes; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-40s %14s %22s  %s\n" hodu faults/step "us/step (min-max)" "loss"
for h in "$@"; do
    f=""
    if command -v perf >/dev/null; then
        f0="$(faults "$h" 0)"
        f1="$(faults "$h" "$steps")"
        f="$(awk -v a="$f0" -v b="$f1" -v n="$steps" 'BEGIN { printf "%.2f", (b - a) / n }')"
    fi
    lo="" hi="" loss=""
    for _ in $(seq "$passes"); do
        line="$("$h" "$prog" "$steps" | tail -n 1)"
        t="$(echo "$line" | awk '{ print $2 }')"
        loss="$(echo "$line" | awk '{ print $4 }')"
        lo="$(awk -v a="$t" -v b="$lo" 'BEGIN { print (b == "" || a < b) ? a : b }')"
        hi="$(awk -v a="$t" -v b="$hi" 'BEGIN { print (b == "" || a > b) ? a : b }')"
    done
    printf "%-40s %14s %22s  %s\n" "$h" "${f:--}" "$(printf "%.0f-%.0f" "$lo" "$hi")" "$loss"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
