//! The functions of `nccl.h` ferroccl does not implement (windows, signals,
//! suspend/resume, shrink/grow/revoke, simulation, the parameter API):
//! `ncclInvalidUsage` with a WARN line naming the function, never a crash.

use crate::abi::ncclResult_t;
use crate::api::{Fail, guard, report};

fn text(name: &str) -> String {
    format!(
        "{name} is not implemented by ferroccl (libnccl.so.2 of ferroccl {}, NCCL 2.30.7 API): it returns \
         ncclInvalidUsage and changes nothing",
        env!("CARGO_PKG_VERSION")
    )
}

/// Reports `name` as not implemented: `ncclInvalidUsage`.
pub(crate) fn missing(name: &str) -> ncclResult_t {
    guard(name, || Err(Fail::usage(text(name))))
}

/// The same for the functions that return nothing.
pub(crate) fn missing_void(name: &str) {
    let _ = std::panic::catch_unwind(|| report(&text(name)));
}
