#!/usr/bin/env bash
# CPU that profiling adds per 8-byte AllReduce and rank (issue 14, BENCHMARKS.md §8.4),
# measured by attribution rather than by run time: the ranks spin while they wait, so
# their CPU time is their wall time. One 2-rank run over the socket plugin
# (NCCL_SHM_DISABLE=1) under `perf record -g` (frame-pointer call chains: build with
# RUSTFLAGS="-C force-frame-pointers=yes"); recording is switched off through perf's
# control fd when the result row is printed, so the trace plugin's finalize (JSON
# writing) is not sampled. A sample counts as the profiler's when a frame of its call
# chain is profiler code (the trace plugin, ferroccl::profiler, the group API events,
# prof_begin/prof_end, the SDK's net-profiler glue, the socket plugin's ProfRequest).
# Prints ns of sampled CPU per op and rank in profiler code, in everything, and in
# the profiler plugin alone (a frame of its DSO in the chain, kernel work it
# caused included: page faults, the zeroing of fresh pages), then the part of it
# on the threads that record events and the part on the trace plugin's helper
# thread (`trace-prefault`, which faults in log memory ahead of the writers).
# Usage: benchmarks/profiler_cpu.sh MASK N [SO_DIR]
#   MASK: NCCL_PROFILE_EVENT_MASK (e.g. 32767, 0) or `none` (no profiler)
#   SO_DIR: a directory of plugin .so files put first on LD_LIBRARY_PATH (A/B of plugin
#   builds; the loader takes the trace plugin from there under its NCCL name,
#   libnccl-profiler-trace.so; another plugin, such as benchmarks/profiler_noop.c's
#   stamp floor, under that name is measured the same way)
# Environment: B (build dir, default target/release), F (sampling Hz, default 20000).
set -euo pipefail
. "$(dirname "$0")/lib/machine.sh"
machine_header
check_ranks 2
M=$1; N=$2; SO=${3:-}
B=${B:-target/release}; F=${F:-20000}
export LD_LIBRARY_PATH=${SO:+$SO:}$B NCCL_NET_PLUGIN=socket NCCL_SHM_DISABLE=1
D=$(mktemp -d); trap 'rm -rf "$D"' EXIT
args=()
if [ "$M" != none ]; then export NCCL_PROFILE_EVENT_MASK=$M; args=(--trace "$D/trc"); fi
mkfifo "$D/ctl"; exec 9<>"$D/ctl"
perf record -q -F "$F" -g --control fd:9 -o "$D/perf.data" -- \
  "$B/ferroccl-perf" --ranks 2 -b 8 -e 8 -n "$N" -w 100 "${args[@]}" all_reduce 2>&1 |
  while IFS= read -r line; do
    if [[ $line =~ ^\ +8\ + ]]; then echo disable >&9; echo "$line"; fi
  done
perf script -i "$D/perf.data" -F comm,tid,ip,sym,dso 2>/dev/null | python3 -c '
import re, sys
F, N = float(sys.argv[1]), int(sys.argv[2])
ops = 2 * 2 * (N + 100)  # 2 ranks x (out-of-place + in-place) x (n + warmup)
fin = re.compile(r"finalize|to_chrome|recs_of|nccl_profiler_trace::collect|serde_json")
prof = re.compile(r"libnccl[-_]profiler[-_]trace|group::api_|sdk::net_profiler|ferroccl::profiler::|prof_begin|prof_end|ProfRequest|StepTracker|net_callback")
plug = re.compile(r"libnccl[-_]profiler[-_]trace")
n = {"prof": 0, "all": 0, "plug": 0, "helper": 0}
cur = None
comm = ""
def done(frames):
    text = "\n".join(frames)
    if fin.search(text):
        return
    n["all"] += 1
    if prof.search(text):
        n["prof"] += 1
    if plug.search(text):
        n["plug"] += 1
        if comm.startswith("trace-prefault"):
            n["helper"] += 1
for line in sys.stdin:
    if not line.strip():
        if cur is not None:
            done(cur)
        cur = None
    elif not line.startswith("\t"):
        cur = []
        comm = line.split()[0]
    elif cur is not None:
        cur.append(line.strip())
if cur is not None:
    done(cur)
ns = lambda k: n[k] / F * 1e9 / ops
print("profiler ns/op/rank: %.0f   all ns/op/rank: %.0f   plugin ns/op/rank: %.0f (recording threads %.0f, helper thread %.0f)"
      % (ns("prof"), ns("all"), ns("plug"), ns("plug") - ns("helper"), ns("helper")))
' "$F" "$N"
