#!/usr/bin/env bash
# scripts/ib-vm-test.sh — prove the IB verbs plugin (plugins/net-ib) on real
# verbs. On the host it builds (debug, plain flags: no target-cpu=native, the
# guest is TCG without AVX-512):
#   * the crate's test binaries   (cargo test -p ferroccl-net-ib --no-run)
#   * libnccl_net_ib.so + ib_bw   (cargo build -p ferroccl-net-ib --lib --example ib_bw)
#   * ferroccl-conformance        (cargo build -p ferroccl-conformance)
#   * ferroccl-perf               (cargo build -p ferroccl-examples --bin ferroccl-perf)
#   * the IB profiler-event test  (cargo test -p ferroccl --test profiler_ib --no-run;
#                                  with the socket plugin its launcher requires)
#   * the multi-host tests        (cargo test -p ferroccl-examples --test netns_cluster
#                                  --no-run: the ib_* tests, IB between simulated hosts)
#   * the one-sided API test      (cargo test -p ferroccl --test comm_rma --no-run: its
#                                  plugin-neutral tests over the IB plugin's RMA table)
#   * ferroccl-rma-bench          (cargo build -p ferroccl-examples --bin ferroccl-rma-bench,
#                                  for the RMA figure of the perf block)
# then boots the soft-RoCE guest ONCE via .ci/rxe-vm/run-in-vm.sh and
# runs every check there, each printed as "=== PASS name" / "=== FAIL name".
#
# Output ends with "N passed, N failed". Exit status:
#   0  every check passed, or the VM cannot be started at all on this machine
#      (no rxe-vm tools at $RXE_VM_DIR, checked before building; run-in-vm.sh
#      exit 125: no qemu, no image, not root, boot failure); then the last line
#      is "SKIPPED: <reason>"
#   1  a build failed, a check failed, or the VM run timed out
#
# The guest needs root on the host (setup.sh: debootstrap, chroot). Run as
# root, or as a user with password-less sudo: then only run-in-vm.sh runs
# under sudo (the build stays the user's).
#
#   CARGO_TARGET_DIR   where to build (default ./target); shared into the guest
#   RXE_VM_DIR         the rxe-vm tools (default .ci/rxe-vm)
#   IB_VM_PERF=0       leave out the bandwidth comparison (default 1: ib_write_bw
#                      vs the plugin's isend/irecv (ib_bw, 8 in flight, yielding
#                      poll) at 1 MiB, 3 interleaved rounds, medians and their
#                      ratio; soft-RoCE numbers say nothing about hardware speed;
#                      then, reported only, ib_write_bw vs the plugin's RMA iput
#                      (ferroccl-rma-bench, 8 in flight) at 4 MiB, 3 interleaved
#                      rounds, medians)
#   IB_VM_PERF_MIN=80  the ratio (percent) below which the bw-ratio check fails
#   IB_VM_CHECK_TIMEOUT=1200  seconds one check may take in the guest before it
#                      is killed and counts as failed (the others still run)
#   RXE_VM_TIMEOUT     seconds for the whole guest run (default 1500)
#
# Inside the guest this script runs itself with --guest.
set -u

if [[ "${1:-}" == "--guest" ]]; then
    pass=0
    fail=0
    check() { # name cmd...
        local name=$1 t0=$SECONDS
        shift
        echo "=== $name: $*"
        if timeout -k 10 "${IB_VM_CHECK_TIMEOUT:-1200}" "$@"; then
            echo "=== PASS $name ($((SECONDS - t0)) s)"
            pass=$((pass + 1))
        else
            local rc=$?
            echo "=== FAIL $name (exit $rc$([[ $rc == 124 || $rc == 137 ]] && echo ": timed out after ${IB_VM_CHECK_TIMEOUT:-1200} s"), $((SECONDS - t0)) s)"
            fail=$((fail + 1))
        fi
    }
    dev=${RXE_DEV:-rxe0}
    gid=${RXE_GID_INDEX:-1}
    so=$IBT_SO
    export IB_VM_REQUIRE=1 NCCL_IB_TIMEOUT=14 NCCL_IB_RETRY_CNT=7
    check rxe-device sh -c "ibv_devinfo -d $dev | grep -q PORT_ACTIVE"
    # Bandwidth first, while the guest is quiet.
    if [[ "${IB_VM_PERF:-1}" != 0 ]]; then
        echo "=== perf (soft-RoCE in a TCG guest: these numbers say nothing about hardware speed)"
        # 3 interleaved rounds of ib_write_bw and ib_bw, medians (the guest is noisy).
        # ib_bw keeps 8 messages in flight (NCCL_STEPS) and calls sched_yield()
        # between polls that found nothing, as NCCL's proxy progress thread does.
        bwargs="--size 1048576 --inflight 8 --iters 200 --warmup 16 --poll-yield"
        ok=1 pa=() pb=()
        for round in 1 2 3; do
            echo "+ ib_write_bw -d $dev -x $gid -s 1048576 -n 200 -F  (server; then the same with 127.0.0.1 as client)"
            ib_write_bw -d "$dev" -x "$gid" -s 1048576 -n 200 -F >/tmp/bw_srv.txt 2>&1 &
            srv=$!
            cli=0
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                sleep 1
                if ib_write_bw -d "$dev" -x "$gid" -s 1048576 -n 200 -F 127.0.0.1 >/tmp/bw_cli.txt 2>&1; then
                    cli=1
                    break
                fi
            done
            wait "$srv"
            [[ $round == 1 || $cli == 0 ]] && cat /tmp/bw_cli.txt
            # perftest's result line: bytes iterations BWpeak BWavg MsgRate
            v=$(awk '$1 == 1048576 && NF >= 5 { print $4 }' /tmp/bw_cli.txt | tail -1)
            [[ $cli == 1 && -n "$v" ]] || ok=0
            pa+=("${v:-0}")
            echo "+ $IBT_BW $bwargs"
            # shellcheck disable=SC2086
            "$IBT_BW" $bwargs >/tmp/ib_bw.txt 2>&1
            cat /tmp/ib_bw.txt
            v=$(sed -nE 's/.*MB\/s=([0-9.]+).*/\1/p' /tmp/ib_bw.txt | tail -1)
            [[ -n "$v" ]] || ok=0
            pb+=("${v:-0}")
            echo "PERF round $round: ib_write_bw ${pa[-1]} MB/s, ib_bw ${pb[-1]} MB/s"
        done
        med() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
        perf_bw=$(med "${pa[@]}")
        plug_bw=$(med "${pb[@]}")
        echo "PERF ib_write_bw 1MiB median of 3: ${perf_bw} MB/s (${pa[*]}); plugin isend/irecv 1MiB x8 in flight median of 3: ${plug_bw} MB/s (${pb[*]}) (MB = 2^20)"
        check bw-ratio awk -v a="${perf_bw:-0}" -v b="${plug_bw:-0}" -v min="${IB_VM_PERF_MIN:-80}" -v ok=$ok \
            'BEGIN { if (!ok || a <= 0 || b <= 0) { print "missing bandwidth numbers"; exit 1 }
                     r = 100 * b / a; printf "PERF ratio plugin/ib_write_bw = %.1f%% (target >= %d%%)\n", r, min; exit !(r >= min) }'
        # RMA (issue 33): iput (RDMA WRITE through the RMA table) vs ib_write_bw at 4 MiB.
        # Reported, not judged: the TCG guest's noise is larger than the 10% target.
        ra=() rb=()
        for round in 1 2 3; do
            ib_write_bw -d "$dev" -x "$gid" -s 4194304 -n 50 -F >/tmp/bw_srv.txt 2>&1 &
            srv=$!
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                sleep 1
                ib_write_bw -d "$dev" -x "$gid" -s 4194304 -n 50 -F 127.0.0.1 >/tmp/bw_cli.txt 2>&1 && break
            done
            wait "$srv"
            ra+=("$(awk '$1 == 4194304 && NF >= 5 { print $4 }' /tmp/bw_cli.txt | tail -1)")
            echo "+ NCCL_IB_RMA_ENABLE=1 $IBT_RMA_BENCH --plugin $so --sizes 4M --rounds 1 --window 8 --bytes 128M"
            NCCL_IB_RMA_ENABLE=1 timeout 300 "$IBT_RMA_BENCH" --plugin "$so" --sizes 4M --rounds 1 --window 8 \
                --bytes 128M >/tmp/rma_bench.txt 2>&1
            tail -1 /tmp/rma_bench.txt
            # The put column is in GB/s (1e9); as MB/s (2^20) like perftest's.
            rb+=("$(awk '$1 == 4 && $2 == "MiB" { printf "%.2f", $4 * 1e9 / 1048576 }' /tmp/rma_bench.txt)")
            echo "PERF RMA round $round: ib_write_bw ${ra[-1]:-?} MB/s, iput ${rb[-1]:-?} MB/s"
        done
        echo "PERF RMA 4MiB median of 3: ib_write_bw $(med "${ra[@]}") MB/s (${ra[*]}); iput $(med "${rb[@]}") MB/s (${rb[*]}) (MB = 2^20)"
    fi
    check ferroccl-info-ib sh -c "'$IBT_INFO' ib | tee /tmp/info.txt && grep -q '^    \* GID\[ *$gid\]' /tmp/info.txt"
    check sans-io-unit "$IBT_LIB_BIN" --quiet
    check exchange-1qp env NCCL_IB_QPS_PER_CONNECTION=1 "$IBT_VM_BIN" --nocapture --test-threads=1
    check exchange-4qp env NCCL_IB_QPS_PER_CONNECTION=4 "$IBT_VM_BIN" --nocapture --test-threads=1
    check dlopen-v6-to-v12 "$IBT_VERSIONS_BIN" --nocapture --test-threads=1
    check exchange-hca-exact env NCCL_IB_HCA="=$dev:1" NCCL_IB_GID_INDEX="$gid" \
        "$IBT_VM_BIN" --nocapture --test-threads=1
    check hca-excluded-init-fails sh -c "NCCL_IB_HCA='^$dev' IB_VM_REQUIRE= '$IBT_VM_BIN' --nocapture 2>&1 | grep -q 'not selected by NCCL_IB_HCA'"
    check timeout-out-of-range-refused sh -c "NCCL_IB_TIMEOUT=32 IB_VM_REQUIRE= '$IBT_VM_BIN' --nocapture 2>&1 | grep -q 'NCCL_IB_TIMEOUT'"
    check no-libibverbs "$IBT_NOVERBS_BIN" --quiet
    # net_ib_v1 profiler events under their ProxySteps (2 processes, recording profiler).
    check profiler-ib-events "$IBT_PROFIB_BIN" --nocapture --test-threads=1
    check conformance-quick "$IBT_CONFORMANCE" "$so" --quick --api all
    # RMA (issue 33): the conformance RMA section against the IB plugin's RMA table
    # (RDMA WRITE/READ, the signal as an atomic), both versions, and the one-sided
    # API's plugin-neutral tests over it.
    check conformance-rma env NCCL_IB_RMA_ENABLE=1 "$IBT_CONFORMANCE" --rma "$so" --api all
    check rma-to-self "$IBT_RMA_SELF_BIN" --nocapture --test-threads=1
    # (6 named tests: the count is checked, so a renamed test cannot pass by running nothing.)
    check comm-rma-over-ib sh -c "FERROCCL_TEST_RMA_NET_PLUGIN='$so' '$IBT_COMM_RMA_BIN' --test-threads=1 \
        put_signal_sizes_offsets_2_ranks put_signal_sizes_offsets_4_ranks signal_only_all_to_all \
        many_puts_then_one_wait put_to_a_destroyed_peer_fails_naming_it num_rma_ctx_sets_the_contexts_and_zero_disables \
        >/tmp/comm_rma.txt 2>&1; rc=\$?; cat /tmp/comm_rma.txt; [ \$rc = 0 ] && grep -q 'test result: ok. 6 passed' /tmp/comm_rma.txt"
    # Collectives of the core runtime over the IB plugin (strict: no fallback to
    # the socket plugin), every result checked; the log must show FerrocclIB.
    for n in 2 4; do
        check "perf-all_reduce-${n}ranks" sh -c "NCCL_NET_PLUGIN='$so' FERROCCL_NET_STRICT=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
            '$IBT_PERF' --ranks $n -b 8 -e 4M -f 4 -c 1 -n 5 -w 1 all_reduce >/tmp/perf$n.txt 2>&1; rc=\$?; \
            grep -v 'NCCL INFO' /tmp/perf$n.txt; grep -m2 'FerrocclIB' /tmp/perf$n.txt; \
            [ \$rc = 0 ] && grep -q 'FerrocclIB' /tmp/perf$n.txt && grep -q 'Out of bounds values : 0 OK' /tmp/perf$n.txt"
    done
    check perf-collectives-3ranks sh -c "for op in all_gather reduce_scatter broadcast reduce sendrecv alltoall; do \
        NCCL_NET_PLUGIN='$so' FERROCCL_NET_STRICT=1 '$IBT_PERF' --ranks 3 -b 1K -e 1M -f 32 -c 1 -n 2 -w 1 \$op || exit 1; done"
    # IB between hosts (issue 30): network namespaces as hosts (scripts/netns-cluster.sh),
    # each with its own soft-RoCE NIC (.ci/rxe-vm/netns-rxe.sh); the collective matrix over
    # the plugin, every result checked, NET/FerrocclIB between hosts, SHM inside them.
    for t in ib_two_hosts_two_ranks_each_run_every_collective_over_net_ib_and_shm \
        ib_four_hosts_one_rank_each_run_every_collective_over_net_ib; do
        case $t in ib_two*) name=netns-ib-2hosts-x2ranks ;; *) name=netns-ib-4hosts-x1rank ;; esac
        check "$name" sh -c "FERROCCL_NETNS_IB_PLUGIN='$so' FERROCCL_REQUIRE_NETNS=1 '$IBT_NETNS_BIN' --exact $t \
            --nocapture --test-threads=1 >/tmp/$name.txt 2>&1; rc=\$?; cat /tmp/$name.txt; \
            [ \$rc = 0 ] && grep -q 'test result: ok. 1 passed' /tmp/$name.txt && ! grep -q '^SKIPPED' /tmp/$name.txt"
    done
    echo "$pass passed, $fail failed"
    [[ $fail == 0 ]]
    exit
fi

cd "$(dirname "$0")/.."
ROOT=$PWD
VMDIR=${RXE_VM_DIR:-$ROOT/.ci/rxe-vm}
if [[ ! -x $VMDIR/run-in-vm.sh ]]; then
    echo "SKIPPED: no rxe-vm tools at $VMDIR (run-in-vm.sh; set RXE_VM_DIR)"
    exit 0
fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$CARGO_TARGET_DIR"
CARGO_TARGET_DIR=$(cd "$CARGO_TARGET_DIR" && pwd)
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
start=$SECONDS

build_failed() {
    echo "build failed: $*"
    echo "0 passed, 1 failed"
    exit 1
}
json=$(cargo test -p ferroccl-net-ib --no-run --message-format=json) || build_failed "cargo test -p ferroccl-net-ib --no-run"
json_bw=$(cargo build -p ferroccl-net-ib --lib --example ib_bw --message-format=json) ||
    build_failed "cargo build -p ferroccl-net-ib --lib --example ib_bw"
cargo build -p ferroccl-conformance -p ferroccl-examples --bin ferroccl-conformance --bin ferroccl-perf --bin ferroccl-info \
    --bin ferroccl-rma-bench || build_failed "cargo build -p ferroccl-conformance -p ferroccl-examples"
cargo build -p ferroccl-net-socket || build_failed "cargo build -p ferroccl-net-socket"
json_core=$(cargo test -p ferroccl --test profiler_ib --test comm_rma --no-run --message-format=json) ||
    build_failed "cargo test -p ferroccl --test profiler_ib --test comm_rma --no-run"
json_netns=$(cargo test -p ferroccl-examples --test netns_cluster --no-run --message-format=json) ||
    build_failed "cargo test -p ferroccl-examples --test netns_cluster --no-run"
exe() { # json name kind-filter
    printf '%s\n' "$1" | grep '"executable":"/' | grep "\"name\":\"$2\"" | grep "$3" |
        sed -E 's/.*"executable":"([^"]+)".*/\1/' | tail -1
}
export IBT_LIB_BIN=$(exe "$json" nccl_net_ib '"test":true')
export IBT_VM_BIN=$(exe "$json" vm_exchange '"test":true')
export IBT_NOVERBS_BIN=$(exe "$json" no_verbs '"test":true')
export IBT_VERSIONS_BIN=$(exe "$json" vm_versions '"test":true')
export IBT_RMA_SELF_BIN=$(exe "$json" vm_rma_self '"test":true')
export IBT_BW=$(exe "$json_bw" ib_bw '"kind":\["example"\]')
export IBT_PROFIB_BIN=$(exe "$json_core" profiler_ib '"test":true')
export IBT_COMM_RMA_BIN=$(exe "$json_core" comm_rma '"test":true')
export IBT_NETNS_BIN=$(exe "$json_netns" netns_cluster '"test":true')
export IBT_SO=$CARGO_TARGET_DIR/debug/libnccl_net_ib.so
export IBT_CONFORMANCE=$CARGO_TARGET_DIR/debug/ferroccl-conformance
export IBT_PERF=$CARGO_TARGET_DIR/debug/ferroccl-perf
export IBT_INFO=$CARGO_TARGET_DIR/debug/ferroccl-info
export IBT_RMA_BENCH=$CARGO_TARGET_DIR/debug/ferroccl-rma-bench
for v in IBT_LIB_BIN IBT_VM_BIN IBT_NOVERBS_BIN IBT_VERSIONS_BIN IBT_RMA_SELF_BIN IBT_BW IBT_PROFIB_BIN IBT_COMM_RMA_BIN IBT_NETNS_BIN IBT_SO IBT_CONFORMANCE IBT_PERF IBT_INFO IBT_RMA_BENCH; do
    [[ -n "${!v}" && -x "${!v}" ]] || build_failed "$v: not found (${!v})"
done
echo "build: $((SECONDS - start)) s"

export RXE_VM_SHARE="$ROOT:$CARGO_TARGET_DIR"
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-1500}
export RXE_VM_ENV="${RXE_VM_ENV:-} IB_VM_PERF IB_VM_PERF_MIN IB_VM_CHECK_TIMEOUT IBT_LIB_BIN IBT_VM_BIN IBT_NOVERBS_BIN IBT_VERSIONS_BIN IBT_RMA_SELF_BIN IBT_BW IBT_PROFIB_BIN IBT_COMM_RMA_BIN IBT_NETNS_BIN IBT_SO IBT_CONFORMANCE IBT_PERF IBT_INFO IBT_RMA_BENCH"
vm_start=$SECONDS
log=$(mktemp "${TMPDIR:-/tmp}/ib-vm-test.XXXXXX")
# Not root: run the VM (only) under password-less sudo, passing through what
# run-in-vm.sh reads from the environment.
vm=("$VMDIR/run-in-vm.sh")
if [[ $(id -u) != 0 ]] && sudo -n true 2>/dev/null; then
    envs=()
    for v in $(compgen -e); do
        case "$v" in RXE_VM_* | RUST_* | CARGO_* | TMPDIR) envs+=("$v=${!v}") ;; esac
        case " $RXE_VM_ENV " in *" $v "*) envs+=("$v=${!v}") ;; esac
    done
    vm=(sudo -n env "${envs[@]}" "${vm[@]}")
fi
"${vm[@]}" bash "$ROOT/scripts/ib-vm-test.sh" --guest 2>&1 | tr -d '\r' | tee "$log"
rc=${PIPESTATUS[0]}
out=$(cat "$log")
rm -f "$log"
echo "VM run: $((SECONDS - vm_start)) s (run-in-vm.sh exit $rc); total $((SECONDS - start)) s"
summary=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -1)
if [[ -z "$summary" ]]; then
    if [[ $rc == 125 ]]; then
        echo "SKIPPED: the soft-RoCE VM could not be started on this machine (run-in-vm.sh exit 125; see its message above)"
        exit 0
    fi
    echo "the VM did not finish the checks (run-in-vm.sh exit $rc$([[ $rc == 124 ]] && echo ': timed out'))"
    echo "0 passed, 1 failed"
    exit 1
fi
nfail=${summary#*, }
nfail=${nfail%% *}
[[ $nfail == 0 && $rc == 0 ]] || exit 1
exit 0
