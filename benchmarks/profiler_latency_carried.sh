#!/usr/bin/env bash
# Issue 35 on a many-core machine without cargo (carried release builds; usage: REPO=<repository root> benchmarks/profiler_latency_carried.sh DIR),
# from the repository root: the trace plugin alone (dlbench), the profiler
# overhead (none / noop / stamp floor / trace before / trace after,
# interleaved) and 8-byte AllReduce against Open MPI.
set -uo pipefail
R=$(cd "$1" && pwd)
cd "${REPO:-.}"
echo "# dlbench: old trace, new trace, stamp floor"
timeout 30 "$R/dlbench" 40000 "$R/old/libnccl-profiler-trace.so" "$R/libnccl-profiler-trace.so" "$R/libnccl-profiler-stamp.so"
echo "# profiler_overhead"
TRACE_SO="old=$R/old/libnccl-profiler-trace.so new=$R/libnccl-profiler-trace.so" B=$R NOOP=1 \
  timeout 130 benchmarks/profiler_overhead.sh 3
echo "# 8 B vs Open MPI"
B=$R timeout 60 benchmarks/latency_8b_vs_mpi.sh 5 5000
