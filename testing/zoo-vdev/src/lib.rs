//! Conformance zoo: **makeVDevice gets the index wrong.** An in-process loopback net
//! plugin built with the SDK (every `ncclNetPlugin` version; vtable `ZooVdev`) with two
//! devices, `zoo0` and `zoo1`. Its `makeVDevice` records the virtual device but answers
//! with the index of the first member (an existing physical device) instead of the new
//! one (`devices()` − 1), which is what `net.vdevice` catches. With
//! `FERROCCL_ZOO_VDEV=good` it answers correctly: the control that passes that check.
//!
//! Connections are in-process: `listen` registers a listener under an id written into
//! the handle, `connect` queues a pipe the listener's `accept` pops, `isend` copies the
//! bytes into the pipe under its sequence number, and the *k*-th `irecv` (one buffer)
//! takes the *k*-th message (sends and receives match in posting order). Being
//! in-process, it cannot pass the checks that need a peer process; the test compares
//! its verdicts with the correct control's, which differ in `vdev.make` only.

use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferroccl_plugin_api::sdk::{
    Buf, CommConfig, CommMut, Handle, Net, NetError, NetResult, Properties, PtrType, RecvBuf, TestStatus,
};

type Pipe = Arc<Mutex<HashMap<u64, Vec<u8>>>>;
type Pending = Arc<Mutex<VecDeque<Pipe>>>;

static LISTENERS: Mutex<Option<HashMap<u64, Pending>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Physical devices.
const NPHYS: usize = 2;

fn poisoned<T>(_: T) -> NetError {
    NetError::Internal("ZooVdev: a lock was poisoned".into())
}

/// The plugin: its virtual devices' members.
pub struct ZooVdev {
    vdevs: Mutex<Vec<Vec<usize>>>,
    good: bool,
}

/// A listening endpoint.
pub struct Listen {
    id: u64,
    pending: Pending,
}

/// One end of a connection: its pipe and how many messages it posted.
pub struct Comm {
    pipe: Pipe,
    seq: u64,
}

/// A request: a finished send, or a receive waiting for its message.
pub enum Request {
    /// Bytes sent.
    Send(usize),
    /// Where the message goes.
    Recv {
        /// The connection's queue.
        pipe: Pipe,
        /// The posted buffer.
        buf: Buf,
        /// The message's sequence number.
        seq: u64,
    },
}

impl ZooVdev {
    fn members(&self, dev: usize) -> NetResult<Vec<usize>> {
        if dev < NPHYS {
            return Ok(vec![dev]);
        }
        let v = self.vdevs.lock().map_err(poisoned)?;
        v.get(dev - NPHYS)
            .cloned()
            .ok_or_else(|| NetError::InvalidArgument(format!("ZooVdev: no device {dev}")))
    }
}

impl Net for ZooVdev {
    const NAME: &'static CStr = c"ZooVdev";
    type Ctx = ();
    type ListenComm = Listen;
    type SendComm = Comm;
    type RecvComm = Comm;
    type Mr = ();
    type Request = Request;

    fn new() -> NetResult<Self> {
        Ok(ZooVdev {
            vdevs: Mutex::new(Vec::new()),
            good: std::env::var("FERROCCL_ZOO_VDEV").as_deref() == Ok("good"),
        })
    }

    fn init(&self, comm_id: u64, _config: &CommConfig) -> NetResult<()> {
        ferroccl_plugin_api::net_info!(
            ferroccl_plugin_api::log::NCCL_INIT,
            "ZooVdev init comm {comm_id:#x} ({})",
            if self.good {
                "correct makeVDevice"
            } else {
                "makeVDevice answers a member's index"
            }
        );
        Ok(())
    }

    fn devices(&self) -> NetResult<usize> {
        Ok(NPHYS + self.vdevs.lock().map_err(poisoned)?.len())
    }

    fn properties(&self, dev: usize) -> NetResult<Properties> {
        let m = self.members(dev)?;
        Ok(Properties {
            name: m.iter().map(|d| format!("zoo{d}")).collect::<Vec<_>>().join("+"),
            guid: 0x200 + m[0] as u64,
            speed: 10_000 * m.len() as i32,
            vdevs: m.iter().map(|&d| d as i32).collect(),
            ..Properties::default()
        })
    }

    fn make_vdevice(&self, devs: &[i32]) -> NetResult<usize> {
        let m = devs
            .iter()
            .map(|&d| usize::try_from(d).ok().filter(|&d| d < NPHYS))
            .collect::<Option<Vec<_>>>()
            .filter(|m| !m.is_empty())
            .ok_or_else(|| NetError::InvalidUsage(format!("ZooVdev: cannot fuse {devs:?}")))?;
        let mut v = self.vdevs.lock().map_err(poisoned)?;
        v.push(m.clone());
        // The defect: the first member's index instead of the new device's.
        Ok(if self.good { NPHYS + v.len() - 1 } else { m[0] })
    }

    fn listen(&self, _ctx: &(), dev: usize, handle: &mut Handle) -> NetResult<Listen> {
        self.members(dev)?;
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let pending = Pending::default();
        LISTENERS
            .lock()
            .map_err(poisoned)?
            .get_or_insert_with(HashMap::new)
            .insert(id, pending.clone());
        handle.fill(0);
        handle[..8].copy_from_slice(&id.to_le_bytes());
        Ok(Listen { id, pending })
    }

    fn connect(&self, _ctx: &(), _dev: usize, handle: &mut Handle, _c: &CommConfig) -> NetResult<Option<Comm>> {
        let id = u64::from_le_bytes(handle[..8].try_into().expect("8 bytes"));
        let l = LISTENERS
            .lock()
            .map_err(poisoned)?
            .as_ref()
            .and_then(|m| m.get(&id).cloned());
        let l = l.ok_or_else(|| NetError::Remote(format!("ZooVdev: no listener with id {id}")))?;
        let pipe = Pipe::default();
        l.lock().map_err(poisoned)?.push_back(pipe.clone());
        Ok(Some(Comm { pipe, seq: 0 }))
    }

    fn accept(&self, listen: &mut Listen) -> NetResult<Option<Comm>> {
        Ok(listen
            .pending
            .lock()
            .map_err(poisoned)?
            .pop_front()
            .map(|pipe| Comm { pipe, seq: 0 }))
    }

    fn close_listen(&self, listen: Listen) -> NetResult<()> {
        if let Ok(mut reg) = LISTENERS.lock()
            && let Some(m) = reg.as_mut()
        {
            m.remove(&listen.id);
        }
        Ok(())
    }

    fn reg_mr(&self, _comm: CommMut<'_, Self>, _buf: Buf, ty: PtrType) -> NetResult<()> {
        match ty {
            PtrType::Host => Ok(()),
            _ => Err(NetError::InvalidUsage("ZooVdev registers host memory only".into())),
        }
    }

    fn isend(&self, comm: &mut Comm, buf: Buf, _tag: i32, _mr: Option<&()>) -> NetResult<Option<Request>> {
        // SAFETY: the buffer is valid until the request completes (NCCL's contract).
        let data = unsafe { buf.as_slice() }.to_vec();
        comm.pipe.lock().map_err(poisoned)?.insert(comm.seq, data);
        comm.seq += 1;
        Ok(Some(Request::Send(buf.len)))
    }

    fn irecv(&self, comm: &mut Comm, bufs: &[RecvBuf<'_, ()>]) -> NetResult<Option<Request>> {
        let [b] = bufs else {
            return Err(NetError::InvalidUsage(format!(
                "ZooVdev: irecv of {} buffers (maxRecvs is 1)",
                bufs.len()
            )));
        };
        comm.seq += 1;
        Ok(Some(Request::Recv {
            pipe: comm.pipe.clone(),
            buf: b.buf,
            seq: comm.seq - 1,
        }))
    }

    fn test(&self, req: &mut Request) -> NetResult<TestStatus> {
        match req {
            Request::Send(n) => Ok(TestStatus::done1(*n)),
            Request::Recv { pipe, buf, seq } => {
                let Some(data) = pipe.lock().map_err(poisoned)?.remove(seq) else {
                    return Ok(TestStatus::Pending);
                };
                if data.len() > buf.len {
                    return Err(NetError::InvalidUsage(format!(
                        "ZooVdev: message of {} bytes > posted buffer of {}",
                        data.len(),
                        buf.len
                    )));
                }
                // SAFETY: the posted receive buffer is valid and ours until completion.
                unsafe { buf.as_mut_slice()[..data.len()].copy_from_slice(&data) };
                Ok(TestStatus::done1(data.len()))
            }
        }
    }
}

ferroccl_plugin_api::export_net_plugin!(ZooVdev);
