//! An in-process **mock** net plugin (memory queues), used only by this crate's unit
//! tests to check schedules for every collective with threads standing in for
//! ranks. The real tests (multi-process, socket plugin over loopback) live in
//! `core/tests/coll_*.rs`.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::plugin::net::*;

type Queue = Arc<Mutex<VecDeque<Vec<u8>>>>;

struct Listen {
    id: u64,
}
struct SendC {
    q: Queue,
}
struct RecvC {
    q: Queue,
    posted: VecDeque<u64>,
}
enum Req {
    Send,
    Recv {
        comm: *mut RecvC,
        data: *mut u8,
        size: usize,
        id: u64,
        done: Option<usize>,
    },
}

/// The mock plugin.
#[derive(Default)]
pub(crate) struct MemNet {
    info: Option<NetInfo>,
    listeners: Mutex<HashMap<u64, VecDeque<Queue>>>,
    next: AtomicU64,
}

impl MemNet {
    pub(crate) fn new() -> Arc<MemNet> {
        Arc::new(MemNet {
            info: Some(NetInfo {
                name: "Mem".into(),
                version: 12,
                path: PathBuf::from("<mem>"),
                collnet_version: None,
            }),
            ..Default::default()
        })
    }
}

fn raw<T>(b: Box<T>) -> RawComm {
    RawComm(Box::into_raw(b) as *mut c_void)
}

impl NetPlugin for MemNet {
    fn info(&self) -> &NetInfo {
        self.info.as_ref().expect("info")
    }
    fn init_ctx(&self, _: u64, _: &CommConfig) -> NetResult<RawCtx> {
        Ok(RawCtx(std::ptr::null_mut()))
    }
    fn finalize_ctx(&self, _: RawCtx) -> NetResult<()> {
        Ok(())
    }
    fn devices(&self) -> NetResult<usize> {
        Ok(1)
    }
    fn properties(&self, _: usize) -> NetResult<Properties> {
        Ok(Properties::default())
    }
    fn listen(&self, _: RawCtx, _: usize, handle: &mut NetHandle) -> NetResult<RawComm> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.listeners.lock().unwrap().insert(id, VecDeque::new());
        handle[..8].copy_from_slice(&id.to_ne_bytes());
        Ok(raw(Box::new(Listen { id })))
    }
    fn connect(&self, _: RawCtx, _: usize, handle: &mut NetHandle) -> NetResult<Option<RawComm>> {
        let id = u64::from_ne_bytes(handle[..8].try_into().unwrap());
        let q: Queue = Arc::default();
        self.listeners
            .lock()
            .unwrap()
            .get_mut(&id)
            .ok_or_else(|| NetError::Internal("no such listener".into()))?
            .push_back(q.clone());
        Ok(Some(raw(Box::new(SendC { q }))))
    }
    fn accept(&self, listen: RawComm) -> NetResult<Option<RawComm>> {
        // SAFETY: created by `listen`.
        let l = unsafe { &*(listen.0 as *const Listen) };
        let q = self
            .listeners
            .lock()
            .unwrap()
            .get_mut(&l.id)
            .and_then(|v| v.pop_front());
        Ok(q.map(|q| {
            raw(Box::new(RecvC {
                q,
                posted: VecDeque::new(),
            }))
        }))
    }
    fn reg_mr(&self, _: RawComm, _: *mut u8, _: usize, _: PtrType) -> NetResult<RawMr> {
        Ok(RawMr(std::ptr::null_mut()))
    }
    fn dereg_mr(&self, _: RawComm, _: RawMr) -> NetResult<()> {
        Ok(())
    }
    fn isend(
        &self,
        comm: RawComm,
        data: *mut u8,
        size: usize,
        _: i32,
        _: Option<RawMr>,
    ) -> NetResult<Option<RawRequest>> {
        // SAFETY: created by `connect`.
        let c = unsafe { &*(comm.0 as *const SendC) };
        // SAFETY: data valid for `size` bytes by the isend contract.
        let v = unsafe { std::slice::from_raw_parts(data, size) }.to_vec();
        c.q.lock().unwrap().push_back(v);
        Ok(Some(RawRequest(Box::into_raw(Box::new(Req::Send)) as *mut c_void)))
    }
    fn irecv(&self, comm: RawComm, slots: &[RecvSlot], _: bool) -> NetResult<Option<RawRequest>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // SAFETY: created by `accept`.
        let c = unsafe { &mut *(comm.0 as *mut RecvC) };
        c.posted.push_back(id);
        let r = Req::Recv {
            comm: comm.0 as *mut RecvC,
            data: slots[0].data,
            size: slots[0].size,
            id,
            done: None,
        };
        Ok(Some(RawRequest(Box::into_raw(Box::new(r)) as *mut c_void)))
    }
    fn iflush(&self, _: RawComm, _: &[RecvSlot]) -> NetResult<Option<RawRequest>> {
        Ok(None)
    }
    fn test(&self, req: RawRequest, sizes: &mut [usize]) -> NetResult<bool> {
        // SAFETY: created by isend/irecv, freed here once done.
        let r = unsafe { &mut *(req.0 as *mut Req) };
        let done = match r {
            Req::Send => Some(0),
            Req::Recv {
                comm,
                data,
                size,
                id,
                done,
            } => {
                if done.is_none() {
                    // SAFETY: the recv comm outlives its requests.
                    let c = unsafe { &mut **comm };
                    let msg = if c.posted.front() == Some(id) {
                        c.q.lock().unwrap().pop_front()
                    } else {
                        None
                    };
                    if let Some(m) = msg {
                        if m.len() > *size {
                            return Err(NetError::InvalidUsage("truncated".into()));
                        }
                        // SAFETY: posted buffer valid for `size` bytes.
                        unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), *data, m.len()) };
                        c.posted.pop_front();
                        *done = Some(m.len());
                    }
                }
                *done
            }
        };
        match done {
            Some(n) => {
                if let Some(s) = sizes.first_mut() {
                    *s = n;
                }
                // SAFETY: allocated by isend/irecv.
                drop(unsafe { Box::from_raw(req.0 as *mut Req) });
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn close_send(&self, comm: RawComm) -> NetResult<()> {
        // SAFETY: created by `connect`.
        drop(unsafe { Box::from_raw(comm.0 as *mut SendC) });
        Ok(())
    }
    fn close_recv(&self, comm: RawComm) -> NetResult<()> {
        // SAFETY: created by `accept`.
        drop(unsafe { Box::from_raw(comm.0 as *mut RecvC) });
        Ok(())
    }
    fn close_listen(&self, listen: RawComm) -> NetResult<()> {
        // SAFETY: created by `listen`.
        drop(unsafe { Box::from_raw(listen.0 as *mut Listen) });
        Ok(())
    }
    fn has_dmabuf(&self) -> bool {
        false
    }
}
