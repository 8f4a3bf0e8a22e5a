//! Thin verbs layer: libibverbs resolved at run time, RAII wrappers for the
//! objects the plugin uses (device context, PD, CQ, RC QP, MR).
//!
//! Types, constants and the inline verbs that dispatch through the provider's
//! ops table (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`) come from
//! `rdma-sys`. The exported libibverbs functions are looked up with libloading
//! from `libibverbs.so.1` on first use ([`Verbs::get`]), instead of being linked,
//! so the plugin `.so` loads on machines without libibverbs and `init` fails
//! with the `dlopen` reason. FFI added in this crate (not in `rdma-sys`, or
//! needing another signature): the [`Verbs`] table itself (function pointer
//! types), `ibv_query_port` with the full `ibv_port_attr` (rdma-sys only
//! declares the compat struct), and RoCE GID types read from sysfs
//! (`gid_attrs/types/<i>`, as NCCL does) because `rdma-sys` 0.3 lacks
//! `ibv_query_gid_ex`.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::params::{IB_VERBS_LIB, IBVERBS_LIB, LIBIBVERBS};

pub use rdma_sys as sys;
use sys::{
    ibv_async_event, ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr, ibv_gid, ibv_mr, ibv_pd,
    ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
};

type FnGetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device;
type FnFreeDeviceList = unsafe extern "C" fn(*mut *mut ibv_device);
type FnGetDeviceName = unsafe extern "C" fn(*mut ibv_device) -> *const c_char;
type FnGetDeviceGuid = unsafe extern "C" fn(*mut ibv_device) -> u64;
type FnOpenDevice = unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context;
type FnCloseDevice = unsafe extern "C" fn(*mut ibv_context) -> c_int;
type FnQueryDevice = unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
type FnQueryPort = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
type FnQueryGid = unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
type FnAllocPd = unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd;
type FnDeallocPd = unsafe extern "C" fn(*mut ibv_pd) -> c_int;
type FnRegMr = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
type FnDeregMr = unsafe extern "C" fn(*mut ibv_mr) -> c_int;
type FnCreateCq =
    unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
type FnDestroyCq = unsafe extern "C" fn(*mut ibv_cq) -> c_int;
type FnCreateQp = unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
type FnDestroyQp = unsafe extern "C" fn(*mut ibv_qp) -> c_int;
type FnModifyQp = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
type FnGetAsyncEvent = unsafe extern "C" fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
type FnAckAsyncEvent = unsafe extern "C" fn(*mut ibv_async_event);
type FnStatusStr = unsafe extern "C" fn(c_uint) -> *const c_char;
type FnEventTypeStr = unsafe extern "C" fn(c_uint) -> *const c_char;

/// The libibverbs entry points the plugin calls, resolved from `libibverbs.so.1`.
pub struct Verbs {
    _lib: libloading::Library,
    file: String,
    pub(crate) get_device_list: FnGetDeviceList,
    pub(crate) free_device_list: FnFreeDeviceList,
    pub(crate) get_device_name: FnGetDeviceName,
    pub(crate) get_device_guid: FnGetDeviceGuid,
    pub(crate) open_device: FnOpenDevice,
    pub(crate) close_device: FnCloseDevice,
    pub(crate) query_device: FnQueryDevice,
    pub(crate) query_port: FnQueryPort,
    pub(crate) query_gid: FnQueryGid,
    pub(crate) alloc_pd: FnAllocPd,
    pub(crate) dealloc_pd: FnDeallocPd,
    pub(crate) reg_mr: FnRegMr,
    pub(crate) dereg_mr: FnDeregMr,
    pub(crate) create_cq: FnCreateCq,
    pub(crate) destroy_cq: FnDestroyCq,
    pub(crate) create_qp: FnCreateQp,
    pub(crate) destroy_qp: FnDestroyQp,
    pub(crate) modify_qp: FnModifyQp,
    pub(crate) get_async_event: FnGetAsyncEvent,
    pub(crate) ack_async_event: FnAckAsyncEvent,
    status_str: FnStatusStr,
    event_type_str: FnEventTypeStr,
}

impl std::fmt::Debug for Verbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Verbs({})", self.file)
    }
}

/// The libraries to `dlopen`, in order, and a warning to log (if any), from the
/// environment as seen through `get`. NCCL 2.30.7 (`src/misc/ibvsymbols.cc`,
/// `buildIbvSymbols`) tries `NCCL_IBVERBS_LIB` when set, then `libibverbs.so`,
/// then `libibverbs.so.1`, and uses the first one that opens. An empty value
/// counts as unset.
pub fn library_candidates(get: &dyn Fn(&str) -> Option<String>) -> (Vec<String>, Option<String>) {
    let set = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let (lib_env, old_env) = (IBVERBS_LIB.name, IB_VERBS_LIB.name);
    let mut warning = None;
    let chosen = match (set(lib_env), set(old_env)) {
        (Some(v), old) => {
            if old.is_some() {
                warning = Some(format!("{old_env} is deprecated and ignored because {lib_env} is set"));
            }
            Some(v)
        }
        (None, Some(v)) => {
            warning = Some(format!(
                "{old_env} is deprecated: use {lib_env} (NCCL's name); using {v:?} for now"
            ));
            Some(v)
        }
        (None, None) => None,
    };
    let mut names: Vec<String> = chosen.into_iter().collect();
    names.extend(["libibverbs.so".to_string(), LIBIBVERBS.to_string()]);
    (names, warning)
}

/// The table (or why it could not be loaded) and the warnings of loading it.
static VERBS: OnceLock<(Result<Verbs, String>, Vec<String>)> = OnceLock::new();

macro_rules! sym {
    ($lib:expr, $file:expr, $name:literal) => {{
        // SAFETY: the symbol is looked up by its documented libibverbs name and
        // cast to the C signature of `verbs.h` (rdma-core 44) declared above.
        let s = unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
            .map_err(|e| format!("{} has no symbol {}: {e} (is it libibverbs?)", $file, $name))?;
        *s
    }};
}

impl Verbs {
    /// The process-wide table, loading libibverbs on the first call from
    /// [`library_candidates`] of the process environment. The error says why
    /// (every library tried and its `dlopen` error, or a missing symbol).
    pub fn get() -> Result<&'static Verbs, String> {
        Self::get_with_warnings().0
    }

    /// [`Verbs::get`], plus the warnings of the (single) load: a deprecated
    /// variable, or an `NCCL_IBVERBS_LIB` that could not be opened so that a
    /// default name was used instead. Each warning is also logged once at WARN.
    pub fn get_with_warnings() -> (Result<&'static Verbs, String>, &'static [String]) {
        let (res, warnings) = VERBS.get_or_init(|| {
            let (names, warning) = library_candidates(&|k| std::env::var(k).ok());
            let mut warnings: Vec<String> = warning.into_iter().collect();
            let res = Self::load_first(&names);
            if let Ok(v) = &res
                && names.len() > 2
                && v.file != names[0]
            {
                warnings.push(format!(
                    "{}={:?} could not be opened; using {} instead (as NCCL does)",
                    IBVERBS_LIB.name, names[0], v.file
                ));
            }
            for w in &warnings {
                ferroccl_plugin_api::net_warn!("NET/FerrocclIB : {w}");
            }
            (res, warnings)
        });
        (res.as_ref().map_err(Clone::clone), warnings)
    }

    /// The file name the table was loaded from (as passed to `dlopen`).
    pub fn library(&self) -> &str {
        &self.file
    }

    /// Opens the first of `names` that `dlopen` accepts and resolves every entry
    /// point from it. A library that opens but lacks a symbol is an error (no
    /// further fallback), as in NCCL. Used by [`Verbs::get`]; public for tests.
    ///
    /// # Errors
    /// `"cannot load libibverbs: …"` naming every file tried with its `dlopen`
    /// error, or `"<file> has no symbol <name>"`.
    pub fn load_first(names: &[String]) -> Result<Verbs, String> {
        let mut tried = Vec::new();
        for name in names {
            // SAFETY: loading libibverbs runs its constructors, which only set up
            // provider discovery; no Rust invariants are involved.
            match unsafe { libloading::Library::new(name) } {
                Ok(lib) => return Self::resolve(lib, name),
                Err(e) => {
                    let why = std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
                    tried.push(format!("{name}: {why}"));
                }
            }
        }
        Err(format!(
            "cannot load libibverbs (tried {}); install rdma-core's libibverbs1 and ibverbs-providers, or name the library in {}",
            tried.join("; "),
            IBVERBS_LIB.name
        ))
    }

    fn resolve(lib: libloading::Library, file: &str) -> Result<Verbs, String> {
        Ok(Verbs {
            get_device_list: sym!(lib, file, "ibv_get_device_list"),
            free_device_list: sym!(lib, file, "ibv_free_device_list"),
            get_device_name: sym!(lib, file, "ibv_get_device_name"),
            get_device_guid: sym!(lib, file, "ibv_get_device_guid"),
            open_device: sym!(lib, file, "ibv_open_device"),
            close_device: sym!(lib, file, "ibv_close_device"),
            query_device: sym!(lib, file, "ibv_query_device"),
            query_port: sym!(lib, file, "ibv_query_port"),
            query_gid: sym!(lib, file, "ibv_query_gid"),
            alloc_pd: sym!(lib, file, "ibv_alloc_pd"),
            dealloc_pd: sym!(lib, file, "ibv_dealloc_pd"),
            reg_mr: sym!(lib, file, "ibv_reg_mr"),
            dereg_mr: sym!(lib, file, "ibv_dereg_mr"),
            create_cq: sym!(lib, file, "ibv_create_cq"),
            destroy_cq: sym!(lib, file, "ibv_destroy_cq"),
            create_qp: sym!(lib, file, "ibv_create_qp"),
            destroy_qp: sym!(lib, file, "ibv_destroy_qp"),
            modify_qp: sym!(lib, file, "ibv_modify_qp"),
            get_async_event: sym!(lib, file, "ibv_get_async_event"),
            ack_async_event: sym!(lib, file, "ibv_ack_async_event"),
            status_str: sym!(lib, file, "ibv_wc_status_str"),
            event_type_str: sym!(lib, file, "ibv_event_type_str"),
            _lib: lib,
            file: file.to_string(),
        })
    }

    /// `ibv_wc_status_str(status)`.
    pub fn wc_status_str(&self, status: u32) -> String {
        // SAFETY: returns a pointer to a static string for any value.
        let p = unsafe { (self.status_str)(status) };
        if p.is_null() {
            return format!("status {status}");
        }
        // SAFETY: non-NULL static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// `ibv_event_type_str(event)`.
    pub fn event_type_str(&self, event: u32) -> String {
        // SAFETY: returns a pointer to a static string for any value.
        let p = unsafe { (self.event_type_str)(event) };
        if p.is_null() {
            return format!("event {event}");
        }
        // SAFETY: non-NULL static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// One RDMA device of `ibv_get_device_list`: name, node GUID (host order) and
/// the port count after opening.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Device name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// Node GUID, host byte order.
    pub guid: u64,
    index: usize,
}

/// Lists the RDMA devices. An empty list is not an error here.
pub fn list_devices(v: &'static Verbs) -> Result<Vec<DeviceInfo>, String> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out pointer; the list is freed below.
    let list = unsafe { (v.get_device_list)(&mut n) };
    if list.is_null() {
        let e = errno();
        // libibverbs answers ENOSYS when the kernel exposes no RDMA devices at all.
        let hint = if e.raw_os_error() == Some(libc::ENOSYS) {
            " (no RDMA devices: the kernel has no /sys/class/infiniband; load an HCA driver or rdma_rxe)"
        } else {
            ""
        };
        return Err(format!("ibv_get_device_list failed: {e}{hint}"));
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `list` has `n` valid entries.
        let dev = unsafe { *list.add(i) };
        // SAFETY: `dev` is a valid device; the name is a static C string of it.
        let name = unsafe { CStr::from_ptr((v.get_device_name)(dev)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `dev` is valid.
        let guid = u64::from_be(unsafe { (v.get_device_guid)(dev) });
        out.push(DeviceInfo { name, guid, index: i });
    }
    // SAFETY: `list` came from ibv_get_device_list.
    unsafe { (v.free_device_list)(list) };
    Ok(out)
}

/// An open device context (`ibv_open_device`), closed on drop.
#[derive(Debug)]
pub struct Context {
    v: &'static Verbs,
    /// The raw context.
    pub raw: *mut ibv_context,
}

// SAFETY: libibverbs contexts are thread-safe (rdma-core documents all verbs as
// thread-safe), the pointer is owned by this value.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Opens device `info` (re-listing devices to get the `ibv_device*`).
    pub fn open(v: &'static Verbs, info: &DeviceInfo) -> Result<Self, String> {
        let mut n: c_int = 0;
        // SAFETY: valid out pointer; freed below.
        let list = unsafe { (v.get_device_list)(&mut n) };
        if list.is_null() || info.index >= n.max(0) as usize {
            return Err(format!("device {} disappeared from ibv_get_device_list", info.name));
        }
        // SAFETY: index checked against `n`.
        let raw = unsafe { (v.open_device)(*list.add(info.index)) };
        let err = errno();
        // SAFETY: `list` came from ibv_get_device_list; the context stays valid after freeing it.
        unsafe { (v.free_device_list)(list) };
        if raw.is_null() {
            return Err(format!("ibv_open_device({}) failed: {err}", info.name));
        }
        Ok(Context { v, raw })
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<ibv_device_attr, String> {
        // SAFETY: all-zero is a valid ibv_device_attr (plain integers).
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context and out pointer.
        let rc = unsafe { (self.v.query_device)(self.raw, &mut a) };
        if rc != 0 {
            return Err(format!(
                "ibv_query_device failed: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(a)
    }

    /// `ibv_query_port` (full struct).
    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr, String> {
        // SAFETY: all-zero is a valid ibv_port_attr.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid context; `a` is the full current struct, a superset of the compat one.
        let rc = unsafe { (self.v.query_port)(self.raw, port, &mut a) };
        if rc != 0 {
            return Err(format!(
                "ibv_query_port(port {port}) failed: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(a)
    }

    /// `ibv_query_gid`: the GID at `index` of `port`.
    pub fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16], String> {
        let mut g = ibv_gid { raw: [0; 16] };
        // SAFETY: valid context and out pointer.
        let rc = unsafe { (self.v.query_gid)(self.raw, port, index, &mut g) };
        if rc != 0 {
            return Err(format!("ibv_query_gid(port {port}, index {index}) failed: {}", errno()));
        }
        // SAFETY: every bit pattern of the union is valid bytes.
        Ok(unsafe { g.raw })
    }

    /// Async event file descriptor of the context.
    pub fn async_fd(&self) -> c_int {
        // SAFETY: `raw` is a valid open context.
        unsafe { (*self.raw).async_fd }
    }

    /// Reads one async event if available (fd must be readable), returning
    /// `(event type, port or -1)`, acked.
    pub fn read_async_event(&self) -> Option<(String, i32, u32)> {
        // SAFETY: all-zero is a valid event out-struct.
        let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
        // SAFETY: valid context; caller made sure the fd is readable (else it blocks
        // only if the fd is blocking; we set it non-blocking).
        if unsafe { (self.v.get_async_event)(self.raw, &mut ev) } != 0 {
            return None;
        }
        let ty = ev.event_type as u32;
        let port_event = matches!(
            ev.event_type,
            sys::ibv_event_type::IBV_EVENT_PORT_ACTIVE
                | sys::ibv_event_type::IBV_EVENT_PORT_ERR
                | sys::ibv_event_type::IBV_EVENT_LID_CHANGE
                | sys::ibv_event_type::IBV_EVENT_PKEY_CHANGE
                | sys::ibv_event_type::IBV_EVENT_GID_CHANGE
                | sys::ibv_event_type::IBV_EVENT_SM_CHANGE
                | sys::ibv_event_type::IBV_EVENT_CLIENT_REREGISTER
        );
        // SAFETY: for port events the union holds `port_num`.
        let port = if port_event { unsafe { ev.element.port_num } } else { -1 };
        let name = self.v.event_type_str(ty);
        // SAFETY: `ev` came from ibv_get_async_event and is acked exactly once.
        unsafe { (self.v.ack_async_event)(&mut ev) };
        Some((name, port, ty))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context was opened by us; all children were dropped first
        // (owners hold an Arc to the device that outlives them).
        unsafe { (self.v.close_device)(self.raw) };
    }
}

/// A protection domain, deallocated on drop.
#[derive(Debug)]
pub struct Pd {
    v: &'static Verbs,
    /// The raw PD.
    pub raw: *mut ibv_pd,
}
// SAFETY: verbs objects are thread-safe; the pointer is owned.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// `ibv_alloc_pd`.
    pub fn new(ctx: &Context) -> Result<Self, String> {
        // SAFETY: valid context.
        let raw = unsafe { (ctx.v.alloc_pd)(ctx.raw) };
        if raw.is_null() {
            return Err(format!("ibv_alloc_pd failed: {}", errno()));
        }
        Ok(Pd { v: ctx.v, raw })
    }

    /// `ibv_reg_mr` with local write, remote write and remote read access.
    pub fn reg_mr(&self, addr: *mut u8, len: usize) -> Result<Mr, String> {
        self.reg_mr_access(addr, len, false)
    }

    /// `ibv_reg_mr` with local write, remote write, remote read and, with
    /// `remote_atomic`, remote atomic access (the RMA windows: a put-with-signal's
    /// signal is an atomic fetch-and-add on the target's window).
    pub fn reg_mr_access(&self, addr: *mut u8, len: usize, remote_atomic: bool) -> Result<Mr, String> {
        let mut flags = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        if remote_atomic {
            flags |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC;
        }
        let access = flags.0 as c_int;
        // SAFETY: the PD is valid; the caller guarantees the range is mapped.
        let raw = unsafe { (self.v.reg_mr)(self.raw, addr.cast(), len, access) };
        if raw.is_null() {
            return Err(format!(
                "ibv_reg_mr({addr:p}, {len} bytes) failed: {} (check `ulimit -l`, memlock)",
                errno()
            ));
        }
        Ok(Mr { v: self.v, raw })
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: owned PD; its MRs/QPs were released before (they are owned by
        // structures that drop before the device).
        unsafe { (self.v.dealloc_pd)(self.raw) };
    }
}

/// A memory region, deregistered on drop.
#[derive(Debug)]
pub struct Mr {
    v: &'static Verbs,
    /// The raw MR.
    pub raw: *mut ibv_mr,
}
// SAFETY: verbs objects are thread-safe; the pointer is owned.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: valid MR.
        unsafe { (*self.raw).lkey }
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: valid MR.
        unsafe { (*self.raw).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: owned MR, deregistered once.
        unsafe { (self.v.dereg_mr)(self.raw) };
    }
}

/// A completion queue, destroyed on drop.
#[derive(Debug)]
pub struct Cq {
    v: &'static Verbs,
    /// The raw CQ.
    pub raw: *mut ibv_cq,
}
// SAFETY: verbs objects are thread-safe; the pointer is owned.
unsafe impl Send for Cq {}

impl Cq {
    /// `ibv_create_cq` with `cqe` entries, no completion channel.
    pub fn new(ctx: &Context, cqe: i32) -> Result<Self, String> {
        // SAFETY: valid context; NULL channel and context are allowed.
        let raw = unsafe { (ctx.v.create_cq)(ctx.raw, cqe, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if raw.is_null() {
            return Err(format!("ibv_create_cq({cqe}) failed: {}", errno()));
        }
        Ok(Cq { v: ctx.v, raw })
    }

    /// Polls up to `wc.len()` completions (`ibv_poll_cq`, inline through the
    /// provider's ops table).
    pub fn poll(&self, wc: &mut [sys::ibv_wc]) -> Result<usize, String> {
        // SAFETY: valid CQ, `wc` has room for `len` entries.
        let n = unsafe { sys::ibv_poll_cq(self.raw, wc.len() as i32, wc.as_mut_ptr()) };
        if n < 0 {
            return Err(format!("ibv_poll_cq failed ({n})"));
        }
        Ok(n as usize)
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: owned CQ; QPs using it are dropped first (field order).
        unsafe { (self.v.destroy_cq)(self.raw) };
    }
}

/// An RC queue pair, destroyed on drop.
#[derive(Debug)]
pub struct Qp {
    v: &'static Verbs,
    /// The raw QP.
    pub raw: *mut ibv_qp,
}
// SAFETY: verbs objects are thread-safe; the pointer is owned.
unsafe impl Send for Qp {}

/// Addressing for RTR: the remote side of one QP.
#[derive(Debug, Clone, Copy)]
pub struct RemoteQp {
    /// Remote QP number.
    pub qpn: u32,
    /// Remote initial PSN.
    pub psn: u32,
    /// Remote LID (IB).
    pub lid: u16,
    /// Remote GID (RoCE / global routing).
    pub gid: [u8; 16],
    /// Use a GRH (RoCE always).
    pub global: bool,
}

/// Local settings for RTR/RTS.
#[derive(Debug, Clone, Copy)]
pub struct QpSettings {
    /// Port number.
    pub port: u8,
    /// Local GID index.
    pub gid_index: u8,
    /// Path MTU (`ibv_mtu` code).
    pub mtu: u32,
    /// Service level.
    pub sl: u8,
    /// Traffic class.
    pub tc: u8,
    /// `NCCL_IB_TIMEOUT`.
    pub timeout: u8,
    /// `NCCL_IB_RETRY_CNT`.
    pub retry_cnt: u8,
    /// Partition key index.
    pub pkey_index: u16,
    /// Also grant remote atomic access (the RMA QPs; the net path's QPs do not
    /// need it).
    pub remote_atomic: bool,
}

impl Qp {
    /// Creates an RC QP on `pd` using `cq` for both queues.
    pub fn new_rc(pd: &Pd, cq: &Cq, max_send_wr: u32, max_recv_wr: u32) -> Result<Self, String> {
        // SAFETY: all-zero is a valid init attr (NULL pointers, zero caps).
        let mut a: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = cq.raw;
        a.recv_cq = cq.raw;
        a.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        a.cap.max_send_wr = max_send_wr;
        a.cap.max_recv_wr = max_recv_wr;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        // SAFETY: valid PD and attr.
        let raw = unsafe { (pd.v.create_qp)(pd.raw, &mut a) };
        if raw.is_null() {
            return Err(format!(
                "ibv_create_qp(RC, {max_send_wr}/{max_recv_wr} WRs) failed: {}",
                errno()
            ));
        }
        Ok(Qp { v: pd.v, raw })
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: valid QP.
        unsafe { (*self.raw).qp_num }
    }

    fn modify(&self, a: &mut ibv_qp_attr, mask: sys::ibv_qp_attr_mask, what: &str) -> Result<(), String> {
        // SAFETY: valid QP and attribute struct.
        let rc = unsafe { (self.v.modify_qp)(self.raw, a, mask.0 as c_int) };
        if rc != 0 {
            return Err(format!(
                "ibv_modify_qp to {what} failed: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(())
    }

    /// RESET → INIT → RTR → RTS against `remote`, with local `psn`.
    pub fn connect(&self, s: &QpSettings, psn: u32, remote: &RemoteQp) -> Result<(), String> {
        use sys::ibv_qp_attr_mask as M;
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let zero = || -> ibv_qp_attr { unsafe { std::mem::zeroed() } };
        let mut a = zero();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = s.pkey_index;
        a.port_num = s.port;
        let mut access = sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE | sys::ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        if s.remote_atomic {
            access |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC;
        }
        a.qp_access_flags = access.0;
        self.modify(
            &mut a,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "INIT",
        )?;

        let mut a = zero();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = s.mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = remote.lid;
        a.ah_attr.sl = s.sl;
        a.ah_attr.port_num = s.port;
        if remote.global {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid { raw: remote.gid };
            a.ah_attr.grh.sgid_index = s.gid_index;
            a.ah_attr.grh.hop_limit = 255;
            a.ah_attr.grh.traffic_class = s.tc;
        }
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "RTR",
        )?;

        let mut a = zero();
        a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
        a.timeout = s.timeout;
        a.retry_cnt = s.retry_cnt;
        a.rnr_retry = 7;
        a.sq_psn = psn;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    /// Moves the QP to the error state (flushes outstanding WRs).
    pub fn to_error(&self) {
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
        let _ = self.modify(&mut a, sys::ibv_qp_attr_mask::IBV_QP_STATE, "ERR");
    }

    /// Posts a chain of send WRs (inline `ibv_post_send`).
    pub fn post_send(&self, wr: &mut sys::ibv_send_wr) -> Result<(), String> {
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: valid QP; `wr` and its chain/SGEs are valid for the call.
        let rc = unsafe { sys::ibv_post_send(self.raw, wr, &mut bad) };
        if rc != 0 {
            return Err(format!(
                "ibv_post_send failed: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(())
    }

    /// Posts one zero-SGE receive WR with `wr_id`.
    pub fn post_recv0(&self, wr_id: u64) -> Result<(), String> {
        let mut wr = sys::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: valid QP and WR.
        let rc = unsafe { sys::ibv_post_recv(self.raw, &mut wr, &mut bad) };
        if rc != 0 {
            return Err(format!(
                "ibv_post_recv failed: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: owned QP, destroyed once, before its CQ (field order in owners).
        unsafe { (self.v.destroy_qp)(self.raw) };
    }
}

/// RoCE version of GID `index` from sysfs (`/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>`).
pub fn sysfs_gid_roce_version(dev: &str, port: u8, index: u32) -> Option<u32> {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}");
    let s = std::fs::read_to_string(p).ok()?;
    if s.contains("RoCE v2") {
        Some(2)
    } else if s.contains("RoCE") || s.contains("IB/RoCE v1") {
        Some(1)
    } else {
        None
    }
}

/// PCI path of a device (`realpath /sys/class/infiniband/<dev>/device`), `None`
/// for virtual devices such as rxe.
pub fn sysfs_pci_path(dev: &str) -> Option<String> {
    let p = std::fs::canonicalize(format!("/sys/class/infiniband/{dev}/device")).ok()?;
    let s = p.to_string_lossy().into_owned();
    s.contains("/pci").then_some(s)
}

/// Netdev behind a RoCE device (`/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/ndevs/<index>`).
pub fn sysfs_gid_ndev(dev: &str, port: u8, index: u32) -> Option<String> {
    let p = format!("/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/ndevs/{index}");
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// MTU in bytes of an `ibv_mtu` code (1 = 256 … 5 = 4096).
pub fn mtu_bytes(code: u32) -> u32 {
    128 << code.clamp(1, 5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn candidates(kv: &[(&str, &str)]) -> (Vec<String>, Option<String>) {
        let m: HashMap<String, String> = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        library_candidates(&|k| m.get(k).cloned())
    }

    #[test]
    fn library_order_follows_nccl() {
        let (names, warn) = candidates(&[]);
        assert_eq!(names, ["libibverbs.so", "libibverbs.so.1"]);
        assert!(warn.is_none());
        let (names, warn) = candidates(&[("NCCL_IBVERBS_LIB", "/opt/rdma/lib/libibverbs.so.1")]);
        assert_eq!(
            names,
            ["/opt/rdma/lib/libibverbs.so.1", "libibverbs.so", "libibverbs.so.1"]
        );
        assert!(warn.is_none());
        let (names, _) = candidates(&[("NCCL_IBVERBS_LIB", "  ")]);
        assert_eq!(names.len(), 2, "an empty value counts as unset: {names:?}");
    }

    #[test]
    fn deprecated_name_is_an_alias_with_a_warning() {
        let (names, warn) = candidates(&[("NCCL_IB_VERBS_LIB", "/x/libibverbs.so.1")]);
        assert_eq!(names[0], "/x/libibverbs.so.1");
        let w = warn.expect("deprecation warning");
        assert!(w.contains("NCCL_IB_VERBS_LIB") && w.contains("NCCL_IBVERBS_LIB"), "{w}");
        let (names, warn) = candidates(&[("NCCL_IB_VERBS_LIB", "/old.so"), ("NCCL_IBVERBS_LIB", "/new.so")]);
        assert_eq!(names[0], "/new.so", "NCCL's name wins");
        assert!(warn.expect("warning").contains("ignored"));
    }

    #[test]
    fn missing_libraries_are_all_named() {
        let names = [
            "/nonexistent/a/libibverbs.so".to_string(),
            "libferroccl-no-such-verbs.so.1".to_string(),
        ];
        let err = Verbs::load_first(&names).expect_err("nothing to load");
        assert!(err.starts_with("cannot load libibverbs"), "{err}");
        for n in &names {
            assert!(err.contains(n.as_str()), "{err} should name {n}");
        }
        assert!(err.contains("NCCL_IBVERBS_LIB"), "{err}");
    }

    #[test]
    fn a_library_without_verbs_is_refused_without_fallback() {
        // libm opens but has no ibv_* symbols: NCCL stops at the first library that
        // opens, so the later (real) names are not tried.
        let names = ["libm.so.6".to_string(), LIBIBVERBS.to_string()];
        let err = Verbs::load_first(&names).expect_err("libm is not libibverbs");
        assert!(err.contains("libm.so.6 has no symbol ibv_get_device_list"), "{err}");
    }
}
