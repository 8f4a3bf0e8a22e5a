//! Runs cudarc calls so that neither an error nor a panic escapes as a panic.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::KernelError;

/// Runs `f` (a cudarc call) under `catch_unwind`: a driver error becomes
/// [`KernelError::Cuda`] naming `call`; a panic inside cudarc (a symbol missing
/// from an old driver, say) becomes the same error with the panic's text.
pub(crate) fn call<T, E: std::fmt::Debug>(
    call: &'static str,
    f: impl FnOnce() -> Result<T, E>,
) -> Result<T, KernelError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(KernelError::Cuda {
            call,
            message: format!("{e:?}"),
        }),
        Err(p) => Err(KernelError::Cuda {
            call,
            message: format!("panicked inside cudarc: {}", panic_text(&p)),
        }),
    }
}

/// Runs an infallible cudarc call (a presence check) under `catch_unwind`.
pub(crate) fn quiet<T>(what: &'static str, f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| format!("{what} panicked inside cudarc: {}", panic_text(&p)))
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}
