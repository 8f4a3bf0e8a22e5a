//! Thin blocking socket layer for the bootstrap's outgoing side: the generic NCCL
//! handshake, 4-byte length-prefixed frames, connect with retries bounded by a
//! deadline. (Incoming connections are decoded by `frame` and served by `reactor`.)

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::error::{BootstrapError, Result};

/// `ncclSocketTypeBootstrap`: the socket type sent in the handshake.
pub const SOCKET_TYPE_BOOTSTRAP: u32 = 1;
/// Handshake size: u64 magic + u32 socket type, native byte order.
pub const HANDSHAKE_BYTES: usize = 12;
/// Slice used for every blocking wait so abort/stop flags are seen promptly.
pub(crate) const POLL_SLICE: Duration = Duration::from_millis(50);

/// Flags a wait gives up on: the user's abort flag and an internal stop flag.
#[derive(Clone, Copy)]
pub(crate) struct Flags<'a> {
    pub abort: &'a AtomicBool,
    pub stop: Option<&'a AtomicBool>,
}

impl Flags<'_> {
    pub fn raised(&self) -> bool {
        self.abort.load(Ordering::Relaxed) || self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// A wait's end: `None` = unbounded (only stop/abort end it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    pub start: Instant,
    pub end: Option<Instant>,
}

impl Deadline {
    pub fn after(timeout: Duration) -> Self {
        let start = Instant::now();
        Deadline {
            start,
            end: Some(start + timeout),
        }
    }
    /// Remaining time capped to one poll slice; `None` when expired.
    pub fn slice(&self) -> Option<Duration> {
        match self.end {
            None => Some(POLL_SLICE),
            Some(end) => {
                let now = Instant::now();
                (now < end).then(|| (end - now).min(POLL_SLICE).max(Duration::from_millis(1)))
            }
        }
    }
    pub fn waited(&self) -> Duration {
        self.start.elapsed()
    }
}

/// Checks flags and deadline; returns the slice to wait next.
pub(crate) fn next_slice(dl: &Deadline, flags: Flags<'_>, what: &dyn Fn() -> String) -> Result<Duration> {
    if flags.raised() {
        return Err(BootstrapError::Aborted { what: what() });
    }
    dl.slice().ok_or_else(|| BootstrapError::Timeout {
        what: what(),
        waited: dl.waited(),
    })
}

/// Encodes the generic NCCL handshake (`src/misc/socket.cc`): magic then type, native order.
pub fn encode_handshake(magic: u64, socket_type: u32) -> [u8; HANDSHAKE_BYTES] {
    let mut b = [0u8; HANDSHAKE_BYTES];
    b[..8].copy_from_slice(&magic.to_ne_bytes());
    b[8..].copy_from_slice(&socket_type.to_ne_bytes());
    b
}

/// Checks a received handshake; `Err` says what was expected and found.
pub fn check_handshake(b: &[u8; HANDSHAKE_BYTES], magic: u64) -> std::result::Result<(), String> {
    let got_magic = u64::from_ne_bytes(b[..8].try_into().expect("8 bytes"));
    let got_type = u32::from_ne_bytes(b[8..].try_into().expect("4 bytes"));
    if got_magic != magic {
        return Err(format!("wrong magic {got_magic:#018x} (expected {magic:#018x})"));
    }
    if got_type != SOCKET_TYPE_BOOTSTRAP {
        return Err(format!(
            "wrong socket type {got_type} (expected {SOCKET_TYPE_BOOTSTRAP} = Bootstrap)"
        ));
    }
    Ok(())
}

/// Writes one frame: 4-byte native-order length, then the payload.
pub(crate) fn write_frame(s: &mut TcpStream, payload: &[u8], what: &dyn Fn() -> String) -> Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= i32::MAX as u32)
        .ok_or_else(|| BootstrapError::InvalidArgument(format!("message of {} bytes exceeds 2^31-1", payload.len())))?;
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&len.to_ne_bytes());
    buf.extend_from_slice(payload);
    s.write_all(&buf).map_err(|e| BootstrapError::io(what(), e))
}

/// Connect retry policy (`NCCL_SOCKET_RETRY_CNT`, `NCCL_SOCKET_RETRY_SLEEP_MSEC`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retry {
    pub count: u32,
    pub sleep: Duration,
}

/// The error says the process or system is short of a resource (descriptors,
/// buffers, memory), which may be freed later: `EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`.
pub(crate) fn resource_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::ETIMEDOUT | libc::EHOSTUNREACH | libc::EAGAIN | libc::EINTR | libc::ECONNRESET)
    ) || matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

/// Connects to `addr`, retrying transient errors up to `retry.count` times with a
/// linear backoff of `n × retry.sleep` (NCCL's `socketConnect` with
/// `NCCL_SOCKET_RETRY_CNT` / `NCCL_SOCKET_RETRY_SLEEP_MSEC`), then sends the
/// handshake. Everything, each connect attempt included, ends at `dl` (a
/// [`BootstrapError::Timeout`] naming `what`) or when a flag is raised: with the
/// defaults the retries alone would take ~60 s, so the deadline usually ends them.
pub(crate) fn connect_bootstrap(
    addr: SocketAddr,
    magic: u64,
    retry: Retry,
    dl: &Deadline,
    flags: Flags<'_>,
    what: &dyn Fn() -> String,
) -> Result<TcpStream> {
    let mut attempt: u32 = 0;
    loop {
        next_slice(dl, flags, what)?;
        let remaining = dl
            .end
            .map(|e| e.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(60));
        let ct = remaining.clamp(Duration::from_millis(1), Duration::from_secs(60));
        match TcpStream::connect_timeout(&addr, ct) {
            Ok(mut s) => {
                let _ = s.set_nodelay(true);
                s.write_all(&encode_handshake(magic, SOCKET_TYPE_BOOTSTRAP))
                    .map_err(|e| BootstrapError::io(what(), e))?;
                return Ok(s);
            }
            Err(e) if transient(&e) && attempt < retry.count => {
                attempt += 1;
                tracing::debug!(target: "ferroccl::bootstrap", "{}: {e}; retry {attempt}/{}", what(), retry.count);
                // Linear backoff, slept in slices so abort and the deadline are honoured.
                let until = Instant::now() + retry.sleep * attempt;
                while Instant::now() < until {
                    let sl = next_slice(dl, flags, what)?;
                    std::thread::sleep(sl.min(until.saturating_duration_since(Instant::now())));
                }
            }
            Err(e) => {
                return Err(BootstrapError::io(format!("{} (after {attempt} retries)", what()), e));
            }
        }
    }
}

/// Listen backlog of bootstrap listeners: NCCL's `ncclSocketListen`
/// (`src/misc/socket.cc`) passes 16384 (the kernel caps it at `net.core.somaxconn`),
/// so that a burst of ranks reaching the root at once is queued, not dropped into
/// SYN retransmits (std's default is 128).
pub(crate) const LISTEN_BACKLOG: i32 = 16384;

/// Binds a listener on `addr` (port 0 = ephemeral) with `SO_REUSEADDR` (as std and
/// NCCL do) and a backlog of [`LISTEN_BACKLOG`].
pub(crate) fn listen(addr: SocketAddr) -> Result<TcpListener> {
    let err = |e| BootstrapError::io(format!("binding a listener on {addr}"), e);
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None).map_err(err)?;
    s.set_reuse_address(true).map_err(err)?;
    s.bind(&addr.into()).map_err(err)?;
    s.listen(LISTEN_BACKLOG).map_err(err)?;
    Ok(s.into())
}
