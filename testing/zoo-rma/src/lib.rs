//! Broken RMA plugins for `ferroccl-conformance --rma`, written in C.
//!
//! `build.rs` compiles `csrc/rma_zoo.c` once per fault into the cargo profile
//! directory. Each library exports `ncclRmaPlugin_v14` (the NCCL 2.30.7
//! `rma_v14.h` layout): a copy of the socket plugin's table
//! (`libnccl_net_socket.so` beside it, or `FERROCCL_ZOO_RMA_INNER`) with one or two
//! slots replaced. Like the socket plugin, they offer devices only with
//! `NCCL_SOCKET_RMA_ENABLE=1`.
//!
//! | file | fault | caught by |
//! | --- | --- | --- |
//! | `libnccl-rma-zoo-good.so` | none (the socket table as is) | nothing |
//! | `libnccl-rma-zoo-nodev.so` | `devices` reports 0 | every check after `rma.load` skips |
//! | `libnccl-rma-zoo-signal-early.so` | `iputSignal` applies the signal, then puts the data 2 ms later | `rma.signal.order` |
//! | `libnccl-rma-zoo-odd-get.so` | `iget` from an odd remote offset drops the last byte | `rma.get.sizes` |
//! | `libnccl-rma-zoo-stuck-test.so` | an `iput` posted while 32 or more are pending never tests done | `rma.in_flight` |
//!
//! The crate has no Rust code.
