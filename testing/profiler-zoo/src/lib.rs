//! Profiler plugins for the conformance suite's profiler section (`--profiler`),
//! written in C against the layout tables of
//! `docs/reference/nccl-plugin-abi.md` §3.2, independent of ferroccl's Rust
//! ABI definitions.
//!
//! `build.rs` compiles `csrc/profiler_zoo.c` into the cargo profile directory:
//!
//! | library | exports | behaviour |
//! |---|---|---|
//! | `libnccl-profiler-zgood-v1.so` … `-v6.so` | `ncclProfiler_vN` | correct and strict: every handle is a record with a magic word; `startEvent` refuses (ncclInvalidUsage) a context it did not create or a parent it never handed out, `stopEvent` accepts NULL and refuses a handle that is not live, `recordEventState` refuses a handle that is not live, `finalize` refuses an unknown context |
//! | `libnccl-profiler-zcrash.so` | `ncclProfiler_v6` | as good, but `startEvent` dereferences NULL for a ProxyCtrl event (it assumes every event has a parent) |
//! | `libnccl-profiler-zblock.so` | `ncclProfiler_v6` | as good, but `stopEvent` of a NetPlugin event never returns (it waits for a completion no one signals) |
//! | `libnccl-profiler-zinitfail.so` | `ncclProfiler_v6` | `init` returns ncclSystemError |
//! | `libnccl-profiler-zbogus.so` | `ncclProfiler_v7` only | a version NCCL 2.30.7 does not know |
//! | `libnccl-profiler-zleak.so` | `ncclProfiler_v6` | as good, but `finalize` returns ncclInternalError while events are open (NCCL leaves some open, §6.4) |
//! | `libnccl-profiler-znull.so` | `ncclProfiler_v6` | as good, but `stopEvent(NULL)` dereferences the handle (NCCL's net-plugin Stop path passes NULL) |
//!
//! The crate itself has no Rust code.
