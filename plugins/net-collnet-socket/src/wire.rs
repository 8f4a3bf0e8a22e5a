//! The wire format between the ranks of a collComm and its aggregator (rank 0), and
//! the connection setup. Little-endian, fixed-size headers; every read and write
//! is bounded by the socket timeouts set in [`Peer::new`].
//!
//! ```text
//! hello  (rank r -> rank 0, once):  magic u64 | group key u64 | rank u32 | nranks u32   (24 B)
//! ack    (rank 0 -> rank r, once):  magic u64 | group key u64                            (16 B)
//! op     (rank r -> rank 0):        OP_MAGIC u32 | kind u8 | 0 0 0 | seq u64 | dtype i32 | op i32 | nbytes u64 (32 B)
//!                                   then nbytes of contribution
//! result (rank 0 -> rank r):        RES_MAGIC u32 | status u8 | 0 0 0 | seq u64 | nbytes u64 (24 B)
//!                                   then nbytes of result (status 0) or a UTF-8 reason (status 1: abort)
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ferroccl_plugin_api::sdk::{Handle, NetError, NetResult};

/// First 8 bytes of a listen handle, hello and ack (`"FCCLCNS1"`).
pub const MAGIC: u64 = u64::from_le_bytes(*b"FCCLCNS1");
/// First 4 bytes of an op header.
pub const OP_MAGIC: u32 = u32::from_le_bytes(*b"CNOP");
/// First 4 bytes of a result header.
pub const RES_MAGIC: u32 = u32::from_le_bytes(*b"CNRS");
/// Longest abort reason sent or accepted, bytes.
pub const MAX_REASON: usize = 4096;

/// Bytes of an op header.
pub const OP_HEADER: usize = 32;
/// Bytes of a result header.
pub const RES_HEADER: usize = 24;

/// Encodes `addr` into a listen handle: `MAGIC | family u8 | port u16 | ip [16] | scope u32`.
pub fn encode_handle(addr: SocketAddr, handle: &mut Handle) {
    handle.fill(0);
    handle[..8].copy_from_slice(&MAGIC.to_le_bytes());
    handle[9..11].copy_from_slice(&addr.port().to_le_bytes());
    match addr {
        SocketAddr::V4(a) => {
            handle[8] = 4;
            handle[11..15].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            handle[8] = 6;
            handle[11..27].copy_from_slice(&a.ip().octets());
            handle[27..31].copy_from_slice(&a.scope_id().to_le_bytes());
        }
    }
}

/// Decodes a listen handle written by [`encode_handle`].
///
/// # Errors
/// `InvalidArgument` naming what was expected and found (a handle of another plugin,
/// garbage, an unknown address family).
pub fn decode_handle(h: &Handle) -> NetResult<SocketAddr> {
    let magic = u64::from_le_bytes(h[..8].try_into().unwrap_or_default());
    if magic != MAGIC {
        return Err(NetError::InvalidArgument(format!(
            "not a collnet-socket handle: magic {magic:#018x}, expected {MAGIC:#018x}"
        )));
    }
    let port = u16::from_le_bytes([h[9], h[10]]);
    match h[8] {
        4 => Ok(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(h[11], h[12], h[13], h[14])),
            port,
        )),
        6 => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&h[11..27]);
            let scope = u32::from_le_bytes([h[27], h[28], h[29], h[30]]);
            Ok(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, scope)))
        }
        f => Err(NetError::InvalidArgument(format!(
            "collnet-socket handle with address family {f}, expected 4 or 6"
        ))),
    }
}

/// A 64-bit FNV-1a hash of every rank's handle, in rank order: the group key that
/// tells a connection of this collComm from a stray one.
pub fn group_key(handles: &[&Handle]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for hd in handles {
        for &b in hd.iter() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// One connection of a collComm, with the peer's rank and address for error messages.
#[derive(Debug)]
pub struct Peer {
    /// The peer's rank in the collComm.
    pub rank: usize,
    /// Its address.
    pub addr: SocketAddr,
    /// The stream (blocking, with read and write timeouts).
    pub stream: TcpStream,
    timeout: Duration,
}

impl Peer {
    /// Wraps `stream`, setting `TCP_NODELAY` and both timeouts to `timeout`.
    ///
    /// # Errors
    /// `System` when a socket option cannot be set.
    pub fn new(rank: usize, stream: TcpStream, timeout: Duration) -> NetResult<Peer> {
        let addr = stream
            .peer_addr()
            .map_err(|e| NetError::System(format!("getpeername of rank {rank}: {e}")))?;
        let set =
            |r: std::io::Result<()>| r.map_err(|e| NetError::System(format!("socket option for rank {rank}: {e}")));
        set(stream.set_nonblocking(false))?;
        set(stream.set_nodelay(true))?;
        set(stream.set_read_timeout(Some(timeout)))?;
        set(stream.set_write_timeout(Some(timeout)))?;
        Ok(Peer {
            rank,
            addr,
            stream,
            timeout,
        })
    }

    fn who(&self) -> String {
        if self.rank == 0 {
            format!("the aggregator, rank 0 ({})", self.addr)
        } else {
            format!("rank {} ({})", self.rank, self.addr)
        }
    }

    fn io_error(&self, e: std::io::Error, dir: &str, what: &str, done: usize, len: usize) -> NetError {
        match e.kind() {
            ErrorKind::UnexpectedEof => NetError::Remote(format!(
                "{} closed the connection during {what} ({dir} {done} of {len} bytes)",
                self.who()
            )),
            ErrorKind::WouldBlock | ErrorKind::TimedOut => NetError::Timeout(format!(
                "{} made no progress for {:?} during {what} ({dir} {done} of {len} bytes; \
                 NCCL_COLLNET_SOCKET_TIMEOUT_MS bounds each wait)",
                self.who(),
                self.timeout
            )),
            ErrorKind::ConnectionReset | ErrorKind::BrokenPipe | ErrorKind::ConnectionAborted => {
                NetError::Remote(format!(
                    "{} dropped the connection during {what} ({dir} {done} of {len} bytes): {e}",
                    self.who()
                ))
            }
            _ => NetError::System(format!(
                "{dir} {} during {what} failed after {done} of {len} bytes: {e}",
                self.who()
            )),
        }
    }

    /// Reads exactly `buf.len()` bytes; errors name the peer and `what`.
    ///
    /// # Errors
    /// `Remote` (closed or reset), `Timeout` (no byte for the timeout), `System`.
    pub fn read_exact(&mut self, buf: &mut [u8], what: &str) -> NetResult<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.stream.read(&mut buf[done..]) {
                Ok(0) => {
                    return Err(self.io_error(ErrorKind::UnexpectedEof.into(), "received", what, done, buf.len()));
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e, "received", what, done, buf.len())),
            }
        }
        Ok(())
    }

    /// Writes all of `buf`; errors name the peer and `what`.
    ///
    /// # Errors
    /// As [`Peer::read_exact`].
    pub fn write_all(&mut self, buf: &[u8], what: &str) -> NetResult<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.stream.write(&buf[done..]) {
                Ok(0) => return Err(self.io_error(ErrorKind::WriteZero.into(), "sent", what, done, buf.len())),
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e, "sent", what, done, buf.len())),
            }
        }
        Ok(())
    }
}

fn remaining(deadline: Instant) -> Option<Duration> {
    deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
}

/// Rank 0: accepts the hellos of ranks `1..nranks` on `listener` by `deadline`,
/// acknowledges them, and returns the peers indexed by rank (index 0 empty).
/// Connections with another magic or group key are strays: dropped, not fatal.
///
/// # Errors
/// `Timeout` naming the ranks still missing at the deadline; `Remote` for a rank
/// announced twice or a rank count that disagrees; `System` for socket failures.
pub fn accept_all(
    listener: &TcpListener,
    key: u64,
    nranks: usize,
    deadline: Instant,
    timeout: Duration,
) -> NetResult<Vec<Option<Peer>>> {
    let mut peers: Vec<Option<Peer>> = (0..nranks).map(|_| None).collect();
    let mut have = 1;
    listener
        .set_nonblocking(true)
        .map_err(|e| NetError::System(format!("collnet listen socket: {e}")))?;
    while have < nranks {
        let Some(left) = remaining(deadline) else {
            let missing: Vec<usize> = (1..nranks).filter(|&r| peers[r].is_none()).collect();
            return Err(NetError::Timeout(format!(
                "collnet connect: the aggregator (rank 0 of {nranks}) heard from no rank of {missing:?} within {timeout:?}"
            )));
        };
        let (mut s, from) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                std::thread::sleep(left.min(Duration::from_millis(2)));
                continue;
            }
            Err(e) => return Err(NetError::System(format!("collnet accept: {e}"))),
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(left));
        let mut hello = [0u8; 24];
        if s.read_exact(&mut hello).is_err() {
            ferroccl_plugin_api::net_warn!("COLLNET/Socket : dropped a connection from {from}: no hello");
            continue;
        }
        let magic = u64::from_le_bytes(hello[..8].try_into().unwrap_or_default());
        let k = u64::from_le_bytes(hello[8..16].try_into().unwrap_or_default());
        if magic != MAGIC || k != key {
            ferroccl_plugin_api::net_warn!(
                "COLLNET/Socket : dropped a stray connection from {from} (magic {magic:#x}, group {k:#x}, expected {key:#x})"
            );
            continue;
        }
        let r = u32::from_le_bytes(hello[16..20].try_into().unwrap_or_default()) as usize;
        let n = u32::from_le_bytes(hello[20..24].try_into().unwrap_or_default()) as usize;
        if n != nranks || r == 0 || r >= nranks {
            return Err(NetError::Remote(format!(
                "collnet connect: {from} says it is rank {r} of {n}; the aggregator expected ranks 1..{nranks} of {nranks}"
            )));
        }
        if peers[r].is_some() {
            return Err(NetError::Remote(format!(
                "collnet connect: rank {r} connected twice (again from {from})"
            )));
        }
        peers[r] = Some(Peer::new(r, s, timeout)?);
        have += 1;
    }
    let mut ack = [0u8; 16];
    ack[..8].copy_from_slice(&MAGIC.to_le_bytes());
    ack[8..].copy_from_slice(&key.to_le_bytes());
    for p in peers.iter_mut().flatten() {
        p.write_all(&ack, "collnet connect (ack)")?;
    }
    Ok(peers)
}

/// Ranks ≥ 1: connects to the aggregator at `root`, says hello and waits for the
/// ack, all by `deadline` (connection refusals are retried until then).
///
/// # Errors
/// `Timeout` when the aggregator cannot be reached or does not answer in time;
/// `Remote` for a wrong ack.
pub fn connect_root(
    root: SocketAddr,
    key: u64,
    rank: usize,
    nranks: usize,
    deadline: Instant,
    timeout: Duration,
) -> NetResult<Peer> {
    let s = loop {
        let Some(left) = remaining(deadline) else {
            return Err(NetError::Timeout(format!(
                "collnet connect: rank {rank} could not reach the aggregator, rank 0 ({root}), within {timeout:?}"
            )));
        };
        match TcpStream::connect_timeout(&root, left) {
            Ok(s) => break s,
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::Interrupted) => {
                std::thread::sleep(left.min(Duration::from_millis(20)));
            }
            Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {}
            Err(e) => {
                return Err(NetError::System(format!(
                    "collnet connect: rank {rank} to the aggregator, rank 0 ({root}): {e}"
                )));
            }
        }
    };
    let mut p = Peer::new(0, s, timeout)?;
    let _ = p
        .stream
        .set_read_timeout(Some(remaining(deadline).unwrap_or(Duration::from_millis(1))));
    let mut hello = [0u8; 24];
    hello[..8].copy_from_slice(&MAGIC.to_le_bytes());
    hello[8..16].copy_from_slice(&key.to_le_bytes());
    hello[16..20].copy_from_slice(&(rank as u32).to_le_bytes());
    hello[20..24].copy_from_slice(&(nranks as u32).to_le_bytes());
    p.write_all(&hello, "collnet connect (hello)")?;
    let mut ack = [0u8; 16];
    p.read_exact(&mut ack, "collnet connect (ack)")?;
    if ack[..8] != MAGIC.to_le_bytes() || ack[8..] != key.to_le_bytes() {
        return Err(NetError::Remote(format!(
            "collnet connect: the aggregator ({root}) answered with garbage {:02x?}",
            ack
        )));
    }
    let _ = p.stream.set_read_timeout(Some(timeout));
    Ok(p)
}

/// An op header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpHeader {
    /// Collective kind ([`crate::agg::Kind`] as u8).
    pub kind: u8,
    /// Sequence number of the collective in the collComm (0, 1, …).
    pub seq: u64,
    /// `ncclDataType_t` (-1 for iallgather).
    pub dtype: i32,
    /// `ncclRedOp_t` (-1 for iallgather).
    pub op: i32,
    /// Bytes of contribution that follow.
    pub nbytes: u64,
}

impl OpHeader {
    /// The 32 header bytes.
    pub fn encode(&self) -> [u8; OP_HEADER] {
        let mut b = [0u8; OP_HEADER];
        b[..4].copy_from_slice(&OP_MAGIC.to_le_bytes());
        b[4] = self.kind;
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.dtype.to_le_bytes());
        b[20..24].copy_from_slice(&self.op.to_le_bytes());
        b[24..32].copy_from_slice(&self.nbytes.to_le_bytes());
        b
    }

    /// Decodes 32 header bytes; `None` for a wrong magic (garbage).
    pub fn decode(b: &[u8; OP_HEADER]) -> Option<OpHeader> {
        let le4 = |r: std::ops::Range<usize>| <[u8; 4]>::try_from(&b[r]).unwrap_or_default();
        let le8 = |r: std::ops::Range<usize>| <[u8; 8]>::try_from(&b[r]).unwrap_or_default();
        if u32::from_le_bytes(le4(0..4)) != OP_MAGIC {
            return None;
        }
        Some(OpHeader {
            kind: b[4],
            seq: u64::from_le_bytes(le8(8..16)),
            dtype: i32::from_le_bytes(le4(16..20)),
            op: i32::from_le_bytes(le4(20..24)),
            nbytes: u64::from_le_bytes(le8(24..32)),
        })
    }
}

/// A result header: status 0 = `nbytes` of result follow, 1 = abort with a reason.
pub fn encode_result(status: u8, seq: u64, nbytes: u64) -> [u8; RES_HEADER] {
    let mut b = [0u8; RES_HEADER];
    b[..4].copy_from_slice(&RES_MAGIC.to_le_bytes());
    b[4] = status;
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    b[16..24].copy_from_slice(&nbytes.to_le_bytes());
    b
}

/// Decodes a result header into `(status, seq, nbytes)`; `None` for a wrong magic.
pub fn decode_result(b: &[u8; RES_HEADER]) -> Option<(u8, u64, u64)> {
    if b[..4] != RES_MAGIC.to_le_bytes() {
        return None;
    }
    let le8 = |r: std::ops::Range<usize>| <[u8; 8]>::try_from(&b[r]).unwrap_or_default();
    Some((b[4], u64::from_le_bytes(le8(8..16)), u64::from_le_bytes(le8(16..24))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_roundtrip_and_garbage_is_refused() {
        let mut h = [0u8; 128];
        for a in ["127.0.0.1:4567", "[fe80::1]:80", "[::1]:65535"] {
            let addr: SocketAddr = a.parse().unwrap();
            encode_handle(addr, &mut h);
            assert_eq!(decode_handle(&h).unwrap(), addr);
        }
        h[8] = 5;
        assert!(decode_handle(&h).unwrap_err().to_string().contains("family 5"));
        let junk = [0x5au8; 128];
        assert!(
            decode_handle(&junk)
                .unwrap_err()
                .to_string()
                .contains("not a collnet-socket handle")
        );
    }

    #[test]
    fn headers_roundtrip() {
        let h = OpHeader {
            kind: 2,
            seq: 77,
            dtype: 9,
            op: 3,
            nbytes: 1 << 33,
        };
        assert_eq!(OpHeader::decode(&h.encode()), Some(h));
        let mut bad = h.encode();
        bad[0] ^= 1;
        assert_eq!(OpHeader::decode(&bad), None);
        assert_eq!(decode_result(&encode_result(1, 5, 12)), Some((1, 5, 12)));
        assert_eq!(decode_result(&[0u8; RES_HEADER]), None);
    }

    #[test]
    fn group_key_depends_on_every_handle() {
        let a = [1u8; 128];
        let b = [2u8; 128];
        assert_ne!(group_key(&[&a, &b]), group_key(&[&b, &a]));
        assert_eq!(group_key(&[&a, &b]), group_key(&[&a, &b]));
    }
}
