//! Transports: how a channel's connectors move bytes to a peer.
//!
//! A connector is one direction of one connection: a [`SendConnector`] fills
//! FIFO steps that reach the peer's [`RecvConnector`]. Connectors live in a
//! [`ConnTable`] keyed by (channel, peer, connection index) and direction, as
//! NCCL keeps them in `channel->peers[peer]->send[connIndex]` /
//! `recv[connIndex]` (`src/include/comm.h`, `struct ncclChannelPeer`): a ring
//! successor and a tree child that are the same rank share one connector.
//!
//! Each connector has two faces: the executor's (fill a slot, push it; peek at a
//! received step, pop it — the work of NCCL's device primitives) and the proxy's
//! (`progress`: post and test the network requests behind the FIFO — NCCL's
//! `sendProxyProgress` / `recvProxyProgress`). Only the network transport exists
//! for now (`src/transport/net.cc`); shared-memory and P2P connectors implement
//! the same traits.

pub(crate) mod fifo;
#[cfg(test)]
pub(crate) mod mem;
pub(crate) mod net;
pub(crate) mod setup;

use std::collections::BTreeMap;

use crate::error::Error;

pub(crate) use net::{RecvConn, SendConn};

/// `NCCL_STEPS`: FIFO slots per connection (most steps in flight on one connector).
pub const NCCL_STEPS: usize = 8;

/// Connection index of the collective algorithms' connections (ring and tree).
pub(crate) const CONN_COLL: usize = 0;
/// Connection index of point-to-point connections (their own FIFO step size,
/// `NCCL_P2P_NET_CHUNKSIZE`; NCCL uses connIndex 1 for p2p over the network).
pub(crate) const CONN_P2P: usize = 1;

/// Which connector: the channel, the peer rank and the connection index
/// ([`CONN_COLL`] or [`CONN_P2P`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ConnKey {
    /// Channel index.
    pub channel: usize,
    /// Peer rank.
    pub peer: usize,
    /// Connection index.
    pub conn: usize,
}

/// A user-memory registration a send connector can send from directly (an
/// opaque token: the net transport's mhandle).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserReg(pub(crate) *mut std::ffi::c_void);

// SAFETY: an opaque token handed back to the connector that made it, on the
// connector's own thread; never dereferenced here.
unsafe impl Send for UserReg {}

/// The sending side of one connection.
///
/// Executor face: [`can_push`](Self::can_push) / [`next_slot`](Self::next_slot) /
/// [`push`](Self::push) fill FIFO steps; the `*_user` methods send a step
/// straight from registered user memory. Proxy face: [`progress`](Self::progress)
/// hands filled steps to the network and retires completed ones.
pub(crate) trait SendConnector: Send {
    /// Bytes one step (slot) holds.
    fn step_size(&self) -> usize;
    /// Whether the producer may fill the next FIFO step.
    fn can_push(&self) -> bool;
    /// Address of the slot of the next step (valid while `can_push()`).
    fn next_slot(&self) -> *mut u8;
    /// Marks the next step filled with `size` bytes.
    fn push(&mut self, size: usize);
    /// The registration covering `[ptr, ptr + len)` for the current operation, if any.
    fn user_reg(&self, ptr: *const u8, len: usize) -> Option<UserReg>;
    /// Whether a step sent from user memory may be queued.
    fn can_push_user(&self) -> bool;
    /// Queues a step of `size` bytes sent straight from registered user memory.
    fn push_user(&mut self, ptr: *const u8, size: usize, reg: UserReg);
    /// Whether a queued or in-flight step is sent from user memory overlapping
    /// `[ptr, ptr + len)` (which must then not be written yet).
    fn user_busy(&self, ptr: *const u8, len: usize) -> bool;
    /// Whether every pushed step has completed.
    fn idle(&self) -> bool;
    /// Proxy: posts filled steps and tests in-flight ones; whether anything moved.
    fn progress(&mut self) -> Result<bool, Error>;
    /// Registers user memory for the current operation (a refusal only means
    /// steps go through the FIFO).
    fn register_user(&mut self, ptr: *const u8, len: usize);
    /// Drops the current operation's registrations (once idle).
    fn release_user(&mut self);
    /// Closes the connection (idempotent).
    fn close(&mut self);
}

/// The receiving side of one connection.
///
/// Executor face: [`peek`](Self::peek) / [`pop`](Self::pop) consume steps in
/// order. Proxy face: [`expect`](Self::expect) announces the steps scheduled
/// work will consume (so receives are posted ahead), [`progress`](Self::progress)
/// posts and tests them.
pub(crate) trait RecvConnector: Send {
    /// The next step's data if it has arrived: `(address, size reported by the
    /// transport)`; valid until [`pop`](Self::pop).
    fn peek(&self) -> Option<(*mut u8, usize)>;
    /// Releases the consumed step.
    fn pop(&mut self);
    /// Announces one more step the scheduled work will consume: `Some((address,
    /// bytes))` to land it straight in registered user memory, `None` for a FIFO slot.
    fn expect(&mut self, target: Option<(*mut u8, usize)>);
    /// Proxy: posts receives and tests posted ones; whether anything moved.
    fn progress(&mut self) -> Result<bool, Error>;
    /// Registers user memory for the current operation.
    fn register_user(&mut self, ptr: *const u8, len: usize);
    /// Drops the current operation's registrations (once every expected step was consumed).
    fn release_user(&mut self);
    /// Closes the connection (idempotent).
    fn close(&mut self);
}

/// Every connector of a communicator, keyed by [`ConnKey`] and direction.
#[derive(Default)]
pub(crate) struct ConnTable {
    send: BTreeMap<ConnKey, Box<dyn SendConnector>>,
    recv: BTreeMap<ConnKey, Box<dyn RecvConnector>>,
}

impl ConnTable {
    /// Adds (or replaces) the send connector `key`.
    pub(crate) fn insert_send(&mut self, key: ConnKey, c: Box<dyn SendConnector>) {
        self.send.insert(key, c);
    }

    /// Adds (or replaces) the receive connector `key`.
    pub(crate) fn insert_recv(&mut self, key: ConnKey, c: Box<dyn RecvConnector>) {
        self.recv.insert(key, c);
    }

    /// Whether a send connector `key` exists.
    pub(crate) fn has_send(&self, key: &ConnKey) -> bool {
        self.send.contains_key(key)
    }

    /// Whether a receive connector `key` exists.
    pub(crate) fn has_recv(&self, key: &ConnKey) -> bool {
        self.recv.contains_key(key)
    }

    /// The send connector `key`.
    pub(crate) fn send(&mut self, key: &ConnKey) -> Option<&mut (dyn SendConnector + 'static)> {
        self.send.get_mut(key).map(|b| &mut **b)
    }

    /// The receive connector `key`.
    pub(crate) fn recv(&mut self, key: &ConnKey) -> Option<&mut (dyn RecvConnector + 'static)> {
        self.recv.get_mut(key).map(|b| &mut **b)
    }

    /// Every send connector.
    pub(crate) fn sends_mut(&mut self) -> impl Iterator<Item = &mut Box<dyn SendConnector>> {
        self.send.values_mut()
    }

    /// Every receive connector.
    pub(crate) fn recvs_mut(&mut self) -> impl Iterator<Item = &mut Box<dyn RecvConnector>> {
        self.recv.values_mut()
    }

    /// Closes every connector.
    pub(crate) fn close_all(&mut self) {
        for c in self.send.values_mut() {
            c.close();
        }
        for c in self.recv.values_mut() {
            c.close();
        }
    }
}
