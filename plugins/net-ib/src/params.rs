//! `NCCL_IB_*` parameters, `NCCL_IB_HCA` filtering, RoCE GID selection and port
//! speed decoding. Pure functions: no verbs, no I/O beyond reading the
//! environment in [`IbParams::from_env`].
//!
//! Defaults and meanings follow NCCL 2.30.7 `src/transport/net_ib/` (reference
//! §6.2). Unlike NCCL, values outside what the verbs fields can hold are
//! refused with an error that names the variable and its range, instead of
//! being silently truncated (a truncated `NCCL_IB_TIMEOUT` of 32 becomes 0,
//! which means "wait forever").

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferroccl_plugin_api::params::IntParam;

/// The soname of libibverbs (rdma-core's `libibverbs1`): `NCCL_IBVERBS_LIB`'s
/// default and the last library tried (`crate::verbs`).
pub const LIBIBVERBS: &str = "libibverbs.so.1";

ferroccl_plugin_api::params! {
    /// The plugin's parameters, as NCCL's IB transport reads them
    /// (`src/transport/net_ib/`), with the ranges the plugin enforces; exported
    /// as `ferrocclParams_v1` (`ferroccl-info params`, `ferroccl-info ib`).
    pub static PARAMS = [
        DISABLE: int "NCCL_IB_DISABLE" = 0, 0..=1, "IB plugin: 1 disables it";
        HCA: str "NCCL_IB_HCA" = None, "IB plugin: HCAs and ports to use (^ excludes, = exact)";
        GID_INDEX: int "NCCL_IB_GID_INDEX" = -1, -1..=65_535, "IB plugin: RoCE GID index (-1: automatic)";
        ADDR_FAMILY: str "NCCL_IB_ADDR_FAMILY" = Some("AF_INET"), ["AF_INET", "AF_INET6"], "IB plugin: address family of automatically chosen RoCE GIDs";
        ADDR_RANGE: str "NCCL_IB_ADDR_RANGE" = None, "IB plugin: addr/prefixlen that automatically chosen RoCE GIDs must lie in";
        ROCE_VERSION_NUM: int "NCCL_IB_ROCE_VERSION_NUM" = 2, 1..=2, "IB plugin: RoCE version of automatically chosen GIDs";
        QPS_PER_CONNECTION: int "NCCL_IB_QPS_PER_CONNECTION" = 1, 1..=128, "IB plugin: queue pairs per connection";
        TIMEOUT: int "NCCL_IB_TIMEOUT" = 20, 1..=31, "IB plugin: ACK timeout exponent, 4.096 us x 2^value";
        RETRY_CNT: int "NCCL_IB_RETRY_CNT" = 7, 0..=7, "IB plugin: transport retries";
        SL: int "NCCL_IB_SL" = -1, -1..=15, "IB plugin: service level (-1: automatic)";
        TC: int "NCCL_IB_TC" = -1, -1..=255, "IB plugin: traffic class (-1: automatic)";
        PKEY: int "NCCL_IB_PKEY" = 0, 0..=65_535, "IB plugin: partition key index";
        /// Opt-in for the same reason as the socket plugin's `NCCL_SOCKET_RMA_ENABLE`:
        /// NCCL 2.30 takes the first RMA table with a device from the net plugin's
        /// library, and this one registers host memory only, so offered by default it
        /// would displace NCCL's own IB RMA (which registers GPU memory).
        RMA_ENABLE: int "NCCL_IB_RMA_ENABLE" = 0, 0..=1, "IB plugin: 1 offers its RMA table's devices (one-sided put/get as RDMA WRITE/READ, signal as an atomic add; host memory only); 0 reports none";
        /// NCCL 2.30.7 reads it in `src/misc/ibvsymbols.cc` (`buildIbvSymbols`).
        IBVERBS_LIB: str "NCCL_IBVERBS_LIB" = Some(LIBIBVERBS), "IB plugin: libibverbs library to load";
        /// The name read before the plugin followed NCCL's `NCCL_IBVERBS_LIB`
        /// (issue 20); honoured, with a warning, while `NCCL_IBVERBS_LIB` is unset.
        IB_VERBS_LIB: str "NCCL_IB_VERBS_LIB" = None, "IB plugin: former name of NCCL_IBVERBS_LIB (ferroccl only)";
    ];
}
ferroccl_plugin_api::export_params!(PARAMS);

/// A parameter error: which variable, what was found, what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} is invalid: {expected}")]
pub struct ParamError {
    /// Environment variable name, e.g. `NCCL_IB_TIMEOUT`.
    pub var: &'static str,
    /// The value found.
    pub value: String,
    /// What is accepted.
    pub expected: String,
}

/// Address family for automatic RoCE GID selection (`NCCL_IB_ADDR_FAMILY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrFamily {
    /// `AF_INET` (default): IPv4-mapped GIDs `::ffff:a.b.c.d`.
    Inet,
    /// `AF_INET6`: IPv6 GIDs (link-local ones skipped).
    Inet6,
}

/// All `NCCL_IB_*` settings the plugin uses, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct IbParams {
    /// `NCCL_IB_DISABLE` (1 ⇒ `init` fails).
    pub disable: bool,
    /// `NCCL_IB_HCA`, parsed.
    pub hca: HcaFilter,
    /// `NCCL_IB_GID_INDEX` (-1 ⇒ automatic).
    pub gid_index: i32,
    /// `NCCL_IB_ADDR_FAMILY` (`AF_INET` or `AF_INET6`).
    pub addr_family: AddrFamily,
    /// `NCCL_IB_ADDR_RANGE` (`addr/prefixlen`), if set.
    pub addr_range: Option<(IpAddr, u8)>,
    /// `NCCL_IB_ROCE_VERSION_NUM` (1 or 2, default 2).
    pub roce_version: u32,
    /// `NCCL_IB_QPS_PER_CONNECTION`, 1 ..= 128.
    pub qps_per_conn: usize,
    /// `NCCL_IB_TIMEOUT`: ACK timeout exponent, 4.096 µs × 2^value; 1 ..= 31.
    pub timeout: u8,
    /// `NCCL_IB_RETRY_CNT`, 0 ..= 7.
    pub retry_cnt: u8,
    /// `NCCL_IB_SL` (-1 ⇒ from the comm's traffic class if set, else 0), 0 ..= 15.
    pub sl: i32,
    /// `NCCL_IB_TC` (-1 ⇒ from the comm's traffic class if set, else 0), 0 ..= 255.
    pub tc: i32,
    /// `NCCL_IB_PKEY` (partition key index), 0 ..= 65535.
    pub pkey: u16,
}

impl Default for IbParams {
    fn default() -> Self {
        // The declarations' defaults (each in its field's range).
        IbParams {
            disable: DISABLE.default == 1,
            hca: HcaFilter::default(),
            gid_index: GID_INDEX.default as i32,
            addr_family: AddrFamily::Inet,
            addr_range: None,
            roce_version: ROCE_VERSION_NUM.default as u32,
            qps_per_conn: QPS_PER_CONNECTION.default as usize,
            timeout: TIMEOUT.default as u8,
            retry_cnt: RETRY_CNT.default as u8,
            sl: SL.default as i32,
            tc: TC.default as i32,
            pkey: PKEY.default as u16,
        }
    }
}

pub(crate) fn int_param(get: &dyn Fn(&str) -> Option<String>, p: &IntParam) -> Result<i64, ParamError> {
    let (var, lo, hi) = (p.name, p.min, p.max);
    let Some(raw) = get(var) else { return Ok(p.default) };
    let s = raw.trim();
    if s.is_empty() {
        return Ok(p.default);
    }
    let v = s.parse::<i64>().map_err(|_| ParamError {
        var,
        value: raw.clone(),
        expected: format!("an integer in {lo} ..= {hi}"),
    })?;
    if v < lo || v > hi {
        return Err(ParamError {
            var,
            value: raw,
            expected: format!("an integer in {lo} ..= {hi}"),
        });
    }
    Ok(v)
}

impl IbParams {
    /// Reads and validates the parameters from the process environment.
    pub fn from_env() -> Result<Self, ParamError> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Reads and validates the parameters through `get` (testable without touching
    /// the environment).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ParamError> {
        let disable = int_param(get, &DISABLE)? == 1;
        let hca = match get(HCA.name) {
            Some(s) => HcaFilter::parse(&s)?,
            None => HcaFilter::default(),
        };
        let gid_index = int_param(get, &GID_INDEX)? as i32;
        let addr_family = match get(ADDR_FAMILY.name).as_deref().map(str::trim) {
            None | Some("") | Some("AF_INET") => AddrFamily::Inet,
            Some("AF_INET6") => AddrFamily::Inet6,
            Some(other) => {
                return Err(ParamError {
                    var: ADDR_FAMILY.name,
                    value: other.into(),
                    expected: "AF_INET or AF_INET6".into(),
                });
            }
        };
        let addr_range = match get(ADDR_RANGE.name) {
            Some(s) if !s.trim().is_empty() => Some(parse_range(&s)?),
            _ => None,
        };
        let roce_version = int_param(get, &ROCE_VERSION_NUM)? as u32;
        let qps_per_conn = int_param(get, &QPS_PER_CONNECTION)? as usize;
        let timeout = int_param(get, &TIMEOUT)? as u8;
        let retry_cnt = int_param(get, &RETRY_CNT)? as u8;
        let sl = int_param(get, &SL)? as i32;
        let tc = int_param(get, &TC)? as i32;
        let pkey = int_param(get, &PKEY)? as u16;
        Ok(IbParams {
            disable,
            hca,
            gid_index,
            addr_family,
            addr_range,
            roce_version,
            qps_per_conn,
            timeout,
            retry_cnt,
            sl,
            tc,
            pkey,
        })
    }

    /// Traffic class for a connection: `NCCL_IB_TC` if set, else the comm's
    /// (v10+) traffic class if defined, else 0.
    pub fn effective_tc(&self, comm_tc: i32) -> u8 {
        if self.tc >= 0 {
            self.tc as u8
        } else if (0..=255).contains(&comm_tc) {
            comm_tc as u8
        } else {
            0
        }
    }

    /// Service level: `NCCL_IB_SL` if set, else the comm's traffic class (if it
    /// is a valid SL), else 0.
    pub fn effective_sl(&self, comm_tc: i32) -> u8 {
        if self.sl >= 0 {
            self.sl as u8
        } else if (0..=15).contains(&comm_tc) {
            comm_tc as u8
        } else {
            0
        }
    }

    /// Worst-case time (ms) before a dead peer is reported by the verbs layer
    /// itself: 4.096 µs × 2^timeout × (retry_cnt + 1).
    pub fn verbs_timeout_ms(&self) -> u64 {
        let one_us = 4.096 * f64::from(1u32 << self.timeout);
        (one_us * f64::from(self.retry_cnt + 1) / 1000.0).ceil() as u64
    }
}

fn parse_range(raw: &str) -> Result<(IpAddr, u8), ParamError> {
    let err = || ParamError {
        var: ADDR_RANGE.name,
        value: raw.into(),
        expected: "addr/prefixlen, e.g. 10.0.0.0/8 or fd00::/8".into(),
    };
    let (a, l) = raw.trim().split_once('/').ok_or_else(err)?;
    let addr: IpAddr = a.parse().map_err(|_| err())?;
    let len: u8 = l.parse().map_err(|_| err())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(err());
    }
    Ok((addr, len))
}

/// One `NCCL_IB_HCA` entry: name and optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaEntry {
    /// Device name (or prefix unless the list is exact).
    pub name: String,
    /// Port, if given (`mlx5_0:1`).
    pub port: Option<u32>,
}

/// Parsed `NCCL_IB_HCA`: `[^][=]<hca>[:<port>[:<rail>[:<plane>]]],…`.
/// Rail/plane fields are accepted and ignored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HcaFilter {
    /// `^`: the list excludes instead of selecting.
    pub exclude: bool,
    /// `=`: names match exactly instead of by prefix.
    pub exact: bool,
    /// The entries; empty = no filter.
    pub entries: Vec<HcaEntry>,
}

impl HcaFilter {
    /// Parses the `NCCL_IB_HCA` syntax.
    pub fn parse(raw: &str) -> Result<Self, ParamError> {
        let mut s = raw.trim();
        let mut f = HcaFilter::default();
        if let Some(r) = s.strip_prefix('^') {
            f.exclude = true;
            s = r;
        }
        if let Some(r) = s.strip_prefix('=') {
            f.exact = true;
            s = r;
        }
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let mut parts = item.split(':');
            let name = parts.next().unwrap_or_default().to_string();
            let port = match parts.next() {
                None | Some("") => None,
                Some(p) => Some(p.parse::<u32>().map_err(|_| ParamError {
                    var: HCA.name,
                    value: raw.into(),
                    expected: format!("[^][=]<hca>[:<port>],… with a numeric port (entry {item:?})"),
                })?),
            };
            if name.is_empty() {
                return Err(ParamError {
                    var: HCA.name,
                    value: raw.into(),
                    expected: format!("a device name in every entry (entry {item:?})"),
                });
            }
            f.entries.push(HcaEntry { name, port });
        }
        if f.entries.len() > 32 {
            return Err(ParamError {
                var: HCA.name,
                value: raw.into(),
                expected: "at most 32 entries".into(),
            });
        }
        Ok(f)
    }

    fn matches_entry(&self, e: &HcaEntry, dev: &str, port: u32) -> bool {
        let name_ok = if self.exact {
            e.name == dev
        } else {
            dev.starts_with(&e.name)
        };
        name_ok && e.port.is_none_or(|p| p == port)
    }

    /// Whether `dev:port` is selected by this filter.
    pub fn selects(&self, dev: &str, port: u32) -> bool {
        if self.entries.is_empty() {
            return true;
        }
        let hit = self.entries.iter().any(|e| self.matches_entry(e, dev, port));
        hit != self.exclude
    }
}

/// One GID table entry as seen by [`select_gid`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidCandidate {
    /// Index in the port's GID table.
    pub index: u32,
    /// The 16 GID bytes.
    pub gid: [u8; 16],
    /// RoCE version from sysfs `gid_attrs/types/<index>` (1, 2), `None` if unknown.
    pub roce_version: Option<u32>,
}

/// The IP address a RoCE GID encodes (IPv4-mapped or IPv6).
pub fn gid_ip(gid: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

fn in_range(ip: IpAddr, range: (IpAddr, u8)) -> bool {
    match (ip, range.0) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = if range.1 == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(range.1))
            };
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = if range.1 == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(range.1))
            };
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// Picks the RoCE GID index and says why (NCCL's automatic rule): with
/// `NCCL_IB_GID_INDEX` ≥ 0 that index (if present); otherwise the first
/// non-zero GID of the wanted RoCE version whose address has the wanted family,
/// is not link-local (`fe80::/10`) and lies in `NCCL_IB_ADDR_RANGE` if given.
/// Fallbacks, in order: any RoCE-version match, then index 0; each is named in
/// the reason. `Err` only when the table is empty or the forced index is absent.
pub fn select_gid(cands: &[GidCandidate], p: &IbParams) -> Result<(u32, String), String> {
    let nonzero: Vec<&GidCandidate> = cands.iter().filter(|c| c.gid != [0; 16]).collect();
    if p.gid_index >= 0 {
        return match cands.iter().find(|c| c.index == p.gid_index as u32) {
            Some(c) => Ok((c.index, format!("NCCL_IB_GID_INDEX={} forces it", p.gid_index))),
            None => Err(format!(
                "NCCL_IB_GID_INDEX={} is not in the GID table ({} entries)",
                p.gid_index,
                cands.len()
            )),
        };
    }
    if nonzero.is_empty() {
        return Err("the GID table has no non-zero entry".into());
    }
    let fam_ok = |c: &GidCandidate| match (gid_ip(&c.gid), p.addr_family) {
        (IpAddr::V4(_), AddrFamily::Inet) => true,
        (IpAddr::V6(a), AddrFamily::Inet6) => (a.segments()[0] & 0xffc0) != 0xfe80,
        _ => false,
    };
    let ver_ok = |c: &GidCandidate| c.roce_version.is_none_or(|v| v == p.roce_version);
    let range_ok = |c: &GidCandidate| p.addr_range.is_none_or(|r| in_range(gid_ip(&c.gid), r));
    let fam = match p.addr_family {
        AddrFamily::Inet => "AF_INET",
        AddrFamily::Inet6 => "AF_INET6 (not link-local)",
    };
    if let Some(c) = nonzero.iter().find(|c| fam_ok(c) && ver_ok(c) && range_ok(c)) {
        let range = p
            .addr_range
            .map(|(a, l)| format!(", in NCCL_IB_ADDR_RANGE {a}/{l}"))
            .unwrap_or_default();
        return Ok((
            c.index,
            format!(
                "automatic: first RoCE v{} GID with address family {fam}{range} ({})",
                p.roce_version,
                gid_ip(&c.gid)
            ),
        ));
    }
    if let Some(c) = nonzero.iter().find(|c| ver_ok(c) && fam_ok(c)) {
        return Ok((
            c.index,
            format!(
                "fallback: no GID in NCCL_IB_ADDR_RANGE; first {fam} RoCE v{} GID",
                p.roce_version
            ),
        ));
    }
    Ok((
        0,
        format!(
            "fallback: no RoCE v{} GID with family {fam}; using index 0",
            p.roce_version
        ),
    ))
}

/// Port speed in Mbps from `ibv_port_attr.active_width` × `active_speed`
/// (NCCL's tables: widths 1x/4x/8x/12x/2x, lane speeds SDR … XDR). Unknown
/// codes count as 1x / SDR.
pub fn port_speed_mbps(active_width: u8, active_speed: u8) -> i32 {
    const WIDTHS: [i32; 5] = [1, 4, 8, 12, 2];
    const SPEEDS: [i32; 9] = [2_500, 5_000, 10_000, 10_000, 14_000, 25_000, 50_000, 100_000, 200_000];
    let first_bit = |v: u8, n: usize| {
        if v == 0 {
            0
        } else {
            (v.trailing_zeros() as usize).min(n - 1)
        }
    };
    WIDTHS[first_bit(active_width, WIDTHS.len())] * SPEEDS[first_bit(active_speed, SPEEDS.len())]
}

/// A plausible local IPv4 address for the TCP side channel: the one encoded in
/// a RoCE GID, else `None` (caller falls back to the interfaces).
pub fn oob_ip_from_gid(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    match gid_ip(gid) {
        IpAddr::V4(a) if !a.is_unspecified() => Some(a),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn params(kv: &[(&str, &str)]) -> Result<IbParams, ParamError> {
        let m: HashMap<String, String> = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        IbParams::from_lookup(&|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_and_validation() {
        let p = params(&[]).unwrap();
        assert_eq!((p.timeout, p.retry_cnt, p.qps_per_conn, p.gid_index), (20, 7, 1, -1));
        let e = params(&[("NCCL_IB_TIMEOUT", "32")]).unwrap_err();
        assert_eq!(e.var, "NCCL_IB_TIMEOUT");
        assert!(e.to_string().contains("1 ..= 31"), "{e}");
        assert!(
            params(&[("NCCL_IB_TIMEOUT", "0")]).is_err(),
            "0 = infinite must be refused"
        );
        let e = params(&[("NCCL_IB_RETRY_CNT", "8")]).unwrap_err();
        assert!(e.to_string().contains("NCCL_IB_RETRY_CNT") && e.to_string().contains("0 ..= 7"));
        assert!(params(&[("NCCL_IB_QPS_PER_CONNECTION", "129")]).is_err());
        assert!(params(&[("NCCL_IB_SL", "16")]).is_err());
        assert!(params(&[("NCCL_IB_TC", "abc")]).is_err());
        assert_eq!(
            params(&[("NCCL_IB_TIMEOUT", "14"), ("NCCL_IB_RETRY_CNT", "2")])
                .unwrap()
                .timeout,
            14
        );
        assert!(params(&[("NCCL_IB_ADDR_FAMILY", "AF_UNIX")]).is_err());
        assert!(params(&[("NCCL_IB_ADDR_RANGE", "10.0.0.0/33")]).is_err());
    }

    #[test]
    fn traffic_class_precedence() {
        let p = params(&[]).unwrap();
        assert_eq!(p.effective_tc(-1), 0);
        assert_eq!(p.effective_tc(106), 106);
        let p = params(&[("NCCL_IB_TC", "41"), ("NCCL_IB_SL", "3")]).unwrap();
        assert_eq!((p.effective_tc(106), p.effective_sl(5)), (41, 3));
    }

    #[test]
    fn hca_filter_syntax() {
        let f = HcaFilter::parse("mlx5_1").unwrap();
        assert!(f.selects("mlx5_1", 1) && f.selects("mlx5_10", 1) && !f.selects("mlx5_0", 1));
        let f = HcaFilter::parse("=mlx5_1").unwrap();
        assert!(f.selects("mlx5_1", 1) && !f.selects("mlx5_10", 1));
        let f = HcaFilter::parse("^=rxe0").unwrap();
        assert!(!f.selects("rxe0", 1) && f.selects("rxe1", 1));
        let f = HcaFilter::parse("mlx5_0:1,mlx5_1:2").unwrap();
        assert!(f.selects("mlx5_0", 1) && !f.selects("mlx5_0", 2) && f.selects("mlx5_1", 2));
        let f = HcaFilter::parse("mlx5_0::0:0").unwrap();
        assert_eq!(f.entries[0].port, None);
        assert!(HcaFilter::parse("mlx5_0:x").is_err());
        assert!(HcaFilter::parse("").unwrap().selects("anything", 7));
    }

    fn v4mapped(a: [u8; 4]) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    }

    #[test]
    fn gid_selection_like_rxe() {
        // rxe's table: 0 = fe80::…, 1 = ::ffff:10.0.2.15, 2 = fec0::…, all RoCE v2.
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[15] = 1;
        let mut site = [0u8; 16];
        site[0] = 0xfe;
        site[1] = 0xc0;
        site[15] = 2;
        let t = [
            GidCandidate {
                index: 0,
                gid: ll,
                roce_version: Some(2),
            },
            GidCandidate {
                index: 1,
                gid: v4mapped([10, 0, 2, 15]),
                roce_version: Some(2),
            },
            GidCandidate {
                index: 2,
                gid: site,
                roce_version: Some(2),
            },
        ];
        let p = params(&[]).unwrap();
        let (i, why) = select_gid(&t, &p).unwrap();
        assert_eq!(i, 1, "{why}");
        assert!(why.contains("10.0.2.15"), "{why}");
        let p6 = params(&[("NCCL_IB_ADDR_FAMILY", "AF_INET6")]).unwrap();
        assert_eq!(select_gid(&t, &p6).unwrap().0, 2, "link-local must be skipped");
        let forced = params(&[("NCCL_IB_GID_INDEX", "0")]).unwrap();
        assert_eq!(select_gid(&t, &forced).unwrap().0, 0);
        assert!(select_gid(&t, &params(&[("NCCL_IB_GID_INDEX", "9")]).unwrap()).is_err());
        let ranged = params(&[("NCCL_IB_ADDR_RANGE", "192.168.0.0/16")]).unwrap();
        let (i, why) = select_gid(&t, &ranged).unwrap();
        assert_eq!(i, 1);
        assert!(why.starts_with("fallback"), "{why}");
        let v1 = params(&[("NCCL_IB_ROCE_VERSION_NUM", "1")]).unwrap();
        assert!(select_gid(&t, &v1).unwrap().1.contains("index 0"));
    }

    #[test]
    fn speeds() {
        assert_eq!(port_speed_mbps(2, 32), 100_000); // 4x EDR
        assert_eq!(port_speed_mbps(2, 64), 200_000); // 4x HDR
        assert_eq!(port_speed_mbps(1, 1), 2_500);
        assert_eq!(port_speed_mbps(0, 0), 2_500);
    }
}
