//! `libnccl-profiler-cudaevents.so`: a profiler plugin in C (`ncclProfiler_v6`)
//! shaped like NCCL's example profiler (`plugins/profiler/example`): it times
//! copy-engine collective events with `cudaEvent*` and, like the example's
//! Makefile, is linked with `-shared` only, so those symbols must come from the
//! host process. `build.rs` puts it in `target/<profile>/`; the test is
//! `core/tests/profiler_cuda_stub.rs`. The crate has no Rust code.
