//! Project tasks run with `cargo xtask …` (alias in `.cargo/config.toml`):
//!
//! * [`dist`]: builds the tools (`ferroccl-perf`, `ferroccl-info`) and every
//!   plugin crate under `plugins/` (release), and lays them out in one prefix,
//!   `target/dist/bin/` and `target/dist/lib/`, the plugins under NCCL's file
//!   names (`libnccl-net-socket.so`, `libnccl-net-ib.so`, `libnccl-tuner-*.so`,
//!   `libnccl-profiler-*.so`): cargo can only name a cdylib after its crate
//!   (`libnccl_net_socket.so`), NCCL looks for `libnccl-net-<name>.so`. A plugin
//!   whose build needs system packages that are missing is skipped with the
//!   reason (the IB plugin without rdma-core headers).
//! * [`readme`]: the README's quick start, parsed (exactly two commands, the
//!   prerequisites line above them) and, with `--run`, the first command run
//!   verbatim with a small size range and its output checked.
//! * [`doccheck`]: the documents and doc comments name only files, Rust
//!   items and conformance check ids that exist.
//! * [`deptree`]: which `-sys` crates of a `cargo tree` probe the system at build
//!   time (pkg-config, bindgen): none may be on the quick start's path.

pub mod deptree;
pub mod dist;
pub mod doccheck;
pub mod gpubundle;
pub mod readme;
pub mod workspace;
