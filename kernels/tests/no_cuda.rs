//! Without CUDA: host pointers classify as host memory and pick the CPU
//! backend, and every CUDA entry point returns the "no CUDA" error (never a
//! panic, never a crash).
//!
//! The checks run in a child process with `CUDA_VISIBLE_DEVICES=` (empty), so
//! they hold on a GPU machine too: there the driver is present but `cuInit`
//! finds no device. On a machine without the driver they hold trivially.

use std::process::Command;

use ferroccl_kernels::{
    DataType, DevRedOp, KernelError, MemorySpace, Pre, RedOp, backend_for, backend_for_operands, memory_space,
};

const CHILD: &str = "FERROCCL_NO_CUDA_CHILD";

fn is_no_cuda(e: &KernelError) -> bool {
    matches!(e, KernelError::NoCuda(m) if !m.is_empty())
}

static STATIC_BYTES: [u8; 64] = [7; 64];

#[test]
fn host_pointers_and_cuda_entry_points_without_cuda() {
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([
            "--exact",
            "child_checks",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CUDA_VISIBLE_DEVICES", "")
        .env(CHILD, "1")
        .output()
        .expect("run the child test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child checks failed:\n{text}");
    assert!(
        text.contains("1 passed") && text.contains("no-CUDA reason:"),
        "the child ran its checks:\n{text}"
    );
}

/// The child half of the test above (run by it, with CUDA hidden).
#[test]
#[ignore = "run by host_pointers_and_cuda_entry_points_without_cuda in a child process"]
fn child_checks() {
    assert_eq!(
        std::env::var(CHILD).as_deref(),
        Ok("1"),
        "run through host_pointers_and_cuda_entry_points_without_cuda"
    );
    // Host pointers of every kind are host memory, served by the CPU backend.
    let heap = vec![1u8; 4096];
    let stack = [2u8; 64];
    for (what, p) in [
        ("heap", heap.as_ptr()),
        ("stack", stack.as_ptr()),
        ("static", STATIC_BYTES.as_ptr()),
        ("null", std::ptr::null()),
    ] {
        assert_eq!(memory_space(p).unwrap(), MemorySpace::Host { pinned: false }, "{what}");
        assert_eq!(backend_for(p).unwrap().name(), "cpu", "{what}");
    }
    let (b, space) = backend_for_operands(&[
        ("dst", heap.as_ptr()),
        ("a", stack.as_ptr()),
        ("b", STATIC_BYTES.as_ptr()),
    ])
    .unwrap();
    assert_eq!((b.name(), space), ("cpu", MemorySpace::Host { pinned: false }));

    // The chosen backend works through the raw-address entry points.
    let op = DevRedOp::new(DataType::Int32, RedOp::Sum, 2).unwrap();
    let a: Vec<u8> = [1i32, -2, 3].iter().flat_map(|x| x.to_ne_bytes()).collect();
    let mut d = vec![0u8; 12];
    // SAFETY: three live, disjoint host buffers of 12 bytes.
    unsafe { b.reduce_raw(d.as_mut_ptr(), a.as_ptr(), a.as_ptr(), 12, &op, Pre::None) }.unwrap();
    assert_eq!(
        d,
        [2i32, -4, 6].iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<_>>()
    );

    // Every CUDA entry point: the "no CUDA" error.
    use ferroccl_kernels::cuda;
    let e = cuda::driver_info().unwrap_err();
    assert!(is_no_cuda(&e), "driver_info: {e:?}");
    println!("no-CUDA reason: {e}");
    assert!(e.to_string().starts_with("no CUDA: "), "{e}");
    assert!(is_no_cuda(&cuda::device_count().unwrap_err()));
    #[cfg(feature = "cuda")]
    {
        for ordinal in [0usize, 3] {
            let e = cuda::CudaBackend::new(ordinal).unwrap_err();
            assert!(is_no_cuda(&e), "CudaBackend::new({ordinal}): {e:?}");
            let e = cuda::CudaBackend::for_device(ordinal).unwrap_err();
            assert!(is_no_cuda(&e), "CudaBackend::for_device({ordinal}): {e:?}");
            let e = cuda::DeviceBuffer::alloc(ordinal, 4096).unwrap_err();
            assert!(is_no_cuda(&e), "DeviceBuffer::alloc: {e:?}");
            let e = cuda::PinnedBuffer::alloc(ordinal, 4096).unwrap_err();
            assert!(is_no_cuda(&e), "PinnedBuffer::alloc: {e:?}");
        }
    }
    // Device memory cannot be served without CUDA: a clear error, not a backend.
    let e = ferroccl_kernels::backend_for_space(MemorySpace::Device {
        ordinal: 0,
        managed: false,
    })
    .unwrap_err();
    assert!(is_no_cuda(&e), "backend_for_space(device): {e:?}");
}
