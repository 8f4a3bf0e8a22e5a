#!/usr/bin/env bash
# .ci/ib-vm.sh — CI entry point for the IB verbs plugin's soft-RoCE checks
# (plugins/net-ib, issue 6). Installs the host packages that the rxe-vm tools
# need (qemu, debootstrap, ...), then runs `IB_VM_PERF=0 scripts/ib-vm-test.sh`
# (every correctness check; the bandwidth comparison stays out: CI timing is
# meaningless) under an overall time limit.
#
# Exit status:
#   0  every check passed, or the VM cannot be run on this machine; then the
#      last line is "SKIPPED: <reason>" (no rxe-vm tools, host not Debian 12,
#      no root and no password-less sudo, packages or the guest image cannot be
#      installed/built, the guest does not boot)
#   1  a build failed, a check failed, or the checks did not finish within
#      IB_VM_CI_TIMEOUT
#
#   RXE_VM_DIR        the rxe-vm tools (default: .ci/rxe-vm in this repository)
#   IB_VM_CI_TIMEOUT  seconds for everything after the package install
#                     (default 1800 = 30 min)
#   CARGO_TARGET_DIR  as for cargo (default ./target, shared with .ci/run's build)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$SECONDS
limit=${IB_VM_CI_TIMEOUT:-1800}

skip() {
    echo "SKIPPED: $* ($((SECONDS - start)) s)"
    exit 0
}

if [[ -z "${RXE_VM_DIR:-}" ]]; then
    RXE_VM_DIR=$ROOT/.ci/rxe-vm
fi
[[ -x $RXE_VM_DIR/run-in-vm.sh && -x $RXE_VM_DIR/setup.sh ]] ||
    skip "no rxe-vm tools at $RXE_VM_DIR (set RXE_VM_DIR)"
RXE_VM_DIR=$(cd "$RXE_VM_DIR" && pwd)
export RXE_VM_DIR

# The guest is Debian 12 (bookworm) and runs the binaries built here: they
# need the same glibc and libibverbs.
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
[[ $codename == bookworm ]] ||
    skip "the soft-RoCE guest is Debian 12 (bookworm) and runs host-built binaries; this host is '${codename:-unknown}'"

SUDO=""
if [[ $(id -u) != 0 ]]; then
    sudo -n true 2>/dev/null || skip "the guest image needs root (debootstrap, chroot): not root and no password-less sudo"
    SUDO="sudo -n"
fi

# Host packages, from the one list (scripts/system-packages.txt): the `vm`
# group (qemu, debootstrap, mke2fs, cpio, flock for setup.sh and run-in-vm.sh)
# and the `cc` and `ib` groups (a C compiler, rdma-core headers and libclang
# to build the plugin).
echo "+ scripts/system-deps.sh ensure cc ib vm"
SYSTEM_DEPS_CALLER=.ci/ib-vm.sh scripts/system-deps.sh ensure cc ib vm ||
    skip "the host packages could not be installed (scripts/system-deps.sh ensure cc ib vm)"
echo "packages: $((SECONDS - start)) s"

# Build (or find cached) the guest image now, so that a failure here reads
# as SKIPPED with setup.sh's own message.
t0=$SECONDS
echo "+ $RXE_VM_DIR/setup.sh"
$SUDO env ${RXE_VM_CACHE:+RXE_VM_CACHE=$RXE_VM_CACHE} ${RXE_VM_MIRROR:+RXE_VM_MIRROR=$RXE_VM_MIRROR} \
    timeout -k 10 "$limit" "$RXE_VM_DIR/setup.sh" ||
    skip "the soft-RoCE guest image could not be built (rxe-vm setup.sh exit $?)"
echo "guest image: $((SECONDS - t0)) s"

left=$((limit - (SECONDS - t0)))
((left > 300)) || { echo "no time left for the checks (${left} s)"; exit 1; }
# Leave the script's own VM limit 2 minutes inside ours so that a time-out is
# reported by it (with the checks done so far) rather than by a kill.
export RXE_VM_TIMEOUT=$((left - 120))
export IB_VM_PERF=0
echo "+ IB_VM_PERF=0 RXE_VM_TIMEOUT=$RXE_VM_TIMEOUT scripts/ib-vm-test.sh  (limit ${left} s)"
timeout -k 30 "$left" scripts/ib-vm-test.sh
rc=$?
echo "ib-vm: $((SECONDS - start)) s in all (scripts/ib-vm-test.sh exit $rc)"
case $rc in
0) exit 0 ;;
124 | 137) echo "scripts/ib-vm-test.sh did not finish within ${left} s" ;;
esac
exit 1
