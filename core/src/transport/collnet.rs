//! The CollNet connection of a channel: the network as peer `nranks`, as NCCL
//! keeps it in `channel->peers[nRanks]` (`src/transport/coll_net.cc`).
//!
//! A chain head (CollNetChain, `src/device/all_reduce.h`) sends each slice of its
//! node's partial result "up" to peer `nranks` and receives the reduced slice of
//! every node back "down" from it. Here both directions are one [`CollNetLink`]:
//! the send connector's steps land in FIFO slots; the proxy posts one
//! `iallreduce` per filled step, from its send slot into the receive slot of
//! the same index (NCCL's `sendProxyProgress` posts the collective once a step's
//! data is in and `test`s it; its `recvProxyProgress` then `iflush`es only when
//! the NIC wrote GPU memory with GPUDirect RDMA and the path needs a flush,
//! `useGdr && needFlush`: never here, the FIFOs are registered host memory, so
//! no `iflush` is issued); the receive connector hands a step to the executor
//! once its `iallreduce` has completed. Every head of the
//! channel's collComm posts the same steps in the same order (the schedule is
//! computed alike on every rank), which is the plugin's contract.
//!
//! Steps carry no operation header (the plugin would reduce it too): the
//! schedule never puts one on this connection. The datatype and reduction of a
//! step come with it ([`SendConnector::push_reduce`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ferroccl_kernels::{DevRedOp, RedOp};
use ferroccl_plugin_api::abi::{ncclDataType_t, ncclRedOp_t};

use super::{NCCL_STEPS, RecvConnector, SendConnector, UserReg};
use crate::error::Error;
use crate::plugin::collnet::{CollNetAdapter, Sge};
use crate::plugin::net::{PtrType, RawComm, RawMr, RawRequest};

/// `iallgather` and `ireducescatter` calls completed in this process.
static SGE_DONE: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// `(iallgather, ireducescatter)` calls this process's CollNet links posted
/// and saw complete so far (tests assert that AllGather/ReduceScatter went
/// through the plugin's calls).
#[doc(hidden)]
pub fn collnet_sge_counts() -> (u64, u64) {
    (SGE_DONE[0].load(Ordering::Relaxed), SGE_DONE[1].load(Ordering::Relaxed))
}

/// One CollNet `iallgather` or `ireducescatter` over a whole window
/// (`windowOffset` 0, `windowBytes` = members × `bytes_per_rank`), as the
/// CollNet AllGather/ReduceScatter schedule (`coll::schedule::collnet_agrs`)
/// asks for it on a channel's collComm: the window's pieces are where the
/// schedule keeps them (the user's output, the schedule's scratch).
///
/// The link hands the plugin what NCCL's non-registered path does
/// (`collNetIallgather` / `collNetIreducescatter`, `src/transport/coll_net.cc`):
/// its own staging memory, registered with the collComm (`regMr`, host
/// memory), the window as **one** SGE part with that registration, and the
/// send side with its registration, never a NULL mhandle; the pieces are
/// copied in before the call and out once it completed. NCCL registers a
/// user buffer for these calls only when the user registered it
/// (`ncclCommRegister`, found by `ncclCollnetLocalRegisterBuffer`) or during
/// CUDA graph capture (`ncclCollnetGraphRegisterBuffer`), both with GPUDirect
/// RDMA (`src/register/coll_reg.cc`, `ncclRegisterCollBuffers`); ferroccl has
/// neither for CollNet, so it always stages.
#[derive(Debug)]
pub(crate) enum SgeCall {
    /// `iallgather(send, recv_parts, bytes_per_rank, 0, window_bytes)`.
    AllGather {
        /// This member's `bytes_per_rank` bytes.
        send: *mut u8,
        /// Where the window lands, in order.
        recv_parts: Vec<Sge>,
        /// Bytes each member contributes.
        bytes_per_rank: usize,
        /// The whole window.
        window_bytes: usize,
    },
    /// `ireducescatter(send_parts, recv, bytes_per_rank, 0, window_bytes, dtype, op)`.
    ReduceScatter {
        /// This member's input window, in order.
        send_parts: Vec<Sge>,
        /// Its reduced `bytes_per_rank` bytes.
        recv: *mut u8,
        /// Bytes each member receives.
        bytes_per_rank: usize,
        /// The whole window.
        window_bytes: usize,
        /// NCCL datatype.
        dtype: ncclDataType_t,
        /// NCCL reduction (Avg and PreMulSum summed, see [`net_reduction`]).
        op: ncclRedOp_t,
    },
}

/// One step of a [`CollNetLink`].
#[derive(Debug, Clone, Copy, Default)]
struct Step {
    /// Bytes of the step.
    size: usize,
    /// `(datatype, reduction, element bytes)` the step is reduced with.
    red: Option<(ncclDataType_t, ncclRedOp_t, usize)>,
    /// The outstanding `iallreduce`.
    req: Option<RawRequest>,
}

/// Counters of a link's steps (each only grows): `consumed ≤ done ≤ posted ≤ filled`.
#[derive(Debug, Default)]
struct Counters {
    /// Steps the executor pushed (send side).
    filled: usize,
    /// Steps whose `iallreduce` was posted.
    posted: usize,
    /// Steps whose `iallreduce` completed.
    done: usize,
    /// Steps the executor consumed (receive side).
    consumed: usize,
}

/// A staging buffer of the SGE calls and its registration with the collComm.
#[derive(Default)]
struct Stage {
    buf: Vec<u8>,
    mr: Option<RawMr>,
}

/// The state a channel's CollNet send and receive connectors share.
struct LinkState {
    net: Arc<CollNetAdapter>,
    /// The collComm (`None` once closed).
    coll: Option<RawComm>,
    channel: usize,
    step_size: usize,
    send_buf: Vec<u8>,
    recv_buf: Vec<u8>,
    send_mr: Option<RawMr>,
    recv_mr: Option<RawMr>,
    steps: [Step; NCCL_STEPS],
    n: Counters,
    /// The outstanding `iallgather`/`ireducescatter` ([`SgeCall`]), with its kind (0 AG, 1 RS).
    sge: Option<(RawRequest, usize)>,
    /// Registered staging of the SGE calls: send side, receive side.
    stage: [Stage; 2],
    /// Copies out of the receive stage once the outstanding SGE call
    /// completed: (destination address, offset in the stage, bytes).
    sge_out: Vec<(usize, usize, usize)>,
    failed: Option<Error>,
}

impl LinkState {
    fn what(&self, call: &str) -> String {
        format!("CollNet {call} on channel {}", self.channel)
    }

    /// Posts the `iallreduce` of every filled step and tests the posted ones in
    /// order; whether anything moved.
    fn progress(&mut self) -> Result<bool, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.progress_inner();
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    fn progress_inner(&mut self) -> Result<bool, Error> {
        let Some(coll) = self.coll else {
            return Err(Error::Internal(format!(
                "{}: the collComm is closed",
                self.what("progress")
            )));
        };
        let mut moved = false;
        while self.n.posted < self.n.filled {
            let k = self.n.posted % NCCL_STEPS;
            let st = self.steps[k];
            let (dtype, op, es) = st.red.ok_or_else(|| {
                Error::Internal(format!(
                    "{}: step {} has no reduction CollNet runs",
                    self.what("iallreduce"),
                    self.n.posted
                ))
            })?;
            let off = k * self.step_size;
            let send = self.send_buf.as_mut_ptr().wrapping_add(off);
            let recv = self.recv_buf.as_mut_ptr().wrapping_add(off);
            let req = self
                .net
                .iallreduce(coll, send, recv, st.size / es, dtype, op, self.send_mr, self.recv_mr)
                .map_err(|e| Error::net(self.what("iallreduce"), e))?;
            let Some(req) = req else { break };
            self.steps[k].req = Some(req);
            self.n.posted += 1;
            moved = true;
        }
        while self.n.done < self.n.posted {
            let k = self.n.done % NCCL_STEPS;
            let req = self.steps[k].req.expect("posted steps have a request");
            match self.net.test(req).map_err(|e| Error::net(self.what("test"), e))? {
                Some(_) => {
                    self.steps[k].req = None;
                    self.n.done += 1;
                    moved = true;
                }
                None => break,
            }
        }
        Ok(moved)
    }

    /// Staging buffer `which` (0 send, 1 receive) of at least `need` bytes,
    /// registered with the collComm (re-registered when it grows).
    fn stage(&mut self, coll: RawComm, which: usize, need: usize) -> Result<(*mut u8, RawMr), Error> {
        let net = self.net.clone();
        let what = self.what(if which == 0 {
            "regMr of the send stage"
        } else {
            "regMr of the receive stage"
        });
        let st = &mut self.stage[which];
        if st.buf.len() < need.max(1) || st.mr.is_none() {
            if let Some(mr) = st.mr.take()
                && let Err(e) = net.dereg_mr(coll, mr)
            {
                crate::log::nccl_warn!("CollNet deregMr of a stage on channel {}: {e}", self.channel);
            }
            st.buf = vec![0u8; need.max(1)];
            let len = st.buf.len();
            st.mr = Some(
                net.reg_mr(coll, st.buf.as_mut_ptr(), len, PtrType::Host)
                    .map_err(|e| Error::net(what, e))?,
            );
        }
        Ok((st.buf.as_mut_ptr(), st.mr.expect("registered above")))
    }

    /// Runs one [`SgeCall`] (see `SendConnector::collnet_sge`).
    fn run_sge(&mut self, make: &dyn Fn() -> SgeCall) -> Result<bool, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.run_sge_inner(make);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    fn run_sge_inner(&mut self, make: &dyn Fn() -> SgeCall) -> Result<bool, Error> {
        let Some(coll) = self.coll else {
            return Err(Error::Internal(format!(
                "{}: the collComm is closed",
                self.what("iallgather/ireducescatter")
            )));
        };
        if self.sge.is_none() {
            // Every head posts its collectives in schedule order: the steps
            // pushed before this call go to the plugin first.
            self.progress_inner()?;
            if self.n.posted < self.n.filled {
                return Ok(false);
            }
            let (req, kind, out) = match make() {
                SgeCall::AllGather {
                    send,
                    recv_parts,
                    bytes_per_rank,
                    window_bytes,
                } => {
                    let (ss, smr) = self.stage(coll, 0, bytes_per_rank)?;
                    // SAFETY: `send` holds `bytes_per_rank` bytes of the plan's
                    // scratch (alive until this step completes); the stage holds
                    // at least as many; they do not overlap.
                    unsafe { std::ptr::copy_nonoverlapping(send.cast_const(), ss, bytes_per_rank) };
                    let (rs, rmr) = self.stage(coll, 1, window_bytes)?;
                    let out = stage_layout(&recv_parts, window_bytes).map_err(|e| self.bad_sge(&e))?;
                    let part = [Sge {
                        data: rs,
                        size: window_bytes,
                        mr: Some(rmr),
                    }];
                    let req = self
                        .net
                        .iallgather(coll, ss, Some(smr), &part, bytes_per_rank, 0, window_bytes)
                        .map_err(|e| Error::net(self.what("iallgather"), e))?;
                    let out = out.into_iter().map(|(d, o, l)| (d as usize, o, l)).collect();
                    (req, 0, out)
                }
                SgeCall::ReduceScatter {
                    send_parts,
                    recv,
                    bytes_per_rank,
                    window_bytes,
                    dtype,
                    op,
                } => {
                    let (ss, smr) = self.stage(coll, 0, window_bytes)?;
                    let layout = stage_layout(&send_parts, window_bytes).map_err(|e| self.bad_sge(&e))?;
                    for (src, off, len) in layout {
                        // SAFETY: each part holds `len` bytes of the plan's scratch
                        // (alive until this step completes); `off + len` is within
                        // the stage's `window_bytes` (checked by stage_layout).
                        unsafe { std::ptr::copy_nonoverlapping(src.cast_const(), ss.add(off), len) };
                    }
                    let (rs, rmr) = self.stage(coll, 1, bytes_per_rank)?;
                    let part = [Sge {
                        data: ss,
                        size: window_bytes,
                        mr: Some(smr),
                    }];
                    let req = self
                        .net
                        .ireducescatter(coll, &part, rs, Some(rmr), bytes_per_rank, 0, window_bytes, dtype, op)
                        .map_err(|e| Error::net(self.what("ireducescatter"), e))?;
                    (req, 1, vec![(recv as usize, 0, bytes_per_rank)])
                }
            };
            let Some(req) = req else { return Ok(false) };
            self.sge = Some((req, kind));
            self.sge_out = out;
        }
        let (req, kind) = self.sge.expect("posted above");
        let call = if kind == 0 { "iallgather" } else { "ireducescatter" };
        match self.net.test(req).map_err(|e| Error::net(self.what(call), e))? {
            Some(_) => {
                self.sge = None;
                let rs = self.stage[1].buf.as_ptr();
                for (dst, off, len) in std::mem::take(&mut self.sge_out) {
                    // SAFETY: `off + len` is within the receive stage (checked when
                    // the call was posted); `dst` holds `len` bytes of the user's
                    // output or the plan's scratch, alive until this step completes.
                    unsafe { std::ptr::copy_nonoverlapping(rs.add(off), dst as *mut u8, len) };
                }
                SGE_DONE[kind].fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn bad_sge(&self, e: &str) -> Error {
        Error::Internal(format!("{}: {e}", self.what("iallgather/ireducescatter")))
    }

    /// Deregisters the FIFOs and stages and closes the collComm (once), as
    /// NCCL's `sendProxyFree`/`recvProxyFree` deregister before `sharedFree`'s
    /// `closeColl`.
    fn close(&mut self) {
        let Some(coll) = self.coll.take() else { return };
        let stages = [self.stage[0].mr.take(), self.stage[1].mr.take()];
        for mr in [self.send_mr.take(), self.recv_mr.take()]
            .into_iter()
            .chain(stages)
            .flatten()
        {
            if let Err(e) = self.net.dereg_mr(coll, mr) {
                crate::log::nccl_warn!("{}: {e}", self.what("deregMr"));
            }
        }
        if let Err(e) = self.net.close_coll(coll) {
            crate::log::nccl_warn!("{}: {e}", self.what("closeColl"));
        }
    }
}

impl Drop for LinkState {
    fn drop(&mut self) {
        self.close();
    }
}

/// Where each SGE part lies in a staging buffer of `window` bytes, the parts
/// back to back in order: `(part address, offset, bytes)`. Errors: the parts
/// do not add up to the window.
fn stage_layout(parts: &[Sge], window: usize) -> Result<Vec<(*mut u8, usize, usize)>, String> {
    let mut off = 0usize;
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        out.push((p.data, off, p.size));
        off = off.saturating_add(p.size);
    }
    if off != window {
        return Err(format!(
            "{} SGE parts of {off} bytes in all for a window of {window} bytes",
            parts.len()
        ));
    }
    Ok(out)
}

/// The plugin's `(datatype, reduction)` of `red` and its element size: `Avg`
/// and PreMulSum are summed by the network, their scaling runs on the host
/// (`ncclGetCollNetSupport`, `src/enqueue.cc`). Always `Some` for NCCL's
/// reductions (kept an `Option` for the step's "no reduction" state).
pub(crate) fn net_reduction(red: &DevRedOp) -> Option<(ncclDataType_t, ncclRedOp_t, usize)> {
    let op = match red.op {
        RedOp::Sum | RedOp::Avg | RedOp::PreMulSum(_) => ncclRedOp_t::ncclSum,
        RedOp::Prod => ncclRedOp_t::ncclProd,
        RedOp::Max => ncclRedOp_t::ncclMax,
        RedOp::Min => ncclRedOp_t::ncclMin,
    };
    Some((ncclDataType_t(red.dtype as i32), op, red.dtype.size()))
}

/// A channel's CollNet link over a connected collComm: its send and receive
/// connectors (one shared state).
pub(crate) struct CollNetLink {
    state: Arc<Mutex<LinkState>>,
}

impl CollNetLink {
    /// A link over `coll` (connected, this rank a head of channel `channel`)
    /// with FIFOs of [`NCCL_STEPS`] × `step_size` bytes, registered with the
    /// plugin as host memory. Errors: `regMr` failing (the collComm is closed).
    pub(crate) fn new(
        net: Arc<CollNetAdapter>,
        coll: RawComm,
        channel: usize,
        step_size: usize,
    ) -> Result<CollNetLink, Error> {
        let mut st = LinkState {
            net,
            coll: Some(coll),
            channel,
            step_size,
            send_buf: vec![0u8; NCCL_STEPS * step_size],
            recv_buf: vec![0u8; NCCL_STEPS * step_size],
            send_mr: None,
            recv_mr: None,
            steps: [Step::default(); NCCL_STEPS],
            n: Counters::default(),
            sge: None,
            stage: [Stage::default(), Stage::default()],
            sge_out: Vec::new(),
            failed: None,
        };
        let len = st.send_buf.len();
        st.send_mr = Some(
            st.net
                .reg_mr(coll, st.send_buf.as_mut_ptr(), len, PtrType::Host)
                .map_err(|e| Error::net(st.what("regMr of the send FIFO"), e))?,
        );
        st.recv_mr = Some(
            st.net
                .reg_mr(coll, st.recv_buf.as_mut_ptr(), len, PtrType::Host)
                .map_err(|e| Error::net(st.what("regMr of the receive FIFO"), e))?,
        );
        Ok(CollNetLink {
            state: Arc::new(Mutex::new(st)),
        })
    }

    /// The send connector (to peer `nranks`).
    pub(crate) fn send(&self) -> Box<dyn SendConnector> {
        Box::new(CollNetSend {
            state: self.state.clone(),
        })
    }

    /// The receive connector (from peer `nranks`).
    pub(crate) fn recv(&self) -> Box<dyn RecvConnector> {
        Box::new(CollNetRecv {
            state: self.state.clone(),
        })
    }
}

fn lock(s: &Mutex<LinkState>) -> MutexGuard<'_, LinkState> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

struct CollNetSend {
    state: Arc<Mutex<LinkState>>,
}

impl SendConnector for CollNetSend {
    fn step_size(&self) -> usize {
        lock(&self.state).step_size
    }

    fn can_push(&self) -> bool {
        let s = lock(&self.state);
        // A slot is free again once its result was consumed (the receive slot of
        // the same index is written by that step's iallreduce).
        s.n.filled < s.n.consumed + NCCL_STEPS
    }

    fn next_slot(&self) -> *mut u8 {
        let mut s = lock(&self.state);
        let off = (s.n.filled % NCCL_STEPS) * s.step_size;
        s.send_buf.as_mut_ptr().wrapping_add(off)
    }

    fn push(&mut self, size: usize) {
        let mut s = lock(&self.state);
        let k = s.n.filled % NCCL_STEPS;
        s.steps[k] = Step {
            size,
            red: None,
            req: None,
        };
        s.n.filled += 1;
    }

    fn push_reduce(&mut self, size: usize, red: &DevRedOp) {
        let mut s = lock(&self.state);
        let k = s.n.filled % NCCL_STEPS;
        s.steps[k] = Step {
            size,
            red: net_reduction(red),
            req: None,
        };
        s.n.filled += 1;
    }

    fn collnet_sge(&mut self, call: &dyn Fn() -> SgeCall) -> Result<bool, Error> {
        lock(&self.state).run_sge(call)
    }

    fn user_reg(&self, _ptr: *const u8, _len: usize) -> Option<UserReg> {
        None
    }

    fn can_push_user(&self) -> bool {
        false
    }

    fn push_user(&mut self, _ptr: *const u8, size: usize, _reg: UserReg) {
        // Never called: `user_reg` registers nothing. A step without data would
        // break the collective for every head, so fail it loudly instead.
        let mut s = lock(&self.state);
        let e = Error::Internal(format!(
            "CollNet on channel {}: a step of {size} bytes was pushed from user memory",
            s.channel
        ));
        s.failed.get_or_insert(e);
    }

    fn user_busy(&self, _ptr: *const u8, _len: usize) -> bool {
        false
    }

    fn idle(&self) -> bool {
        let s = lock(&self.state);
        s.n.done == s.n.filled
    }

    fn progress(&mut self) -> Result<bool, Error> {
        lock(&self.state).progress()
    }

    fn register_user(&mut self, _ptr: *const u8, _len: usize, _space: ferroccl_kernels::MemorySpace) {}

    fn release_user(&mut self) {}

    fn close(&mut self) {
        lock(&self.state).close();
    }
}

struct CollNetRecv {
    state: Arc<Mutex<LinkState>>,
}

impl RecvConnector for CollNetRecv {
    fn peek(&self) -> Option<(*mut u8, usize)> {
        let mut s = lock(&self.state);
        if s.n.consumed >= s.n.done {
            return None;
        }
        let k = s.n.consumed % NCCL_STEPS;
        let off = k * s.step_size;
        let size = s.steps[k].size;
        Some((s.recv_buf.as_mut_ptr().wrapping_add(off), size))
    }

    fn pop(&mut self) {
        let mut s = lock(&self.state);
        if s.n.consumed < s.n.done {
            s.n.consumed += 1;
        }
    }

    fn expect(&mut self, _target: Option<(*mut u8, usize)>) {}

    fn wants_expect(&self) -> bool {
        false
    }

    fn progress(&mut self) -> Result<bool, Error> {
        lock(&self.state).progress()
    }

    fn register_user(&mut self, _ptr: *const u8, _len: usize, _space: ferroccl_kernels::MemorySpace) {}

    fn release_user(&mut self) {}

    fn close(&mut self) {
        lock(&self.state).close();
    }
}
