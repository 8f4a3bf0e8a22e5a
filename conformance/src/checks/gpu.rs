//! GPU memory through the plugin: the bodies of `memory.cuda` and
//! `memory.dmabuf` once a GPU is known to be present (see `memory.rs`).
//!
//! What NCCL does, and the checks do the same (NCCL 2.30.7
//! `src/transport/net.cc`):
//! * `sendProxyConnect`/`recvProxyConnect` register GPU buffers with
//!   `regMr(comm, buf, size, NCCL_PTR_CUDA, &mhandle)`, or, when DMA-BUF is
//!   used, get a descriptor with `cuMemGetHandleForAddressRange(&fd, buf, size,
//!   CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)`, call `regMrDmaBuf(comm, buf,
//!   size, NCCL_PTR_CUDA, 0, fd, &mhandle)` and close the descriptor at once;
//! * `sendProxyProgress`/`recvProxyProgress` post `isend`/`irecv` on those
//!   registered device addresses;
//! * `recvProxyProgress` calls `iflush(recvComm, n, ptrs, sizes, mhandles,
//!   &request)` after a receive into GPU memory when `needFlush`
//!   (`ncclTopoNeedFlush`, `src/graph/paths.cc`: always before compute
//!   capability 9.0, or with `forceFlush`/`NCCL_NET_FORCE_FLUSH`), then tests
//!   the request until done (a NULL request is done at once).
//!
//! The suite uses GPU 0, one process, one send/recv pair on the device under
//! test, a 1 MiB message, and always calls `iflush` (a plugin must support it:
//! NCCL calls it on every pre-Hopper GPU).

use std::os::fd::AsRawFd;
use std::time::Instant;

use ferroccl::plugin::net::{PtrType, RecvSlot};
use ferroccl_kernels::cuda::DeviceBuffer;

use crate::cx::{Cx, REQUEST_DEADLINE, fill, verify};
use crate::outcome::Res;
use crate::watch::Call;
use crate::{ensure, fail, skip};

/// How the device buffers are registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reg {
    /// `regMr(..., NCCL_PTR_CUDA, ...)`.
    Cuda,
    /// `regMrDmaBuf(..., NCCL_PTR_CUDA, 0, fd, ...)`.
    DmaBuf,
}

const LEN: usize = 1 << 20;
const SEED: u64 = 0x6770_7564;

/// Registers `len` bytes of `buf` on `comm` the way `how` says.
fn register(
    cx: &mut Cx,
    comm: ferroccl::plugin::net::RawComm,
    buf: &DeviceBuffer,
    how: Reg,
) -> Res<ferroccl::plugin::net::RawMr> {
    let ptr = buf.as_ptr();
    match how {
        Reg::Cuda => cx.call(Call::RegMr, "regMr of 1 MiB of CUDA memory (NCCL_PTR_CUDA)", |n| {
            n.reg_mr(comm, ptr, LEN, PtrType::Cuda)
        }),
        Reg::DmaBuf => {
            let fd = buf
                .dmabuf_fd(LEN)
                .map_err(|e| skip!("the CUDA driver cannot export device memory as a DMA-BUF here: {e}"))?;
            let raw = fd.as_raw_fd();
            let mr = cx.call(
                Call::RegMr,
                "regMrDmaBuf of 1 MiB of CUDA memory (NCCL_PTR_CUDA, offset 0)",
                |n| n.reg_mr_dmabuf(comm, ptr, LEN, PtrType::Cuda, 0, raw),
            );
            // NCCL closes the descriptor right after registering.
            drop(fd);
            mr
        }
    }
}

/// One GPU-to-GPU message through the plugin with registered device buffers,
/// then `iflush` of the receive buffer, then the bytes checked on the host.
pub(crate) fn transfer(cx: &mut Cx, how: Reg) -> Res {
    let env = |e: ferroccl_kernels::KernelError| skip!("a GPU is present but setting up device memory failed: {e}");
    let mut sbuf = DeviceBuffer::alloc(0, LEN).map_err(env)?;
    let mut rbuf = DeviceBuffer::alloc(0, LEN).map_err(env)?;
    let mut host = vec![0u8; LEN];
    fill(&mut host, SEED);
    sbuf.write(0, &host).map_err(env)?;
    rbuf.write(0, &vec![0u8; LEN]).map_err(env)?;

    let p = cx.pair()?;
    let smr = register(cx, p.send, &sbuf, how)?;
    let rmr = register(cx, p.recv, &rbuf, how)?;
    let slot = RecvSlot {
        data: rbuf.as_ptr(),
        size: LEN,
        tag: 0,
        mr: Some(rmr),
    };
    let rr = cx.post("irecv into CUDA memory", |cx| cx.irecv_slots(p.recv, &[slot], false))?;
    let sp = sbuf.as_ptr();
    let sr = cx.post("isend from CUDA memory", |cx| {
        cx.isend_raw(p.send, sp, LEN, 0, Some(smr))
    })?;
    let sizes = cx.wait_all("1 MiB GPU-to-GPU message", &[sr, rr])?;
    ensure!(
        sizes[1] == LEN,
        "test on the receive side reports the received size",
        "received {} bytes, sent {LEN}",
        sizes[1]
    );

    // iflush as recvProxyProgress does: a NULL request is done; otherwise test
    // it alone (sizes NULL) until done.
    let comm = p.recv;
    if let Some(r) = cx.call(Call::Iflush, "iflush of the received CUDA buffer", |n| {
        n.iflush(comm, &[slot])
    })? {
        let start = Instant::now();
        loop {
            if cx.call(Call::Test, "test of the iflush request", |n| n.test(r, &mut []))? {
                break;
            }
            ensure!(
                start.elapsed() < REQUEST_DEADLINE,
                "the iflush request completes",
                "not done after {} s",
                REQUEST_DEADLINE.as_secs()
            );
        }
    }

    let mut got = vec![0u8; LEN];
    rbuf.read(0, &mut got).map_err(|e| {
        fail!(
            "the receive buffer is readable after the transfer",
            "cuMemcpyDtoH failed: {e}"
        )
    })?;
    if let Err(at) = verify(&got, SEED) {
        return Err(fail!(
            "received device bytes equal the sent device bytes",
            "GPU-to-GPU message ({how:?} registration): wrong byte at offset {at}"
        ));
    }
    cx.dereg_mr(p.send, smr)?;
    cx.dereg_mr(p.recv, rmr)?;
    cx.notes.push(format!(
        "GPU 0, {how:?} registration, forceFlush = {} (NCCL flushes on GPUs before sm_90 or with forceFlush)",
        cx.props.force_flush
    ));
    cx.close_pair(p)
}
