#!/usr/bin/env bash
# Training loops: Hodu against PyTorch eager (and NumPy with hand-written
# gradients, for reference), timed in one run on the same machine.
#
#   linreg   linear regression 100 x 3, 1000 epochs of full-batch SGD
#            (nn.Linear, MSELoss, optim.SGD / their torch equivalents)
#   spirals  MLP 2-64-64-2 on 1000 two-spirals points, Adam, batches of
#            100, 150 epochs = 1500 steps
#
# Each program times its own training loop (not start-up or imports); the
# best of REPEAT runs (default 5) is kept. Both sides use THREADS threads
# (default 1: these are small problems, and on a shared machine idle
# threads spinning at barriers cost more than they give).
#
#   bench/bench_train.sh [path/to/hodu]      (default: build/hodu)
#   REPEAT=9 THREADS=2 bench/bench_train.sh
#
# Without PyTorch (pip install torch) the torch column reads "-" and the
# ratio is taken against NumPy.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
hodu="${1:-$here/../build/hodu}"
repeat="${REPEAT:-5}"
threads="${THREADS:-1}"
python="$(command -v python3 || true)"

if [ ! -x "$hodu" ]; then
    echo "bench_train: no hodu binary at $hodu (build first, or pass its path)" >&2
    exit 2
fi
has_py() { [ -n "$python" ] && "$python" -c "import $1" 2>/dev/null; }
torch=0
numpy=0
has_py torch && torch=1
has_py numpy && numpy=1
if [ "$torch" = 0 ]; then
    echo "bench_train: PyTorch is not installed (pip install torch); comparing against NumPy" >&2
fi

cores="$(getconf _NPROCESSORS_ONLN)"
cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export HODU_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads"
export OPENBLAS_NUM_THREADS="$threads"

# best CMD...: the smallest "time" a program reports over $repeat runs; the
# rest of its last line ("loss 0.006" or "accuracy 1.0") goes to $tmp/result.
best() {
    local b="" line t
    for _ in $(seq "$repeat"); do
        line="$("$@" 2>&1 | tail -n 1)"
        t="$(echo "$line" | awk '$1 == "time" { print $2 }')"
        if [ -z "$t" ]; then
            echo "bench_train: $* printed: $line" >&2
            echo "-"
            return
        fi
        echo "$line" | awk '{ print $3, $4 }' >"$tmp/result"
        if [ -z "$b" ] || awk -v a="$t" -v c="$b" 'BEGIN { exit !(a < c) }'; then b="$t"; fi
    done
    printf "%.4f" "$b"
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "%.1fx", a / b; else print "-" }'
}

echo "machine: $(uname -m), $cores cores, $cpu; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "threads: $threads, best of $repeat runs, seconds of the training loop"
if [ "$torch" = 1 ]; then
    echo "torch: $("$python" -c 'import torch; print(torch.__version__)')"
fi
printf "%-8s %10s %10s %10s %12s %12s   %s\n" loop hodu torch numpy torch/hodu numpy/hodu "hodu result"
for prog in linreg spirals; do
    th="$(best "$hodu" "$here/train/$prog.hodu")"
    hres="$(cat "$tmp/result")"
    tt="-"
    tn="-"
    if [ "$torch" = 1 ]; then tt="$(best "$python" "$here/train/$prog.py" "$threads")"; fi
    if [ "$numpy" = 1 ]; then tn="$(best "$python" "$here/train/${prog}_numpy.py")"; fi
    printf "%-8s %10s %10s %10s %12s %12s   %s\n" "$prog" "$th" "$tt" "$tn" "$(ratio "$tt" "$th")" \
        "$(ratio "$tn" "$th")" "$hres"
done
