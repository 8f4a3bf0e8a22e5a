//! Software in-network reduction over TCP (`libnccl-net-collnet-socket.so`).
//!
//! One library with both tables NCCL looks for (`src/plugin/net.cc` loads them from
//! the same file):
//! * `ncclNetPlugin_v6` … `_v12`: the in-tree socket plugin (`FerrocclSocket`,
//!   crate `ferroccl-net-socket`), unchanged;
//! * `ncclCollNetPlugin_v6` … `_v12`: **`FerrocclCollNetSocket`**, built with the SDK's
//!   [`CollNet`] trait. Rank 0 of each collComm is the aggregator: the other ranks
//!   send it their contributions over TCP, it reduces them in rank order with the
//!   CPU kernels of `ferroccl-kernels` and sends every rank its result (see
//!   [`agg`] for the protocol and [`wire`] for the format).
//!
//! Devices are the socket plugin's (`NCCL_SOCKET_IFNAME`, `NCCL_SOCKET_FAMILY`), with
//! host memory only (`ptrSupport` = `NCCL_PTR_HOST`; `regMrDmaBuf` refuses), and
//! `reduceSupport` claims exactly `{int8, uint8, int32, uint32, int64, uint64,
//! half, float, double, bfloat16} × {sum, prod, max, min}`. Every wait is bounded by
//! `NCCL_COLLNET_SOCKET_TIMEOUT_MS` (default 300000): connect, and each wait for a
//! peer's bytes during a collective; a dead or misbehaving peer fails the
//! collective on every rank with an error naming it.

use std::ffi::CStr;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferroccl_kernels::{DataType, RedOp};
use ferroccl_plugin_api::abi::{ncclDataType_t, ncclRedOp_t};
use ferroccl_plugin_api::sdk::collnet::{CollNet, Sge, Window, builtin_op};
use ferroccl_plugin_api::sdk::{Buf, Handle, Net, NetError, NetResult, Properties, PtrType};
use nccl_net_socket::{Config, SocketNet};

pub mod agg;
pub mod wire;

// The net tables of this library are the socket plugin's: naming them here keeps
// its `#[no_mangle]` statics in this cdylib.
pub use nccl_net_socket::{
    ncclNetPlugin_v6, ncclNetPlugin_v7, ncclNetPlugin_v8, ncclNetPlugin_v9, ncclNetPlugin_v10, ncclNetPlugin_v11,
    ncclNetPlugin_v12,
};

/// `NCCL_COLLNET_SOCKET_TIMEOUT_MS` default: 5 minutes (a slow rank may reach a
/// collective much later than the others; NCCL itself never times out). The
/// parameter is declared with the socket plugin's (this library exports that
/// table as its own): [`nccl_net_socket::config::COLLNET_TIMEOUT_MS`].
pub const DEFAULT_TIMEOUT_MS: u64 = nccl_net_socket::config::COLLNET_TIMEOUT_MS.default as u64;

/// `maxCollBytes` advertised: NCCL's `MAX_COLLNET_SIZE` (2^29 bytes).
pub const MAX_COLL_BYTES: usize = 1 << 29;

/// The wait bound from `NCCL_COLLNET_SOCKET_TIMEOUT_MS` (milliseconds, ≥ 1; unset,
/// empty or invalid: [`DEFAULT_TIMEOUT_MS`]).
pub fn timeout_from_env() -> Duration {
    let ms = std::env::var(nccl_net_socket::config::COLLNET_TIMEOUT_MS.name)
        .ok()
        .and_then(|v| nccl_net_socket::config::parse_int(&v))
        .filter(|&v| v >= 1)
        .map_or(DEFAULT_TIMEOUT_MS, |v| v as u64);
    Duration::from_millis(ms)
}

/// The CollNet plugin: the socket plugin's devices and a wait bound.
pub struct CollNetSocket {
    net: SocketNet,
    timeout: Duration,
}

impl std::fmt::Debug for CollNetSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollNetSocket").field("timeout", &self.timeout).finish()
    }
}

impl CollNetSocket {
    /// A plugin over the socket plugin configured by `cfg`, bounding every wait by `timeout`.
    pub fn with_config(cfg: Config, timeout: Duration) -> CollNetSocket {
        CollNetSocket {
            net: SocketNet::with_config(cfg),
            timeout,
        }
    }

    /// The wait bound in use.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// A listening endpoint: the TCP listener rank 0 accepts the group on.
#[derive(Debug)]
pub struct Listen {
    listener: TcpListener,
    addr: SocketAddr,
}

/// A connected collComm: its rank, its worker and the queue to it.
#[derive(Debug)]
pub struct Coll {
    rank: usize,
    nranks: usize,
    seq: u64,
    tx: Option<Sender<agg::Job>>,
    worker: Option<std::thread::JoinHandle<()>>,
    /// Clones of the streams, to unblock the worker at close.
    streams: Vec<std::net::TcpStream>,
}

impl Coll {
    /// This rank in the collComm.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Ranks in the collComm.
    pub fn nranks(&self) -> usize {
        self.nranks
    }

    fn post(&mut self, op: agg::Op) -> NetResult<Option<Request>> {
        let done: agg::Done = Arc::new(Mutex::new(None));
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| NetError::Internal("collComm is closed".into()))?;
        tx.send(agg::Job {
            seq: self.seq,
            op,
            done: done.clone(),
        })
        .map_err(|_| NetError::Internal("collnet worker thread is gone".into()))?;
        self.seq += 1;
        Ok(Some(Request(Some(done))))
    }
}

impl Drop for Coll {
    fn drop(&mut self) {
        drop(self.tx.take());
        for s in &self.streams {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// A registration: host memory only, so only the range is kept.
#[derive(Debug, Clone, Copy)]
pub struct Mr {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

/// An outstanding collective (`None` after it reported).
#[derive(Debug)]
pub struct Request(Option<agg::Done>);

fn kernel_types(dtype: ncclDataType_t, op: ncclRedOp_t) -> Option<(DataType, RedOp)> {
    let d = DataType::from_nccl(dtype.raw()).ok()?;
    builtin_op(op)?;
    let o = RedOp::from_nccl(op.raw()).ok()?;
    Some((d, o))
}

fn refuse(what: &str, dtype: ncclDataType_t, op: ncclRedOp_t) -> NetError {
    NetError::InvalidArgument(format!(
        "COLLNET/Socket: {what} with {dtype:?} and {op:?} is not supported (reduceSupport says 0): \
         supported are int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16 \
         with sum, prod, max, min"
    ))
}

impl CollNet for CollNetSocket {
    const NAME: &'static CStr = c"FerrocclCollNetSocket";
    const HAS_IALLGATHER_IREDUCESCATTER: bool = true;
    type Ctx = ();
    type ListenComm = Listen;
    type CollComm = Coll;
    type Mr = Mr;
    type Request = Request;

    fn new() -> NetResult<Self> {
        let p = CollNetSocket::with_config(Config::from_env().clone(), timeout_from_env());
        ferroccl_plugin_api::net_info!(
            ferroccl_plugin_api::log::NCCL_INIT | ferroccl_plugin_api::log::NCCL_NET,
            "COLLNET/Socket: aggregator at rank 0 of each collComm, {} devices, timeout {:?}",
            p.net.interfaces().len(),
            p.timeout
        );
        Ok(p)
    }

    fn init(&self, _comm_id: u64) -> NetResult<()> {
        Ok(())
    }

    fn devices(&self) -> NetResult<usize> {
        Ok(self.net.interfaces().len())
    }

    fn properties(&self, dev: usize) -> NetResult<Properties> {
        let mut p = self.net.properties(dev)?;
        p.ptr_support = ferroccl_plugin_api::abi::NCCL_PTR_HOST;
        p.max_recvs = 1;
        p.max_coll_bytes = MAX_COLL_BYTES;
        p.reg_is_global = false;
        p.force_flush = false;
        Ok(p)
    }

    fn listen(&self, _ctx: &(), dev: usize, handle: &mut Handle) -> NetResult<Listen> {
        let iface = self
            .net
            .interfaces()
            .get(dev)
            .ok_or_else(|| NetError::InvalidArgument(format!("COLLNET/Socket: no device {dev}")))?;
        let bind = match iface.ip {
            std::net::IpAddr::V6(ip) => SocketAddr::V6(std::net::SocketAddrV6::new(ip, 0, 0, iface.scope_id)),
            ip => SocketAddr::new(ip, 0),
        };
        let listener =
            TcpListener::bind(bind).map_err(|e| NetError::System(format!("COLLNET/Socket: bind {bind}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| NetError::System(format!("COLLNET/Socket: getsockname: {e}")))?;
        wire::encode_handle(addr, handle);
        Ok(Listen { listener, addr })
    }

    fn connect(&self, handles: &[&Handle], rank: usize, listen: &mut Listen) -> NetResult<Coll> {
        let nranks = handles.len();
        let mut addrs = Vec::with_capacity(nranks);
        for (i, h) in handles.iter().enumerate() {
            addrs.push(
                wire::decode_handle(h).map_err(|e| {
                    NetError::InvalidArgument(format!("COLLNET/Socket connect: rank {i}'s handle: {e}"))
                })?,
            );
        }
        if addrs[rank] != listen.addr {
            return Err(NetError::InvalidArgument(format!(
                "COLLNET/Socket connect: handle {rank} ({}) is not this rank's listen address ({})",
                addrs[rank], listen.addr
            )));
        }
        let key = wire::group_key(handles);
        let deadline = Instant::now() + self.timeout;
        let peers = if rank == 0 {
            wire::accept_all(&listen.listener, key, nranks, deadline, self.timeout)?
        } else {
            vec![Some(wire::connect_root(
                addrs[0],
                key,
                rank,
                nranks,
                deadline,
                self.timeout,
            )?)]
        };
        let streams = peers
            .iter()
            .flatten()
            .filter_map(|p| p.stream.try_clone().ok())
            .collect();
        let (tx, worker) = agg::spawn(rank, nranks, peers)?;
        Ok(Coll {
            rank,
            nranks,
            seq: 0,
            tx: Some(tx),
            worker: Some(worker),
            streams,
        })
    }

    fn reduce_support(&self, dtype: ncclDataType_t, op: ncclRedOp_t) -> bool {
        kernel_types(dtype, op).is_some()
    }

    fn reg_mr(&self, _comm: &mut Coll, buf: Buf, ty: PtrType) -> NetResult<Mr> {
        if ty != PtrType::Host {
            return Err(NetError::InvalidArgument(format!(
                "COLLNET/Socket: regMr of {ty:?} memory; this plugin handles host memory only (ptrSupport = NCCL_PTR_HOST)"
            )));
        }
        Ok(Mr {
            addr: buf.ptr as usize,
            len: buf.len,
        })
    }

    fn reg_mr_dmabuf(&self, _comm: &mut Coll, _buf: Buf, _ty: PtrType, _offset: u64, _fd: i32) -> NetResult<Mr> {
        Err(NetError::InvalidArgument(
            "COLLNET/Socket: regMrDmaBuf: DMA-BUF is not supported (host memory only)".into(),
        ))
    }

    fn iallreduce(
        &self,
        comm: &mut Coll,
        send: Buf,
        recv: Buf,
        _count: usize,
        dtype: ncclDataType_t,
        op: ncclRedOp_t,
        _send_mr: Option<&Mr>,
        _recv_mr: Option<&Mr>,
    ) -> NetResult<Option<Request>> {
        let (dtype_k, op_k) = kernel_types(dtype, op).ok_or_else(|| refuse("iallreduce", dtype, op))?;
        comm.post(agg::Op::AllReduce {
            send,
            recv,
            dtype: dtype_k,
            op: op_k,
        })
    }

    fn iallgather(
        &self,
        comm: &mut Coll,
        send: Buf,
        _send_mr: Option<&Mr>,
        recv_parts: &[Sge<'_, Mr>],
        window: Window,
    ) -> NetResult<Option<Request>> {
        comm.post(agg::Op::AllGather {
            send,
            parts: recv_parts.iter().map(|p| p.buf).collect(),
            w: window,
        })
    }

    fn ireducescatter(
        &self,
        comm: &mut Coll,
        send_parts: &[Sge<'_, Mr>],
        recv: Buf,
        _recv_mr: Option<&Mr>,
        window: Window,
        dtype: ncclDataType_t,
        op: ncclRedOp_t,
    ) -> NetResult<Option<Request>> {
        let (dtype_k, op_k) = kernel_types(dtype, op).ok_or_else(|| refuse("ireducescatter", dtype, op))?;
        comm.post(agg::Op::ReduceScatter {
            parts: send_parts.iter().map(|p| p.buf).collect(),
            recv,
            w: window,
            dtype: dtype_k,
            op: op_k,
        })
    }

    fn iflush(&self, _comm: &mut Coll, _buf: Buf, _mr: Option<&Mr>) -> NetResult<Option<Request>> {
        // Host memory: the data is visible as soon as the collective completed.
        Ok(None)
    }

    fn test(&self, req: &mut Request) -> NetResult<Option<usize>> {
        let Some(done) = &req.0 else {
            return Err(NetError::Internal("collnet request tested after it completed".into()));
        };
        let r = done.lock().unwrap_or_else(|e| e.into_inner()).take();
        match r {
            None => {
                // Not finished: give the worker the core (NCCL's proxy spins on test).
                std::thread::yield_now();
                Ok(None)
            }
            Some(r) => {
                req.0 = None;
                r.map(Some)
            }
        }
    }
}

ferroccl_plugin_api::export_collnet_plugin!(CollNetSocket);
