#!/usr/bin/env bash
# Two hosts on one machine (issue 30): AllReduce between two network namespaces
# made by scripts/netns-cluster.sh (1 rank per host, links shaped with tc),
# against raw TCP between the same namespaces (iperf3: one stream, two streams,
# both directions at once) and Open MPI over TCP in the same namespaces
# (benchmarks/mpi_allreduce.c launched by `netns-cluster.sh mpirun`). Each round
# runs every case once, so the tools see the same machine load; the summary
# gives per-case medians over the rounds.
#
# Usage: benchmarks/netns_vs_mpi.sh [ROUNDS] [OUT.csv]   (defaults: 5, /tmp/netns_vs_mpi.csv)
#   RATE=10gbit    tc rate of every NIC (both directions); RATE= for none
#   DELAY=         one-way delay (tc netem; the kernel must have sch_netem)
#   BIND=core      rank i on CPU i for both tools (ferroccl-perf's default
#                  binding; Open MPI through a rank file, since its own
#                  per-node mapping would put each host's first rank on core 0,
#                  both on one CPU); BIND=none leaves both to the scheduler
#   SOCKET_VARIANTS="default;NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=1"
#                  the socket plugin settings run for ferroccl (`;`-separated)
# Needs root, cargo, mpicc/mpirun (Open MPI 4.1), iperf3, python3
# (scripts/system-deps.sh ensure test netns). Take the bench lock around it:
#   flock /tmp/ferroccl-bench.lock benchmarks/netns_vs_mpi.sh 5
set -euo pipefail
cd "$(dirname "$0")/.."
. benchmarks/lib/machine.sh
machine_header
check_ranks 2
ROUNDS=${1:-5}
CSV=${2:-/tmp/netns_vs_mpi.csv}
RATE=${RATE-10gbit}
DELAY=${DELAY:-}
BIND=${BIND:-core}
SOCKET_VARIANTS=${SOCKET_VARIANTS:-default;NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=1}
NAME=nsbench
S=scripts/netns-cluster.sh
cargo build --release -q -p ferroccl-examples -p ferroccl-net-socket
mpicc -O2 -o /tmp/mpi_allreduce benchmarks/mpi_allreduce.c
PERF=$PWD/target/release/ferroccl-perf

shape=()
[[ -n $RATE ]] && shape+=(--rate "$RATE")
[[ -n $DELAY ]] && shape+=(--delay "$DELAY")
"$S" --name "$NAME" up 2 "${shape[@]}"
trap '"$S" --name "$NAME" down >/dev/null' EXIT

load() { cut -d' ' -f1 /proc/loadavg; }
echo "round,tool,variant,bytes,time_us,busbw,load" >"$CSV"

# iperf3 from host 1 to host 0 (--bidir: both ways at once): GB/s per direction
# (received bytes; the mean of both directions with --bidir).
raw() { # round variant iperf-args...
    local r=$1 v=$2 gbs
    shift 2
    gbs=$("$S" --name "$NAME" iperf -t 5 -J "$@" | python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
bps = [e["sum_received"]["bits_per_second"]]
if "sum_received_bidir_reverse" in e:
    bps.append(e["sum_received_bidir_reverse"]["bits_per_second"])
print(f"{sum(bps) / len(bps) / 8e9:.4f}")')
    echo "$r,iperf3,$v,0,,$gbs,$(load)" >>"$CSV"
}

ours() { # round variant bytes iters warmup
    local out
    # shellcheck disable=SC2086
    out=$(env NCCL_NET_PLUGIN=socket ${2/#default/} "$PERF" --hosts 2 --cluster "$NAME" --bind-to "$BIND" \
        all_reduce -b "$3" -e "$3" -n "$4" -w "$5" -c 1 2>&1) || {
        echo "$out" >&2
        return 1
    }
    echo "$out" | awk -v r="$1" -v v="${2// /+}" -v l="$(load)" \
        '/^ +[0-9]+ / { if ($9 != "0") { print "wrong values" > "/dev/stderr"; exit 1 } printf "%s,ferroccl,%s,%s,%s,%s,%s\n", r, v, $1, $6, $8, l }' >>"$CSV"
}

if [[ $BIND == core ]]; then
    printf 'rank 0=%s-h0 slot=0\nrank 1=%s-h1 slot=1\n' "$NAME" "$NAME" >/tmp/netns_vs_mpi.rankfile
    ompi_map=(--rankfile /tmp/netns_vs_mpi.rankfile)
else
    ompi_map=(--map-by node --bind-to none)
fi

theirs() { # round bytes iters warmup
    "$S" --name "$NAME" mpirun -np 2 "${ompi_map[@]}" --mca btl tcp,self \
        /tmp/mpi_allreduce "$2" "$2" 2 "$3" "$4" 2>/dev/null |
        awk -v r="$1" -v l="$(load)" '!/^#/ && NF >= 5 { printf "%s,openmpi,tcp,%s,%s,%s,%s\n", r, $1, $3, $5, l }' >>"$CSV"
}

IFS=';' read -r -a variants <<<"$SOCKET_VARIANTS"
for round in $(seq "$ROUNDS"); do
    echo "round $round (load $(load))" >&2
    raw "$round" one-stream
    raw "$round" two-streams -P 2
    raw "$round" bidir --bidir
    for v in "${variants[@]}"; do
        ours "$round" "$v" 8 500 50
        ours "$round" "$v" 1048576 50 5
        ours "$round" "$v" 67108864 5 1
    done
    theirs "$round" 8 500 50
    theirs "$round" 1048576 50 5
    theirs "$round" 67108864 5 1
done

python3 - "$CSV" "$RATE" "${DELAY:-none}" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
loads = [float(r["load"]) for r in rows]
print(f"# {len({r['round'] for r in rows})} rounds, rate {sys.argv[2] or 'unshaped'}, delay {sys.argv[3]}, load average {min(loads):.1f}-{max(loads):.1f}")
med = lambda sel, k: statistics.median(float(r[k]) for r in sel)
raw = {v: med([r for r in rows if r["tool"] == "iperf3" and r["variant"] == v], "busbw")
       for v in sorted({r["variant"] for r in rows if r["tool"] == "iperf3"})}
for v, bw in raw.items():
    print(f"iperf3 {v}: {bw:.3f} GB/s per direction ({bw * 8:.2f} Gbit/s)")
print("| tool | variant | size | time (µs) | busbw (GB/s) | busbw / iperf3 one stream | / bidir |")
print("|---|---|---:|---:|---:|---:|---:|")
cases = sorted({(r["tool"], r["variant"], int(r["bytes"])) for r in rows if r["tool"] != "iperf3"},
               key=lambda c: (c[2], c[0] != "ferroccl", c[1]))
for tool, v, b in cases:
    sel = [r for r in rows if (r["tool"], r["variant"], int(r["bytes"])) == (tool, v, b)]
    t, bw = med(sel, "time_us"), med(sel, "busbw")
    size = f"{b} B" if b < 1024 else f"{b >> 20} MiB"
    rel = f"{bw / raw['one-stream']:.2f}" if b >= 1 << 20 and raw.get("one-stream") else ""
    relb = f"{bw / raw['bidir']:.2f}" if b >= 1 << 20 and raw.get("bidir") else ""
    print(f"| {tool} | {v.replace('+', ' ')} | {size} | {t:.1f} | {bw:.3f} | {rel} | {relb} |")
EOF
