//! The one-sided calls of NCCL 2.30.7's `nccl.h` (`ncclCommWindowRegister`,
//! `ncclCommWindowDeregister`, `ncclWinGetUserPtr`, `ncclPutSignal`, `ncclSignal`,
//! `ncclWaitSignal`) on the runtime's `Comm` one-sided API (its module docs say how
//! they run; inside `ncclGroupStart`/`ncclGroupEnd` they are checked at the call and
//! issued at the group's end, through the runtime's group). An `ncclWindow_t` is a
//! key into this library's table of live windows, so a NULL, stale or foreign
//! handle is reported, never dereferenced.

use std::collections::HashMap;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;

use ferroccl::{WaitSignalDesc, Window};

use crate::abi::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclResult_t, ncclWaitSignalDesc_t, ncclWindow_t};
use crate::api::{Fail, R, guard, store};
use crate::colls::rma_call;
use crate::handles;

/// Live windows by handle value, each with the communicator handle it belongs to.
type Table = HashMap<usize, (usize, Window)>;

/// The last handle number given out, and the live windows.
static WINDOWS: Mutex<(usize, Option<Table>)> = Mutex::new((0, None));

fn windows<T>(f: impl FnOnce(&mut usize, &mut Table) -> T) -> T {
    let mut g = WINDOWS.lock().unwrap_or_else(|e| e.into_inner());
    let (next, map) = &mut *g;
    f(next, map.get_or_insert_with(HashMap::new))
}

fn window(op: &str, comm: ncclComm_t, win: ncclWindow_t) -> R<Window> {
    windows(|_, m| {
        m.get(&(win as usize))
            .filter(|(c, _)| *c == comm as usize)
            .map(|(_, w)| w.clone())
    })
    .ok_or_else(|| {
        Fail::arg(format!(
            "{op} : window {win:p} is not a window registered on this communicator"
        ))
    })
}

fn rank(op: &str, what: &str, v: c_int) -> R<usize> {
    usize::try_from(v).map_err(|_| Fail::arg(format!("{op} : invalid {what} {v}")))
}

fn rt(op: &str) -> impl Fn(ferroccl::Error) -> Fail + '_ {
    move |e| Fail::runtime(op, &e)
}

/// `ncclCommWindowRegister` (collective). `winFlags` (`NCCL_WIN_*`) is accepted as
/// given: ferroccl's windows are always symmetric registrations.
pub(crate) fn window_register(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    win: *mut ncclWindow_t,
    _flags: c_int,
) -> ncclResult_t {
    const OP: &str = "ncclCommWindowRegister";
    guard(OP, || {
        if win.is_null() {
            return Err(Fail::arg(format!("{OP} : win argument is NULL")));
        }
        let w = handles::with_ready(comm, OP, |_, c| {
            // SAFETY: NCCL's contract: `buff` holds `size` bytes until deregistration.
            unsafe { c.window_register(buff.cast(), size) }.map_err(rt(OP))
        })?;
        let h = windows(|next, m| {
            *next += 1;
            let h = *next << 4;
            m.insert(h, (comm as usize, w));
            h
        });
        store(win, h as ncclWindow_t, OP, "win")
    })
}

/// `ncclCommWindowDeregister` (collective).
pub(crate) fn window_deregister(comm: ncclComm_t, win: ncclWindow_t) -> ncclResult_t {
    const OP: &str = "ncclCommWindowDeregister";
    guard(OP, || {
        let w = window(OP, comm, win)?;
        windows(|_, m| m.remove(&(win as usize)));
        handles::with_ready(comm, OP, |_, c| c.window_deregister(w).map_err(rt(OP)))
    })
}

/// `ncclWinGetUserPtr`.
pub(crate) fn win_get_user_ptr(comm: ncclComm_t, win: ncclWindow_t, out: *mut *mut c_void) -> ncclResult_t {
    const OP: &str = "ncclWinGetUserPtr";
    guard(OP, || {
        let w = window(OP, comm, win)?;
        store(out, w.user_ptr().cast(), OP, "outUserPtr")
    })
}

/// `ncclPutSignal`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn put_signal(
    localbuff: *const c_void,
    count: usize,
    dt: ncclDataType_t,
    peer: c_int,
    peer_win: ncclWindow_t,
    peer_win_offset: usize,
    sig_idx: c_int,
    ctx: c_int,
    flags: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    const OP: &str = "PutSignal";
    rma_call(("ncclPutSignal", OP), comm, stream, |c, s| {
        let w = window(OP, comm, peer_win)?;
        let dtype = ferroccl::DataType::ALL
            .get(dt as usize)
            .copied()
            .filter(|_| dt >= 0)
            .ok_or_else(|| Fail::arg(format!("{OP} : invalid type {dt}")))?;
        let (p, si, cx) = (
            rank(OP, "peer", peer)?,
            rank(OP, "sigIdx", sig_idx)?,
            rank(OP, "ctx", ctx)?,
        );
        // SAFETY: NCCL's contract: `localbuff` holds `count` elements until the stream is done.
        unsafe { c.put_signal(localbuff.cast(), count, dtype, p, &w, peer_win_offset, si, cx, flags, s) }
            .map_err(rt(OP))
    })
}

/// `ncclSignal`.
pub(crate) fn signal(
    peer: c_int,
    sig_idx: c_int,
    ctx: c_int,
    flags: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    const OP: &str = "Signal";
    rma_call(("ncclSignal", OP), comm, stream, |c, s| {
        let (p, si, cx) = (
            rank(OP, "peer", peer)?,
            rank(OP, "sigIdx", sig_idx)?,
            rank(OP, "ctx", ctx)?,
        );
        c.signal(p, si, cx, flags, s).map_err(rt(OP))
    })
}

/// `ncclWaitSignal`.
pub(crate) fn wait_signal(
    n_desc: c_int,
    descs: *mut ncclWaitSignalDesc_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    const OP: &str = "WaitSignal";
    rma_call(("ncclWaitSignal", OP), comm, stream, |c, s| {
        let n = rank(OP, "nDesc", n_desc)?;
        if n > 0 && descs.is_null() {
            return Err(Fail::arg(format!("{OP} : signalDescs is NULL with nDesc {n}")));
        }
        let raw = if n == 0 {
            &[][..]
        } else {
            // SAFETY: NCCL's contract: `descs` holds `nDesc` descriptors.
            unsafe { std::slice::from_raw_parts(descs, n) }
        };
        let d = raw
            .iter()
            .map(|d| {
                Ok(WaitSignalDesc {
                    op_cnt: u64::try_from(d.opCnt)
                        .map_err(|_| Fail::arg(format!("{OP} : invalid opCnt {}", d.opCnt)))?,
                    peer: rank(OP, "peer", d.peer)?,
                    sig_idx: rank(OP, "sigIdx", d.sigIdx)?,
                    ctx: rank(OP, "ctx", d.ctx)?,
                })
            })
            .collect::<R<Vec<_>>>()?;
        c.wait_signal(&d, s).map_err(rt(OP))
    })
}
