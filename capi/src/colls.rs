//! The collectives and point-to-point calls (NCCL 2.30.7 `src/collectives.cc`,
//! argument checks of `src/enqueue.cc` `ArgsCheck` with NCCL's messages), and
//! the PreMulSum operators.
//!
//! Each call checks its arguments, picks the stream (see the crate docs),
//! enqueues on the runtime's communicator, and then: inside a group, returns
//! (the group's end waits); on the NULL stream of a blocking communicator,
//! waits for the operation; of a non-blocking one, returns `ncclInProgress`; on
//! a CUDA stream, returns at once (the stream orders the rest).
//!
//! `ncclAlltoAll`, `ncclGather` and `ncclScatter` are groups of sends and
//! receives, as NCCL builds them.

use std::ffi::{c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

use ferroccl::{Comm, DataType, RedOp, Scalar, Stream};

use crate::abi::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclScalarResidence_t};
use crate::api::{Fail, R, guard, store};
use crate::enums::{self, FLOAT8_E4M3, FLOAT8_E5M2, MAX_RED_OP, NUM_OPS, NUM_TYPES};
use crate::group;
use crate::handles::{self, Entry, ScalarSrc, UserOp};

/// A call's datatype. fp8 types move as bytes (they cannot be reduced here).
#[inline]
fn datatype(op: &str, v: ncclDataType_t, reduces: bool) -> R<DataType> {
    match DataType::ALL.get(v as usize) {
        Some(t) if v >= 0 => Ok(*t),
        _ => other_datatype(op, v, reduces),
    }
}

/// fp8, or the error for a value outside `ncclDataType_t`.
#[cold]
fn other_datatype(op: &str, v: ncclDataType_t, reduces: bool) -> R<DataType> {
    if !(0..NUM_TYPES).contains(&v) {
        return Err(Fail::arg(format!("{op} : invalid type {v}")));
    }
    if v == FLOAT8_E4M3 || v == FLOAT8_E5M2 {
        if reduces {
            return Err(Fail::usage(format!(
                "{op} : reductions on {} are not implemented by ferroccl (data movement of it is)",
                enums::datatype_name(v).unwrap_or("fp8")
            )));
        }
        return Ok(DataType::Uint8);
    }
    // Values 0..=9 are the runtime's datatypes (taken by `datatype`).
    Err(Fail::arg(format!("{op} : invalid type {v}")))
}

/// The built-in operators by `ncclRedOp_t` value.
const BUILTIN_OPS: [RedOp; NUM_OPS as usize] = [RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg];

/// The runtime's operator for `op` on `dtype` (`v`: the raw datatype).
#[inline]
fn redop(name: &str, e: &Entry, op: ncclRedOp_t, v: ncclDataType_t, dtype: DataType) -> R<RedOp> {
    match BUILTIN_OPS.get(op as usize) {
        Some(o) if op >= 0 => Ok(*o),
        _ => user_redop(name, e, op, v, dtype),
    }
}

/// A user operator (`ncclRedOpCreatePreMulSum`), or the error for `op`.
#[cold]
fn user_redop(name: &str, e: &Entry, op: ncclRedOp_t, v: ncclDataType_t, dtype: DataType) -> R<RedOp> {
    if op < 0 || i64::from(op) > MAX_RED_OP {
        return Err(Fail::arg(format!("{name} : invalid reduction operation {op}")));
    }
    let user = e
        .ops
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get((op - NUM_OPS) as usize)
        .copied()
        .flatten()
        .ok_or_else(|| {
            Fail::arg(format!(
                "{name} : reduction operation {op} unknown to this communicator"
            ))
        })?;
    if user.dtype != v {
        return Err(Fail::arg(format!(
            "{name} : Data type supplied to user-created ncclRedOp_t does not match type given to reduction \
             operation (operator of {}, call of {})",
            enums::datatype_name(user.dtype).unwrap_or("?"),
            enums::datatype_name(v).unwrap_or("?")
        )));
    }
    let scalar = match user.scalar {
        ScalarSrc::Value(s) => s,
        ScalarSrc::Ptr(p) => read_scalar(name, p as *const c_void, dtype)?,
    };
    Ok(RedOp::PreMulSum(scalar))
}

/// Reads a PreMulSum scalar from host-accessible memory.
fn read_scalar(name: &str, p: *const c_void, dtype: DataType) -> R<Scalar> {
    if p.is_null() {
        return Err(Fail::arg(format!("{name} : scalar argument is NULL")));
    }
    let space = ferroccl_kernels::memory_space(p.cast()).map_err(|e| Fail::arg(format!("{name} : scalar: {e}")))?;
    if !space.host_accessible() {
        return Err(Fail::usage(format!(
            "{name} : a PreMulSum scalar in {space} is not supported by ferroccl (use host memory, or \
             ncclScalarHostImmediate)"
        )));
    }
    // SAFETY: a host-accessible scalar of `dtype` (the caller's contract).
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), dtype.size()) };
    Ok(Scalar::from_bytes(dtype, bytes))
}

/// NCCL's root check (`ArgsCheck`): also the peer of Send/Recv.
fn root_rank(op: &str, root: c_int, nranks: usize) -> R<usize> {
    if root < 0 || root as usize >= nranks {
        return Err(Fail::arg(format!(
            "{op} : invalid root {root} (root should be in the 0..{nranks} range)"
        )));
    }
    Ok(root as usize)
}

/// The communicator and stream of one call.
struct Call<'a> {
    entry: &'a Entry,
    comm: &'a Comm,
    /// The caller's CUDA stream, or the communicator's host stream (NULL stream).
    stream: &'a Stream,
    /// Whether `stream` is the caller's CUDA stream.
    device: bool,
}

impl Call<'_> {
    fn stream(&self) -> &Stream {
        self.stream
    }
}

/// The bound on a device stream's wait for an operation (the communicator's
/// watchdog ends operations before it).
fn stream_timeout() -> Duration {
    use ferroccl::config::IntParamExt;
    let cfg = ferroccl::config::Config::global();
    let secs = ferroccl::config::params::TIMEOUT_SEC.get(cfg).unwrap_or(300).max(1) as u64;
    Duration::from_secs(secs + 60)
}

/// A stream ordered with the caller's CUDA stream `stream` (not NULL).
#[cold]
fn device_stream(op: &str, entry: &Entry, stream: cudaStream_t) -> R<Stream> {
    if ferroccl_kernels::cuda::device_count().is_err() {
        return Err(Fail::arg(format!(
            "{op} : stream {stream:p} given but this process has no usable CUDA driver: on a machine without a \
             GPU pass the NULL stream and host memory (a ferroccl extension)"
        )));
    }
    let ordinal = if entry.cuda_dev >= 0 {
        entry.cuda_dev as usize
    } else {
        0
    };
    // SAFETY: a live CUDA stream of the communicator's device, valid until the
    // operation completes (NCCL's contract for the stream argument).
    let dev = unsafe { ferroccl::stream::CudaStream::from_raw(stream.cast(), ordinal, stream_timeout()) };
    Ok(Stream::new().on_device(Arc::new(dev)))
}

/// After the enqueue: see the module docs.
#[inline]
fn finish(op: &str, call: &Call) -> R {
    if call.device {
        return Ok(());
    }
    if group::in_group() {
        group::note_host(call.entry);
        return Ok(());
    }
    if !call.entry.settings.blocking {
        return Err(Fail::in_progress());
    }
    call.stream.synchronize().map_err(|e| Fail::runtime(op, &e))
}

/// One call's arguments, built once and passed down by reference (every layer
/// of the call shares it instead of copying the arguments again).
#[derive(Clone, Copy)]
struct Args {
    /// The exported function (`ncclAllReduce`).
    name: &'static str,
    /// NCCL's operation name in messages (`AllReduce`).
    op: &'static str,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    red: ncclRedOp_t,
    /// The root, or the peer of Send/Recv.
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
}

impl Args {
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn new(
        (name, op): (&'static str, &'static str),
        (send, recv, count, dt): (*const c_void, *mut c_void, usize, ncclDataType_t),
        red: ncclRedOp_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> Args {
        Args {
            name,
            op,
            send,
            recv,
            count,
            dt,
            red,
            root,
            comm,
            stream,
        }
    }
}

/// Runs one call: arguments, enqueue (`body`), completion. A failure inside a
/// group also fails the group's end.
#[inline(always)]
fn run(a: &Args, body: impl FnOnce(&Call, &Args) -> R) -> ncclResult_t {
    guard(a.name, || {
        let r = handles::with_ready(a.comm, a.op, |entry, c| {
            let dev;
            let (stream, device) = if a.stream.is_null() {
                (&entry.host_stream, false)
            } else {
                dev = device_stream(a.op, entry, a.stream)?;
                (&dev, true)
            };
            let call = Call {
                entry,
                comm: c,
                stream,
                device,
            };
            body(&call, a)?;
            finish(a.op, &call)
        });
        if let Err(e) = &r
            && e.code != crate::enums::result::IN_PROGRESS
        {
            group::note_error(e);
        }
        r
    })
}

fn rt(op: &str) -> impl Fn(ferroccl::Error) -> Fail + '_ {
    move |e| Fail::runtime(op, &e)
}

/// `ncclAllReduce`.
pub(crate) fn all_reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclAllReduce", "AllReduce"),
        (send, recv, count, dt),
        op,
        0,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let dtype = datatype(a.op, a.dt, true)?;
        let op = redop(a.op, c.entry, a.red, a.dt, dtype)?;
        // SAFETY: NCCL's contract: the buffers hold `count` elements and stay
        // valid until the operation completes.
        unsafe {
            c.comm
                .all_reduce(a.send.cast(), a.recv.cast(), a.count, dtype, op, c.stream())
        }
        .map_err(rt(a.op))
    })
}

/// `ncclReduce`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclReduce", "Reduce"),
        (send, recv, count, dt),
        op,
        root,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let r = root_rank(a.op, a.root, c.comm.nranks())?;
        let dtype = datatype(a.op, a.dt, true)?;
        let op = redop(a.op, c.entry, a.red, a.dt, dtype)?;
        // SAFETY: as all_reduce (recv is only written on the root).
        unsafe {
            c.comm
                .reduce(a.send.cast(), a.recv.cast(), a.count, dtype, op, r, c.stream())
        }
        .map_err(rt(a.op))
    })
}

/// `ncclBroadcast`.
pub(crate) fn broadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclBroadcast", "Broadcast"),
        (send, recv, count, dt),
        0,
        root,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let r = root_rank(a.op, a.root, c.comm.nranks())?;
        let dtype = datatype(a.op, a.dt, false)?;
        // SAFETY: as all_reduce (send is only read on the root).
        unsafe {
            c.comm
                .broadcast(a.send.cast(), a.recv.cast(), a.count, dtype, r, c.stream())
        }
        .map_err(rt(a.op))
    })
}

/// `ncclBcast`: in-place `ncclBroadcast`.
pub(crate) fn bcast(
    buff: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    broadcast(buff, buff, count, dt, root, comm, stream)
}

/// `ncclReduceScatter`.
pub(crate) fn reduce_scatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclReduceScatter", "ReduceScatter"),
        (send, recv, count, dt),
        op,
        0,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let dtype = datatype(a.op, a.dt, true)?;
        let op = redop(a.op, c.entry, a.red, a.dt, dtype)?;
        // SAFETY: send holds nranks × count elements, recv count (NCCL's contract).
        unsafe {
            c.comm
                .reduce_scatter(a.send.cast(), a.recv.cast(), a.count, dtype, op, c.stream())
        }
        .map_err(rt(a.op))
    })
}

/// `ncclAllGather`.
pub(crate) fn all_gather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclAllGather", "AllGather"),
        (send, recv, count, dt),
        0,
        0,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let dtype = datatype(a.op, a.dt, false)?;
        // SAFETY: send holds count elements, recv nranks × count (NCCL's contract).
        unsafe {
            c.comm
                .all_gather(a.send.cast(), a.recv.cast(), a.count, dtype, c.stream())
        }
        .map_err(rt(a.op))
    })
}

/// `ncclSend`.
pub(crate) fn send(
    buf: *const c_void,
    count: usize,
    dt: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclSend", "Send"),
        (buf, std::ptr::null_mut(), count, dt),
        0,
        peer,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let p = root_rank(a.op, a.root, c.comm.nranks())?;
        let dtype = datatype(a.op, a.dt, false)?;
        // SAFETY: buf holds count elements until the operation completes.
        unsafe { c.comm.send(a.send.cast(), a.count, dtype, p, c.stream()) }.map_err(rt(a.op))
    })
}

/// `ncclRecv`.
pub(crate) fn recv(
    buf: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclRecv", "Recv"),
        (std::ptr::null(), buf, count, dt),
        0,
        peer,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let p = root_rank(a.op, a.root, c.comm.nranks())?;
        let dtype = datatype(a.op, a.dt, false)?;
        // SAFETY: buf holds count elements until the operation completes.
        unsafe { c.comm.recv(a.recv.cast(), a.count, dtype, p, c.stream()) }.map_err(rt(a.op))
    })
}

/// Block `i` of a buffer of `count`-element blocks.
fn block(p: *const c_void, i: usize, count: usize, dtype: DataType, op: &str) -> R<*mut u8> {
    if p.is_null() {
        return Ok(std::ptr::null_mut());
    }
    let off = i
        .checked_mul(count)
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| Fail::arg(format!("{op} : count {count} overflows")))?;
    Ok(p.cast::<u8>().wrapping_add(off).cast_mut())
}

/// A group of sends and receives on the runtime (nested in the caller's group
/// if one is open); the first enqueue error wins.
fn p2p_group(op: &str, f: impl FnOnce() -> R) -> R {
    ferroccl::group_start();
    let r = f();
    let g = ferroccl::group_end().map_err(rt(op));
    r.and(g)
}

/// `ncclAlltoAll`: block j of `send` to rank j, block i of `recv` from rank i.
pub(crate) fn all_to_all(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclAlltoAll", "AlltoAll"),
        (send, recv, count, dt),
        0,
        0,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let dtype = datatype(a.op, a.dt, false)?;
        p2p_group(a.op, || {
            for r in 0..c.comm.nranks() {
                let s = block(a.send, r, a.count, dtype, a.op)?;
                let d = block(a.recv, r, a.count, dtype, a.op)?;
                // SAFETY: send and recv hold nranks × count elements (NCCL's contract).
                unsafe {
                    c.comm.send(s, a.count, dtype, r, c.stream()).map_err(rt(a.op))?;
                    c.comm.recv(d, a.count, dtype, r, c.stream()).map_err(rt(a.op))?;
                }
            }
            Ok(())
        })
    })
}

/// `ncclGather`: every rank's `count` elements to `root`'s block of its rank.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gather(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(("ncclGather", "Gather"), (send, recv, count, dt), 0, root, comm, stream);
    run(&a, |c, a| {
        let root = root_rank(a.op, a.root, c.comm.nranks())?;
        let dtype = datatype(a.op, a.dt, false)?;
        p2p_group(a.op, || {
            // SAFETY: send holds count elements; recv on the root nranks × count.
            unsafe {
                c.comm
                    .send(a.send.cast(), a.count, dtype, root, c.stream())
                    .map_err(rt(a.op))?;
                if c.comm.rank() == root {
                    for r in 0..c.comm.nranks() {
                        let d = block(a.recv, r, a.count, dtype, a.op)?;
                        c.comm.recv(d, a.count, dtype, r, c.stream()).map_err(rt(a.op))?;
                    }
                }
            }
            Ok(())
        })
    })
}

/// `ncclScatter`: block i of `root`'s `send` to rank i.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scatter(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    let a = Args::new(
        ("ncclScatter", "Scatter"),
        (send, recv, count, dt),
        0,
        root,
        comm,
        stream,
    );
    run(&a, |c, a| {
        let root = root_rank(a.op, a.root, c.comm.nranks())?;
        let dtype = datatype(a.op, a.dt, false)?;
        p2p_group(a.op, || {
            // SAFETY: recv holds count elements; send on the root nranks × count.
            unsafe {
                if c.comm.rank() == root {
                    for r in 0..c.comm.nranks() {
                        let s = block(a.send, r, a.count, dtype, a.op)?;
                        c.comm.send(s, a.count, dtype, r, c.stream()).map_err(rt(a.op))?;
                    }
                }
                c.comm
                    .recv(a.recv.cast(), a.count, dtype, root, c.stream())
                    .map_err(rt(a.op))?;
            }
            Ok(())
        })
    })
}

/// `ncclRedOpCreatePreMulSum`.
pub(crate) fn red_op_create_pre_mul_sum(
    out: *mut ncclRedOp_t,
    scalar: *mut c_void,
    dt: ncclDataType_t,
    residence: ncclScalarResidence_t,
    comm: ncclComm_t,
) -> ncclResult_t {
    guard("ncclRedOpCreatePreMulSum", || {
        const OP: &str = "ncclRedOpCreatePreMulSum";
        let e = handles::get(comm, OP)?;
        e.comm(OP)?;
        if out.is_null() {
            return Err(Fail::arg(format!("{OP} : op argument is NULL")));
        }
        let dtype = datatype(OP, dt, true)?;
        let src = match residence {
            enums::SCALAR_HOST_IMMEDIATE => ScalarSrc::Value(read_scalar(OP, scalar, dtype)?),
            enums::SCALAR_DEVICE => {
                // Checked now, read at each enqueue (NCCL reads it as the operation runs).
                read_scalar(OP, scalar, dtype)?;
                ScalarSrc::Ptr(scalar as usize)
            }
            r => return Err(Fail::arg(format!("{OP} : invalid scalar residence {r}"))),
        };
        let user = UserOp { dtype: dt, scalar: src };
        let mut ops = e.ops.lock().unwrap_or_else(|p| p.into_inner());
        let i = match ops.iter().position(Option::is_none) {
            Some(i) => {
                ops[i] = Some(user);
                i
            }
            None => {
                ops.push(Some(user));
                ops.len() - 1
            }
        };
        let id = NUM_OPS as usize + i;
        if id as i64 > MAX_RED_OP {
            ops[i] = None;
            return Err(Fail::usage(format!("{OP} : too many user operators")));
        }
        store(out, id as ncclRedOp_t, OP, "op")
    })
}

/// `ncclRedOpDestroy`.
pub(crate) fn red_op_destroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t {
    guard("ncclRedOpDestroy", || {
        const OP: &str = "ncclRedOpDestroy";
        let e = handles::get(comm, OP)?;
        if (0..NUM_OPS).contains(&op) {
            return Err(Fail::arg(format!("{OP} : operator is a NCCL builtin.")));
        }
        let mut ops = e.ops.lock().unwrap_or_else(|p| p.into_inner());
        match usize::try_from(op - NUM_OPS).ok().and_then(|i| ops.get_mut(i)) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(Fail::arg(format!("{OP} : operator is garbage."))),
        }
    })
}

/// One one-sided call (`capi::rma`): the communicator and stream checks, the
/// enqueue (`body`) and the completion of the other operations.
pub(crate) fn rma_call(
    (name, op): (&'static str, &'static str),
    comm: ncclComm_t,
    stream: cudaStream_t,
    body: impl FnOnce(&Comm, &Stream) -> R,
) -> ncclResult_t {
    let a = Args::new(
        (name, op),
        (std::ptr::null(), std::ptr::null_mut(), 0, 0),
        0,
        0,
        comm,
        stream,
    );
    run(&a, |c, _| body(c.comm, c.stream()))
}
