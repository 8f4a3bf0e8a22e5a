//! Thin blocking socket layer for the bootstrap: bounded reads, the generic NCCL
//! handshake, 4-byte length-prefixed frames, connect with retries, and a
//! background acceptor that handles each connection on its own thread.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
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
    pub fn never() -> Self {
        Deadline {
            start: Instant::now(),
            end: None,
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

/// Reads exactly `buf.len()` bytes, giving up at the deadline or when a flag is raised.
/// EOF gives an `Io` error of kind `UnexpectedEof`.
pub(crate) fn read_exact_bounded(
    s: &mut TcpStream,
    buf: &mut [u8],
    dl: &Deadline,
    flags: Flags<'_>,
    what: &dyn Fn() -> String,
) -> Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let slice = next_slice(dl, flags, what)?;
        s.set_read_timeout(Some(slice))
            .map_err(|e| BootstrapError::io(what(), e))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(BootstrapError::io(
                    what(),
                    std::io::Error::new(ErrorKind::UnexpectedEof, "connection closed by peer"),
                ));
            }
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(BootstrapError::io(what(), e)),
        }
    }
    Ok(())
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

/// Reads one frame whose length must be ≤ `max_len` (a longer one is a protocol error).
pub(crate) fn read_frame(
    s: &mut TcpStream,
    max_len: usize,
    dl: &Deadline,
    flags: Flags<'_>,
    what: &dyn Fn() -> String,
) -> Result<Vec<u8>> {
    let mut lb = [0u8; 4];
    read_exact_bounded(s, &mut lb, dl, flags, what)?;
    let len = u32::from_ne_bytes(lb) as usize;
    if len > max_len {
        return Err(BootstrapError::Protocol {
            peer: peer_name(s),
            detail: format!(
                "message length {len} exceeds the limit of {max_len} bytes while {}",
                what()
            ),
        });
    }
    let mut buf = vec![0u8; len];
    read_exact_bounded(s, &mut buf, dl, flags, what)?;
    Ok(buf)
}

pub(crate) fn peer_name(s: &TcpStream) -> String {
    s.peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "<unknown peer>".into())
}

/// Connect retry policy (`NCCL_SOCKET_RETRY_CNT`, `NCCL_SOCKET_RETRY_SLEEP_MSEC`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retry {
    pub count: u32,
    pub sleep: Duration,
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
/// linear backoff of `n × retry.sleep`, then sends the handshake. Bounded by `dl`
/// and the flags.
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

/// Binds a listener on `addr` (port 0 = ephemeral).
pub(crate) fn listen(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| BootstrapError::io(format!("binding a listener on {addr}"), e))
}

/// Waits until `fd` is readable or `timeout` elapses (EINTR counts as a timeout).
fn poll_readable(fd: i32, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds is 1.
    let r = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis().min(i32::MAX as u128) as i32) };
    r > 0
}

/// A connection handler: runs on its own thread for each accepted connection.
pub(crate) type Handler = Arc<dyn Fn(TcpStream, SocketAddr) + Send + Sync>;

/// Accepts connections on `listener` until `stop` or `abort` is raised; each
/// connection's handshake is read (bounded by `handshake_timeout`) and checked on a
/// thread of its own, so a silent or malformed client never blocks the others.
/// Connections failing the handshake are logged (warn) and dropped; good ones are
/// given to `handler` on that thread.
pub(crate) fn spawn_acceptor(
    listener: TcpListener,
    name: String,
    magic: u64,
    handshake_timeout: Duration,
    stop: Arc<AtomicBool>,
    abort: Arc<AtomicBool>,
    handler: Handler,
) -> Result<JoinHandle<()>> {
    listener
        .set_nonblocking(true)
        .map_err(|e| BootstrapError::io(format!("{name}: set_nonblocking"), e))?;
    let thread_err = format!("{name}: spawning the accept thread");
    std::thread::Builder::new()
        .name("ferroccl-bs-accept".into())
        .spawn(move || {
            let fd = listener.as_raw_fd();
            let mut transient_errors = 0u32;
            loop {
                if stop.load(Ordering::Relaxed) || abort.load(Ordering::Relaxed) {
                    break;
                }
                if !poll_readable(fd, POLL_SLICE) {
                    continue;
                }
                match listener.accept() {
                    Ok((s, from)) => {
                        transient_errors = 0;
                        let (stop, abort, handler, name2) = (stop.clone(), abort.clone(), handler.clone(), name.clone());
                        let spawned = std::thread::Builder::new().name("ferroccl-bs-conn".into()).spawn(move || {
                            handle_connection(s, from, &name2, magic, handshake_timeout, &stop, &abort, &handler)
                        });
                        if let Err(e) = spawned {
                            tracing::warn!(target: "ferroccl::bootstrap", "{name}: cannot spawn a thread for {from}: {e}");
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        transient_errors += 1;
                        tracing::warn!(target: "ferroccl::bootstrap", "{name}: accept failed: {e}");
                        std::thread::sleep(POLL_SLICE);
                        if transient_errors > 1000 {
                            break;
                        }
                    }
                }
            }
        })
        .map_err(|e| BootstrapError::io(thread_err, e))
}

#[allow(clippy::too_many_arguments)]
fn handle_connection(
    mut s: TcpStream,
    from: SocketAddr,
    name: &str,
    magic: u64,
    handshake_timeout: Duration,
    stop: &AtomicBool,
    abort: &AtomicBool,
    handler: &Handler,
) {
    if s.set_nonblocking(false).is_err() {
        return;
    }
    let _ = s.set_nodelay(true);
    let dl = Deadline::after(handshake_timeout);
    let mut hs = [0u8; HANDSHAKE_BYTES];
    let flags = Flags {
        abort,
        stop: Some(stop),
    };
    match read_exact_bounded(&mut s, &mut hs, &dl, flags, &|| format!("the handshake from {from}")) {
        Ok(()) => {}
        Err(BootstrapError::Aborted { .. }) => return,
        Err(e) => {
            tracing::warn!(target: "ferroccl::bootstrap", "{name}: rejected connection from {from}: {e}");
            return;
        }
    }
    if let Err(why) = check_handshake(&hs, magic) {
        tracing::warn!(target: "ferroccl::bootstrap", "{name}: rejected connection from {from}: {why}");
        return;
    }
    handler(s, from);
}
