#!/usr/bin/env bash
# Training step of the MLP 512-256-128-2, batch 64, SGD
# (bench/train/mlp_step.hodu): page faults per step and time per step,
# eagerly and (the last binary) as a compiled fn, then the peers' same step
# (bench/train/mlp_step_peers.py: PyTorch eager, JAX jit, where installed)
# pinned with taskset to THREADS cores, since XLA's pool takes every core.
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
last="${*: -1}"
lo="" hi=""
for _ in $(seq "$passes"); do
    t="$("$last" "$prog" "$steps" compiled | tail -n 1 | awk '{ print $2 }')"
    lo="$(awk -v a="$t" -v b="$lo" 'BEGIN { print (b == "" || a < b) ? a : b }')"
    hi="$(awk -v a="$t" -v b="$hi" 'BEGIN { print (b == "" || a > b) ? a : b }')"
done
printf "%-40s %14s %22s\n" "$last (compiled fn)" - "$(printf "%.0f-%.0f" "$lo" "$hi")"
if command -v python3 >/dev/null && python3 -c 'import numpy' 2>/dev/null; then
    cores="0"; [ "$threads" -gt 1 ] && cores="0-$((threads - 1))"
    for _ in $(seq "$passes"); do
        taskset -c "$cores" python3 "$here/train/mlp_step_peers.py" "$steps" "$threads"
    done | awk '{ k = $1 " " $2 " " $3; if (!(k in lo) || $4 < lo[k]) lo[k] = $4;
                  if (!(k in hi) || $4 > hi[k]) hi[k] = $4; order[k] = NR }
                END { for (k in lo) printf "%-40s %14s %22s\n", k, "-",
                      (lo[k] == "-" ? "-" : sprintf("%.0f-%.0f", lo[k], hi[k])) }'
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
