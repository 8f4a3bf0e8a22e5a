#!/usr/bin/env bash
# Profiler overhead (issue 14, BENCHMARKS.md §8): 2-rank AllReduce over the
# socket plugin (NCCL_SHM_DISABLE=1, so proxy steps and net-plugin events
# exist) without a profiler ("none") and with the trace profiler taking every
# event ("traceall"), at 8 B, 1 MiB and 64 MiB, modes interleaved and their
# order reversed per size. Prints: mode, bytes, time and busbw out of place,
# time and busbw in place. With NOOP=1, an 8-byte "noopall" line per round
# too: every event to a plugin that does nothing (benchmarks/profiler_noop.c,
# built with $CC or cc), the host's own share of the overhead; and a
# "stampall" line: the same plugin built with -DSTAMP, which only reads the
# TSC and stores it per call, the floor under any timestamping profiler.
# Usage: benchmarks/profiler_overhead.sh [ROUNDS]   (default 4)
# Environment: B, a build directory (holding ferroccl-perf and the plugins) to
# run instead of building target/release; SO, a directory of plugin .so files
# put first on LD_LIBRARY_PATH (A/B of plugin builds: the loader takes a
# plugin from there only under its NCCL name, libnccl-profiler-trace.so);
# TRACE_SO="LABEL=FILE ...", trace plugin builds to compare side by side:
# each replaces "traceall" by a mode "trace-LABEL" that loads FILE by its
# path (every event), in every round and at every size.
# At the end (with python3): per mode, the median 8-byte time (mean of out of
# place and in place) and the median of its per-round ratios to "none" (and
# of each trace mode to "stampall"); at 1 MiB and 64 MiB the median busbw
# ratio to "none".
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
check_ranks 2
ROUNDS=${1:-4}
if [ -z "${B:-}" ]; then
  cargo build --release -q -p ferroccl-examples -p ferroccl-net-socket -p ferroccl-profiler-trace
  B=target/release
fi
SO=${SO:-}
export LD_LIBRARY_PATH=${SO:+$SO:}$B NCCL_NET_PLUGIN=socket NCCL_SHM_DISABLE=1
TRC=$(mktemp -d)
trap 'rm -rf "$TRC"' EXIT
TRACES=traceall
declare -A TRACE_FILE=()
if [ -n "${TRACE_SO:-}" ]; then
  TRACES=
  for t in $TRACE_SO; do
    [ -f "${t#*=}" ] || { echo "TRACE_SO: ${t#*=} is not a file" >&2; exit 2; }
    TRACE_FILE[trace-${t%%=*}]=${t#*=}
    TRACES="$TRACES trace-${t%%=*}"
  done
  echo "# trace builds:$(for m in $TRACES; do printf ' %s=%s' "$m" "${TRACE_FILE[$m]}"; done)"
fi
MODES8="none $TRACES"   # the 8-byte modes of a round
if [ "${NOOP:-0}" = 1 ]; then
  MODES8="none noopall stampall $TRACES"
  "${CC:-cc}" -O2 -shared -fPIC -o "$TRC/libnccl-profiler-noop.so" benchmarks/profiler_noop.c
  "${CC:-cc}" -O2 -shared -fPIC -DSTAMP -o "$TRC/libnccl-profiler-stamp.so" benchmarks/profiler_noop.c
fi
run() { # mode perf-args...
  local mode=$1; shift
  case $mode in
    none) "$B/ferroccl-perf" --ranks 2 "$@" all_reduce ;;
    traceall) NCCL_PROFILE_EVENT_MASK=32767 "$B/ferroccl-perf" --ranks 2 "$@" --trace "$TRC" all_reduce ;;
    noopall) NCCL_PROFILER_PLUGIN="$TRC/libnccl-profiler-noop.so" "$B/ferroccl-perf" --ranks 2 "$@" all_reduce ;;
    stampall) NCCL_PROFILER_PLUGIN="$TRC/libnccl-profiler-stamp.so" "$B/ferroccl-perf" --ranks 2 "$@" all_reduce ;;
    trace-*) NCCL_PROFILER_PLUGIN="${TRACE_FILE[$mode]}" NCCL_PROFILE_EVENT_MASK=32767 \
      "$B/ferroccl-perf" --ranks 2 "$@" --trace "$TRC" all_reduce ;;
  esac 2>&1 | awk -v m="$mode" '/^ +[0-9]+ +[0-9]+ / { print m, $1, $6, $8, $10, $12 }'
}
for r in $(seq "$ROUNDS"); do
  echo "# round $r"
  for m in $MODES8; do run $m -b 8 -e 8 -n 3000 -w 100; done
  for m in $TRACES none; do run $m -b 1M -e 1M -n 200 -w 20; done
  for m in none $TRACES; do run $m -b 64M -e 64M -n 20 -w 3; done
done | tee "$TRC/rows"
command -v python3 >/dev/null || exit 0
python3 - "$TRC/rows" <<'PY'
import statistics as st, sys
rounds = []
for line in open(sys.argv[1]):
    f = line.split()
    if line.startswith("# round"):
        rounds.append({})
    elif len(f) == 6 and rounds:
        m, size = f[0], int(f[1])
        # 8 B: time (us, mean of out of place and in place); larger: busbw (GB/s, mean)
        rounds[-1][(m, size)] = (float(f[2]) + float(f[4])) / 2 if size == 8 else (float(f[3]) + float(f[5])) / 2
def ratios(a, b, size):
    return [r[(a, size)] / r[(b, size)] for r in rounds if (a, size) in r and (b, size) in r and r[(b, size)] > 0]
print(f"# summary over {len(rounds)} rounds (medians; ratios are medians of per-round ratios)")
modes8 = [m for (m, s) in (rounds[0] if rounds else {}) if s == 8]
for m in modes8:
    v = [r[(m, 8)] for r in rounds if (m, 8) in r]
    line = f"8 B {m}: {st.median(v):.2f} us, / none {st.median(ratios(m, 'none', 8)):.3f}"
    if m.startswith("trace") and "stampall" in modes8:
        line += f", / stampall {st.median(ratios(m, 'stampall', 8)):.3f}"
    print(line)
for size in (1 << 20, 64 << 20):
    for m in sorted({m for r in rounds for (m, s) in r if s == size and m != "none"}):
        q = ratios(m, "none", size)
        if q:
            print(f"{size >> 20} MiB busbw {m} / none: {st.median(q):.3f} (per round {min(q):.2f}-{max(q):.2f})")
PY
