//! Enqueueing an operation (NCCL's `src/enqueue.cc`): argument checks, the
//! memory space of its buffers (`coll::mem`), then
//! either the open group collects the operation or it is handed to the
//! communicator's proxy thread at once. The public entry points that call this
//! are the collective methods of `Comm` (`comm/colls.rs`).

use std::sync::Arc;

use ferroccl_kernels::DataType;

use crate::coll::mem::OpMem;
use crate::coll::{CollArgs, CollKind};
use crate::error::Error;
use crate::group;
use crate::proxy::ProxyHandle;
use crate::stream::Stream;

/// Checks `args` against the communicator and enqueues it (or adds it to the
/// thread's open group).
///
/// Errors: [`Error::InvalidArgument`] for NULL buffers with bytes to move, a
/// count whose byte size overflows, a root or peer outside the communicator;
/// the errors of [`ProxyHandle::submit`].
pub(crate) fn enqueue(comm: &Arc<ProxyHandle>, mut args: CollArgs, stream: &Stream) -> Result<(), Error> {
    // The buffers' byte counts, once per operation (the proxy and the
    // registration read them from `args`).
    args.bytes = check_ptrs(args.kind, args.send, args.recv, args.count, args.dtype, comm.nranks)?;
    // Host or device memory, once per operation: the executor stages device
    // memory the host cannot touch, and the proxy registers user memory with the
    // plugin only in a memory space the plugin takes (`coll::mem`).
    args.mem = OpMem::classify(args.send, args.recv, args.bytes)?;
    if args.mem.any_staged() {
        // Device buffers whose GPU runs kernels: the FIFOs registered and the
        // kernels loaded here, not on the proxy (`coll::mem::prepare_kernels`).
        crate::coll::mem::prepare_kernels(&mut args.mem, args.dtype);
        if stream.has_device() {
            // Ordered with a caller's device stream: the proxy must make no CUDA
            // call that may wait for that stream (`coll::mem::reserve`).
            crate::coll::mem::reserve(&args.mem)?;
        }
    }
    match args.kind {
        CollKind::Broadcast { root } | CollKind::Reduce { root } if root >= comm.nranks => {
            return Err(Error::InvalidArgument(format!(
                "{}: root {root} is not a rank of this {}-rank communicator",
                args.kind.name(),
                comm.nranks
            )));
        }
        CollKind::Send { peer } | CollKind::Recv { peer } if peer >= comm.nranks => {
            return Err(Error::InvalidArgument(format!(
                "{}: peer {peer} is not a rank of this {}-rank communicator",
                args.kind.name(),
                comm.nranks
            )));
        }
        _ => {}
    }
    // One predictable branch when no profiler is loaded.
    let tag = match &comm.profiler {
        None => group::ApiTag::default(),
        Some(p) => group::api_event(p, &args),
    };
    // Asked first, so that outside a group `args` (a few hundred bytes) is
    // not moved into the group's closure and back on every call.
    if group::in_group() {
        group::add(comm, args, stream, tag);
        return Ok(());
    }
    let what = crate::coll::WorkWhat::of(std::slice::from_ref(&args));
    if comm.profiler.is_some() {
        group::api_group_end_start();
    }
    let r = comm.submit(smallvec::smallvec![args], smallvec::smallvec![tag], &[stream], what);
    if comm.profiler.is_some() {
        group::api_group_stop();
    }
    r
}

/// Validates arguments common to the enqueue entry points: buffers that must be
/// read or written are not NULL, and the byte sizes do not overflow. Returns
/// the bytes read from `send` and written to `recv` ([`CollKind::buffer_bytes`]).
fn check_ptrs(
    kind: CollKind,
    send: *const u8,
    recv: *mut u8,
    count: usize,
    dtype: DataType,
    nranks: usize,
) -> Result<(usize, usize), Error> {
    count
        .checked_mul(dtype.size())
        .and_then(|b| b.checked_mul(nranks))
        .ok_or_else(|| Error::InvalidArgument(format!("{}: count {count} overflows", kind.name())))?;
    let (sb, rb) = kind.buffer_bytes(count, dtype, nranks);
    if sb > 0 && send.is_null() {
        return Err(Error::InvalidArgument(format!(
            "{}: send buffer is NULL with {sb} bytes to read",
            kind.name()
        )));
    }
    if rb > 0 && recv.is_null() {
        return Err(Error::InvalidArgument(format!(
            "{}: receive buffer is NULL with {rb} bytes to write",
            kind.name()
        )));
    }
    Ok((sb, rb))
}
