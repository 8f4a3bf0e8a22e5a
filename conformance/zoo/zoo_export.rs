// Shared `lib.rs` body of the testing/zoo-* crates (included with `include!`).
//
// rustc's version script for a cdylib exports only Rust-defined symbols, so the
// `ncclNetPlugin_v8` data symbol is defined here (152 zeroed bytes, 8-aligned, the
// size of `ncclNet_v8_t`) and filled by a constructor in zoo_net.c at load time.

unsafe extern "C" {
    fn zoo_net_anchor();
}

/// The `ncclNet_v8_t` vtable NCCL looks up with `dlsym` (filled in by zoo_net.c).
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static mut ncclNetPlugin_v8: [u64; 19] = [0; 19];

/// Keeps zoo_net.c's object (and its constructor) in the link.
#[used]
static ZOO_ANCHOR: unsafe extern "C" fn() = zoo_net_anchor;
