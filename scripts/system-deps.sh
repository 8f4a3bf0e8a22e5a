#!/usr/bin/env bash
# scripts/system-deps.sh — checks (and, where it may, installs) the system
# packages of scripts/system-packages.txt, the one list of them.
#
#   scripts/system-deps.sh check  GROUP...  exit 0 if every package of the groups
#                                           is present; else name the missing ones
#                                           and the apt-get line, exit 1
#   scripts/system-deps.sh ensure GROUP...  as check, but install the missing ones
#                                           first when that is possible without a
#                                           prompt: apt-get (Debian/Ubuntu) and root
#                                           or password-less sudo
#   scripts/system-deps.sh list   GROUP...  print the package names, one line
#
# Groups: cc ib test vm netns (see scripts/system-packages.txt). A package counts as
# present when its probe succeeds (a command on PATH, a pkg-config module, a
# file), however it was installed. The check runs no build and takes well under
# a second. FERROCCL_SKIP_SYSTEM_CHECK=1 skips check/ensure (for machines where
# the probes cannot see what is installed); the build then says what is missing.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
list_file=${SYSTEM_PACKAGES_FILE:-$here/system-packages.txt} # the override is for tests
who=${SYSTEM_DEPS_CALLER:-scripts/system-deps.sh}

usage() {
    echo "usage: $0 check|ensure|list GROUP... (groups: cc ib test vm netns)" >&2
    exit 2
}

[[ $# -ge 2 ]] || usage
action=$1
shift
groups=" $* "

# Reads the list: prints "package probe" for every package of the groups.
packages() {
    local pkg group probe _rest
    while read -r pkg group probe _rest; do
        [[ -z "$pkg" || "$pkg" == \#* ]] && continue
        [[ "$groups" == *" $group "* ]] && echo "$pkg $probe"
    done <"$list_file"
}

# Every group asked for must exist in the list (a typo must not pass as "nothing missing").
for g in $groups; do
    if ! awk -v g="$g" '$1 !~ /^#/ && $2 == g { found = 1 } END { exit !found }' "$list_file"; then
        echo "$who: unknown group '$g' (groups in $list_file: $(awk '$1 !~ /^#/ && NF >= 3 { print $2 }' "$list_file" | sort -u | xargs))" >&2
        exit 2
    fi
done

have_libclang() {
    local d libs=() hdrs=()
    shopt -s nullglob
    if [[ -n "${LIBCLANG_PATH:-}" ]]; then
        libs=("$LIBCLANG_PATH"/libclang*.so*)
        hdrs=("$LIBCLANG_PATH"/clang/*/include/stddef.h)
    fi
    for d in /usr/lib/llvm-*/lib /usr/lib64 /usr/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/local/lib; do
        libs+=("$d"/libclang*.so*)
    done
    hdrs+=(/usr/lib/llvm-*/lib/clang/*/include/stddef.h /usr/lib/clang/*/include/stddef.h
        /usr/lib64/clang/*/include/stddef.h /usr/local/lib/clang/*/include/stddef.h)
    shopt -u nullglob
    [[ ${#libs[@]} -gt 0 && ${#hdrs[@]} -gt 0 ]]
}

probe() { # probe-spec
    case "$1" in
    cmd:*) # on PATH, or in an sbin directory that a non-root PATH leaves out
        command -v "${1#cmd:}" >/dev/null 2>&1 || [[ -x /usr/sbin/${1#cmd:} || -x /sbin/${1#cmd:} ]] ;;
    pc:*) command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "${1#pc:}" 2>/dev/null ;;
    file:*) compgen -G "${1#file:}" >/dev/null ;;
    libclang) have_libclang ;;
    *)
        echo "$list_file: unknown probe '$1'" >&2
        return 1
        ;;
    esac
}

# A package may be listed more than once (one line per probe): named once.
missing_packages() {
    local pkg spec
    local -A seen=()
    while read -r pkg spec; do
        if ! probe "$spec" && [[ -z ${seen[$pkg]:-} ]]; then
            seen[$pkg]=1
            printf '%s ' "$pkg"
        fi
    done < <(packages)
}

case "$action" in
list)
    packages | awk '!seen[$1]++ { printf "%s%s", (n++ ? " " : ""), $1 } END { print "" }'
    exit 0
    ;;
check | ensure) ;;
*) usage ;;
esac

if [[ "${FERROCCL_SKIP_SYSTEM_CHECK:-0}" == 1 ]]; then
    echo "$who: FERROCCL_SKIP_SYSTEM_CHECK=1: not checking the system packages ($(packages | awk '{print $1}' | xargs))"
    exit 0
fi

missing=$(missing_packages)
missing=${missing% }
[[ -z "$missing" ]] && exit 0

sudo=()
can_install=0
if [[ $action == ensure ]] && command -v apt-get >/dev/null 2>&1; then
    if [[ $(id -u) == 0 ]]; then
        can_install=1
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        can_install=1
        sudo=(sudo -n)
    fi
fi

if [[ $can_install == 1 ]]; then
    echo "$who: installing the missing system packages: $missing"
    # shellcheck disable=SC2086
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q ||
        ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing; then
        echo "$who: apt-get install $missing failed (see above)" >&2
        exit 1
    fi
    still=$(missing_packages)
    still=${still% }
    if [[ -n "$still" ]]; then
        echo "$who: installed, but still not found: $still (see scripts/system-packages.txt for what is probed)" >&2
        exit 1
    fi
    exit 0
fi

{
    echo "$who: missing system packages: $missing"
    if command -v apt-get >/dev/null 2>&1; then
        prefix="sudo "
        [[ $(id -u) == 0 ]] && prefix=""
        echo "install them with:"
        echo "  ${prefix}apt-get install -y --no-install-recommends $missing"
    else
        echo "these are Debian/Ubuntu package names; install your distribution's equivalents:"
        grep -E "^($(echo "$missing" | tr ' ' '|'))[[:space:]]" "$list_file" | awk '{ $2 = ""; $3 = ""; print "  " $0 }'
    fi
    echo "(scripts/system-packages.txt says what needs each; FERROCCL_SKIP_SYSTEM_CHECK=1 skips this check)"
} >&2
exit 1
