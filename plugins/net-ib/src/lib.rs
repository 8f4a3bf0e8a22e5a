//! InfiniBand/RoCE verbs network plugin (`libnccl-net-ib.so`), vtable name
//! `FerrocclIB`.
//!
//! Layers:
//! * [`proto`]: the sans-IO core (FIFO/CTS matching, request accounting,
//!   chunking across QPs, handshake), unit- and property-tested;
//! * [`params`]: `NCCL_IB_*` parsing/validation, `NCCL_IB_HCA`, GID selection;
//! * [`verbs`]: libibverbs loaded at run time (libloading) plus the inline
//!   verbs from `rdma-sys`; thin RAII wrappers;
//! * [`net`]: [`IbNet`], the `ferroccl_plugin_api::sdk::Net` implementation;
//! * [`rma`]: [`rma::IbRma`], the `sdk::rma::Rma` implementation (one-sided put,
//!   get and put-with-signal as RDMA WRITE, READ and an atomic add; opt-in with
//!   `NCCL_IB_RMA_ENABLE=1`);
//! * [`inventory`]: read-only HCA/port/GID listing for diagnostics (`ferroccl-info ib`).
//!
//! libibverbs is opened with `dlopen("libibverbs.so.1")` inside `init`, so the
//! plugin itself always loads; without the library or without an active port,
//! `init` fails with a message saying which.

pub mod inventory;
pub mod net;
pub mod params;
pub mod proto;
pub mod rma;
pub mod verbs;

pub use net::IbNet;

ferroccl_plugin_api::export_net_plugin!(IbNet);
ferroccl_plugin_api::export_rma_plugin!(rma::IbRma);
