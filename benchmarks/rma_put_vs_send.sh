#!/usr/bin/env bash
# One-sided put against two-sided send through the same socket plugin, same run
# (issue 33's Performance row, BENCHMARKS.md "RMA put vs send"): builds
# ferroccl-rma-bench and the socket plugin (the dev profile unless PROFILE=release),
# then runs 2 ranks (threads) on loopback: 64 KiB .. 64 MiB (x4), ROUNDS rounds,
# put and send alternating first, 8 requests in flight, 256 MiB per measurement.
# Usage: benchmarks/rma_put_vs_send.sh [ROUNDS] [ferroccl-rma-bench options...]
#   PLUGIN=path.so: time that library instead of the one just built (an older
#   build, side by side with the new one in the same session).
#   e.g. benchmarks/rma_put_vs_send.sh 9 --sizes 4M        (one point)
# Take the bench lock around timed runs:
#   flock /tmp/ferroccl-bench.lock benchmarks/rma_put_vs_send.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
ROUNDS=${1:-5}
shift $(($# > 0 ? 1 : 0))
PROFILE=${PROFILE:-dev}
DIR=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
# Two builds: with `--bin`, cargo builds only binaries of every package named, so
# `-p ferroccl-net-socket` in the same command would not relink the plugin's .so.
CARGO_INCREMENTAL=0 cargo build -q --profile "$PROFILE" -p ferroccl-net-socket --lib
CARGO_INCREMENTAL=0 cargo build -q --profile "$PROFILE" -p ferroccl-examples --bin ferroccl-rma-bench
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
# The socket plugin offers its RMA devices only when asked.
export NCCL_SOCKET_RMA_ENABLE=1
machine_header
echo "# NCCL_SOCKET_NTHREADS=${NCCL_SOCKET_NTHREADS:-auto} NCCL_NSOCKS_PERTHREAD=${NCCL_NSOCKS_PERTHREAD:-auto} plugin=${PLUGIN:-target/$DIR/libnccl_net_socket.so}"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"target/$DIR/ferroccl-rma-bench" --plugin "${PLUGIN:-target/$DIR/libnccl_net_socket.so}" --rounds "$ROUNDS" "$@"
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
