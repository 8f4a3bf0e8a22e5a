//! `ncclMemAlloc` / `ncclMemFree` and `ncclCommRegister` / `ncclCommDeregister`.
//!
//! `ncclMemAlloc` gives device memory of the calling thread's CUDA device where
//! CUDA is present (as NCCL's `cuMem*` allocation does), and page-aligned,
//! zeroed host memory on a machine without CUDA (a ferroccl extension: the
//! buffers the NULL stream works on). Registration records the buffer and hands
//! out a handle; ferroccl registers user buffers with the network plugin per
//! operation (`FERROCCL_NET_USER_SEND_MIN`), so a registration changes nothing
//! else.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::abi::{ncclComm_t, ncclResult_t};
use crate::api::{Fail, guard, store};
use crate::handles;

/// Host allocations are aligned like NCCL's granularity floor (a page).
const HOST_ALIGN: usize = 4096;

enum Alloc {
    Host(Layout),
    Device(ferroccl_kernels::cuda::DeviceBuffer),
}

/// Live allocations by address.
static ALLOCS: Mutex<Option<HashMap<usize, Alloc>>> = Mutex::new(None);

/// `ncclMemAlloc`.
pub(crate) fn alloc(out: *mut *mut c_void, size: usize) -> ncclResult_t {
    guard("ncclMemAlloc", || {
        const OP: &str = "ncclMemAlloc";
        if out.is_null() {
            return Err(Fail::arg(format!("{OP} : ptr argument is NULL")));
        }
        let (ptr, a) = match ferroccl_kernels::cuda::current_device() {
            Ok(dev) => {
                let b = ferroccl_kernels::cuda::DeviceBuffer::alloc(dev.unwrap_or(0), size.max(1))
                    .map_err(|e| Fail::system(format!("{OP}: {size} bytes of device memory: {e}")))?;
                (b.as_ptr(), Alloc::Device(b))
            }
            Err(_) => {
                let layout = Layout::from_size_align(size.max(1), HOST_ALIGN)
                    .map_err(|e| Fail::arg(format!("{OP} : size {size}: {e}")))?;
                // SAFETY: a non-zero size.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                if p.is_null() {
                    return Err(Fail::system(format!(
                        "{OP}: cannot allocate {size} bytes of host memory"
                    )));
                }
                (p, Alloc::Host(layout))
            }
        };
        ALLOCS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(ptr as usize, a);
        store(out, ptr.cast(), OP, "ptr")
    })
}

/// `ncclMemFree`.
pub(crate) fn free(ptr: *mut c_void) -> ncclResult_t {
    guard("ncclMemFree", || {
        if ptr.is_null() {
            return Ok(());
        }
        let a = ALLOCS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .and_then(|m| m.remove(&(ptr as usize)))
            .ok_or_else(|| Fail::arg(format!("ncclMemFree : {ptr:p} was not allocated by ncclMemAlloc")))?;
        match a {
            // SAFETY: allocated above with this layout, and removed from the table once.
            Alloc::Host(layout) => unsafe { std::alloc::dealloc(ptr.cast(), layout) },
            Alloc::Device(b) => drop(b),
        }
        Ok(())
    })
}

/// Registration handles handed out so far (never reused).
static REG_NEXT: AtomicUsize = AtomicUsize::new(1);

/// `ncclCommRegister`.
pub(crate) fn register(comm: ncclComm_t, buff: *mut c_void, size: usize, handle: *mut *mut c_void) -> ncclResult_t {
    guard("ncclCommRegister", || {
        const OP: &str = "ncclCommRegister";
        let e = handles::get(comm, OP)?;
        e.comm(OP)?;
        if buff.is_null() && size > 0 {
            return Err(Fail::arg(format!("{OP} : buff argument is NULL")));
        }
        let h = REG_NEXT.fetch_add(1, Ordering::Relaxed) * 64;
        store(handle, h as *mut c_void, OP, "handle")?;
        e.regs.lock().unwrap_or_else(|p| p.into_inner()).insert(h);
        ferroccl::nccl_info!(
            REG,
            "{OP}: comm {:#x} buffer {buff:p} size {size} handle {h:#x}",
            e.token
        );
        Ok(())
    })
}

/// `ncclCommDeregister`.
pub(crate) fn deregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
    guard("ncclCommDeregister", || {
        const OP: &str = "ncclCommDeregister";
        let e = handles::get(comm, OP)?;
        if !e
            .regs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(handle as usize))
        {
            return Err(Fail::arg(format!(
                "{OP} : handle {handle:p} is not a registration of this communicator"
            )));
        }
        Ok(())
    })
}
