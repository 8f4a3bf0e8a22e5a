#!/usr/bin/env bash
# benchmarks/ib_rma_vs_write_bw.sh — the IB plugin's RMA `iput` against perftest's
# `ib_write_bw` on soft-RoCE (issue 33's IB Performance row), in ONE boot of the
# rxe guest (.ci/rxe-vm/run-in-vm.sh, TCG): many short rounds, the two alternating
# (which goes first flips every round), each at the same message size and depth on
# one RC QP; per round the ratio iput / ib_write_bw; printed: every round's pair,
# the median of the per-round ratios and their spread (min, quartiles, max).
#
#   benchmarks/ib_rma_vs_write_bw.sh [ROUNDS] [SIZE DEPTH BYTES]...
#   default: 12 rounds of "65536 128 16777216" (ib_write_bw's own defaults: 64 KiB
#   messages, tx-depth 128) and "4194304 8 33554432" (4 MiB, 8 in flight, as the
#   issue's earlier figure)
#
# Needs target/debug/libnccl_net_ib.so and target/debug/ferroccl-rma-bench built (or IBR_SO /
# IBR_BENCH naming others under the worktree)
# (cargo build -p ferroccl-net-ib --lib -p ferroccl-examples --bin ferroccl-rma-bench),
# root (the guest's setup), and perftest in the guest image. Take the bench lock:
#   flock /tmp/ferroccl-bench.lock benchmarks/ib_rma_vs_write_bw.sh 12
# MB = 2^20 B (perftest's unit). Soft-RoCE in a TCG guest: the figures compare the
# plugin with raw verbs on the same emulated NIC, nothing about hardware speed.
set -u
if [[ "${1:-}" == "--guest" ]]; then
    shift
    rounds=$1
    shift
    dev=${RXE_DEV:-rxe0}
    gid=${RXE_GID_INDEX:-1}
    so=$IBR_SO
    bench=$IBR_BENCH
    wbw() { # size depth iters -> MB/s (BW average) or empty
        local s=$1 d=$2 n=$3 v cli=0
        ib_write_bw -d "$dev" -x "$gid" -s "$s" -t "$d" -n "$n" -q 1 -F >/tmp/bw_srv.txt 2>&1 &
        local srv=$!
        for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
            sleep 0.5
            if ib_write_bw -d "$dev" -x "$gid" -s "$s" -t "$d" -n "$n" -q 1 -F 127.0.0.1 >/tmp/bw_cli.txt 2>&1; then
                cli=1
                break
            fi
        done
        wait "$srv"
        [[ $cli == 1 ]] || { cat /tmp/bw_cli.txt >&2; return; }
        # (perftest prints 0.00 when its clock failed over very few iterations: missing)
        awk -v s="$s" '$1 == s && NF >= 5 && $4 > 0 { print $4 }' /tmp/bw_cli.txt | tail -1
    }
    put() { # size depth bytes -> MB/s
        local s=$1 d=$2 b=$3
        NCCL_IB_RMA_ENABLE=1 NCCL_IB_TIMEOUT=14 timeout 300 "$bench" --plugin "$so" --sizes "$s" --rounds 1 \
            --window "$d" --bytes "$b" --put-only >/tmp/rma_bench.txt 2>&1 || { cat /tmp/rma_bench.txt >&2; return; }
        # the put column (GB/s, 1e9) of the size's row, as MB/s (2^20)
        awk '$1 ~ /^[0-9]+$/ && ($2 == "KiB" || $2 == "MiB" || $2 == "B") { printf "%.2f", $4 * 1e9 / 1048576 }' /tmp/rma_bench.txt
    }
    stats() { # numbers -> "median (min q1 q3 max)"
        printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%.3f (min %.3f, q1 %.3f, q3 %.3f, max %.3f; %d rounds)", m, v[1], v[int((NR + 3) / 4)], v[int((3 * NR + 3) / 4)], v[NR], NR }'
    }
    while [[ $# -ge 3 ]]; do
        size=$1 depth=$2 bytes=$3
        shift 3
        iters=$((bytes / size))
        echo "=== size $size B, depth $depth, $bytes B per measurement ($iters messages), $rounds rounds"
        echo "    ib_write_bw -d $dev -x $gid -s $size -t $depth -n $iters -q 1 -F [127.0.0.1]"
        echo "    NCCL_IB_RMA_ENABLE=1 ferroccl-rma-bench --plugin libnccl_net_ib.so --sizes $size --rounds 1 --window $depth --bytes $bytes --put-only"
        ratios=() ws=() ps=()
        for ((r = 1; r <= rounds; r++)); do
            if ((r % 2)); then
                w=$(wbw "$size" "$depth" "$iters")
                p=$(put "$size" "$depth" "$bytes")
            else
                p=$(put "$size" "$depth" "$bytes")
                w=$(wbw "$size" "$depth" "$iters")
            fi
            if [[ -n "$w" && -n "$p" ]]; then
                q=$(awk -v p="$p" -v w="$w" 'BEGIN { printf "%.3f", p / w }')
                ratios+=("$q") ws+=("$w") ps+=("$p")
                echo "RMAPERF size $size round $r: ib_write_bw $w MB/s, iput $p MB/s, ratio $q"
            else
                echo "RMAPERF size $size round $r: missing (ib_write_bw '$w', iput '$p')"
            fi
        done
        ((${#ratios[@]})) || continue
        echo "RMAPERF size $size depth $depth: iput/ib_write_bw per-round median $(stats "${ratios[@]}")"
        echo "RMAPERF size $size depth $depth: ib_write_bw MB/s median $(stats "${ws[@]}")"
        echo "RMAPERF size $size depth $depth: iput MB/s median $(stats "${ps[@]}")"
    done
    exit 0
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TD=${CARGO_TARGET_DIR:-$ROOT/target}
VMDIR=${RXE_VM_DIR:-$ROOT/.ci/rxe-vm}
rounds=${1:-12}
shift || true
[[ $# -ge 3 ]] || set -- 65536 128 16777216 4194304 8 33554432
export IBR_SO=${IBR_SO:-$TD/debug/libnccl_net_ib.so} IBR_BENCH=${IBR_BENCH:-$TD/debug/ferroccl-rma-bench}
for f in "$IBR_SO" "$IBR_BENCH"; do [[ -e $f ]] || { echo "missing $f (build it first)"; exit 1; }; done
export RXE_VM_SHARE="$ROOT:$TD"
export RXE_VM_ENV="${RXE_VM_ENV:-} IBR_SO IBR_BENCH"
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-900}
echo "# host: $(uptime)"
"$VMDIR/run-in-vm.sh" bash "$ROOT/benchmarks/ib_rma_vs_write_bw.sh" --guest "$rounds" "$@" 2>&1 | tr -d '\r'
echo "# host: $(uptime)"
