//! The crate-wide error type (NCCL's `ncclResult_t` values other than success),
//! at the bottom of the crate so every layer can return it without importing a
//! higher one.
//!
//! Errors of the layers below (bootstrap, plugin loading and calls, parameters,
//! kernels) are kept as structured sources (`#[from]`), in the manner of rustls's
//! `Error`; the variants that carry a message are the ones whose content is a
//! report made here (what was expected, what was found, which rank). The mapping
//! to `ncclResult_t` lives in one place, [`Error::nccl_result`].

use std::sync::Arc;

use ferroccl_kernels::KernelError;

use crate::bootstrap::BootstrapError;
use crate::config::ConfigError;
use crate::plugin::PluginError;
use crate::plugin::net::NetError;
use crate::topo::TopoError;

/// An error of communicator init, a collective, or a stream wait.
///
/// `Clone` so that a communicator can hand out its asynchronous error
/// (`Comm::async_error`) to every caller; leaf errors that are not `Clone`
/// are shared behind an [`Arc`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A net plugin call failed (`ncclSystemError` / `ncclRemoteError` from the
    /// plugin); `what` names the call and the peer.
    #[error("net plugin: {what}: {source}{note}")]
    Net {
        /// The call, e.g. "isend of 524288 bytes to rank 1".
        what: String,
        /// The peer at the other end of the connection, when the call was on one.
        peer: Option<usize>,
        /// Text appended after the plugin's error (the survivors' diagnosis), or empty.
        note: String,
        /// The plugin's error.
        #[source]
        source: Arc<NetError>,
    },
    /// The network plugin could not be used (no devices, an unusable device type, …).
    #[error("net plugin: {0}")]
    Plugin(#[source] Arc<PluginError>),
    /// Loading the network plugin failed on some rank; the message is the load
    /// error followed by every rank's plugin (shared at init, so it is text).
    #[error("net plugin load: {0}")]
    PluginLoad(String),
    /// Ranks loaded different network plugins; the message lists every rank's plugin.
    #[error("ranks disagree on the network plugin:\n{0}")]
    PluginMismatch(String),
    /// Bootstrap failed (missing ranks, lost peers, timeouts).
    #[error("{0}")]
    Bootstrap(#[source] Arc<BootstrapError>),
    /// The topology could not be detected, read or searched (`NCCL_TOPO_FILE`,
    /// `NCCL_GRAPH_FILE`, sysfs), or a peer's topology record was malformed.
    #[error("topology: {0}")]
    Topo(#[source] Arc<TopoError>),
    /// A `NCCL_*` / `FERROCCL_*` value was rejected.
    #[error("config: {0}")]
    Config(#[from] ConfigError),
    /// Parameters that are each valid but inconsistent, with each other or
    /// across ranks; the message names them and every rank's value.
    #[error("config: {0}")]
    ConfigMismatch(String),
    /// A reduction or copy kernel rejected its arguments (`ncclInternalError`).
    #[error("internal error: kernel: {0}")]
    Kernel(#[from] KernelError),
    /// A system call failed (`ncclSystemError`): shared memory, files, processes;
    /// `what` names the call and what it was for.
    #[error("system error: {what}: {source}")]
    System {
        /// What was being done, e.g. "mapping 4198400 bytes of shared-memory segment …".
        what: String,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A peer sent something this rank did not expect (`ncclRemoteError`).
    #[error("remote error: {0}")]
    Remote(String),
    /// Invalid argument (`ncclInvalidArgument`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Invalid usage (`ncclInvalidUsage`).
    #[error("invalid usage: {0}")]
    InvalidUsage(String),
    /// A bounded wait expired (`ncclTimeout`); says what was awaited.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The communicator was aborted (`ncclCommAbort`) while the operation was pending.
    #[error("communicator aborted: {0}")]
    Aborted(String),
    /// An internal invariant failed (`ncclInternalError`).
    #[error("internal error: {0}")]
    Internal(String),
}

/// The message of a caught panic's payload (`&str` or `String`, as `panic!`
/// makes them), or "(no message)".
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

impl From<BootstrapError> for Error {
    fn from(e: BootstrapError) -> Error {
        Error::Bootstrap(Arc::new(e))
    }
}

impl From<TopoError> for Error {
    fn from(e: TopoError) -> Error {
        Error::Topo(Arc::new(e))
    }
}

impl From<PluginError> for Error {
    fn from(e: PluginError) -> Error {
        Error::Plugin(Arc::new(e))
    }
}

impl Error {
    /// An error from a plugin call, with what was being done.
    pub(crate) fn net(what: impl std::fmt::Display, e: NetError) -> Error {
        Error::Net {
            what: what.to_string(),
            peer: None,
            note: String::new(),
            source: Arc::new(e),
        }
    }

    /// Records `peer` as the far end of a failed connection call (kept if set).
    pub(crate) fn with_peer(self, peer: usize) -> Error {
        match self {
            Error::Net {
                what,
                peer: None,
                note,
                source,
            } => Error::Net {
                what,
                peer: Some(peer),
                note,
                source,
            },
            e => e,
        }
    }

    /// The same error with `note` (the survivors' agreed diagnosis) on a line of
    /// its own after the message; the variant and its `ncclResult_t` stay.
    pub(crate) fn with_note(self, note: &str) -> Error {
        let add = |m: String| format!("{m}\n  {note}");
        match self {
            Error::Net {
                what,
                peer,
                note: old,
                source,
            } => Error::Net {
                what,
                peer,
                note: add(old),
                source,
            },
            Error::Remote(m) => Error::Remote(add(m)),
            Error::InvalidUsage(m) => Error::InvalidUsage(add(m)),
            Error::InvalidArgument(m) => Error::InvalidArgument(add(m)),
            Error::Timeout(m) => Error::Timeout(add(m)),
            Error::Internal(m) => Error::Internal(add(m)),
            e => e,
        }
    }

    /// The `ncclResult_t` value this error corresponds to (`src/include/nccl.h`:
    /// 2 system, 3 internal, 4 invalid argument, 5 invalid usage, 6 remote, 8 timeout).
    pub fn nccl_result(&self) -> i32 {
        match self {
            Error::Net { .. }
            | Error::Plugin(_)
            | Error::PluginLoad(_)
            | Error::Bootstrap(_)
            | Error::System { .. } => 2,
            Error::Internal(_) | Error::Kernel(_) => 3,
            Error::Topo(_) => 5,
            Error::InvalidArgument(_) => 4,
            Error::InvalidUsage(_) | Error::PluginMismatch(_) | Error::Config(_) | Error::ConfigMismatch(_) => 5,
            Error::Remote(_) | Error::Aborted(_) => 6,
            Error::Timeout(_) => 8,
        }
    }
}

/// Result of the public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;
