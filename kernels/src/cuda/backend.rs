//! [`CudaBackend`]: the [`Backend`] of one CUDA device.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

use super::plan::{self, DeviceShape, Launch};
use super::source::{Kernel, Unit};
use super::{driver, guard, nvrtc};
use crate::backend::{Backend, Pre};
use crate::{DevRedOp, KernelError, MemorySpace};

/// The reduction and copy primitives on one CUDA device.
///
/// Kernels are compiled by NVRTC for the device's architecture
/// (`compute_{major}{minor}`) on first use of each unit, loaded into the
/// device's primary context, and launched on the backend's own non-blocking
/// stream. The [`Backend`] methods are synchronous (they wait for the stream);
/// [`CudaBackend::enqueue`] + [`CudaBackend::synchronize`] split the two.
///
/// Operands may be device memory of this device, managed memory, or pinned
/// (page-locked, registered) host memory, all reached through unified virtual
/// addressing. Every operand's memory space is checked before a launch
/// (`cuPointerGetAttributes`): pageable host memory or another device's memory
/// is [`KernelError::MemorySpaceMismatch`], never a launch that faults.
///
/// The slice forms of [`Backend`] take slices as *addresses*: a slice of device
/// memory must never be read on the host, so prefer the `*_raw` forms for
/// device memory (the executor does).
#[derive(Debug)]
pub struct CudaBackend {
    ordinal: usize,
    arch: u32,
    shape: DeviceShape,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    functions: Mutex<HashMap<Kernel, CudaFunction>>,
}

/// The vouched forms handed out ([`CudaBackend::vouched`]), one per backend.
static VOUCHED: Mutex<Vec<&'static VouchedCuda>> = Mutex::new(Vec::new());

/// One backend per device, created on first use and kept for the process.
static BACKENDS: Mutex<Vec<Option<&'static CudaBackend>>> = Mutex::new(Vec::new());

impl CudaBackend {
    /// A backend for device `ordinal`: retains its primary context, reads its
    /// compute capability and shape, creates a stream. Checks that NVRTC can be
    /// loaded (kernels are compiled lazily).
    ///
    /// Errors: [`KernelError::NoCuda`] (no driver or device),
    /// [`KernelError::NoNvrtc`], [`KernelError::Cuda`] (bad ordinal, driver
    /// failure).
    pub fn new(ordinal: usize) -> Result<CudaBackend, KernelError> {
        driver::check_ordinal(ordinal)?;
        nvrtc::nvrtc_info()?;
        let ctx = driver::context(ordinal)?;
        let (major, minor) = guard::call("cuDeviceGetAttribute(COMPUTE_CAPABILITY)", || ctx.compute_capability())?;
        let attr = |a: CUdevice_attribute, name: &'static str| guard::call(name, || ctx.attribute(a));
        let sm_count = attr(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
        )?;
        let max_threads_per_sm = attr(
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            "cuDeviceGetAttribute(MAX_THREADS_PER_MULTIPROCESSOR)",
        )?;
        let stream = guard::call("cuStreamCreate", || ctx.new_stream())?;
        let b = CudaBackend {
            ordinal,
            arch: (major * 10 + minor) as u32,
            shape: DeviceShape {
                sm_count: sm_count.max(1) as u32,
                max_threads_per_sm: max_threads_per_sm.max(1) as u32,
            },
            ctx,
            stream,
            functions: Mutex::new(HashMap::new()),
        };
        // The copy kernel stages device buffers on the proxy thread while a
        // caller's stream may wait for that very operation: compiling, loading
        // and (with CUDA's lazy loading) first-launch loading can synchronize
        // the context, which would wait for the caller's stream, which waits
        // for the proxy. So the copy unit is compiled and loaded here, on the
        // thread that creates the backend (the enqueuing thread), and its
        // functions forced resident. NCCL loads its kernels at init for the
        // same reason (`src/enqueue.cc`, `ncclInitKernelsForDevice`:
        // `cudaFuncGetAttributes` on every kernel).
        b.prepare(Unit::Copy)?;
        Ok(b)
    }

    /// The process-wide backend of device `ordinal` (created by the first call).
    /// Errors: as [`CudaBackend::new`] (not cached: a later call retries).
    pub fn for_device(ordinal: usize) -> Result<&'static CudaBackend, KernelError> {
        let mut g = BACKENDS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(b)) = g.get(ordinal) {
            return Ok(b);
        }
        let b: &'static CudaBackend = Box::leak(Box::new(CudaBackend::new(ordinal)?));
        if g.len() <= ordinal {
            g.resize(ordinal + 1, None);
        }
        g[ordinal] = Some(b);
        Ok(b)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The compute capability as NVRTC's virtual architecture number (90 = `compute_90`).
    pub fn arch(&self) -> u32 {
        self.arch
    }

    /// Multiprocessors and threads per multiprocessor (the grid size's inputs).
    pub fn shape(&self) -> DeviceShape {
        self.shape
    }

    /// The device's primary context (cudarc), for callers that allocate or time
    /// work themselves.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream the backend launches on (cudarc).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Compiles (once per process and architecture) and loads `unit` now, so the
    /// first collective does not pay for it.
    pub fn prepare(&self, unit: Unit) -> Result<(), KernelError> {
        for k in unit.kernels() {
            self.function(k)?;
        }
        Ok(())
    }

    fn function(&self, k: Kernel) -> Result<CudaFunction, KernelError> {
        let mut g = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = g.get(&k) {
            return Ok(f.clone());
        }
        let unit = k.unit();
        let ptx = nvrtc::compile(unit, self.arch)?;
        let module = guard::call("cuModuleLoadData", || self.ctx.load_module(Ptx::from_src(ptx.to_string())))
            .map_err(|e| match e {
                KernelError::Cuda { call, message } => KernelError::Cuda {
                    call,
                    message: format!(
                        "{message} (loading the {unit} PTX of NVRTC {:?} for compute_{}: a driver older than NVRTC cannot JIT its PTX)",
                        nvrtc::nvrtc_info().map(|i| i.version).unwrap_or_default(),
                        self.arch
                    ),
                },
                other => other,
            })?;
        for kk in unit.kernels() {
            let f = guard::call("cuModuleGetFunction", || module.load_function(&kk.name()))?;
            force_load(&f);
            g.insert(kk, f);
        }
        g.get(&k).cloned().ok_or_else(|| KernelError::Cuda {
            call: "cuModuleGetFunction",
            message: format!("{} missing from the {unit} module", k.name()),
        })
    }

    /// Enqueues `launch` on the backend's stream and returns at once.
    ///
    /// # Safety
    /// The launch's addresses must be valid for the device for the sizes it
    /// names (as the `*_raw` methods require), until the stream has run it.
    pub unsafe fn enqueue(&self, launch: &Launch) -> Result<(), KernelError> {
        let f = self.function(launch.kernel)?;
        let cfg = LaunchConfig {
            grid_dim: (launch.grid, 1, 1),
            block_dim: (launch.block, 1, 1),
            shared_mem_bytes: 0,
        };
        let args = launch.args;
        guard::call("cuLaunchKernel", || {
            let mut b = self.stream.launch_builder(&f);
            for a in &args {
                b.arg(a);
            }
            // SAFETY: every kernel takes eight 64-bit parameters (kernels.cu's
            // FCCL_PARAMS), which `args` supplies; the caller guarantees the
            // addresses among them are valid for the launch.
            unsafe { b.launch(cfg) }
        })?;
        Ok(())
    }

    /// Waits until everything enqueued on the backend's stream has run; a
    /// kernel fault surfaces here.
    pub fn synchronize(&self) -> Result<(), KernelError> {
        guard::call("cuStreamSynchronize", || self.stream.synchronize())
    }

    /// Checks that the device can reach each operand (device memory of this
    /// device, managed memory, or pinned host memory).
    fn check_reach(&self, operands: &[(&'static str, *const u8)]) -> Result<(), KernelError> {
        for &(what, p) in operands {
            let space = driver::classify(p)?;
            let ok = match space {
                MemorySpace::Device { ordinal, managed } => managed || ordinal == self.ordinal,
                MemorySpace::Host { pinned } => pinned,
            };
            if !ok {
                return Err(KernelError::MemorySpaceMismatch {
                    what,
                    found: space.to_string(),
                    first: "the backend",
                    expected: format!("the CUDA backend of device {}", self.ordinal),
                });
            }
        }
        Ok(())
    }

    /// This backend without the memory-space check of every launch
    /// ([`VouchedCuda`]), for a caller that already knows each operand's space.
    pub fn vouched(&'static self) -> &'static VouchedCuda {
        let mut g = VOUCHED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = g.iter().find(|v| std::ptr::eq(v.be, self)) {
            return v;
        }
        // The enqueuing twin first: `Backend::enqueuer` hands it out.
        let queued: &'static VouchedCuda = Box::leak(Box::new(VouchedCuda {
            be: self,
            wait: false,
            queued: None,
        }));
        let v: &'static VouchedCuda = Box::leak(Box::new(VouchedCuda {
            be: self,
            wait: true,
            queued: Some(queued),
        }));
        g.push(v);
        v
    }

    /// Enqueues `launch` and, with `wait`, waits for it (no memory-space check).
    fn launch_vouched(&self, launch: Option<Launch>, wait: bool) -> Result<(), KernelError> {
        let Some(l) = launch else { return Ok(()) };
        // SAFETY: the `*_raw` callers guarantee validity and reachability of
        // the ranges.
        unsafe { self.enqueue(&l)? };
        if wait { self.synchronize() } else { Ok(()) }
    }

    fn run(&self, launch: Option<Launch>, operands: &[(&'static str, *const u8)]) -> Result<(), KernelError> {
        let Some(l) = launch else { return Ok(()) };
        self.check_reach(operands)?;
        // SAFETY: the `*_raw` callers guarantee validity of the ranges; their
        // memory spaces were just checked to be reachable from this device.
        unsafe { self.enqueue(&l)? };
        self.synchronize()
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn copy(&self, dst: &mut [u8], src: &[u8]) -> Result<(), KernelError> {
        crate::cpu::check_same("src", dst.len(), src.len())?;
        // SAFETY: two distinct slices (a &mut and a &) cannot overlap.
        unsafe { self.copy_raw(dst.as_mut_ptr(), src.as_ptr(), dst.len()) }
    }

    fn reduce(&self, dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) -> Result<(), KernelError> {
        plan::check_lengths(op.dtype, dst.len(), &[("a", a.len()), ("b", b.len())])?;
        // SAFETY: slices are valid for their lengths and `dst` overlaps neither.
        unsafe { self.reduce_raw(dst.as_mut_ptr(), a.as_ptr(), b.as_ptr(), dst.len(), op, pre) }
    }

    fn reduce_inplace(&self, acc: &mut [u8], src: &[u8], op: &DevRedOp, pre: Pre) -> Result<(), KernelError> {
        plan::check_lengths(op.dtype, acc.len(), &[("src", src.len())])?;
        let p = acc.as_mut_ptr();
        // SAFETY: as above; `acc` is both destination and first operand.
        unsafe { self.reduce_raw(p, p, src.as_ptr(), acc.len(), op, pre) }
    }

    fn pre_op(&self, dst: &mut [u8], src: &[u8], op: &DevRedOp) -> Result<(), KernelError> {
        plan::check_lengths(op.dtype, dst.len(), &[("src", src.len())])?;
        // SAFETY: distinct slices.
        unsafe { self.pre_op_raw(dst.as_mut_ptr(), src.as_ptr(), dst.len(), op) }
    }

    fn pre_op_inplace(&self, buf: &mut [u8], op: &DevRedOp) -> Result<(), KernelError> {
        let p = buf.as_mut_ptr();
        // SAFETY: in place on one valid slice.
        unsafe { self.pre_op_raw(p, p, buf.len(), op) }
    }

    fn post_op(&self, buf: &mut [u8], op: &DevRedOp) -> Result<(), KernelError> {
        // SAFETY: one valid slice.
        unsafe { self.post_op_raw(buf.as_mut_ptr(), buf.len(), op) }
    }

    unsafe fn copy_raw(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), KernelError> {
        let l = plan::copy(&self.shape, dst as u64, src as u64, bytes);
        self.run(l, &[("dst", dst), ("src", src)])
    }

    unsafe fn reduce_raw(
        &self,
        dst: *mut u8,
        a: *const u8,
        b: *const u8,
        bytes: usize,
        op: &DevRedOp,
        pre: Pre,
    ) -> Result<(), KernelError> {
        let l = plan::reduce(&self.shape, dst as u64, a as u64, b as u64, bytes, op, pre)?;
        self.run(l, &[("dst", dst), ("a", a), ("b", b)])
    }

    unsafe fn pre_op_raw(&self, dst: *mut u8, src: *const u8, bytes: usize, op: &DevRedOp) -> Result<(), KernelError> {
        let l = plan::pre_op(&self.shape, dst as u64, src as u64, bytes, op)?;
        self.run(l, &[("dst", dst), ("src", src)])
    }

    unsafe fn post_op_raw(&self, buf: *mut u8, bytes: usize, op: &DevRedOp) -> Result<(), KernelError> {
        let l = plan::post_op(&self.shape, buf as u64, bytes, op)?;
        self.run(l, &[("buf", buf)])
    }
}

/// A [`CudaBackend`] whose `*_raw` methods skip the memory-space check
/// (`cuPointerGetAttributes` per operand) of every launch: for the executor,
/// which knows where every operand of a step lives (device memory of this
/// device, or host memory it page-locked, `crate::hostreg`) and runs one launch
/// per operand operation. The slice methods still check.
///
/// Each one has an enqueuing twin ([`Backend::enqueuer`]) whose raw methods
/// return once their kernel is enqueued on the backend's stream: a step's
/// launches then run in stream order and are waited for once
/// ([`Backend::wait_enqueued`]), one `cuStreamSynchronize` per step instead of
/// one per launch (issue 28: with two processes time-slicing one GPU, every
/// synchronize costs a context switch).
#[derive(Debug)]
pub struct VouchedCuda {
    be: &'static CudaBackend,
    /// Whether each raw method waits for its kernel (`false` in the twin).
    wait: bool,
    /// The enqueuing twin (`None` in the twin itself).
    queued: Option<&'static VouchedCuda>,
}

impl VouchedCuda {
    /// The checked backend.
    pub fn checked(&self) -> &'static CudaBackend {
        self.be
    }
}

impl Backend for VouchedCuda {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn enqueuer(&self) -> Option<&dyn Backend> {
        self.queued.map(|q| q as &dyn Backend)
    }

    fn wait_enqueued(&self) -> Result<(), KernelError> {
        self.be.synchronize()
    }

    fn copy(&self, dst: &mut [u8], src: &[u8]) -> Result<(), KernelError> {
        self.be.copy(dst, src)
    }

    fn reduce(&self, dst: &mut [u8], a: &[u8], b: &[u8], op: &DevRedOp, pre: Pre) -> Result<(), KernelError> {
        self.be.reduce(dst, a, b, op, pre)
    }

    fn reduce_inplace(&self, acc: &mut [u8], src: &[u8], op: &DevRedOp, pre: Pre) -> Result<(), KernelError> {
        self.be.reduce_inplace(acc, src, op, pre)
    }

    fn pre_op(&self, dst: &mut [u8], src: &[u8], op: &DevRedOp) -> Result<(), KernelError> {
        self.be.pre_op(dst, src, op)
    }

    fn pre_op_inplace(&self, buf: &mut [u8], op: &DevRedOp) -> Result<(), KernelError> {
        self.be.pre_op_inplace(buf, op)
    }

    fn post_op(&self, buf: &mut [u8], op: &DevRedOp) -> Result<(), KernelError> {
        self.be.post_op(buf, op)
    }

    /// As [`CudaBackend`]'s, without the memory-space check.
    ///
    /// # Safety
    /// As [`Backend::copy_raw`]; both ranges reachable from this device.
    unsafe fn copy_raw(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), KernelError> {
        let b = self.be;
        b.launch_vouched(plan::copy(&b.shape, dst as u64, src as u64, bytes), self.wait)
    }

    /// As [`CudaBackend`]'s, without the memory-space check.
    ///
    /// # Safety
    /// As [`Backend::reduce_raw`]; every range reachable from this device.
    unsafe fn reduce_raw(
        &self,
        dst: *mut u8,
        a: *const u8,
        b: *const u8,
        bytes: usize,
        op: &DevRedOp,
        pre: Pre,
    ) -> Result<(), KernelError> {
        let be = self.be;
        be.launch_vouched(
            plan::reduce(&be.shape, dst as u64, a as u64, b as u64, bytes, op, pre)?,
            self.wait,
        )
    }

    /// As [`CudaBackend`]'s, without the memory-space check.
    ///
    /// # Safety
    /// As [`Backend::pre_op_raw`]; both ranges reachable from this device.
    unsafe fn pre_op_raw(&self, dst: *mut u8, src: *const u8, bytes: usize, op: &DevRedOp) -> Result<(), KernelError> {
        let b = self.be;
        b.launch_vouched(plan::pre_op(&b.shape, dst as u64, src as u64, bytes, op)?, self.wait)
    }

    /// As [`CudaBackend`]'s, without the memory-space check.
    ///
    /// # Safety
    /// As [`Backend::post_op_raw`]; the range reachable from this device.
    unsafe fn post_op_raw(&self, buf: *mut u8, bytes: usize, op: &DevRedOp) -> Result<(), KernelError> {
        let b = self.be;
        b.launch_vouched(plan::post_op(&b.shape, buf as u64, bytes, op)?, self.wait)
    }
}

/// Makes a function resident now rather than at its first launch (CUDA's lazy
/// loading, the default since CUDA 12.2, loads a kernel at first launch, which
/// may synchronize the context): `cuFuncLoad` where the driver has it (12.4+),
/// and `cuFuncGetAttribute`, which loads the function on older drivers (what
/// NCCL relies on with `cudaFuncGetAttributes`). Failures are ignored: the
/// launch loads the function then.
fn force_load(f: &CudaFunction) {
    use cudarc::driver::sys;
    let h = f.cu_function();
    // SAFETY: a function handle of a module loaded in this context.
    let _ = guard::call("cuFuncLoad", || unsafe { sys::cuFuncLoad(h) }.result());
    let mut v = 0;
    let _ = guard::call("cuFuncGetAttribute", || {
        // SAFETY: as above; one int out-pointer.
        unsafe {
            sys::cuFuncGetAttribute(
                &mut v,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                h,
            )
        }
        .result()
    });
}
