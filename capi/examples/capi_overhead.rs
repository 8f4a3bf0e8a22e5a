//! What the C API adds to a small collective: 8-byte AllReduces (2 × float32)
//! through `ncclAllReduce` (the exported C function: handle lookup, argument
//! checks, the panic guard, the NULL stream's wait) and through the Rust API
//! (`Comm::all_reduce` + `Stream::synchronize`) on the same communicator, in
//! interleaved rounds (the order alternates per round); medians over rounds.
//!
//! ```text
//! cargo run --release -p ferroccl-capi --example capi_overhead -- [RANKS] [ITERS] [ROUNDS] [PAIR]
//! ```
//! PAIR `cr` (default) times the C API against the Rust API; `cc` and `rr`
//! time one API against itself (the noise floor of the method).
//! Ranks are processes on this host (rank 0 starts the others; shared memory
//! between them unless NCCL_SHM_DISABLE=1). Defaults: 2 ranks, 2000
//! AllReduces per round and API, 20 rounds (an even number: each API
//! leads in half of them). Rank 0 prints one line per round
//! and the medians.

use std::ffi::c_void;
use std::process::Command;
use std::time::Instant;

use ferroccl::{DataType, RedOp, Stream};
use nccl::abi::{ncclComm_t, ncclUniqueId};
use nccl::exports::{ncclAllReduce, ncclCommDestroy, ncclCommInitRank, ncclGetUniqueId};

const ENV_RANK: &str = "CAPI_OVERHEAD_RANK";
const ENV_ID: &str = "CAPI_OVERHEAD_ID";

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .map_or(default, |a| a.parse().expect("a number"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (nranks, iters, rounds) = (arg(1, 2), arg(2, 2000), arg(3, 20));
    let pair = std::env::args().nth(4).unwrap_or_else(|| "cr".into());
    assert!(["cr", "cc", "rr"].contains(&pair.as_str()), "PAIR is cr, cc or rr");
    let mut id = ncclUniqueId { internal: [0; 128] };
    let mut children = Vec::new();
    let rank = match std::env::var(ENV_RANK) {
        Ok(r) => {
            let hex = std::env::var(ENV_ID).expect("id");
            for (i, b) in id.internal.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex") as _;
            }
            r.parse().expect("rank")
        }
        Err(_) => {
            // SAFETY: a valid out-pointer.
            assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, 0, "ncclGetUniqueId");
            let hex: String = id.internal.iter().map(|b| format!("{:02x}", *b as u8)).collect();
            let exe = std::env::current_exe().expect("exe");
            for r in 1..nranks {
                children.push(
                    Command::new(&exe)
                        .args(std::env::args().skip(1))
                        .env(ENV_RANK, r.to_string())
                        .env(ENV_ID, &hex)
                        .spawn()
                        .expect("spawn rank"),
                );
            }
            0usize
        }
    };
    let mut comm: ncclComm_t = std::ptr::null_mut();
    // SAFETY: valid out-pointer; the id is every rank's.
    let r = unsafe { ncclCommInitRank(&mut comm, nranks as i32, id, rank as i32) };
    assert_eq!(r, 0, "ncclCommInitRank (is the socket plugin on FERROCCL_PLUGIN_PATH?)");
    let rust = nccl::comm_of(comm).expect("the runtime communicator behind the handle");
    let stream = Stream::new();
    let send = [rank as f32, 1.0f32];
    let mut recv = [0f32; 2];
    let (s, d) = (send.as_ptr() as *const c_void, recv.as_mut_ptr() as *mut c_void);
    let c_api = |n: usize| {
        for _ in 0..n {
            // SAFETY: 2 floats each, alive across the call (blocking: complete on return).
            let r = unsafe { ncclAllReduce(s, d, 2, 7, 0, comm, std::ptr::null_mut()) };
            assert_eq!(r, 0, "ncclAllReduce");
        }
    };
    let rust_api = |n: usize| {
        for _ in 0..n {
            // SAFETY: as above; synchronized before the next call.
            unsafe { rust.all_reduce(s.cast(), d.cast(), 2, DataType::Float32, RedOp::Sum, &stream) }
                .expect("all_reduce");
            stream.synchronize().expect("synchronize");
        }
    };
    // Warm-up of both paths.
    c_api(iters / 4);
    rust_api(iters / 4);
    let first: &dyn Fn(usize) = if pair == "rr" { &rust_api } else { &c_api };
    let second: &dyn Fn(usize) = if pair == "cc" { &c_api } else { &rust_api };
    let (mut tc, mut tr) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Every segment starts together on every rank (a bootstrap barrier),
        // and nothing else (printing) happens between segments.
        let time = |f: &dyn Fn(usize)| {
            rust.barrier().expect("barrier");
            let t0 = Instant::now();
            f(iters);
            t0.elapsed().as_secs_f64() * 1e6 / iters as f64
        };
        let (c, r) = if round % 2 == 0 {
            let c = time(first);
            (c, time(second))
        } else {
            let r = time(second);
            (time(first), r)
        };
        tc.push(c);
        tr.push(r);
    }
    if rank == 0 {
        for (round, (c, r)) in tc.iter().zip(&tr).enumerate() {
            println!(
                "round {round:2}: {pair}: first {c:8.3} us   second {r:8.3} us   ratio {:.4}",
                c / r
            );
        }
    }
    assert_eq!(recv[1], nranks as f32, "results");
    if rank == 0 {
        let (mc, mr) = (median(&mut tc), median(&mut tr));
        println!(
            "{pair}: median over {rounds} rounds of {iters} x 8-byte AllReduce on {nranks} ranks: first ({}) {mc:.3} \
             us, second ({}) {mr:.3} us, first/second {:.4} ({:+.2}%)",
            if pair == "rr" { "Rust API" } else { "ncclAllReduce" },
            if pair == "cc" { "ncclAllReduce" } else { "Rust API" },
            mc / mr,
            (mc / mr - 1.0) * 100.0
        );
    }
    drop(rust);
    // SAFETY: the handle made above, destroyed once.
    assert_eq!(unsafe { ncclCommDestroy(comm) }, 0, "destroy");
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a rank failed");
    }
}
