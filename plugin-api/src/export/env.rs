//! Generic shims behind [`export_env_plugin!`](crate::export_env_plugin):
//! `ncclEnvPlugin_v2` and `ncclEnvPlugin_v1` from one [`sdk::env::Env`](crate::sdk::env::Env).
//!
//! The plugin object lives in a per-type [`EnvState`] (declared by the macro);
//! every string `getEnv` returns is interned there once per distinct
//! `(name, value)` and never freed, so a pointer NCCL holds stays valid and
//! unchanged for the life of the process (NCCL uses the result like `getenv`'s).

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::null;
use std::sync::{Mutex, RwLock};

use super::panic_message;
use crate::abi::{self, ncclResult_t};
use crate::sdk::NetResult;
use crate::sdk::env::{Env, EnvInit, process_env};

/// Process-wide state of one exported env plugin type.
pub struct EnvState<T: Env> {
    plugin: RwLock<Option<T>>,
    /// Interned answers: name → every distinct value handed out for it.
    strings: Mutex<BTreeMap<String, Vec<Box<CStr>>>>,
}

impl<T: Env> std::fmt::Debug for EnvState<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvState").finish_non_exhaustive()
    }
}

impl<T: Env> Default for EnvState<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Env> EnvState<T> {
    /// An empty state (no plugin until `init`).
    pub const fn new() -> Self {
        EnvState {
            plugin: RwLock::new(None),
            strings: Mutex::new(BTreeMap::new()),
        }
    }

    /// A stable C string holding `value` (cut at an interior NUL, as C would read it).
    fn intern(&self, name: &str, value: String) -> *const c_char {
        let value = match value.find('\0') {
            Some(i) => value[..i].to_owned(),
            None => value,
        };
        let mut map = self.strings.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(name.to_owned()).or_default();
        if let Some(s) = list.iter().find(|s| s.to_bytes() == value.as_bytes()) {
            return s.as_ptr();
        }
        let c: Box<CStr> = CString::new(value).unwrap_or_default().into_boxed_c_str();
        let p = c.as_ptr();
        list.push(c);
        p
    }
}

/// Gives the export shims the state of a [`Env`] type; implemented by
/// [`env_plugin_state!`](crate::env_plugin_state).
pub trait EnvExport: Env {
    /// The one state object of this plugin type.
    fn state() -> &'static EnvState<Self>;
}

fn warn(what: &str, msg: &str) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        crate::log::log(
            crate::log::Level::Warn,
            crate::log::NCCL_INIT,
            file!(),
            line!(),
            format_args!("ENV/Plugin: {what} {msg}"),
        );
    }));
}

fn run(what: &str, f: impl FnOnce() -> NetResult<()>) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ncclResult_t::ncclSuccess,
        Ok(Err(e)) => {
            warn(what, &format!("failed: {e}"));
            e.code()
        }
        Err(p) => {
            warn(what, &format!("panicked: {}", panic_message(p.as_ref())));
            std::mem::forget(p);
            ncclResult_t::ncclInternalError
        }
    }
}

fn init_impl<T: EnvExport>(major: u8, minor: u8, patch: u8, suffix: *const c_char, api_version: u32) -> ncclResult_t {
    run("init", || {
        let suffix = if suffix.is_null() {
            String::new()
        } else {
            // SAFETY: NCCL passes NCCL_SUFFIX, a NUL-terminated string literal.
            unsafe { CStr::from_ptr(suffix) }.to_string_lossy().into_owned()
        };
        let info = EnvInit {
            major,
            minor,
            patch,
            suffix,
            api_version,
        };
        let mut slot = T::state().plugin.write().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(T::init(&info)?);
        }
        Ok(())
    })
}

/// `init` of `ncclEnv_v2_t` (stores the logger, then [`Env::init`] unless the
/// plugin already exists).
unsafe extern "C" fn init_v2<T: EnvExport>(
    major: u8,
    minor: u8,
    patch: u8,
    suffix: *const c_char,
    logger: abi::ncclDebugLogger_t,
) -> ncclResult_t {
    crate::log::set_logger(logger);
    init_impl::<T>(major, minor, patch, suffix, 2)
}

/// `init` of `ncclEnv_v1_t` (no logger).
unsafe extern "C" fn init_v1<T: EnvExport>(major: u8, minor: u8, patch: u8, suffix: *const c_char) -> ncclResult_t {
    init_impl::<T>(major, minor, patch, suffix, 1)
}

/// `finalize`: takes the plugin out of the state and calls [`Env::finalize`];
/// later lookups answer from the process environment.
unsafe extern "C" fn finalize<T: EnvExport>() -> ncclResult_t {
    run("finalize", || {
        let p = T::state().plugin.write().unwrap_or_else(|e| e.into_inner()).take();
        p.map_or(Ok(()), T::finalize)
    })
}

/// `getEnv`: [`Env::get_env`] (or the process environment before `init`, after
/// `finalize`, and for a name that is not UTF-8), interned; NULL for unset, for
/// a NULL name and after a panic.
unsafe extern "C" fn get_env<T: EnvExport>(name: *const c_char) -> *const c_char {
    if name.is_null() {
        return null();
    }
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: NCCL passes a NUL-terminated variable name.
        let cname = unsafe { CStr::from_ptr(name) };
        let lossy = cname.to_string_lossy();
        let state = T::state();
        let value = {
            let guard = state.plugin.read().unwrap_or_else(|e| e.into_inner());
            match (guard.as_ref(), cname.to_str()) {
                (Some(p), Ok(n)) => p.get_env(n),
                _ => process_env(&lossy),
            }
        };
        value.map_or(null(), |v| state.intern(&lossy, v))
    }));
    r.unwrap_or_else(|p| {
        warn(
            "getEnv",
            &format!("panicked: {}; answering NULL", panic_message(p.as_ref())),
        );
        std::mem::forget(p);
        null()
    })
}

/// The `ncclEnv_v2_t` table of `T`.
pub const fn env_v2<T: EnvExport>() -> abi::ncclEnv_v2_t {
    abi::ncclEnv_v2_t {
        name: T::NAME.as_ptr(),
        init: Some(init_v2::<T>),
        finalize: Some(finalize::<T>),
        getEnv: Some(get_env::<T>),
    }
}

/// The `ncclEnv_v1_t` table of `T`.
pub const fn env_v1<T: EnvExport>() -> abi::ncclEnv_v1_t {
    abi::ncclEnv_v1_t {
        name: T::NAME.as_ptr(),
        init: Some(init_v1::<T>),
        finalize: Some(finalize::<T>),
        getEnv: Some(get_env::<T>),
    }
}
