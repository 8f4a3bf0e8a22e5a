//! The resolution report: every candidate tried and why it was chosen or rejected.

use std::fmt;
use std::path::PathBuf;

use super::collnet::CollNetState;
use super::library::{AttemptResult, OpenAttempt};

/// Where a candidate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateKind {
    /// An entry of `NCCL_NET_PLUGIN` (or the default `libnccl-net.so`).
    External,
    /// ferroccl's in-tree IB plugin (`libnccl-net-ib.so`).
    InTreeIb,
    /// ferroccl's in-tree Socket plugin (`libnccl-net-socket.so`).
    InTreeSocket,
    /// One library loaded directly with [`super::load_net_from`].
    Direct,
}

impl fmt::Display for CandidateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CandidateKind::External => "external",
            CandidateKind::InTreeIb => "in-tree IB",
            CandidateKind::InTreeSocket => "in-tree Socket",
            CandidateKind::Direct => "direct",
        })
    }
}

/// Why a candidate was not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// No file found for it.
    NotFound,
    /// A file was found but `dlopen` failed.
    DlOpenFailed {
        /// The file passed to `dlopen`.
        file: String,
        /// The `dlerror()` text.
        dlerror: String,
    },
    /// No `ncclNetPlugin_vN` symbol with `N` ≤ the cap.
    NoSymbol {
        /// The version cap in force.
        cap: u32,
        /// Net symbols present but above the cap.
        above_cap: Vec<u32>,
    },
    /// `NCCL_NET` names a different plugin.
    NameMismatch {
        /// The vtable's name.
        name: String,
        /// The `NCCL_NET` value.
        wanted: String,
    },
    /// A required slot is NULL.
    NullSlot(&'static str),
    /// `init` failed.
    InitFailed {
        /// The error (with the `ncclResult_t`).
        error: String,
        /// The `ncclResult_t` value, when the plugin returned one.
        code: Option<i32>,
    },
    /// `devices()` failed.
    DevicesFailed(String),
    /// `devices()` returned 0.
    NoDevices,
    /// `getProperties(0)` failed.
    PropertiesFailed(String),
    /// Device 0 has a device-offload type ferroccl cannot drive.
    DeviceTypeUnusable {
        /// `netDeviceType`.
        device_type: i32,
        /// `netDeviceVersion`.
        device_version: i32,
        /// Explanation.
        why: String,
    },
    /// Not tried: an earlier candidate was chosen, or strict mode stopped the walk.
    NotTried(String),
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::NotFound => f.write_str("not found"),
            Rejection::DlOpenFailed { file, dlerror } => write!(f, "found {file} but dlopen failed: {dlerror}"),
            Rejection::NoSymbol { cap, above_cap } if above_cap.is_empty() => {
                write!(f, "no symbol ncclNetPlugin_v{cap} … ncclNetPlugin_v6")
            }
            Rejection::NoSymbol { cap, above_cap } => write!(
                f,
                "no symbol ncclNetPlugin_v{cap} … ncclNetPlugin_v6 (exports only versions {above_cap:?}, above the cap FERROCCL_NET_MAX_VERSION={cap})"
            ),
            Rejection::NameMismatch { name, wanted } => write!(f, "its name '{name}' is not NCCL_NET={wanted}"),
            Rejection::NullSlot(s) => write!(f, "required function '{s}' is NULL"),
            Rejection::InitFailed { error, .. } => write!(f, "init failed: {error}"),
            Rejection::DevicesFailed(e) => write!(f, "devices() failed: {e}"),
            Rejection::NoDevices => f.write_str("0 devices"),
            Rejection::PropertiesFailed(e) => write!(f, "getProperties(0) failed: {e}"),
            Rejection::DeviceTypeUnusable {
                device_type,
                device_version,
                why,
            } => {
                write!(
                    f,
                    "device 0 type {device_type} version {device_version} unusable: {why}"
                )
            }
            Rejection::NotTried(why) => write!(f, "not tried: {why}"),
        }
    }
}

impl Rejection {
    /// What an operator can do about it.
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            Rejection::NotFound => {
                "give NCCL_NET_PLUGIN a full path, or put the library's directory on LD_LIBRARY_PATH or FERROCCL_PLUGIN_PATH"
            }
            Rejection::DlOpenFailed { .. } => {
                "the file exists but cannot be loaded: run `ldd` on it to find missing dependencies, and check its architecture"
            }
            Rejection::NoSymbol { above_cap, .. } if !above_cap.is_empty() => {
                "raise FERROCCL_NET_MAX_VERSION (or unset it) to use the versions the library exports"
            }
            Rejection::NoSymbol { .. } => {
                "not an NCCL net plugin, or one older than ncclNet v6 (NCCL 2.13): list its symbols with `nm -D`"
            }
            Rejection::NameMismatch { .. } => {
                "NCCL_NET selects plugins by their vtable name; unset it or use that name"
            }
            Rejection::NullSlot(_) => "the plugin's vtable is incomplete; it would crash NCCL too",
            Rejection::InitFailed { .. } => "the plugin's own log lines (NCCL_DEBUG=INFO) say why its init failed",
            Rejection::DevicesFailed(_) | Rejection::NoDevices => {
                "the plugin found no usable NIC: check its interface/HCA selection (e.g. NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and link state"
            }
            Rejection::PropertiesFailed(_) => "the plugin cannot describe device 0; see its log lines",
            Rejection::DeviceTypeUnusable { .. } => "ferroccl drives host-side (NCCL_NET_DEVICE_HOST) plugins only",
            Rejection::NotTried(_) => return None,
        })
    }
}

/// What happened to one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// This candidate was chosen.
    Chosen,
    /// Rejected, with the reason.
    Rejected(Rejection),
}

/// One candidate of the resolution walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateReport {
    /// The name as requested (`NCCL_NET_PLUGIN` entry, `libnccl-net.so`, `ib`, `socket`, a path).
    pub requested: String,
    /// Where the candidate comes from.
    pub kind: CandidateKind,
    /// Every file tried.
    pub attempts: Vec<OpenAttempt>,
    /// The file loaded (resolved with `dladdr` where a symbol was found).
    pub file: Option<PathBuf>,
    /// `ncclNetPlugin_vN` version found.
    pub net_version: Option<u32>,
    /// `ncclCollNetPlugin_vN` version found.
    pub collnet_version: Option<u32>,
    /// What CollNet `init` and `devices()` gave when the candidate was chosen
    /// (`None`: no CollNet table, or the candidate was rejected before).
    pub collnet_state: Option<CollNetState>,
    /// Vtable `name`.
    pub name: Option<String>,
    /// Chosen or rejected.
    pub outcome: Outcome,
}

impl CandidateReport {
    /// The rejection, if rejected.
    pub fn rejection(&self) -> Option<&Rejection> {
        match &self.outcome {
            Outcome::Rejected(r) => Some(r),
            Outcome::Chosen => None,
        }
    }
}

impl fmt::Display for CandidateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} '{}'", self.kind, self.requested)?;
        if let Some(p) = &self.file {
            write!(f, " [{}]", p.display())?;
        }
        if let Some(n) = &self.name {
            write!(f, " name '{n}'")?;
        }
        if let Some(v) = self.net_version {
            write!(f, " ncclNet v{v}")?;
        }
        if let Some(v) = self.collnet_version {
            write!(f, " ncclCollNet v{v}")?;
            if let Some(st) = &self.collnet_state {
                write!(f, " ({st})")?;
            }
        }
        match &self.outcome {
            Outcome::Chosen => f.write_str(": CHOSEN")?,
            Outcome::Rejected(r) => write!(f, ": rejected, {r}")?,
        }
        for a in &self.attempts {
            let what = match &a.result {
                AttemptResult::Opened => "opened".to_owned(),
                AttemptResult::NotFound(e) => format!("not found ({e})"),
                AttemptResult::Failed(e) => format!("dlopen failed: {e}"),
            };
            let dir = if a.from_search_dir {
                " (ferroccl plugin dir)"
            } else {
                ""
            };
            write!(f, "\n      tried {}{dir}: {what}", a.file)?;
        }
        Ok(())
    }
}

/// The whole resolution, kept as data (and logged once at INFO).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Candidates in the order tried.
    pub candidates: Vec<CandidateReport>,
}

impl LoadReport {
    /// The chosen candidate.
    pub fn chosen(&self) -> Option<&CandidateReport> {
        self.candidates.iter().find(|c| c.outcome == Outcome::Chosen)
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.candidates.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "  [{i}] {c}")?;
        }
        Ok(())
    }
}
