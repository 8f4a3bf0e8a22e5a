//! Network interface selection with NCCL's `NCCL_SOCKET_IFNAME` / `NCCL_SOCKET_FAMILY`
//! rules (`ncclFindInterfaces`, `matchIfList` in NCCL 2.30 `src/misc/socket.cc`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use nix::net::if_::InterfaceFlags;
use nix::sys::socket::SockaddrStorage;

use super::error::{BootstrapError, Result};

/// `MAX_IFS`: the most interfaces NCCL collects.
pub const MAX_IFS: usize = 16;

/// Address family restriction (`NCCL_SOCKET_FAMILY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SocketFamily {
    /// No restriction (unset or any value other than the two below).
    #[default]
    Any,
    /// `AF_INET`: IPv4 only.
    Inet,
    /// `AF_INET6`: IPv6 only.
    Inet6,
}

impl SocketFamily {
    /// Parses an `NCCL_SOCKET_FAMILY` value: exactly `AF_INET` or `AF_INET6`;
    /// anything else (including unset/empty) means no restriction, as in NCCL.
    pub fn from_nccl(value: Option<&str>) -> Self {
        match value {
            Some("AF_INET") => SocketFamily::Inet,
            Some("AF_INET6") => SocketFamily::Inet6,
            _ => SocketFamily::Any,
        }
    }

    fn allows(self, ip: &IpAddr) -> bool {
        match self {
            SocketFamily::Any => true,
            SocketFamily::Inet => ip.is_ipv4(),
            SocketFamily::Inet6 => ip.is_ipv6(),
        }
    }
}

/// One candidate interface: name, first address (in `getifaddrs` order) and netmask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Interface name, e.g. `lo`, `eth0`.
    pub name: String,
    /// The address used for listening.
    pub addr: IpAddr,
    /// The address' netmask (used for the `NCCL_COMM_ID` subnet match).
    pub netmask: IpAddr,
}

/// A parsed `NCCL_SOCKET_IFNAME` list: `^` = exclude, `=` = exact names, else prefixes;
/// comma separated; `:port…` suffixes ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfnameFilter {
    /// `^` given: the list excludes instead of selects.
    pub exclude: bool,
    /// `=` given: entries are exact names instead of prefixes.
    pub exact: bool,
    /// Entry names (port suffixes stripped).
    pub names: Vec<String>,
}

impl IfnameFilter {
    /// Parses an `NCCL_SOCKET_IFNAME` value. Returns `None` for values of length ≤ 1
    /// (NCCL ignores them and auto-selects).
    pub fn parse(value: &str) -> Option<Self> {
        if value.len() <= 1 {
            return None;
        }
        let mut v = value;
        let exclude = v.starts_with('^');
        if exclude {
            v = &v[1..];
        }
        let exact = v.starts_with('=');
        if exact {
            v = &v[1..];
        }
        let names = v
            .split(',')
            .map(|e| e.split(':').next().unwrap_or("").to_string())
            .filter(|e| !e.is_empty())
            .collect();
        Some(IfnameFilter { exclude, exact, names })
    }

    /// Whether interface `name` passes this filter.
    pub fn matches(&self, name: &str) -> bool {
        let hit = self.names.iter().any(|e| {
            if self.exact {
                name == e
            } else {
                name.starts_with(e.as_str())
            }
        });
        hit != self.exclude
    }
}

/// Lists running interfaces with an address allowed by `family` (IPv6 loopback
/// excluded, one address per name, first seen wins), in `getifaddrs` order.
pub fn list_interfaces(family: SocketFamily) -> Result<Vec<Interface>> {
    let mut out: Vec<Interface> = Vec::new();
    let list = nix::ifaddrs::getifaddrs().map_err(|e| BootstrapError::io("getifaddrs", std::io::Error::from(e)))?;
    for ifa in list {
        if !ifa.flags.contains(InterfaceFlags::IFF_RUNNING) {
            continue;
        }
        let Some(addr) = ifa.address.as_ref().and_then(storage_ip) else {
            continue;
        };
        let netmask = ifa.netmask.as_ref().and_then(storage_ip);
        if !family.allows(&addr) {
            continue;
        }
        if let IpAddr::V6(v6) = addr
            && v6.is_loopback()
        {
            continue;
        }
        if out.iter().any(|i| i.name == ifa.interface_name) {
            continue;
        }
        let netmask = netmask.unwrap_or(match addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::BROADCAST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from([0xff; 16])),
        });
        out.push(Interface {
            name: ifa.interface_name,
            addr,
            netmask,
        });
    }
    Ok(out)
}

/// The IPv4/IPv6 address in `sa`; `None` for other families.
fn storage_ip(sa: &SockaddrStorage) -> Option<IpAddr> {
    match (sa.as_sockaddr_in(), sa.as_sockaddr_in6()) {
        (Some(v4), _) => Some(IpAddr::V4(v4.ip())),
        (None, Some(v6)) => Some(IpAddr::V6(v6.ip())),
        (None, None) => None,
    }
}

fn same_subnet(iface: &Interface, target: &IpAddr) -> bool {
    match (iface.addr, iface.netmask, target) {
        (IpAddr::V4(a), IpAddr::V4(m), IpAddr::V4(t)) => {
            let m = u32::from(m);
            u32::from(a) & m == u32::from(*t) & m
        }
        (IpAddr::V6(a), IpAddr::V6(m), IpAddr::V6(t)) => {
            let m = u128::from(m);
            u128::from(a) & m == u128::from(*t) & m
        }
        _ => false,
    }
}

/// Applies NCCL's selection rules to `candidates` (pure; see [`find_interfaces`]).
///
/// With `ifname` (length > 1): the interfaces matching the list. Otherwise: `ib*`;
/// else (if `comm_id` is given) the interface in the same subnet as it; else all but
/// `docker*`/`lo*`/`virbr*`; else `docker*`; else `lo*`; else `virbr*`. At most
/// [`MAX_IFS`] are returned.
pub fn select_interfaces(
    candidates: &[Interface],
    ifname: Option<&str>,
    comm_id: Option<&SocketAddr>,
) -> Vec<Interface> {
    let pick = |f: &dyn Fn(&Interface) -> bool| -> Vec<Interface> {
        candidates.iter().filter(|i| f(i)).take(MAX_IFS).cloned().collect()
    };
    if let Some(filter) = ifname.and_then(IfnameFilter::parse) {
        return pick(&|i| filter.matches(&i.name));
    }
    let ib = pick(&|i| i.name.starts_with("ib"));
    if !ib.is_empty() {
        return ib;
    }
    if let Some(target) = comm_id {
        let ip = target.ip();
        if ip.is_loopback() {
            // A loopback NCCL_COMM_ID can only be reached over a loopback interface.
            let lo = pick(&|i| i.addr.is_loopback() && i.addr.is_ipv4() == ip.is_ipv4());
            if !lo.is_empty() {
                return lo.into_iter().take(1).collect();
            }
        }
        let sub = pick(&|i| same_subnet(i, &ip));
        if !sub.is_empty() {
            return sub.into_iter().take(1).collect();
        }
    }
    let is_virtual = |n: &str| n.starts_with("docker") || n.starts_with("lo") || n.starts_with("virbr");
    for f in [
        &(|i: &Interface| !is_virtual(&i.name)) as &dyn Fn(&Interface) -> bool,
        &|i: &Interface| i.name.starts_with("docker"),
        &|i: &Interface| i.name.starts_with("lo"),
        &|i: &Interface| i.name.starts_with("virbr"),
    ] {
        let v = pick(f);
        if !v.is_empty() {
            return v;
        }
    }
    Vec::new()
}

/// Finds the interfaces NCCL would use on this host (see [`select_interfaces`]).
pub fn find_interfaces(
    ifname: Option<&str>,
    family: SocketFamily,
    comm_id: Option<&SocketAddr>,
) -> Result<Vec<Interface>> {
    let all = list_interfaces(family)?;
    Ok(select_interfaces(&all, ifname, comm_id))
}

/// The bootstrap interface: the first of [`find_interfaces`]. Errors (naming the
/// filter and the interfaces that exist) if none matches.
pub fn bootstrap_interface(
    ifname: Option<&str>,
    family: SocketFamily,
    comm_id: Option<&SocketAddr>,
) -> Result<Interface> {
    let all = list_interfaces(family)?;
    let sel = select_interfaces(&all, ifname, comm_id);
    sel.into_iter().next().ok_or_else(|| {
        let names: Vec<String> = all.iter().map(|i| format!("{} ({})", i.name, i.addr)).collect();
        BootstrapError::NoInterface(format!(
            "NCCL_SOCKET_IFNAME={:?} NCCL_SOCKET_FAMILY={family:?} matched none of the running interfaces [{}]",
            ifname.unwrap_or("<unset>"),
            names.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, addr: &str, mask: &str) -> Interface {
        Interface {
            name: name.into(),
            addr: addr.parse().unwrap(),
            netmask: mask.parse().unwrap(),
        }
    }

    fn names(v: &[Interface]) -> Vec<&str> {
        v.iter().map(|i| i.name.as_str()).collect()
    }

    #[test]
    fn filter_syntax() {
        assert_eq!(IfnameFilter::parse("e"), None);
        let f = IfnameFilter::parse("eth,ens:1").unwrap();
        assert!(!f.exclude && !f.exact);
        assert_eq!(f.names, vec!["eth", "ens"]);
        assert!(f.matches("eth10") && f.matches("ens3") && !f.matches("lo"));
        let f = IfnameFilter::parse("^=docker0").unwrap();
        assert!(f.exclude && f.exact);
        assert!(!f.matches("docker0") && f.matches("docker01") && f.matches("lo"));
        let f = IfnameFilter::parse("=lo").unwrap();
        assert!(f.matches("lo") && !f.matches("lo1"));
        let f = IfnameFilter::parse("^lo").unwrap();
        assert!(!f.matches("lo") && f.matches("eth0"));
    }

    #[test]
    fn auto_order() {
        let lo = iface("lo", "127.0.0.1", "255.0.0.0");
        let d = iface("docker0", "172.17.0.1", "255.255.0.0");
        let e = iface("eth0", "10.0.0.5", "255.255.255.0");
        let e1 = iface("eth1", "192.168.1.5", "255.255.255.0");
        let ib = iface("ib0", "10.1.0.5", "255.255.0.0");
        let all = vec![lo.clone(), d.clone(), e.clone(), e1.clone(), ib.clone()];
        assert_eq!(names(&select_interfaces(&all, None, None)), vec!["ib0"]);
        let no_ib = vec![lo.clone(), d.clone(), e.clone(), e1.clone()];
        assert_eq!(names(&select_interfaces(&no_ib, None, None)), vec!["eth0", "eth1"]);
        let cid: SocketAddr = "192.168.1.77:1234".parse().unwrap();
        assert_eq!(names(&select_interfaces(&no_ib, None, Some(&cid))), vec!["eth1"]);
        let cid_lo: SocketAddr = "127.0.0.1:1234".parse().unwrap();
        assert_eq!(names(&select_interfaces(&no_ib, None, Some(&cid_lo))), vec!["lo"]);
        assert_eq!(
            names(&select_interfaces(&[lo.clone(), d.clone()], None, None)),
            vec!["docker0"]
        );
        assert_eq!(
            names(&select_interfaces(std::slice::from_ref(&lo), None, None)),
            vec!["lo"]
        );
        assert_eq!(names(&select_interfaces(&all, Some("lo"), None)), vec!["lo"]);
        assert_eq!(
            names(&select_interfaces(&all, Some("^eth,ib"), None)),
            vec!["lo", "docker0"]
        );
        assert!(select_interfaces(&all, Some("=eth"), None).is_empty());
    }

    #[test]
    fn loopback_exists_here() {
        let lo = bootstrap_interface(Some("lo"), SocketFamily::Inet, None).unwrap();
        assert_eq!(lo.name, "lo");
        assert!(lo.addr.is_loopback());
        let err = bootstrap_interface(Some("=no_such_if0"), SocketFamily::Any, None).unwrap_err();
        assert!(err.to_string().contains("no_such_if0"), "{err}");
    }
}
