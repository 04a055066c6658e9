#!/usr/bin/env bash
# Per-op cost through the interpreter: 10^6 one-element tensor additions in
# Hodu, NumPy and PyTorch (each if installed). Each program runs with 10^6
# iterations and with 0, best CPU time of REPEAT runs of each; the second
# is subtracted, so start-up (PyTorch's import takes about a second of CPU)
# is not counted. The peers run in the same order every time.
#   bench/bench_tensor_loop.sh [path/to/hodu]
set -u
here="$(cd "$(dirname "$0")" && pwd)"
hodu="${1:-$here/../build/hodu}"
repeat="${REPEAT:-3}"
n=1000000
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
# CPU seconds of the loop: the run of n iterations less the run of none
loop_time() {
    local full empty
    full="$(best "$@" "$n")"
    empty="$(best "$@" 0)"
    awk -v a="$full" -v b="$empty" 'BEGIN{printf "%.3f", a - b}'
}
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $n iterations, start-up subtracted"
th="$(loop_time "$hodu" "$here/interp/tensor_loop.hodu")"
printf "%-8s %8s s  %6.0f ns/op\n" hodu "$th" "$(awk -v t="$th" -v n="$n" 'BEGIN{print t * 1e9 / n}')"
for peer in numpy torch; do
    if python3 -c "import $peer" 2>/dev/null; then
        v="$(python3 -c "import $peer; print($peer.__version__)")"
        tp="$(loop_time python3 "$here/interp/tensor_loop_$peer.py")"
        printf "%-8s %8s s  %6.0f ns/op   hodu is %.2fx faster\n" "$peer $v" "$tp" \
            "$(awk -v t="$tp" -v n="$n" 'BEGIN{print t * 1e9 / n}')" \
            "$(awk -v a="$tp" -v b="$th" 'BEGIN{print a / b}')"
    else
        echo "$peer: not installed (pip install $peer)"
    fi
done
