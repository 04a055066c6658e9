#!/bin/sh
# checks.sh HODU CASE: the dist module on 1 process, and on 2 and 4 ranks
# under Open MPI's mpirun (on this machine, oversubscribed). Exit 77 (a
# skip) when a case needs mpirun and it is not installed.
set -u
hodu=$1
case_=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# mpirun as root (CI), more ranks than cores, and no cross-memory attach
# (not allowed in containers)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
# each case's mpirun keeps its session files under its own directory: in
# the shared /tmp/ompi.HOST.UID, one mpirun removing the directory as it
# ended made another's start fail ("unable to create the desired
# directory") when two cases ran at once
export OMPI_MCA_orte_tmpdir_base="$tmp" TMPDIR="$tmp"

fail() {
    echo "FAIL: $*"
    exit 1
}

need_mpirun() {
    command -v mpirun >/dev/null 2>&1 || {
        echo "mpirun not found: skipped"
        exit 77
    }
}

# run N PROGRAM ARGS...: every rank must print its "ok" line
run() {
    n=$1
    shift
    timeout 300 mpirun -n "$n" "$hodu" "$@" >"$tmp/out" 2>&1 || {
        cat "$tmp/out"
        fail "mpirun -n $n $*"
    }
    cat "$tmp/out"
    got=$(grep -c "of $n: " "$tmp/out")
    [ "$got" = "$n" ] || fail "$n ranks should each report, $got did"
}

# expect_error N WANT PROGRAM: the run fails, saying WANT, and stops in time
expect_error() {
    n=$1
    want=$2
    shift 2
    start=$(date +%s)
    if timeout 120 mpirun -n "$n" "$hodu" "$@" >"$tmp/out" 2>&1; then
        cat "$tmp/out"
        fail "the run should have failed"
    fi
    cat "$tmp/out"
    [ $(($(date +%s) - start)) -lt 100 ] || fail "the ranks took too long to stop"
    grep -q "$want" "$tmp/out" || fail "no '$want' in the output"
}

case $case_ in
one)
    # no launcher: a world of one, whatever MPI there is
    "$hodu" "$here/collectives.hodu" || fail "collectives on one process"
    "$hodu" "$here/unused.hodu" || fail "DataParallel on one process"
    "$hodu" "$here/state.hodu" || fail "DataParallel's state on one process"
    "$hodu" "$here/order.hodu" || fail "DataParallel's order on one process"
    "$hodu" "$here/dtypes.hodu" || fail "DataParallel's dtypes on one process"
    "$hodu" "$here/train.hodu" "$tmp/w.safetensors" || fail "train on one process"
    HODU_MPI_LIB=/nonexistent/libmpi.so "$hodu" -e '
import dist
require(dist.init() == false, "a world of one")
require(not dist.is_available(), "MPI should be missing")
require("MPI is missing" in dist.why_unavailable(), dist.why_unavailable())
print(dist.all_reduce(tensor([2.0]), op = "mean"))' || fail "a world of one without MPI"
    ;;
collectives)
    need_mpirun
    run 2 "$here/collectives.hodu"
    run 4 "$here/collectives.hodu"
    run 2 "$here/unused.hodu"
    run 4 "$here/unused.hodu"
    HODU_LOG=dist run 2 "$here/state.hodu"
    # the last layer's bucket is reduced while backward() goes on
    grep -q "rank 1: DataParallel: bucket 0 of 2 (3 parameters, 26 elements) started during backward(), 1 of 4 gradients still to come" \
        "$tmp/out" || fail "no bucket started during backward()"
    run 4 "$here/state.hodu"
    run 2 "$here/state.hodu" plain
    run 4 "$here/state.hodu" plain
    # parameters() against backward()'s order: the buckets follow backward()
    HODU_LOG=dist run 2 "$here/order.hodu"
    # before: bucket 0 (the first layer's) waits for the last gradient
    grep -q "rank 1: DataParallel: bucket 0 of 4 (2 parameters, 40 elements) started during backward(), 0 of 6" \
        "$tmp/out" || fail "the first backward() should start bucket 0 with its last gradient"
    grep -q "rank 1: DataParallel: buckets in the order of backward()" "$tmp/out" ||
        fail "the buckets were not made again"
    # after: the last layer's, with three gradients still to come
    [ "$(grep -c "rank 1: DataParallel: bucket 0 of 3 (3 parameters, 26 elements) started during backward(), 3 of 6" "$tmp/out")" = 2 ] ||
        fail "the later backward() calls should start bucket 0 before the rest"
    run 4 "$here/order.hodu"
    # every float dtype, during backward() and after it
    for n in 2 4; do
        run $n "$here/dtypes.hodu"
        run $n "$here/dtypes.hodu" plain
    done
    ;;
train)
    # the same global batch on 1, 2 and 4 ranks gives the same weights
    need_mpirun
    "$hodu" "$here/train.hodu" "$tmp/w1.safetensors" || fail "train on one process"
    run 2 "$here/train.hodu" "$tmp/w2.safetensors"
    run 4 "$here/train.hodu" "$tmp/w4.safetensors"
    run 2 "$here/train.hodu" "$tmp/w2c.safetensors" compiled
    run 2 "$here/train.hodu" "$tmp/w2s.safetensors" step
    run 4 "$here/train.hodu" "$tmp/w4s.safetensors" step
    "$hodu" "$here/train.hodu" "$tmp/w1s.safetensors" step || fail "a compiled step on one process"
    for w in w2 w4 w2c w2s w4s w1s; do
        "$hodu" "$here/compare.hodu" "$tmp/w1.safetensors" "$tmp/$w.safetensors" ||
            fail "$w against one process"
    done
    # the data_parallel strategy: optimizers (Adam, LBFGS) average by themselves
    "$hodu" "$here/dp_strategy.hodu" "$tmp/s1" || fail "dp_strategy on one process"
    run 2 "$here/dp_strategy.hodu" "$tmp/s2"
    run 4 "$here/dp_strategy.hodu" "$tmp/s4"
    # a compiled step under the strategy: as the eager steps
    "$hodu" "$here/compare.hodu" "$tmp/s1adam.safetensors" "$tmp/s1adamc.safetensors" ||
        fail "a compiled step against eager steps"
    for w in s2 s4; do
        for opt in adam lbfgs adamc; do
            "$hodu" "$here/compare.hodu" "$tmp/s1$opt.safetensors" "$tmp/$w$opt.safetensors" ||
                fail "$w ($opt) against one process"
        done
    done
    ;;
cuda)
    # cuda tensors on the emulated device (its NCCL runs over MPI): every
    # collective through NCCL against its definition on 2 and 4 ranks, and
    # data-parallel training, eager and compiled, as on one process
    need_mpirun
    [ -n "${HODU_CUDA_NCCL:-}" ] || {
        echo "no emulated cuda device: skipped"
        exit 77
    }
    export HODU_DEVICE=cuda HODU_EMU_CALLS_AT_EXIT=1
    run 2 "$here/collectives.hodu"
    for c in ncclCommInitRank ncclAllReduce ncclBroadcast ncclAllGather ncclReduceScatter; do
        [ $(($(grep -o " $c=" "$tmp/out" | wc -l))) = 2 ] || fail "$c not called on each rank"
    done
    run 4 "$here/collectives.hodu"
    run 1 "$here/collectives.hodu"
    grep -q " ncclAllReduce=" "$tmp/out" || fail "a world of one under mpirun: no NCCL"
    # without NCCL the values go through host memory and MPI, as before
    (
        export HODU_CUDA_NCCL=/nonexistent/libnccl.so.2
        run 2 "$here/collectives.hodu"
    ) || exit 1
    grep -q " nccl" "$tmp/out" && fail "NCCL called where it could not be opened"
    run 2 "$here/unused.hodu"
    run 2 "$here/state.hodu"
    grep -q " ncclAllReduce=" "$tmp/out" || fail "DataParallel's state run without NCCL"
    "$hodu" "$here/train.hodu" "$tmp/w1.safetensors" || fail "train on one process"
    run 2 "$here/train.hodu" "$tmp/w2.safetensors"
    grep -q " ncclAllReduce=" "$tmp/out" || fail "DataParallel's gradients not through NCCL"
    run 2 "$here/train.hodu" "$tmp/w2s.safetensors" step
    for w in w2 w2s; do
        "$hodu" "$here/compare.hodu" "$tmp/w1.safetensors" "$tmp/$w.safetensors" ||
            fail "$w against one process"
    done
    # a rank that fails, or waits in another call, while the others wait in
    # a device collective: every rank stops, none hangs
    expect_error 2 "rank 1 of 2 stopped with an error" -e 'import dist
dist.init()
let t = ones([4], device = "cuda")
dist.all_reduce(t)
if dist.rank() == 1 { require(false, "stopped on purpose") }
dist.all_reduce(t)
print("rank 0 went on")'
    grep -q "rank 0 went on" "$tmp/out" && fail "rank 0 went on"
    HODU_DIST_TIMEOUT=2 expect_error 2 "rank 0 of 2: dist.all_reduce: no answer from the other ranks within 2 s" -e 'import dist
dist.init()
let t = ones([4], device = "cuda")
dist.all_reduce(t)
if dist.rank() == 0 { dist.all_reduce(t) } else { while true { } }'
    ;;
errors)
    need_mpirun
    # MPI missing under a launcher: said plainly
    HODU_MPI_LIB=/nonexistent/libmpi.so expect_error 2 "MPI is missing" -e 'import dist
dist.init()'
    # a rank that fails stops every rank; the others were waiting in a collective
    expect_error 2 "rank 1 of 2 stopped with an error" -e 'import dist
dist.init()
if dist.rank() == 1 { require(false, "stopped on purpose") }
dist.all_reduce(tensor([1.0]))
print("rank 0 went on")'
    grep -q "rank 0 went on" "$tmp/out" && fail "rank 0 went on"
    # ranks that wait for each other in different calls: a timeout, not a hang
    # (what a rank printed before it waited is not lost)
    HODU_DIST_TIMEOUT=2 expect_error 2 "no answer from the other ranks within 2 s" -e 'import dist
dist.init()
print("rank " + str(dist.rank()) + " printed before the wait", end = "")
if dist.rank() == 0 { dist.all_reduce(tensor([1.0])) } else { dist.recv(tensor([1.0]), 0) }'
    grep -q "printed before the wait" "$tmp/out" || fail "the ranks' output was lost"
    # DataParallel's buckets in flight on the communication thread while a
    # rank fails, or while it never calls backward(): every rank stops
    dp='import dist
import nn
dist.init()
let model = nn.DataParallel(nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2)), bucket_mb = 0.001)
let loss = model(randn([8, 64])).sum()'
    expect_error 2 "rank 1 of 2 stopped with an error" -e "$dp
if dist.rank() == 1 { require(false, \"stopped on purpose\") }
loss.backward()
print(\"rank 0 went on\")"
    grep -q "rank 0 went on" "$tmp/out" && fail "rank 0 went on"
    HODU_DIST_TIMEOUT=2 expect_error 2 "rank 0 of 2: DataParallel's all_reduce: no answer from the other ranks within 2 s" -e "$dp
if dist.rank() == 0 { loss.backward() } else { while true { } }"
    # a compiled step where a parameter has no gradient: refused, with the way out
    expect_error 2 "has no gradient in this compiled step" -e 'import dist
import nn
dist.init()
class Two {
    fn init(self) {
        self.a = nn.Linear(3, 2)
        self.b = nn.Linear(3, 2)
    }
    fn forward(self, x) { return self.a(x) }
}
let model = nn.DataParallel(Two())
compiled fn step(x) { model(x).sum().backward() }
step(randn([4, 3]))'
    ;;
hosts)
    # two hosts on this machine: network namespaces joined by a veth pair,
    # each with its own address and host name; mpirun in the first starts
    # the second's daemon through an rsh agent that enters its namespace,
    # and the ranks talk over TCP on those addresses only
    need_mpirun
    command -v ip >/dev/null 2>&1 && command -v unshare >/dev/null 2>&1 || {
        echo "ip or unshare not found: skipped"
        exit 77
    }
    a=hodu$$a
    b=hodu$$b
    . "$here/netns.sh"
    trap 'netns_down; rm -rf "$tmp"' EXIT
    netns_up
    case $? in
    1)
        echo "cannot make network namespaces here (not root?): skipped"
        exit 77
        ;;
    2) fail "the test hosts' namespaces, link or addresses" ;;
    esac
    "$hodu" "$here/train.hodu" "$tmp/w1.safetensors" || fail "train on one process"
    netns_mpirun 2 "hostname; $hodu $here/train.hodu $tmp/w2.safetensors" >"$tmp/out" 2>&1 || {
        cat "$tmp/out"
        fail "mpirun across the two test hosts"
    }
    cat "$tmp/out"
    grep -q "test-$a" "$tmp/out" && grep -q "test-$b" "$tmp/out" || fail "a rank on each host"
    [ "$(grep -c 'of 2: trained' "$tmp/out")" = 2 ] || fail "both ranks trained"
    "$hodu" "$here/compare.hodu" "$tmp/w1.safetensors" "$tmp/w2.safetensors" ||
        fail "two hosts against one process"
    bytes=$(ip -n $b -s link show v$b | awk 'f { print $1; exit } /RX:/ { f = 1 }')
    echo "received on $b's address: $bytes bytes"
    [ "$bytes" -gt 100000 ] || fail "the ranks' traffic did not cross the test hosts' link"
    ;;
*)
    fail "unknown case $case_"
    ;;
esac
echo "ok"
