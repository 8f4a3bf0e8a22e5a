//! Test net plugins written in C, independent of ferroccl's Rust ABI definitions.
//!
//! `build.rs` compiles `csrc/plugin_v6.c` (a hand-written `ncclNet_v6_t` following
//! the layout table of `docs/reference/nccl-plugin-abi.md` §1.3) with the system C
//! compiler into shared libraries placed in the cargo profile directory
//! (`target/<profile>/`), where the host tests find them:
//!
//! | file | behaviour |
//! | --- | --- |
//! | `libnccl-net-cv6.so` | working in-process loopback plugin, name `CV6` |
//! | `libnccl-net-cv6late.so` | exports a table whose slots are NULL until `init` fills them, name `CV6Late` |
//! | `libnccl-net-cv6initfail.so` | `init` returns `ncclSystemError` (2) |
//! | `libnccl-net-cv6zerodev.so` | `devices()` reports 0 |
//! | `libnccl-net-cv6nosym.so` | exports only `ncclNetPlugin_v5` (unsupported) |
//! | `libnccl-net-cv6unpack.so` | exports `ncclNetPlugin_v7` whose device 0 is `NCCL_NET_DEVICE_UNPACK` v7 |
//! | `libnccl-net-missingdep.so` | linked against `libferroccl_missing.so`, which was deleted after linking |
//!
//! The crate itself has no Rust code.
