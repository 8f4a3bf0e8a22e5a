//! Transports: how a channel's connector moves bytes to a peer.
//!
//! Only the network transport exists for now (`src/transport/net.cc` in NCCL):
//! every connection goes through the loaded net plugin, shared-memory and P2P
//! transports come later behind the same connector shape.

#[cfg(test)]
pub(crate) mod mem;
pub(crate) mod net;
pub(crate) mod setup;

pub(crate) use net::{RecvConn, SendConn};

/// `NCCL_STEPS`: FIFO slots per connection (most steps in flight on one connector).
pub const NCCL_STEPS: usize = 8;
