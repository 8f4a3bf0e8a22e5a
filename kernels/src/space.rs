//! Memory spaces and the choice of backend by memory space: the seam the
//! executor uses to run the same step on host or device memory.
//!
//! NCCL decides per buffer with `cudaPointerGetAttributes` (e.g.
//! `ncclCommRegister`, `src/register/register.cc`); here
//! [`memory_space`] asks the driver (`cuPointerGetAttributes`) when CUDA is
//! present and answers "host" otherwise, so a process without CUDA never loads
//! anything and classifies every pointer as host memory.

use std::fmt;

use crate::{Backend, CpuBackend, KernelError};

/// Where an address lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemorySpace {
    /// Host memory. `pinned`: page-locked and registered with CUDA
    /// (`cuMemAllocHost`, `cuMemHostRegister`), so devices reach it too.
    Host {
        /// Registered with CUDA.
        pinned: bool,
    },
    /// Device memory of GPU `ordinal`; `managed`: CUDA managed (unified)
    /// memory, reachable from the host and every device.
    Device {
        /// The device.
        ordinal: usize,
        /// `cuMemAllocManaged` memory.
        managed: bool,
    },
}

impl MemorySpace {
    /// Whether the host may read and write it.
    pub fn host_accessible(&self) -> bool {
        matches!(
            self,
            MemorySpace::Host { .. } | MemorySpace::Device { managed: true, .. }
        )
    }

    /// Whether device `ordinal` may read and write it.
    pub fn device_accessible(&self, ordinal: usize) -> bool {
        match *self {
            MemorySpace::Host { pinned } => pinned,
            MemorySpace::Device { ordinal: o, managed } => managed || o == ordinal,
        }
    }
}

impl fmt::Display for MemorySpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemorySpace::Host { pinned: false } => f.write_str("pageable host memory"),
            MemorySpace::Host { pinned: true } => f.write_str("pinned host memory"),
            MemorySpace::Device {
                ordinal,
                managed: false,
            } => write!(f, "device memory of GPU {ordinal}"),
            MemorySpace::Device { ordinal, managed: true } => write!(f, "managed memory (GPU {ordinal})"),
        }
    }
}

/// The memory space of `ptr`.
///
/// Without CUDA (no driver, `cuInit` fails, or a build without the `cuda`
/// feature) every address is `Host { pinned: false }` and nothing is loaded
/// beyond the first presence check. With CUDA, `cuPointerGetAttributes`
/// decides; an address the driver does not know is pageable host memory.
/// Errors: [`KernelError::Cuda`] when the driver query itself fails.
pub fn memory_space(ptr: *const u8) -> Result<MemorySpace, KernelError> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::classify(ptr)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ptr;
        Ok(MemorySpace::Host { pinned: false })
    }
}

/// The CPU backend (host memory).
pub static CPU: CpuBackend = CpuBackend;

/// The backend for memory in `space`: the CPU backend for host memory, the
/// CUDA backend of the device for device memory (created on first use).
/// Errors: for device memory, whatever the CUDA backend's creation reports
/// ([`KernelError::NoNvrtc`] when the kernels cannot be compiled, ...).
pub fn backend_for_space(space: MemorySpace) -> Result<&'static dyn Backend, KernelError> {
    match space {
        MemorySpace::Host { .. } => Ok(&CPU),
        MemorySpace::Device { ordinal, .. } => device_backend(ordinal),
    }
}

#[cfg(feature = "cuda")]
fn device_backend(ordinal: usize) -> Result<&'static dyn Backend, KernelError> {
    Ok(crate::cuda::device_backend(ordinal)?)
}

#[cfg(not(feature = "cuda"))]
fn device_backend(ordinal: usize) -> Result<&'static dyn Backend, KernelError> {
    Err(KernelError::NoCuda(format!(
        "device memory of GPU {ordinal} needs the `cuda` feature of ferroccl-kernels"
    )))
}

/// The backend for the memory at `ptr` ([`memory_space`], then
/// [`backend_for_space`]).
pub fn backend_for(ptr: *const u8) -> Result<&'static dyn Backend, KernelError> {
    backend_for_space(memory_space(ptr)?)
}

/// The one backend that can run a primitive over all of `operands` (name,
/// address), and the space that chose it:
/// * all host memory (pinned or not) → the CPU backend;
/// * any device memory → the CUDA backend of the first device operand, if every
///   other operand is reachable from that device (its own memory, managed
///   memory, pinned host memory); otherwise [`KernelError::MemorySpaceMismatch`]
///   naming both operands: the executor must stage the data (NCCL copies
///   through its FIFOs in that case).
pub fn backend_for_operands(
    operands: &[(&'static str, *const u8)],
) -> Result<(&'static dyn Backend, MemorySpace), KernelError> {
    let spaces: Vec<MemorySpace> = operands
        .iter()
        .map(|&(_, p)| memory_space(p))
        .collect::<Result<_, _>>()?;
    let Some(first) = spaces.iter().position(|s| matches!(s, MemorySpace::Device { .. })) else {
        return Ok((&CPU, MemorySpace::Host { pinned: false }));
    };
    let chosen = spaces[first];
    let MemorySpace::Device { ordinal, .. } = chosen else {
        unreachable!("position() found a device space")
    };
    for (i, s) in spaces.iter().enumerate() {
        if !s.device_accessible(ordinal) {
            return Err(KernelError::MemorySpaceMismatch {
                what: operands[i].0,
                found: s.to_string(),
                first: operands[first].0,
                expected: chosen.to_string(),
            });
        }
    }
    Ok((backend_for_space(chosen)?, chosen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_print_and_reach() {
        let h = MemorySpace::Host { pinned: false };
        let p = MemorySpace::Host { pinned: true };
        let d0 = MemorySpace::Device {
            ordinal: 0,
            managed: false,
        };
        let m1 = MemorySpace::Device {
            ordinal: 1,
            managed: true,
        };
        assert_eq!(h.to_string(), "pageable host memory");
        assert_eq!(d0.to_string(), "device memory of GPU 0");
        assert!(!h.device_accessible(0) && p.device_accessible(0) && d0.device_accessible(0));
        assert!(!d0.device_accessible(1) && m1.device_accessible(0));
        assert!(h.host_accessible() && p.host_accessible() && !d0.host_accessible() && m1.host_accessible());
    }
}
