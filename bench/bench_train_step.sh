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
# program measures around its loop, over PASSES interleaved passes (min and
# max shown, and the ratios to the peers taken within each pass): the mean
# over all STEPS steps, and the mean of the fastest of the 5 rounds the
# steps are timed in (each program times its steps so, the peers too), which
# a slow spell of this shared machine during part of a run touches less.
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
printf "%-40s %14s\n" hodu faults/step
for h in "$@"; do
    f="-"
    if command -v perf >/dev/null; then
        f0="$(faults "$h" 0)"
        f1="$(faults "$h" "$steps")"
        f="$(awk -v a="$f0" -v b="$f1" -v n="$steps" 'BEGIN { printf "%.2f", (b - a) / n }')"
    fi
    printf "%-40s %14s\n" "$h" "$f"
done

# Every pass runs each Hodu binary eagerly, the last one's compiled fn, then
# the peers, in that order, so that a slow spell of this shared machine
# touches one pass of each rather than all passes of one; the ratios are
# taken within a pass.
last="${*: -1}"
peers=0
cores="0"; [ "$threads" -gt 1 ] && cores="0-$((threads - 1))"
python3 -c 'import numpy' 2>/dev/null && peers=1
runs="$(mktemp)"
trap 'rm -f "$runs"' EXIT
for pass in $(seq "$passes"); do
    for h in "$@"; do
        echo "$pass $h $("$h" "$prog" "$steps" | tail -n 1 | awk '{ print $2, $6, $4 }')"
    done
    echo "$pass $last(compiled-fn) $("$last" "$prog" "$steps" compiled | tail -n 1 | awk '{ print $2, $6, $4 }')"
    if [ "$peers" = 1 ]; then
        taskset -c "$cores" python3 "$here/train/mlp_step_peers.py" "$steps" "$threads" |
            awk -v p="$pass" '$4 != "-" { print p, $1 "-" $2 "-" $3, $4, $5 }'
    fi
done >"$runs"
printf "%-40s %14s %14s  %s\n" run "us/step" "fastest round" loss
awk '{ k = $2; if (!(k in ord)) { ord[k] = ++n; name[n] = k; lo[k] = hi[k] = $3; blo[k] = bhi[k] = $4 }
       if ($3 < lo[k]) lo[k] = $3; if ($3 > hi[k]) hi[k] = $3
       if ($4 < blo[k]) blo[k] = $4; if ($4 > bhi[k]) bhi[k] = $4; loss[k] = $5 }
     END { for (i = 1; i <= n; i++) { k = name[i]
           printf "%-40s %14s %14s  %s\n", k, sprintf("%.0f-%.0f", lo[k], hi[k]),
                  sprintf("%.0f-%.0f", blo[k], bhi[k]), loss[k] } }' "$runs"
# Ratios within each pass: Hodu eager / PyTorch eager, Hodu compiled fn /
# JAX jit (below 1: Hodu is faster), of the whole runs and of the fastest
# rounds.
ratios() { # field label
    awk -v f="$1" -v l="$2" -v e="$last" -v c="$last(compiled-fn)" '
        $2 == e { he[$1] = $f } $2 == c { hc[$1] = $f }
        $2 ~ /^torch-/ && $2 ~ /eager$/ { pt[$1] = $f } $2 ~ /^jax-/ { jx[$1] = $f }
        END { for (p in he) if (p in pt) { r = he[p] / pt[p]; if (elo == "" || r < elo) elo = r; if (r > ehi) ehi = r }
              for (p in hc) if (p in jx) { r = hc[p] / jx[p]; if (clo == "" || r < clo) clo = r; if (r > chi) chi = r }
              if (elo != "") printf "Hodu eager / PyTorch eager, per pass, %-16s %.2f-%.2f\n", l ":", elo, ehi
              if (clo != "") printf "Hodu compiled / JAX jit, per pass, %-16s    %.2f-%.2f\n", l ":", clo, chi }' "$runs"
}
ratios 3 "whole runs"
ratios 4 "fastest rounds"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
