//! What one check produced, and the early-exit type checks use internally.

use serde::{Deserialize, Serialize};

/// Final status of one check on one API version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The plugin did what the contract says.
    Pass,
    /// The plugin broke the contract (or hung, or crashed).
    Fail,
    /// The check does not apply (reason in [`CheckOutcome::message`]).
    Skip,
    /// The check was not run because something it depends on failed: the plugin
    /// did not load, init or report devices for this version (the one `load.init`
    /// failure says why). Not a finding about the check's own rule.
    #[serde(rename = "not run")]
    NotRun,
}

/// What a worker process reports for one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckOutcome {
    /// Pass, fail or skip.
    pub status: Status,
    /// Skip reason, or a one-line failure summary; empty on pass.
    pub message: String,
    /// What the contract requires (failures only).
    pub expected: Option<String>,
    /// What the plugin did (failures only).
    pub observed: Option<String>,
    /// Extra observations (slow calls, values seen), reported on any status.
    pub notes: Vec<String>,
    /// Measurements (the performance report's table, counts), if the check makes any.
    pub metrics: Option<serde_json::Value>,
}

impl CheckOutcome {
    /// A passing outcome with no notes.
    pub fn pass() -> Self {
        CheckOutcome {
            status: Status::Pass,
            message: String::new(),
            expected: None,
            observed: None,
            notes: Vec::new(),
            metrics: None,
        }
    }

    /// A failure with what was expected and what was observed.
    pub fn fail(expected: impl Into<String>, observed: impl Into<String>) -> Self {
        let observed = observed.into();
        CheckOutcome {
            status: Status::Fail,
            message: observed.clone(),
            expected: Some(expected.into()),
            observed: Some(observed),
            ..Self::pass()
        }
    }

    /// Not run, with the failed dependency.
    pub fn not_run(reason: impl Into<String>) -> Self {
        CheckOutcome {
            status: Status::NotRun,
            message: reason.into(),
            ..Self::pass()
        }
    }

    /// A skip with its reason.
    pub fn skip(reason: impl Into<String>) -> Self {
        CheckOutcome {
            status: Status::Skip,
            message: reason.into(),
            ..Self::pass()
        }
    }
}

/// Early exit from a check body: `?` on a plugin call turns its error into a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The contract was broken: what it says, what the plugin did.
    Fail {
        /// What the contract requires.
        expected: String,
        /// What the plugin did.
        observed: String,
    },
    /// The check does not apply to this plugin/version/device.
    Skip(String),
}

/// Result type of check bodies and of the checked plugin calls in [`crate::cx::Cx`].
pub type Res<T = ()> = Result<T, Stop>;

/// Fails the check unless `cond` holds: `ensure!(n > 0, "devices() >= 1", "devices() = {n}")`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $expected:expr, $($observed:tt)*) => {
        if !$cond {
            return Err($crate::outcome::Stop::Fail { expected: ($expected).to_string(), observed: format!($($observed)*) });
        }
    };
}

/// Builds a [`Stop::Fail`] (to `return Err(fail!(..))`).
#[macro_export]
macro_rules! fail {
    ($expected:expr, $($observed:tt)*) => {
        $crate::outcome::Stop::Fail { expected: ($expected).to_string(), observed: format!($($observed)*) }
    };
}

/// Builds a [`Stop::Skip`] (to `return Err(skip!(..))`).
#[macro_export]
macro_rules! skip {
    ($($reason:tt)*) => {
        $crate::outcome::Stop::Skip(format!($($reason)*))
    };
}
