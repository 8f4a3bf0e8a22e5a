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

/// Whether [`driver_info`] succeeds, without cloning its error (the per-buffer
/// memory classification asks this on every operation).
fn driver_present() -> bool {
    DRIVER.get_or_init(probe).is_ok()
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
    if !driver_present() {
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

/// What NCCL's transports ask the driver about a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttrs {
    /// Compute capability, `major * 10 + minor`.
    pub cuda_cc: i32,
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED`.
    pub gdr: bool,
    /// `CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`.
    pub dmabuf: bool,
    /// `cuDeviceGetPCIBusId`, lower case (`0000:3b:00.0`).
    pub bus_id: String,
}

/// The device of the calling thread's current CUDA context (`cuCtxGetDevice`;
/// what `cudaGetDevice` reports once `cudaSetDevice` ran), `None` when the
/// thread has no current context. NCCL binds a communicator to this device at
/// init (`src/init.cc`, `ncclCommInitRank`: `cudaGetDevice`).
///
/// Errors: [`KernelError::NoCuda`] without a driver; [`KernelError::Cuda`] when
/// the query fails otherwise.
pub fn current_device() -> Result<Option<usize>, KernelError> {
    driver_info()?;
    let mut dev: sys::CUdevice = 0;
    let r = guard::call("cuCtxGetDevice", || {
        // SAFETY: the driver is initialised; one valid out-pointer.
        Ok::<_, ()>(unsafe { sys::cuCtxGetDevice(&mut dev) })
    })?;
    match r {
        CUresult::CUDA_SUCCESS => Ok(Some(dev as usize)),
        CUresult::CUDA_ERROR_INVALID_CONTEXT => Ok(None),
        e => Err(KernelError::Cuda {
            call: "cuCtxGetDevice",
            message: format!("{e:?}"),
        }),
    }
}

fn device_handle(ordinal: usize) -> Result<sys::CUdevice, KernelError> {
    check_ordinal(ordinal)?;
    let mut dev: sys::CUdevice = 0;
    guard::call("cuDeviceGet", || {
        // SAFETY: the driver is initialised and `ordinal` exists; one out-pointer.
        unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) }.result()
    })?;
    Ok(dev)
}

fn attr(dev: sys::CUdevice, a: sys::CUdevice_attribute, call: &'static str) -> Result<i32, KernelError> {
    let mut v = 0;
    guard::call(call, || {
        // SAFETY: a valid device handle and one int out-pointer.
        unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) }.result()
    })?;
    Ok(v)
}

/// Compute capability, GPUDirect RDMA and DMA-BUF support, and PCI bus id of
/// device `ordinal` (the facts NCCL's `ncclTopoCheckGdr` and `ncclTopoNeedFlush`
/// read from the topology, and `src/init.cc` reads for `dmaBufSupport`).
///
/// Errors: [`KernelError::NoCuda`] without a driver; [`KernelError::Cuda`] for
/// an ordinal the process does not see or a failing query.
pub fn device_attrs(ordinal: usize) -> Result<DeviceAttrs, KernelError> {
    use sys::CUdevice_attribute as A;
    let dev = device_handle(ordinal)?;
    let major = attr(
        dev,
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        "cuDeviceGetAttribute",
    )?;
    let minor = attr(
        dev,
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        "cuDeviceGetAttribute",
    )?;
    let gdr = attr(
        dev,
        A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
        "cuDeviceGetAttribute",
    )? != 0;
    // Older drivers do not know the DMA-BUF attribute: no DMA-BUF then.
    let dmabuf = attr(dev, A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, "cuDeviceGetAttribute").unwrap_or(0) != 0;
    let mut buf = [0 as std::ffi::c_char; 32];
    guard::call("cuDeviceGetPCIBusId", || {
        // SAFETY: `buf` holds 32 bytes, the length passed.
        unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, dev) }.result()
    })?;
    // SAFETY: the driver wrote a NUL-terminated string into `buf` (zeroed, so
    // terminated even if it wrote nothing).
    let bus_id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .to_ascii_lowercase();
    Ok(DeviceAttrs {
        cuda_cc: major * 10 + minor,
        gdr,
        dmabuf,
        bus_id,
    })
}

/// `cuDeviceCanAccessPeer(dev, peer)`; true for the same device (NCCL's
/// `p2pCanConnect` treats one device as always reachable).
///
/// Errors: as [`device_attrs`].
pub fn can_access_peer(dev: usize, peer: usize) -> Result<bool, KernelError> {
    if dev == peer {
        check_ordinal(dev)?;
        return Ok(true);
    }
    let (d, p) = (device_handle(dev)?, device_handle(peer)?);
    let mut v = 0;
    guard::call("cuDeviceCanAccessPeer", || {
        // SAFETY: valid device handles and one int out-pointer.
        unsafe { sys::cuDeviceCanAccessPeer(&mut v, d, p) }.result()
    })?;
    Ok(v != 0)
}

/// A DMA-BUF descriptor covering `[ptr, ptr + len)` of device memory and the
/// offset of `ptr` in it, as NCCL's `sendProxyRegBuffer` /
/// `recvProxyRegBuffer` get one for `regMrDmaBuf`: the handle is taken for the
/// allocation's base (`cuMemGetAddressRange`) up to `ptr + len` rounded to the
/// host page size, with `cuMemGetHandleForAddressRange(...,
/// CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)`.
///
/// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] when `ptr` is not
/// device memory or the driver lacks DMA-BUF.
pub fn dmabuf_fd_for(ptr: *const u8, len: usize) -> Result<(std::os::fd::OwnedFd, u64), KernelError> {
    use std::os::fd::FromRawFd;
    driver_info()?;
    let ordinal = match classify(ptr)? {
        MemorySpace::Device { ordinal, .. } => ordinal,
        other => {
            return Err(KernelError::Cuda {
                call: "cuMemGetHandleForAddressRange",
                message: format!("{ptr:?} is {other}, not device memory"),
            });
        }
    };
    context(ordinal)?;
    let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    guard::call("cuMemGetAddressRange", || {
        // SAFETY: two out-pointers; the driver checks the address.
        unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr as sys::CUdeviceptr) }.result()
    })?;
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let offset = ptr as usize - base as usize;
    let span = (offset + len).div_ceil(page) * page;
    let span = span.min(size.div_ceil(page) * page);
    let mut fd: i32 = -1;
    guard::call("cuMemGetHandleForAddressRange", || {
        // SAFETY: `fd` receives an int; the range starts at the allocation's
        // base (page aligned) and is page-sized.
        unsafe {
            sys::cuMemGetHandleForAddressRange(
                (&mut fd as *mut i32).cast::<c_void>(),
                base,
                span,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        }
        .result()
    })?;
    if fd < 0 {
        return Err(KernelError::Cuda {
            call: "cuMemGetHandleForAddressRange",
            message: format!("returned success with fd {fd}"),
        });
    }
    // SAFETY: the driver just created this descriptor for us to own.
    Ok((unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }, offset as u64))
}

/// `cuIpcGetMemHandle` of the device allocation holding `ptr`: the 64 bytes
/// NCCL's P2P transport sends its peer (`src/transport/p2p.cc`, legacy IPC).
///
/// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] when `ptr` is not
/// the start of device memory the driver can export.
pub fn ipc_get_mem_handle(ptr: *const u8) -> Result<[u8; 64], KernelError> {
    driver_info()?;
    if let MemorySpace::Device { ordinal, .. } = classify(ptr)? {
        context(ordinal)?;
    }
    let mut h = sys::CUipcMemHandle_st { reserved: [0; 64] };
    guard::call("cuIpcGetMemHandle", || {
        // SAFETY: one out-struct of 64 bytes; the driver checks the pointer.
        unsafe { sys::cuIpcGetMemHandle(&mut h, ptr as sys::CUdeviceptr) }.result()
    })?;
    Ok(h.reserved.map(|c| c as u8))
}

/// Device memory of another process opened from its IPC handle
/// (`cuIpcOpenMemHandle` with lazy peer access), closed on drop.
#[derive(Debug)]
pub struct IpcMapping {
    ptr: sys::CUdeviceptr,
    ctx: Arc<CudaContext>,
}

// SAFETY: a device address and a context handle; the driver calls that use
// them bind the context first and are thread-safe.
unsafe impl Send for IpcMapping {}
// SAFETY: as above; `&IpcMapping` only reads the address.
unsafe impl Sync for IpcMapping {}

impl IpcMapping {
    /// Opens `handle` (from [`ipc_get_mem_handle`] in another process) in the
    /// context of device `ordinal`.
    ///
    /// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] for a handle the
    /// driver refuses (stale, from this process, another machine).
    pub fn open(ordinal: usize, handle: &[u8; 64]) -> Result<IpcMapping, KernelError> {
        let ctx = context(ordinal)?;
        let h = sys::CUipcMemHandle_st {
            reserved: handle.map(|b| b as std::ffi::c_char),
        };
        let mut ptr: sys::CUdeviceptr = 0;
        guard::call("cuIpcOpenMemHandle", || {
            // SAFETY: one out-pointer; the handle is passed by value.
            unsafe {
                sys::cuIpcOpenMemHandle_v2(
                    &mut ptr,
                    h,
                    sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as std::ffi::c_uint,
                )
            }
            .result()
        })?;
        Ok(IpcMapping { ptr, ctx })
    }

    /// The mapped device address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        let _ = guard::call("cuCtxSetCurrent", || self.ctx.bind_to_thread());
        let _ = guard::call("cuIpcCloseMemHandle", || {
            // SAFETY: opened by `open`, closed once.
            unsafe { sys::cuIpcCloseMemHandle(self.ptr) }.result()
        });
    }
}

/// Why device `ordinal` cannot share memory through cuMem with POSIX file
/// descriptors, if it cannot (NCCL's `ncclIsCuMemSupported`,
/// `src/misc/cudawrap.cc`): a driver older than 12.0,
/// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` or
/// `CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED` zero.
///
/// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] for a failed query.
/// `Ok(Some(reason))`: unsupported; `Ok(None)`: supported.
pub fn cumem_unsupported(ordinal: usize) -> Result<Option<String>, KernelError> {
    let info = driver_info()?;
    if info.version < 12000 {
        return Ok(Some(format!("CUDA driver {} is older than 12.0", info.version)));
    }
    let dev = device_handle(ordinal)?;
    use sys::CUdevice_attribute as A;
    if attr(
        dev,
        A::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
        "cuDeviceGetAttribute",
    )? == 0
    {
        return Ok(Some(format!(
            "GPU {ordinal} does not support virtual memory management"
        )));
    }
    if attr(
        dev,
        A::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
        "cuDeviceGetAttribute",
    )? == 0
    {
        return Ok(Some(format!(
            "GPU {ordinal} does not export POSIX file descriptor handles"
        )));
    }
    Ok(None)
}

/// The properties of a pinned allocation on device `ordinal` exportable as a
/// POSIX file descriptor (NCCL's `ncclCuMemAlloc`, `src/include/alloc.h`).
fn cumem_prop(ordinal: usize) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct of integers and one pointer: all-zero is valid.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal as i32;
    prop
}

/// The recommended granularity of [`cumem_prop`] allocations on `ordinal`.
fn cumem_granularity(prop: &sys::CUmemAllocationProp) -> Result<usize, KernelError> {
    let mut gran = 0usize;
    guard::call("cuMemGetAllocationGranularity", || {
        // SAFETY: one out-pointer and a valid property struct.
        unsafe {
            sys::cuMemGetAllocationGranularity(
                &mut gran,
                prop,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            )
        }
        .result()
    })?;
    Ok(gran.max(1))
}

/// Device memory made with the cuMem API (`cuMemCreate`, or
/// `cuMemImportFromShareableHandle` of another process' export), mapped at a
/// reserved address with read/write access for one device; unmapped, its
/// address freed and its handle released on drop.
#[derive(Debug)]
pub struct CuMemBuffer {
    ptr: sys::CUdeviceptr,
    size: usize,
    handle: sys::CUmemGenericAllocationHandle,
    ctx: Arc<CudaContext>,
}

// SAFETY: a device address, a driver handle and a context; the driver calls
// that use them bind the context first and are thread-safe.
unsafe impl Send for CuMemBuffer {}
// SAFETY: as above; `&CuMemBuffer` only reads the address and size.
unsafe impl Sync for CuMemBuffer {}

impl CuMemBuffer {
    /// At least `len` bytes on device `ordinal` (rounded up to the
    /// allocation granularity) and their export as a POSIX file descriptor
    /// (`cuMemExportToShareableHandle`), which another process imports with
    /// [`CuMemBuffer::import`] (NCCL's `ncclP2pAllocateShareableBuffer`).
    ///
    /// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] naming the cuMem
    /// call that failed (everything made so far is released).
    pub fn alloc_exported(ordinal: usize, len: usize) -> Result<(CuMemBuffer, std::os::fd::OwnedFd), KernelError> {
        let ctx = context(ordinal)?;
        let prop = cumem_prop(ordinal);
        let gran = cumem_granularity(&prop)?;
        let size = len.max(1).div_ceil(gran) * gran;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        guard::call("cuMemCreate", || {
            // SAFETY: one out-handle, a valid property struct, size a multiple of the granularity.
            unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) }.result()
        })?;
        let buf = Self::map(ctx, handle, size, gran, ordinal)?;
        let mut fd: std::ffi::c_int = -1;
        guard::call("cuMemExportToShareableHandle", || {
            // SAFETY: for POSIX descriptors the out-handle is an int.
            unsafe {
                sys::cuMemExportToShareableHandle(
                    (&mut fd as *mut std::ffi::c_int).cast(),
                    buf.handle,
                    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    0,
                )
            }
            .result()
        })?;
        use std::os::fd::FromRawFd;
        // SAFETY: the driver just created this descriptor for us to own.
        Ok((buf, unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    /// Imports the descriptor `fd` that another process exported with
    /// [`CuMemBuffer::alloc_exported`] for `size` bytes (its rounded size),
    /// mapped with read/write access for device `ordinal` (NCCL's
    /// `ncclP2pImportShareableBuffer`). The descriptor is closed once imported.
    ///
    /// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] naming the cuMem
    /// call that failed; a `size` that is not a multiple of this device's
    /// granularity.
    pub fn import(ordinal: usize, fd: std::os::fd::OwnedFd, size: usize) -> Result<CuMemBuffer, KernelError> {
        use std::os::fd::AsRawFd;
        let ctx = context(ordinal)?;
        let prop = cumem_prop(ordinal);
        let gran = cumem_granularity(&prop)?;
        if size == 0 || !size.is_multiple_of(gran) {
            return Err(KernelError::Cuda {
                call: "cuMemImportFromShareableHandle",
                message: format!("an export of {size} bytes, not a multiple of the {gran}-byte granularity"),
            });
        }
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        guard::call("cuMemImportFromShareableHandle", || {
            // SAFETY: for POSIX descriptors the OS handle is the int itself, passed as a pointer-sized value.
            unsafe {
                sys::cuMemImportFromShareableHandle(
                    &mut handle,
                    fd.as_raw_fd() as isize as *mut std::ffi::c_void,
                    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                )
            }
            .result()
        })?;
        drop(fd);
        Self::map(ctx, handle, size, gran, ordinal)
    }

    /// Reserves an address range, maps `handle` there and grants `ordinal`
    /// read/write access; releases `handle` (and what was made) on failure.
    fn map(
        ctx: Arc<CudaContext>,
        handle: sys::CUmemGenericAllocationHandle,
        size: usize,
        gran: usize,
        ordinal: usize,
    ) -> Result<CuMemBuffer, KernelError> {
        let release = |h| {
            // SAFETY: a handle made or imported by the caller, released once.
            let _ = unsafe { sys::cuMemRelease(h) };
        };
        let mut ptr: sys::CUdeviceptr = 0;
        if let Err(e) = guard::call("cuMemAddressReserve", || {
            // SAFETY: one out-pointer; size and alignment multiples of the granularity.
            unsafe { sys::cuMemAddressReserve(&mut ptr, size, gran, 0, 0) }.result()
        }) {
            release(handle);
            return Err(e);
        }
        if let Err(e) = guard::call("cuMemMap", || {
            // SAFETY: a reserved range of `size` bytes and a handle of that size.
            unsafe { sys::cuMemMap(ptr, size, 0, handle, 0) }.result()
        }) {
            // SAFETY: the range reserved just above, freed once.
            let _ = unsafe { sys::cuMemAddressFree(ptr, size) };
            release(handle);
            return Err(e);
        }
        // From here on, drop undoes everything.
        let buf = CuMemBuffer { ptr, size, handle, ctx };
        let mut desc: sys::CUmemAccessDesc = {
            // SAFETY: a plain C struct of integers: all-zero is valid.
            unsafe { std::mem::zeroed() }
        };
        desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        desc.location.id = ordinal as i32;
        desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        guard::call("cuMemSetAccess", || {
            // SAFETY: the mapped range and one access descriptor.
            unsafe { sys::cuMemSetAccess(buf.ptr, buf.size, &desc, 1) }.result()
        })?;
        Ok(buf)
    }

    /// The mapped device address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    /// Bytes mapped (the requested length rounded up to the granularity).
    pub fn size(&self) -> usize {
        self.size
    }
}

impl Drop for CuMemBuffer {
    fn drop(&mut self) {
        let _ = guard::call("cuCtxSetCurrent", || self.ctx.bind_to_thread());
        let _ = guard::call("cuMemUnmap", || {
            // SAFETY: the range this value mapped, unmapped once.
            unsafe { sys::cuMemUnmap(self.ptr, self.size) }.result()
        });
        let _ = guard::call("cuMemAddressFree", || {
            // SAFETY: the range this value reserved, freed once (after the unmap).
            unsafe { sys::cuMemAddressFree(self.ptr, self.size) }.result()
        });
        let _ = guard::call("cuMemRelease", || {
            // SAFETY: the handle this value made or imported, released once.
            unsafe { sys::cuMemRelease(self.handle) }.result()
        });
    }
}

type HostFn = Box<dyn FnOnce() + Send>;

unsafe extern "C" fn run_host_fn(data: *mut c_void) {
    // SAFETY: `data` is the `Box<HostFn>` leaked by `launch_host_func`, run once.
    let f = unsafe { Box::from_raw(data.cast::<HostFn>()) };
    // A panic must not unwind into the driver's callback thread.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || (*f)()));
}

/// Enqueues `f` on the CUDA stream `stream` (`cuLaunchHostFunc`): the driver
/// runs it on its callback thread once everything enqueued on the stream
/// before has completed, and holds the stream's later work until it returns.
/// `f` must not call CUDA.
///
/// Errors: [`KernelError::NoCuda`]; [`KernelError::Cuda`] when the driver
/// refuses (then `f` is dropped without running).
///
/// # Safety
/// `stream` must be a live `CUstream` of a context of device `ordinal` (or
/// NULL, the legacy default stream).
pub unsafe fn launch_host_func(ordinal: usize, stream: *mut c_void, f: HostFn) -> Result<(), KernelError> {
    context(ordinal)?;
    let data = Box::into_raw(Box::new(f));
    let r = guard::call("cuLaunchHostFunc", || {
        // SAFETY: a live stream (caller); `run_host_fn` takes ownership of `data`.
        unsafe { sys::cuLaunchHostFunc(stream as sys::CUstream, Some(run_host_fn), data.cast()) }.result()
    });
    if r.is_err() {
        // SAFETY: the driver did not take `data`: it is still ours.
        drop(unsafe { Box::from_raw(data) });
    }
    r
}

/// Attribute `a` of device `ordinal` (`cuDeviceGetAttribute`).
pub(crate) fn device_attribute(ordinal: usize, a: sys::CUdevice_attribute) -> Result<i32, KernelError> {
    attr(device_handle(ordinal)?, a, "cuDeviceGetAttribute")
}

/// Device `ordinal`'s primary context made current on this thread until the
/// guard drops, which makes the thread's previous context current again (the
/// caller's own device is left as it was).
pub(crate) struct CtxGuard {
    prev: sys::CUcontext,
}

/// See [`CtxGuard`]. Errors: as [`context`].
pub(crate) fn ctx_guard(ordinal: usize) -> Result<CtxGuard, KernelError> {
    let mut prev: sys::CUcontext = std::ptr::null_mut();
    guard::call("cuCtxGetCurrent", || {
        // SAFETY: one out-pointer.
        unsafe { sys::cuCtxGetCurrent(&mut prev) }.result()
    })?;
    context(ordinal)?;
    Ok(CtxGuard { prev })
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        let prev = self.prev;
        let _ = guard::call("cuCtxSetCurrent", || {
            // SAFETY: `prev` was current on this thread (or NULL: none), and
            // primary contexts retained by this crate are never destroyed.
            unsafe { sys::cuCtxSetCurrent(prev) }.result()
        });
    }
}
