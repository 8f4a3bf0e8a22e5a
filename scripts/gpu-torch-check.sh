#!/usr/bin/env bash
# GPU check of libnccl.so.2 (issue 31), for a machine with an NVIDIA GPU and
# PyTorch (CUDA build): a torch.distributed job (backend "nccl", 2 ranks as
# processes on GPU 0, or one GPU each where there are two) with ferroccl's
# libnccl.so.2 in LD_PRELOAD, so PyTorch's NCCL calls go to ferroccl. Checks
# all_reduce, all_gather, broadcast, reduce_scatter and a send/recv pair on
# CUDA tensors, then that the process really used ferroccl (the NCCL_DEBUG
# version line). Exits 0 on success, 1 on a failed check, 77 (skipped) without
# a GPU or PyTorch.
#
#   scripts/gpu-torch-check.sh [DIST]      # DIST: a `cargo xtask dist` prefix (default target/dist)
#
# Not run by CI (no GPU there); run it where a GPU is lent.
set -euo pipefail
cd "$(dirname "$0")/.."
DIST=${1:-target/dist}
PY=${PYTHON:-python3}
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-torch-check: SKIPPED: no NVIDIA GPU"; exit 77
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-torch-check: SKIPPED: no PyTorch with CUDA for $PY"; exit 77
fi
[ -f "$DIST/lib/libnccl.so.2" ] || cargo xtask dist --out "$DIST"
LIB=$(cd "$DIST/lib" && pwd)
SCRIPT=$(mktemp --suffix=.py)
LOG=$(mktemp)
trap 'rm -f "$SCRIPT" "$LOG"' EXIT
cat >"$SCRIPT" <<'PYEOF'
import os, sys
import torch, torch.distributed as dist
import torch.multiprocessing as mp

def run(rank, world):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    n = 1 << 16
    x = torch.arange(n, device=dev, dtype=torch.float32) + rank
    dist.all_reduce(x)
    want = (torch.arange(n, device=dev, dtype=torch.float32) * world + world * (world - 1) / 2)
    assert torch.equal(x, want), "all_reduce"
    parts = [torch.empty(4, device=dev, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(parts, torch.full((4,), rank, device=dev, dtype=torch.int64))
    assert all(torch.equal(p, torch.full((4,), r, device=dev, dtype=torch.int64)) for r, p in enumerate(parts)), "all_gather"
    b = torch.full((8,), 7.0 if rank == 0 else 0.0, device=dev, dtype=torch.bfloat16)
    dist.broadcast(b, src=0)
    assert torch.equal(b, torch.full((8,), 7.0, device=dev, dtype=torch.bfloat16)), "broadcast"
    out = torch.empty(3, device=dev)
    dist.reduce_scatter_tensor(out, torch.ones(3 * world, device=dev))
    assert torch.equal(out, torch.full((3,), float(world), device=dev)), "reduce_scatter"
    if world > 1:
        t = torch.full((5,), float(rank), device=dev)
        if rank == 0:
            dist.send(t, 1)
        elif rank == 1:
            dist.recv(t, 0)
            assert torch.equal(t, torch.zeros(5, device=dev)), "send/recv"
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print(f"torch rank {rank} ok", flush=True)

if __name__ == "__main__":
    world = 2
    mp.spawn(run, args=(world,), nprocs=world, join=True)
PYEOF
set +e
LD_PRELOAD="$LIB/libnccl.so.2" LD_LIBRARY_PATH="$LIB:${LD_LIBRARY_PATH:-}" \
    NCCL_NET_PLUGIN=socket NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=VERSION FERROCCL_TIMEOUT_SEC=120 \
    timeout 600 "$PY" "$SCRIPT" >"$LOG" 2>&1
rc=$?
set -e
cat "$LOG"
if [ $rc -ne 0 ]; then echo "gpu-torch-check: FAILED (exit $rc)"; exit 1; fi
if ! grep -q "NCCL version 2.30.7+ferroccl" "$LOG"; then
    echo "gpu-torch-check: FAILED: PyTorch did not use ferroccl's libnccl.so.2 (no ferroccl version line)"; exit 1
fi
for r in 0 1; do grep -q "torch rank $r ok" "$LOG" || { echo "gpu-torch-check: FAILED: rank $r"; exit 1; }; done
echo "gpu-torch-check: PASSED"
