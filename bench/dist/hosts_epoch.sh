#!/bin/sh
# DataParallel's averaging after backward() or during it, across two test
# hosts on this machine (network namespaces, tests/dist/netns.sh) whose
# link is limited to RATE (default 1gbit) by a token bucket at each end:
# the gradients' all-reduce then takes the wire's time, as between
# machines, rather than this machine's memory copies. One rank per host,
# one thread each; bench/dist/epoch.hodu, alternating the modes. Root.
#   bench/dist/hosts_epoch.sh [build dir] [rate] [rounds]
set -eu
cd "$(dirname "$0")/../.."
build=$(cd "${1:-build}" && pwd)
rate=${2:-1gbit}
rounds=${3:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
a=hodub$$a
b=hodub$$b
. tests/dist/netns.sh
trap 'netns_down; rm -rf "$tmp"' EXIT
netns_up || {
    echo "cannot make the test hosts (root, ip and unshare needed)"
    exit 1
}
for ns in $a $b; do
    ip netns exec $ns tc qdisc add dev v$ns root tbf rate "$rate" burst 256kb latency 100ms
done
echo "link: $rate each way"
for r in $(seq "$rounds"); do
    for m in "plain 0.25" "overlap 0.25" "plain 1 deep" "overlap 1 deep"; do
        netns_mpirun 2 "HODU_NUM_THREADS=1 $build/hodu $PWD/bench/dist/epoch.hodu $m" 2>&1 |
            grep processes
    done
done
