#!/usr/bin/env bash
# One bounded pass over a GPU machine that has no Rust toolchain (issues 28 and
# 35): the GPU bundle's checks with short per-check limits, the device-buffer
# AllReduce rows (shared memory, P2P/CUMEM and P2P/IPC, socket plugin; steps on the GPU and
# staged), the device-to-device copy baseline, and issue 35's 16-core rows.
# Every check's output is appended to $OUT/all.log (under a "===== check"
# line) and one line per check to $OUT/summary (PASS/FAIL rc seconds), as each
# check ends, so that a run cut short still says what it did (two files: the
# device tool brings back only a few). SKIP="check ..." leaves checks out
# (e.g. those a shorter second run need not repeat).
#
# Usage (from the repository root, built here first):
#   cargo xtask gpu-bundle target/gpu-carry
#   benchmarks/gpu_release_carry.sh target/cpu-carry      # issue 35's binaries
#   OUT=/tmp/gpu-out benchmarks/gpu_machine_run.sh target/gpu-carry target/cpu-carry
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
PERF="bin/ferroccl-perf --ranks 2 --mem device all_reduce -b 8 -e 64M -f 8 -c 1"
chk info 30 bin/ferroccl-info plugins
# coll_device one test at a time (a hang costs its own limit only).
for t in p2p_ipc_two_processes_on_one_gpu p2p_cumem_two_processes_on_one_gpu p2p_host_buffers_two_processes_on_one_gpu \
  device_steps_run_on_the_gpu_over_shm \
  device_steps_run_on_the_gpu_over_the_network device_buffers_two_processes_match_the_reference \
  collectives_ordered_with_a_cuda_stream; do
  chk "coll_device.$t" 90 deps/coll_device "$t" --exact --nocapture --test-threads=1
done
chk reduce_bw 60 bin/cuda_reduce_bw
chk perf_p2p 90 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P $PERF"
chk perf_p2p_ipc 90 "NCCL_CUMEM_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P $PERF"
chk perf_shm_gpu_steps 90 "NCCL_P2P_DISABLE=1 $PERF"
chk perf_shm_staged 90 "NCCL_P2P_DISABLE=1 FERROCCL_DEVICE_STEPS=0 $PERF"
chk perf_socket_gpu_steps 120 "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_PLUGIN=socket $PERF"
chk perf_socket_staged 120 "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET_PLUGIN=socket FERROCCL_DEVICE_STEPS=0 $PERF"
PYTHON=${PYTHON:-python3} chk torch_libnccl 150 "scripts/gpu-torch-check.sh \"$B\""
if [ -n "$R" ] && [ -x "$R/run35.sh" ]; then
  chk issue35_16cores 200 "$R/run35.sh $R"
fi
chk cuda_transport 60 deps/cuda_transport --test-threads=1
chk conformance_gpu_memory 60 "bin/ferroccl-conformance lib/libnccl-net-socket.so --filter 'memory.cuda,memory.dmabuf'"
chk cuda_device 120 deps/cuda_device --test-threads=1
PYTHON=${PYTHON:-python3} chk torch_nccl_plugins 150 "scripts/gpu-nccl-plugins-check.sh \"$B\""
echo "done $(date -u)" | tee -a "$SUM"
