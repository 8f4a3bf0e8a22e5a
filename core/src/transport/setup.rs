//! Connection establishment through the plugin (`src/transport/net.cc` setup/connect
//! in NCCL): the receiver `listen`s and ships the 128-byte handle to the sender over
//! the bootstrap; the sender `connect`s with it, the receiver `accept`s. `connect`
//! and `accept` are non-blocking and retried with the same handle until they
//! return a comm, all pending ones polled together so no order between ranks can
//! deadlock, bounded by a deadline and the abort flag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::Error;
use crate::plugin::net::{NetHandle, NetPlugin, RawComm, RawCtx};

/// The out-of-band channel connection setup needs (the bootstrap network).
pub(crate) trait Oob: Send + Sync {
    /// Sends `data` to `peer` under `tag` (must not wait for the peer to receive).
    fn send(&self, peer: usize, tag: u32, data: &[u8]) -> Result<(), Error>;
    /// Receives the message `peer` sent under `tag` (bounded wait).
    fn recv(&self, peer: usize, tag: u32) -> Result<Vec<u8>, Error>;
}

/// One connection to set up: the peer, the plugin device, the bootstrap tag.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnSpec {
    pub peer: usize,
    pub dev: usize,
    pub tag: u32,
}

/// Sets up send connections to `sends` and receive connections from `recvs`.
/// Returns the sendComms and recvComms in the order given.
///
/// Errors: plugin failures (everything created so far is closed), bootstrap
/// failures, [`Error::Timeout`] naming the peers still pending at `deadline`,
/// [`Error::Aborted`] when `abort` is raised.
pub(crate) fn connect_all(
    net: &Arc<dyn NetPlugin>,
    ctx: RawCtx,
    oob: &dyn Oob,
    sends: &[ConnSpec],
    recvs: &[ConnSpec],
    deadline: Instant,
    abort: &AtomicBool,
) -> Result<(Vec<RawComm>, Vec<RawComm>), Error> {
    let mut listens: Vec<Option<RawComm>> = Vec::new();
    let mut send_comms: Vec<Option<RawComm>> = vec![None; sends.len()];
    let mut recv_comms: Vec<Option<RawComm>> = vec![None; recvs.len()];
    let cleanup = |listens: &[Option<RawComm>], s: &[Option<RawComm>], r: &[Option<RawComm>]| {
        for l in listens.iter().flatten() {
            let _ = net.close_listen(*l);
        }
        for c in s.iter().flatten() {
            let _ = net.close_send(*c);
        }
        for c in r.iter().flatten() {
            let _ = net.close_recv(*c);
        }
    };
    let result = (|| {
        // 1. Listen for every receive connection and ship the handles.
        for spec in recvs {
            let mut handle: NetHandle = [0; 128];
            let l = net
                .listen(ctx, spec.dev, &mut handle)
                .map_err(|e| Error::net(format!("listen on device {} for rank {}", spec.dev, spec.peer), e))?;
            listens.push(Some(l));
            oob.send(spec.peer, spec.tag, &handle)?;
        }
        // 2. Collect the handles of every send connection.
        let mut handles: Vec<NetHandle> = Vec::with_capacity(sends.len());
        for spec in sends {
            let h = oob.recv(spec.peer, spec.tag)?;
            let h: NetHandle = h.as_slice().try_into().map_err(|_| {
                Error::Remote(format!(
                    "rank {} sent a {}-byte connection handle, expected 128 bytes",
                    spec.peer,
                    h.len()
                ))
            })?;
            handles.push(h);
        }
        // 3. Poll connects and accepts together.
        let mut spins = 0u32;
        loop {
            let mut pending = Vec::new();
            for (i, spec) in sends.iter().enumerate() {
                if send_comms[i].is_none() {
                    match net.connect(ctx, spec.dev, &mut handles[i]) {
                        Ok(Some(c)) => send_comms[i] = Some(c),
                        Ok(None) => pending.push(format!("connect to rank {}", spec.peer)),
                        Err(e) => return Err(Error::net(format!("connect to rank {}", spec.peer), e)),
                    }
                }
            }
            for (i, spec) in recvs.iter().enumerate() {
                if recv_comms[i].is_none() {
                    let l = listens[i].expect("listen comm");
                    match net.accept(l) {
                        Ok(Some(c)) => recv_comms[i] = Some(c),
                        Ok(None) => pending.push(format!("accept from rank {}", spec.peer)),
                        Err(e) => return Err(Error::net(format!("accept from rank {}", spec.peer), e)),
                    }
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            if abort.load(Ordering::Relaxed) {
                return Err(Error::Aborted(format!("while waiting for {}", pending.join(", "))));
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "net connection setup still waiting for {}",
                    pending.join(", ")
                )));
            }
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    })();
    match result {
        Ok(()) => {
            for l in listens.iter().flatten() {
                let _ = net.close_listen(*l);
            }
            Ok((
                send_comms.into_iter().map(|c| c.expect("connected")).collect(),
                recv_comms.into_iter().map(|c| c.expect("accepted")).collect(),
            ))
        }
        Err(e) => {
            cleanup(&listens, &send_comms, &recv_comms);
            Err(e)
        }
    }
}
