#!/usr/bin/env bash
# CollNet algorithms against the model's choice (issue 32, BENCHMARKS.md §13.1):
# AllReduce (float32 sum) on 2 hosts x 2 ranks of a simulated cluster
# (scripts/netns-cluster.sh, links unshaped), every variant over the in-tree
# CollNet plugin (libnccl-net-collnet-socket.so, NCCL_COLLNET_ENABLE=1):
# Ring, CollnetChain and CollnetDirect forced by NCCL_ALGO, and the model's
# own pick (no NCCL_ALGO; its choice per size from --show-tuning), in
# interleaved rounds; every result checked (`wrong` columns: out of place, in place).
# Usage: benchmarks/collnet_algos.sh [ROUNDS] [PROFILE]   (default 3, debug; needs root)
#   sizes: MIN..MAX by FACTOR (env, default 64K..16M by 16); ITERS (default 3)
#   FUNC (env, default all_reduce): all_gather or reduce_scatter run Ring,
#   CollnetDirect (NCCL_ALGO=allgather:… / reducescatter:…) and the model's pick
#   (CollnetChain runs AllReduce only).
#   flock /tmp/ferroccl-bench.lock benchmarks/collnet_algos.sh 3 release
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
ROUNDS=${1:-3}
PROFILE=${2:-debug}
if [ "$PROFILE" = release ]; then
  cargo build --release -q -p ferroccl-examples -p ferroccl-net-collnet-socket
else
  cargo build -q -p ferroccl-examples -p ferroccl-net-collnet-socket
fi
S=scripts/netns-cluster.sh
"$S" --name cna up 2 >/dev/null
trap '"$S" --name cna down >/dev/null' EXIT
B=target/$PROFILE/ferroccl-perf
FUNC=${FUNC:-all_reduce}
case $FUNC in
  all_reduce) KEY=allreduce VARIANTS="ring collnetchain collnetdirect model" ;;
  all_gather) KEY=allgather VARIANTS="ring collnetdirect model" ;;
  reduce_scatter) KEY=reducescatter VARIANTS="ring collnetdirect model" ;;
  *) echo "collnet_algos.sh: FUNC=$FUNC: all_reduce, all_gather or reduce_scatter" >&2; exit 2 ;;
esac
for r in $(seq "$ROUNDS"); do
  for v in $VARIANTS; do
    env_=(NCCL_NET_PLUGIN=collnet-socket NCCL_COLLNET_ENABLE=1)
    [ $v = model ] || env_+=(NCCL_ALGO=$KEY:$v)
    env "${env_[@]}" $B --hosts 2 --cluster cna --ranks 4 $FUNC -b ${MIN:-64K} -e ${MAX:-16M} -f ${FACTOR:-16} -n ${ITERS:-3} -w 1 -c 1 --show-tuning 2>&1 |
      awk -v r=$r -v v=$v -v l="$(cut -d' ' -f1 /proc/loadavg)" '
        /^#  tuning:/ { algo[$4] = $6 }
        /^ +[0-9]+ / { n++; row[n] = "round " r " " v " " $1 " time_us " $6 " busbw " $8 " wrong " $9 " " $13; size[n] = $1 }
        END { for (i = 1; i <= n; i++) print row[i], "algo", algo[size[i]], "load", l }'
  done
done
