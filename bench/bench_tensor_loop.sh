#!/usr/bin/env bash
# Per-op cost through the interpreter: 10^6 one-element tensor additions in
# Hodu, NumPy and PyTorch (each if installed), best CPU time of REPEAT runs.
#   bench/bench_tensor_loop.sh [path/to/hodu]
set -u
here="$(cd "$(dirname "$0")" && pwd)"
hodu="${1:-$here/../build/hodu}"
repeat="${REPEAT:-3}"
best() {
    local best="" t
    for _ in $(seq "$repeat"); do
        TIMEFORMAT='%3U %3S'
        { time "$@" >/dev/null 2>&1; } 2>/tmp/hodu_bench_time
        t="$(awk '{printf "%.3f", $1 + $2}' /tmp/hodu_bench_time)"
        if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN{exit !(a < b)}'; then best="$t"; fi
    done
    echo "$best"
}
th="$(best "$hodu" "$here/interp/tensor_loop.hodu")"
printf "%-8s %8s s  %6.0f ns/op\n" hodu "$th" "$(awk -v t="$th" 'BEGIN{print t * 1000}')"
for peer in numpy torch; do
    if python3 -c "import $peer" 2>/dev/null; then
        tp="$(best python3 "$here/interp/tensor_loop_$peer.py")"
        printf "%-8s %8s s  %6.0f ns/op   hodu is %.2fx faster\n" "$peer" "$tp" \
            "$(awk -v t="$tp" 'BEGIN{print t * 1000}')" "$(awk -v a="$tp" -v b="$th" 'BEGIN{print a / b}')"
    else
        echo "$peer: not installed (pip install $peer)"
    fi
done
