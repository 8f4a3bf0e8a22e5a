//! The benchmark's send and receive buffers (`--mem`): pageable host memory, or
//! CUDA device memory the way nccl-tests allocates it (`cuMemAlloc` on device
//! `local rank mod device count`), filled and checked through copies so the
//! timed loop only ever hands the collective the buffer's address.

use ferroccl_kernels::KernelError;
use ferroccl_kernels::cuda::{DeviceBuffer, device_count};

use super::MemKind;

/// One benchmark buffer.
#[derive(Debug)]
pub enum PerfBuf {
    /// Pageable host memory.
    Host(Vec<u8>),
    /// Device memory (never dereferenced by the host).
    Device(DeviceBuffer),
}

impl PerfBuf {
    /// `bytes` of `kind` memory, zeroed, for the rank with local index `local`.
    /// Errors name the buffer (`what`) and the cause: an allocation the host
    /// cannot make, no CUDA driver or device (`--mem device`), a failed
    /// `cuMemAlloc` (out of device memory).
    pub fn alloc(kind: MemKind, bytes: usize, what: &str, local: usize) -> Result<PerfBuf, String> {
        match kind {
            MemKind::Host => {
                let mut v: Vec<u8> = Vec::new();
                v.try_reserve_exact(bytes)
                    .map_err(|e| format!("cannot allocate the {what} buffer of {bytes} bytes: {e}"))?;
                v.resize(bytes, 0);
                Ok(PerfBuf::Host(v))
            }
            MemKind::Device => {
                let n = device_count().map_err(|e| format!("--mem device: {e}"))?;
                let ordinal = local % n;
                let mut b = DeviceBuffer::alloc(ordinal, bytes).map_err(|e| {
                    format!("--mem device: cannot allocate the {what} buffer of {bytes} bytes on device {ordinal}: {e}")
                })?;
                b.write(0, &vec![0u8; bytes])
                    .map_err(|e| format!("--mem device: cannot clear the {what} buffer: {e}"))?;
                Ok(PerfBuf::Device(b))
            }
        }
    }

    /// The buffer's address (a device address for device memory).
    pub fn as_ptr(&self) -> *const u8 {
        match self {
            PerfBuf::Host(v) => v.as_ptr(),
            PerfBuf::Device(b) => b.as_ptr(),
        }
    }

    /// The buffer's address, for writing.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            PerfBuf::Host(v) => v.as_mut_ptr(),
            PerfBuf::Device(b) => b.as_ptr(),
        }
    }

    /// The CUDA device of device memory (`None`: host memory): the device the
    /// rank's communicator binds (`CommConfig::cuda_dev`).
    pub fn cuda_dev(&self) -> Option<usize> {
        match self {
            PerfBuf::Host(_) => None,
            PerfBuf::Device(b) => Some(b.ordinal()),
        }
    }

    /// Where the rank's buffers are, for its `#  Rank` line.
    pub fn describe(&self) -> String {
        match self {
            PerfBuf::Host(_) => "host memory".into(),
            PerfBuf::Device(b) => format!("device memory (CUDA device {})", b.ordinal()),
        }
    }

    /// Copies `src` to byte `offset` (in bounds: the caller sizes every range
    /// from the buffers' sizes). Errors: a failed device copy.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), KernelError> {
        match self {
            PerfBuf::Host(v) => {
                v[offset..offset + src.len()].copy_from_slice(src);
                Ok(())
            }
            PerfBuf::Device(b) => b.write(offset, src),
        }
    }

    /// Sets `len` bytes from `offset` to `byte`.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) -> Result<(), KernelError> {
        match self {
            PerfBuf::Host(v) => {
                v[offset..offset + len].fill(byte);
                Ok(())
            }
            PerfBuf::Device(_) => self.write(offset, &vec![byte; len]),
        }
    }

    /// `len` bytes from `offset`, copied to the host.
    pub fn read(&self, offset: usize, len: usize) -> Result<Vec<u8>, KernelError> {
        match self {
            PerfBuf::Host(v) => Ok(v[offset..offset + len].to_vec()),
            PerfBuf::Device(b) => {
                let mut out = vec![0u8; len];
                b.read(offset, &mut out)?;
                Ok(out)
            }
        }
    }
}
