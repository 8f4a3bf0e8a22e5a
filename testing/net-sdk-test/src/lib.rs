//! In-process loopback test plugin built with the SDK: `export_net_plugin!`
//! exports `ncclNetPlugin_v6` … `ncclNetPlugin_v12` from the one [`SdkLoop`] impl.
//!
//! * vtable name `"SdkLoop"`; 1 device (`sdkloop0`), host memory, `maxRecvs` 4;
//! * `listen` registers a listener in a process-global registry under an id written
//!   into the handle; `connect` returns "not ready" once (progress kept in the
//!   handle, as NCCL allows), then queues a pipe the listener's `accept` pops;
//! * `isend` copies the bytes into the pipe; a (grouped) `irecv` takes the messages
//!   whose tag matches each posted buffer, in order;
//! * failure hook: an `isend` with tag [`PANIC_TAG`] panics inside the plugin (the
//!   SDK shim must turn that into `ncclInternalError`, never an abort);
//! * `init` logs `"SdkLoop init comm <id>"` at INFO through NCCL's logger;
//! * the traffic class of the last `init` and `connect` (`ncclNetCommConfig_t`, v10
//!   connect / v11+ init) is kept and read back with the C function
//!   `ferrocclTestSdkLoopTrafficClass(which)` (0: init, 1: connect; -2: never called);
//! * the library also exports a do-nothing tuner ([`SdkLoopTuner`],
//!   `ncclTunerPlugin_v2` … `_v6`), to test NCCL's tuner fallback into the net
//!   plugin's library.

use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ferroccl_plugin_api::abi::ncclFunc_t;
use ferroccl_plugin_api::log::NCCL_INIT;
use ferroccl_plugin_api::sdk::{
    Buf, CommConfig, CommMut, CostTable, Handle, MAX_RECVS, Net, NetError, NetResult, Properties, PtrType, RecvBuf,
    TestStatus, Tuner, TunerInit,
};

/// `isend` with this tag panics inside the plugin.
pub const PANIC_TAG: i32 = 0x0BAD_F00D;

type Pipe = Arc<Mutex<VecDeque<(i32, Vec<u8>)>>>;
type Pending = Arc<Mutex<VecDeque<Pipe>>>;

static LISTENERS: Mutex<Option<HashMap<u64, Pending>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Traffic class of the last `init` / `connect` (-2: never called).
static INIT_TC: AtomicI32 = AtomicI32::new(-2);
static CONNECT_TC: AtomicI32 = AtomicI32::new(-2);

/// The traffic class the last `init` (`which` 0) or `connect` (1) received; -2 when
/// never called. A test-only export, not NCCL's ABI.
#[unsafe(no_mangle)]
pub extern "C" fn ferrocclTestSdkLoopTrafficClass(which: std::ffi::c_int) -> std::ffi::c_int {
    match which {
        0 => INIT_TC.load(Ordering::SeqCst),
        _ => CONNECT_TC.load(Ordering::SeqCst),
    }
}

/// The plugin.
pub struct SdkLoop;

/// Per-communicator context.
pub struct Ctx;

/// A listening endpoint.
pub struct Listen {
    id: u64,
    pending: Pending,
}

/// Send side of a connection.
pub struct SendComm {
    pipe: Pipe,
}

/// Receive side of a connection.
pub struct RecvComm {
    pipe: Pipe,
}

/// A registration (remembers the registered length).
pub struct Mr(pub usize);

/// An outstanding request.
pub enum Request {
    /// A send of this many bytes (already copied).
    Send(usize),
    /// A grouped receive.
    Recv {
        /// The pipe to take messages from.
        pipe: Pipe,
        /// Posted buffers and their tags.
        bufs: Vec<(Buf, i32)>,
        /// Received sizes so far.
        got: Vec<Option<usize>>,
    },
}

impl Net for SdkLoop {
    const NAME: &'static CStr = c"SdkLoop";
    type Ctx = Ctx;
    type ListenComm = Listen;
    type SendComm = SendComm;
    type RecvComm = RecvComm;
    type Mr = Mr;
    type Request = Request;

    fn new() -> NetResult<Self> {
        Ok(SdkLoop)
    }

    fn init(&self, comm_id: u64, config: &CommConfig) -> NetResult<Ctx> {
        INIT_TC.store(config.traffic_class, Ordering::SeqCst);
        ferroccl_plugin_api::net_info!(NCCL_INIT, "SdkLoop init comm {comm_id:#x}");
        Ok(Ctx)
    }

    fn devices(&self) -> NetResult<usize> {
        Ok(1)
    }

    fn properties(&self, dev: usize) -> NetResult<Properties> {
        Ok(Properties {
            name: format!("sdkloop{dev}"),
            pci_path: None,
            guid: 0x5d4,
            speed: 4321,
            port: 1,
            max_recvs: 4,
            max_p2p_bytes: 1 << 33,
            max_multi_request_size: 2,
            rail_id: 3,
            plane_id: 1,
            ..Properties::default()
        })
    }

    fn listen(&self, _ctx: &Ctx, _dev: usize, handle: &mut Handle) -> NetResult<Listen> {
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let pending = Pending::default();
        let mut reg = LISTENERS
            .lock()
            .map_err(|_| NetError::Internal("registry poisoned".into()))?;
        reg.get_or_insert_with(HashMap::new).insert(id, pending.clone());
        handle.fill(0);
        handle[..8].copy_from_slice(&id.to_le_bytes());
        Ok(Listen { id, pending })
    }

    fn connect(&self, _ctx: &Ctx, _dev: usize, handle: &mut Handle, c: &CommConfig) -> NetResult<Option<SendComm>> {
        CONNECT_TC.store(c.traffic_class, Ordering::SeqCst);
        if handle[8] == 0 {
            handle[8] = 1; // not ready yet; NCCL calls again with the same handle
            return Ok(None);
        }
        let mut idb = [0u8; 8];
        idb.copy_from_slice(&handle[..8]);
        let id = u64::from_le_bytes(idb);
        let reg = LISTENERS
            .lock()
            .map_err(|_| NetError::Internal("registry poisoned".into()))?;
        let l = reg.as_ref().and_then(|m| m.get(&id).cloned());
        let l = l.ok_or_else(|| NetError::Remote(format!("no SdkLoop listener with id {id}")))?;
        let pipe = Pipe::default();
        l.lock()
            .map_err(|_| NetError::Internal("poisoned".into()))?
            .push_back(pipe.clone());
        Ok(Some(SendComm { pipe }))
    }

    fn accept(&self, listen: &mut Listen) -> NetResult<Option<RecvComm>> {
        let mut q = listen
            .pending
            .lock()
            .map_err(|_| NetError::Internal("poisoned".into()))?;
        Ok(q.pop_front().map(|pipe| RecvComm { pipe }))
    }

    fn close_listen(&self, listen: Listen) -> NetResult<()> {
        if let Ok(mut reg) = LISTENERS.lock()
            && let Some(m) = reg.as_mut()
        {
            m.remove(&listen.id);
        }
        Ok(())
    }

    fn reg_mr(&self, _comm: CommMut<'_, Self>, buf: Buf, ty: PtrType) -> NetResult<Mr> {
        if ty != PtrType::Host {
            return Err(NetError::InvalidUsage("SdkLoop registers host memory only".into()));
        }
        Ok(Mr(buf.len))
    }

    fn isend(&self, comm: &mut SendComm, buf: Buf, tag: i32, _mr: Option<&Mr>) -> NetResult<Option<Request>> {
        if tag == PANIC_TAG {
            panic!("SdkLoop: isend with PANIC_TAG panics on purpose");
        }
        // SAFETY: NCCL contract: the buffer is valid until the request completes.
        let data = unsafe { buf.as_slice() }.to_vec();
        comm.pipe
            .lock()
            .map_err(|_| NetError::Internal("poisoned".into()))?
            .push_back((tag, data));
        Ok(Some(Request::Send(buf.len)))
    }

    fn irecv(&self, comm: &mut RecvComm, bufs: &[RecvBuf<'_, Mr>]) -> NetResult<Option<Request>> {
        Ok(Some(Request::Recv {
            pipe: comm.pipe.clone(),
            bufs: bufs.iter().map(|b| (b.buf, b.tag)).collect(),
            got: vec![None; bufs.len()],
        }))
    }

    fn test(&self, req: &mut Request) -> NetResult<TestStatus> {
        match req {
            Request::Send(n) => Ok(TestStatus::done1(*n)),
            Request::Recv { pipe, bufs, got } => {
                let mut q = pipe.lock().map_err(|_| NetError::Internal("poisoned".into()))?;
                for (i, (buf, tag)) in bufs.iter().enumerate() {
                    if got[i].is_some() {
                        continue;
                    }
                    if let Some(pos) = q.iter().position(|(t, _)| t == tag) {
                        let Some((_, data)) = q.remove(pos) else { continue };
                        if data.len() > buf.len {
                            return Err(NetError::InvalidUsage(format!(
                                "message of {} bytes > posted buffer of {}",
                                data.len(),
                                buf.len
                            )));
                        }
                        // SAFETY: the posted receive buffer is valid and ours until completion.
                        unsafe { buf.as_mut_slice()[..data.len()].copy_from_slice(&data) };
                        got[i] = Some(data.len());
                    }
                }
                if got.iter().all(Option::is_some) {
                    let mut sizes = [0; MAX_RECVS];
                    for (s, g) in sizes.iter_mut().zip(got.iter()) {
                        *s = g.unwrap_or(0);
                    }
                    Ok(TestStatus::Done { n: got.len(), sizes })
                } else {
                    Ok(TestStatus::Pending)
                }
            }
        }
    }

    fn make_vdevice(&self, devs: &[i32]) -> NetResult<usize> {
        Ok(100 + devs.len())
    }
}

ferroccl_plugin_api::export_net_plugin!(SdkLoop);

/// A tuner that keeps NCCL's choices, shipped inside the net plugin library.
pub struct SdkLoopTuner;

impl Tuner for SdkLoopTuner {
    const NAME: &'static CStr = c"SdkLoopTuner";

    fn init(_info: TunerInit<'_>) -> NetResult<Self> {
        Ok(SdkLoopTuner)
    }

    fn get_coll_info(
        &self,
        _coll: ncclFunc_t,
        _n_bytes: usize,
        _num_pipe_ops: i32,
        _reg_buff: bool,
        _costs: &mut CostTable<'_>,
        _n_channels: &mut i32,
    ) -> NetResult<()> {
        Ok(())
    }
}

ferroccl_plugin_api::export_tuner_plugin!(SdkLoopTuner);
