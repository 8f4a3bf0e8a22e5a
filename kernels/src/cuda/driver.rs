//! The CUDA driver: presence, `cuInit`, device contexts, pointer attributes.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{self, CUmemorytype, CUpointer_attribute, CUresult};
use cudarc::driver::{CudaContext, result};

use super::{CudaBackend, DriverInfo, guard};
use crate::{KernelError, MemorySpace};

/// The driver's state for the process, decided once: CUDA works or it does not.
static DRIVER: OnceLock<Result<DriverInfo, KernelError>> = OnceLock::new();

fn probe() -> Result<DriverInfo, KernelError> {
    // SAFETY: `is_culib_present` only tries to dlopen the candidate names.
    let present =
        guard::quiet("cuda is_culib_present", || unsafe { sys::is_culib_present() }).map_err(KernelError::NoCuda)?;
    if !present {
        return Err(KernelError::NoCuda(
            "the CUDA driver library (libcuda.so.1) is not on the loader path (is an NVIDIA driver installed?)".into(),
        ));
    }
    if let Err(e) = guard::call("cuInit", result::init) {
        let detail = match e {
            KernelError::Cuda { message, .. } => message,
            other => other.to_string(),
        };
        return Err(KernelError::NoCuda(format!(
            "cuInit failed: {detail} (no usable GPU, or CUDA_VISIBLE_DEVICES hides them all)"
        )));
    }
    let mut version = 0;
    guard::call("cuDriverGetVersion", || {
        // SAFETY: the driver is initialised; one valid out-pointer.
        unsafe { sys::cuDriverGetVersion(&mut version) }.result()
    })?;
    let devices = guard::call("cuDeviceGetCount", result::device::get_count)?;
    if devices <= 0 {
        return Err(KernelError::NoCuda("cuDeviceGetCount found no CUDA device".into()));
    }
    Ok(DriverInfo {
        version,
        devices: devices as usize,
    })
}

/// The CUDA driver: its version and device count. Checked once per process
/// (library present, `cuInit(0)` succeeds, at least one device); every CUDA
/// entry point calls this first.
///
/// Errors: [`KernelError::NoCuda`] with the reason (no `libcuda.so.1`, `cuInit`'s
/// error such as `CUDA_ERROR_NO_DEVICE`, no device).
pub fn driver_info() -> Result<DriverInfo, KernelError> {
    DRIVER.get_or_init(probe).clone()
}

/// Number of CUDA devices. Errors: [`KernelError::NoCuda`].
pub fn device_count() -> Result<usize, KernelError> {
    driver_info().map(|d| d.devices)
}

/// Checks `ordinal` against the device count.
pub(crate) fn check_ordinal(ordinal: usize) -> Result<DriverInfo, KernelError> {
    let d = driver_info()?;
    if ordinal >= d.devices {
        return Err(KernelError::Cuda {
            call: "cuDeviceGet",
            message: format!(
                "device {ordinal} does not exist: this process sees {} CUDA device(s)",
                d.devices
            ),
        });
    }
    Ok(d)
}

/// The primary context of each device (retained once, kept for the process).
static CONTEXTS: Mutex<Vec<Option<Arc<CudaContext>>>> = Mutex::new(Vec::new());

/// The primary context of device `ordinal`, bound to the calling thread.
pub(crate) fn context(ordinal: usize) -> Result<Arc<CudaContext>, KernelError> {
    check_ordinal(ordinal)?;
    let mut g = CONTEXTS.lock().unwrap_or_else(|e| e.into_inner());
    if g.len() <= ordinal {
        g.resize(ordinal + 1, None);
    }
    let ctx = match &g[ordinal] {
        Some(c) => c.clone(),
        None => {
            let c = guard::call("cuDevicePrimaryCtxRetain", || CudaContext::new(ordinal))?;
            g[ordinal] = Some(c.clone());
            c
        }
    };
    guard::call("cuCtxSetCurrent", || ctx.bind_to_thread())?;
    Ok(ctx)
}

/// The memory space of `ptr` (`cuPointerGetAttributes`: memory type, device
/// ordinal, managed). Host when CUDA is absent or the address is unknown to the
/// driver (plain `malloc`ed or stack memory).
pub(crate) fn classify(ptr: *const u8) -> Result<MemorySpace, KernelError> {
    if driver_info().is_err() {
        return Ok(MemorySpace::Host { pinned: false });
    }
    let mut memtype: u32 = 0;
    let mut ordinal: i32 = -1;
    let mut managed: i32 = 0;
    let mut attrs = [
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
    ];
    let mut data: [*mut c_void; 3] = [
        (&mut memtype as *mut u32).cast(),
        (&mut ordinal as *mut i32).cast(),
        (&mut managed as *mut i32).cast(),
    ];
    // SAFETY: three attributes with three out-pointers of the sizes the driver
    // writes (CUmemorytype: 32-bit enum, ordinal: int, is-managed: bool as int,
    // zero-initialised so a one-byte write reads correctly). Unlike
    // cuPointerGetAttribute this returns CUDA_SUCCESS with memory type 0 for an
    // address the driver does not know.
    let r = guard::quiet("cuPointerGetAttributes", || unsafe {
        sys::cuPointerGetAttributes(3, attrs.as_mut_ptr(), data.as_mut_ptr(), ptr as sys::CUdeviceptr)
    })
    .map_err(|m| KernelError::Cuda {
        call: "cuPointerGetAttributes",
        message: m,
    })?;
    match r {
        CUresult::CUDA_SUCCESS => {}
        // Older drivers answer INVALID_VALUE for addresses they do not know.
        CUresult::CUDA_ERROR_INVALID_VALUE => return Ok(MemorySpace::Host { pinned: false }),
        e => {
            return Err(KernelError::Cuda {
                call: "cuPointerGetAttributes",
                message: format!("{:?}", result::DriverError(e)),
            });
        }
    }
    let ordinal = usize::try_from(ordinal).unwrap_or(0);
    Ok(if managed != 0 {
        MemorySpace::Device { ordinal, managed: true }
    } else if memtype == CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
        MemorySpace::Device {
            ordinal,
            managed: false,
        }
    } else if memtype == CUmemorytype::CU_MEMORYTYPE_HOST as u32 {
        MemorySpace::Host { pinned: true }
    } else {
        MemorySpace::Host { pinned: false }
    })
}

/// The CUDA backend of device `ordinal` (one per device for the process).
pub(crate) fn device_backend(ordinal: usize) -> Result<&'static CudaBackend, KernelError> {
    CudaBackend::for_device(ordinal)
}
