//! The checks, by area. Each module registers its checks in run order.

pub(crate) mod conn;
mod fault;
#[cfg(feature = "cuda")]
mod gpu;
mod loading;
mod memory;
mod perf;
mod props;
mod transfer;
mod vdev;

use crate::registry::Registry;

/// Registers every check.
pub fn register(r: &mut Registry) {
    loading::register(r);
    props::register(r);
    conn::register(r);
    vdev::register(r);
    transfer::register(r);
    memory::register(r);
    fault::register(r);
    perf::register(r);
}
