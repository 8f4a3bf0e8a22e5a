//! A recording test profiler written in C, independent of ferroccl's Rust ABI
//! definitions.
//!
//! `build.rs` compiles `csrc/profiler_rec.c` (hand-written
//! `ncclProfilerEventDescr_v1_t` … `_v6_t` and `ncclProfiler_vN_t` following the
//! layout tables of `docs/reference/nccl-plugin-abi.md` §3.2) once per API
//! version into `libnccl-profiler-recv1.so` … `libnccl-profiler-recv6.so` (each
//! exports only `ncclProfiler_vN`, name `ProfRecVN`) in the cargo profile directory.
//!
//! Driven by the environment (read in `init`):
//! * `PROFREC_DIR=<dir>`: each process appends to `<dir>/rec-<pid>.log` one line
//!   per call: `init v=N rank=R nranks=N nnodes=N commId=X mask=M`,
//!   `start id=I type=T parent=P rank=R …fields`, `state id=I st=S size=N`,
//!   `stop id=I`, `finalize`. NetPlugin starts carry `netid=` and, for the
//!   built-in descriptors, their fields: IB (`net_ib_v1`) `ntype dev wr op qp
//!   len`, socket (`net_socket_v1`) `ntype fd op len`. Event records are never
//!   freed, so a parent that was already stopped (NCCL stops CollApi before its
//!   Coll starts) still resolves to its id; `parent=0` is NULL, `parent=?` an
//!   unknown pointer.
//! * `PROFREC_MASK=<int>`: the activation mask written in `init` (default: all
//!   types the version knows).
//!
//! The crate itself has no Rust code.
