#!/usr/bin/env bash
# Two hosts on one machine (issue 30), links shaped with tc: AllReduce (1 rank
# per host, 1 MiB and 64 MiB, every result checked) on clean 10 Gbit/s links,
# with 1% random loss on every host's ingress, and with host 1's link at
# 1 Gbit/s under a 5 s no-progress watchdog (a slow link must complete and
# nothing may be blamed). Each configuration runs with the socket plugin's
# default settings and with one extra stream (NCCL_SOCKET_NTHREADS=2
# NCCL_NSOCKS_PERTHREAD=1). One line per run: size:busbw(#wrong) and the
# summary's OK/FAILED.
#
# Usage: benchmarks/netns_shaped.sh [ROUNDS]   (default 3)
# Needs root, cargo, nft (scripts/system-deps.sh ensure test netns). Take the
# bench lock: flock /tmp/ferroccl-bench.lock benchmarks/netns_shaped.sh 3
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
ROUNDS=${1:-3}
NAME=nsshaped
S=scripts/netns-cluster.sh
cargo build --release -q -p ferroccl-examples -p ferroccl-net-socket
PERF=$PWD/target/release/ferroccl-perf
"$S" --name "$NAME" up 2 --rate 10gbit >/dev/null
trap '"$S" --name "$NAME" down >/dev/null' EXIT

one() { # label env...
    local label=$1
    shift
    printf "%-36s %s\n" "$label" "$(env NCCL_NET_PLUGIN=socket FERROCCL_TIMEOUT_SEC=5 "$@" "$PERF" --hosts 2 --cluster "$NAME" \
        all_reduce -b 1M -e 64M -f 64 -n 5 -w 1 -c 1 2>&1 |
        awk '/Out of bounds/ { ok = $NF } /rror/ { print } !/^#/ && NF > 10 { printf "%s:%s(#wrong %s) ", $1, $8, $9 } END { print ok }')"
}
streams=(NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=1)
for r in $(seq "$ROUNDS"); do
    echo "round $r (load $(cut -d' ' -f1 /proc/loadavg))"
    "$S" --name "$NAME" shape all --clear >/dev/null
    "$S" --name "$NAME" shape all --rate 10gbit >/dev/null
    one "10gbit"
    one "10gbit, 2 streams" "${streams[@]}"
    "$S" --name "$NAME" shape all --loss 1 >/dev/null
    one "10gbit + 1% loss"
    one "10gbit + 1% loss, 2 streams" "${streams[@]}"
    "$S" --name "$NAME" shape all --clear >/dev/null
    "$S" --name "$NAME" shape 0 --rate 10gbit >/dev/null
    "$S" --name "$NAME" shape 1 --rate 1gbit >/dev/null
    one "host 1 at 1gbit (watchdog 5 s)"
    one "host 1 at 1gbit, 2 streams" "${streams[@]}"
done
echo "TCP retransmissions on host 0: $("$S" --name "$NAME" exec 0 -- nstat -az TcpRetransSegs | awk '/Retrans/ { print $2 }')"
