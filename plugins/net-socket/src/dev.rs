//! Network interfaces as plugin devices (NCCL's `ncclFindInterfaces` rules, reference §6.1).

use std::net::IpAddr;

use nix::net::if_::InterfaceFlags;

use crate::config::Family;

/// Most interfaces used as devices (NCCL's `MAX_IFS`).
pub const MAX_IFS: usize = 16;
/// Speed reported when `/sys/class/net/<if>/speed` is unreadable or ≤ 0, Mbps (NCCL's default).
pub const DEFAULT_SPEED_MBPS: i32 = 10_000;

/// One candidate interface: its name and first usable address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    /// Interface name (`eth0`).
    pub name: String,
    /// First IPv4/IPv6 address seen for it.
    pub ip: IpAddr,
    /// IPv6 scope id (interface index) for link-local addresses, else 0.
    pub scope_id: u32,
}

/// Interfaces that are up and running with an IPv4/IPv6 address (IPv6 loopback
/// skipped), one address per name in `getifaddrs` order.
pub fn system_interfaces(family: Option<Family>) -> Vec<Iface> {
    let mut out: Vec<Iface> = Vec::new();
    let Ok(list) = nix::ifaddrs::getifaddrs() else {
        return out;
    };
    for ifa in list {
        if !ifa.flags.contains(InterfaceFlags::IFF_UP | InterfaceFlags::IFF_RUNNING) {
            continue;
        }
        let Some(sa) = ifa.address.as_ref() else {
            continue;
        };
        let (ip, scope_id) = if let Some(sin) = sa.as_sockaddr_in()
            && family != Some(Family::V6)
        {
            (IpAddr::V4(sin.ip()), 0)
        } else if let Some(sin6) = sa.as_sockaddr_in6()
            && family != Some(Family::V4)
        {
            if sin6.ip().is_loopback() {
                continue;
            }
            (IpAddr::V6(sin6.ip()), sin6.scope_id())
        } else {
            continue;
        };
        if out.iter().any(|i| i.name == ifa.interface_name) {
            continue;
        }
        out.push(Iface {
            name: ifa.interface_name,
            ip,
            scope_id,
        });
    }
    out
}

/// Whether `name` matches an `NCCL_SOCKET_IFNAME`-style list entry set:
/// entries are prefixes unless `exact`; `:port` suffixes are ignored.
fn matches_list(name: &str, entries: &[&str], exact: bool) -> bool {
    entries.iter().any(|e| {
        let e = e.split(':').next().unwrap_or("");
        !e.is_empty() && if exact { name == e } else { name.starts_with(e) }
    })
}

/// Selects devices from `ifaces` per `NCCL_SOCKET_IFNAME` (`spec`, already
/// filtered to length > 1) or, without it, NCCL's automatic order: `ib*`, else
/// everything but `docker*`/`lo*`/`virbr*`, else `docker*`, else `lo*`, else
/// `virbr*`. At most [`MAX_IFS`].
pub fn select(ifaces: &[Iface], spec: Option<&str>) -> Vec<Iface> {
    let pick = |pred: &dyn Fn(&str) -> bool| -> Vec<Iface> {
        ifaces.iter().filter(|i| pred(&i.name)).take(MAX_IFS).cloned().collect()
    };
    if let Some(spec) = spec {
        let (exclude, rest) = match spec.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, spec),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let entries: Vec<&str> = rest.split(',').collect();
        return pick(&|n| matches_list(n, &entries, exact) != exclude);
    }
    let ib = pick(&|n| n.starts_with("ib"));
    if !ib.is_empty() {
        return ib;
    }
    let virt = ["docker", "lo", "virbr"];
    let rest = pick(&|n| !virt.iter().any(|v| n.starts_with(v)));
    if !rest.is_empty() {
        return rest;
    }
    for v in virt {
        let l = pick(&|n| n.starts_with(v));
        if !l.is_empty() {
            return l;
        }
    }
    Vec::new()
}

/// Link speed of `ifname` in Mbps from sysfs, or [`DEFAULT_SPEED_MBPS`].
pub fn speed_mbps(ifname: &str) -> i32 {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(DEFAULT_SPEED_MBPS)
}

/// Real path of `/sys/class/net/<if>/device` (the PCI device), `None` for virtual interfaces.
pub fn pci_path(ifname: &str) -> Option<String> {
    std::fs::canonicalize(format!("/sys/class/net/{ifname}/device"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ifs(names: &[&str]) -> Vec<Iface> {
        names
            .iter()
            .map(|n| Iface {
                name: n.to_string(),
                ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
                scope_id: 0,
            })
            .collect()
    }
    fn names(v: Vec<Iface>) -> Vec<String> {
        v.into_iter().map(|i| i.name).collect()
    }

    #[test]
    fn ifname_syntax() {
        let all = ifs(&["lo", "eth0", "eth10", "docker0", "enp1s0"]);
        assert_eq!(names(select(&all, Some("eth"))), ["eth0", "eth10"]);
        assert_eq!(names(select(&all, Some("=eth1"))), Vec::<String>::new());
        assert_eq!(names(select(&all, Some("=eth0,lo"))), ["lo", "eth0"]);
        assert_eq!(names(select(&all, Some("^eth,lo"))), ["docker0", "enp1s0"]);
        assert_eq!(
            names(select(&all, Some("^=eth0"))),
            ["lo", "eth10", "docker0", "enp1s0"]
        );
        assert_eq!(names(select(&all, Some("eth0:1"))), ["eth0"]);
    }

    #[test]
    fn auto_order() {
        assert_eq!(names(select(&ifs(&["lo", "eth0", "docker0"]), None)), ["eth0"]);
        assert_eq!(names(select(&ifs(&["lo", "ib0", "eth0"]), None)), ["ib0"]);
        assert_eq!(names(select(&ifs(&["lo", "docker0"]), None)), ["docker0"]);
        assert_eq!(names(select(&ifs(&["virbr0", "lo"]), None)), ["lo"]);
    }

    #[test]
    fn loopback_is_found_and_has_no_pci_path() {
        let all = system_interfaces(Some(Family::V4));
        let lo = all.iter().find(|i| i.name == "lo").expect("lo is up");
        assert_eq!(lo.ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(pci_path("lo"), None);
        assert_eq!(speed_mbps("lo"), DEFAULT_SPEED_MBPS);
    }
}
