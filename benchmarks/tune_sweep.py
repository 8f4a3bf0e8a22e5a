#!/usr/bin/env python3
"""Model choice vs. forced choices: AllReduce sweeps with ferroccl-perf.

For each rank count, runs interleaved rounds of three configurations -- the
model's own choice (no NCCL_ALGO), NCCL_ALGO=ring and NCCL_ALGO=allreduce:tree --
over 8 B .. 64 MiB (x4 steps; small sizes with many iterations, large with few),
and prints per size the median time of each, the model's choice (from
--json's "tuning") and its distance from the best forced choice.

    benchmarks/tune_sweep.py --ranks 2,4,8 --rounds 3 [--perf target/release/ferroccl-perf]

Extra environment for every run can be given as KEY=VALUE arguments.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

CONFIGS = [
    ("model", {}),
    ("ring", {"NCCL_ALGO": "ring"}),
    ("tree", {"NCCL_ALGO": "allreduce:tree"}),
]
PARTS = [  # (min, max, iters, warmup)
    ("8", "128K", "100", "10"),
    ("512K", "64M", "5", "1"),
]


def run(perf, nranks, env, part):
    lo, hi, iters, warm = part
    cmd = [perf, "--ranks", str(nranks), "-b", lo, "-e", hi, "-f", "4", "-n", iters, "-w", warm, "-c", "1", "--json", "all_reduce"]
    e = dict(os.environ)
    e.setdefault("NCCL_NET_PLUGIN", "socket")
    e.update(env)
    out = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    doc = json.loads(out.stdout)
    return {r["size"]: r for r in doc["results"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--perf", default="target/release/ferroccl-perf")
    ap.add_argument("env", nargs="*", help="KEY=VALUE for every run")
    a = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in a.env)
    for n in [int(x) for x in a.ranks.split(",")]:
        times = {}  # (config, size) -> [us]
        choice = {}  # size -> tuning of the model run
        for rnd in range(a.rounds):
            for name, env in CONFIGS:
                for part in PARTS:
                    res = run(a.perf, n, {**extra, **env}, part)
                    for size, r in res.items():
                        if r["out_of_place"]["wrong"]:
                            sys.exit(f"{name} {n} ranks {size} B: wrong values")
                        times.setdefault((name, size), []).append(r["out_of_place"]["time_us"])
                        if name == "model" and r.get("tuning"):
                            t = r["tuning"]
                            choice[size] = f'{t["algo"]}/{t["proto"]}/{t["nchannels"]}ch' + ("/ag" if t["allgather_reduce"] else "")
            print(f"# {n} ranks: round {rnd + 1}/{a.rounds} done", file=sys.stderr)
        print(f"\n{n} ranks (medians of {a.rounds} interleaved rounds, out-of-place us)\n")
        print("| size | model | ring | tree | model's choice | vs best forced |")
        print("|---:|---:|---:|---:|---|---:|")
        for size in sorted({s for (_, s) in times}):
            med = {name: statistics.median(times[(name, size)]) for name, _ in CONFIGS}
            best = min(med["ring"], med["tree"])
            dev = (med["model"] - best) / best * 100
            print(f"| {size} | {med['model']:.1f} | {med['ring']:.1f} | {med['tree']:.1f} | {choice.get(size, '?')} | {dev:+.1f}% |")


if __name__ == "__main__":
    main()
