#!/bin/sh
# The d2l hybridize benchmark at the language level (bench/hybridize/):
# eager vs compiled calls of an MLP 512-256-128-2, batch 1, and the compile
# time, with each compiler of COMPILERS (default: interp llvm). Runs the
# build's hodu REPEAT times (default 3).
#   bench/bench_hybridize.sh [N]     (N calls per measurement, default 1000)
here=$(cd "$(dirname "$0")" && pwd)
hodu=${HODU:-$here/../build/hodu}
[ -x "$hodu" ] || { echo "build hodu first (cmake --build build)"; exit 2; }
for c in ${COMPILERS:-interp llvm}; do
    for i in $(seq "${REPEAT:-3}"); do
        echo "== $c, run $i"
        HODU_COMPILER=$c "$hodu" "$here/hybridize/bench_hybridize.hodu" "${1:-1000}" "$c" || exit 1
    done
done
