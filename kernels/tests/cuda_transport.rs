//! The driver facts and handles the transports use, on a real GPU: device
//! attributes for the GPUDirect decision (`device_attrs`), DMA-BUF descriptors
//! of a sub-range for `regMrDmaBuf` (`dmabuf_fd_for`), peer access, and CUDA
//! IPC handles opened in another process (the P2P transport's connect
//! information).
//!
//! **Needs a GPU** (the driver only, no NVRTC). Without one each test prints
//! `SKIPPED` and the reason and passes; with `FERROCCL_REQUIRE_GPU=1` it fails
//! instead (the convention of `cuda_device.rs`).

#![cfg(feature = "cuda")]

use std::process::Command;

use ferroccl_kernels::cuda::{self, DeviceBuffer, IpcMapping};

fn gpu(test: &str) -> Option<()> {
    match cuda::driver_info() {
        Ok(d) => {
            eprintln!("{test}: CUDA driver {}, {} device(s)", d.version, d.devices);
            Some(())
        }
        Err(e) => {
            assert!(
                std::env::var("FERROCCL_REQUIRE_GPU").as_deref() != Ok("1"),
                "FERROCCL_REQUIRE_GPU=1 but: {e}"
            );
            eprintln!("SKIPPED {test}: {e}");
            None
        }
    }
}

#[test]
fn device_attributes_of_gpu0() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "cuda_transport::device_attributes_of_gpu0",
        std::time::Duration::from_secs(120),
        String::new,
    );
    let Some(()) = gpu("device_attributes_of_gpu0") else {
        return;
    };
    let a = cuda::device_attrs(0).expect("device_attrs(0)");
    eprintln!("GPU 0: {a:?}");
    assert!(a.cuda_cc >= 35 && a.cuda_cc < 200, "compute capability {}", a.cuda_cc);
    let b = a.bus_id.as_bytes();
    assert!(
        b.len() == 12 && b[4] == b':' && b[7] == b':' && b[10] == b'.',
        "bus id {:?}",
        a.bus_id
    );
    assert!(cuda::can_access_peer(0, 0).expect("same device"));
    let n = cuda::device_count().expect("count");
    assert!(cuda::device_attrs(n).is_err(), "an ordinal past the count is refused");
}

/// A DMA-BUF descriptor for a sub-range names its offset from the allocation;
/// drivers or kernels without DMA-BUF refuse with the driver's error.
#[test]
fn dmabuf_descriptor_of_a_sub_range() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "cuda_transport::dmabuf_descriptor_of_a_sub_range",
        std::time::Duration::from_secs(120),
        String::new,
    );
    let Some(()) = gpu("dmabuf_descriptor_of_a_sub_range") else {
        return;
    };
    let buf = DeviceBuffer::alloc(0, 3 << 20).expect("alloc");
    let attrs = cuda::device_attrs(0).expect("attrs");
    match cuda::dmabuf_fd_for(buf.as_ptr().wrapping_add(8192), 4096) {
        Ok((fd, offset)) => {
            use std::os::fd::AsRawFd;
            assert!(fd.as_raw_fd() >= 0);
            assert_eq!(offset, 8192);
        }
        Err(e) => {
            assert!(!attrs.dmabuf, "the device reports DMA-BUF support but: {e}");
            eprintln!("SKIPPED (no DMA-BUF on this system): {e}");
        }
    }
    let host = [0u8; 64];
    assert!(
        cuda::dmabuf_fd_for(host.as_ptr(), 64).is_err(),
        "host memory has no DMA-BUF"
    );
}

const CHILD_ENV: &str = "FERROCCL_TEST_IPC_HANDLE";

/// Child: opens the handle in the environment, checks the parent's pattern,
/// writes its own.
#[test]
fn ipc_child() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "cuda_transport::ipc_child",
        std::time::Duration::from_secs(120),
        String::new,
    );
    let Ok(hex) = std::env::var(CHILD_ENV) else { return };
    let bytes: Vec<u8> = (0..64)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    let handle: [u8; 64] = bytes.try_into().expect("64 bytes");
    let map = IpcMapping::open(0, &handle).expect("cuIpcOpenMemHandle");
    let dptr = map.as_ptr() as cudarc::driver::sys::CUdeviceptr;
    let mut got = vec![0u8; 4096];
    // SAFETY: the mapping covers the parent's 1 MiB allocation; `open` made the
    // device's context current on this thread.
    unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut got, dptr) }.expect("read through the mapping");
    assert!(
        got.iter().enumerate().all(|(i, &x)| x == (i % 251) as u8),
        "parent's pattern"
    );
    // SAFETY: as above.
    unsafe { cudarc::driver::result::memcpy_htod_sync(dptr, &[0xA5u8; 4096]) }.expect("write through the mapping");
    println!("ipc child ok");
}

/// A CUDA IPC handle made here opens in another process, which reads and
/// writes the same device memory.
#[test]
fn ipc_handle_opens_in_another_process() {
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "cuda_transport::ipc_handle_opens_in_another_process",
        std::time::Duration::from_secs(120),
        String::new,
    );
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let Some(()) = gpu("ipc_handle_opens_in_another_process") else {
        return;
    };
    let mut buf = DeviceBuffer::alloc(0, 1 << 20).expect("alloc");
    let pattern: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    buf.write(0, &pattern).expect("write");
    let h = cuda::ipc_get_mem_handle(buf.as_ptr()).expect("cuIpcGetMemHandle");
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args(["ipc_child", "--exact", "--nocapture"])
        .env(CHILD_ENV, hex)
        .output()
        .expect("spawn child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("ipc child ok"),
        "child failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut got = vec![0u8; 4096];
    buf.read(0, &mut got).expect("read");
    assert!(got.iter().all(|&x| x == 0xA5), "the child's write is visible here");
}
