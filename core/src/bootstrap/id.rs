//! `ncclUniqueId` (128 bytes) and native `union ncclSocketAddress` encoding.
//!
//! Layout follows NCCL 2.30 `struct ncclBootstrapHandle` (`src/include/bootstrap.h`):
//! magic u64 @0, `union ncclSocketAddress` (28 bytes, native `sockaddr_in` /
//! `sockaddr_in6`) @8, `int nRanks` @36, zeros up to 128.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, ToSocketAddrs};
use std::str::FromStr;

use super::error::{BootstrapError, Result};

/// `NCCL_UNIQUE_ID_BYTES`: size of `ncclUniqueId`.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;
/// `NCCL_MAGIC`: the unique-id magic used when `NCCL_COMM_ID` is set.
pub const NCCL_MAGIC: u64 = 0x0280_0280_0280_0280;
/// Size of NCCL's `union ncclSocketAddress` (sizeof(sockaddr_in6)).
pub const SOCKET_ADDRESS_BYTES: usize = 28;

const OFF_MAGIC: usize = 0;
const OFF_ADDR: usize = 8;
const OFF_NRANKS: usize = 36;

/// Encodes `addr` as a native 28-byte `union ncclSocketAddress`: `sa_family` in host
/// order, port and address in network order (`sockaddr_in` / `sockaddr_in6`), rest zero.
pub fn encode_socket_address(addr: &SocketAddr) -> [u8; SOCKET_ADDRESS_BYTES] {
    let mut out = [0u8; SOCKET_ADDRESS_BYTES];
    match addr {
        SocketAddr::V4(a) => {
            out[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            out[2..4].copy_from_slice(&a.port().to_be_bytes());
            out[4..8].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            out[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            out[2..4].copy_from_slice(&a.port().to_be_bytes());
            out[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
            out[8..24].copy_from_slice(&a.ip().octets());
            out[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
        }
    }
    out
}

/// Decodes a native `union ncclSocketAddress` (first 28 bytes of `bytes`).
///
/// Errors if the family is neither `AF_INET` nor `AF_INET6` or the slice is short.
pub fn decode_socket_address(bytes: &[u8]) -> Result<SocketAddr> {
    if bytes.len() < SOCKET_ADDRESS_BYTES {
        return Err(BootstrapError::InvalidId(format!(
            "socket address needs {SOCKET_ADDRESS_BYTES} bytes, got {}",
            bytes.len()
        )));
    }
    let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
    let port = u16::from_be_bytes([bytes[2], bytes[3]]);
    if family == libc::AF_INET as u16 {
        let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
        Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
    } else if family == libc::AF_INET6 as u16 {
        let flow = u32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes"));
        let mut o = [0u8; 16];
        o.copy_from_slice(&bytes[8..24]);
        let scope = u32::from_ne_bytes(bytes[24..28].try_into().expect("4 bytes"));
        Ok(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(o), port, flow, scope)))
    } else {
        Err(BootstrapError::InvalidId(format!(
            "socket address family {family} is neither AF_INET ({}) nor AF_INET6 ({})",
            libc::AF_INET,
            libc::AF_INET6
        )))
    }
}

/// The 128-byte `ncclUniqueId`: everything a rank needs to find the bootstrap root.
///
/// Byte layout (NCCL 2.30 `ncclBootstrapHandle`): `magic` u64 (native order) @0,
/// root listen address (28-byte native `union ncclSocketAddress`) @8, `nRanks`
/// i32 @36 (0; only used by `ncclCommGrow`), zeros @40..128.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    bytes: [u8; NCCL_UNIQUE_ID_BYTES],
}

impl UniqueId {
    /// Builds an id for a root listening on `root` whose connections carry `magic`.
    pub fn new(magic: u64, root: SocketAddr) -> Self {
        let mut bytes = [0u8; NCCL_UNIQUE_ID_BYTES];
        bytes[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(&magic.to_ne_bytes());
        bytes[OFF_ADDR..OFF_ADDR + SOCKET_ADDRESS_BYTES].copy_from_slice(&encode_socket_address(&root));
        UniqueId { bytes }
    }

    /// Wraps raw `ncclUniqueId` bytes (no validation; `root_addr` validates).
    pub fn from_bytes(bytes: [u8; NCCL_UNIQUE_ID_BYTES]) -> Self {
        UniqueId { bytes }
    }

    /// The raw 128 bytes, as `ncclUniqueId.internal`.
    pub fn as_bytes(&self) -> &[u8; NCCL_UNIQUE_ID_BYTES] {
        &self.bytes
    }

    /// The magic at offset 0 (random, or [`NCCL_MAGIC`] for `NCCL_COMM_ID`).
    pub fn magic(&self) -> u64 {
        u64::from_ne_bytes(self.bytes[OFF_MAGIC..OFF_MAGIC + 8].try_into().expect("8 bytes"))
    }

    /// `nRanks` at offset 36 (0 unless produced for `ncclCommGrow`).
    pub fn nranks_field(&self) -> i32 {
        i32::from_ne_bytes(self.bytes[OFF_NRANKS..OFF_NRANKS + 4].try_into().expect("4 bytes"))
    }

    /// The root's listen address. Errors on an unknown family or port 0.
    pub fn root_addr(&self) -> Result<SocketAddr> {
        let addr = decode_socket_address(&self.bytes[OFF_ADDR..OFF_ADDR + SOCKET_ADDRESS_BYTES])?;
        if addr.port() == 0 {
            return Err(BootstrapError::InvalidId(format!("root address {addr} has port 0")));
        }
        Ok(addr)
    }

    /// Lowercase hex of all 128 bytes (256 characters), for passing between processes.
    pub fn to_hex(&self) -> String {
        hex::encode(self.bytes)
    }

    /// Parses the output of [`UniqueId::to_hex`] (surrounding whitespace ignored,
    /// either case). Errors on a wrong length or a non-hex character.
    pub fn from_hex(text: &str) -> Result<Self> {
        let t = text.trim();
        if t.len() != 2 * NCCL_UNIQUE_ID_BYTES {
            return Err(BootstrapError::InvalidId(format!(
                "expected {} hex characters, got {}",
                2 * NCCL_UNIQUE_ID_BYTES,
                t.len()
            )));
        }
        let mut bytes = [0u8; NCCL_UNIQUE_ID_BYTES];
        hex::decode_to_slice(t, &mut bytes).map_err(|e| match e {
            hex::FromHexError::InvalidHexCharacter { index, .. } => {
                // Reported at the start of the byte's pair, as before.
                BootstrapError::InvalidId(format!("non-hex character near position {}", index & !1))
            }
            other => BootstrapError::InvalidId(format!("malformed hex: {other}")),
        })?;
        Ok(UniqueId { bytes })
    }
}

impl fmt::Display for UniqueId {
    /// Same as [`UniqueId::to_hex`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addr = self
            .root_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|e| e.to_string());
        write!(f, "UniqueId {{ magic: {:#018x}, root: {addr} }}", self.magic())
    }
}

impl FromStr for UniqueId {
    type Err = BootstrapError;
    fn from_str(s: &str) -> Result<Self> {
        UniqueId::from_hex(s)
    }
}

/// Parses an `NCCL_COMM_ID` value: `<ipv4-or-hostname>:<port>`, `[<ipv6>]:<port>` or
/// `[<ipv6>%<ifname>]:<port>` (link-local, scope from the interface index).
/// Host names are resolved (first address). Port 0 is rejected.
pub fn parse_comm_id(value: &str) -> Result<SocketAddr> {
    let bad = |reason: &str| BootstrapError::InvalidCommId {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let v = value.trim();
    let (host, port) = if let Some(rest) = v.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| bad("missing ']' after the IPv6 address"))?;
        let host = &rest[..close];
        let port = rest[close + 1..]
            .strip_prefix(':')
            .ok_or_else(|| bad("missing ':<port>' after ']'"))?;
        (host, port)
    } else {
        let colon = v.rfind(':').ok_or_else(|| bad("missing ':<port>'"))?;
        (&v[..colon], &v[colon + 1..])
    };
    let port: u16 = port.parse().map_err(|_| bad("port is not a number in 1..=65535"))?;
    if port == 0 {
        return Err(bad("port 0 is not allowed"));
    }
    if host.is_empty() {
        return Err(bad("empty host"));
    }
    let (host_only, scope) = match host.split_once('%') {
        Some((h, ifname)) => (h, Some(ifname)),
        None => (host, None),
    };
    if let Ok(ip) = host_only.parse::<IpAddr>() {
        return Ok(match ip {
            IpAddr::V4(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
            IpAddr::V6(v6) => {
                let scope_id = match scope {
                    Some(ifname) => if_index(ifname).ok_or_else(|| bad(&format!("unknown interface {ifname:?}")))?,
                    None => 0,
                };
                SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope_id))
            }
        });
    }
    if scope.is_some() {
        return Err(bad("'%<ifname>' is only valid after an IPv6 address"));
    }
    let mut it = (host_only, port)
        .to_socket_addrs()
        .map_err(|e| bad(&format!("cannot resolve host: {e}")))?;
    it.next().ok_or_else(|| bad("host resolved to no address"))
}

fn if_index(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

/// Returns a random u64 from the OS (`getrandom`; falls back to time ⊕ pid ⊕ address
/// entropy if the OS has none to give).
pub fn random_magic() -> u64 {
    if let Ok(v) = getrandom::u64() {
        return v;
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let local = 0u8;
    (t as u64) ^ ((std::process::id() as u64) << 32) ^ (&local as *const u8 as u64).rotate_left(17)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_v4() {
        let addr: SocketAddr = "127.0.0.1:41234".parse().unwrap();
        let id = UniqueId::new(0x1122334455667788, addr);
        let b = id.as_bytes();
        assert_eq!(&b[0..8], &0x1122334455667788u64.to_ne_bytes());
        assert_eq!(u16::from_ne_bytes([b[8], b[9]]), libc::AF_INET as u16);
        assert_eq!(&b[10..12], &41234u16.to_be_bytes());
        assert_eq!(&b[12..16], &[127, 0, 0, 1]);
        assert!(b[16..].iter().all(|&x| x == 0));
        assert_eq!(id.root_addr().unwrap(), addr);
        assert_eq!(id.magic(), 0x1122334455667788);
        assert_eq!(id.nranks_field(), 0);
    }

    #[test]
    fn layout_v6_and_hex_roundtrip() {
        let addr = SocketAddr::V6(SocketAddrV6::new("fe80::1".parse().unwrap(), 999, 7, 3));
        let id = UniqueId::new(NCCL_MAGIC, addr);
        assert_eq!(id.root_addr().unwrap(), addr);
        let hex = id.to_hex();
        assert_eq!(hex.len(), 256);
        assert_eq!(UniqueId::from_hex(&format!("  {}\n", hex.to_uppercase())).unwrap(), id);
        assert!(UniqueId::from_hex(&hex[..254]).is_err());
        let mut bad = hex.clone();
        bad.replace_range(10..11, "g");
        assert!(UniqueId::from_hex(&bad).is_err());
    }

    #[test]
    fn bad_family_and_zero_port() {
        assert!(UniqueId::from_bytes([0; 128]).root_addr().is_err());
        let id = UniqueId::new(1, "127.0.0.1:0".parse().unwrap());
        assert!(id.root_addr().is_err());
    }

    #[test]
    fn comm_id_parsing() {
        assert_eq!(
            parse_comm_id("127.0.0.1:5000").unwrap(),
            "127.0.0.1:5000".parse().unwrap()
        );
        assert_eq!(parse_comm_id("[::1]:5000").unwrap(), "[::1]:5000".parse().unwrap());
        assert!(parse_comm_id("localhost:5000").is_ok());
        for bad in [
            "127.0.0.1",
            "127.0.0.1:0",
            "127.0.0.1:x",
            "[::1:5000",
            "[::1]5000",
            ":5000",
            "[::1%nosuchif9]:5",
        ] {
            let e = parse_comm_id(bad).unwrap_err();
            assert!(matches!(e, BootstrapError::InvalidCommId { .. }), "{bad}: {e}");
        }
    }
}
