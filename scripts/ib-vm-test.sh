#!/usr/bin/env bash
# scripts/ib-vm-test.sh — prove the IB verbs plugin (plugins/net-ib) on real
# verbs: builds the crate's test binaries on the host (plain
# `cargo test -p ferroccl-net-ib --no-run`, no target-cpu=native: the guest is
# TCG without AVX-512), boots the soft-RoCE guest ONCE via
# ../shared/tools/rxe-vm/run-in-vm.sh and runs every check there, then prints
# "N passed, N failed". Exit code: 0 if all passed.
#
#   CARGO_TARGET_DIR   where to build (default ./target); shared into the guest
#   RXE_VM_DIR         the rxe-vm tools (default ../shared/tools/rxe-vm)
#   IB_VM_PERF=1       also run ib_write_bw and the plugin's 1 MiB bandwidth
#
# Inside the guest this script runs itself with --guest.
set -u

if [[ "${1:-}" == "--guest" ]]; then
    shift
    pass=0
    fail=0
    check() { # name cmd...
        local name=$1
        shift
        echo "=== $name: $*"
        if "$@"; then
            echo "=== PASS $name"
            pass=$((pass + 1))
        else
            echo "=== FAIL $name (exit $?)"
            fail=$((fail + 1))
        fi
    }
    lib_bin=$1 vm_bin=$2 noverbs_bin=$3 versions_bin=${4:-}
    export IB_VM_REQUIRE=1 NCCL_IB_TIMEOUT=14 NCCL_IB_RETRY_CNT=7
    check rxe-device sh -c "ibv_devinfo -d ${RXE_DEV:-rxe0} | grep -q PORT_ACTIVE"
    check sans-io-unit "$lib_bin" --quiet
    check exchange-1qp env NCCL_IB_QPS_PER_CONNECTION=1 "$vm_bin" --nocapture --test-threads=1
    check exchange-4qp env NCCL_IB_QPS_PER_CONNECTION=4 "$vm_bin" --nocapture --test-threads=1
    if [[ -n "$versions_bin" ]]; then
        check dlopen-v6-to-v12 "$versions_bin" --nocapture --test-threads=1
    fi
    check exchange-hca-exact env NCCL_IB_HCA="=${RXE_DEV:-rxe0}:1" NCCL_IB_GID_INDEX="${RXE_GID_INDEX:-1}" \
        "$vm_bin" --nocapture --test-threads=1
    check hca-excluded-init-fails sh -c "NCCL_IB_HCA='^${RXE_DEV:-rxe0}' IB_VM_REQUIRE= '$vm_bin' --nocapture 2>&1 | grep -q 'not selected by NCCL_IB_HCA'"
    check timeout-out-of-range-refused sh -c "NCCL_IB_TIMEOUT=32 IB_VM_REQUIRE= '$vm_bin' --nocapture 2>&1 | grep -q 'NCCL_IB_TIMEOUT'"
    check no-libibverbs "$noverbs_bin" --quiet
    if [[ "${IB_VM_PERF:-0}" == 1 ]]; then
        echo "=== perf: ib_write_bw -s 1048576 (soft-RoCE: says nothing about hardware speed)"
        (ib_write_bw -d "${RXE_DEV:-rxe0}" -x "${RXE_GID_INDEX:-1}" -s 1048576 -n 200 >/tmp/bw_srv.txt 2>&1 &)
        sleep 2
        for _ in 1 2 3 4 5; do
            ib_write_bw -d "${RXE_DEV:-rxe0}" -x "${RXE_GID_INDEX:-1}" -s 1048576 -n 200 127.0.0.1 && break
            sleep 1
        done
        IB_BW_ONLY=1 "$vm_bin" --nocapture --test-threads=1 2>&1 | grep -E "BW|ok|FAIL"
    fi
    echo "$pass passed, $fail failed"
    [[ $fail == 0 ]]
    exit
fi

cd "$(dirname "$0")/.."
ROOT=$PWD
VMDIR=${RXE_VM_DIR:-$ROOT/../shared/tools/rxe-vm}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$CARGO_TARGET_DIR"
CARGO_TARGET_DIR=$(cd "$CARGO_TARGET_DIR" && pwd)
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS

json=$(cargo test -p ferroccl-net-ib --no-run --message-format=json) || {
    echo "build failed"
    echo "0 passed, 1 failed"
    exit 1
}
exe() { # target name
    printf '%s\n' "$json" | grep '"executable":"/' | grep "\"name\":\"$1\"" | grep '"test":true' |
        sed -E 's/.*"executable":"([^"]+)".*/\1/' | tail -1
}
lib_bin=$(exe nccl_net_ib)
vm_bin=$(exe vm_exchange)
noverbs_bin=$(exe no_verbs)
versions_bin=$(exe vm_versions)
if [[ -z "$lib_bin" || -z "$vm_bin" || -z "$noverbs_bin" ]]; then
    echo "could not find the test executables (lib=$lib_bin vm=$vm_bin no_verbs=$noverbs_bin)"
    echo "0 passed, 1 failed"
    exit 1
fi

export RXE_VM_SHARE="$ROOT:$CARGO_TARGET_DIR"
export RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-1200}
export RXE_VM_ENV="${RXE_VM_ENV:-} IB_VM_PERF"
out=$("$VMDIR/run-in-vm.sh" bash "$ROOT/scripts/ib-vm-test.sh" --guest "$lib_bin" "$vm_bin" "$noverbs_bin" "$versions_bin" 2>&1)
rc=$?
out=$(printf '%s\n' "$out" | tr -d '\r')
printf '%s\n' "$out"
if ! printf '%s\n' "$out" | grep -qE '^[0-9]+ passed, [0-9]+ failed$'; then
    echo "the VM did not run the checks (run-in-vm.sh exit $rc)"
    echo "0 passed, 1 failed"
    exit 1
fi
exit $rc
