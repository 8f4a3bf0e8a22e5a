#!/usr/bin/env bash
# 8-byte AllReduce latency on 2 local ranks (shared memory), ferroccl against
# Open MPI 4.1's default shared memory, in interleaved rounds (issue 15's
# "at most 2x Open MPI" target; BENCHMARKS.md §5). With a second ferroccl-perf
# binary (e.g. a build of an older commit) each round runs it too, so a change
# is measured against its baseline on the same machine in the same minute.
#
# Usage: benchmarks/latency_8b_vs_mpi.sh [ROUNDS] [ITERS] [BASELINE_PERF]
#   (defaults: 5 rounds, 5000 iterations after 200 warmup, no baseline)
# Prints per round: each ferroccl's out-of-place/in-place time (µs), Open
# MPI's time (µs), the load average. Runs everything under `nice -n -20` when
# permitted (root), as the quiet-machine figures in BENCHMARKS.md were taken.
# Needs: cargo, mpicc/mpirun (Open MPI).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
check_ranks 2
ROUNDS=${1:-5}
ITERS=${2:-5000}
BASE=${3:-}
cargo build --release -q -p ferroccl-examples -p ferroccl-net-socket
mpicc -O2 -o /tmp/mpi_colls benchmarks/mpi_colls.c
NICE=()
if [ "$(id -u)" = 0 ]; then NICE=(nice -n -20); fi
ours() { # perf-binary
  LD_LIBRARY_PATH="$(dirname "$1")" NCCL_NET_PLUGIN=socket "${NICE[@]}" "$1" --ranks 2 -b 8 -e 8 -n "$ITERS" -w 200 all_reduce 2>&1 |
    awk '/^ +8 +[0-9]+ / { print $6 "/" $10 }'
}
for r in $(seq "$ROUNDS"); do
  line="round $r  ferroccl $(ours target/release/ferroccl-perf)"
  if [ -n "$BASE" ]; then line="$line  baseline $(ours "$BASE")"; fi
  mpi=$("${NICE[@]}" mpirun --oversubscribe --allow-run-as-root -np 2 /tmp/mpi_colls all_reduce 8 8 2 "$ITERS" 200 2>&1 |
    awk '/all_reduce/ { print $4 }')
  echo "$line  openmpi $mpi  load $(cut -d' ' -f1 /proc/loadavg)"
done
