//! The error of the public communicator / collective API (NCCL's `ncclResult_t`
//! values other than success, with messages that say what went wrong).

use crate::plugin::net::NetError;

/// An error of communicator init, a collective, or a stream wait.
///
/// `Clone` so that a communicator can hand out its asynchronous error
/// ([`crate::Comm::async_error`]) to every caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The network plugin failed (`ncclSystemError` / `ncclRemoteError` from the plugin).
    #[error("net plugin: {0}")]
    Net(String),
    /// Loading the network plugin failed.
    #[error("net plugin load: {0}")]
    PluginLoad(String),
    /// Ranks loaded different network plugins; the message lists every rank's plugin.
    #[error("ranks disagree on the network plugin:\n{0}")]
    PluginMismatch(String),
    /// Bootstrap failed (missing ranks, lost peers, timeouts); the bootstrap's message.
    #[error("{0}")]
    Bootstrap(String),
    /// A peer sent something this rank did not expect (`ncclRemoteError`).
    #[error("remote error: {0}")]
    Remote(String),
    /// Invalid argument (`ncclInvalidArgument`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Invalid usage (`ncclInvalidUsage`).
    #[error("invalid usage: {0}")]
    InvalidUsage(String),
    /// Configuration error (a `NCCL_*` value out of range, …).
    #[error("config: {0}")]
    Config(String),
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

impl Error {
    /// An error from a plugin call, prefixed by what was being done.
    pub(crate) fn net(what: impl std::fmt::Display, e: NetError) -> Error {
        Error::Net(format!("{what}: {e}"))
    }

    /// The `ncclResult_t` value this error corresponds to.
    pub fn nccl_result(&self) -> i32 {
        match self {
            Error::Net(_) | Error::PluginLoad(_) | Error::Bootstrap(_) => 2,
            Error::Internal(_) => 3,
            Error::InvalidArgument(_) => 4,
            Error::InvalidUsage(_) | Error::PluginMismatch(_) | Error::Config(_) => 5,
            Error::Remote(_) | Error::Aborted(_) => 6,
            Error::Timeout(_) => 8,
        }
    }
}

/// Result of the public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;
