#!/bin/sh
# All-reduce bandwidth on 2 and 4 ranks over this machine's shared memory,
# Hodu's dist.all_reduce beside Open MPI's own MPI_Allreduce at the same
# sizes (needs openmpi-bin, and libopenmpi-dev for mpicc), then one epoch
# of data-parallel training on 1 and 2 processes (DataParallel averaging
# after backward() and during it).
#   bench/bench_dist.sh [build dir]
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/allreduce_mpi" bench/dist/allreduce_mpi.c
mpirun --version | head -1
for n in 2 4; do
    echo "== $n ranks"
    mpirun -n $n "$build/hodu" bench/dist/allreduce.hodu
    mpirun -n $n "$tmp/allreduce_mpi"
done
echo "== data-parallel epoch (bench/dist/epoch.hodu), three rounds"
for round in 1 2 3; do
    HODU_NUM_THREADS=2 "$build/hodu" bench/dist/epoch.hodu
    # averaging after backward() or during it; one bucket, or two
    for m in "plain 25" "overlap 25" "plain 0.25" "overlap 0.25"; do
        mpirun -n 2 -x HODU_NUM_THREADS=1 "$build/hodu" bench/dist/epoch.hodu $m
    done
done
