#!/usr/bin/env bash
# plugins/net-ib/scripts/bw-compare.sh — ib_write_bw vs the plugin's ib_bw at
# 1 MiB, interleaved, in ONE soft-RoCE VM boot (see .ci/rxe-vm).
#
#   bw-compare.sh IB_BW_BINARY [REPS ['IB_BW_ARGS' ['IB_BW_ARGS'...]]]
#
# Runs REPS (default 3) rounds of: ib_write_bw (perftest, 1 MiB, 200 iters, -F),
# then ib_bw once per quoted IB_BW_ARGS variant (default one variant:
# "--size 1048576 --inflight 8 --iters 200 --warmup 16"). Per run it prints the MB/s (2^20) and the guest's CPU split over
# the run (user/sys/softirq/idle, from /proc/stat); at the end the medians and
# the ratio. The binary must be under the current folder or under a folder in
# RXE_VM_SHARE (it is run at the same path in the guest).
set -u
if [[ "${1:-}" == "--guest" ]]; then
    shift
    bw=$1 reps=$2
    shift 2
    dev=${RXE_DEV:-rxe0} gid=${RXE_GID_INDEX:-1}
    cpu() { awk '$1 == "cpu" { print $2 + $3, $4, $7 + $8, $5 + $6 }' /proc/stat; }
    split() { # before after
        read -r u0 s0 q0 i0 <<<"$1"
        read -r u1 s1 q1 i1 <<<"$2"
        awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v q=$((q1 - q0)) -v i=$((i1 - i0)) 'BEGIN {
            t = u + s + q + i; if (t == 0) t = 1
            printf "cpu user %.0f%% sys %.0f%% irq+softirq %.0f%% idle %.0f%%\n", 100*u/t, 100*s/t, 100*q/t, 100*i/t }'
    }
    declare -A b=()
    a=()
    for r in $(seq 1 "$reps"); do
        c0=$(cpu)
        ib_write_bw -d "$dev" -x "$gid" -s 1048576 -n 200 -F >/tmp/srv.txt 2>&1 &
        srv=$!
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            sleep 1
            ib_write_bw -d "$dev" -x "$gid" -s 1048576 -n 200 -F 127.0.0.1 >/tmp/cli.txt 2>&1 && break
        done
        wait "$srv"
        v=$(awk '$1 == 1048576 && NF >= 5 { print $4 }' /tmp/cli.txt | tail -1)
        echo "run $r ib_write_bw MB/s=${v:-?} $(split "$c0" "$(cpu)")"
        a+=("${v:-0}")
        k=0
        for args in "$@"; do
            k=$((k + 1))
            c0=$(cpu)
            # shellcheck disable=SC2086
            "$bw" $args >/tmp/bw.txt 2>&1
            v=$(sed -nE 's/.*MB\/s=([0-9.]+).*/\1/p' /tmp/bw.txt | tail -1)
            [[ -n "$v" ]] || cat /tmp/bw.txt
            echo "run $r ib_bw $args MB/s=${v:-?} $(split "$c0" "$(cpu)")"
            b[$k]="${b[$k]:-} ${v:-0}"
        done
    done
    med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
    ma=$(med "${a[@]}")
    echo "MEDIAN ib_write_bw: $ma MB/s (runs: ${a[*]})"
    k=0
    for args in "$@"; do
        k=$((k + 1))
        # shellcheck disable=SC2086
        mb=$(med ${b[$k]})
        awk -v a="$ma" -v b="$mb" -v args="$args" -v runs="${b[$k]}" 'BEGIN {
            printf "MEDIAN ib_bw %s: %.2f MB/s (runs:%s), ratio %.1f%%\n", args, b, runs, (a > 0) ? 100 * b / a : 0 }'
    done
    exit
fi
bw=${1:?usage: bw-compare.sh IB_BW_BINARY [REPS ['IB_BW_ARGS'...]]}
reps=${2:-3}
shift $(($# >= 2 ? 2 : 1))
[[ $# -gt 0 ]] || set -- "--size 1048576 --inflight 8 --iters 200 --warmup 16"
here=$(cd "$(dirname "$0")" && pwd)
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-900}
export RXE_VM_ENV="${RXE_VM_ENV:-} NCCL_IB_QPS_PER_CONNECTION NCCL_IB_TIMEOUT"
exec "${RXE_VM_DIR:-$here/../../../.ci/rxe-vm}/run-in-vm.sh" bash "$here/bw-compare.sh" --guest "$bw" "$reps" "$@"
