//! The collective entry points of [`Comm`] (NCCL's `src/collectives.cc`).
//!
//! Two flavours:
//! * `unsafe` raw-pointer calls taking `*const u8` / `*mut u8` plus an element
//!   count, asynchronous on a [`Stream`] exactly like NCCL on a CUDA stream;
//! * safe `*_sync` wrappers on byte slices that enqueue on a private stream and
//!   wait (not allowed inside a group).

use ferroccl_kernels::{DataType, RedOp};

use super::Comm;
use crate::coll::{CollArgs, CollKind};
use crate::error::Error;
use crate::group;
use crate::stream::Stream;

/// Bytes of `count` elements, checked.
fn bytes_of(what: &str, buf_len: usize, need: usize) -> Result<(), Error> {
    if buf_len < need {
        return Err(Error::InvalidArgument(format!(
            "{what} buffer holds {buf_len} bytes, the operation needs {need}"
        )));
    }
    Ok(())
}

impl Comm {
    #[allow(clippy::too_many_arguments)]
    fn raw(
        &self,
        kind: CollKind,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        dtype: DataType,
        op: RedOp,
        stream: &Stream,
    ) -> Result<(), Error> {
        self.enqueue(
            CollArgs {
                kind,
                send,
                recv,
                count,
                dtype,
                op,
                // Classified by `enqueue` once the arguments are checked.
                bytes: (0, 0),
                mem: crate::coll::mem::OpMem::HOST,
            },
            stream,
        )
    }

    /// `ncclAllReduce`: `recv[i] = send[i]` reduced with `op` over all ranks, for
    /// `count` elements of `dtype`. In place when `send == recv`.
    ///
    /// # Safety
    /// `send` must be readable and `recv` writable for `count × dtype.size()` bytes,
    /// and neither may be touched by the caller nor freed until `stream` has been
    /// synchronized (they may be equal, but must not otherwise overlap).
    pub unsafe fn all_reduce(
        &self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        dtype: DataType,
        op: RedOp,
        stream: &Stream,
    ) -> Result<(), Error> {
        self.raw(CollKind::AllReduce, send, recv, count, dtype, op, stream)
    }

    /// `ncclAllGather`: `recv[r × count ..][..count]` = rank `r`'s `send[..count]`.
    /// In place when `send == recv + rank × count × size`.
    ///
    /// # Safety
    /// `send` readable for `count` elements, `recv` writable for `nranks × count`,
    /// both untouched until `stream` is synchronized.
    pub unsafe fn all_gather(
        &self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        dtype: DataType,
        stream: &Stream,
    ) -> Result<(), Error> {
        self.raw(CollKind::AllGather, send, recv, count, dtype, RedOp::Sum, stream)
    }

    /// `ncclReduceScatter`: `recv[..count]` = block `rank` of the reduction of every
    /// rank's `send[..nranks × count]`. In place when `recv == send + rank × count × size`.
    ///
    /// # Safety
    /// `send` readable for `nranks × count` elements, `recv` writable for `count`,
    /// both untouched until `stream` is synchronized.
    pub unsafe fn reduce_scatter(
        &self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        dtype: DataType,
        op: RedOp,
        stream: &Stream,
    ) -> Result<(), Error> {
        self.raw(CollKind::ReduceScatter, send, recv, count, dtype, op, stream)
    }

    /// `ncclBroadcast`: every rank's `recv[..count]` = `root`'s `send[..count]`
    /// (`send` is only read on the root).
    ///
    /// # Safety
    /// As [`Comm::all_reduce`].
    pub unsafe fn broadcast(
        &self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        dtype: DataType,
        root: usize,
        stream: &Stream,
    ) -> Result<(), Error> {
        self.raw(
            CollKind::Broadcast { root },
            send,
            recv,
            count,
            dtype,
            RedOp::Sum,
            stream,
        )
    }

    /// `ncclReduce`: `root`'s `recv[..count]` = reduction of every rank's `send`
    /// (`recv` is only written on the root).
    ///
    /// # Safety
    /// As [`Comm::all_reduce`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce(
        &self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        dtype: DataType,
        op: RedOp,
        root: usize,
        stream: &Stream,
    ) -> Result<(), Error> {
        self.raw(CollKind::Reduce { root }, send, recv, count, dtype, op, stream)
    }

    /// `ncclSend` of `count` elements to `peer` (matched in order with `peer`'s
    /// `recv` from this rank; use a group to post sends and receives together).
    ///
    /// # Safety
    /// `send` readable for `count` elements until `stream` is synchronized.
    pub unsafe fn send(
        &self,
        send: *const u8,
        count: usize,
        dtype: DataType,
        peer: usize,
        stream: &Stream,
    ) -> Result<(), Error> {
        self.raw(
            CollKind::Send { peer },
            send,
            std::ptr::null_mut(),
            count,
            dtype,
            RedOp::Sum,
            stream,
        )
    }

    /// `ncclRecv` of `count` elements from `peer`.
    ///
    /// # Safety
    /// `recv` writable for `count` elements and untouched until `stream` is synchronized.
    pub unsafe fn recv(
        &self,
        recv: *mut u8,
        count: usize,
        dtype: DataType,
        peer: usize,
        stream: &Stream,
    ) -> Result<(), Error> {
        self.raw(
            CollKind::Recv { peer },
            std::ptr::null(),
            recv,
            count,
            dtype,
            RedOp::Sum,
            stream,
        )
    }

    fn sync_guard(&self) -> Result<Stream, Error> {
        if group::in_group() {
            return Err(Error::InvalidUsage(
                "blocking *_sync calls cannot be used inside a group".into(),
            ));
        }
        Ok(Stream::new())
    }

    /// Safe, blocking [`Comm::all_reduce`] (out of place): `count = recv.len() / size`.
    pub fn all_reduce_sync(&self, send: &[u8], recv: &mut [u8], dtype: DataType, op: RedOp) -> Result<(), Error> {
        let s = self.sync_guard()?;
        let count = recv.len() / dtype.size();
        bytes_of("send", send.len(), count * dtype.size())?;
        // SAFETY: both slices outlive the synchronize below and are borrowed for it.
        unsafe { self.all_reduce(send.as_ptr(), recv.as_mut_ptr(), count, dtype, op, &s) }?;
        s.synchronize()
    }

    /// Safe, blocking in-place [`Comm::all_reduce`] on `buf`.
    pub fn all_reduce_inplace_sync(&self, buf: &mut [u8], dtype: DataType, op: RedOp) -> Result<(), Error> {
        let s = self.sync_guard()?;
        let count = buf.len() / dtype.size();
        let p = buf.as_mut_ptr();
        // SAFETY: `buf` outlives the synchronize below and is exclusively borrowed for it.
        unsafe { self.all_reduce(p, p, count, dtype, op, &s) }?;
        s.synchronize()
    }

    /// Safe, blocking [`Comm::all_gather`]: `count = send.len() / size`, `recv` holds `nranks × count`.
    pub fn all_gather_sync(&self, send: &[u8], recv: &mut [u8], dtype: DataType) -> Result<(), Error> {
        let s = self.sync_guard()?;
        let count = send.len() / dtype.size();
        bytes_of("receive", recv.len(), count * dtype.size() * self.nranks())?;
        // SAFETY: both slices outlive the synchronize below.
        unsafe { self.all_gather(send.as_ptr(), recv.as_mut_ptr(), count, dtype, &s) }?;
        s.synchronize()
    }

    /// Safe, blocking [`Comm::reduce_scatter`]: `count = recv.len() / size`, `send` holds `nranks × count`.
    pub fn reduce_scatter_sync(&self, send: &[u8], recv: &mut [u8], dtype: DataType, op: RedOp) -> Result<(), Error> {
        let s = self.sync_guard()?;
        let count = recv.len() / dtype.size();
        bytes_of("send", send.len(), count * dtype.size() * self.nranks())?;
        // SAFETY: both slices outlive the synchronize below.
        unsafe { self.reduce_scatter(send.as_ptr(), recv.as_mut_ptr(), count, dtype, op, &s) }?;
        s.synchronize()
    }

    /// Safe, blocking in-place [`Comm::broadcast`] of `buf` from `root`.
    pub fn broadcast_sync(&self, buf: &mut [u8], dtype: DataType, root: usize) -> Result<(), Error> {
        let s = self.sync_guard()?;
        let count = buf.len() / dtype.size();
        let p = buf.as_mut_ptr();
        // SAFETY: `buf` outlives the synchronize below.
        unsafe { self.broadcast(p, p, count, dtype, root, &s) }?;
        s.synchronize()
    }

    /// Safe, blocking [`Comm::reduce`] to `root` (`recv` is written on the root only).
    pub fn reduce_sync(
        &self,
        send: &[u8],
        recv: &mut [u8],
        dtype: DataType,
        op: RedOp,
        root: usize,
    ) -> Result<(), Error> {
        let s = self.sync_guard()?;
        let count = send.len() / dtype.size();
        bytes_of("receive", recv.len(), count * dtype.size())?;
        // SAFETY: both slices outlive the synchronize below.
        unsafe { self.reduce(send.as_ptr(), recv.as_mut_ptr(), count, dtype, op, root, &s) }?;
        s.synchronize()
    }

    /// Safe, blocking exchange with one peer: sends `send` to `peer` and receives
    /// `recv` from it in one group (either may be empty).
    pub fn sendrecv_sync(&self, send: &[u8], recv: &mut [u8], dtype: DataType, peer: usize) -> Result<(), Error> {
        let s = self.sync_guard()?;
        group::group_start();
        // SAFETY: both slices outlive the synchronize below.
        let r = unsafe {
            self.send(send.as_ptr(), send.len() / dtype.size(), dtype, peer, &s)
                .and_then(|_| self.recv(recv.as_mut_ptr(), recv.len() / dtype.size(), dtype, peer, &s))
        };
        let g = group::group_end();
        r?;
        g?;
        s.synchronize()
    }
}
