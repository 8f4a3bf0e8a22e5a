#!/usr/bin/env bash
# Issue 28: where the ~1 ms per-operation floor of device-buffer collectives
# comes from (BENCHMARKS §14.2). On the GPU machine, from the repository root,
# with the GPU bundle carried in $1 (default target/gpu-carry); everything goes to
# one log ($OUT/diag.log, or stdout without $OUT), each step time-limited:
#  1. the compute mode;
#  2. benchmarks/gpu_floor_probe.py: a launch+synchronize alone, with a second
#     process beside it, and a dependent hand-off between two processes and
#     between two threads of one process (PyTorch);
#  3. ferroccl-perf device-buffer AllReduce with two ranks as two processes
#     (P2P/IPC) and as two threads of one process (P2P/direct pointer, one
#     CUDA context), then both over shared memory (P2P off);
#  4. issue 33's socket put-against-send row on this machine's cores.
set -uo pipefail
B=$(cd "${1:-target/gpu-carry}" && pwd)
REPO=$PWD
LOG=${OUT:+$OUT/diag.log}
LOG=${LOG:-/dev/stdout}
export LD_LIBRARY_PATH=$B/lib
(cd "$B" && for f in lib/libnccl-*.so; do [ -e "$(basename "$f")" ] || ln -s "$f" .; done)
step() {
  local lim=$1
  shift
  echo "===== $* ($(date -u +%T))"
  (cd "$B" && timeout -k 5 "$lim" bash -c "$*") 2>&1
  echo "rc=$?"
}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
  echo "cpus $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  step 150 "python3 $REPO/benchmarks/gpu_floor_probe.py 2000"
  P="bin/ferroccl-perf --mem device all_reduce -c 1 -n 20 -w 5"
  step 60 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=P2P $P --ranks 2 -b 8 -e 2M -f 16 | grep -v '^#  Rank\|^$'"
  step 60 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=P2P $P -t 2 -b 8 -e 2M -f 16 | grep -v '^#  Rank\|^$'"
  step 60 "NCCL_P2P_DISABLE=1 $P --ranks 2 -b 8 -e 2M -f 16 | grep -v '^#  Rank\|^$'"
  step 60 "NCCL_P2P_DISABLE=1 $P -t 2 -b 8 -e 2M -f 16 | grep -v '^#  Rank\|^$'"
  step 60 "$P -t 2 -b 64M -e 64M | grep -v '^#  Rank\|^$'"
  step 90 "NCCL_SOCKET_IFNAME=lo NCCL_SOCKET_RMA_ENABLE=1 bin/ferroccl-rma-bench --plugin lib/libnccl-net-socket.so --rounds 15 --sizes 1M,4M,16M"
  date -u
} >>"$LOG" 2>&1
