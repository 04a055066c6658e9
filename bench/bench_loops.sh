#!/usr/bin/env bash
# Loops in compiled code (bench/loops/): compile time against the trip
# count, with each compiler, rolled into a loop node and unrolled
# (HODU_LOOP_ROLL=0); the same loop with its count a tensor argument (one
# loop node for every count, bench/loops/count.hodu); and the
# 1000-epoch linear regression compiled as one function against the same
# training run eagerly (bench/train/linreg.hodu); backward() through a
# loop (bench/loops/bptt.hodu), and an RNN over a sequence whose body
# reads xs[t] (bench/loops/rnn_seq.hodu), rolled and unrolled, against
# eager.
# Every compile is cold: each run gets an empty disk cache.
#
#   bench/bench_loops.sh [hodu]        (default: build/hodu)
#   UNROLLED_MAX=1000 bench/bench_loops.sh
set -u
here="$(cd "$(dirname "$0")" && pwd)"
hodu="${1:-$here/../build/hodu}"
unrolled_max="${UNROLLED_MAX:-1000}"
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
export HODU_NUM_THREADS=1 OMP_NUM_THREADS=1

cold() { rm -rf "$cache/hodu"; XDG_CACHE_HOME="$cache" "$@"; }

echo "machine: $(uname -m), $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); 1 thread"
echo
echo "loop of relu(x * 0.5 + w) - 0.01 over 4096 f32, N iterations"
printf "%-8s %-9s %7s %16s %14s\n" compiler mode N "compile (ms)" "run (us)"
for c in llvm interp; do
    for mode in rolled unrolled; do
        for n in 10 100 1000 10000; do
            if [ "$mode" = unrolled ] && [ "$n" -gt "$unrolled_max" ]; then continue; fi
            roll=1; [ "$mode" = unrolled ] && roll=0
            read -r _ ms us _ < <(cold env HODU_COMPILER="$c" HODU_LOOP_ROLL="$roll" \
                "$hodu" "$here/loops/trips.hodu" "$n")
            printf "%-8s %-9s %7s %16.1f %14.1f\n" "$c" "$mode" "$n" "$ms" "$us"
        done
    done
done
echo
echo "the same loop with its count a tensor argument: one loop node for every N"
for c in llvm interp; do
    cold env HODU_COMPILER="$c" "$hodu" "$here/loops/count.hodu" | while read -r n a b _; do
        if [ "$n" = first ]; then
            printf "%-8s first call (trace, compile, 10 iterations): %.1f ms\n" "$c" "$a"
        else
            printf "%-8s N %6s  compiles %s  run %10.1f us\n" "$c" "$n" "$a" "$b"
        fi
    done
done
echo
# A program of bench/loops/ that prints "N compile_ms run_us eager_us
# max_diff", rolled and unrolled (up to 100 steps), with each compiler.
grad_loop() {
    printf "%-8s %-9s %7s %14s %14s %14s %10s\n" compiler mode N "compile (ms)" "run (us)" "eager (us)" "max diff"
    for c in llvm interp; do
        for mode in rolled unrolled; do
            for n in $2; do
                if [ "$mode" = unrolled ] && [ "$n" -gt 100 ]; then continue; fi
                roll=1; [ "$mode" = unrolled ] && roll=0
                read -r _ ms us eus diff < <(cold env HODU_COMPILER="$c" HODU_LOOP_ROLL="$roll" \
                    "$hodu" "$here/loops/$1" "$n")
                printf "%-8s %-9s %7s %14.1f %14.1f %14.1f %10s\n" "$c" "$mode" "$n" "$ms" "$us" "$eus" "$diff"
            done
        done
    done
}
echo "backpropagation through a loop: N steps of tanh(h @ w + b) on [32, 64], then backward()"
grad_loop bptt.hodu "10 100 1000 10000"
echo
echo "an RNN over a sequence: N steps of tanh(xs[t] @ wx + h @ wh + b) on [32, 64], then backward()"
grad_loop rnn_seq.hodu "10 100 1000"
echo
echo "linear regression 100 x 3, 1000 epochs of SGD"
for p in 1 2 3; do
    cold "$hodu" "$here/train/linreg.hodu" | sed 's/^/eager:    /'
done
for p in 1 2 3; do
    cold "$hodu" "$here/loops/linreg_compiled.hodu" | sed 's/^/compiled: /'
done
