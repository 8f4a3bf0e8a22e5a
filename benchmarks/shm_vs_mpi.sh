#!/usr/bin/env bash
# Side-by-side benchmark of ferroccl's shared-memory transport against Open MPI's
# default shared memory (the vader BTL), issue 15: AllReduce, AllGather,
# ReduceScatter and Broadcast at 1 MiB and 64 MiB on 2 and 4 ranks, and 8-byte
# AllReduce latency on 2 ranks. Every round runs each case for ferroccl then for
# Open MPI, so the two tools see the same machine load; the summary gives
# per-case medians over the rounds. Both time the average of N back-to-back
# operations after a warmup (nccl-tests conventions, float32, sum).
#
# Usage: benchmarks/shm_vs_mpi.sh [ROUNDS] [OUT.csv]   (defaults: 5, /tmp/shm_vs_mpi.csv)
# LAUNCH=mpirun starts ferroccl's ranks with mpirun too (Open MPI binds each rank
# to a core, as it does for its own ranks); the default is `ferroccl-perf --ranks N`
# (unbound processes).
# Needs: cargo, mpicc/mpirun (Open MPI 4.1), python3.
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
check_ranks 4   # the largest case runs 4 ranks
ROUNDS=${1:-5}
CSV=${2:-/tmp/shm_vs_mpi.csv}
cargo build --release -q -p ferroccl-examples -p ferroccl-net-socket
mpicc -O2 -o /tmp/mpi_colls benchmarks/mpi_colls.c
PERF=target/release/ferroccl-perf
MPIRUN=(mpirun --oversubscribe --allow-run-as-root)
echo "round,tool,nranks,op,bytes,time_us,busbw,ip_time_us,ip_busbw,load" > "$CSV"

load() { cut -d' ' -f1 /proc/loadavg; }

# ferroccl: one size per run; out-of-place and in-place columns.
ours() { # round nranks op bytes iters warmup
  local out
  if [ "${LAUNCH:-}" = mpirun ]; then
    out=$("${MPIRUN[@]}" -np "$2" -x NCCL_COMM_ID=127.0.0.1:$((29600 + RANDOM % 300)) -x NCCL_NET_PLUGIN=socket \
          "$PERF" -b "$4" -e "$4" -n "$5" -w "$6" "$3" 2>&1) || { echo "$out" >&2; return 1; }
  else
    out=$(NCCL_NET_PLUGIN=socket "$PERF" --ranks "$2" -b "$4" -e "$4" -n "$5" -w "$6" "$3" 2>&1) || { echo "$out" >&2; return 1; }
  fi
  echo "$out" | awk -v r="$1" -v n="$2" -v op="$3" -v l="$(load)" \
    '/^ +[0-9]+ / { printf "%s,ferroccl,%s,%s,%s,%s,%s,%s,%s,%s\n", r, n, op, $1, $6, $8, $10, $12, l }' >> "$CSV"
}

theirs() { # round nranks op bytes iters warmup
  "${MPIRUN[@]}" -np "$2" /tmp/mpi_colls "$3" "$4" "$4" 2 "$5" "$6" | awk -v r="$1" -v n="$2" -v l="$(load)" \
    '!/^#/ { printf "%s,openmpi,%s,%s,%s,%s,%s,,,%s\n", r, n, $1, $2, $4, $6, l }' >> "$CSV"
}

for round in $(seq "$ROUNDS"); do
  echo "round $round (load $(load))" >&2
  ours "$round" 2 all_reduce 8 5000 200
  theirs "$round" 2 all_reduce 8 5000 200
  for n in 2 4; do
    for op in all_reduce all_gather reduce_scatter broadcast; do
      ours "$round" "$n" "$op" 1048576 200 20
      theirs "$round" "$n" "$op" 1048576 200 20
      ours "$round" "$n" "$op" 67108864 10 2
      theirs "$round" "$n" "$op" 67108864 10 2
    done
  done
done

python3 - "$CSV" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cases = sorted({(int(r["nranks"]), r["op"], int(r["bytes"])) for r in rows})
loads = [float(r["load"]) for r in rows]
print(f"# {len({r['round'] for r in rows})} rounds, load average {min(loads):.1f}-{max(loads):.1f}")
print("| ranks | op | size | ferroccl | Open MPI | ratio |")
print("|---:|---|---:|---:|---:|---:|")
for n, op, b in cases:
    sel = [r for r in rows if (int(r["nranks"]), r["op"], int(r["bytes"])) == (n, op, b)]
    key = "time_us" if b <= 64 else "busbw"
    ours = statistics.median(float(r[key]) for r in sel if r["tool"] == "ferroccl")
    mpi = statistics.median(float(r[key]) for r in sel if r["tool"] == "openmpi")
    unit = "us" if key == "time_us" else "GB/s"
    size = f"{b} B" if b < 1024 else f"{b >> 20} MiB"
    ratio = ours / mpi if mpi else float("nan")
    print(f"| {n} | {op} | {size} | {ours:.2f} {unit} | {mpi:.2f} {unit} | {ratio:.2f}x |")
EOF
