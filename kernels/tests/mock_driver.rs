//! The host side of the CUDA backend against a **mock CUDA driver**
//! (`tests/mock/libcuda_mock.c`, built here by the C compiler and loaded in
//! place of `libcuda.so`), for what needs no GPU to check: the order of driver
//! calls.
//!
//! [`DeviceBuffer::write`] must leave the bytes in device memory when it
//! returns. `cuMemcpyHtoD` from pageable memory does not promise that (the
//! DMA may still be in flight on the legacy default stream, which the
//! kernels' non-blocking stream does not wait for): on an H200 in-place
//! reductions of a buffer uploaded just before returned wrong results at 1
//! and 2 MiB (issue 28). The mock lands a staged copy only when the legacy
//! stream or the context is synchronized, as the documented worst case; the
//! test reads the "device" memory directly, as a kernel launched next would.
//!
//! Without a C compiler (`$CC`, `cc`, `gcc`, `clang`) the test prints why and
//! passes. This test binary never loads the real driver.

#![cfg(feature = "cuda")]

mod common;

use std::path::PathBuf;
use std::process::Command;

use ferroccl_kernels::cuda::DeviceBuffer;

/// Builds the mock driver and loads it (kept loaded for the process), so that
/// cudarc's `dlopen("libcuda.so")` finds it by its soname. Returns its
/// staged-copy probe.
fn mock_driver() -> Result<unsafe extern "C" fn() -> u32, String> {
    let cc =
        common::find_compiler("CC", &["cc", "gcc", "clang"]).map_err(|e| format!("{e} to build the mock driver"))?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("mock-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let so = dir.join("libcuda.so");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mock/libcuda_mock.c");
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-Wl,-soname,libcuda.so"])
        .arg(&src)
        .arg("-o")
        .arg(&so)
        .output()
        .map_err(|e| format!("{cc}: {e}"))?;
    // A compiler that runs but rejects the mock is a failure, not a skip.
    assert!(
        out.status.success(),
        "{cc} rejected the mock driver:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: our own library; its initialisers do nothing.
    let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| e.to_string())?;
    // SAFETY: `fccl_mock_staged` has this signature (libcuda_mock.c).
    let probe = *unsafe { lib.get::<unsafe extern "C" fn() -> u32>(b"fccl_mock_staged") }.map_err(|e| e.to_string())?;
    // Kept loaded: cudarc resolves driver symbols from it for the process.
    std::mem::forget(lib);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(probe)
}

#[test]
fn a_device_buffer_write_has_landed_when_it_returns() {
    let staged = match mock_driver() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED a_device_buffer_write_has_landed_when_it_returns: {why}");
            return;
        }
    };
    let n = (1usize << 20) + 5;
    let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
    let mut buf = DeviceBuffer::alloc(0, n + 64).expect("mock cuMemAlloc");
    buf.write(3, &data).expect("write");
    // SAFETY: no driver call: whether the copy is still staged in the mock.
    let left = unsafe { staged() };
    // SAFETY: the mock's device memory is host memory of n + 64 bytes; read
    // as a kernel launched now on another stream would.
    let now = unsafe { std::slice::from_raw_parts(buf.as_ptr().add(3), n) };
    assert!(
        left == 0 && now == &data[..],
        "DeviceBuffer::write returned with {left} host-to-device copy(ies) still in flight: \
         a kernel launched now reads stale device memory"
    );
    // Reading back through the driver always waits (and agrees).
    let mut back = vec![0u8; n];
    buf.read(3, &mut back).expect("read");
    assert_eq!(back, data);
}
