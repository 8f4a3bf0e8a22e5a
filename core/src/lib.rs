//! ferroccl: a collective-communication runtime in the NCCL mould (the map:
//! `docs/ARCHITECTURE.md`).
pub mod bootstrap;
pub mod check;
pub(crate) mod coll;
pub(crate) mod comm;
pub mod config;
pub(crate) mod diag;
pub(crate) mod enqueue;
pub mod error;
pub mod graph;
pub(crate) mod group;
pub mod log;
pub mod mockdev;
pub mod plugin;
pub mod profiler;
pub(crate) mod proxy;
pub mod stream;
pub mod topo;
pub(crate) mod transport;
pub mod tune;

pub use bootstrap::{UniqueId, get_unique_id};
pub use check::TestOp;
pub use coll::CollKind;
#[doc(hidden)]
pub use coll::exec::{device_step_counts, fifo_staged_steps};
pub use comm::{
    Comm, CommConfig, NUM_RMA_SIG, PreloadedNet, WaitSignalDesc, Window, collnet_after_node_threshold,
    collnet_node_threshold, resolve_collnet_enable, resolve_traffic_class,
};
pub use error::{Error, Result};
pub use ferroccl_kernels::{DataType, RedOp, Scalar};
pub use group::{group_end, group_start};
pub use stream::Stream;
#[doc(hidden)]
pub use transport::collnet::collnet_sge_counts;
