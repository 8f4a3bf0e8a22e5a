#!/usr/bin/env bash
# One bounded pass over a GPU machine that has no Rust toolchain (issues 28, 33
# and 35): PART=gpu runs the GPU bundle's checks with short per-check limits
# (coll_device's IPC/cuMem/host-buffer/stream tests one by one, cuda_device's
# ordering test), the device-buffer AllReduce rows 4 B .. 64 MiB (P2P/CUMEM,
# P2P/IPC, socket plugin, shared memory; two ranks as threads of one process)
# and real NCCL with our plugins beside NCCL's own socket transport; PART=cpu
# runs issues 33 and 35's rows on this machine's cores (socket put against
# send, 8 B against Open MPI, the first sweep row, the profiler overhead);
# PART=all (default) both, FULL=1 adds the checks earlier sessions passed,
# BUFFSIZE_ROW=1 the socket device row with 16 MiB steps; NEW=DIR (PART=cpu)
# runs newer builds against the bundle's, PROF_ROUNDS the profiler's rounds,
# BASE=DIR 8 B against an older build, NOCUDA=1 8 B against itself with CUDA
# hidden.
# Every check's output is appended to $OUT/all.log (under a "===== check"
# line) and one line per check to $OUT/summary (PASS/FAIL rc seconds), as each
# check ends, so that a run cut short still says what it did. SKIP="check ..."
# leaves checks out; ONLY="pattern ..." (shell globs) runs only the checks named.
#
# Usage (from the repository root, built here first):
#   cargo xtask gpu-bundle target/gpu-carry
#   cargo build --release -p ferroccl-profiler-trace --example dlbench && mkdir -p target/cpu-carry &&
#     cp target/release/examples/dlbench target/cpu-carry/     # optional: the trace plugin alone
#   OUT=/tmp/gpu-out PART=gpu benchmarks/gpu_machine_run.sh target/gpu-carry target/cpu-carry
set -uo pipefail
export REPO=$PWD
B=$(cd "${1:-target/gpu-carry}" && pwd)
R=$(cd "${2:-target/cpu-carry}" 2>/dev/null && pwd || true)
OUT=${OUT:-/tmp/gpu-out}
LOGS=$(mktemp -d)
mkdir -p "$OUT"
SUM=$OUT/summary
{
  date -u
  nvidia-smi -L 2>&1 | head -4
  nvidia-smi --query-gpu=driver_version,name,memory.total --format=csv,noheader 2>&1 | head -2
  echo "cpus $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
} | tee "$SUM"

# chk NAME LIMIT_S COMMAND...: runs COMMAND in the bundle directory.
chk() {
  local name=$1 lim=$2
  shift 2
  local s rc
  case " ${SKIP:-} " in *" $name "*) return 0 ;; esac
  if [ -n "${ONLY:-}" ]; then
    local p hit=
    for p in $ONLY; do [[ $name == $p ]] && hit=1; done
    [ -n "$hit" ] || return 0
  fi
  s=$(date +%s)
  (cd "$B" && timeout -k 5 "$lim" bash -c "$*") >"$LOGS/$name.log" 2>&1
  rc=$?
  { echo "===== $name (rc $rc)"; cat "$LOGS/$name.log"; } >>"$OUT/all.log"
  local v=PASS
  [ $rc = 0 ] || v=FAIL
  [ $rc = 77 ] && v=SKIP
  echo "$v $name rc=$rc $(($(date +%s) - s))s" | tee -a "$SUM"
}

# Links may not survive the copy to the machine: make them again.
(cd "$B" && for f in lib/libnccl-*.so; do [ -e "$(basename "$f")" ] || ln -s "$f" .; done
  [ -e lib/libnccl.so ] || ln -s libnccl.so.2 lib/libnccl.so)
export LD_LIBRARY_PATH=$B/lib FERROCCL_REQUIRE_GPU=1 FERROCCL_REQUIRE_NVRTC=1
# -b 4 -e 64M -f 4: 4 B (one float) .. 64 MiB, the issue's size, in 13 rows.
PERF="bin/ferroccl-perf --ranks 2 --mem device all_reduce -b 4 -e 64M -f 4 -c 1"
# PART picks a half (each fits one short device call): gpu (issue 28), cpu
# (issues 33 and 35 on this machine's cores), or all (default).
PART=${PART:-all}
if [ "$PART" != cpu ]; then
chk info 30 bin/ferroccl-info plugins
chk cuda_device.enqueued 60 deps/cuda_device enqueued_launches_run_in_order_before_the_wait --exact --nocapture --test-threads=1
# coll_device one test at a time (a hang costs its own limit only).
for t in p2p_cumem_two_processes_on_one_gpu p2p_host_buffers_two_processes_on_one_gpu p2p_ipc_two_processes_on_one_gpu \
  collectives_ordered_with_a_cuda_stream device_steps_run_on_the_gpu_over_shm \
  device_steps_run_on_the_gpu_over_the_network device_buffers_two_processes_match_the_reference; do
  chk "coll_device.$t" 60 deps/coll_device "$t" --exact --nocapture --test-threads=1
done
chk perf_p2p 60 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P $PERF"
chk perf_p2p_ipc 60 "NCCL_CUMEM_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P $PERF"
chk perf_socket_gpu_steps 60 "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_PLUGIN=socket $PERF"
# The socket device row with larger steps (NCCL_BUFFSIZE 16 MiB: a quarter as
# many per-step round trips), to tell per-step waits from the wire (issue 28).
[ -n "${BUFFSIZE_ROW:-}" ] && chk perf_socket_gpu_steps_buff16m 60 "NCCL_BUFFSIZE=16777216 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_PLUGIN=socket $PERF"
chk perf_shm_gpu_steps 60 "NCCL_P2P_DISABLE=1 $PERF"
# Two ranks as threads of one process (one CUDA context: no time slicing).
chk perf_threads_p2p 45 "bin/ferroccl-perf -t 2 --mem device all_reduce -b 4 -e 64M -f 64 -c 1"
PYTHON=${PYTHON:-python3} chk torch_nccl_plugins 150 "scripts/gpu-nccl-plugins-check.sh \"$B\""
[ -n "${FULL:-}" ] && {
  chk reduce_bw 60 bin/cuda_reduce_bw
  PYTHON=${PYTHON:-python3} chk torch_libnccl 150 "scripts/gpu-torch-check.sh \"$B\""
  chk cuda_transport 60 deps/cuda_transport --test-threads=1
  chk conformance_gpu_memory 60 "bin/ferroccl-conformance lib/libnccl-net-socket.so --filter 'memory.cuda,memory.dmabuf'"
  chk cuda_device 120 deps/cuda_device --test-threads=1
}
fi
if [ "$PART" != gpu ]; then
  # Issues 33 and 35 on this machine's cores, from the bundle's release builds
  # (one flat directory, as the benchmark scripts' B expects). With NEW (a
  # directory of newer builds: ferroccl-perf, ferroccl-rma-bench, the socket
  # and trace plugins), those replace the bundle's and the bundle's own become
  # the baseline run beside them: put/send with each socket plugin in
  # alternating passes, 8 B with both ferroccl-perf builds in every round.
  unset FERROCCL_REQUIRE_GPU FERROCCL_REQUIRE_NVRTC
  F=$(mktemp -d)
  ln -s "$B"/bin/* "$B"/lib/* "$F"/
  [ -x "${R:-}/dlbench" ] && ln -sf "$R/dlbench" "$F/dlbench"
  RMA="NCCL_SOCKET_IFNAME=lo NCCL_SOCKET_RMA_ENABLE=1"
  if [ -n "${NEW:-}" ]; then
    O=$F F=$(mktemp -d)
    ln -s "$O"/* "$F"/
    for f in "$NEW"/*; do ln -sf "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$F"/; done
    for pass in 1 2 3; do
      chk "rma_put_vs_send.old.$pass" 60 "$RMA $F/ferroccl-rma-bench --plugin $O/libnccl-net-socket.so --rounds 5 --sizes 1M,4M,16M"
      chk "rma_put_vs_send.new.$pass" 60 "$RMA $F/ferroccl-rma-bench --plugin $F/libnccl-net-socket.so --rounds 5 --sizes 1M,4M,16M"
    done
    chk latency_8b_vs_mpi 120 "cd $REPO && B=$F benchmarks/latency_8b_vs_mpi.sh 7 5000 $O/ferroccl-perf"
  else
    chk rma_put_vs_send 60 "$RMA bin/ferroccl-rma-bench --plugin lib/libnccl-net-socket.so --rounds 15 --sizes 1M,4M,16M"
    chk latency_8b_vs_mpi 75 "cd $REPO && B=$F benchmarks/latency_8b_vs_mpi.sh 5 5000"
  fi
  # BASE=DIR: 8 B against an older flat build directory (its ferroccl-perf
  # and socket plugin) in every round; NOCUDA=1: against the same build with
  # CUDA hidden (CUDA_VISIBLE_DEVICES empty: cuInit fails, so no operation
  # asks the driver what its buffers are), the classification's share.
  [ -n "${BASE:-}" ] && chk latency_8b_vs_base 120 "cd $REPO && B=$F benchmarks/latency_8b_vs_mpi.sh 7 5000 $(cd "$BASE" && pwd)/ferroccl-perf"
  if [ -n "${NOCUDA:-}" ]; then
    printf '#!/bin/sh\nCUDA_VISIBLE_DEVICES= exec "%s/ferroccl-perf" "$@"\n' "$F" >"$F/ferroccl-perf-nocuda"
    chmod +x "$F/ferroccl-perf-nocuda"
    chk latency_8b_vs_nocuda 120 "cd $REPO && B=$F benchmarks/latency_8b_vs_mpi.sh 7 5000 $F/ferroccl-perf-nocuda"
  fi
  chk first_row 90 "cd $REPO && B=$F benchmarks/first_row.sh 5"
  [ -x "$F/dlbench" ] && chk dlbench 30 "$F/dlbench 40000 $F/libnccl-profiler-trace.so"
  chk profiler_overhead $((40 * ${PROF_ROUNDS:-3} + 30)) "cd $REPO && B=$F NOOP=1 benchmarks/profiler_overhead.sh ${PROF_ROUNDS:-3}"
fi
echo "done $(date -u)" | tee -a "$SUM"
