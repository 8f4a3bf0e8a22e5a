//! Memory registration: host regMr/deregMr, twice, sub-ranges; CUDA and DMA-BUF
//! when claimed and a GPU is present (bodies in `gpu.rs`), skipped with the
//! reason otherwise.

use crate::cx::{Cx, fill, verify};
use crate::outcome::Res;
use crate::registry::Registry;
use crate::{ensure, fail, skip};
use ferroccl_plugin_api::abi::{NCCL_PTR_CUDA, NCCL_PTR_DMABUF};

pub(crate) fn register(r: &mut Registry) {
    r.add(
        "memory.reg_host",
        "checklist",
        "regMr/deregMr of host memory work on send and recv comms, and registered buffers transfer (net.cc sendProxyConnect/recvProxyConnect regMr; sendProxyFree/recvProxyFree deregMr)",
        reg_host,
    )
    .nccl("src/transport/net.cc sendProxyConnect/recvProxyConnect: regMr(comm, buffers[p], buffSizes[p], NCCL_PTR_HOST, &mhandles[p]); sendProxyFree/recvProxyFree: deregMr");
    r.add(
        "memory.reg_twice",
        "checklist",
        "the same host buffer can be registered twice on one comm and deregistered in any order",
        reg_twice,
    )
    .advisory()
    .nccl("NCCL never on one connection: its registration cache (ncclRegFind) registers a range once per connection");
    r.add(
        "memory.reg_subrange",
        "§1.2",
        "sub-ranges of a registered buffer transfer through the whole buffer's mhandle (NCCL posts FIFO slots so: net.cc sendProxyProgress) and through their own registration",
        reg_subrange,
    )
    .nccl("src/transport/net.cc sendProxyProgress: isend of localBuff + buffSlot*stepSize with the FIFO's mhandle; sendProxyRegBuffer: regMr of user ranges");
    r.add(
        "memory.null_mhandle",
        "checklist",
        "isend/irecv with a NULL mhandle transfer host memory (NCCL always posts registered memory)",
        null_mhandle,
    )
    .advisory()
    .nccl("NCCL never: every isend/irecv passes sendMhandle/recvMhandle from regMr");
    r.add(
        "memory.cuda",
        "§4.1",
        "CUDA buffers register (regMr NCCL_PTR_CUDA), transfer GPU to GPU, and iflush completes when ptrSupport claims NCCL_PTR_CUDA (needs a GPU)",
        cuda,
    )
    .nccl("src/transport/net.cc sendProxyConnect/recvProxyConnect: regMr(..., NCCL_PTR_CUDA, ...) of GPU FIFOs when useGdr; recvProxyProgress: iflush when needFlush (src/graph/paths.cc ncclTopoNeedFlush)");
    r.add(
        "memory.dmabuf",
        "§1.5",
        "regMrDmaBuf of CUDA memory (fd from cuMemGetHandleForAddressRange, offset 0, closed after registering) transfers GPU to GPU and iflush completes when ptrSupport claims NCCL_PTR_DMABUF (needs a GPU)",
        dmabuf,
    )
    .nccl("src/transport/net.cc sendProxyConnect/recvProxyConnect: cuMemGetHandleForAddressRange(DMA_BUF_FD) then regMrDmaBuf(..., NCCL_PTR_CUDA, 0ULL, dmabuf_fd, ...) and close(fd) when useDmaBuf");
}

fn reg_host(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut sbuf = vec![0u8; 1 << 20];
    let mut rbuf = vec![0u8; 1 << 20];
    fill(&mut sbuf, 77);
    let smr = cx.reg_mr(p.send, &mut sbuf)?;
    let rmr = cx.reg_mr(p.recv, &mut rbuf)?;
    let rr = cx.post("irecv with mhandle", |cx| cx.irecv(p.recv, &mut rbuf, 0, rmr))?;
    let sr = cx.post("isend with mhandle", |cx| cx.isend(p.send, &mut sbuf, 0, smr))?;
    cx.wait_all("registered 1 MiB message", &[sr, rr])?;
    if let Err(at) = verify(&rbuf, 77) {
        return Err(fail!(
            "received bytes equal the sent bytes",
            "registered buffers: wrong byte at offset {at}"
        ));
    }
    cx.dereg_mr(p.send, smr)?;
    cx.dereg_mr(p.recv, rmr)?;
    cx.close_pair(p)
}

fn reg_twice(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut buf = vec![0u8; 64 << 10];
    for comm in [p.send, p.recv] {
        let a = cx.reg_mr(comm, &mut buf)?;
        let b = cx
            .reg_mr(comm, &mut buf)
            .map_err(|e| crate::checks::conn::context(e, "second registration of the same buffer"))?;
        cx.dereg_mr(comm, a)?;
        cx.dereg_mr(comm, b)?;
    }
    cx.close_pair(p)
}

fn reg_subrange(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut sbuf = vec![0u8; 1 << 20];
    let mut rbuf = vec![0u8; 1 << 20];
    let smr = cx.reg_mr(p.send, &mut sbuf)?;
    let rmr = cx.reg_mr(p.recv, &mut rbuf)?;
    let (off, len) = (4096 + 8, 100_000);
    // First through the whole buffer's mhandle (NCCL's FIFO slots), then through
    // a registration of the sub-range itself (NCCL's user-buffer registration).
    for (round, seed) in [(0, 31u64), (1, 32)] {
        rbuf.iter_mut().for_each(|b| *b = 0);
        fill(&mut sbuf[off..off + len], seed);
        let (smr2, rmr2) = if round == 0 {
            (smr, rmr)
        } else {
            let a = cx.reg_mr(p.send, &mut sbuf[off..off + len])?;
            let b = cx.reg_mr(p.recv, &mut rbuf[off..off + len])?;
            (a, b)
        };
        let how = if round == 0 {
            "through the whole buffer's mhandle"
        } else {
            "through its own registration"
        };
        let rr = cx.post("irecv into a sub-range", |cx| {
            cx.irecv(p.recv, &mut rbuf[off..off + len], 0, rmr2)
        })?;
        let sr = cx.post("isend from a sub-range", |cx| {
            cx.isend(p.send, &mut sbuf[off..off + len], 0, smr2)
        })?;
        cx.wait_all("sub-range message", &[sr, rr])?;
        if let Err(at) = verify(&rbuf[off..off + len], seed) {
            return Err(fail!(
                "received bytes equal the sent bytes",
                "sub-range at offset {off} {how}: wrong byte at offset {at}"
            ));
        }
        ensure!(
            rbuf[..off].iter().all(|b| *b == 0),
            "bytes outside the posted sub-range stay untouched",
            "the plugin wrote before the receive buffer ({how})"
        );
        ensure!(
            rbuf[off + len..].iter().all(|b| *b == 0),
            "bytes outside the posted sub-range stay untouched",
            "the plugin wrote past the receive buffer ({how})"
        );
        if round == 1 {
            cx.dereg_mr(p.send, smr2)?;
            cx.dereg_mr(p.recv, rmr2)?;
        }
    }
    cx.dereg_mr(p.send, smr)?;
    cx.dereg_mr(p.recv, rmr)?;
    cx.notes.push(format!("regIsGlobal = {}", cx.props.reg_is_global));
    cx.close_pair(p)
}

fn null_mhandle(cx: &mut Cx, _: u64) -> Res {
    let p = cx.pair()?;
    let mut sbuf = vec![0u8; 65536];
    let mut rbuf = vec![0u8; 65536];
    fill(&mut sbuf, 99);
    let slot = ferroccl::plugin::net::RecvSlot {
        data: rbuf.as_mut_ptr(),
        size: rbuf.len(),
        tag: 0,
        mr: None,
    };
    let rr = cx.post("irecv with a NULL mhandle", |cx| cx.irecv_slots(p.recv, &[slot], false))?;
    let (sp, sl) = (sbuf.as_mut_ptr(), sbuf.len());
    let sr = cx.post("isend with a NULL mhandle", |cx| cx.isend_raw(p.send, sp, sl, 0, None))?;
    cx.wait_all("message posted with NULL mhandles", &[sr, rr])?;
    if let Err(at) = verify(&rbuf, 99) {
        return Err(fail!(
            "received bytes equal the sent bytes",
            "NULL mhandle: wrong byte at offset {at}"
        ));
    }
    cx.close_pair(p)
}

/// Why GPU memory cannot be used in this process, if it cannot: the CUDA
/// driver's state as `ferroccl-kernels` sees it (library present, `cuInit`,
/// a device), or a build without the `cuda` feature.
fn no_gpu_reason() -> Option<String> {
    #[cfg(feature = "cuda")]
    {
        ferroccl_kernels::cuda::driver_info().err().map(|e| e.to_string())
    }
    #[cfg(not(feature = "cuda"))]
    {
        Some("this build of the conformance suite has no CUDA support (cargo feature `cuda` off)".to_string())
    }
}

/// Skips with every reason that applies (the plugin does not claim `bit`, no
/// usable GPU), or runs `body`.
fn gpu_check(cx: &mut Cx, bit: i32, name: &str, body: fn(&mut Cx) -> Res) -> Res {
    let claims = cx.props.ptr_support & bit != 0;
    match (claims, no_gpu_reason()) {
        (false, Some(why)) => Err(skip!(
            "ptrSupport ({:#x}) does not claim {name}; and this machine cannot run GPU checks: {why}",
            cx.props.ptr_support
        )),
        (false, None) => Err(skip!("ptrSupport ({:#x}) does not claim {name}", cx.props.ptr_support)),
        (true, Some(why)) => Err(skip!(
            "ptrSupport claims {name} but this machine cannot run GPU checks: {why}"
        )),
        (true, None) => body(cx),
    }
}

fn cuda(cx: &mut Cx, _: u64) -> Res {
    gpu_check(cx, NCCL_PTR_CUDA, "NCCL_PTR_CUDA", |cx| {
        #[cfg(feature = "cuda")]
        {
            super::gpu::transfer(cx, super::gpu::Reg::Cuda)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = cx;
            unreachable!("no_gpu_reason() is Some without the cuda feature")
        }
    })
}

fn dmabuf(cx: &mut Cx, _: u64) -> Res {
    if cx.props.ptr_support & NCCL_PTR_DMABUF != 0 && !cx.net.has_dmabuf() {
        return Err(fail!(
            "a plugin claiming NCCL_PTR_DMABUF provides regMrDmaBuf",
            "ptrSupport has DMABUF but the regMrDmaBuf slot is NULL"
        ));
    }
    gpu_check(cx, NCCL_PTR_DMABUF, "NCCL_PTR_DMABUF", |cx| {
        #[cfg(feature = "cuda")]
        {
            super::gpu::transfer(cx, super::gpu::Reg::DmaBuf)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = cx;
            unreachable!("no_gpu_reason() is Some without the cuda feature")
        }
    })
}
