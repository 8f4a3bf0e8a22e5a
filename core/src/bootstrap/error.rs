//! Bootstrap error type.

use std::time::Duration;

/// Everything that can go wrong while bootstrapping or using the bootstrap network.
///
/// Messages say what was awaited or expected, what was found, and (for timeouts
/// and root failures) which ranks never arrived.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A socket operation failed. `what` names the operation and the peer.
    #[error("bootstrap: {what}: {source}")]
    Io {
        /// The operation, e.g. "connecting to the root at 127.0.0.1:41234".
        what: String,
        /// The underlying OS error.
        #[source]
        source: std::io::Error,
    },
    /// A bounded wait ran out. `what` names what was awaited.
    #[error("bootstrap: timed out after {} waiting for {what}", fmt_duration(*.waited))]
    Timeout {
        /// What was awaited, e.g. "the root's reply from 127.0.0.1:41234".
        what: String,
        /// How long we waited.
        waited: Duration,
    },
    /// The abort flag was raised while waiting.
    #[error("bootstrap: aborted while waiting for {what}")]
    Aborted {
        /// What was being awaited when the abort flag was seen.
        what: String,
    },
    /// The root reported a failure of the whole bootstrap (ranks missing after the
    /// timeout, duplicate rank, nranks mismatch). The message is the root's own.
    #[error("{0}")]
    Root(String),
    /// A `UniqueId` could not be decoded (bad hex, unknown address family, zero port).
    #[error("bootstrap: invalid unique id: {0}")]
    InvalidId(String),
    /// `NCCL_COMM_ID` could not be parsed or resolved.
    #[error("bootstrap: invalid NCCL_COMM_ID {value:?}: {reason} (expected <ipv4-or-host>:<port> or [<ipv6>]:<port>)")]
    InvalidCommId {
        /// The value as given.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// No network interface matched `NCCL_SOCKET_IFNAME` / `NCCL_SOCKET_FAMILY`.
    #[error("bootstrap: no usable network interface: {0}")]
    NoInterface(String),
    /// The caller passed an invalid argument (rank out of range, nranks 0, …).
    #[error("bootstrap: invalid argument: {0}")]
    InvalidArgument(String),
    /// A peer sent something that does not follow the bootstrap protocol.
    #[error("bootstrap: protocol error from {peer}: {detail}")]
    Protocol {
        /// Who sent it (rank or address).
        peer: String,
        /// What was expected and what was found.
        detail: String,
    },
    /// A peer rank closed its bootstrap connection while we still expected data from it.
    #[error("bootstrap: rank {peer} closed its bootstrap connection while we were waiting for {what}")]
    PeerClosed {
        /// The peer rank.
        peer: usize,
        /// What we were waiting for.
        what: String,
    },
    /// The bootstrap was already closed.
    #[error("bootstrap: used after close")]
    Closed,
}

/// Result alias for the bootstrap module.
pub type Result<T, E = BootstrapError> = std::result::Result<T, E>;

/// Formats a duration as NCCL-ish human text: "30 s", "1.5 s", "250 ms".
pub(crate) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{ms} ms")
    }
}

impl BootstrapError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        BootstrapError::Io {
            what: what.into(),
            source,
        }
    }
}
