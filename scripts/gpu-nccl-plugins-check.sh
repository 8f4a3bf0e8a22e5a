#!/usr/bin/env bash
# Real NCCL (PyTorch's own libnccl) with ferroccl's plugins inside it (issue 28):
# torch.distributed, 2 processes on GPU 0 (one GPU each where there are two),
# a different NCCL_HOSTID per process so that NCCL connects them through its
# NET transport, which then is libnccl-net-socket.so; the tuner-rules and
# trace-profiler plugins are loaded too. Checks AllReduce (float32 8 B..32 MiB,
# bfloat16 and int32 at 1 Mi elements) and AllGather results, that NCCL's INFO
# log names the FerrocclSocket plugin, and prints AllReduce busbw at 64 MiB
# beside the same run on NCCL's own socket transport.
# Exits 0 on success, 1 on a failed check, 77 (skipped) without a GPU or PyTorch.
#
#   scripts/gpu-nccl-plugins-check.sh [DIST]   # DIST: a `cargo xtask dist` prefix (default target/dist)
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${1:-target/dist}
PY=${PYTHON:-python3}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-nccl-plugins-check: SKIP: no NVIDIA GPU"; exit 77
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() and torch.distributed.is_nccl_available() else 1)' 2>/dev/null; then
    echo "gpu-nccl-plugins-check: SKIP: no PyTorch with CUDA and NCCL for $PY"; exit 77
fi
[ -f "$DIST/lib/libnccl-net-socket.so" ] || cargo xtask dist --out "$DIST"
LIB=$(cd "$DIST/lib" && pwd)
SCRIPT=$(mktemp --suffix=.py)
WORK=$(mktemp -d)
trap 'rm -rf "$SCRIPT" "$WORK"' EXIT
cat >"$SCRIPT" <<'PYEOF'
import os, sys, time
import torch, torch.distributed as dist
import torch.multiprocessing as mp

def busbw(dev, world, nbytes, iters=10):
    x = torch.ones(nbytes // 4, device=dev)
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    t = (time.perf_counter() - t0) / iters
    return nbytes / t * 2 * (world - 1) / world / 1e9

def run(rank, world, port, check):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_HOSTID=f"ferroccl-host-{rank}")
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    if check:
        n = 2
        while n * 4 <= 32 << 20:
            x = torch.arange(n, device=dev, dtype=torch.float32) % 1024 + rank
            dist.all_reduce(x)
            want = (torch.arange(n, device=dev, dtype=torch.float32) % 1024) * world + world * (world - 1) / 2
            assert torch.equal(x, want), f"all_reduce float32 {n * 4} B"
            n *= 8
        for dt in (torch.bfloat16, torch.int32):
            x = torch.full((1 << 20,), rank + 1, device=dev, dtype=dt)
            dist.all_reduce(x)
            assert torch.equal(x, torch.full((1 << 20,), world * (world + 1) // 2, device=dev, dtype=dt)), f"all_reduce {dt}"
        parts = [torch.empty(1000, device=dev, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(parts, torch.full((1000,), rank, device=dev, dtype=torch.int64))
        assert all(torch.equal(p, torch.full((1000,), r, device=dev, dtype=torch.int64)) for r, p in enumerate(parts)), "all_gather"
    bw = busbw(dev, world, 64 << 20)
    dist.destroy_process_group()
    print(f"nccl rank {rank} ok busbw_64MiB {bw:.3f} GB/s", flush=True)

if __name__ == "__main__":
    port, check = int(sys.argv[1]), sys.argv[2] == "check"
    mp.spawn(run, args=(2, port, check), nprocs=2, join=True)
PYEOF
common=(NCCL_SOCKET_IFNAME=lo NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,TUNING)
set +e
env "${common[@]}" NCCL_NET_PLUGIN="$LIB/libnccl-net-socket.so" \
    NCCL_TUNER_PLUGIN="$LIB/libnccl-tuner-rules.so" NCCL_PROFILER_PLUGIN="$LIB/libnccl-profiler-trace.so" \
    FERROCCL_TRACE_DIR="$WORK" LD_LIBRARY_PATH="$LIB:${LD_LIBRARY_PATH:-}" \
    timeout 500 "$PY" "$SCRIPT" 29541 check >"$WORK/ours.log" 2>&1
rc=$?
env "${common[@]}" NCCL_NET_PLUGIN=none NCCL_NET=Socket timeout 300 "$PY" "$SCRIPT" 29542 bw >"$WORK/nccl.log" 2>&1
rc2=$?
set -e
grep -E "NET/|[Tt]uner|[Pp]rofiler|ok busbw|Error|error|assert" "$WORK/ours.log" | head -60
if [ $rc -ne 0 ]; then tail -40 "$WORK/ours.log"; echo "gpu-nccl-plugins-check: FAILED (exit $rc)"; exit 1; fi
grep -q "FerrocclSocket" "$WORK/ours.log" || { echo "gpu-nccl-plugins-check: FAILED: NCCL did not name the FerrocclSocket plugin"; exit 1; }
for r in 0 1; do grep -q "nccl rank $r ok" "$WORK/ours.log" || { echo "gpu-nccl-plugins-check: FAILED: rank $r"; exit 1; }; done
echo "busbw at 64 MiB, ferroccl's socket plugin in NCCL: $(grep -o 'busbw_64MiB [0-9.]* GB/s' "$WORK/ours.log" | head -1)"
if [ $rc2 -eq 0 ]; then
    echo "busbw at 64 MiB, NCCL's own socket transport:     $(grep -o 'busbw_64MiB [0-9.]* GB/s' "$WORK/nccl.log" | head -1)"
else
    echo "(NCCL's own socket transport run failed, exit $rc2: no comparison)"
fi
echo "gpu-nccl-plugins-check: PASSED"
