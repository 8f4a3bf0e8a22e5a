//! TCP network plugin for NCCL and ferroccl (`libnccl-net-socket.so`).
//!
//! The vtable name is **`FerrocclSocket`**, so it can be told apart from NCCL's
//! internal `Socket` transport: select it with
//! `NCCL_NET_PLUGIN=socket` (or the path of the `.so`) and `NCCL_NET=FerrocclSocket`.
//!
//! * [`proto`] — the wire protocol as a pure state machine (handshake, framing,
//!   task splitting, tag matching), with unit and property tests.
//! * [`io`] — sockets, non-blocking connection setup, helper threads.
//! * [`dev`] — interfaces as devices (`NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`).
//! * [`config`] — the `NCCL_SOCKET_*` parameters.
//! * [`wait`] — when `test` may sleep in the kernel (idle tracking per thread).
//! * [`vdev`] — virtual devices fusing several interfaces (`makeVDevice`), connections striped over them.
//!
//! Differences from NCCL's socket transport: helper threads and data streams by
//! default on machines with more than [`config::SMALL_MACHINE_CORES`] cores
//! ([`config::AUTO_NTHREADS`] × [`config::AUTO_NSOCKS_PERTHREAD`]) instead of none
//! ([`config::auto_streams`]); a `test` that sleeps in the kernel (bounded by
//! [`wait::TEST_WAIT`]) when its calling thread has nothing else to progress; grouped receives of up to 8 buffers with tag matching (`maxRecvs` = 8);
//! requests may be tested in any order; 64-bit message sizes; `iflush` is a no-op
//! rather than an error; a handshake with a per-connection id, so concurrent
//! connects to one listen socket and stray TCP connections cannot mix streams.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Mutex;

use ferroccl_plugin_api::abi;
use ferroccl_plugin_api::sdk::net_profiler::{NetEvent, step_handle};
use ferroccl_plugin_api::sdk::{
    Buf, CommConfig, CommMut, Handle, MAX_RECVS, Net, NetError, NetResult, Properties, PtrType, RecvBuf, TestStatus,
};

pub mod config;
pub mod dev;
pub mod io;
pub mod proto;
pub mod rma;
pub mod vdev;
pub mod wait;

pub use config::Config;
pub use io::{Listener, RecvComm, Request, SendComm};

/// Largest message size advertised (`maxP2pBytes`): NCCL's cap, 2^40 bytes
/// (sizes are 64-bit on the wire).
pub const MAX_P2P_BYTES: usize = 1 << 40;
/// `maxCollBytes` advertised, bytes (NCCL's value).
pub const MAX_COLL_BYTES: usize = 1 << 29;

/// A registration: the socket plugin needs none, so it only remembers the range.
#[derive(Debug, Clone, Copy)]
pub struct SocketMr {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

/// The plugin: its configuration, its devices, and the connects in progress.
pub struct SocketNet {
    cfg: Config,
    devs: Vec<dev::Iface>,
    /// Virtual devices (`makeVDevice`): their members, numbered after `devs`.
    vdevs: Mutex<Vec<Vec<usize>>>,
    connects: Mutex<HashMap<u64, io::Connecting>>,
}

impl std::fmt::Debug for SocketNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketNet")
            .field("cfg", &self.cfg)
            .field("devs", &self.devs)
            .finish()
    }
}

impl SocketNet {
    /// A plugin with an explicit configuration (tests, embedding); [`Net::new`]
    /// uses [`Config::from_env`].
    pub fn with_config(cfg: Config) -> SocketNet {
        let all = dev::system_interfaces(cfg.family);
        let devs = dev::select(&all, cfg.ifname.as_deref());
        SocketNet::with_interfaces(cfg, devs)
    }

    /// A plugin over the given interfaces, in device order (tests: e.g. several
    /// addresses of `lo` as separate devices to fuse).
    pub fn with_interfaces(cfg: Config, devs: Vec<dev::Iface>) -> SocketNet {
        for (i, d) in devs.iter().enumerate() {
            ferroccl_plugin_api::net_info!(
                ferroccl_plugin_api::log::NCCL_INIT | ferroccl_plugin_api::log::NCCL_NET,
                "NET/FerrocclSocket: device {i}: {} {}",
                d.name,
                d.ip
            );
        }
        SocketNet {
            cfg,
            devs,
            vdevs: Mutex::new(Vec::new()),
            connects: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The selected interfaces, in device order.
    pub fn interfaces(&self) -> &[dev::Iface] {
        &self.devs
    }

    fn dev(&self, dev: usize) -> NetResult<&dev::Iface> {
        self.devs.get(dev).ok_or_else(|| {
            NetError::InvalidArgument(format!(
                "NET/FerrocclSocket: device {dev} (expected < {})",
                self.devs.len()
            ))
        })
    }

    /// The members of device `dev`: itself for an interface, its interfaces for a
    /// virtual device.
    fn members(&self, dev: usize) -> NetResult<Vec<usize>> {
        if dev < self.devs.len() {
            return Ok(vec![dev]);
        }
        let v = self.vdevs.lock().unwrap_or_else(|p| p.into_inner());
        v.get(dev - self.devs.len()).cloned().ok_or_else(|| {
            NetError::InvalidArgument(format!(
                "NET/FerrocclSocket: device {dev} (expected < {})",
                self.devs.len() + v.len()
            ))
        })
    }

    /// `getProperties` of interface `dev`.
    fn phys_properties(&self, dev: usize) -> NetResult<Properties> {
        let d = self.dev(dev)?;
        Ok(Properties {
            name: d.name.clone(),
            pci_path: dev::pci_path(&d.name),
            guid: dev as u64,
            ptr_support: ferroccl_plugin_api::abi::NCCL_PTR_HOST,
            reg_is_global: true,
            force_flush: false,
            speed: dev::speed_mbps(&d.name),
            port: 0,
            latency: 0.0,
            max_comms: 65_536,
            max_recvs: MAX_RECVS as i32,
            vdevs: vec![dev as i32],
            max_p2p_bytes: MAX_P2P_BYTES,
            max_coll_bytes: MAX_COLL_BYTES,
            max_multi_request_size: 1,
            ..Properties::default()
        })
    }
}

impl Net for SocketNet {
    const NAME: &'static CStr = c"FerrocclSocket";
    type Ctx = ();
    type ListenComm = Listener;
    type SendComm = SendComm;
    type RecvComm = RecvComm;
    type Mr = SocketMr;
    type Request = ProfRequest;

    fn new() -> NetResult<Self> {
        Ok(SocketNet::with_config(Config::from_env().clone()))
    }

    fn init(&self, _comm_id: u64, _config: &CommConfig) -> NetResult<()> {
        Ok(())
    }

    fn devices(&self) -> NetResult<usize> {
        Ok(self.devs.len() + self.vdevs.lock().unwrap_or_else(|p| p.into_inner()).len())
    }

    fn properties(&self, dev: usize) -> NetResult<Properties> {
        let m = self.members(dev)?;
        if dev < self.devs.len() {
            return self.phys_properties(dev);
        }
        let props = m
            .iter()
            .map(|&d| self.phys_properties(d))
            .collect::<NetResult<Vec<_>>>()?;
        Ok(vdev::properties(&props, &m))
    }

    fn make_vdevice(&self, devs: &[i32]) -> NetResult<usize> {
        let m = vdev::check_members(devs, &self.devs)?;
        let mut v = self.vdevs.lock().unwrap_or_else(|p| p.into_inner());
        v.push(m.clone());
        let d = self.devs.len() + v.len() - 1;
        drop(v);
        let p = self.properties(d)?;
        ferroccl_plugin_api::net_info!(
            ferroccl_plugin_api::log::NCCL_NET,
            "NET/FerrocclSocket : Made virtual device [{d}] name={} speed={} ndevs={}",
            p.name,
            p.speed,
            m.len()
        );
        Ok(d)
    }

    fn listen(&self, _ctx: &(), dev: usize, handle: &mut Handle) -> NetResult<Listener> {
        let m = self.members(dev)?;
        if m.len() == 1 {
            let d = self.dev(m[0])?;
            let l = Listener::bind(&self.cfg, d.ip, d.scope_id)?;
            l.info().encode(handle);
            return Ok(l);
        }
        let addrs: Vec<_> = m.iter().map(|&d| vdev::listen_addr(&self.devs[d])).collect();
        let (ns, nt) = vdev::stripe_streams(self.cfg.nstreams, self.cfg.nthreads, m.len());
        let l = Listener::bind_striped(&self.cfg, &addrs, ns, nt)?;
        l.info().encode(handle);
        vdev::encode_stripe(handle, &l.stripe_addrs())?;
        Ok(l)
    }

    fn connect(&self, _ctx: &(), _dev: usize, handle: &mut Handle, config: &CommConfig) -> NetResult<Option<SendComm>> {
        let mut reg = self.connects.lock().unwrap_or_else(|p| p.into_inner());
        let token = match proto::scratch_token(handle).filter(|t| reg.contains_key(t)) {
            Some(t) => t,
            None => {
                let info = proto::HandleInfo::decode(handle).map_err(|e| NetError::InvalidArgument(e.to_string()))?;
                let mut t = io::random_u64();
                while reg.contains_key(&t) {
                    t = t.wrapping_add(1);
                }
                let stripe = vdev::decode_stripe(handle)?;
                // The traffic class (v10 connect's config, v11+ the context's) marks every socket.
                let c = io::Connecting::new(info, &self.cfg)
                    .with_stripe(stripe)
                    .with_traffic_class(config.traffic_class)?;
                reg.insert(t, c);
                proto::set_scratch_token(handle, Some(t));
                t
            }
        };
        let res = reg.get_mut(&token).expect("inserted above").progress();
        if !matches!(res, Ok(None)) {
            reg.remove(&token);
            proto::set_scratch_token(handle, None);
        }
        res
    }

    fn accept(&self, listen: &mut Listener) -> NetResult<Option<RecvComm>> {
        listen.accept()
    }

    fn reg_mr(&self, _comm: CommMut<'_, Self>, buf: Buf, ty: PtrType) -> NetResult<SocketMr> {
        match ty {
            PtrType::Host => Ok(SocketMr {
                addr: buf.ptr as usize,
                len: buf.len,
            }),
            other => Err(NetError::InvalidUsage(format!(
                "NET/FerrocclSocket: regMr of {other:?} memory refused: ptrSupport is NCCL_PTR_HOST only"
            ))),
        }
    }

    fn isend(&self, comm: &mut SendComm, buf: Buf, tag: i32, _mr: Option<&SocketMr>) -> NetResult<Option<ProfRequest>> {
        Ok(comm.isend(buf, tag)?.map(|r| ProfRequest::new(r, SOCKET_SEND, buf.len)))
    }

    fn irecv(&self, comm: &mut RecvComm, bufs: &[RecvBuf<'_, SocketMr>]) -> NetResult<Option<ProfRequest>> {
        // On the stack (no allocation per receive); `RecvComm::irecv` refuses more
        // than MAX_RECVS buffers, so a longer list is passed whole to be refused.
        const NONE: (Buf, i32) = (
            Buf {
                ptr: std::ptr::null_mut(),
                len: 0,
            },
            0,
        );
        let mut a = [NONE; MAX_RECVS];
        let n = bufs.len();
        let v: Vec<(Buf, i32)>;
        let pairs: &[(Buf, i32)] = if n <= MAX_RECVS {
            for (d, b) in a.iter_mut().zip(bufs) {
                *d = (b.buf, b.tag);
            }
            &a[..n]
        } else {
            v = bufs.iter().map(|b| (b.buf, b.tag)).collect();
            &v
        };
        let len = bufs.iter().map(|b| b.buf.len).sum();
        Ok(comm.irecv(pairs)?.map(|r| ProfRequest::new(r, SOCKET_RECV, len)))
    }

    fn test(&self, req: &mut ProfRequest) -> NetResult<TestStatus> {
        let st = req.req.test();
        if !matches!(st, Ok(TestStatus::Pending))
            && let Some((ev, d)) = req.prof.take()
        {
            ev.stop();
            spare_descr(d);
        }
        st
    }
}

/// `NCCL_SOCKET_SEND` / `NCCL_SOCKET_RECV` (`sock.op` of `ncclProfilerNetSockDescr_v1_t`).
const SOCKET_SEND: i32 = 0;
const SOCKET_RECV: i32 = 1;

/// A request with its profiler event: one `ncclProfileSocket` event
/// (`NCCL_PROFILER_NET_TYPE_SOCK | 1`, descriptor `ncclProfilerNetSockDescr_v1_t`)
/// per `isend`/`irecv`, under the host's ProxyStep, from posting to the `test`
/// that completes it (NCCL's socket transport emits one per socket task; here
/// one per request, `sock.fd` = -1, `sock.length` = the posted bytes). Nothing
/// when the host profiles nothing.
pub struct ProfRequest {
    req: Request,
    prof: Option<(NetEvent, Box<abi::ncclProfilerNetSockDescr_v1_t>)>,
}

impl ProfRequest {
    fn new(req: Request, op: i32, length: usize) -> ProfRequest {
        let prof = step_handle(0).map(|h| {
            let mut d = new_descr();
            d.r#type = abi::ncclProfileSocket;
            d.u.sock.fd = -1;
            d.u.sock.op = op;
            d.u.sock.length = length;
            let id = (abi::NCCL_PROFILER_NET_TYPE_SOCK | 1) as i64;
            // SAFETY: the boxed descriptor lives in this request until the event stops.
            let ev = unsafe { h.start(id, (&mut *d as *mut abi::ncclProfilerNetSockDescr_v1_t).cast()) };
            (ev, d)
        });
        ProfRequest { req, prof }
    }
}

impl Drop for ProfRequest {
    fn drop(&mut self) {
        if let Some((ev, d)) = self.prof.take() {
            ev.stop();
            spare_descr(d);
        }
    }
}

/// Most descriptors of stopped events a thread keeps for its next requests.
const MAX_SPARE_DESCRS: usize = 64;

thread_local! {
    /// Descriptors of stopped events, reused by this thread's next requests
    /// (no allocation per request while profiling). Boxes, not values: each is
    /// handed to a request and must keep its address while the event runs.
    #[allow(clippy::vec_box)]
    static SPARE_DESCRS: RefCell<Vec<Box<abi::ncclProfilerNetSockDescr_v1_t>>> = const { RefCell::new(Vec::new()) };
}

/// A zeroed descriptor at a fixed address: a spare one of this thread, or a new box.
fn new_descr() -> Box<abi::ncclProfilerNetSockDescr_v1_t> {
    let spare = SPARE_DESCRS.try_with(|s| s.borrow_mut().pop()).ok().flatten();
    match spare {
        Some(mut d) => {
            *d = abi::ncclProfilerNetSockDescr_v1_t::zeroed();
            d
        }
        None => Box::new(abi::ncclProfilerNetSockDescr_v1_t::zeroed()),
    }
}

/// Keeps the descriptor of a stopped event for this thread's next request.
fn spare_descr(d: Box<abi::ncclProfilerNetSockDescr_v1_t>) {
    let _ = SPARE_DESCRS.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < MAX_SPARE_DESCRS {
            s.push(d);
        }
    });
}

ferroccl_plugin_api::export_net_plugin!(SocketNet);
ferroccl_plugin_api::export_rma_plugin!(rma::SocketRma);
