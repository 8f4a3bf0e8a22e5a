#!/usr/bin/env python3
"""Issue 28: does a step that is "launch a kernel, then synchronize" cost a GPU
time slice when two processes share one GPU without MPS?

Prints, per mode, the mean microseconds of one tiny kernel launch plus
synchronize (alone, and with a second process doing the same at the same time),
and of one dependent hand-off (A: kernel+sync, then tell B; B: kernel+sync, then
tell A) between two processes and between two threads of one process. Needs
PyTorch with CUDA. Usage: python3 benchmarks/gpu_floor_probe.py [iterations]
"""
import multiprocessing as mp
import sys
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000


def launch_sync(n, q=None, start=None):
    import torch
    torch.cuda.set_device(0)
    x = torch.zeros(2, device="cuda")
    for _ in range(50):
        x.add_(1)
        torch.cuda.synchronize()
    if start is not None:
        start.wait()
    t = time.perf_counter()
    for _ in range(n):
        x.add_(1)
        torch.cuda.synchronize()
    us = (time.perf_counter() - t) / n * 1e6
    if q is not None:
        q.put(us)
    return us


def pingpong(n, me, rx, tx, q=None):
    import torch
    torch.cuda.set_device(0)
    x = torch.zeros(2, device="cuda")
    for _ in range(50):
        x.add_(1)
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        if me == 1:
            rx.get()
        x.add_(1)
        torch.cuda.synchronize()
        tx.put(1)
        if me == 0:
            rx.get()
    us = (time.perf_counter() - t) / n * 1e6
    if q is not None:
        q.put((me, us))


def main():
    ctx = mp.get_context("spawn")
    print(f"alone, one process: {launch_sync(N):.1f} us per launch+sync", flush=True)
    q, start = ctx.Queue(), ctx.Barrier(2)
    ps = [ctx.Process(target=launch_sync, args=(N, q, start)) for _ in range(2)]
    [p.start() for p in ps]
    r = [q.get(timeout=120) for _ in ps]
    [p.join(30) for p in ps]
    print(f"two processes at once: {r[0]:.1f} / {r[1]:.1f} us per launch+sync", flush=True)
    a, b, q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    ps = [ctx.Process(target=pingpong, args=(N, 0, a, b, q)), ctx.Process(target=pingpong, args=(N, 1, b, a, q))]
    [p.start() for p in ps]
    r = sorted(q.get(timeout=120) for _ in ps)
    [p.join(30) for p in ps]
    print(f"hand-off between two processes: {r[0][1]:.1f} us per round trip (2 kernels)", flush=True)
    import queue
    a, b = queue.Queue(), queue.Queue()
    ts = [threading.Thread(target=pingpong, args=(N, 0, a, b)), threading.Thread(target=pingpong, args=(N, 1, b, a))]
    t = time.perf_counter()
    [x.start() for x in ts]
    [x.join(120) for x in ts]
    print(f"hand-off between two threads (one context): {(time.perf_counter() - t) / N * 1e6:.1f} us per round trip incl. warm-up", flush=True)


if __name__ == "__main__":
    main()
