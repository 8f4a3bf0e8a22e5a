#!/usr/bin/env python3
"""Model choice vs. forced choices: AllReduce sweeps with ferroccl-perf.

Per rank count and per size (8 B .. 64 MiB, x4 steps), runs rounds in which every
configuration is launched once at that size, one after the other, so a change in
the host's load hits all configurations of a round alike:

* model      -- no NCCL_ALGO: the tuning model's own choice;
* ring, tree -- NCCL_ALGO=ring / NCCL_ALGO=allreduce:tree (the forced choices);
* ring-ag / ring-rs (2 KiB .. 128 KiB) -- the ring with the all-gather + local
  reduce variant forced on / off (FERROCCL_SMALL_ALLREDUCE_BYTES=1G / 0);
* ring-1ch / ring-2ch (>= 512 KiB) -- the ring on one channel / on every channel
  (FERROCCL_MIN_CHANNEL_BYTES=1T / 1).

Prints per size the median time (us, out of place) of each configuration, the
model's decision (from --json's "tuning"), the forced configuration that decision
equals, and how far the model's choice is from the best forced (NCCL_ALGO) choice.

    benchmarks/tune_sweep.py --ranks 2,4,8 --rounds 5 [--perf target/release/ferroccl-perf] [KEY=VALUE ...]

With --hosts K (and --cluster NAME), the ranks run on the first K hosts of a
simulated cluster (scripts/netns-cluster.sh up K, as root): nNodes = K for the
model, the network between hosts, shared memory inside them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def configs(size):
    c = [
        ("model", {}),
        ("ring", {"NCCL_ALGO": "ring"}),
        ("tree", {"NCCL_ALGO": "allreduce:tree"}),
    ]
    if 2 * KIB <= size <= 128 * KIB:
        c += [
            ("ring-ag", {"NCCL_ALGO": "ring", "FERROCCL_SMALL_ALLREDUCE_BYTES": str(GIB)}),
            ("ring-rs", {"NCCL_ALGO": "ring", "FERROCCL_SMALL_ALLREDUCE_BYTES": "0"}),
        ]
    if size >= 512 * KIB:
        c += [
            ("ring-1ch", {"NCCL_ALGO": "ring", "FERROCCL_MIN_CHANNEL_BYTES": str(1 << 40)}),
            ("ring-2ch", {"NCCL_ALGO": "ring", "FERROCCL_MIN_CHANNEL_BYTES": "1"}),
        ]
    return c


def iters(size):
    if size <= 32 * KIB:
        return 100, 10
    if size <= 512 * KIB:
        return 30, 3
    if size <= 8 * MIB:
        return 8, 1
    return 3, 1


def run(perf, nranks, size, env, hosts=None, cluster=None):
    n, w = iters(size)
    where = ["--hosts", str(hosts), "--cluster", cluster] if hosts else []
    cmd = [perf, *where, "--ranks", str(nranks), "-b", str(size), "-e", str(size), "-n", str(n), "-w", str(w), "-c", "1", "--json", "all_reduce"]
    e = dict(os.environ)
    e.setdefault("NCCL_NET_PLUGIN", "socket")
    e.update(env)
    out = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} {env} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    r = json.loads(out.stdout)["results"][0]
    if r["out_of_place"]["wrong"]:
        sys.exit(f"{cmd} {env}: wrong values")
    return r


def label(t):
    s = f'{t["algo"]}/{t["proto"]} {t["nchannels"]}ch'
    return s + (" ag" if t["allgather_reduce"] else "")


def equivalent(t):
    """The forced configuration whose decision is the model's (same algorithm;
    channels and the all-gather variant follow the same thresholds)."""
    return "tree" if t["algo"] == "Tree" else "ring"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(str(8 * 4**i) for i in range(12)) + f",{64 * MIB}")
    ap.add_argument("--perf", default="target/release/ferroccl-perf")
    ap.add_argument("--configs", default="", help="only these configurations (comma list), e.g. model,ring,tree")
    ap.add_argument("--hosts", type=int, default=0, help="run on K hosts of a netns-cluster.sh cluster")
    ap.add_argument("--cluster", default="fcc", help="the cluster's --name (with --hosts)")
    ap.add_argument("env", nargs="*", help="KEY=VALUE for every run")
    a = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in a.env)
    sizes = [int(s) for s in a.sizes.split(",")]
    for n in [int(x) for x in a.ranks.split(",")]:
        where = f" on {a.hosts} hosts" if a.hosts else ""
        print(f"\n{n} ranks{where}: medians of {a.rounds} rounds, out-of-place us\n")
        print("| size | model | ring | tree | ring-ag | ring-rs | ring-1ch | ring-2ch | model's decision | = | model vs best of ring/tree |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
        for size in sizes:
            times, decision = {}, None
            for _ in range(a.rounds):
                for name, env in configs(size):
                    if a.configs and name not in a.configs.split(","):
                        continue
                    r = run(a.perf, n, size, {**extra, **env}, a.hosts, a.cluster)
                    times.setdefault(name, []).append(r["out_of_place"]["time_us"])
                    if name == "model":
                        decision = r.get("tuning")
            med = {k: statistics.median(v) for k, v in times.items()}
            best = min(med["ring"], med["tree"])
            eq = equivalent(decision) if decision else "model"
            chosen = med[eq]
            dev = (chosen - best) / best * 100
            cell = lambda k: f"{med[k]:.1f}" if k in med else ""
            print(
                f"| {size} | {cell('model')} | {cell('ring')} | {cell('tree')} | {cell('ring-ag')} | {cell('ring-rs')} | "
                f"{cell('ring-1ch')} | {cell('ring-2ch')} | {label(decision) if decision else '?'} | {eq} | {dev:+.1f}% |",
                flush=True,
            )


if __name__ == "__main__":
    main()
