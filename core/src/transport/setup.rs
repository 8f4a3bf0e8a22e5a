//! Connection establishment through the plugin (`src/transport/net.cc` setup/connect
//! in NCCL): the receiver `listen`s and ships the 128-byte handle to the sender over
//! the bootstrap; the sender `connect`s with it, the receiver `accept`s. `connect`
//! and `accept` are non-blocking and retried with the same handle until they
//! return a comm, all pending ones polled together so no order between ranks can
//! deadlock, bounded by a deadline and the abort flag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{CONN_COLL, ConnKey, ConnTable, RecvConn, SendConn};
use crate::error::Error;
use crate::graph::Channel;
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

/// Bootstrap tag of the collective connections' handles (plus the channel index).
const TAG_CHANNEL_HANDLE: u32 = 0x5249_4e00;
/// Bootstrap tag of the point-to-point connections' handles.
const TAG_P2P_HANDLE: u32 = 0x5032_5000;

/// Where a communicator's connections go: its channels (for each channel's NIC),
/// the plugin's device count, the device for point-to-point connections, and
/// the FIFO step sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnPlan<'a> {
    /// This rank.
    pub rank: usize,
    /// This rank's channels (ring order and the ring connections' NIC).
    pub channels: &'a [Channel],
    /// NIC of this rank's tree connections per channel (`None`: no NIC of its own).
    pub tree_devs: &'a [Option<usize>],
    /// Devices the plugin reports.
    pub ndev: usize,
    /// Device of point-to-point connections to each peer.
    pub p2p_devs: &'a [usize],
    /// Bytes per FIFO step of collective connections.
    pub coll_step: usize,
    /// Bytes per FIFO step of point-to-point connections.
    pub p2p_step: usize,
}

impl ConnPlan<'_> {
    /// The plugin device, bootstrap tag and FIFO step size of connection `key`:
    /// a ring neighbour's uses the channel's ring NIC ([`Channel::net_dev`]),
    /// another peer (a tree neighbour) the channel's tree NIC; a channel
    /// without a NIC of its own uses device `channel % ndev`.
    fn spec(&self, key: &ConnKey) -> (ConnSpec, usize) {
        if key.conn == CONN_COLL {
            let ch = self.channels.get(key.channel);
            let ring_peer = ch.is_some_and(|c| {
                c.ring.index(self.rank).is_some()
                    && (c.ring_next(self.rank) == key.peer || c.ring_prev(self.rank) == key.peer)
            });
            let nic = if ring_peer {
                ch.and_then(|c| c.net_dev)
            } else {
                self.tree_devs.get(key.channel).copied().flatten()
            };
            let dev = nic.unwrap_or(key.channel % self.ndev.max(1));
            let tag = TAG_CHANNEL_HANDLE + key.channel as u32;
            (
                ConnSpec {
                    peer: key.peer,
                    dev,
                    tag,
                },
                self.coll_step,
            )
        } else {
            let spec = ConnSpec {
                peer: key.peer,
                dev: self.p2p_devs.get(key.peer).copied().unwrap_or(0),
                tag: TAG_P2P_HANDLE,
            };
            (spec, self.p2p_step)
        }
    }
}

/// Sets up the send connectors `sends` and receive connectors `recvs` (none may
/// exist in `table` yet) and adds them to `table` (NCCL's
/// `ncclTransportP2pSetup` over `channel->peers[peer]`). The peers must set up
/// the matching connections at the same time (both sides call this from the
/// same collective point: init, or the first operation that needs them). The
/// tag of a FIFO step is the sender's rank.
///
/// Errors: those of [`connect_all`] and of the FIFO registration; connections
/// set up by this call are closed again on error.
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_keys(
    net: &Arc<dyn NetPlugin>,
    ctx: RawCtx,
    oob: &dyn Oob,
    plan: &ConnPlan<'_>,
    sends: &[ConnKey],
    recvs: &[ConnKey],
    table: &mut ConnTable,
    deadline: Instant,
    abort: &AtomicBool,
) -> Result<(), Error> {
    if sends.is_empty() && recvs.is_empty() {
        return Ok(());
    }
    let send_specs: Vec<(ConnSpec, usize)> = sends.iter().map(|k| plan.spec(k)).collect();
    let recv_specs: Vec<(ConnSpec, usize)> = recvs.iter().map(|k| plan.spec(k)).collect();
    let s_only: Vec<ConnSpec> = send_specs.iter().map(|&(s, _)| s).collect();
    let r_only: Vec<ConnSpec> = recv_specs.iter().map(|&(s, _)| s).collect();
    let (s, r) = connect_all(net, ctx, oob, &s_only, &r_only, deadline, abort)?;
    // Wrap every comm first (a failure closes the comms not yet wrapped), then fail.
    let mut made = ConnTable::default();
    let mut fail = None;
    for ((key, &(spec, step)), c) in sends.iter().zip(&send_specs).zip(s) {
        match SendConn::new(net.clone(), c, step, plan.rank as i32, spec.peer) {
            Ok(c) => made.insert_send(*key, Box::new(c)),
            Err(e) => fail = Some(e),
        }
    }
    for ((key, &(spec, step)), c) in recvs.iter().zip(&recv_specs).zip(r) {
        match RecvConn::new(net.clone(), c, step, spec.peer as i32, spec.peer) {
            Ok(c) => made.insert_recv(*key, Box::new(c)),
            Err(e) => fail = Some(e),
        }
    }
    if let Some(e) = fail {
        return Err(e);
    }
    table.absorb(made);
    Ok(())
}

/// The ring connections of every channel (connection index [`CONN_COLL`]):
/// a send connector to the ring successor and a receive connector from the
/// predecessor, one per (channel, peer). Trees and point-to-point peers are
/// connected when an operation first needs them (as NCCL 2.30 connects
/// algorithms at run time, `NCCL_RUNTIME_CONNECT`).
pub(crate) fn ring_keys(channels: &[Channel], rank: usize) -> (Vec<ConnKey>, Vec<ConnKey>) {
    let mut sends: Vec<ConnKey> = Vec::new();
    let mut recvs: Vec<ConnKey> = Vec::new();
    for ch in channels.iter().filter(|c| c.ring.ranks.len() > 1) {
        let key = |peer| ConnKey {
            channel: ch.id,
            peer,
            conn: CONN_COLL,
        };
        let (next, prev) = (key(ch.ring_next(rank)), key(ch.ring_prev(rank)));
        if !sends.contains(&next) {
            sends.push(next);
        }
        if !recvs.contains(&prev) {
            recvs.push(prev);
        }
    }
    (sends, recvs)
}
