#!/bin/sh
# 8-byte AllReduce, ring vs tree, at the given local rank counts, interleaved rounds.
# Usage: benchmarks/allreduce_8b.sh ROUNDS "8 16" [perf binary]
# Prints one line per run: ranks, algorithm, out-of-place time (us), in-place time (us).
rounds=${1:-5}
ranks=${2:-"8 16"}
perf=${3:-target/release/ferroccl-perf}
. "$(dirname "$0")/lib/machine.sh"
machine_header
for n in $ranks; do check_ranks "$n"; done
for r in $(seq "$rounds"); do
  for n in $ranks; do
    for algo in ring allreduce:tree; do
      out=$(NCCL_NET_PLUGIN=socket NCCL_ALGO=$algo "$perf" --ranks "$n" -b 8 -e 8 -n 200 -w 20 all_reduce | grep -E '^ +8 ')
      echo "round $r ranks $n algo $algo $(echo "$out" | awk '{print $6, $10}')"
    done
  done
done
