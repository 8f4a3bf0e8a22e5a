//! Mock device memory: pages mapped `PROT_NONE` ([`ProtNone`]), so that any
//! dereference by the executor or a plugin faults, reached only through
//! `/proc/self/mem` ([`ProcMem`], the kernel's forced access, standing in for
//! a GPU's DMA engine), and the copy-only mock device of the staging tests
//! ([`CopyOnly`]). One file for every mock device of the tests: the
//! multi-process ones (`coll_support`, `mock_gpu.rs`) and the crate's unit
//! tests (`core/src/coll/tests.rs` includes it by path), so it uses only std,
//! `libc` and `ferroccl_kernels`.
#![allow(dead_code)]

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

use ferroccl_kernels::{Backend, KernelError};

/// This process's memory through `/proc/self/mem`: any mapping, `PROT_NONE`
/// included (an unmapped address fails with `EIO`).
pub struct ProcMem;

impl ProcMem {
    /// `/proc/self/mem`, opened once.
    pub fn file() -> &'static File {
        static F: OnceLock<File> = OnceLock::new();
        F.get_or_init(|| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/proc/self/mem")
                .expect("open /proc/self/mem")
        })
    }

    /// `n` bytes at `p` (panics when they cannot be read).
    pub fn read(p: *const u8, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        ProcMem::file()
            .read_exact_at(&mut v, p as u64)
            .expect("read through /proc/self/mem");
        v
    }

    /// Writes `data` at `p` (panics when it cannot be written).
    pub fn write(p: *mut u8, data: &[u8]) {
        ProcMem::file()
            .write_all_at(data, p as u64)
            .expect("write through /proc/self/mem");
    }
}

/// At least `len` bytes (whole pages, at least one) of fresh anonymous memory
/// mapped `PROT_NONE`; unmapped on drop.
pub struct ProtNone {
    /// The mapping's first byte.
    pub ptr: *mut u8,
    /// The mapping's length in bytes.
    pub len: usize,
}

impl ProtNone {
    /// Maps the pages (panics when `mmap` fails).
    pub fn new(len: usize) -> ProtNone {
        let len = len.max(1).next_multiple_of(4096);
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of mock device memory");
        ProtNone { ptr: p.cast(), len }
    }
}

impl Drop for ProtNone {
    fn drop(&mut self) {
        // SAFETY: mapped by `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The [`Backend`] slice methods of a mock device, each refusing with `$err`
/// (a `KernelError`): its memory is never a slice the host may hold, so
/// only the `*_raw` methods serve.
macro_rules! refuse_slices {
    ($err:expr) => {
        fn copy(&self, _: &mut [u8], _: &[u8]) -> Result<(), ::ferroccl_kernels::KernelError> {
            Err($err)
        }
        fn reduce(
            &self,
            _: &mut [u8],
            _: &[u8],
            _: &[u8],
            _: &::ferroccl_kernels::DevRedOp,
            _: ::ferroccl_kernels::Pre,
        ) -> Result<(), ::ferroccl_kernels::KernelError> {
            Err($err)
        }
        fn reduce_inplace(
            &self,
            _: &mut [u8],
            _: &[u8],
            _: &::ferroccl_kernels::DevRedOp,
            _: ::ferroccl_kernels::Pre,
        ) -> Result<(), ::ferroccl_kernels::KernelError> {
            Err($err)
        }
        fn pre_op(
            &self,
            _: &mut [u8],
            _: &[u8],
            _: &::ferroccl_kernels::DevRedOp,
        ) -> Result<(), ::ferroccl_kernels::KernelError> {
            Err($err)
        }
        fn pre_op_inplace(
            &self,
            _: &mut [u8],
            _: &::ferroccl_kernels::DevRedOp,
        ) -> Result<(), ::ferroccl_kernels::KernelError> {
            Err($err)
        }
        fn post_op(
            &self,
            _: &mut [u8],
            _: &::ferroccl_kernels::DevRedOp,
        ) -> Result<(), ::ferroccl_kernels::KernelError> {
            Err($err)
        }
    };
}
// Used by `mock_gpu.rs`, not by every crate that includes this file.
#[allow(unused_imports)]
pub(crate) use refuse_slices;

/// A mock device that only copies, through [`ProcMem`]: a staged step
/// computes on host mirrors with the CPU backend, so the device's backend is
/// never asked to reduce (every other operation is refused).
#[derive(Debug)]
pub struct CopyOnly;

/// The one copy-only mock device.
pub static COPY_ONLY: CopyOnly = CopyOnly;

fn only_copies() -> KernelError {
    KernelError::NoCuda("mock device only copies".into())
}

impl Backend for CopyOnly {
    fn name(&self) -> &'static str {
        "mock-device"
    }
    refuse_slices!(only_copies());
    unsafe fn copy_raw(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), KernelError> {
        ProcMem::write(dst, &ProcMem::read(src, bytes));
        Ok(())
    }
}
