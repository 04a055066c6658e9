#!/usr/bin/env bash
# Interpreter speed: the same small programs in Hodu, Lua 5.4 and Python 3,
# timed in one run. Each is run REPEAT times (default 5) and the best CPU
# time (user + system) is kept, which is steadier than wall time on a busy
# machine. The outputs must agree.
#
#   bench/bench_interp.sh [path/to/hodu]      (default: build/hodu)
#   REPEAT=9 bench/bench_interp.sh
#   INSTR=1 bench/bench_interp.sh     also count instructions (valgrind) for
#                                     Hodu and Lua: steady on a loaded machine
#                                     (needs a build configured with
#                                     -DHODU_NATIVE=OFF)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
hodu="${1:-$here/../build/hodu}"
repeat="${REPEAT:-5}"
lua="$(command -v lua5.4 || command -v lua || true)"
python="$(command -v python3 || true)"

if [ ! -x "$hodu" ]; then
    echo "bench_interp: no hodu binary at $hodu (build first, or pass its path)" >&2
    exit 2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# best_time CMD... : prints the best user+sys seconds over $repeat runs and
# leaves the program's output in $tmp/out.
best_time() {
    local best="" t
    for _ in $(seq "$repeat"); do
        TIMEFORMAT='%3U %3S'
        { time "$@" >"$tmp/out" 2>/dev/null; } 2>"$tmp/time"
        t="$(awk '{printf "%.3f", $1 + $2}' "$tmp/time")"
        if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN{exit !(a < b)}'; then best="$t"; fi
    done
    echo "$best"
}

# instructions CMD... : instructions executed, counted by callgrind; "-"
# when the program does not finish under valgrind (a -march=native build can
# use AVX-512, which valgrind does not know: configure with -DHODU_NATIVE=OFF).
instructions() {
    local log
    log="$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null)"
    if [ $? -ne 0 ] || printf '%s' "$log" | grep -q "Unrecognised instruction"; then
        echo "-"
        return
    fi
    printf '%s\n' "$log" | awk '/refs:/ { gsub(",", "", $NF); print $NF }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'; }

printf "%-8s %9s %9s %9s %10s %12s\n" program hodu lua python hodu/lua hodu/python
status=0
for prog in loop while calls; do
    th="$(best_time "$hodu" "$here/interp/$prog.hodu")"; oh="$(cat "$tmp/out")"
    tl="-"; tp="-"; ol="$oh"; op="$oh"
    if [ -n "$lua" ]; then tl="$(best_time "$lua" "$here/interp/$prog.lua")"; ol="$(cat "$tmp/out")"; fi
    if [ -n "$python" ]; then
        tp="$(best_time "$python" "$here/interp/$prog.py")"; op="$(cat "$tmp/out")"
    fi
    if [ "$oh" != "$ol" ] || [ "$oh" != "$op" ]; then
        echo "bench_interp: $prog: outputs differ (hodu '$oh', lua '$ol', python '$op')" >&2
        status=1
    fi
    printf "%-8s %9s %9s %9s %10s %12s\n" "$prog" "$th" "$tl" "$tp" "$(ratio "$th" "$tl")" \
        "$(ratio "$th" "$tp")"
done
if [ "${INSTR:-0}" = 1 ] && command -v valgrind >/dev/null && [ -n "$lua" ]; then
    echo
    printf "%-8s %14s %14s %10s\n" program "hodu instr" "lua instr" hodu/lua
    for prog in loop while calls; do
        ih="$(instructions "$hodu" "$here/interp/$prog.hodu")"
        il="$(instructions "$lua" "$here/interp/$prog.lua")"
        printf "%-8s %14s %14s %10s\n" "$prog" "$ih" "$il" "$(ratio "$ih" "$il")"
    done
fi
exit $status
