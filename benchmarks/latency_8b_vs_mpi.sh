#!/usr/bin/env bash
# 8-byte AllReduce latency on 2 local ranks (shared memory), ferroccl against
# Open MPI 4.1's default shared memory, in interleaved rounds (issue 15's
# "at most 2x Open MPI" target; BENCHMARKS.md §5). With a second ferroccl-perf
# binary (e.g. a build of an older commit) each round runs it too, so a change
# is measured against its baseline on the same machine in the same minute.
#
# Usage: benchmarks/latency_8b_vs_mpi.sh [ROUNDS] [ITERS] [BASELINE_PERF]
#   (defaults: 5 rounds, 5000 iterations after 200 warmup, no baseline)
# Prints per round: each ferroccl's out-of-place/in-place time (µs), Open
# MPI's time (µs), the load average; then the medians over the rounds and the
# median of the per-round ratios ferroccl (out of place) / Open MPI. Runs
# everything under `nice -n -20` when permitted (root), as the quiet-machine
# figures in BENCHMARKS.md were taken.
# Environment: B, a build directory holding ferroccl-perf and the socket
# plugin, to run instead of building target/release (a machine without cargo).
# Needs: cargo (unless B), mpicc/mpirun (Open MPI).
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
check_ranks 2
ROUNDS=${1:-5}
ITERS=${2:-5000}
BASE=${3:-}
if [ -z "${B:-}" ]; then
  cargo build --release -q -p ferroccl-examples -p ferroccl-net-socket
  B=target/release
fi
mpicc -O2 -o /tmp/mpi_colls benchmarks/mpi_colls.c
NICE=()
if [ "$(id -u)" = 0 ]; then NICE=(nice -n -20); fi
ours() { # perf-binary
  LD_LIBRARY_PATH="$(dirname "$1")" NCCL_NET_PLUGIN=socket "${NICE[@]}" "$1" --ranks 2 -b 8 -e 8 -n "$ITERS" -w 200 all_reduce 2>&1 |
    awk '/^ +8 +[0-9]+ / { print $6 "/" $10 }'
}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for r in $(seq "$ROUNDS"); do
  line="round $r  ferroccl $(ours "$B/ferroccl-perf")"
  if [ -n "$BASE" ]; then line="$line  baseline $(ours "$BASE")"; fi
  mpi=$("${NICE[@]}" mpirun --oversubscribe --allow-run-as-root -np 2 /tmp/mpi_colls all_reduce 8 8 2 "$ITERS" 200 2>&1 |
    awk '/all_reduce/ { print $4 }')
  echo "$line  openmpi $mpi  load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$OUT"
done
# Medians: ferroccl out of place and in place, baseline, Open MPI, and the
# median of the per-round ratios ferroccl (out of place) / Open MPI.
awk '
  function med(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
  }
  {
    split($4, f, "/"); n++; o[n] = f[1]; i[n] = f[2]
    for (k = 5; k < NF; k++) {
      if ($k == "baseline") { split($(k+1), g, "/"); b[++nb] = g[1] }
      if ($k == "openmpi") { m[n] = $(k+1); q[n] = f[1] / $(k+1) }
    }
  }
  END {
    if (n == 0) exit
    line = sprintf("median of %d rounds: ferroccl %.3f/%.3f", n, med(o, n), med(i, n))
    if (nb) line = line sprintf("  baseline %.3f", med(b, nb))
    printf "%s  openmpi %.3f  ferroccl/openmpi (per-round ratios, out of place) %.2f\n", line, med(m, n), med(q, n)
  }' "$OUT"
