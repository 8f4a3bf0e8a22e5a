//! Conformance zoo, second generation: plugins written in plain C (like most
//! third-party net plugins), built by `build.rs` from `conformance/zoo/zoo_net.c`
//! into `target/<profile>/libnccl-net-zoo-<variant>.so`.
//!
//! **Correct but quirky** — NCCL 2.30.7 drives each of them without trouble, so the
//! conformance suite's required tier must pass on every one (no false failures):
//!
//! | file | quirk | what a careless host does wrong |
//! | --- | --- | --- |
//! | `libnccl-net-zoo-handle-state.so` | connect keeps its state in the handle and refuses a used handle buffer | reuses one handle buffer for several connections |
//! | `libnccl-net-zoo-deref-mhandle.so` | isend/irecv read the mhandle and check the buffer lies in that registration, on that comm | posts with a NULL or wrong mhandle |
//! | `libnccl-net-zoo-oldest-test.so` | test() refuses any request but the oldest outstanding one of its comm | tests requests out of posting order |
//! | `libnccl-net-zoo-slow-connect.so` | connect and accept return NULL for their first 100 calls per connection | gives up, or blocks, on a slow handshake |
//! | `libnccl-net-zoo-threads.so` | a helper thread per comm does the I/O | assumes single-threaded plugins |
//! | `libnccl-net-zoo-ctx-teardown.so` | exports only `ncclNetPlugin_v12` and tears down when its last context is finalized | queries devices with no context open |
//!
//! **Broken**, for the runtime and the verdict logic:
//!
//! | file | defect | expected |
//! | --- | --- | --- |
//! | `libnccl-net-zoo-no-sizes.so` | test() never writes sizes | the suite fails `transfer.recv_larger`; the runtime still runs collectives (NCCL does) |
//! | `libnccl-net-zoo-no-devices.so` | devices() reports 0 | one failed `load.init` verdict, every dependent check "not run" |
//! | `libnccl-net-zoo-traffic-class.so` | (v12) init refuses a config with a defined `trafficClass` | the suite fails `conn.traffic_class` and nothing else |
//!
//! The crate has no Rust code.
