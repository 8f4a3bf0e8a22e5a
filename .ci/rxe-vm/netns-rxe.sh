#!/usr/bin/env bash
# .ci/rxe-vm/netns-rxe.sh — one soft-RoCE NIC per host of a simulated cluster
# (scripts/netns-cluster.sh), for the IB plugin between hosts. Run it INSIDE
# the soft-RoCE guest (.ci/rxe-vm/run-in-vm.sh), after `netns-cluster.sh up K`.
#
#   netns-rxe.sh [--name N] up        a NIC for every host of cluster N
#   netns-rxe.sh [--name N] down      remove them (before `netns-cluster.sh down`)
#   netns-rxe.sh [--name N] status    host, RDMA device, address, port state
#
# Why not simply rxe on each host's eth0: rdma_rxe up to at least Linux 6.1
# (the guest's Debian 12 kernel) has one UDP socket for RoCE v2 (port 4791),
# made in the initial network namespace when the module loads, and routes its
# packets there. An rxe device on a netdev inside another namespace sends
# nothing and receives nothing (`ibv_rc_pingpong` fails with "local QP
# operation error"; the peer's rxe counts 0 packets), and rxe devices cannot
# move between namespaces (`rdma dev set rxe0 netns X`: "Operation not
# supported").
#
# So each host's RDMA NIC lives in the namespace the script is run from (the
# guest's root namespace) and the ranks, in their host's namespaces, use it as
# a container uses an RDMA device of its node in `shared` netns mode:
#
#   * host i gets a veth `<N>r<i>` (address 198.18.16.<i+1>/24, IPv6 off) whose
#     peer is a port of a bridge in the switch namespace `<N>-rsw`, and the rxe
#     device `<N>-h<i>-rxe` on it; its RoCE v2 GID is ::ffff:198.18.16.<i+1>;
#   * policy routing makes traffic between these NICs leave on the wire: a rule
#     `oif <N>r<i> lookup <table>` per NIC (rxe and the kernel's address
#     resolution route with the NIC as output interface) ahead of the `local`
#     table, which moves from preference 0 to 500; each NIC accepts packets
#     from the other NICs' local addresses (accept_local=1, rp_filter=0) and
#     answers ARP only for its own address (arp_ignore=1, arp_announce=2). So
#     every RoCE packet between two hosts crosses their veths and the bridge
#     (its counters show it), exactly as between two machines;
#   * host i's mount namespace gets its own /dev/infiniband (a tmpfs) holding
#     only its device's uverbs node and rdma_cm: libibverbs lists only devices
#     whose character device it can open, so a rank sees exactly one HCA, its
#     host's (how device plugins expose an RDMA device to a container).
#
# Ranks' TCP (bootstrap, the socket plugin, the IB plugin's side channel) stays
# on the hosts' own eth0 in their namespaces. Everything made is journalled in
# $FERROCCL_NETNS_DIR-rxe/N (default /run/ferroccl-netns-rxe/N) before it is
# made; `down` removes only what the journal lists (the switch namespace
# carries the journal's random token as its loopback's alias); a failed `up`
# removes what it made. The changes to the root namespace (policy rules, the
# local rule's preference, sysctls of the NICs made here) are why this script
# is meant for the disposable guest only.
#
# Needs root, ip and rdma (iproute2), nsenter and mount (util-linux), the
# rdma_rxe module, and cluster N made by scripts/netns-cluster.sh.
set -euo pipefail

NAME=${FERROCCL_NETNS_CLUSTER:-fcc}
CLUSTER_ROOT=${FERROCCL_NETNS_DIR:-/run/ferroccl-netns}
STATE_ROOT=${FERROCCL_NETNS_DIR:-/run/ferroccl-netns}-rxe
MARK=ferroccl-netns-rxe
SUBNET=198.18.16
RULE_BASE=20000 # rule preference and table of host i: RULE_BASE + i
LOCAL_PREF=500  # where the `local` rule moves to (after the oif rules, before main)

die() {
    echo "netns-rxe: $*" >&2
    exit 1
}
say() { echo "netns-rxe: $*"; }

usage() {
    sed -n 's/^#   netns-rxe.sh/netns-rxe.sh/p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

dir() { echo "$STATE_ROOT/$NAME"; }
journal_file() { echo "$(dir)/journal"; }
journal() { echo "$*" >>"$(journal_file)"; }
sw_ns() { echo "$NAME-rsw"; }
nic() { echo "${NAME}r$1"; }
dev() { echo "$NAME-h$1-rxe"; }
addr() { echo "$SUBNET.$(($1 + 1))"; }

# Hosts of cluster NAME: sets HOST_MNT[i] (mount namespace file) and NHOSTS.
load_cluster() {
    local f=$CLUSTER_ROOT/$NAME/hosts id netns uts mnt rest
    [[ -f $f ]] || die "no cluster '$NAME' ($f missing): run scripts/netns-cluster.sh --name $NAME up K first"
    HOST_MNT=()
    while read -r id netns uts mnt rest; do
        [[ $id == \#* || -z $id ]] && continue
        [[ $id == "h${#HOST_MNT[@]}" && -e $mnt ]] || die "$f: unexpected line '$id $netns $uts $mnt $rest'"
        HOST_MNT+=("$mnt")
    done <"$f"
    NHOSTS=${#HOST_MNT[@]}
    ((NHOSTS > 0 && NHOSTS <= 64)) || die "$f: $NHOSTS hosts"
}

# The uverbs character device of RDMA device $1 ("MAJ:MIN uverbsN").
uverbs_of() {
    local u
    for u in /sys/class/infiniband_verbs/uverbs*; do
        [[ -f $u/ibdev && $(cat "$u/ibdev") == "$1" ]] && {
            echo "$(cat "$u/dev") $(basename "$u")"
            return 0
        }
    done
    return 1
}

# Removes what the journal lists, newest first (only with a matching token).
teardown() {
    local jf entries e kind a b
    jf=$(journal_file)
    [[ -f $jf ]] || return 0
    mapfile -t entries < <(tail -n +2 "$jf" | tac)
    for e in "${entries[@]}"; do
        read -r kind a b <<<"$e"
        case $kind in
        devmount) # mount-namespace-file
            [[ -e $a ]] && nsenter --mount="$a" sh -c 'umount /dev/infiniband 2>/dev/null || umount -l /dev/infiniband 2>/dev/null' || true
            ;;
        rxe) rdma link show "$a/1" >/dev/null 2>&1 && rdma link del "$a" || true ;;
        veth) ip link show "$a" >/dev/null 2>&1 && ip link del "$a" || true ;;
        rule) # pref table
            ip rule del pref "$a" 2>/dev/null || true
            ip route flush table "$b" 2>/dev/null || true
            ;;
        localrule) # moved the local rule from pref 0 to $a: put it back unless another cluster still needs it
            local other
            other=$(find "$STATE_ROOT" -mindepth 2 -maxdepth 2 -name journal ! -path "$jf" 2>/dev/null | head -1)
            if [[ -z $other ]]; then
                ip rule show pref 0 | grep -q 'lookup local' || ip rule add pref 0 lookup local
                ip rule del pref "$a" lookup local 2>/dev/null || true
            fi
            ;;
        sysctl) sysctl -qw "$a=$b" || true ;;
        netns)
            if ip netns list | awk '{ print $1 }' | grep -qx "$a"; then
                local mark
                mark=$(ip -n "$a" -o link show lo 2>/dev/null | sed -n 's/.*alias \([^ ]*\).*/\1/p')
                if [[ $mark == "$MARK:$NAME:$TOKEN" || ($b == new && -z $mark) ]]; then
                    ip netns del "$a"
                else
                    echo "netns-rxe: namespace $a carries '${mark:-no mark}', not this script's: left alone" >&2
                fi
            fi
            ;;
        esac
    done
    rm -f "$jf"
    rmdir "$(dir)" 2>/dev/null || true
}

load_token() {
    local jf magic name
    jf=$(journal_file)
    [[ -f $jf ]] || die "no RDMA NICs of cluster '$NAME' here ($jf missing)"
    read -r magic name TOKEN <"$jf" || true
    [[ $magic == "$MARK-v1" && $name == "$NAME" && -n $TOKEN ]] || die "$jf was not written by this script for '$NAME': not touching it"
}

cmd_up() {
    [[ $(id -u) == 0 ]] || die "up needs root"
    for c in ip rdma nsenter mount mknod; do command -v "$c" >/dev/null || die "'$c' not found"; done
    load_cluster
    [[ -e $(dir) ]] && die "cluster '$NAME' has RDMA NICs already ($(dir)): \`$0 --name $NAME down\` first"
    modprobe rdma_rxe 2>/dev/null || true
    [[ -d /sys/module/rdma_rxe ]] || die "the rdma_rxe module is not loaded and cannot be (this script runs inside the soft-RoCE guest, .ci/rxe-vm)"
    ip netns list | awk '{ print $1 }' | grep -qx "$(sw_ns)" && die "a namespace '$(sw_ns)' exists and is not this script's"
    local i
    for i in $(seq 0 $((NHOSTS - 1))); do
        ip link show "$(nic "$i")" >/dev/null 2>&1 && die "an interface '$(nic "$i")' exists and is not this script's"
        [[ -d /sys/class/infiniband/$(dev "$i") ]] && die "an RDMA device '$(dev "$i")' exists and is not this script's"
        ip rule show pref $((RULE_BASE + i)) | grep -q . && die "an ip rule with preference $((RULE_BASE + i)) exists and is not this script's"
    done
    TOKEN=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    local done_up=0 d
    d=$(dir)
    trap 'rc=$?; if [[ $done_up != 1 ]]; then echo "netns-rxe: up failed or was interrupted: removing what it made" >&2; teardown || true; fi; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    mkdir -p "$d"
    echo "$MARK-v1 $NAME $TOKEN" >"$(journal_file)"

    local sw
    sw=$(sw_ns)
    journal netns "$sw" new
    ip netns add "$sw"
    ip -n "$sw" link set lo alias "$MARK:$NAME:$TOKEN"
    journal netns "$sw" marked
    ip -n "$sw" link set lo up
    ip netns exec "$sw" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up

    # The local table after the oif rules (once for all clusters of this script).
    if ip rule show pref 0 | grep -q 'lookup local'; then
        journal localrule "$LOCAL_PREF"
        ip rule add pref "$LOCAL_PREF" lookup local
        ip rule del pref 0 lookup local
    fi
    local v
    v=$(sysctl -n net.ipv4.conf.all.rp_filter)
    if [[ $v != 0 ]]; then
        journal sysctl net.ipv4.conf.all.rp_filter "$v"
        sysctl -qw net.ipv4.conf.all.rp_filter=0
    fi

    for i in $(seq 0 $((NHOSTS - 1))); do
        local n=$(nic "$i") t=$((RULE_BASE + i))
        journal veth "$n"
        ip link add "$n" type veth peer name "p$i" netns "$sw"
        # All NICs share one namespace: only the NIC holding an address may
        # answer ARP for it (arp_ignore=1; else every NIC answers for every
        # address and RoCE packets land on the wrong host's rxe), and ARP
        # requests carry the sending NIC's address (arp_announce=2).
        sysctl -qw "net.ipv6.conf.$n.disable_ipv6=1" "net.ipv4.conf.$n.accept_local=1" "net.ipv4.conf.$n.rp_filter=0" \
            "net.ipv4.conf.$n.arp_ignore=1" "net.ipv4.conf.$n.arp_announce=2"
        ip addr add "$(addr "$i")/24" dev "$n"
        ip link set "$n" up
        ip -n "$sw" link set "p$i" master br0 up
        journal rule "$t" "$t"
        ip route add "$SUBNET.0/24" dev "$n" src "$(addr "$i")" table "$t"
        ip rule add pref "$t" oif "$n" lookup "$t"
        journal rxe "$(dev "$i")"
        rdma link add "$(dev "$i")" type rxe netdev "$n"
    done
    # Every port ACTIVE with its RoCE v2 IPv4 GID (bounded wait).
    for i in $(seq 0 $((NHOSTS - 1))); do
        local g=/sys/class/infiniband/$(dev "$i")/ports/1 want n ok=0
        want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(addr "$i" | tr . ' '))
        for _ in $(seq 200); do
            if grep -q ACTIVE "$g/state" 2>/dev/null; then
                for n in 0 1 2 3; do
                    [[ $(cat "$g/gids/$n" 2>/dev/null) == "$want" ]] && ok=1
                done
            fi
            ((ok)) && break
            sleep 0.05
        done
        ((ok)) || die "$(dev "$i"): no ACTIVE port with the GID of $(addr "$i") after 10 s"
    done
    # Each host sees only its own device.
    for i in $(seq 0 $((NHOSTS - 1))); do
        local u majmin cdev rcm
        u=$(uverbs_of "$(dev "$i")") || die "no uverbs character device for $(dev "$i")"
        read -r majmin cdev <<<"$u"
        rcm=$(cat /sys/class/misc/rdma_cm/dev 2>/dev/null || true)
        journal devmount "${HOST_MNT[$i]}"
        nsenter --mount="${HOST_MNT[$i]}" sh -c "
            mount -t tmpfs -o mode=0755,size=64k '$MARK-$NAME' /dev/infiniband &&
            mknod -m 0666 /dev/infiniband/$cdev c ${majmin%:*} ${majmin#*:} &&
            if [ -n '$rcm' ]; then mknod -m 0666 /dev/infiniband/rdma_cm c ${rcm%:*} ${rcm#*:}; fi"
    done
    done_up=1
    trap - EXIT INT TERM
    say "cluster '$NAME': $NHOSTS RDMA NIC(s), one per host, over bridge br0 of namespace $sw"
    cmd_status_body
}

cmd_status_body() {
    local i
    for i in $(seq 0 $((NHOSTS - 1))); do
        local g=/sys/class/infiniband/$(dev "$i")/ports/1
        echo "  h$i $(dev "$i") on $(nic "$i") $(addr "$i") port $(cut -d' ' -f2 "$g/state" 2>/dev/null || echo ?); seen by the host as /dev/infiniband/$(uverbs_of "$(dev "$i")" | cut -d' ' -f2)"
    done
}

cmd_status() {
    load_cluster
    load_token
    cmd_status_body
}

cmd_down() {
    [[ $(id -u) == 0 ]] || die "down needs root"
    load_token
    teardown
    say "cluster '$NAME': RDMA NICs removed"
}

while [[ $# -gt 0 ]]; do
    case $1 in
    --name)
        NAME=${2:?--name needs a value}
        shift 2
        ;;
    -h | --help) usage ;;
    *) break ;;
    esac
done
[[ $NAME =~ ^[a-z][a-z0-9]{0,11}$ ]] || die "--name '$NAME': 1-12 lower-case letters and digits, starting with a letter"
case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*) usage ;;
esac
