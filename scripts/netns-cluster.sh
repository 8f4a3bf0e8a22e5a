#!/usr/bin/env bash
# scripts/netns-cluster.sh — several hosts on one machine: K network namespaces,
# each a "host" with its own host name (a UTS namespace, so ranks in different
# hosts have different host hashes, as on real nodes), its own sysfs and
# /etc/hosts (a mount namespace, as `ip netns exec` gives), and one or two NICs:
# veth pairs to a bridge per NIC that lives in a switch namespace the script
# also makes. Nothing is added to the namespace the script is run from; traffic
# stays inside the namespaces made here.
#
#   netns-cluster.sh [--name N] up K [--rate R] [--delay D] [--loss P] [--two-nics] [--mtu M]
#   netns-cluster.sh [--name N] down
#   netns-cluster.sh [--name N] status
#   netns-cluster.sh [--name N] exec HOST -- CMD [ARG...]   run CMD on HOST (cwd kept)
#   netns-cluster.sh [--name N] addr HOST [--nic I]          HOST's address (NIC I, default 0)
#   netns-cluster.sh [--name N] shape HOST|all [--nic I] [--rate R] [--delay D] [--loss P] | --clear
#   netns-cluster.sh [--name N] link HOST up|down [--nic I]  the switch port of HOST's NIC
#   netns-cluster.sh [--name N] kill HOST [SIGNAL]           signal every process on HOST
#   netns-cluster.sh [--name N] mpirun [MPIRUN-ARG...]        Open MPI's mpirun across the hosts
#   netns-cluster.sh [--name N] iperf [--from H] [--to H] [-t SEC] [--bidir] [-P N]
#   netns-cluster.sh list                                    clusters made here
#
# HOST is an index (0 … K-1), `h<i>`, or the host name `<N>-h<i>`.
#
# up K      makes hosts 0 … K-1 (K in 1 … 64). Host i is network namespace
#           `<N>-h<i>`, host name `<N>-h<i>`, NIC j is `eth<j>` with address
#           198.18.<j>.<i+1>/24 (RFC 2544's benchmarking range; --two-nics adds
#           eth1 on a second bridge and subnet). Every host's /etc/hosts names all
#           hosts. IPv6 is off in every namespace made.
#   --rate R  (tc tbf, e.g. 10gbit, 800mbit) on both directions of every NIC: the
#           host's egress and the switch port's egress towards the host;
#   --delay D (tc netem, e.g. 20us) on the host's egress: one-way latency D,
#           RTT 2D. Needs the kernel's netem qdisc (CONFIG_NET_SCH_NETEM): where
#           it is missing the script says so and stops (nothing is left behind).
#   --loss P  (percent, e.g. 1 or 0.5; nftables on the host's ingress, so the
#           sender sees a wire loss) on every NIC. Needs `nft` (Debian: nftables).
#   --mtu M   MTU of every NIC (default 1500).
# down      stops every process still on the hosts (TERM, then KILL after 3 s),
#           deletes the namespaces and mounts the cluster's journal lists. It
#           refuses to touch a namespace whose mark is not this cluster's.
# shape     changes a host's shaping later (a slow link; loss on one host):
#           --rate and --delay replace the NIC's qdisc (both together), --loss
#           its drop rule, each only when given; --clear removes all of it.
# link      sets HOST's switch port down or up: HOST's NIC loses its carrier,
#           packets to and from it are dropped, no connection is reset (a
#           pulled cable).
# mpirun    runs Open MPI's mpirun on host 0 with a host file of the cluster's
#           hosts (`<N>-h<i> slots=…`) and this script as the remote shell
#           (`plm_rsh_agent`), so `-np N --map-by node` or `--map-by slot`
#           starts ranks on the hosts; the TCP BTL and the out-of-band channel
#           are restricted to eth0. Extra arguments go to mpirun unchanged.
# iperf     iperf3 between two hosts (default from 1 to 0), raw TCP at the
#           same shaping, as the bound a collective is compared with.
#
# Ownership: the state of cluster N is /run/ferroccl-netns/N (FERROCCL_NETNS_DIR
# for another root): a journal of every namespace and mount made, written
# before the next one is made, and a random token. Every namespace made carries
# the mark `ferroccl-netns:N:<token>` as the alias of its loopback interface;
# `down` removes only what the journal lists and whose mark matches. `up`
# refuses to start when the state directory or any namespace name it would use
# exists. A failed or interrupted `up` (error, SIGINT, SIGTERM, SIGHUP) tears
# down what it made before it exits; after a SIGKILL, `down` finishes the job
# from the journal.
#
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN), ip and tc (iproute2), unshare
# and nsenter (util-linux); iperf3, nft and mpirun only for their commands
# (scripts/system-packages.txt, groups test and netns).
set -euo pipefail

MARK=ferroccl-netns
STATE_ROOT=${FERROCCL_NETNS_DIR:-/run/ferroccl-netns}
NAME=${FERROCCL_NETNS_CLUSTER:-fcc}
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
SUBNET_PREFIX=198.18

die() {
    echo "netns-cluster: $*" >&2
    exit 1
}
say() { echo "netns-cluster: $*"; }

usage() {
    sed -n '/^#   netns-cluster.sh/s/^#   //p' "$SELF" >&2
    exit 2
}

need_root() {
    [[ $(id -u) == 0 ]] || die "$1 needs root (network, UTS and mount namespaces); run it as root or with sudo"
}

need_cmd() { # cmd package
    command -v "$1" >/dev/null 2>&1 || [[ -x /usr/sbin/$1 || -x /sbin/$1 ]] ||
        die "'$1' not found (Debian package $2; scripts/system-deps.sh ensure netns installs it)"
}

valid_name() {
    [[ $1 =~ ^[a-z][a-z0-9]{0,11}$ ]] || die "--name '$1': use 1-12 lower-case letters and digits, starting with a letter"
}

dir() { echo "$STATE_ROOT/$NAME"; }
state_file() { echo "$(dir)/state"; }
hosts_file() { echo "$(dir)/hosts"; }
host_ns() { echo "$NAME-h$1"; }
switch_ns() { echo "$NAME-sw"; }
host_addr() { echo "$SUBNET_PREFIX.$2.$(($1 + 1))"; } # host nic

# Reads the cluster's header: sets TOKEN, NHOSTS, NNICS. Dies unless the state
# was written by this script for this name.
load_state() {
    local sf
    sf=$(state_file)
    [[ -f $sf ]] || die "no cluster '$NAME' here ($sf missing); \`$0 list\` shows the clusters made by this script"
    local magic name token
    read -r magic name token <"$sf" || true
    [[ $magic == "$MARK-v1" && $name == "$NAME" && -n $token ]] ||
        die "$sf was not written by this script for cluster '$NAME' (first line '$magic $name …'): not touching it"
    TOKEN=$token
    NHOSTS=$(awk '$1 == "hosts" { print $2 }' "$sf" | tail -1)
    NNICS=$(awk '$1 == "nics" { print $2 }' "$sf" | tail -1)
    ORIGIN_MNT=$(awk '$1 == "origin-mnt" { print $2 }' "$sf" | tail -1)
    [[ -n $NHOSTS && -n $NNICS ]] || die "cluster '$NAME' is incomplete (an \`up\` was interrupted): run \`$0 --name $NAME down\`"
}

# Every object is journalled before it is made (bash runs a trap only between
# commands, so an interrupted `up` never leaves an object its journal lacks).
journal() { echo "$*" >>"$(state_file)"; }

# Makes a network namespace and marks it as ours (alias of its loopback). The
# journal says `netns-new` until the mark is set: such a namespace without any
# mark was made here (the name was checked free just before).
make_ns() {
    local ns=$1
    journal netns-new "$ns"
    ip netns add "$ns"
    ip -n "$ns" link set lo alias "$MARK:$NAME:$TOKEN"
    journal netns "$ns"
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 >/dev/null
}

ns_mark() { ip -n "$1" -o link show lo 2>/dev/null | sed -n 's/.*alias \([^ ]*\).*/\1/p'; }

# Host index from HOST (index, h<i>, or <name>-h<i>).
host_index() {
    local h=$1
    h=${h#"$NAME"-}
    h=${h#h}
    [[ $h =~ ^[0-9]+$ ]] && ((h < NHOSTS)) || die "no host '$1' in cluster '$NAME' (hosts 0 … $((NHOSTS - 1)))"
    echo "$h"
}

nic_arg() {
    [[ $1 =~ ^[0-9]+$ ]] && (($1 < NNICS)) || die "--nic $1: cluster '$NAME' has $NNICS NIC(s) per host"
    echo "$1"
}

# Runs a command in host i's network, UTS and mount namespaces, in the caller's
# working directory. The namespace files are bind mounts in the mount namespace
# `up` ran in; a caller inside a host (mpirun's remote shell) does not see its
# peers' files, so it first goes back there, through a process in it: the
# `mpirun` command's own shell (FERROCCL_NETNS_ORIGIN_PID), else pid 1.
enter() { # index cmd...
    local i=$1
    shift
    local cmd=(nsenter --net="/run/netns/$(host_ns "$i")" --uts="$(dir)/h$i.uts" --mount="$(dir)/h$i.mnt" --wd="$PWD" -- "$@")
    if [[ -n ${ORIGIN_MNT:-} && $(stat -L -c %i /proc/self/ns/mnt) != "$ORIGIN_MNT" ]]; then
        local via="" p
        for p in ${FERROCCL_NETNS_ORIGIN_PID:-} 1; do
            if [[ $(stat -L -c %i "/proc/$p/ns/mnt" 2>/dev/null) == "$ORIGIN_MNT" ]]; then
                via=/proc/$p/ns/mnt
                break
            fi
        done
        [[ -n $via ]] ||
            die "cannot reach host $i from this mount namespace: the cluster's namespace files live in the one \`up\` ran in (inode $ORIGIN_MNT); set FERROCCL_NETNS_ORIGIN_PID to a process there"
        cmd=(nsenter --mount="$via" -- "${cmd[@]}")
    fi
    "${cmd[@]}"
}

# "10gbit" -> bits per second (tc's units: bit kbit mbit gbit tbit, k/m/g = kbit/mbit/gbit).
rate_bps() {
    local r=${1,,} n u
    [[ $r =~ ^([0-9]+(\.[0-9]+)?)([a-z]*)$ ]] || die "--rate '$1': expected a number and a unit (bit kbit mbit gbit), e.g. 10gbit"
    n=${BASH_REMATCH[1]}
    u=${BASH_REMATCH[3]}
    case $u in
    bit) awk -v n="$n" 'BEGIN { printf "%.0f", n }' ;;
    k | kbit) awk -v n="$n" 'BEGIN { printf "%.0f", n * 1e3 }' ;;
    m | mbit) awk -v n="$n" 'BEGIN { printf "%.0f", n * 1e6 }' ;;
    g | gbit) awk -v n="$n" 'BEGIN { printf "%.0f", n * 1e9 }' ;;
    t | tbit) awk -v n="$n" 'BEGIN { printf "%.0f", n * 1e12 }' ;;
    *) die "--rate '$1': unit '$u' not understood (bit kbit mbit gbit tbit)" ;;
    esac
}

# "1" / "0.5" / "1%" -> drops per 10000.
loss_per_10k() {
    local p=${1%\%}
    [[ $p =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--loss '$1': expected a percentage, e.g. 1 or 0.5"
    awk -v p="$p" 'BEGIN { v = int(p * 100 + 0.5); if (v > 10000) v = 10000; printf "%d", v }'
}

delay_ok() {
    [[ $1 =~ ^[0-9]+(\.[0-9]+)?(us|usec|ms|msec|s|sec)$ ]] || die "--delay '$1': expected a time with a unit (us, ms), e.g. 20us"
}

# Dies unless the kernel has the netem qdisc (probed on a throw-away namespace
# of this cluster's name, before anything is changed).
netem_ok() {
    local probe="$NAME-netem-probe-$$" err
    ip netns add "$probe" || die "cannot make the probe namespace $probe"
    err=$(tc -n "$probe" qdisc add dev lo root netem delay 1us 2>&1) || {
        ip netns del "$probe"
        die "--delay needs the netem qdisc (sch_netem, CONFIG_NET_SCH_NETEM), which this kernel lacks (tc: ${err:-failed}); shape without --delay"
    }
    ip netns del "$probe"
}

# tbf on (ns, dev) at rate (bits/s); with delay, under a netem root.
qdisc_set() { # ns dev rate delay
    local ns=$1 dev=$2 rate=$3 delay=$4 burst parent=root
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    if [[ -n $delay ]]; then
        tc -n "$ns" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000
        parent="parent 1:"
    fi
    if [[ -n $rate ]]; then
        # A burst of 200 µs at the rate (at least 64 KiB: a GSO packet of a veth
        # must fit), a queue of 10 ms at the rate.
        burst=$(awk -v r="$rate" 'BEGIN { b = r / 8 * 200e-6; if (b < 65536 + 1514) b = 65536 + 1514; printf "%d", b }')
        # shellcheck disable=SC2086
        tc -n "$ns" qdisc add dev "$dev" $parent handle 2: tbf rate "${rate}bit" burst "$burst" latency 10ms
    fi
}

loss_set() { # ns dev per10k
    local ns=$1 dev=$2 n=$3 table="ferroccl_loss_$2"
    ip netns exec "$ns" nft delete table netdev "$table" 2>/dev/null || true
    [[ $n == 0 || -z $n ]] && return 0
    ip netns exec "$ns" nft -f - <<EOF
table netdev $table {
    chain ingress {
        type filter hook ingress device "$dev" priority 0; policy accept;
        numgen random mod 10000 < $n drop
    }
}
EOF
}

# Shapes NIC j of host i (both ends).
shape_nic() { # i j rate delay loss10k
    local i=$1 j=$2 rate=$3 delay=$4 loss=$5
    if [[ -n $rate$delay ]]; then
        qdisc_set "$(host_ns "$i")" "eth$j" "$rate" "$delay"
        qdisc_set "$(switch_ns)" "h${i}n$j" "$rate" ""
    fi
    if [[ -n $loss ]]; then loss_set "$(host_ns "$i")" "eth$j" "$loss"; fi
}

# Removes what the journal lists, newest first. Sets DOWN_REFUSED when a mark
# did not match.
teardown() {
    local sf d entries kind what pids n
    d=$(dir)
    sf=$(state_file)
    DOWN_REFUSED=0
    [[ -f $sf ]] || return 0
    local magic name token
    read -r magic name token <"$sf" || true
    [[ $magic == "$MARK-v1" && $name == "$NAME" && $token == "$TOKEN" ]] || return 0
    mapfile -t entries < <(awk '$1 ~ /^(netns|netns-new|mount|bind)$/ { print }' "$sf" | tac)
    # Processes first, in every namespace (a rank on one host must not outlive its
    # peers' namespaces by a retry loop).
    for e in "${entries[@]}"; do
        read -r kind what <<<"$e"
        [[ $kind == netns ]] || continue
        ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$what" || continue
        if [[ $(ns_mark "$what") != "$MARK:$NAME:$TOKEN" ]]; then
            continue
        fi
        pids=$(ip netns pids "$what" 2>/dev/null | xargs)
        [[ -n $pids ]] && {
            say "stopping processes on $what: $pids"
            # shellcheck disable=SC2086
            kill -TERM $pids 2>/dev/null || true
        }
    done
    for n in $(seq 30); do
        pids=""
        for e in "${entries[@]}"; do
            read -r kind what <<<"$e"
            [[ $kind == netns ]] && ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$what" &&
                [[ $(ns_mark "$what") == "$MARK:$NAME:$TOKEN" ]] && pids+=" $(ip netns pids "$what" 2>/dev/null | xargs)"
        done
        [[ -z ${pids// /} ]] && break
        if ((n == 30)); then
            # shellcheck disable=SC2086
            kill -KILL $pids 2>/dev/null || true
            sleep 0.2
        else
            sleep 0.1
        fi
    done
    for e in "${entries[@]}"; do
        read -r kind what <<<"$e"
        case $kind in
        netns | netns-new)
            ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$what" || continue
            local mark
            mark=$(ns_mark "$what")
            if [[ $mark != "$MARK:$NAME:$TOKEN" && ! ($kind == netns-new && -z $mark) ]]; then
                echo "netns-cluster: namespace $what carries '${mark:-no mark}', not this cluster's mark: left alone" >&2
                DOWN_REFUSED=1
                continue
            fi
            ip netns del "$what"
            ;;
        bind | mount)
            if mountpoint -q "$what" 2>/dev/null || grep -q " $what " /proc/self/mountinfo; then
                umount "$what" 2>/dev/null || umount -l "$what"
            fi
            if [[ $kind == mount ]]; then rm -f "$what"; fi
            ;;
        esac
    done
    # Keep the journal while anything it lists was left alone: a later `down`
    # (after the mark is sorted out) finishes the job.
    [[ $DOWN_REFUSED == 1 ]] && return 0
    rm -f "$d/hosts" "$d/hostfile" "$d/etc-hosts" "$sf"
    if mountpoint -q "$d" 2>/dev/null; then umount "$d" 2>/dev/null || umount -l "$d"; fi
    rmdir "$d" 2>/dev/null || true
}

cmd_up() {
    local k="" rate="" delay="" loss="" nnics=1 mtu=1500
    while [[ $# -gt 0 ]]; do
        case $1 in
        --rate) rate=$(rate_bps "${2:?--rate needs a value}"); shift 2 ;;
        --delay) delay_ok "${2:?--delay needs a value}"; delay=$2; shift 2 ;;
        --loss) loss=$(loss_per_10k "${2:?--loss needs a value}"); shift 2 ;;
        --two-nics) nnics=2; shift ;;
        --mtu) mtu=${2:?--mtu needs a value}; [[ $mtu =~ ^[0-9]+$ ]] || die "--mtu '$mtu'"; shift 2 ;;
        -*) die "up: unknown option '$1'" ;;
        *) [[ -z $k ]] || die "up: one host count, got '$k' and '$1'"; k=$1; shift ;;
        esac
    done
    [[ $k =~ ^[0-9]+$ ]] && ((k >= 1 && k <= 64)) || die "up K: K must be 1 … 64 (got '${k:-nothing}')"
    need_root up
    need_cmd ip iproute2
    need_cmd unshare util-linux
    need_cmd nsenter util-linux
    [[ -n $rate$delay ]] && need_cmd tc iproute2
    [[ -n $loss ]] && need_cmd nft nftables
    [[ -n $delay ]] && netem_ok
    ip netns list >/dev/null 2>&1 || die "ip netns does not work here: $(ip netns list 2>&1 | head -1)"
    local d i j
    d=$(dir)
    [[ -e $d ]] && die "cluster '$NAME' exists ($d): \`$0 --name $NAME down\` first, or pick another --name"
    for ns in "$(switch_ns)" $(for i in $(seq 0 $((k - 1))); do host_ns "$i"; done); do
        ip netns list | awk '{ print $1 }' | grep -qx "$ns" && die "a network namespace '$ns' exists and was not made for this cluster: not touching it (pick another --name)"
    done
    TOKEN=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
    DONE_UP=0
    # On any exit before the end: remove what the journal lists (teardown checks
    # the token), then the state directory if it is still empty.
    trap 'rc=$?; if [[ $DONE_UP != 1 ]]; then echo "netns-cluster: up failed or was interrupted: removing what it made" >&2; teardown || true; rmdir "$(dir)" 2>/dev/null || true; fi; exit $rc' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    mkdir -p "$STATE_ROOT"
    mkdir "$d" || die "cannot create $d"
    echo "$MARK-v1 $NAME $TOKEN" >"$(state_file)"
    journal origin-mnt "$(stat -L -c %i /proc/self/ns/mnt)"
    # Persistent mount-namespace files must sit on a private mount.
    journal bind "$d"
    mount --bind "$d" "$d"
    mount --make-private "$d"

    local sw
    sw=$(switch_ns)
    make_ns "$sw"
    for j in $(seq 0 $((nnics - 1))); do
        ip -n "$sw" link add "br$j" type bridge
        ip -n "$sw" link set "br$j" alias "$MARK:$NAME:$TOKEN" mtu "$mtu" up
    done
    # /etc/hosts of every host: the cluster's names and addresses.
    {
        echo "127.0.0.1 localhost"
        for i in $(seq 0 $((k - 1))); do echo "$(host_addr "$i" 0) $(host_ns "$i")"; done
    } >"$d/etc-hosts"
    : >"$d/hostfile"
    for i in $(seq 0 $((k - 1))); do
        local ns
        ns=$(host_ns "$i")
        make_ns "$ns"
        for j in $(seq 0 $((nnics - 1))); do
            # Made from inside the host's namespace: some kernels (6.1, of the
            # soft-RoCE guest) look the new name up in the caller's namespace
            # ("RTNETLINK answers: File exists" where the caller has an eth0).
            ip -n "$ns" link add "eth$j" mtu "$mtu" type veth peer name "h${i}n$j" netns "$sw" mtu "$mtu"
            ip -n "$ns" link set "eth$j" alias "$MARK:$NAME:$TOKEN"
            ip -n "$sw" link set "h${i}n$j" alias "$MARK:$NAME:$TOKEN" master "br$j" up
            ip -n "$ns" addr add "$(host_addr "$i" "$j")/24" dev "eth$j"
            ip -n "$ns" link set "eth$j" up
        done
        # The host's name (UTS) and its own sysfs and /etc/hosts (mount).
        journal mount "$d/h$i.uts"
        journal mount "$d/h$i.mnt"
        touch "$d/h$i.uts" "$d/h$i.mnt"
        nsenter --net="/run/netns/$ns" unshare --uts="$d/h$i.uts" --mount="$d/h$i.mnt" --propagation slave \
            sh -c "hostname '$ns' && umount -l /sys && mount -t sysfs sysfs /sys && mount --bind '$d/etc-hosts' /etc/hosts"
        echo "$ns slots=64" >>"$d/hostfile"
    done
    {
        echo "hosts $k"
        echo "nics $nnics"
        echo "rate ${rate:-none}"
        echo "delay ${delay:-none}"
        echo "loss ${loss:-0}"
    } >>"$(state_file)"
    if [[ -n $rate$delay$loss ]]; then
        for i in $(seq 0 $((k - 1))); do
            for j in $(seq 0 $((nnics - 1))); do shape_nic "$i" "$j" "$rate" "$delay" "$loss"; done
        done
    fi
    # The description tools read (ferroccl-perf --hosts): one line per host.
    {
        echo "# $MARK-v1 $NAME: host netns uts mnt hostname addresses"
        for i in $(seq 0 $((k - 1))); do
            local addrs=""
            for j in $(seq 0 $((nnics - 1))); do addrs+=" $(host_addr "$i" "$j")"; done
            echo "h$i /run/netns/$(host_ns "$i") $d/h$i.uts $d/h$i.mnt $(host_ns "$i")$addrs"
        done
    } >"$(hosts_file)"
    DONE_UP=1
    NHOSTS=$k
    NNICS=$nnics
    trap - EXIT INT TERM HUP
    local shaped="unshaped" lost="none"
    [[ -n $rate ]] && shaped="$((rate / 1000000)) Mbit/s"
    [[ -n $loss ]] && lost="$loss/10000"
    say "cluster '$NAME' up: $k host(s) × $nnics NIC(s), rate $shaped, delay ${delay:-none}, loss $lost"
    cmd_status_body
}

cmd_status_body() {
    local i j
    for i in $(seq 0 $((NHOSTS - 1))); do
        local line="  h$i $(host_ns "$i"):"
        for j in $(seq 0 $((NNICS - 1))); do line+=" eth$j $(host_addr "$i" "$j")"; done
        echo "$line"
    done
    say "enter a host: $0 --name $NAME exec 0 -- CMD; ferroccl-perf --hosts K [--cluster $NAME] --ranks N …; remove: $0 --name $NAME down"
}

cmd_status() {
    load_state
    local sf i j
    sf=$(state_file)
    say "cluster '$NAME' ($(dir)): $NHOSTS host(s) × $NNICS NIC(s); rate $(awk '$1=="rate"{print $2}' "$sf") bit/s, delay $(awk '$1=="delay"{print $2}' "$sf"), loss $(awk '$1=="loss"{print $2}' "$sf")/10000"
    for i in $(seq 0 $((NHOSTS - 1))); do
        for j in $(seq 0 $((NNICS - 1))); do
            local ns port st
            ns=$(host_ns "$i")
            port=$(ip -n "$(switch_ns)" -o link show "h${i}n$j" 2>/dev/null | grep -o 'state [A-Z]*' || echo "state ?")
            st=$(tc -n "$ns" qdisc show dev "eth$j" 2>/dev/null | awk '{ print $2 }' | xargs)
            echo "  h$i $ns eth$j $(host_addr "$i" "$j") switch port ${port#state } qdisc: ${st:-?}; processes: $(ip netns pids "$ns" 2>/dev/null | wc -l)"
        done
    done
}

cmd_down() {
    need_root down
    load_state_for_down
    teardown
    if [[ $DOWN_REFUSED == 1 ]]; then die "cluster '$NAME': some namespaces were left alone (see above)"; fi
    say "cluster '$NAME' removed"
}

# Like load_state, but an interrupted `up` (no host count yet) may be removed.
load_state_for_down() {
    local sf magic name token
    sf=$(state_file)
    [[ -f $sf ]] || die "no cluster '$NAME' here ($sf missing): nothing to remove"
    read -r magic name token <"$sf" || true
    [[ $magic == "$MARK-v1" && $name == "$NAME" && -n $token ]] ||
        die "$sf was not written by this script for cluster '$NAME': not touching it"
    TOKEN=$token
}

cmd_exec() {
    need_root exec
    load_state
    local h=${1:?exec HOST -- CMD}
    shift
    [[ ${1:-} == -- ]] && shift
    [[ $# -gt 0 ]] || die "exec $h: no command"
    local i
    i=$(host_index "$h")
    enter "$i" "$@"
}

cmd_addr() {
    load_state
    local h=${1:?addr HOST} nic=0
    shift
    [[ ${1:-} == --nic ]] && nic=$(nic_arg "${2:?--nic I}")
    local i
    i=$(host_index "$h")
    host_addr "$i" "$nic"
}

cmd_shape() {
    need_root shape
    load_state
    local h=${1:?shape HOST|all …} rate="" delay="" loss="" clear=0 nic=all
    shift
    while [[ $# -gt 0 ]]; do
        case $1 in
        --rate) rate=$(rate_bps "${2:?}"); shift 2 ;;
        --delay) delay_ok "${2:?}"; delay=$2; shift 2 ;;
        --loss) loss=$(loss_per_10k "${2:?}"); shift 2 ;;
        --nic) nic=$(nic_arg "${2:?}"); shift 2 ;;
        --clear) clear=1; shift ;;
        *) die "shape: unknown option '$1'" ;;
        esac
    done
    [[ $clear == 1 || -n $rate$delay$loss ]] || die "shape: give --rate, --delay, --loss or --clear"
    [[ -n $loss ]] && need_cmd nft nftables
    [[ -n $delay ]] && netem_ok
    local hosts nics i j
    if [[ $h == all ]]; then hosts=$(seq 0 $((NHOSTS - 1))); else hosts=$(host_index "$h"); fi
    if [[ $nic == all ]]; then nics=$(seq 0 $((NNICS - 1))); else nics=$nic; fi
    for i in $hosts; do
        for j in $nics; do
            if [[ $clear == 1 ]]; then
                tc -n "$(host_ns "$i")" qdisc del dev "eth$j" root 2>/dev/null || true
                tc -n "$(switch_ns)" qdisc del dev "h${i}n$j" root 2>/dev/null || true
                command -v nft >/dev/null 2>&1 && loss_set "$(host_ns "$i")" "eth$j" 0
            else
                shape_nic "$i" "$j" "$rate" "$delay" "$loss"
            fi
        done
    done
    say "shaped host(s) $(echo "$hosts" | xargs) NIC(s) $(echo "$nics" | xargs): $([[ $clear == 1 ]] && echo cleared || echo "rate ${rate:-unchanged-none} delay ${delay:-none} loss ${loss:-0}/10000")"
}

cmd_link() {
    need_root link
    load_state
    local h=${1:?link HOST up|down} state=${2:?link HOST up|down} nic=0
    shift 2
    [[ ${1:-} == --nic ]] && nic=$(nic_arg "${2:?--nic I}")
    [[ $state == up || $state == down ]] || die "link: 'up' or 'down', not '$state'"
    local i
    i=$(host_index "$h")
    ip -n "$(switch_ns)" link set "h${i}n$nic" "$state"
    say "host $i ($(host_ns "$i")) NIC eth$nic: switch port $state"
}

cmd_kill() {
    need_root kill
    load_state
    local i sig=${2:-KILL} pids
    i=$(host_index "${1:?kill HOST [SIGNAL]}")
    pids=$(ip netns pids "$(host_ns "$i")" | xargs)
    [[ -n $pids ]] || {
        say "no processes on host $i"
        return 0
    }
    # shellcheck disable=SC2086
    kill -"$sig" $pids
    say "sent SIG$sig to host $i's processes: $pids"
}

# plm_rsh_agent of `mpirun`: `agent HOST COMMAND-STRING…`, as ssh is called.
cmd_agent() {
    load_state
    local h=${1:?agent HOST CMD}
    shift
    local i
    i=$(host_index "$h")
    enter "$i" /bin/sh -c "$*"
}

cmd_mpirun() {
    need_root mpirun
    load_state
    need_cmd mpirun openmpi-bin
    FERROCCL_NETNS_ORIGIN_PID=$$ enter 0 mpirun --allow-run-as-root --hostfile "$(dir)/hostfile" \
        --mca plm_rsh_agent "$SELF --name $NAME agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 "$@"
}

cmd_iperf() {
    need_root iperf
    load_state
    need_cmd iperf3 iperf3
    local from=1 to=0 secs=5 extra=()
    while [[ $# -gt 0 ]]; do
        case $1 in
        --from) from=$(host_index "${2:?}"); shift 2 ;;
        --to) to=$(host_index "${2:?}"); shift 2 ;;
        -t) secs=${2:?}; shift 2 ;;
        *) extra+=("$1"); shift ;;
        esac
    done
    [[ $from != "$to" ]] || die "iperf: --from and --to are the same host"
    local port=5201 srv
    enter "$to" iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
    srv=$!
    # Wait (bounded) for the server's socket.
    local n
    for n in $(seq 50); do
        enter "$to" sh -c "ss -ltn 2>/dev/null | grep -q ':$port '" && break
        sleep 0.1
    done
    local rc=0
    enter "$from" iperf3 -c "$(host_addr "$to" 0)" -p "$port" -t "$secs" "${extra[@]}" || rc=$?
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    return "$rc"
}

cmd_list() {
    [[ -d $STATE_ROOT ]] || exit 0
    local sf
    for sf in "$STATE_ROOT"/*/state; do
        [[ -f $sf ]] || continue
        local magic name token
        read -r magic name token <"$sf" || true
        [[ $magic == "$MARK-v1" ]] || continue
        echo "$name $(awk '$1=="hosts"{print $2}' "$sf") host(s) $(dirname "$sf")"
    done
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
valid_name "$NAME"
cmd=${1:-}
[[ -n $cmd ]] || usage
shift
case $cmd in
up)
    cmd_up "$@"
    ;;
down) cmd_down ;;
status) cmd_status ;;
exec) cmd_exec "$@" ;;
addr) cmd_addr "$@" ;;
shape) cmd_shape "$@" ;;
link) cmd_link "$@" ;;
kill) cmd_kill "$@" ;;
agent) cmd_agent "$@" ;;
mpirun) cmd_mpirun "$@" ;;
iperf) cmd_iperf "$@" ;;
list) cmd_list ;;
*) usage ;;
esac
