//! Exporting plugins to NCCL: the `#[unsafe(no_mangle)]` data symbols
//! (`ncclNetPlugin_vN`, `ncclTunerPlugin_vN`, `ncclProfiler_vN`) built from one
//! safe SDK implementation.
//!
//! * [`export_net_plugin!`](crate::export_net_plugin)`(MyNet)` — `ncclNetPlugin_v6` … `_v12`
//!   from one [`sdk::Net`](crate::sdk::Net) impl.
//! * [`export_collnet_plugin!`](crate::export_collnet_plugin)`(MyCollNet)` —
//!   `ncclCollNetPlugin_v6` … `_v12` from one [`sdk::collnet::CollNet`](crate::sdk::collnet::CollNet)
//!   impl, beside `export_net_plugin!` in the same cdylib.
//! * [`export_rma_plugin!`](crate::export_rma_plugin)`(MyRma)` — `ncclRmaPlugin_v14` and
//!   `ncclRmaPlugin_v13` from one [`sdk::rma::Rma`](crate::sdk::rma::Rma) impl.
//! * [`export_tuner_plugin!`](crate::export_tuner_plugin)`(MyTuner)` — `ncclTunerPlugin_v2` … `_v6`.
//! * [`export_profiler_plugin!`](crate::export_profiler_plugin)`(MyProfiler)` — `ncclProfiler_v6`.
//! * [`export_env_plugin!`](crate::export_env_plugin)`(MyEnv)` — `ncclEnvPlugin_v2` and `_v1`
//!   from one [`sdk::env::Env`](crate::sdk::env::Env) impl.
//!
//! The macros are thin: the shim logic lives in generic `extern "C"` functions
//! in [`net`], [`tuner`] and [`profiler`], instantiated for the plugin type;
//! every shim runs inside `catch_unwind` so no panic crosses the C ABI.

pub mod collnet;
pub mod env;
pub mod net;
pub mod profiler;
pub mod props;
pub mod rma;
pub mod tuner;

use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::abi::{self, ncclResult_t};
use crate::sdk::NetResult;

/// Marker for the immutable `#[repr(C)]` vtable structs that may be exported as
/// `static`s (sealed: implemented for every `ncclNet_vN_t`, `ncclCollNet_vN_t`,
/// `ncclTuner_vN_t`, `ncclProfiler_vN_t`, `ncclEnv_vN_t`).
pub trait VTable: sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! vtables {
    ($($t:ident),* $(,)?) => { $( impl sealed::Sealed for abi::$t {} impl VTable for abi::$t {} )* };
}
vtables!(
    ncclNet_v6_t,
    ncclNet_v7_t,
    ncclNet_v8_t,
    ncclNet_v9_t,
    ncclNet_v10_t,
    ncclNet_v11_t,
    ncclNet_v12_t,
    ncclCollNet_v6_t,
    ncclCollNet_v7_t,
    ncclCollNet_v8_t,
    ncclCollNet_v9_t,
    ncclCollNet_v10_t,
    ncclCollNet_v11_t,
    ncclCollNet_v12_t,
    ncclTuner_v2_t,
    ncclTuner_v3_t,
    ncclTuner_v4_t,
    ncclTuner_v5_t,
    ncclTuner_v6_t,
    ncclProfiler_v1_t,
    ncclProfiler_v2_t,
    ncclProfiler_v3_t,
    ncclProfiler_v4_t,
    ncclProfiler_v5_t,
    ncclProfiler_v6_t,
    ncclEnv_v1_t,
    ncclEnv_v2_t,
    ncclRma_v13_t,
    ncclRma_v14_t,
);

/// A vtable as an exportable `static`: `#[repr(transparent)]`, so the exported
/// symbol's bytes are exactly the C struct NCCL `dlsym`s.
#[repr(transparent)]
#[derive(Debug)]
pub struct Exported<T: VTable>(pub T);

// SAFETY: a vtable is immutable after construction and holds only function pointers
// and a pointer to a `'static` C string, all of which may be read from any thread.
unsafe impl<T: VTable> Sync for Exported<T> {}

impl<T: VTable> std::ops::Deref for Exported<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The message of a panic payload (`&str` or `String`), else a placeholder.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic payload>".to_owned()
    }
}

/// Runs one shim body: `Ok` → `ncclSuccess`; `Err(e)` → logged at WARN through
/// NCCL's logger with `e`'s message and returned as [`NetError::code`](crate::NetError::code);
/// a panic → logged at WARN with its message and returned as `ncclInternalError`.
pub fn guard(plugin: &CStr, what: &str, f: impl FnOnce() -> NetResult<()>) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => ncclResult_t::ncclSuccess,
        Ok(Err(e)) => {
            let code = e.code();
            let _ = catch_unwind(AssertUnwindSafe(|| {
                crate::net_warn!("NET/{} : {what} failed: {e}", plugin.to_string_lossy());
            }));
            code
        }
        Err(payload) => {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                crate::net_warn!(
                    "NET/{} : {what} panicked: {}",
                    plugin.to_string_lossy(),
                    panic_message(payload.as_ref())
                );
            }));
            // Dropping the payload could itself panic; leak it instead.
            std::mem::forget(payload);
            ncclResult_t::ncclInternalError
        }
    }
}

/// Implements [`net::NetExport`] for a [`Net`](crate::sdk::Net) type by declaring the
/// `static` holding its state. Use this (instead of [`export_net_plugin!`](crate::export_net_plugin))
/// to build vtables with [`net::net_v12`] etc. without exporting symbols, e.g. for
/// several plugin types in one test binary.
#[macro_export]
macro_rules! net_plugin_state {
    ($ty:ty) => {
        const _: () = {
            static STATE: $crate::export::net::NetState<$ty> = $crate::export::net::NetState::new();
            impl $crate::export::net::NetExport for $ty {
                fn state() -> &'static $crate::export::net::NetState<Self> {
                    &STATE
                }
            }
        };
    };
}

/// Exports `ncclNetPlugin_v6` … `ncclNetPlugin_v12` (data symbols: the vtable structs)
/// from one [`sdk::Net`](crate::sdk::Net) implementation. Invoke once per cdylib, at
/// module level:
///
/// ```ignore
/// struct MyNet;
/// impl ferroccl_plugin_api::sdk::Net for MyNet { /* ... */ }
/// ferroccl_plugin_api::export_net_plugin!(MyNet);
/// ```
#[macro_export]
macro_rules! export_net_plugin {
    ($ty:ty) => {
        $crate::net_plugin_state!($ty);
        $crate::__export_net_symbols!($ty;
            ncclNetPlugin_v6: ncclNet_v6_t = net_v6,
            ncclNetPlugin_v7: ncclNet_v7_t = net_v7,
            ncclNetPlugin_v8: ncclNet_v8_t = net_v8,
            ncclNetPlugin_v9: ncclNet_v9_t = net_v9,
            ncclNetPlugin_v10: ncclNet_v10_t = net_v10,
            ncclNetPlugin_v11: ncclNet_v11_t = net_v11,
            ncclNetPlugin_v12: ncclNet_v12_t = net_v12,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_net_symbols {
    ($ty:ty; $($sym:ident : $t:ident = $f:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($sym), "`: the `", stringify!($t), "` vtable NCCL looks up.")]
            #[unsafe(no_mangle)]
            #[allow(non_upper_case_globals)]
            pub static $sym: $crate::export::Exported<$crate::abi::$t> =
                $crate::export::Exported($crate::export::net::$f::<$ty>());
        )*
    };
}

/// Implements [`collnet::CollNetExport`] for a [`CollNet`](crate::sdk::collnet::CollNet)
/// type by declaring the `static` holding its state. Use this (instead of
/// [`export_collnet_plugin!`](crate::export_collnet_plugin)) to build vtables with
/// [`collnet::collnet_v12`] etc. without exporting symbols.
#[macro_export]
macro_rules! collnet_plugin_state {
    ($ty:ty) => {
        const _: () = {
            static STATE: $crate::export::collnet::CollNetState<$ty> = $crate::export::collnet::CollNetState::new();
            impl $crate::export::collnet::CollNetExport for $ty {
                fn state() -> &'static $crate::export::collnet::CollNetState<Self> {
                    &STATE
                }
            }
        };
    };
}

/// Exports `ncclCollNetPlugin_v6` … `ncclCollNetPlugin_v12` (data symbols: the vtable
/// structs) from one [`CollNet`](crate::sdk::collnet::CollNet) implementation. Invoke
/// once per cdylib at module level; it may sit beside
/// [`export_net_plugin!`](crate::export_net_plugin) (NCCL loads both tables from one
/// library, `src/plugin/net.cc`):
///
/// ```ignore
/// struct MyCollNet;
/// impl ferroccl_plugin_api::sdk::collnet::CollNet for MyCollNet { /* ... */ }
/// ferroccl_plugin_api::export_collnet_plugin!(MyCollNet);
/// ```
#[macro_export]
macro_rules! export_collnet_plugin {
    ($ty:ty) => {
        $crate::collnet_plugin_state!($ty);
        $crate::__export_symbols!(collnet, $ty;
            ncclCollNetPlugin_v6: ncclCollNet_v6_t = collnet_v6,
            ncclCollNetPlugin_v7: ncclCollNet_v7_t = collnet_v7,
            ncclCollNetPlugin_v8: ncclCollNet_v8_t = collnet_v8,
            ncclCollNetPlugin_v9: ncclCollNet_v9_t = collnet_v9,
            ncclCollNetPlugin_v10: ncclCollNet_v10_t = collnet_v10,
            ncclCollNetPlugin_v11: ncclCollNet_v11_t = collnet_v11,
            ncclCollNetPlugin_v12: ncclCollNet_v12_t = collnet_v12,
        );
    };
}

/// Exports `ncclTunerPlugin_v2` … `ncclTunerPlugin_v6` from one
/// [`sdk::Tuner`](crate::sdk::Tuner) implementation (once per cdylib, module level):
/// `ferroccl_plugin_api::export_tuner_plugin!(MyTuner);`
#[macro_export]
macro_rules! export_tuner_plugin {
    ($ty:ty) => {
        $crate::__export_symbols!(tuner, $ty;
            ncclTunerPlugin_v2: ncclTuner_v2_t = tuner_v2,
            ncclTunerPlugin_v3: ncclTuner_v3_t = tuner_v3,
            ncclTunerPlugin_v4: ncclTuner_v4_t = tuner_v4,
            ncclTunerPlugin_v5: ncclTuner_v5_t = tuner_v5,
            ncclTunerPlugin_v6: ncclTuner_v6_t = tuner_v6,
        );
    };
}

/// Exports `ncclProfiler_v6` … `ncclProfiler_v1` from one
/// [`sdk::Profiler`](crate::sdk::Profiler) implementation (once per cdylib,
/// module level): `ferroccl_plugin_api::export_profiler_plugin!(MyProfiler);`.
/// Older hosts load the newest symbol they know; its descriptors are converted
/// to the v6 layout the trait sees (v1 enum codes become NCCL's strings; fields
/// a version lacks are 0/NULL; v1–v3 `init` passes commId 0 and -1 for the
/// counts and rank).
#[macro_export]
macro_rules! export_profiler_plugin {
    ($ty:ty) => {
        $crate::__export_symbols!(profiler, $ty;
            ncclProfiler_v6: ncclProfiler_v6_t = profiler_v6,
            ncclProfiler_v5: ncclProfiler_v5_t = profiler_v5,
            ncclProfiler_v4: ncclProfiler_v4_t = profiler_v4,
            ncclProfiler_v3: ncclProfiler_v3_t = profiler_v3,
            ncclProfiler_v2: ncclProfiler_v2_t = profiler_v2,
            ncclProfiler_v1: ncclProfiler_v1_t = profiler_v1,
        );
    };
}

/// Implements [`env::EnvExport`] for an [`Env`](crate::sdk::env::Env) type by
/// declaring the `static` holding its state (used by
/// [`export_env_plugin!`](crate::export_env_plugin); use it alone to build the
/// tables with [`env::env_v2`] / [`env::env_v1`] without exporting symbols).
#[macro_export]
macro_rules! env_plugin_state {
    ($ty:ty) => {
        const _: () = {
            static STATE: $crate::export::env::EnvState<$ty> = $crate::export::env::EnvState::new();
            impl $crate::export::env::EnvExport for $ty {
                fn state() -> &'static $crate::export::env::EnvState<Self> {
                    &STATE
                }
            }
        };
    };
}

/// Exports `ncclEnvPlugin_v2` and `ncclEnvPlugin_v1` (NCCL 2.30.7 looks for them in
/// that order, `src/plugin/env.cc`) from one [`sdk::env::Env`](crate::sdk::env::Env)
/// implementation (once per cdylib, module level):
/// `ferroccl_plugin_api::export_env_plugin!(MyEnv);`.
#[macro_export]
macro_rules! export_env_plugin {
    ($ty:ty) => {
        $crate::env_plugin_state!($ty);
        $crate::__export_symbols!(env, $ty;
            ncclEnvPlugin_v2: ncclEnv_v2_t = env_v2,
            ncclEnvPlugin_v1: ncclEnv_v1_t = env_v1,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_symbols {
    ($m:ident, $ty:ty; $($sym:ident : $t:ident = $f:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($sym), "`: the `", stringify!($t), "` vtable NCCL looks up.")]
            #[unsafe(no_mangle)]
            #[allow(non_upper_case_globals)]
            pub static $sym: $crate::export::Exported<$crate::abi::$t> =
                $crate::export::Exported($crate::export::$m::$f::<$ty>());
        )*
    };
}

/// Implements [`rma::RmaExport`] for an [`Rma`](crate::sdk::rma::Rma) type by declaring
/// the `static` holding its state (use it to build tables with [`rma::rma_v14`] without
/// exporting symbols).
#[macro_export]
macro_rules! rma_plugin_state {
    ($ty:ty) => {
        const _: () = {
            static STATE: $crate::export::rma::RmaState<$ty> = $crate::export::rma::RmaState::new();
            impl $crate::export::rma::RmaExport for $ty {
                fn state() -> &'static $crate::export::rma::RmaState<Self> {
                    &STATE
                }
            }
        };
    };
}

/// Exports `ncclRmaPlugin_v14` and `ncclRmaPlugin_v13` (NCCL 2.30.7's RMA versions,
/// `src/plugin/rma.cc`) from one [`sdk::rma::Rma`](crate::sdk::rma::Rma) implementation.
/// Invoke once per cdylib, at module level, usually beside `export_net_plugin!`.
#[macro_export]
macro_rules! export_rma_plugin {
    ($ty:ty) => {
        $crate::rma_plugin_state!($ty);
        #[doc = "`ncclRmaPlugin_v14`: the `ncclRma_v14_t` vtable NCCL looks up."]
        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static ncclRmaPlugin_v14: $crate::export::Exported<$crate::abi::ncclRma_v14_t> =
            $crate::export::Exported($crate::export::rma::rma_v14::<$ty>());
        #[doc = "`ncclRmaPlugin_v13`: the `ncclRma_v13_t` vtable NCCL looks up."]
        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)]
        pub static ncclRmaPlugin_v13: $crate::export::Exported<$crate::abi::ncclRma_v13_t> =
            $crate::export::Exported($crate::export::rma::rma_v13::<$ty>());
    };
}
