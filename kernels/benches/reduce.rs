//! Reduction kernel throughput: `dst = a ⊕ b` (the ring's `recvReduceSend`) and
//! `acc ⊕= b` (`recvReduceCopy`) on host memory, per datatype, at a cache-resident
//! and a memory-resident size. Plain timing loop (no harness); prints GB/s of
//! output written, the median of 7 repetitions.
//!
//! Run: `cargo bench -p ferroccl-kernels --bench reduce`

use std::time::Instant;

use ferroccl_kernels::{Backend, CpuBackend, DataType, DevRedOp, Pre, RedOp};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let types = [
        DataType::Int8,
        DataType::Int32,
        DataType::Int64,
        DataType::Float16,
        DataType::Bfloat16,
        DataType::Float32,
        DataType::Float64,
    ];
    #[cfg(target_arch = "x86_64")]
    println!("# AVX2 detected: {}", std::is_x86_feature_detected!("avx2"));
    println!(
        "# {:>9} {:>10} {:>14} {:>14}",
        "type", "bytes", "reduce GB/s", "in-place GB/s"
    );
    for bytes in [128usize << 10, 16 << 20] {
        let a = vec![1u8; bytes];
        let b = vec![2u8; bytes];
        let mut d = vec![0u8; bytes];
        for dt in types {
            let op = DevRedOp::new(dt, RedOp::Sum, 2).expect("sum exists for every type");
            let iters = ((256usize << 20) / bytes).max(4);
            let mut run = |inplace: bool| {
                let mut reps = Vec::new();
                for _ in 0..7 {
                    let t = Instant::now();
                    for _ in 0..iters {
                        if inplace {
                            CpuBackend.reduce_inplace(&mut d, &b, &op, Pre::B).expect("reduce");
                        } else {
                            CpuBackend.reduce(&mut d, &a, &b, &op, Pre::B).expect("reduce");
                        }
                    }
                    reps.push((bytes * iters) as f64 / t.elapsed().as_secs_f64() / 1e9);
                }
                median(reps)
            };
            let (r, i) = (run(false), run(true));
            println!("  {:>9} {:>10} {:>14.2} {:>14.2}", format!("{dt:?}"), bytes, r, i);
        }
    }
}
