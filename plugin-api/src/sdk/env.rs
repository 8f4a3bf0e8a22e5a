//! The safe SDK trait for env plugins (`ncclEnv_v1` / `ncclEnv_v2`, reference §3.3).
//!
//! NCCL 2.30.7 sends every parameter lookup (`ncclGetEnv`, `src/misc/param.cc`)
//! to the env plugin's `getEnv`, so a plugin decides the value of every `NCCL_*`
//! variable the library reads: it can override, hide, or pass through what the
//! process environment holds. Implement [`Env`] once and export both tables with
//! [`export_env_plugin!`](crate::export_env_plugin).
//!
//! What the export shims guarantee (the C contract of `getEnv`, which NCCL
//! treats like `getenv`): the returned `const char*` stays valid and unchanged
//! for the life of the process, whatever is looked up afterwards and from
//! whichever thread (each distinct value is interned once and never freed); no
//! panic crosses the C ABI (a panicking `get_env` answers NULL, a panicking
//! `init`/`finalize` returns `ncclInternalError`); before `init` and after
//! `finalize` the process environment answers, as NCCL's internal default does.

use std::ffi::CStr;

use crate::sdk::NetResult;

/// What NCCL tells an env plugin at `init`: its version (`NCCL_MAJOR`,
/// `NCCL_MINOR`, `NCCL_PATCH`, `NCCL_SUFFIX`; 2, 30, 7 and `""` for NCCL 2.30.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvInit {
    /// `ncclMajor`.
    pub major: u8,
    /// `ncclMinor`.
    pub minor: u8,
    /// `ncclPatch`.
    pub patch: u8,
    /// `suffix` (empty for NULL).
    pub suffix: String,
    /// API version of the table NCCL loaded (1 or 2; v2 also passed a logger,
    /// which the `net_*!` logging macros then use).
    pub api_version: u32,
}

/// An env plugin. `init` creates it once per process; `get_env` is then called
/// for every parameter lookup, from any thread, concurrently.
pub trait Env: Sized + Send + Sync + 'static {
    /// The table's `name`.
    const NAME: &'static CStr;

    /// Creates the plugin (`init`). An error makes NCCL fail every API call of
    /// the process (`ncclInitEnv` latches it).
    fn init(info: &EnvInit) -> NetResult<Self>;

    /// The value of `name`, `None` for unset (`getEnv`). Names are what NCCL
    /// looks up (`NCCL_*` mostly); a name that is not UTF-8 is answered from the
    /// process environment without asking. Use [`process_env`] to pass a
    /// variable through.
    fn get_env(&self, name: &str) -> Option<String>;

    /// Destroys the plugin (`finalize`, at process exit). Strings handed out
    /// stay valid.
    fn finalize(self) -> NetResult<()> {
        Ok(())
    }
}

/// The process environment's value of `name` (`getenv`; invalid UTF-8 replaced),
/// what NCCL's internal default env plugin returns.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}
