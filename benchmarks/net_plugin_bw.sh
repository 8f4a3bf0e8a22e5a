#!/usr/bin/env bash
# Net plugin bandwidth as NCCL drives it, beside raw TCP (issue 36, BENCHMARKS.md
# §1, plugins/net-socket/BENCHMARKS.md): builds benchmarks/net_plugin_bw.c (with
# $CC or cc) and the socket plugin (release), then runs the two-process C host
# on loopback: 4 KiB .. 64 MiB (x2), 1, 8 and 32 requests in flight, ROUNDS
# rounds, each plugin measurement paired with a raw TCP one (order alternating).
# Usage: benchmarks/net_plugin_bw.sh [ROUNDS] [net_plugin_bw options...]
#   e.g. benchmarks/net_plugin_bw.sh 9 -b 4M -e 4M -w 8      (one point)
#        benchmarks/net_plugin_bw.sh 5 -d                     (both directions at once)
# Environment: SO, a plugin .so to run instead of building
# target/release/libnccl_net_socket.so (A/B of builds, third-party plugins);
# NCCL_SOCKET_IFNAME (default =lo). Take the bench lock around timed runs:
#   flock /tmp/ferroccl-bench.lock benchmarks/net_plugin_bw.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
ROUNDS=${1:-5}
shift $(($# > 0 ? 1 : 0))
if [ -z "${SO:-}" ]; then
  cargo build --release -q -p ferroccl-net-socket
  SO=target/release/libnccl_net_socket.so
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"${CC:-cc}" -O2 -std=c11 -D_GNU_SOURCE -pthread -o "$TMP/net_plugin_bw" benchmarks/net_plugin_bw.c -ldl -lm
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-=lo}
machine_header
echo "# plugin $SO"
"$TMP/net_plugin_bw" -p "$SO" -r "$ROUNDS" "$@"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
