//! GPU benchmark (needs a GPU): reduction kernel bandwidth against a
//! device-to-device `cuMemcpyDtoDAsync` of the same output bytes, per datatype.
//!
//! `cargo run --release -p ferroccl-kernels --example cuda_reduce_bw [bytes] [iters]`
//! (defaults: 64 MiB, 50). NVRTC as in the tests: `FERROCCL_NVRTC_LIB` or
//! `libnvrtc.so.12` on the loader path.
//!
//! Prints, per type, `dst = a + b` and in-place `acc += b`: time per call (µs,
//! CUDA events around `iters` back-to-back launches on one stream), GB/s of
//! output bytes, and GB/s of memory traffic (a reduce reads two buffers and
//! writes one: 3 × bytes; the copy moves 2 × bytes). "ratio" is the reduce's
//! traffic GB/s over the copy's: the fraction of the bandwidth a copy reaches
//! (issue 16 asks ≥ 0.90 for float and bfloat16 sums at 64 MiB). Without a GPU
//! it prints why and exits 0.

#[cfg(feature = "cuda")]
fn main() {
    use cudarc::driver::sys;
    use ferroccl_kernels::cuda::plan;
    use ferroccl_kernels::cuda::{CudaBackend, DeviceBuffer};
    use ferroccl_kernels::{DataType, DevRedOp, Pre, RedOp};

    let mut args = std::env::args().skip(1);
    let bytes: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64 << 20);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(50);
    let gpu = match CudaBackend::for_device(0) {
        Ok(g) => g,
        Err(e) => {
            println!("# no GPU benchmark: {e}");
            return;
        }
    };
    let ctx = gpu.context();
    println!(
        "# GPU 0: {} (compute_{}), {:?}; {} bytes, {} iterations",
        ctx.name().unwrap_or_default(),
        gpu.arch(),
        gpu.shape(),
        bytes,
        iters
    );
    let a = DeviceBuffer::alloc(0, bytes).expect("alloc a");
    let b = DeviceBuffer::alloc(0, bytes).expect("alloc b");
    let d = DeviceBuffer::alloc(0, bytes).expect("alloc dst");
    let stream = gpu.stream();
    let timed = |f: &dyn Fn()| -> f64 {
        f(); // warm-up (and first-use compile)
        gpu.synchronize().expect("sync");
        let t = sys::CUevent_flags::CU_EVENT_DEFAULT;
        let start = stream.record_event(Some(t)).expect("event");
        for _ in 0..iters {
            f();
        }
        let end = stream.record_event(Some(t)).expect("event");
        f64::from(start.elapsed_ms(&end).expect("elapsed")) * 1e3 / iters as f64
    };
    let copy_us = timed(&|| {
        // SAFETY: two live device buffers of `bytes` bytes; the backend's stream.
        unsafe { sys::cuMemcpyDtoDAsync_v2(d.as_ptr() as u64, a.as_ptr() as u64, bytes, stream.cu_stream()) }
            .result()
            .expect("cuMemcpyDtoDAsync");
    });
    let gbs = |us: f64| bytes as f64 / us / 1e3;
    let copy_traffic = 2.0 * gbs(copy_us);
    println!(
        "# {:>9} {:>8} {:>9} {:>9} {:>12} {:>6}",
        "type", "op", "us", "out GB/s", "traffic GB/s", "ratio"
    );
    println!(
        "  {:>9} {:>8} {:>9.1} {:>9.1} {:>12.1} {:>6.2}",
        "-",
        "memcpy",
        copy_us,
        gbs(copy_us),
        copy_traffic,
        1.0
    );
    for t in [
        DataType::Float32,
        DataType::Bfloat16,
        DataType::Float16,
        DataType::Float64,
        DataType::Int32,
        DataType::Int8,
    ] {
        let op = DevRedOp::new(t, RedOp::Sum, 2).expect("op");
        let n = bytes / t.size() * t.size();
        for (name, dst) in [("a+b", d.as_ptr()), ("acc+=b", a.as_ptr())] {
            let l = plan::reduce(
                &gpu.shape(),
                dst as u64,
                a.as_ptr() as u64,
                b.as_ptr() as u64,
                n,
                &op,
                Pre::None,
            )
            .expect("plan")
            .expect("launch");
            // SAFETY: live device buffers of `bytes` bytes.
            let us = timed(&|| unsafe { gpu.enqueue(&l) }.expect("launch"));
            let traffic = 3.0 * gbs(us);
            println!(
                "  {:>9} {:>8} {:>9.1} {:>9.1} {:>12.1} {:>6.2}",
                t.name(),
                name,
                us,
                gbs(us),
                traffic,
                traffic / copy_traffic
            );
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("# built without the `cuda` feature: nothing to measure");
}
