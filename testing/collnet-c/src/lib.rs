//! A recording CollNet test plugin written in C, independent of ferroccl's Rust ABI
//! definitions.
//!
//! `build.rs` compiles `csrc/collnet.c` (hand-written `ncclCollNet_v6_t` …
//! `ncclCollNet_v12_t`, `ncclNetProperties_v6_t` … `_v12_t` and `ncclNetSGE_v8_t` /
//! `_v9_t` following the layout tables of `docs/reference/nccl-plugin-abi.md` §1.2
//! and §2, offsets pinned with `_Static_assert`) into libraries in the cargo profile
//! directory. Every library also exports a minimal `ncclNetPlugin_v6` (name `CNNet`,
//! one host device) so the host loads it as a net plugin:
//!
//! | file | behaviour |
//! | --- | --- |
//! | `libnccl-net-cn6.so` … `cn12.so` | `ncclCollNetPlugin_vN`, name `CNvN`, one device |
//! | `libnccl-net-cnnone.so` | no CollNet table |
//! | `libnccl-net-cn12initfail.so`, `cn8initfail.so` | CollNet `init` returns `ncclSystemError` |
//! | `libnccl-net-cn9zerodev.so` | CollNet `devices()` reports 0 |
//! | `libnccl-net-cn11nullslot.so` | CollNet `test` slot is NULL |
//! | `libnccl-net-cnz*.so` | the conformance zoo, each broken in one way (`conformance/README.md`) |
//! | `libnccl-net-cnzdeaf.so` | `csrc/deaf.c`: forwards to `libnccl_net_collnet_socket.so` beside it, but hides a dead peer (`test` answers done = 0 forever) |
//! | `libnccl-net-cnstrictmr.so` | `csrc/deaf.c` built with `CN_STRICT_MR`: the in-tree CollNet plugin refusing any collective with a NULL mhandle |
//! | `libnccl-net-cnconnfail.so` | `csrc/deaf.c` built with `CN_CONNECT_FAIL`: the in-tree CollNet plugin whose every `connect` fails |
//!
//! The CollNet "network" is in-process: ranks of one communicator are threads that
//! call `connect` with the same handles; the last rank to post an operation
//! computes it for all (sum, max and min over 8-, 32- and 64-bit integers, float
//! and double; `reduceSupport` claims exactly those, so prod and 16-bit/fp8 types
//! are refused). Every call is recorded: `cn_stat(key)` returns a counter or the
//! last argument seen (keys in the C source), `cn_log()` the call sequence.
//!
//! The crate itself has no Rust code.
