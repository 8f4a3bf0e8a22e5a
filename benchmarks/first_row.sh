#!/usr/bin/env bash
# The first row of a default sweep against the same size measured long
# (issue 35, BENCHMARKS.md §5.4): 2 local ranks (shared memory), AllReduce,
# `-b 8 -e 64M -f 8` with the defaults `-n 20 -w 5`, whose 8-byte row is the
# first an operator reads, against `-b 8 -e 8 -n 2000 -w 200`, in interleaved
# rounds. With BASE (another ferroccl-perf, e.g. a build of an older commit)
# each round runs its default sweep too.
# Usage: benchmarks/first_row.sh [ROUNDS]   (default 7)
# Environment: B, a build directory holding ferroccl-perf and the plugins
# (default: build target/release); BASE, a baseline ferroccl-perf.
# Prints per round: the first row's out-of-place/in-place time (µs) of each
# sweep, the long run's, the load average; then the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
check_ranks 2
ROUNDS=${1:-7}
if [ -z "${B:-}" ]; then
  cargo build --release -q -p ferroccl-examples -p ferroccl-net-socket
  B=target/release
fi
export LD_LIBRARY_PATH=$B NCCL_NET_PLUGIN=socket
BASE=${BASE:-}
row8() { # perf-binary perf-args...
  local p=$1; shift
  "$p" --ranks 2 "$@" all_reduce 2>&1 | awk '/^ +8 +2 / && !n++ { print $6 "/" $10 }'
}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for r in $(seq "$ROUNDS"); do
  line="round $r  sweep $(row8 "$B/ferroccl-perf" -b 8 -e 64M -f 8)"
  if [ -n "$BASE" ]; then line="$line  base-sweep $(row8 "$BASE" -b 8 -e 64M -f 8)"; fi
  line="$line  long $(row8 "$B/ferroccl-perf" -b 8 -e 8 -n 2000 -w 200)  load $(cut -d' ' -f1 /proc/loadavg)"
  echo "$line" | tee -a "$OUT"
done
python3 - "$OUT" <<'PY'
import statistics, sys
cols = {}
for l in open(sys.argv[1]):
    f = l.split()
    for k, v in zip(f[2::2], f[3::2]):
        if "/" in v:
            o, i = v.split("/")
            cols.setdefault(k, ([], []))
            cols[k][0].append(float(o)); cols[k][1].append(float(i))
for k, (o, i) in cols.items():
    print(f"median {k}: out-of-place {statistics.median(o):.2f} us, in-place {statistics.median(i):.2f} us")
PY
