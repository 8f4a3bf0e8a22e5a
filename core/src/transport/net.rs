//! The net transport's connectors: FIFOs of [`NCCL_STEPS`] slots over one plugin
//! sendComm/recvComm, progressed with `isend`/`irecv`/`test` (the work NCCL's
//! proxy does in `sendProxyProgress`/`recvProxyProgress`, `src/transport/net.cc`).
//!
//! Each connector owns one buffer of `NCCL_STEPS × step_size` bytes registered once
//! with `regMr`. Steps are posted and tested in order (the socket plugin requires
//! requests to be tested in posting order), but a step does not own a fixed slot:
//! each new step takes the slot freed most recently ([`SlotStack`]), so a workload
//! that keeps only a few steps in flight cycles through a cache-hot few slots
//! instead of walking the whole `NCCL_BUFFSIZE` buffer (on loopback, where the
//! kernel's copies dominate, a cold FIFO cost ~30% of mid-size busbw). Which slot a
//! step uses is private to each side: the receiver names its own buffer in `irecv`.
//!
//! Steps need not go through the FIFO: an operation may register its user buffers
//! with the connector's comm (`regMr` when it starts, `deregMr` when it ends; see
//! `proxy::register::register_user`), and a step is then sent straight from user
//! memory ([`SendConn::push_user`]) or received straight into it (the targets given
//! to [`RecvConn::expect`]), saving a copy each. NCCL does the same for buffers the
//! user registers (`ncclCommRegister`); ferroccl registers per operation, so no
//! registration outlives the buffer it covers.
//!
//! Sizes reported by the peer are never trusted: a received size that differs
//! from what the schedule expects is an error ([`crate::error::Error::Remote`]).

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use ferroccl_kernels::MemorySpace;

use crate::error::Error;
use crate::plugin::net::{NetError, NetHandle, NetPlugin, PtrType, RawComm, RawCtx, RawMr, RawRequest, RecvSlot};
use crate::profiler::{StepProf, StepTracker, state};

use super::fifo::{AlignedBuf, SlotStack, Steps};
use super::gdr::{self, GdrInputs, GdrParams, MemPath, StageReason};
use super::{
    ConnRequest, Connected, Dir, NCCL_STEPS, PendingConn, RecvConnector, SendConnector, Transport, TransportPeer,
    UserReg,
};

/// Where a send step's bytes are.
#[derive(Clone, Copy, Debug)]
enum SendSrc {
    /// FIFO slot `.0` of the connector's own buffer.
    Slot(usize),
    /// User memory at address `.0`, registered for the current operation
    /// ([`SendConn::register_user`]) as mhandle `.1`.
    User(usize, RawMr),
}

#[derive(Clone, Copy, Debug)]
enum SendSlot {
    /// Free for the producer.
    Empty,
    /// Filled with `.1` bytes, `isend` not accepted yet.
    Filled(SendSrc, usize),
    /// `isend` of `.1` bytes posted; a FIFO slot goes back to the free stack when
    /// it completes.
    InFlight(SendSrc, usize, RawRequest),
}

/// One user-buffer registration: `[start, end)` as mhandle `mr`; `flush`: data
/// received into it needs an `iflush` (GPUDirect receive into device memory
/// where NCCL's `ncclTopoNeedFlush` says so).
#[derive(Debug, Clone, Copy)]
struct Reg {
    start: usize,
    end: usize,
    mr: RawMr,
    flush: bool,
}

/// User buffers registered with one plugin comm for the current operation.
/// Registration is per operation (regMr at its start, deregMr at its end): a
/// user buffer may be freed once the operation is done, and a registration
/// outliving it could pin stale pages.
#[derive(Debug, Default)]
struct UserRegs(Vec<Reg>);

/// The GPUDirect RDMA state of one connector (NCCL keeps `useGdr`,
/// `useDmaBuf` and `needFlush` per connection in `src/transport/net.cc`): the
/// plugin device's properties, the parameters, and the decision already made
/// for each GPU whose memory this connector has seen (decided and logged once:
/// ferroccl ranks are host processes, so the GPU is the buffer's, known at the
/// first operation on it rather than at setup).
pub(crate) struct GdrCx {
    params: GdrParams,
    dev: usize,
    ptr_support: i32,
    force_flush: bool,
    nic_pci: Option<String>,
    /// The setup's INFO line (`Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0`),
    /// printed again with `/GDRDMA` when GPUDirect is first used.
    chan_line: String,
    seen: Vec<(usize, MemPath)>,
}

impl GdrCx {
    /// The state for device `dev` of `net` (its properties; host-only when
    /// they cannot be read).
    pub(crate) fn new(net: &dyn NetPlugin, dev: usize, params: GdrParams, chan_line: String) -> GdrCx {
        let props = net.properties(dev).unwrap_or_default();
        GdrCx {
            params,
            dev,
            ptr_support: props.ptr_support,
            force_flush: props.force_flush,
            nic_pci: props.pci_path,
            chan_line,
            seen: Vec::new(),
        }
    }

    /// How device memory of GPU `ordinal` meets this connection (`read`: the
    /// send side), decided with [`gdr::decide`] the first time and logged at
    /// INFO as NCCL does.
    fn path(&mut self, ordinal: usize, read: bool, has_dmabuf: bool) -> MemPath {
        if let Some(&(_, p)) = self.seen.iter().find(|(o, _)| *o == ordinal) {
            return p;
        }
        let (path, line) = match gdr::gpu_facts(ordinal) {
            Ok(g) => {
                let (topo, distance, level) = gdr::topo_check(&g, self.nic_pci.as_deref(), read, &self.params);
                let inp = GdrInputs {
                    ptr_support: self.ptr_support,
                    topo,
                    dmabuf_enable: self.params.dmabuf_enable,
                    // A plugin without regMrDmaBuf cannot take a DMA-BUF however it advertises.
                    driver_dmabuf: g.dmabuf && has_dmabuf,
                    cuda_cc: g.cuda_cc,
                    force_flush: self.force_flush,
                };
                let path = gdr::decide(
                    MemorySpace::Device {
                        ordinal,
                        managed: false,
                    },
                    read,
                    &inp,
                );
                let line = match path {
                    // paths.cc returns before any line when the NIC lacks NCCL_PTR_CUDA.
                    MemPath::Staged(StageReason::NoPtrCuda) => format!(
                        "GPU Direct RDMA Disabled for GPU {:x} / HCA {} (the plugin does not advertise NCCL_PTR_CUDA)",
                        g.bus_id(),
                        self.dev
                    ),
                    _ => gdr::nccl_gdr_line(&g, self.dev, read, topo, distance, level),
                };
                (path, line)
            }
            Err(e) => (
                MemPath::Staged(StageReason::Topology),
                format!("GPU Direct RDMA Disabled for GPU {ordinal} / HCA {}: {e}", self.dev),
            ),
        };
        crate::log::nccl_info!(NET, "{line}");
        match path {
            MemPath::Direct { dmabuf, flush, mode } => {
                // net.cc sendSetup/recvSetup: "via NET/%s/%d%s%s" with "/GDRDMA" and "(PCI)".
                crate::log::nccl_info!(
                    INIT,
                    "{}/GDRDMA{}",
                    self.chan_line,
                    if mode == crate::topo::paths::GdrMode::Pci {
                        "(PCI)"
                    } else {
                        ""
                    }
                );
                tracing::debug!(
                    target: "ferroccl::net",
                    "device memory of GPU {ordinal} on {}: registered directly (DMA-BUF {dmabuf}, flush {flush})",
                    self.chan_line
                );
            }
            MemPath::Staged(why) => tracing::debug!(
                target: "ferroccl::net",
                "device memory of GPU {ordinal} on {}: staged through host memory ({why})",
                self.chan_line
            ),
            MemPath::Host => {}
        }
        self.seen.push((ordinal, path));
        path
    }
}

impl UserRegs {
    /// Registers `[ptr, ptr + len)` in `space` unless a registration already
    /// covers it: host memory with `regMr(NCCL_PTR_HOST)`; device memory, where
    /// GPUDirect RDMA is possible for this connection (`gdr`, `read` = send
    /// side), with `regMrDmaBuf` or `regMr(NCCL_PTR_CUDA)` as NCCL's
    /// `sendProxyRegBuffer`/`recvProxyRegBuffer`; device memory without
    /// GPUDirect is left alone (the executor stages it through the FIFO). A
    /// refusal is logged (DEBUG) and only means steps take the FIFO path.
    #[allow(clippy::too_many_arguments)]
    fn register(
        &mut self,
        net: &dyn NetPlugin,
        comm: Option<RawComm>,
        (ptr, len, space): (*const u8, usize, MemorySpace),
        gdr: &mut GdrCx,
        read: bool,
        peer: usize,
    ) {
        let Some(comm) = comm else { return };
        if len == 0 || self.find(ptr, len).is_some() {
            return;
        }
        let (r, flush) = match space {
            s if s.host_accessible() => (net.reg_mr(comm, ptr as *mut u8, len, PtrType::Host), false),
            MemorySpace::Device { ordinal, .. } => match gdr.path(ordinal, read, net.has_dmabuf()) {
                MemPath::Direct {
                    dmabuf: true, flush, ..
                } => match gdr::dmabuf_fd(ptr, len) {
                    // The descriptor is closed once registered, as NCCL does.
                    Ok((fd, offset)) => (
                        net.reg_mr_dmabuf(comm, ptr as *mut u8, len, PtrType::DmaBuf, offset, fd.as_raw_fd()),
                        flush,
                    ),
                    Err(e) => {
                        tracing::debug!(
                            target: "ferroccl::net",
                            "no DMA-BUF for {len} bytes at {ptr:?} ({e}); regMr with NCCL_PTR_CUDA"
                        );
                        (net.reg_mr(comm, ptr as *mut u8, len, PtrType::Cuda), flush)
                    }
                },
                MemPath::Direct { flush, .. } => (net.reg_mr(comm, ptr as *mut u8, len, PtrType::Cuda), flush),
                MemPath::Staged(_) | MemPath::Host => return,
            },
            MemorySpace::Host { .. } => return,
        };
        match r {
            Ok(mr) => self.0.push(Reg {
                start: ptr as usize,
                end: ptr as usize + len,
                mr,
                flush,
            }),
            Err(e) => tracing::debug!(
                target: "ferroccl::net",
                "regMr of {len} bytes of {space} user memory for the connection with rank {peer} refused ({e}); \
                 using the FIFO"
            ),
        }
    }

    /// The registration covering `[ptr, ptr + len)`.
    fn find(&self, ptr: *const u8, len: usize) -> Option<Reg> {
        let (start, end) = (ptr as usize, ptr as usize + len);
        self.0.iter().find(|r| r.start <= start && end <= r.end).copied()
    }

    /// Deregisters everything.
    fn release(&mut self, net: &dyn NetPlugin, comm: Option<RawComm>) {
        if let Some(comm) = comm {
            for r in self.0.drain(..) {
                let _ = net.dereg_mr(comm, r.mr);
            }
        }
        self.0.clear();
    }
}

/// What both ends of a plugin connection hold beyond their step state: the
/// plugin and its comm, the FIFO (`NCCL_STEPS` slots of `step_size` bytes,
/// registered once with `regMr`), the user memory registered for the current
/// operation, the GPUDirect state and the ProxyStep events in flight.
struct NetEnd {
    net: Arc<dyn NetPlugin>,
    comm: Option<RawComm>,
    mr: Option<RawMr>,
    buf: AlignedBuf,
    step_size: usize,
    tag: i32,
    /// Free buffer slots.
    free: SlotStack,
    /// User buffers registered for the current operation.
    user: UserRegs,
    /// GPUDirect RDMA state (device memory registration, flushes).
    gdr: GdrCx,
    /// ProxyStep events of the steps in flight (empty without a profiler).
    prof: StepTracker,
    /// Peer rank (for messages).
    peer: usize,
    /// How this end's comm is closed (`close_send` or `close_recv`).
    close: CloseFn,
}

/// The plugin call that closes one end's comm.
type CloseFn = fn(&dyn NetPlugin, RawComm) -> Result<(), NetError>;

impl NetEnd {
    /// Wraps a connected comm: allocates its FIFO and registers it once. On
    /// failure the comm is closed with `close`, so nothing leaks, and the error
    /// names the connection (`what`).
    #[allow(clippy::too_many_arguments)] // one connection's identity and parameters
    fn new(
        net: Arc<dyn NetPlugin>,
        comm: RawComm,
        step_size: usize,
        tag: i32,
        peer: usize,
        gdr: GdrCx,
        close: CloseFn,
        what: impl FnOnce() -> String,
    ) -> Result<NetEnd, Error> {
        let buf = AlignedBuf::new(step_size * NCCL_STEPS);
        buf.announce();
        let mr = match net.reg_mr(comm, buf.ptr(), step_size * NCCL_STEPS, PtrType::Host) {
            Ok(mr) => mr,
            Err(e) => {
                let _ = close(&*net, comm);
                return Err(Error::net(what(), e));
            }
        };
        Ok(NetEnd {
            net,
            comm: Some(comm),
            mr: Some(mr),
            buf,
            step_size,
            tag,
            free: SlotStack::full(),
            user: UserRegs::default(),
            gdr,
            prof: StepTracker::default(),
            peer,
            close,
        })
    }

    /// Closes this end: its step events abandoned, the user memory and the
    /// FIFO deregistered, the comm closed (requests in flight are abandoned, as
    /// NCCL does on abort); a second call does nothing. Errors of the plugin are
    /// ignored: the connection is going away.
    fn close(&mut self) {
        self.prof.abandon();
        self.user.release(&*self.net, self.comm);
        if let Some(comm) = self.comm.take() {
            if let Some(mr) = self.mr.take() {
                let _ = self.net.dereg_mr(comm, mr);
            }
            let _ = (self.close)(&*self.net, comm);
        }
    }
}

/// The connector traits' profiling hooks of a NET end (both ends emit
/// ProxyStep events through their [`NetEnd`]'s tracker).
macro_rules! step_profiling {
    () => {
        fn prof_attach(&mut self, op: StepProf<'_>, nsteps: usize) -> bool {
            self.end.prof.attach(op, nsteps);
            true
        }

        fn prof_capable(&self) -> bool {
            true
        }

        fn prof_detach(&mut self) {
            self.end.prof.detach();
        }
    };
}

/// Send side of a connection (NCCL's send connector + its proxy state).
pub(crate) struct SendConn {
    end: NetEnd,
    /// `head`: next step the producer fills; `tail`: oldest step not yet completed.
    steps: Steps,
    /// State of steps `tail..head`, indexed by [`Steps::index`].
    slots: [SendSlot; NCCL_STEPS],
}

impl SendConn {
    /// Wraps a connected sendComm; allocates and registers the FIFO buffer.
    pub(crate) fn new(
        net: Arc<dyn NetPlugin>,
        comm: RawComm,
        step_size: usize,
        tag: i32,
        peer: usize,
        gdr: GdrCx,
    ) -> Result<SendConn, Error> {
        let end = NetEnd::new(
            net,
            comm,
            step_size,
            tag,
            peer,
            gdr,
            |n, c| n.close_send(c),
            || format!("regMr of the send FIFO to rank {peer}"),
        )?;
        Ok(SendConn {
            end,
            steps: Steps::default(),
            slots: [SendSlot::Empty; NCCL_STEPS],
        })
    }
}

impl SendConn {
    /// A step was filled by the executor: begins its ProxyStep (NCCL starts it
    /// when the slot is posted to the GPU and records `SendGPUWait`, then
    /// `SendPeerWait` once the data is in; here the host executor fills the
    /// slot before handing it over, so the GPU wait is empty).
    #[inline]
    fn prof_filled(&mut self, i: usize, size: usize) {
        self.end.prof.begin(i);
        self.end.prof.record(i, state::SEND_GPU_WAIT, size);
        self.end.prof.record(i, state::SEND_PEER_WAIT, size);
    }
}

impl SendConnector for SendConn {
    /// Registers user memory `[ptr, ptr + len)` with this sendComm (`regMr`, host
    /// memory) so that steps can be sent straight from it ([`SendConn::push_user`])
    /// instead of being copied into a FIFO slot first. Registrations last until
    /// [`SendConn::release_user`] (the end of the operation: user buffers may be
    /// freed after that, so nothing is cached across operations). A refusal only
    /// means steps take the FIFO path.
    fn register_user(&mut self, ptr: *const u8, len: usize, space: MemorySpace) {
        self.end.user.register(
            &*self.end.net,
            self.end.comm,
            (ptr, len, space),
            &mut self.end.gdr,
            true,
            self.end.peer,
        )
    }

    /// The mhandle of a registration covering `[ptr, ptr + len)`, if any.
    fn user_reg(&self, ptr: *const u8, len: usize) -> Option<UserReg> {
        self.end.user.find(ptr, len).map(|r| UserReg(r.mr.0))
    }

    /// Deregisters the user buffers of the finished operation. Must only be called
    /// once every step has completed ([`SendConn::idle`]); otherwise the
    /// registrations stay until [`SendConn::close`].
    fn release_user(&mut self) {
        if self.idle() {
            self.end.user.release(&*self.end.net, self.end.comm);
        }
    }

    /// Whether a step queued or in flight is sent from user memory overlapping
    /// `[ptr, ptr + len)`: that memory must not be written until it completes.
    fn user_busy(&self, ptr: *const u8, len: usize) -> bool {
        let (start, end) = (ptr as usize, ptr as usize + len);
        (self.steps.tail..self.steps.head).any(|step| match self.slots[Steps::index(step)] {
            SendSlot::Filled(SendSrc::User(a, _), n) | SendSlot::InFlight(SendSrc::User(a, _), n, _) => {
                a < end && start < a + n
            }
            _ => false,
        })
    }

    /// Whether a step sent from user memory may be pushed (fewer than
    /// `NCCL_STEPS` steps in flight; no FIFO slot needed).
    fn can_push_user(&self) -> bool {
        self.steps.has_room()
    }

    /// Queues a step of `size` bytes sent straight from registered user memory at
    /// `ptr` (`reg` from [`SendConn::user_reg`]). The memory must stay unchanged
    /// until the step completes (the operation's end at the latest).
    fn push_user(&mut self, ptr: *const u8, size: usize, reg: UserReg) {
        let mr = RawMr(reg.0);
        debug_assert!(self.can_push_user() && size <= self.end.step_size);
        let i = Steps::index(self.steps.head);
        self.slots[i] = SendSlot::Filled(SendSrc::User(ptr as usize, mr), size);
        self.steps.head += 1;
        self.prof_filled(i, size);
    }

    /// Bytes one step (slot) holds.
    fn step_size(&self) -> usize {
        self.end.step_size
    }

    /// Whether the producer may fill the next step.
    fn can_push(&self) -> bool {
        self.steps.has_room() && self.end.free.top().is_some()
    }

    /// The FIFO buffer (host memory this end owns).
    fn fifo_mem(&self) -> Option<super::FifoMem> {
        Some(self.end.buf.fifo_mem())
    }

    /// Address of the slot of the next step (valid while `can_push()`).
    fn next_slot(&self) -> *mut u8 {
        self.end.buf.slot(
            self.end.free.top().expect("next_slot without can_push"),
            self.end.step_size,
        )
    }

    /// Room for the step `k` after the next one: `k + 1` more steps in flight
    /// and `k + 1` free slots (the `k` held ones on top of the stack; `progress`,
    /// which gives slots back, does not run while steps are held).
    fn can_push_at(&self, k: usize) -> bool {
        self.steps.in_flight() + (k as u64) < NCCL_STEPS as u64 && self.end.free.nth(k).is_some()
    }

    /// The slot the step `k` after the next one takes (`k` places down the
    /// free stack; valid while `can_push_at(k)`).
    fn slot_at(&self, k: usize) -> *mut u8 {
        self.end.buf.slot(
            self.end.free.nth(k).expect("slot_at without can_push_at"),
            self.end.step_size,
        )
    }

    /// The header goes at the start of the slot (host memory).
    fn hdr_slot_at(&self, k: usize) -> *mut u8 {
        self.slot_at(k)
    }

    /// Marks the next step filled with `size` bytes; it is sent by `progress`.
    fn push(&mut self, size: usize) {
        debug_assert!(self.can_push() && size <= self.end.step_size);
        let slot = self.end.free.take().expect("push without can_push");
        let i = Steps::index(self.steps.head);
        self.slots[i] = SendSlot::Filled(SendSrc::Slot(slot), size);
        self.steps.head += 1;
        self.prof_filled(i, size);
    }

    /// Whether every pushed step has completed.
    fn idle(&self) -> bool {
        self.steps.is_idle()
    }

    /// Posts filled steps (in order) and tests in-flight ones. Returns whether
    /// anything moved.
    fn progress(&mut self) -> Result<bool, Error> {
        let Some(comm) = self.end.comm else {
            return Err(Error::Internal(format!(
                "send connection to rank {} is closed",
                self.end.peer
            )));
        };
        let mut moved = false;
        let mut step = self.steps.tail;
        while step < self.steps.head {
            let i = Steps::index(step);
            match self.slots[i] {
                SendSlot::Empty => {}
                SendSlot::Filled(src, size) => {
                    let (data, mr) = match src {
                        SendSrc::Slot(slot) => (self.end.buf.slot(slot, self.end.step_size), self.end.mr),
                        SendSrc::User(ptr, mr) => (ptr as *mut u8, Some(mr)),
                    };
                    let ph = self.end.prof.phandle(i);
                    match self.end.net.isend_ph(comm, data, size, self.end.tag, mr, ph) {
                        Ok(Some(req)) => {
                            self.end.prof.record(i, state::SEND_WAIT, size);
                            self.slots[i] = SendSlot::InFlight(src, size, req);
                            moved = true;
                        }
                        Ok(None) => break,
                        Err(e) => {
                            return Err(Error::net(
                                format!("isend of {size} bytes to rank {}", self.end.peer),
                                e,
                            ));
                        }
                    }
                }
                SendSlot::InFlight(..) => {}
            }
            step += 1;
        }
        // Test in posting order; retire completed steps from the tail.
        while !self.steps.is_idle() {
            let i = Steps::index(self.steps.tail);
            let SendSlot::InFlight(src, _, req) = self.slots[i] else {
                break;
            };
            match self.end.net.test(req, &mut []) {
                Ok(true) => {
                    self.end.prof.end(i);
                    self.slots[i] = SendSlot::Empty;
                    if let SendSrc::Slot(slot) = src {
                        self.end.free.give(slot);
                    }
                    self.steps.tail += 1;
                    moved = true;
                }
                Ok(false) => break,
                Err(e) => return Err(Error::net(format!("test of a send to rank {}", self.end.peer), e)),
            }
        }
        Ok(moved)
    }

    step_profiling!();

    /// Deregisters and closes the sendComm (requests in flight are abandoned,
    /// as NCCL does on abort).
    fn close(&mut self) {
        self.end.close();
    }
}

// Closing is all an end needs when dropped (on every exit path, errors included).
impl Drop for SendConn {
    fn drop(&mut self) {
        self.close();
    }
}

impl Drop for RecvConn {
    fn drop(&mut self) {
        self.close();
    }
}

/// Where a receive step's bytes land.
#[derive(Clone, Copy, Debug)]
enum RecvDst {
    /// FIFO slot `.0` of the connector's own buffer.
    Slot(usize),
    /// `.1` bytes of user memory at address `.0`, registered for the current
    /// operation as mhandle `.2`; `.3`: received data needs an `iflush`
    /// (GPUDirect into device memory, NCCL's `needFlush`).
    User(usize, usize, RawMr, bool),
}

#[derive(Clone, Copy, Debug)]
enum RecvState {
    /// Not posted.
    Empty,
    /// `irecv` posted.
    Posted(RecvDst, RawRequest),
    /// Received `.1` bytes; the `iflush` of request `.2` (`None`: the plugin
    /// had nothing to flush) must complete before the consumer reads them.
    Flushing(RecvDst, usize, Option<RawRequest>),
    /// Completed with `.1` bytes, waiting for the consumer.
    Ready(RecvDst, usize),
}

/// Receive side of a connection (NCCL's recv connector + its proxy state).
///
/// Receives are posted ahead for the steps scheduled work will consume
/// ([`RecvConn::expect`]), so a sender never waits for the consumer to reach a
/// step before its data can land: into a free FIFO slot, or straight into the
/// step's user output when the operation registered it.
pub(crate) struct RecvConn {
    end: NetEnd,
    /// `tail`: next step the consumer takes; `head`: next step to post an
    /// `irecv` for.
    steps: Steps,
    /// Steps the scheduled work will consume; receives are posted only up to here,
    /// so no receive stays outstanding once an operation is complete (a peer may
    /// then close its side without this rank seeing an error).
    limit: u64,
    /// For steps `posted..limit`: where each lands ([`RecvDst::User`]), or `None`
    /// for the next free FIFO slot.
    targets: VecDeque<Option<RecvDst>>,
    /// State of steps `tail..head`, indexed by [`Steps::index`].
    slots: [RecvState; NCCL_STEPS],
}

impl RecvConn {
    /// Wraps an accepted recvComm; allocates and registers the FIFO buffer.
    pub(crate) fn new(
        net: Arc<dyn NetPlugin>,
        comm: RawComm,
        step_size: usize,
        tag: i32,
        peer: usize,
        gdr: GdrCx,
    ) -> Result<RecvConn, Error> {
        let end = NetEnd::new(
            net,
            comm,
            step_size,
            tag,
            peer,
            gdr,
            |n, c| n.close_recv(c),
            || format!("regMr of the receive FIFO from rank {peer}"),
        )?;
        Ok(RecvConn {
            end,
            steps: Steps::default(),
            limit: 0,
            targets: VecDeque::new(),
            slots: [RecvState::Empty; NCCL_STEPS],
        })
    }

    fn addr(&self, dst: RecvDst) -> *mut u8 {
        match dst {
            RecvDst::Slot(slot) => self.end.buf.slot(slot, self.end.step_size),
            RecvDst::User(addr, ..) => addr as *mut u8,
        }
    }
}

impl RecvConnector for RecvConn {
    /// The FIFO buffer (host memory this end owns).
    fn fifo_mem(&self) -> Option<super::FifoMem> {
        Some(self.end.buf.fifo_mem())
    }

    /// Registers user memory `[ptr, ptr + len)` with this recvComm so that steps
    /// can land in it directly (see [`RecvConn::expect`]); as
    /// [`SendConn::register_user`].
    fn register_user(&mut self, ptr: *const u8, len: usize, space: MemorySpace) {
        self.end.user.register(
            &*self.end.net,
            self.end.comm,
            (ptr, len, space),
            &mut self.end.gdr,
            false,
            self.end.peer,
        )
    }

    /// Deregisters the user buffers of the finished operation (only once every
    /// expected step has been consumed; otherwise they stay until `close`).
    fn release_user(&mut self) {
        if self.steps.tail == self.limit {
            self.end.user.release(&*self.end.net, self.end.comm);
        }
    }

    /// The next step's data if it has arrived: `(address, size)`. The address is
    /// a FIFO slot, or the user memory named for the step in
    /// [`RecvConn::expect`]; it stays valid (and exclusively the consumer's) until
    /// [`RecvConn::pop`].
    fn peek(&self) -> Option<(*mut u8, usize)> {
        let i = Steps::index(self.steps.tail);
        match self.slots[i] {
            RecvState::Ready(dst, size) if !self.steps.is_idle() => Some((self.addr(dst), size)),
            _ => None,
        }
    }

    /// The step `k` after the next one if it has arrived (received steps
    /// stay where they landed until popped, in order).
    fn peek_at(&self, k: usize) -> Option<(*mut u8, usize)> {
        let step = self.steps.tail + k as u64;
        if k >= NCCL_STEPS || step >= self.steps.head {
            return None;
        }
        match self.slots[Steps::index(step)] {
            RecvState::Ready(dst, size) => Some((self.addr(dst), size)),
            _ => None,
        }
    }

    /// Announces the next steps that scheduled work will consume, one item per
    /// step: `Some((address, bytes))` to receive that step straight into user
    /// memory covered by a registration ([`RecvConn::register_user`]; otherwise
    /// the step uses a FIFO slot), `None` for a FIFO slot.
    fn expect(&mut self, target: Option<(*mut u8, usize)>) {
        let t = target.and_then(|(p, n)| {
            self.end
                .user
                .find(p, n)
                .map(|r| RecvDst::User(p as usize, n, r.mr, r.flush))
        });
        self.targets.push_back(t);
        self.limit += 1;
    }

    /// Releases the consumed step; a FIFO slot is re-posted by `progress`.
    fn pop(&mut self) {
        let i = Steps::index(self.steps.tail);
        let RecvState::Ready(dst, _) = self.slots[i] else {
            debug_assert!(false, "pop of a step that is not ready");
            return;
        };
        self.slots[i] = RecvState::Empty;
        // The consumer is done with the step: NCCL stops the ProxyStep when the
        // GPU's head passes it.
        self.end.prof.end(i);
        if let RecvDst::Slot(slot) = dst {
            self.end.free.give(slot);
        }
        self.steps.tail += 1;
    }

    /// Posts receives (into free slots or user memory) and tests posted ones, in order.
    fn progress(&mut self) -> Result<bool, Error> {
        let Some(comm) = self.end.comm else {
            return Err(Error::Internal(format!(
                "receive connection from rank {} is closed",
                self.end.peer
            )));
        };
        let mut moved = false;
        // Test posted receives (and their flushes) in posting order.
        let mut step = self.steps.tail;
        while step < self.steps.head {
            let i = Steps::index(step);
            if let RecvState::Posted(dst, req) = self.slots[i] {
                let mut sizes = [0usize; 1];
                match self.end.net.test(req, &mut sizes) {
                    Ok(true) => {
                        let cap = match dst {
                            RecvDst::Slot(_) => self.end.step_size,
                            RecvDst::User(_, n, ..) => n,
                        };
                        if sizes[0] > cap {
                            return Err(Error::Remote(format!(
                                "rank {} sent {} bytes into a {cap}-byte receive",
                                self.end.peer, sizes[0]
                            )));
                        }
                        self.end.prof.record(i, state::RECV_FLUSH_WAIT, sizes[0]);
                        self.slots[i] = match dst {
                            // net.cc recvProxyProgress: data received by GPUDirect into
                            // device memory that needs a flush (and is not empty) is
                            // flushed with iflush before the GPU may read it.
                            RecvDst::User(addr, _, mr, true) if sizes[0] > 0 => {
                                let slot = RecvSlot {
                                    data: addr as *mut u8,
                                    size: sizes[0],
                                    tag: self.end.tag,
                                    mr: Some(mr),
                                };
                                let r = self.end.net.iflush(comm, &[slot]).map_err(|e| {
                                    Error::net(format!("iflush of a receive from rank {}", self.end.peer), e)
                                })?;
                                RecvState::Flushing(dst, sizes[0], r)
                            }
                            _ => RecvState::Flushing(dst, sizes[0], None),
                        };
                        moved = true;
                    }
                    Ok(false) => break,
                    Err(e) => return Err(Error::net(format!("test of a receive from rank {}", self.end.peer), e)),
                }
            }
            if let RecvState::Flushing(dst, size, req) = self.slots[i] {
                let done = match req {
                    None => true,
                    Some(r) => self.end.net.test(r, &mut []).map_err(|e| {
                        Error::net(format!("test of a flush of a receive from rank {}", self.end.peer), e)
                    })?,
                };
                if !done {
                    break;
                }
                self.slots[i] = RecvState::Ready(dst, size);
                self.end.prof.record(i, state::RECV_GPU_WAIT, size);
                moved = true;
            }
            step += 1;
        }
        // Post receives ahead, at most NCCL_STEPS steps in flight.
        while self.steps.head < self.limit && self.steps.has_room() {
            let i = Steps::index(self.steps.head);
            let dst = match self.targets.front().copied().flatten() {
                Some(d) => d,
                None => match self.end.free.top() {
                    Some(slot) => RecvDst::Slot(slot),
                    None => break,
                },
            };
            let (data, size, mr) = match dst {
                RecvDst::Slot(slot) => (
                    self.end.buf.slot(slot, self.end.step_size),
                    self.end.step_size,
                    self.end.mr,
                ),
                RecvDst::User(addr, n, mr, _) => (addr as *mut u8, n, Some(mr)),
            };
            let slot = RecvSlot {
                data,
                size,
                tag: self.end.tag,
                mr,
            };
            // The ProxyStep starts before the receive is posted (once, even if
            // the plugin asks to retry).
            self.end.prof.begin(i);
            let ph = self.end.prof.phandle(i);
            match self.end.net.irecv_ph(comm, &[slot], false, &[ph]) {
                Ok(Some(req)) => {
                    self.end.prof.record(i, state::RECV_WAIT, size);
                    if let RecvDst::Slot(_) = dst {
                        self.end.free.take();
                    }
                    self.targets.pop_front();
                    self.slots[i] = RecvState::Posted(dst, req);
                    self.steps.head += 1;
                    moved = true;
                }
                Ok(None) => break,
                Err(e) => return Err(Error::net(format!("irecv from rank {}", self.end.peer), e)),
            }
        }
        Ok(moved)
    }

    step_profiling!();

    /// Deregisters and closes the recvComm (requests in flight are abandoned).
    fn close(&mut self) {
        self.end.close();
    }
}

/// The network transport (NCCL's `netTransport`, `src/transport/net.cc`): one
/// plugin sendComm/recvComm per connection. The receiver `listen`s and sends
/// the 128-byte handle as its connect information; the sender `connect`s with
/// it and the receiver `accept`s, both retried until the plugin returns a comm.
pub(crate) struct NetTransport {
    net: Arc<dyn NetPlugin>,
    ctx: RawCtx,
    gdr: GdrParams,
}

impl NetTransport {
    /// The transport over `net` with the communicator's plugin context `ctx`
    /// and the GPUDirect parameters `gdr` (for device memory in operations).
    pub(crate) fn new(net: Arc<dyn NetPlugin>, ctx: RawCtx, gdr: GdrParams) -> NetTransport {
        NetTransport { net, ctx, gdr }
    }
}

impl Transport for NetTransport {
    fn name(&self) -> &'static str {
        "NET"
    }

    fn describe(&self) -> String {
        format!("NET/{}", self.net.info().name)
    }

    /// NCCL's `canConnect` of the net transport: always across hosts; on one host
    /// unless `NCCL_NET_DISABLE_INTRA=1` on either rank (`ncclTopoCheckNet`; with
    /// no GPU in the topology the network is not ruled out as slower).
    fn can_connect(&self, me: &TransportPeer, peer: &TransportPeer) -> bool {
        me.host_hash != peer.host_hash || !(me.params.net_disable_intra || peer.params.net_disable_intra)
    }

    /// Receive side: `listen` on `req.net_dev`, the handle is the connect
    /// information. Send side: nothing to allocate before the peer's handle.
    fn setup(
        &self,
        req: &ConnRequest,
        me: &TransportPeer,
        peer: &TransportPeer,
    ) -> Result<(Box<dyn PendingConn>, Vec<u8>), Error> {
        let (ch, ci, dev) = (req.key.channel, req.key.conn, req.net_dev);
        let name = &self.net.info().name;
        match req.dir {
            Dir::Recv => {
                let mut handle: NetHandle = [0; 128];
                let listen = self
                    .net
                    .listen(self.ctx, dev, &mut handle)
                    .map_err(|e| Error::net(format!("listen on device {dev} for rank {}", peer.rank), e))?;
                let line = format!(
                    "Channel {ch:02}/{ci} : {}[{}] -> {}[{}] [receive] via NET/{name}/{dev}",
                    peer.rank, peer.local_rank, me.rank, me.local_rank
                );
                crate::log::nccl_info!(INIT, "{line}");
                let p = NetPending {
                    net: self.net.clone(),
                    ctx: self.ctx,
                    req: *req,
                    rank: me.rank,
                    side: NetSide::Recv { listen: Some(listen) },
                    gdr: Some(GdrCx::new(&*self.net, dev, self.gdr, line)),
                };
                Ok((Box::new(p), handle.to_vec()))
            }
            Dir::Send => {
                let line = format!(
                    "Channel {ch:02}/{ci} : {}[{}] -> {}[{}] [send] via NET/{name}/{dev}",
                    me.rank, me.local_rank, peer.rank, peer.local_rank
                );
                crate::log::nccl_info!(INIT, "{line}");
                let p = NetPending {
                    net: self.net.clone(),
                    ctx: self.ctx,
                    req: *req,
                    rank: me.rank,
                    side: NetSide::Send { handle: None },
                    gdr: Some(GdrCx::new(&*self.net, dev, self.gdr, line)),
                };
                Ok((Box::new(p), Vec::new()))
            }
        }
    }
}

enum NetSide {
    /// The listening comm until `accept` returns a recvComm.
    Recv { listen: Option<RawComm> },
    /// The peer's handle, kept across `connect` retries (the plugin keeps its
    /// connection state in it).
    Send { handle: Option<NetHandle> },
}

/// A net connection between setup and connect.
struct NetPending {
    net: Arc<dyn NetPlugin>,
    ctx: RawCtx,
    req: ConnRequest,
    rank: usize,
    side: NetSide,
    /// The connector's GPUDirect state, handed to it once connected.
    gdr: Option<GdrCx>,
}

impl PendingConn for NetPending {
    fn connect(&mut self, peer_info: &[u8]) -> Result<Option<Connected>, Error> {
        let (peer, step, dev) = (self.req.key.peer, self.req.step_size, self.req.net_dev);
        match &mut self.side {
            NetSide::Recv { listen } => {
                let Some(l) = *listen else {
                    return Err(Error::Internal(format!("accept from rank {peer} after it completed")));
                };
                match self.net.accept(l) {
                    Ok(Some(c)) => {
                        let _ = self.net.close_listen(l);
                        *listen = None;
                        let gdr = self
                            .gdr
                            .take()
                            .ok_or_else(|| Error::Internal(format!("connection with rank {peer} completed twice")))?;
                        let conn = RecvConn::new(self.net.clone(), c, step, peer as i32, peer, gdr)?;
                        Ok(Some(Connected::Recv(Box::new(conn))))
                    }
                    Ok(None) => Ok(None),
                    Err(e) => Err(Error::net(format!("accept from rank {peer}"), e)),
                }
            }
            NetSide::Send { handle } => {
                if handle.is_none() {
                    let h: NetHandle = peer_info.try_into().map_err(|_| {
                        Error::Remote(format!(
                            "rank {peer} sent a {}-byte connection handle, expected 128 bytes",
                            peer_info.len()
                        ))
                    })?;
                    *handle = Some(h);
                }
                let h = handle.as_mut().expect("handle set above");
                match self.net.connect(self.ctx, dev, h) {
                    Ok(Some(c)) => {
                        let gdr = self
                            .gdr
                            .take()
                            .ok_or_else(|| Error::Internal(format!("connection with rank {peer} completed twice")))?;
                        let conn = SendConn::new(self.net.clone(), c, step, self.rank as i32, peer, gdr)?;
                        Ok(Some(Connected::Send(Box::new(conn))))
                    }
                    Ok(None) => Ok(None),
                    Err(e) => Err(Error::net(format!("connect to rank {peer}"), e)),
                }
            }
        }
    }

    fn waiting_for(&self) -> String {
        match self.side {
            NetSide::Recv { .. } => format!("accept from rank {}", self.req.key.peer),
            NetSide::Send { .. } => format!("connect to rank {}", self.req.key.peer),
        }
    }
}

impl Drop for NetPending {
    fn drop(&mut self) {
        if let NetSide::Recv { listen: Some(l) } = self.side {
            let _ = self.net.close_listen(l);
        }
    }
}
