//! Carrying out one [`SliceOp`]: on host memory with the CPU kernels, or on a
//! GPU's kernels when it touches that GPU's memory.
//!
//! A step touching device memory (classified at enqueue, see [`super::mem`])
//! runs on that GPU's kernels (`device_for`, `compute_dev`) when everything it
//! touches is reachable from the GPU: the user buffers (that GPU's, managed,
//! pinned or registered), and every FIFO slot it reads or writes
//! ([`crate::transport::FifoMem`]: host memory page-locked for the GPUs through
//! `ferroccl_kernels::hostreg` at enqueue, or that GPU's memory). The kernels
//! then read and write the slots directly, one launch per operand operation,
//! as NCCL's `prims_simple.h` does between user buffers and the host FIFOs of
//! `src/transport/net.cc` with `useGdr = 0`. Otherwise (a FIFO that could not
//! be registered, a connector whose FIFO memory is unknown, pageable host
//! scratch, a backend that only copies) the step is staged: the bytes it reads
//! are copied into host mirrors by the buffer's own backend
//! (`Backend::copy_raw`), the step runs on the mirrors with the CPU, and what
//! it wrote is copied back before anything is sent from user memory. The CPU
//! reduces host memory only. Without device memory (no driver, host buffers)
//! the steps run exactly as before: one branch per step decides it.
//!
//! User buffers are only ever touched through short-lived slices built here. An
//! input and an output slice of user memory are alive at the same time only when
//! they are disjoint (a `RecvReduceCopySend` reducing straight into the output,
//! out of place); otherwise results are computed into a FIFO slot first and
//! copied out with `ptr::copy` (memmove semantics).
//!
//! Steps whose outgoing bytes already sit in registered user memory are sent
//! from there (`user_source`), saving the copy into a FIFO slot: on loopback TCP
//! with two ranks the user-space copies were a third of a mid-size AllReduce.

use std::sync::atomic::{AtomicU64, Ordering};

use ferroccl_kernels::{Backend, CpuBackend, DevRedOp, MemorySpace, Pre};

use super::desc::{OP_HDR_BYTES, OpDesc};
use super::mem::{Kernels, OpMem, Operand, Stage};
use super::schedule::{Lane, MAX_PEERS, Peers, Prim, SliceOp, TaskConns};
use crate::error::Error;
use crate::transport::{ConnTable, FifoMem, NCCL_STEPS, SendConnector, UserReg};

static BACKEND: CpuBackend = CpuBackend;

/// Steps (and local copies) run on a GPU's kernels, for the process.
static DEVICE_STEPS: AtomicU64 = AtomicU64::new(0);

/// Steps run on a GPU's kernels so far in this process, and steps that
/// staged device memory through host bounce buffers (tests and the GPU
/// checks assert which path ran).
#[doc(hidden)]
pub fn device_step_counts() -> (u64, u64) {
    (DEVICE_STEPS.load(Ordering::Relaxed), super::mem::staged_steps())
}

/// Copies `bytes` from `src` to `dst` (may overlap; no-op when equal).
///
/// # Safety
/// Both ranges must be valid for `bytes` bytes.
unsafe fn memmove(dst: *mut u8, src: *const u8, bytes: usize) {
    if !std::ptr::eq(dst, src) && bytes > 0 {
        // SAFETY: caller guarantees both ranges are valid.
        unsafe { std::ptr::copy(src, dst, bytes) };
    }
}

/// The user memory a sending step can put on the wire as it is, with its
/// mhandle, when the operation registered it ([`SendConnector::register_user`]):
/// * `Send`: the input, unless the op pre-multiplies what is sent;
/// * `CopySend`, `RecvCopySend`: the output, once written (the input for a
///   `CopySend` whose output is not registered);
/// * `RecvReduceCopySend`: the output, reduced into it directly (out of place,
///   or in place where input and output are the same slice).
///
/// A user source must not be overwritten while its send is in flight: outputs
/// are written once per operation, before they are sent, and a step that writes
/// user memory first waits for in-flight sends from it ([`SendConnector::user_busy`];
/// in place, the input is the output).
fn user_source(op: &SliceOp, s: &dyn SendConnector) -> Option<(*const u8, UserReg)> {
    let n = op.bytes;
    let try_src = || s.user_reg(op.src, n).map(|mr| (op.src, mr));
    let try_dst = || s.user_reg(op.dst, n).map(|mr| (op.dst as *const u8, mr));
    match op.prim {
        Prim::Send if !op.red.as_ref().is_some_and(|r| r.has_pre_op()) => try_src(),
        Prim::CopySend => try_dst().or_else(try_src),
        Prim::RecvCopySend => try_dst(),
        Prim::RecvReduceCopySend if disjoint(op.src, op.dst, n) || std::ptr::eq(op.src, op.dst) => try_dst(),
        _ => None,
    }
}

/// Where a receiving step's data may land directly, instead of in a FIFO slot
/// (the receive connection uses it when the operation registered that memory):
/// the step's output for `Recv`, `RecvCopySend`, and `RecvReduceCopy` out of
/// place (which then reduces its input into the output in place), when the step
/// receives from exactly one peer.
pub(crate) fn recv_target(op: &SliceOp) -> Option<(*mut u8, usize)> {
    if op.recv_from.len() != 1 || op.hdr_recv != 0 {
        return None;
    }
    match op.prim {
        Prim::Recv | Prim::RecvCopySend => Some((op.dst, op.bytes)),
        Prim::RecvReduceCopy if disjoint(op.src, op.dst, op.bytes) => Some((op.dst, op.bytes)),
        _ => None,
    }
}

/// The reduction of a reducing step.
fn reduction(op: &SliceOp) -> Result<&DevRedOp, Error> {
    op.red
        .as_ref()
        .ok_or_else(|| Error::Internal(format!("{:?} step without a reduction op", op.prim)))
}

/// Whether `[a, a + n)` and `[b, b + n)` do not overlap.
fn disjoint(a: *const u8, b: *const u8, n: usize) -> bool {
    let (a, b) = (a as usize, b as usize);
    a + n <= b || b + n <= a
}

/// What every step of a plan runs against: the connectors, the plan's operation
/// descriptors, this rank.
pub(crate) struct ExecCx<'a> {
    /// Every connector of the communicator.
    pub conns: &'a mut ConnTable,
    /// Descriptor of each operation of the plan (`SliceOp::desc` indexes it).
    pub descs: &'a [OpDesc],
    /// This rank.
    pub rank: usize,
    /// Memory of the work's operations' user buffers (any order; empty when
    /// every buffer is host memory).
    pub mems: &'a [OpMem],
    /// Whether any connector may hold user-memory registrations (the proxy
    /// registered some and has not released them all): without any, no step
    /// is sent from user memory, so neither `user_busy` nor `user_reg` is asked.
    pub user_regs: bool,
    /// Where device steps go whose launches were enqueued but not yet waited
    /// for ([`Pending`]), with where the step's op stands in the caller's work
    /// (kept in its entry); `None`: each device step waits for its own launches.
    pub pending: Option<(&'a mut Vec<Pending>, OpAt)>,
}

/// Where an op stands in the work of whoever runs it (the proxy's task,
/// segment, stream and position): carried by its [`Pending`] entry, so an
/// entry always finds its own op after the wait.
pub(crate) type OpAt = (usize, usize, usize, usize);

/// A device step whose launches are enqueued on its GPU's stream and whose
/// sends and receives are not yet pushed and released: the proxy waits once
/// for every lane's pending steps of a pass ([`Pending::wait_all`]) and then
/// completes each, in the order they were made ([`Pending::complete`]), one
/// synchronize per pass instead of one per step (issue 28).
///
/// Meanwhile the lane may run further device steps on the slots after the
/// ones its pending steps hold ([`Held`]: the connectors' offset form,
/// [`SendConnector::can_push_at`], `RecvConnector::peek_at`), up to
/// [`LANE_AHEAD_MAX`] pending steps, as NCCL's `prims_simple.h` keeps up to
/// `NCCL_STEPS` steps of a connection in flight (the net transport's proxy,
/// `src/transport/net.cc`, posts each as the GPU's tail passes it). Any other
/// step of the lane (host, staged, header-only, local, CollNet, or sent from
/// user memory) waits for the pass's end, as every step did before.
pub(crate) struct Pending {
    backend: &'static dyn Backend,
    lane: Lane,
    out: Outgoing,
    /// The step's send and receive peers: the slots it holds on the lane's
    /// connectors (one per peer).
    sends: Peers,
    recvs: Peers,
    /// Where the step's op is (`ExecCx::pending`).
    at: OpAt,
}

/// Most steps of one lane pending at once (each holds a slot of at least one
/// connector, whose FIFO bounds it at `NCCL_STEPS` too).
pub(crate) const LANE_AHEAD_MAX: usize = NCCL_STEPS;

/// How many slots of each connector of a step the pending steps made before
/// it hold (the offsets it runs at), and whether its lane has pending steps.
#[derive(Default)]
struct Held {
    /// Per send peer of the step (`op.send_to` order).
    send: [usize; MAX_PEERS],
    /// Per receive peer of the step (`op.recv_from` order).
    recv: [usize; MAX_PEERS],
    /// Whether anything is held: the step may then only run as a pending
    /// device step (any other would push or pop out of order, or touch
    /// memory the pending launches still write).
    any: bool,
    /// Whether the step must wait for the pass's end regardless: its lane
    /// has [`LANE_AHEAD_MAX`] pending steps, or one sent from user memory
    /// (whose in-flight sends `user_busy` cannot see yet).
    blocked: bool,
}

impl Held {
    /// The offsets of `op` on `lane` given the pending steps `pending`.
    fn of(op: &SliceOp, lane: Lane, pending: &[Pending]) -> Held {
        let mut h = Held::default();
        let mut lane_steps = 0;
        for e in pending {
            if e.lane == lane {
                lane_steps += 1;
                h.blocked |= e.out.user.is_some();
            }
            for (i, peer) in op.send_to.iter().enumerate() {
                let key = lane.key(peer);
                h.send[i] += e.sends.iter().filter(|&p| e.lane.key(p) == key).count();
            }
            for (i, peer) in op.recv_from.iter().enumerate() {
                let key = lane.key(peer);
                h.recv[i] += e.recvs.iter().filter(|&p| e.lane.key(p) == key).count();
            }
        }
        h.blocked |= lane_steps >= LANE_AHEAD_MAX;
        h.any = lane_steps > 0 || h.send.iter().chain(&h.recv).any(|&k| k > 0);
        h
    }
}

impl Pending {
    /// Waits for every launch of `pending` (once per distinct backend) and
    /// returns the first error; the steps stay pending.
    pub(crate) fn wait_all(pending: &[Pending]) -> Result<(), Error> {
        let mut first = Ok(());
        for (i, p) in pending.iter().enumerate() {
            if pending[..i].iter().any(|q| std::ptr::addr_eq(q.backend, p.backend)) {
                continue;
            }
            let r = p.backend.wait_enqueued();
            if first.is_ok() {
                first = r.map_err(Error::from);
            }
        }
        first
    }

    /// Pushes the step's sends and releases its receives (`op` is the step
    /// that made this entry), after [`Pending::wait_all`].
    pub(crate) fn complete(&self, op: &SliceOp, conns: &mut ConnTable) -> Result<(), Error> {
        complete(op, self.lane, &self.out, conns)
    }

    /// The lane of the step.
    pub(crate) fn lane(&self) -> Lane {
        self.lane
    }

    /// Where the step's op is, as the caller gave it (`ExecCx::pending`).
    pub(crate) fn at(&self) -> OpAt {
        self.at
    }
}

/// A header-only step: sends the descriptor to each `send_to` peer, or (its
/// received headers already checked by the caller) releases the received steps.
fn desc_step(op: &SliceOp, lane: Lane, desc: &OpDesc, conns: &mut ConnTable) -> Result<bool, Error> {
    for peer in op.send_to.iter() {
        if !conns
            .send(&lane.key(peer))
            .ok_or_else(|| missing(lane, "send", peer))?
            .can_push()
        {
            return Ok(false);
        }
    }
    for peer in op.send_to.iter() {
        let s = conns.send(&lane.key(peer)).ok_or_else(|| missing(lane, "send", peer))?;
        // SAFETY: the header place of a slot (`hdr_slot`: the slot or host
        // memory beside it) holds OP_HDR_BYTES bytes and is ours until pushed.
        desc.encode(unsafe { std::slice::from_raw_parts_mut(s.hdr_slot(), OP_HDR_BYTES) });
        s.push(OP_HDR_BYTES);
    }
    for peer in op.recv_from.iter() {
        conns
            .recv(&lane.key(peer))
            .ok_or_else(|| missing(lane, "receive", peer))?
            .pop();
    }
    Ok(true)
}

fn missing(lane: Lane, dir: &str, peer: usize) -> Error {
    Error::Internal(format!("no {dir} connector for rank {peer} on {lane:?}"))
}

/// Tries to perform `op`, a step of a task on `lane` whose connectors are
/// `task` (see [`TaskConns`]). Returns `Ok(false)` when it must wait (a step not
/// received yet, no free send slot, user memory still being sent from),
/// `Ok(true)` when done.
///
/// A step with several receive peers reduces their steps in peer order, after
/// this rank's input (`recv0 ⊕ pre(input) ⊕ recv1 ⊕ …`); a step with several
/// send peers sends the same bytes to each.
///
/// The step, in order: a local step runs at once ([`run_local`]); otherwise
/// the received steps it consumes are looked at and their headers checked
/// ([`peek_received`]), a header-only step is carried out ([`desc_step`]), a
/// step writing user memory waits for sends still in flight from it
/// ([`user_busy`]), the outgoing bytes get their places ([`claim_outgoing`]:
/// registered user memory or FIFO slots), a step on device memory runs on its
/// GPU's kernels when everything it touches is reachable there
/// ([`device_for`], [`compute_dev`]) or else has that memory staged
/// ([`stage_step`]), the data is moved and reduced ([`compute`]), and
/// the sends are pushed and the receives released ([`complete`]).
///
/// With device steps of the pass pending (`cx.pending`), the step runs on the
/// slots after the ones they hold ([`Held`]: `peek_at`, `can_push_at`,
/// `slot_at`) and only as another pending device step; anything else waits
/// for the pass's end (`Ok(false)`), leaving nothing behind but an operation
/// header in a free slot no one holds.
///
/// # Safety
/// The user addresses in `op` must be valid for `op.bytes` bytes (the enqueue contract).
pub(crate) unsafe fn try_run(op: &SliceOp, lane: Lane, task: &TaskConns, cx: &mut ExecCx<'_>) -> Result<bool, Error> {
    // Slots held by pending device steps (none without them: the common case
    // costs one branch).
    let held = match cx.pending.as_ref() {
        Some((p, _)) if !p.is_empty() => Held::of(op, lane, p),
        _ => Held::default(),
    };
    if held.any
        && (held.blocked
            || matches!(
                op.prim,
                Prim::CollNet | Prim::LocalCopy | Prim::ReduceBlocks | Prim::Desc
            ))
    {
        return Ok(false);
    }
    if op.prim == Prim::CollNet {
        return super::collnet_agrs::run_net_op(op, lane, cx.conns);
    }
    if matches!(op.prim, Prim::LocalCopy | Prim::ReduceBlocks) {
        // SAFETY: as this function.
        unsafe { run_local(op, cx.mems) }?;
        return Ok(true);
    }
    let descs = cx.descs;
    let desc = &descs[op.desc as usize];
    let Some(mut recvd) = peek_received(op, lane, desc, cx, &held.recv)? else {
        return Ok(false);
    };
    if op.prim == Prim::Desc {
        return desc_step(op, lane, desc, cx.conns);
    }
    check_peers(op)?;
    let writes_user = writes_user(op);
    if writes_user && cx.user_regs && user_busy(op, task, cx.conns) {
        return Ok(false);
    }
    let Some(out) = claim_outgoing(op, lane, desc, cx, &held)? else {
        return Ok(false);
    };
    let nr = op.recv_from.len();
    // Host memory only: one branch, and the step runs as it always did.
    let mut stage = if OpMem::any_staged_in(cx.mems) {
        // Device memory: on its GPU's kernels when everything the step touches
        // is reachable from there, else staged.
        let dev = device_for(op, lane, cx, &recvd[..nr], &out);
        note_decision(cx.rank, &dev);
        if let Ok(k) = dev {
            if let (Some((pending, at)), Some(q)) = (cx.pending.as_mut(), k.backend.enqueuer()) {
                // SAFETY: as below; the slots stay ours until the pending
                // step is completed, after the proxy's wait.
                if let Err(e) = unsafe { compute_dev_on(op, q, &recvd[..nr], &out) } {
                    // What was enqueued still runs: wait before failing.
                    let _ = k.backend.wait_enqueued();
                    return Err(e);
                }
                DEVICE_STEPS.fetch_add(1, Ordering::Relaxed);
                pending.push(Pending {
                    backend: k.backend,
                    lane,
                    out,
                    sends: op.send_to,
                    recvs: op.recv_from,
                    at: *at,
                });
                return Ok(true);
            }
            if held.any {
                // Would push and pop now, before the pending steps: wait.
                return Ok(false);
            }
            // SAFETY: as this function; every operand was checked reachable
            // from the GPU, and `out`'s slots are ours until pushed.
            unsafe { compute_dev(op, k.backend, &recvd[..nr], &out) }?;
            DEVICE_STEPS.fetch_add(1, Ordering::Relaxed);
            complete(op, lane, &out, cx.conns)?;
            return Ok(true);
        }
        if held.any {
            return Ok(false);
        }
        // SAFETY: as this function.
        Some(unsafe { stage_step(op, cx.mems, &recvd[..nr], writes_user) }?)
    } else {
        if held.any {
            return Ok(false);
        }
        None
    };
    if cx.conns.has_device_fifos() {
        // FIFO slots in GPU memory (the P2P transport) are staged too: the
        // CPU never touches them (`stage_device_fifos`).
        // SAFETY: the received slots and `out`'s slots are ours until popped
        // or pushed, after `stage.finish`.
        unsafe { stage_device_fifos(op, lane, cx, &recvd[..nr], &out, stage.get_or_insert_with(Stage::none)) }?;
    }
    match stage.as_mut() {
        // Host memory and host FIFOs (the common case): nothing is mapped,
        // the step runs on the addresses it has.
        // SAFETY: as this function; `out`'s slots are ours until pushed.
        None => unsafe { compute(op, op.src, op.dst, &recvd[..nr], &out) }?,
        Some(stage) => {
            // From here on the step works on host addresses only (`src`,
            // `dst`, `recvd` and the outgoing slots mapped), and what it
            // wrote goes back before anything is pushed (from user memory or
            // a FIFO slot).
            let src: *const u8 = stage.map(op.src);
            let dst: *mut u8 = stage.map(op.dst);
            for r in recvd[..nr].iter_mut() {
                *r = stage.map(*r);
            }
            let mut out_h = Outgoing {
                user: out.user,
                slots: out.slots,
            };
            for sl in out_h.slots[..op.send_to.len()].iter_mut() {
                *sl = stage.map(*sl);
            }
            // SAFETY: as this function; `out`'s slots (or their host
            // mirrors) are ours until pushed.
            unsafe { compute(op, src, dst, &recvd[..nr], &out_h) }?;
            // SAFETY: as `stage_step`.
            unsafe { stage.finish() }?;
        }
    }
    complete(op, lane, &out, cx.conns)?;
    Ok(true)
}

/// Runs a step that touches no connector: a `LocalCopy` or a `ReduceBlocks`
/// (which reduces the plan's scratch, host memory never staged), staging the
/// user memory the host cannot touch around it (`coll::mem`).
///
/// # Safety
/// As [`try_run`].
unsafe fn run_local(op: &SliceOp, mems: &[OpMem]) -> Result<(), Error> {
    let n = op.bytes;
    let (src_in, src_len) = if op.prim == Prim::LocalCopy {
        (op.src, n)
    } else {
        (std::ptr::null(), 0)
    };
    let staged = OpMem::any_staged_in(mems);
    if staged
        && op.prim == Prim::LocalCopy
        && let Some(k) = local_device(op, mems)
    {
        // SAFETY: as this function; both ranges reachable from the GPU, equal or disjoint.
        unsafe { local_copy_dev(op, k.backend) }?;
        DEVICE_STEPS.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    }
    let mut stage = if staged {
        // SAFETY: user buffers valid for `n` bytes by contract.
        unsafe {
            Stage::begin(
                mems,
                &[
                    Operand {
                        ptr: src_in,
                        len: src_len,
                        writes: false,
                        reads: true,
                    },
                    Operand {
                        ptr: op.dst,
                        len: n,
                        writes: true,
                        reads: false,
                    },
                ],
            )
        }?
    } else {
        Stage::none()
    };
    let (src, dst) = (stage.map(op.src), stage.map(op.dst));
    if op.prim == Prim::LocalCopy {
        // SAFETY: user buffers (or their host mirrors) valid for `n` bytes by contract.
        unsafe { local_copy(op, src, dst) }?;
    } else {
        // SAFETY: `src` is the plan's scratch of `blocks × n` bytes (ours), `dst` the
        // user's output (or its mirror), valid for `n` bytes by contract.
        unsafe { reduce_blocks(op, dst) }?;
    }
    // SAFETY: as `begin`.
    unsafe { stage.finish() }
}

/// Where each received step this one consumes sits (`None`: one has not
/// arrived, wait). The operation's first step from a peer starts with its
/// header, checked before any of its data is used; the address returned then
/// points past it. The size the transport reports is not relied on (NCCL does
/// not either, and some plugins never report it): both sides cut identical
/// steps once their headers agree.
///
/// Errors: a missing receive connector; a header that does not match this
/// rank's operation (`OpDesc::check`).
#[inline]
fn peek_received(
    op: &SliceOp,
    lane: Lane,
    desc: &OpDesc,
    cx: &mut ExecCx<'_>,
    held: &[usize; MAX_PEERS],
) -> Result<Option<[*mut u8; MAX_PEERS]>, Error> {
    let mut recvd = [std::ptr::null_mut::<u8>(); MAX_PEERS];
    for (i, peer) in op.recv_from.iter().enumerate() {
        let r = cx
            .conns
            .recv(&lane.key(peer))
            .ok_or_else(|| missing(lane, "receive", peer))?;
        // Past the steps pending steps hold (`Held`): `peek_at(0)` is `peek`.
        let Some((ptr, _size)) = r.peek_at(held[i]) else {
            return Ok(None);
        };
        recvd[i] = ptr;
        if op.hdr_recv & (1 << i) != 0 {
            // SAFETY: a header step always lands in a FIFO slot (`recv_target`),
            // which holds at least OP_HDR_BYTES bytes and is ours until `pop`.
            // The header is read where the connector says (beside a device slot).
            let hdr = unsafe { std::slice::from_raw_parts(r.hdr_of(ptr), OP_HDR_BYTES) };
            desc.check(hdr, peer, cx.rank)?;
            recvd[i] = ptr.wrapping_add(OP_HDR_BYTES);
        }
    }
    Ok(Some(recvd))
}

/// Checks that a step has the peers its primitive needs (a schedule bug
/// otherwise: [`Error::Internal`]).
#[inline]
fn check_peers(op: &SliceOp) -> Result<(), Error> {
    let (prim, nr) = (op.prim, op.recv_from.len());
    if prim.recvs() && nr == 0 {
        return Err(Error::Internal(format!("{prim:?} step without a receive peer")));
    }
    if nr > 1 && matches!(prim, Prim::Recv | Prim::RecvCopySend) {
        return Err(Error::Internal(format!("{prim:?} step with {nr} receive peers")));
    }
    if prim.sends() && op.send_to.len() == 0 {
        return Err(Error::Internal(format!("{prim:?} step without a send peer")));
    }
    Ok(())
}

/// Whether the step writes user memory (its output).
#[inline]
fn writes_user(op: &SliceOp) -> bool {
    match op.prim {
        Prim::Recv | Prim::RecvCopySend | Prim::RecvReduceCopySend | Prim::RecvReduceCopy => true,
        Prim::CopySend => !std::ptr::eq(op.src, op.dst),
        _ => false,
    }
}

/// Whether a send from the step's output is still in flight on one of the
/// task's send connectors (a step writing user memory waits for it).
#[inline]
fn user_busy(op: &SliceOp, task: &TaskConns, conns: &mut ConnTable) -> bool {
    task.send
        .iter()
        .any(|k| conns.send(k).is_some_and(|s| s.user_busy(op.dst, op.bytes)))
}

/// Where a step's outgoing bytes go on the wire from.
struct Outgoing {
    /// Registered user memory sent as it is, with each send peer's
    /// registration (`None`: through FIFO slots).
    user: Option<(*const u8, [Option<UserReg>; MAX_PEERS])>,
    /// Each send peer's FIFO slot (past the header where one is sent), when
    /// not from user memory.
    slots: [*mut u8; MAX_PEERS],
}

impl Outgoing {
    /// The first send peer's FIFO slot, which the step writes (the others get
    /// a copy); `None` when nothing is sent or it is sent from user memory.
    fn slot(&self, ns: usize) -> Option<*mut u8> {
        (ns > 0 && self.user.is_none()).then_some(self.slots[0])
    }
}

/// Claims the places the step's outgoing bytes go on the wire from: straight
/// from registered user memory when the primitive's output (or input) is
/// exactly what goes on the wire and every send connector has it registered,
/// else a FIFO slot per send peer (with the operation's header written first
/// where the step carries it). `None`: a connector has no room yet (wait).
///
/// Errors: a missing send connector.
#[inline(always)]
fn claim_outgoing(
    op: &SliceOp,
    lane: Lane,
    desc: &OpDesc,
    cx: &mut ExecCx<'_>,
    held: &Held,
) -> Result<Option<Outgoing>, Error> {
    let conns = &mut *cx.conns;
    let n = op.bytes;
    let ns = op.send_to.len();
    let mut out = Outgoing {
        user: None,
        slots: [std::ptr::null_mut::<u8>(); MAX_PEERS],
    };
    if ns == 0 {
        return Ok(Some(out));
    }
    let mut regs = [None; MAX_PEERS];
    let mut src = None;
    // A step carrying the header goes through the FIFO (the header precedes
    // it), as does every step while nothing is registered.
    let peers = if op.hdr_send != 0 || !cx.user_regs { 0 } else { ns };
    for (i, peer) in op.send_to.iter().enumerate().take(peers) {
        let s = conns.send(&lane.key(peer)).ok_or_else(|| missing(lane, "send", peer))?;
        debug_assert!(n <= s.step_size());
        let found = match src {
            None => user_source(op, s),
            Some(p) => s.user_reg(p, n).map(|r| (p, r)),
        };
        match found {
            Some((p, r)) => {
                src = Some(p);
                regs[i] = Some(r);
            }
            None => {
                src = None;
                break;
            }
        }
    }
    if let Some(p) = src {
        if held.any {
            // Sent from user memory only in step order with what is pushed
            // before it: after the pass's pending steps.
            return Ok(None);
        }
        for peer in op.send_to.iter() {
            if !conns.send(&lane.key(peer)).is_some_and(|s| s.can_push_user()) {
                return Ok(None);
            }
        }
        out.user = Some((p, regs));
    } else {
        for (i, peer) in op.send_to.iter().enumerate() {
            let s = conns.send(&lane.key(peer)).ok_or_else(|| missing(lane, "send", peer))?;
            // The slot after those pending steps hold (`Held`; offset 0:
            // `can_push`/`next_slot`/`hdr_slot`).
            let k = held.send[i];
            if !s.can_push_at(k) {
                return Ok(None);
            }
            out.slots[i] = s.slot_at(k);
            if op.hdr_send & (1 << i) != 0 {
                // SAFETY: a FIFO slot holds a step plus OP_HDR_BYTES (the
                // schedule's slices leave that room) and is ours until pushed
                // (a free slot no pending step holds, when the step waits
                // after all). The header goes where the connector says
                // (`hdr_slot_at`: host memory beside a device slot); the
                // payload follows it in the slot.
                desc.encode(unsafe { std::slice::from_raw_parts_mut(s.hdr_slot_at(k), OP_HDR_BYTES) });
                out.slots[i] = out.slots[i].wrapping_add(OP_HDR_BYTES);
            }
        }
    }
    Ok(Some(out))
}

/// Stages the user memory the host cannot touch (`coll::mem`) around a
/// connector step that reads its input (unless it only receives) and writes
/// its output when `writes_user` (called only when some buffer of the work is
/// staged).
///
/// # Safety
/// As [`try_run`]; the user buffers are untouched by others while the step runs.
#[inline]
unsafe fn stage_step(op: &SliceOp, mems: &[OpMem], recvd: &[*mut u8], writes_user: bool) -> Result<Stage, Error> {
    let n = op.bytes;
    let reads_input = !matches!(op.prim, Prim::Recv | Prim::RecvCopySend);
    let lands_in_dst = recvd.iter().any(|&r| !disjoint(r, op.dst, n));
    // SAFETY: user buffers valid for `n` bytes by contract, untouched by others
    // while the step runs.
    unsafe {
        Stage::begin(
            mems,
            &[
                Operand {
                    ptr: if reads_input { op.src } else { std::ptr::null() },
                    len: n,
                    writes: false,
                    reads: true,
                },
                Operand {
                    ptr: op.dst,
                    len: n,
                    writes: writes_user,
                    reads: lands_in_dst,
                },
            ],
        )
    }
}

/// Moves and reduces a connector step's data: from the input `src` and the
/// received steps `recvd` into the output `dst` and the outgoing FIFO slot
/// (`out`), then copies the slot to every further send peer's.
///
/// # Safety
/// FIFO slots hold at least `op.bytes` bytes (checked by the schedule's
/// slicing), are owned by this executor, and never overlap user memory; `src`
/// and `dst` are valid host memory for `op.bytes` bytes. `user_source` only
/// picks a user source where the step writes no user memory it reads
/// (out-of-place) and the op needs no pre-op on what is sent.
unsafe fn compute(op: &SliceOp, src: *const u8, dst: *mut u8, recvd: &[*mut u8], out: &Outgoing) -> Result<(), Error> {
    let n = op.bytes;
    let prim = op.prim;
    let ns = op.send_to.len();
    let slot = out.slot(ns);
    // SAFETY: see the function contract.
    unsafe {
        let user_in = || std::slice::from_raw_parts(src, n);
        // The received steps after the first, folded into a reduction's result.
        let fold_rest = |acc: &mut [u8], red: &DevRedOp| -> Result<(), Error> {
            for &r in recvd.iter().skip(1) {
                BACKEND.reduce_inplace(acc, std::slice::from_raw_parts(r, n), red, Pre::None)?;
            }
            Ok(())
        };
        match (prim, out.user.is_some()) {
            (Prim::Send, true) => {}
            (Prim::Send, false) => {
                let out = std::slice::from_raw_parts_mut(slot.expect("send slot"), n);
                match &op.red {
                    Some(red) if red.has_pre_op() => BACKEND.pre_op(out, user_in(), red)?,
                    _ => out.copy_from_slice(user_in()),
                }
            }
            (Prim::CopySend, true) => memmove(dst, src, n),
            (Prim::CopySend, false) => {
                std::ptr::copy_nonoverlapping(src, slot.expect("send slot"), n);
                memmove(dst, src, n);
            }
            // The first receive of a reduction's result from the network (a
            // CollNetChain head: NCCL's `postOp` on `recv == nranks`): the
            // post-operation (integer average) runs here, then it goes down.
            (Prim::Recv | Prim::RecvCopySend, user) if op.red.as_ref().is_some_and(|r| r.has_post_op()) => {
                let red = reduction(op)?;
                memmove(dst, recvd[0], n);
                BACKEND.post_op(std::slice::from_raw_parts_mut(dst, n), red)?;
                if prim == Prim::RecvCopySend && !user {
                    std::ptr::copy_nonoverlapping(dst, slot.expect("send slot"), n);
                }
            }
            // A received step may already sit in the output (`recv_target`):
            // `memmove` is then a no-op.
            (Prim::Recv, _) | (Prim::RecvCopySend, true) => memmove(dst, recvd[0], n),
            (Prim::RecvCopySend, false) => {
                std::ptr::copy_nonoverlapping(recvd[0], slot.expect("send slot"), n);
                memmove(dst, recvd[0], n);
            }
            (Prim::RecvReduceCopySend, true) => {
                let red = reduction(op)?;
                let inp = std::slice::from_raw_parts(recvd[0], n);
                let out = if std::ptr::eq(src, dst) {
                    // In place: the output slice is the input; pre-op it, not the
                    // received partial result.
                    let acc = std::slice::from_raw_parts_mut(dst, n);
                    BACKEND.reduce_inplace(acc, inp, red, Pre::A)?;
                    acc
                } else {
                    let out = std::slice::from_raw_parts_mut(dst, n);
                    BACKEND.reduce(out, inp, user_in(), red, Pre::B)?;
                    out
                };
                fold_rest(out, red)?;
                if red.has_post_op() {
                    BACKEND.post_op(out, red)?;
                }
            }
            (Prim::RecvReduceSend | Prim::RecvReduceCopySend, _) => {
                let red = reduction(op)?;
                let out = std::slice::from_raw_parts_mut(slot.expect("send slot"), n);
                let inp = std::slice::from_raw_parts(recvd[0], n);
                BACKEND.reduce(out, inp, user_in(), red, Pre::B)?;
                fold_rest(out, red)?;
                if prim == Prim::RecvReduceCopySend {
                    if red.has_post_op() {
                        BACKEND.post_op(out, red)?;
                    }
                    std::ptr::copy_nonoverlapping(out.as_ptr(), dst, n);
                }
            }
            (Prim::RecvReduceCopy, _) => {
                let red = reduction(op)?;
                let acc = std::slice::from_raw_parts_mut(recvd[0], n);
                BACKEND.reduce_inplace(acc, user_in(), red, Pre::B)?;
                fold_rest(acc, red)?;
                if red.has_post_op() {
                    BACKEND.post_op(acc, red)?;
                }
                memmove(dst, acc.as_ptr(), n);
            }
            (Prim::LocalCopy | Prim::ReduceBlocks | Prim::Desc | Prim::CollNet, _) => {
                unreachable!("handled by try_run")
            }
        }
        // The same bytes go to every further send peer.
        if let Some(first) = slot {
            for &other in &out.slots[1..ns] {
                std::ptr::copy_nonoverlapping(first, other, n);
            }
        }
    }
    Ok(())
}

/// Ends a connector step: pushes what it sends to every send peer (from user
/// memory, or the FIFO slot with or without the header) and releases the
/// received steps it consumed.
///
/// Errors: a missing connector.
#[inline]
fn complete(op: &SliceOp, lane: Lane, out: &Outgoing, conns: &mut ConnTable) -> Result<(), Error> {
    let n = op.bytes;
    for (i, peer) in op.send_to.iter().enumerate() {
        let s = conns.send(&lane.key(peer)).ok_or_else(|| missing(lane, "send", peer))?;
        match out.user {
            Some((ptr, regs)) => s.push_user(ptr, n, regs[i].expect("registration of every send peer")),
            None if op.hdr_send & (1 << i) != 0 => s.push(OP_HDR_BYTES + n),
            None => match &op.red {
                Some(red) => s.push_reduce(n, red),
                None => s.push(n),
            },
        }
    }
    for peer in op.recv_from.iter() {
        conns
            .recv(&lane.key(peer))
            .ok_or_else(|| missing(lane, "receive", peer))?
            .pop();
    }
    Ok(())
}

/// `dst = post(pre(src))`, or a plain memmove without a reduction (`src`, `dst`:
/// `op.src`/`op.dst` or their host mirrors).
///
/// # Safety
/// `src`/`dst` valid host memory for `op.bytes` bytes.
unsafe fn local_copy(op: &SliceOp, src: *const u8, dst: *mut u8) -> Result<(), Error> {
    let n = op.bytes;
    match &op.red {
        Some(red) if red.has_pre_op() || red.has_post_op() => {
            let red: &DevRedOp = red;
            // SAFETY: valid by contract; copied out first so in-place aliasing is harmless.
            let mut tmp = unsafe { std::slice::from_raw_parts(src, n) }.to_vec();
            BACKEND.pre_op_inplace(&mut tmp, red)?;
            BACKEND.post_op(&mut tmp, red)?;
            // SAFETY: `dst` valid for `n` bytes; `tmp` is our own allocation.
            unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, n) };
        }
        // SAFETY: valid by contract.
        _ => unsafe { memmove(dst, src, n) },
    }
    Ok(())
}

/// `dst = post(pre(b0) ⊕ pre(b1) ⊕ …)` over `op.blocks` blocks at `src`, reduced
/// in block (= rank) order into block 0 of the scratch.
///
/// # Safety
/// `src` valid for `op.blocks × op.bytes` bytes and exclusively ours; `dst`
/// valid for `op.bytes` bytes (`dst`: `op.dst` or its host mirror).
unsafe fn reduce_blocks(op: &SliceOp, dst: *mut u8) -> Result<(), Error> {
    let n = op.bytes;
    let red = reduction(op)?;
    // SAFETY: see the function contract; blocks do not overlap each other.
    let acc = unsafe { std::slice::from_raw_parts_mut(op.src as *mut u8, n) };
    BACKEND.pre_op_inplace(acc, red)?;
    for b in 1..op.blocks {
        // SAFETY: block `b` lies inside the scratch, disjoint from block 0.
        let other = unsafe { std::slice::from_raw_parts(op.src.add(b * n), n) };
        BACKEND.reduce_inplace(acc, other, red, Pre::B)?;
    }
    if red.has_post_op() {
        BACKEND.post_op(acc, red)?;
    }
    // SAFETY: `dst` valid for `n` bytes; the scratch never overlaps user memory.
    unsafe { std::ptr::copy_nonoverlapping(acc.as_ptr(), dst, n) };
    Ok(())
}

/// Why a step touching device memory is staged instead of run on its GPU.
type Why = &'static str;

/// The GPU whose kernels run `op` (a connector step of an operation with
/// device memory), when every operand is reachable from it: user memory in a
/// buffer of that GPU (or host memory it reaches: pinned, managed, or
/// registered), FIFO slots in host memory page-locked for it
/// (`ferroccl_kernels::hostreg`) or in its own memory. `Err`: why the step is
/// staged.
fn device_for(
    op: &SliceOp,
    lane: Lane,
    cx: &mut ExecCx<'_>,
    recvd: &[*mut u8],
    out: &Outgoing,
) -> Result<Kernels, Why> {
    let n = op.bytes;
    let prim = op.prim;
    let mems = cx.mems;
    let reads_src = matches!(
        prim,
        Prim::Send | Prim::CopySend | Prim::RecvReduceSend | Prim::RecvReduceCopySend | Prim::RecvReduceCopy
    );
    let uses_dst = writes_user(op) || prim == Prim::CopySend;
    // The GPU: that of the first user operand in device memory.
    let user_ops = [(reads_src, op.src), (uses_dst, op.dst as *const u8)];
    let mut k: Option<Kernels> = None;
    for &(used, p) in &user_ops {
        if !used {
            continue;
        }
        if let Some(b) = mems.iter().find_map(|m| m.buffer_of(p, n))
            && b.staged()
        {
            k = Some(b.kernels().ok_or("the buffer's backend only copies")?);
            break;
        }
    }

    let k = k.ok_or("no device operand")?;
    // In place or disjoint: kernels run in parallel, so a partial overlap
    // (which memmove handles on the host) stays on the host path.
    if reads_src && uses_dst && !(std::ptr::eq(op.src, op.dst) || disjoint(op.src, op.dst, n)) {
        return Err("input and output overlap partially");
    }
    let reach_user = |p: *const u8| -> Result<(), Why> { user_reachable(mems, p, n, k.ordinal) };
    for &(used, p) in &user_ops {
        if used {
            reach_user(p)?;
        }
    }
    for (i, peer) in op.recv_from.iter().enumerate() {
        let r = cx.conns.recv(&lane.key(peer)).ok_or("no receive connector")?;
        let p = recvd[i] as *const u8;
        match r.fifo_mem() {
            Some(f) if fifo_contains(f, p, n) => fifo_reachable(f, p, n, k.ordinal)?,
            // Landed in user memory (`recv_target`).
            Some(_) => reach_user(p)?,
            None => return Err("a receive FIFO of unknown memory"),
        }
    }
    match out.user {
        Some((p, _)) => reach_user(p)?,
        None => {
            for (i, peer) in op.send_to.iter().enumerate() {
                let s = cx.conns.send(&lane.key(peer)).ok_or("no send connector")?;
                let f = s.fifo_mem().ok_or("a send FIFO of unknown memory")?;
                let p = out.slots[i] as *const u8;
                if !fifo_contains(f, p, n) {
                    return Err("a send slot outside its FIFO");
                }
                fifo_reachable(f, p, n, k.ordinal)?;
            }
        }
    }
    Ok(k)
}

/// Steps on host memory that staged a FIFO slot in GPU memory, for the process.
static FIFO_STAGED_STEPS: AtomicU64 = AtomicU64::new(0);

/// Steps run on host memory (host user buffers, or device buffers staged)
/// whose FIFO slots in GPU memory (the P2P transport) were copied through a
/// host mirror by the GPU, so far in this process (tests and the GPU checks
/// assert which path ran).
#[doc(hidden)]
pub fn fifo_staged_steps() -> u64 {
    FIFO_STAGED_STEPS.load(Ordering::Relaxed)
}

/// What copies between FIFO slots in the memory of GPU `ordinal` (its own,
/// or a peer's it mapped) and host mirrors: a mock GPU's copy engine
/// (`mockdev::fifo_engine`, plain host mirrors), or the CUDA device's copy
/// kernel (mirrors page-locked for it). `Err`: none.
fn fifo_copier(ordinal: usize) -> Result<(&'static dyn Backend, Option<usize>), Error> {
    if crate::mockdev::bound_gpu(ordinal).is_some() {
        return Ok((crate::mockdev::fifo_engine(), None));
    }
    #[cfg(feature = "cuda")]
    {
        let b = ferroccl_kernels::cuda::CudaBackend::for_device(ordinal)?;
        // Vouched: the executor knows the operands (a FIFO slot this GPU
        // maps, a mirror page-locked for it), as for device steps.
        Ok((b.vouched(), Some(ordinal)))
    }
    #[cfg(not(feature = "cuda"))]
    Err(Error::InvalidUsage(format!(
        "a step on host memory over a connection whose FIFO is memory of GPU {ordinal} (P2P transport) needs \
         that GPU's copies, but ferroccl was built without its `cuda` feature; set NCCL_P2P_DISABLE=1"
    )))
}

/// Stages, into `stage`, the FIFO slots in GPU memory (the P2P transport's:
/// [`FifoMem::Device`]) of a step that runs on the host (host user buffers,
/// or device buffers staged because some operand is out of the GPU's reach):
/// each received slot is copied into a host mirror before the step reads it
/// (device to host), and each outgoing slot is computed in a host mirror and
/// copied into the FIFO (host to the peer's device memory, through this
/// process' mapping of it) by [`Stage::finish`], before the step is pushed.
/// The copies are synchronous (the GPU's waiting backend), so the push that
/// publishes a slot (`tail`, the SHM transport's counters) follows its bytes,
/// as a device step's push follows the wait for its launches ([`Pending`]);
/// the received slot is released only after its copy. The CPU never touches
/// a device slot.
///
/// NCCL has no such path: its kernels read and write user buffers of any
/// space they can address (host memory included, through unified
/// addressing) and the P2P FIFO directly, one `prims_simple.h` step at a
/// time (`genericOp`: load from the user input or the received slot, store
/// to the output and the peer's slot); `src/transport/p2p.cc` (`p2pRecvSetup`,
/// `p2pSendConnect`) only provides the slots. The step layout here is the
/// same (one FIFO slot per step, the same slices); only the place the
/// reduction runs differs (the CPU, on host memory, as for every host
/// buffer: simplest, and the same code and results as the SHM path).
///
/// Errors: [`Error::InvalidUsage`] when no copier exists for the FIFO's GPU
/// ([`fifo_copier`]); the copier's errors.
///
/// # Safety
/// The received slots (`recvd`) and `out`'s slots valid for `op.bytes`
/// bytes and ours until popped or pushed.
unsafe fn stage_device_fifos(
    op: &SliceOp,
    lane: Lane,
    cx: &mut ExecCx<'_>,
    recvd: &[*mut u8],
    out: &Outgoing,
    stage: &mut Stage,
) -> Result<(), Error> {
    let n = op.bytes;
    let mut staged = false;
    for (i, peer) in op.recv_from.iter().enumerate() {
        let r = cx
            .conns
            .recv(&lane.key(peer))
            .ok_or_else(|| missing(lane, "receive", peer))?;
        if let Some(FifoMem::Device { ordinal }) = r.fifo_mem() {
            let (b, pinned_for) = fifo_copier(ordinal)?;
            // SAFETY: the received slot is ours until popped (after finish).
            unsafe { stage.add_range(recvd[i], n, b, pinned_for, true, false) }?;
            staged |= n > 0;
            note_fifo_staging(cx.rank, ordinal);
        }
    }
    if out.user.is_none() {
        for (i, peer) in op.send_to.iter().enumerate() {
            let s = cx
                .conns
                .send(&lane.key(peer))
                .ok_or_else(|| missing(lane, "send", peer))?;
            if let Some(FifoMem::Device { ordinal }) = s.fifo_mem() {
                let (b, pinned_for) = fifo_copier(ordinal)?;
                // SAFETY: the slot is ours until pushed (after finish).
                unsafe { stage.add_range(out.slots[i], n, b, pinned_for, false, true) }?;
                staged |= n > 0;
                note_fifo_staging(cx.rank, ordinal);
            }
        }
    }
    if staged {
        FIFO_STAGED_STEPS.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Logs, once per rank and GPU, that steps on host memory copy to and from
/// that GPU's P2P FIFOs.
fn note_fifo_staging(rank: usize, ordinal: usize) {
    use std::sync::Mutex;
    static SEEN: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
    let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if g.contains(&(rank, ordinal)) {
        return;
    }
    g.push((rank, ordinal));
    drop(g);
    tracing::info!(
        target: "ferroccl::coll",
        "rank {rank}: host memory over P2P: steps copy between host mirrors and the FIFO in GPU {ordinal}'s memory"
    );
}

fn fifo_contains(f: FifoMem, p: *const u8, n: usize) -> bool {
    match f {
        FifoMem::Host { base, len } => {
            let a = p as usize;
            base <= a && a.saturating_add(n) <= base + len
        }
        // A device FIFO holds every slot its connector hands out.
        FifoMem::Device { .. } => true,
    }
}

fn fifo_reachable(f: FifoMem, p: *const u8, n: usize, gpu: usize) -> Result<(), Why> {
    match f {
        FifoMem::Host { .. } if ferroccl_kernels::hostreg::registered(p as usize, n) => Ok(()),
        FifoMem::Host { .. } => Err("a FIFO is not registered for the GPU"),
        FifoMem::Device { ordinal } if ordinal == gpu => Ok(()),
        FifoMem::Device { .. } => Err("a FIFO is another GPU's memory"),
    }
}

/// Whether user memory `[p, p + n)` is reachable from GPU `gpu`: inside a
/// buffer of this work whose memory is that GPU's (kernel-capable), managed or
/// pinned, or inside host memory registered for the GPUs.
fn user_reachable(mems: &[OpMem], p: *const u8, n: usize, gpu: usize) -> Result<(), Why> {
    match mems.iter().find_map(|m| m.buffer_of(p, n)) {
        Some(b) if b.staged() => match b.kernels() {
            Some(k) if k.ordinal == gpu => Ok(()),
            _ => Err("user buffers of two GPUs, or a backend that only copies"),
        },
        Some(b)
            if matches!(
                b.space,
                MemorySpace::Host { pinned: true } | MemorySpace::Device { managed: true, .. }
            ) =>
        {
            Ok(())
        }
        _ if ferroccl_kernels::hostreg::registered(p as usize, n) => Ok(()),
        _ => Err("user memory the GPU cannot reach (pageable host memory)"),
    }
}

/// The GPU of a `LocalCopy` between device buffers, when both ranges are
/// reachable from it and are equal or disjoint.
fn local_device(op: &SliceOp, mems: &[OpMem]) -> Option<Kernels> {
    let n = op.bytes;
    if n == 0 || !(std::ptr::eq(op.src, op.dst) || disjoint(op.src, op.dst, n)) {
        return None;
    }
    let k = [op.src, op.dst as *const u8]
        .iter()
        .find_map(|&p| mems.iter().find_map(|m| m.buffer_of(p, n)).filter(|b| b.staged()))?
        .kernels()?;
    user_reachable(mems, op.src, n, k.ordinal).ok()?;
    user_reachable(mems, op.dst, n, k.ordinal).ok()?;
    Some(k)
}

/// [`local_copy`] on a GPU's kernels: `dst = post(pre(src))`, or a copy.
///
/// # Safety
/// `op.src`/`op.dst` valid for `op.bytes` bytes, reachable from `b`'s GPU,
/// equal or disjoint.
unsafe fn local_copy_dev(op: &SliceOp, b: &dyn Backend) -> Result<(), Error> {
    let n = op.bytes;
    // SAFETY: see the function contract (pre_op_raw and copy_raw take equal or
    // disjoint ranges; the post-op works in place).
    unsafe {
        match &op.red {
            Some(red) if red.has_pre_op() || red.has_post_op() => {
                b.pre_op_raw(op.dst, op.src, n, red)?;
                if red.has_post_op() {
                    b.post_op_raw(op.dst, n, red)?;
                }
            }
            _ => b.copy_raw(op.dst, op.src, n)?,
        }
    }
    Ok(())
}

/// `dst = src` for ranges that are equal (nothing to do) or disjoint, on `b`.
///
/// # Safety
/// As [`Backend::copy_raw`].
unsafe fn dmove(b: &dyn Backend, dst: *mut u8, src: *const u8, n: usize) -> Result<(), Error> {
    if !std::ptr::eq(dst, src) && n > 0 {
        // SAFETY: the caller's contract.
        unsafe { b.copy_raw(dst, src, n) }?;
    }
    Ok(())
}

/// [`compute`] on a GPU's kernels (`b`), on the step's own addresses: user
/// memory, FIFO slots (registered host memory or device memory) and received
/// steps, one launch per operand operation, as NCCL's `prims_simple.h` moves a
/// step between user buffers and connector FIFOs. The same cases as
/// [`compute`], with the same aliasing: every reduction's operands are equal
/// to its destination or disjoint from it ([`device_for`] keeps partial
/// overlaps off this path).
///
/// # Safety
/// As [`compute`], with every operand reachable from `b`'s GPU ([`device_for`]).
unsafe fn compute_dev(op: &SliceOp, b: &dyn Backend, recvd: &[*mut u8], out: &Outgoing) -> Result<(), Error> {
    // The step's launches are enqueued in order and waited for once (one
    // synchronize per step, as NCCL's one kernel per operation never
    // synchronizes between a step's loads, reduces and stores).
    let Some(q) = b.enqueuer() else {
        // SAFETY: the caller's contract.
        return unsafe { compute_dev_on(op, b, recvd, out) };
    };
    // SAFETY: the caller's contract; nothing reads or writes the step's
    // operands before `wait_enqueued` returns (the slots are pushed after).
    let r = unsafe { compute_dev_on(op, q, recvd, out) };
    // Wait even when an enqueue failed: what was enqueued still runs.
    let w = b.wait_enqueued();
    r?;
    Ok(w?)
}

/// [`compute_dev`]'s launches on `b` (an enqueuer or a waiting backend).
///
/// # Safety
/// As [`compute_dev`].
unsafe fn compute_dev_on(op: &SliceOp, b: &dyn Backend, recvd: &[*mut u8], out: &Outgoing) -> Result<(), Error> {
    let n = op.bytes;
    let prim = op.prim;
    let ns = op.send_to.len();
    let slot = out.slot(ns);
    let (src, dst) = (op.src, op.dst);
    // SAFETY: see the function contract.
    unsafe {
        let fold_rest = |acc: *mut u8, red: &DevRedOp| -> Result<(), Error> {
            for &r in recvd.iter().skip(1) {
                b.reduce_raw(acc, acc, r, n, red, Pre::None)?;
            }
            Ok(())
        };
        match (prim, out.user.is_some()) {
            (Prim::Send, true) => {}
            (Prim::Send, false) => {
                let s = slot.expect("send slot");
                match &op.red {
                    Some(red) if red.has_pre_op() => b.pre_op_raw(s, src, n, red)?,
                    _ => b.copy_raw(s, src, n)?,
                }
            }
            (Prim::CopySend, true) => dmove(b, dst, src, n)?,
            (Prim::CopySend, false) => {
                b.copy_raw(slot.expect("send slot"), src, n)?;
                dmove(b, dst, src, n)?;
            }
            (Prim::Recv | Prim::RecvCopySend, user) if op.red.as_ref().is_some_and(|r| r.has_post_op()) => {
                let red = reduction(op)?;
                dmove(b, dst, recvd[0], n)?;
                b.post_op_raw(dst, n, red)?;
                if prim == Prim::RecvCopySend && !user {
                    b.copy_raw(slot.expect("send slot"), dst, n)?;
                }
            }
            (Prim::Recv, _) | (Prim::RecvCopySend, true) => dmove(b, dst, recvd[0], n)?,
            (Prim::RecvCopySend, false) => {
                b.copy_raw(slot.expect("send slot"), recvd[0], n)?;
                dmove(b, dst, recvd[0], n)?;
            }
            (Prim::RecvReduceCopySend, true) => {
                let red = reduction(op)?;
                if std::ptr::eq(src, dst) {
                    // In place: pre-op the input (the accumulator), not the
                    // received partial result.
                    b.reduce_raw(dst, dst, recvd[0], n, red, Pre::A)?;
                } else {
                    b.reduce_raw(dst, recvd[0], src, n, red, Pre::B)?;
                }
                fold_rest(dst, red)?;
                if red.has_post_op() {
                    b.post_op_raw(dst, n, red)?;
                }
            }
            (Prim::RecvReduceSend | Prim::RecvReduceCopySend, _) => {
                let red = reduction(op)?;
                let s = slot.expect("send slot");
                b.reduce_raw(s, recvd[0], src, n, red, Pre::B)?;
                fold_rest(s, red)?;
                if prim == Prim::RecvReduceCopySend {
                    if red.has_post_op() {
                        b.post_op_raw(s, n, red)?;
                    }
                    b.copy_raw(dst, s, n)?;
                }
            }
            (Prim::RecvReduceCopy, _) => {
                let red = reduction(op)?;
                let acc = recvd[0];
                b.reduce_raw(acc, acc, src, n, red, Pre::B)?;
                fold_rest(acc, red)?;
                if red.has_post_op() {
                    b.post_op_raw(acc, n, red)?;
                }
                dmove(b, dst, acc, n)?;
            }
            (Prim::LocalCopy | Prim::ReduceBlocks | Prim::Desc | Prim::CollNet, _) => {
                unreachable!("handled by try_run")
            }
        }
        // The same bytes go to every further send peer.
        if let Some(first) = slot {
            for &other in &out.slots[1..ns] {
                b.copy_raw(other, first, n)?;
            }
        }
    }
    Ok(())
}

/// Logs, once per rank and outcome, whether steps on device memory run on the
/// GPU or are staged (and why), NCCL style.
fn note_decision(rank: usize, dev: &Result<Kernels, Why>) {
    use std::sync::Mutex;
    static SEEN: Mutex<Vec<(usize, Option<usize>, Why)>> = Mutex::new(Vec::new());
    let key = match dev {
        Ok(k) => (rank, Some(k.ordinal), ""),
        Err(why) => (rank, None, *why),
    };
    let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if g.contains(&key) {
        return;
    }
    g.push(key);
    drop(g);
    match dev {
        Ok(k) => tracing::info!(
            target: "ferroccl::coll",
            "rank {rank}: device buffers: steps reduce on GPU {} (FIFO registered)",
            k.ordinal
        ),
        Err(why) => tracing::info!(
            target: "ferroccl::coll",
            "rank {rank}: device buffers: steps stage through host memory ({why})"
        ),
    }
}
