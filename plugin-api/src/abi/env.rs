//! `ncclEnv_v1_t` / `ncclEnv_v2_t` (reference §3.3).
//!
//! Sources: NCCL 2.30.7 `src/include/plugin/nccl_env.h`, `src/include/plugin/env/env_v{1,2}.h`.

use std::ffi::{CStr, c_char};

use super::common::{abi_struct, ncclDebugLogger_t, ncclResult_t};
use super::net::fnp;

abi_struct! {
    /// `ncclEnv_v1_t` (symbol `ncclEnvPlugin_v1`, since 2.28.7).
    #[derive(Debug)]
    pub struct ncclEnv_v1_t, size 32 {
        name: *const c_char = 0,
        init: fnp!(ncclMajor: u8, ncclMinor: u8, ncclPatch: u8, suffix: *const c_char) = 8,
        finalize: fnp!() = 16,
        /// `const char* (*)(const char* name)`.
        getEnv: Option<unsafe extern "C" fn(name: *const c_char) -> *const c_char> = 24,
    }
}

abi_struct! {
    /// `ncclEnv_v2_t` (symbol `ncclEnvPlugin_v2`, since 2.30.7): `init` gains a trailing logger.
    #[derive(Debug)]
    pub struct ncclEnv_v2_t, size 32 {
        name: *const c_char = 0,
        init: fnp!(ncclMajor: u8, ncclMinor: u8, ncclPatch: u8, suffix: *const c_char,
            logFunction: ncclDebugLogger_t) = 8,
        finalize: fnp!() = 16,
        /// `const char* (*)(const char* name)`.
        getEnv: Option<unsafe extern "C" fn(name: *const c_char) -> *const c_char> = 24,
    }
}

/// `ncclEnv_t` inside NCCL 2.30.7.
pub type ncclEnv_t = ncclEnv_v2_t;

/// Env plugin data symbols with their version, in NCCL 2.30.7's search order.
pub const ENV_PLUGIN_SYMBOLS: [(&CStr, u32); 2] = [(c"ncclEnvPlugin_v2", 2), (c"ncclEnvPlugin_v1", 1)];
