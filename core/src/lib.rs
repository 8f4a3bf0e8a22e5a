//! ferroccl: a collective-communication runtime in the NCCL mould (see DESIGN.md).
pub mod bootstrap;
pub mod plugin;
pub mod config;
pub mod log;
