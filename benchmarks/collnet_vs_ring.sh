#!/usr/bin/env bash
# CollNet (issue 32, BENCHMARKS.md §13): AllReduce as CollNetChain over the
# in-tree CollNet plugin (libnccl-net-collnet-socket.so: rank 0 of each
# collComm aggregates over TCP) against Ring over the socket plugin, on 4 hosts x
# 1 rank of a simulated cluster (scripts/netns-cluster.sh, links unshaped), in
# interleaved rounds; every result checked (`wrong` columns: out of place, in place).
# Usage: benchmarks/collnet_vs_ring.sh [ROUNDS]   (default 3; needs root)
#   flock /tmp/ferroccl-bench.lock benchmarks/collnet_vs_ring.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
ROUNDS=${1:-3}
cargo build --release -q -p ferroccl-examples -p ferroccl-net-socket -p ferroccl-net-collnet-socket
S=scripts/netns-cluster.sh
"$S" --name cnb up 4 >/dev/null
trap '"$S" --name cnb down >/dev/null' EXIT
B=target/release/ferroccl-perf
for r in $(seq "$ROUNDS"); do
  for v in ring collnet; do
    if [ $v = ring ]; then env_=(NCCL_NET_PLUGIN=socket NCCL_ALGO=allreduce:ring); else env_=(NCCL_NET_PLUGIN=collnet-socket NCCL_COLLNET_ENABLE=1 NCCL_ALGO=allreduce:collnetchain); fi
    env "${env_[@]}" $B --hosts 4 --cluster cnb --ranks 4 all_reduce -b 1M -e 64M -f 64 -n 5 -w 2 -c 1 2>&1 |
      awk -v r=$r -v v=$v -v l="$(cut -d' ' -f1 /proc/loadavg)" '/^ +[0-9]+ / { print "round " r, v, $1, "time_us", $6, "busbw", $8, "wrong", $9, $13, "load", l }'
  done
done
