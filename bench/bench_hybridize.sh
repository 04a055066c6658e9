#!/bin/sh
# The d2l hybridize benchmark at the language level (bench/hybridize/):
# eager vs compiled (interp) calls of an MLP 512-256-128-2, batch 1, and
# the compile time. Runs the build's hodu REPEAT times (default 3).
#   bench/bench_hybridize.sh [N]     (N calls per measurement, default 1000)
here=$(cd "$(dirname "$0")" && pwd)
hodu=${HODU:-$here/../build/hodu}
[ -x "$hodu" ] || { echo "build hodu first (cmake --build build)"; exit 2; }
for i in $(seq "${REPEAT:-3}"); do
    echo "== run $i"
    "$hodu" "$here/hybridize/bench_hybridize.hodu" "${1:-1000}" || exit 1
done
