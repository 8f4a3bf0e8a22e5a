//! A fake GIN plugin written in C, independent of ferroccl's Rust ABI definitions.
//!
//! `build.rs` compiles `csrc/gin_fake.c` (hand-written `ncclGin_v13_t`,
//! `ncclGin_v14_t` and `ncclNetProperties_v12_t` following NCCL 2.30.7's
//! `src/include/plugin/gin/gin_v13.h`, `gin_v14.h` and `net_v12.h`, offsets pinned
//! with `_Static_assert`) into libraries in the cargo profile directory:
//!
//! | file | behaviour |
//! | --- | --- |
//! | `libnccl-gin-fake.so` | `ncclGinPlugin_v13` and `_v14`, name `FakeGin`, one `GIN_PROXY` device (`fakegin0`); `init` hands out a context that `finalize` checks and frees; data-path slots return `ncclInternalError` |
//! | `libnccl-gin-fake-hosttype.so` | broken: its device reports `netDeviceType` `NCCL_NET_DEVICE_HOST`, which NCCL would take as the GIN type (the conformance check `gin.properties` catches it) |
//!
//! The crate has no Rust code.
