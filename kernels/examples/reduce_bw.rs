//! Micro benchmark: GB/s of `dst = a ⊕ b` on the CPU backend.
//!
//! `cargo run --release -p ferroccl-kernels --example reduce_bw [bytes] [dtype] [op]`
//! (defaults: 8 MiB, float, sum). Bandwidth counts the 3 buffers touched (2 reads,
//! 1 write). Runs aligned and with every operand offset by 1 byte.

use std::time::Instant;

use ferroccl_kernels::{Backend, CpuBackend, DataType, DevRedOp, Pre, RedOp};

#[derive(Debug, clap::Parser)]
#[command(name = "reduce_bw", about = "GB/s of dst = a op b on the CPU backend")]
struct Cli {
    /// Bytes per operand (rounded down to whole elements).
    #[arg(default_value_t = 8 << 20)]
    bytes: usize,
    /// Datatype, NCCL's names (e.g. float, half, int32).
    #[arg(default_value = "float")]
    dtype: DataType,
    /// Reduction (sum, prod, max, min, avg).
    #[arg(default_value = "sum")]
    op: RedOp,
}

fn main() {
    let Cli { bytes, dtype, op } = <Cli as clap::Parser>::parse();
    let bytes = bytes / dtype.size() * dtype.size();
    let dev = DevRedOp::new(dtype, op, 2).expect("op");
    let a = vec![0x3fu8; bytes + 1];
    let b = vec![0x3eu8; bytes + 1];
    let mut d = vec![0u8; bytes + 1];
    for (label, off) in [("aligned", 0usize), ("unaligned+1", 1)] {
        let iters = (1usize << 31) / bytes.max(1) + 3;
        let run = |d: &mut [u8]| {
            CpuBackend
                .reduce(
                    &mut d[off..off + bytes],
                    &a[off..off + bytes],
                    &b[off..off + bytes],
                    &dev,
                    Pre::None,
                )
                .unwrap()
        };
        run(&mut d);
        let t = Instant::now();
        for _ in 0..iters {
            run(&mut d);
        }
        let s = t.elapsed().as_secs_f64() / iters as f64;
        println!(
            "{dtype} {op} {label:>12} {bytes:>10} B  {:8.2} us  {:6.2} GB/s (3 streams)",
            s * 1e6,
            3.0 * bytes as f64 / s / 1e9
        );
    }
}
