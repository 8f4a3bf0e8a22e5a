//! Bootstrap error type.

use std::time::Duration;

/// Everything that can go wrong while bootstrapping or using the bootstrap network.
///
/// Messages say what was awaited or expected, what was found, and (for timeouts
/// and root failures) which ranks never arrived.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A wait for a peer rank ran out. `culprit` is the rank found responsible by
    /// following who waits on whom (liveness probes, see [`Bootstrap::recv`]): the
    /// awaited peer itself, or the rank at the end of its wait chain.
    ///
    /// [`Bootstrap::recv`]: super::Bootstrap::recv
    #[error("bootstrap: timed out after {} waiting for {what}: {diagnosis}", fmt_duration(*.waited))]
    PeerTimeout {
        /// What was awaited, e.g. "all-gather step 0: rank 2's data from rank 2".
        what: String,
        /// How long we waited.
        waited: Duration,
        /// The rank that stopped (did not answer, is gone, or never entered the operation).
        culprit: usize,
        /// How the culprit was found, e.g. "rank 3 is waiting for rank 2, which did
        /// not answer a liveness probe within 1 s (stopped or hung)".
        diagnosis: String,
    },
    /// Another rank reported that `culprit` failed (its bootstrap operation saw the
    /// culprit's connection close or the culprit stop answering).
    #[error(
        "bootstrap: rank {culprit} failed ({reason}; reported by rank {reporter}) while we were waiting for {what}"
    )]
    PeerFailed {
        /// The rank that failed.
        culprit: usize,
        /// The rank whose report reached us.
        reporter: usize,
        /// What the reporter saw.
        reason: String,
        /// What we were waiting for.
        what: String,
    },
    /// Connecting to a peer rank failed (after the retries the deadline allowed).
    #[error("bootstrap: cannot connect to rank {peer} at {addr} ({what}): {source}")]
    Connect {
        /// The peer rank.
        peer: usize,
        /// Its bootstrap listen address.
        addr: std::net::SocketAddr,
        /// Why we connected and how many retries were made.
        what: String,
        /// The last OS error.
        #[source]
        source: std::io::Error,
    },
    /// An allocation sized from a count or length (given by the caller or announced
    /// by a peer) could not be made; nothing was aborted.
    #[error("bootstrap: cannot allocate {bytes} bytes for {what}")]
    Alloc {
        /// What the memory was for.
        what: String,
        /// How much was asked for.
        bytes: usize,
    },
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
    /// The rank this error blames, if any: the peer whose connection closed, that
    /// could not be reached, that never answered (after following its wait chain),
    /// or that another rank reported as failed. Errors that are not about one peer
    /// (root failures, timeouts of the root, invalid arguments) return `None`.
    pub fn culprit(&self) -> Option<usize> {
        match self {
            BootstrapError::PeerClosed { peer, .. } | BootstrapError::Connect { peer, .. } => Some(*peer),
            BootstrapError::PeerTimeout { culprit, .. } | BootstrapError::PeerFailed { culprit, .. } => Some(*culprit),
            _ => None,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        BootstrapError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A vector of `n` values made by `f`, allocated fallibly: an `n` too large for
/// memory is an [`BootstrapError::Alloc`] naming `what`, not an abort.
pub(crate) fn try_vec_with<T>(n: usize, what: &str, mut f: impl FnMut() -> T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| BootstrapError::Alloc {
        what: what.to_string(),
        bytes: n.saturating_mul(std::mem::size_of::<T>()),
    })?;
    v.extend(std::iter::repeat_with(&mut f).take(n));
    Ok(v)
}
