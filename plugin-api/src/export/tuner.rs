//! Generic shims behind [`export_tuner_plugin!`](crate::export_tuner_plugin):
//! `ncclTunerPlugin_v2` … `_v6` from one [`sdk::Tuner`](crate::sdk::Tuner).
//!
//! The per-communicator context is a box with a magic header holding the tuner.
//! v2 (algorithm/protocol outputs instead of a cost table) is adapted by building
//! a 7×3 table of 1.0 (collnet/NVLS entries -1.0 when unsupported), letting the
//! tuner adjust it, and reporting the cheapest entry the tuner lowered below 1.0.

use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

use super::guard;
use crate::abi::{self, ncclResult_t};
use crate::sdk::{CostTable, NetError, NetResult, Tuner, TunerInit};

const MAGIC: u64 = 0x4652_4343_4c54_554e; // "FRCCLTUN"

#[repr(C)]
struct TunerBox<T> {
    magic: u64,
    tuner: Option<T>,
}

/// # Safety
/// `ctx` must be NULL or readable for a `u64`.
unsafe fn tuner<'a, T: Tuner>(ctx: *mut c_void) -> NetResult<&'a mut TunerBox<T>> {
    if ctx.is_null() {
        return Err(NetError::InvalidArgument("tuner context is NULL".into()));
    }
    // SAFETY: non-NULL, readable per the caller's contract.
    if unsafe { *(ctx as *const u64) } != MAGIC {
        return Err(NetError::Internal(format!(
            "{ctx:p} is not a live context of this tuner"
        )));
    }
    // SAFETY: the magic identifies a box created by `init_impl`.
    Ok(unsafe { &mut *(ctx as *mut TunerBox<T>) })
}

unsafe fn init_impl<T: Tuner>(
    ctx: *mut *mut c_void,
    info: TunerInit<'_>,
    logger: abi::ncclDebugLogger_t,
) -> NetResult<()> {
    crate::log::set_logger(logger);
    if ctx.is_null() {
        return Err(NetError::InvalidArgument("context out-pointer is NULL".into()));
    }
    // SAFETY: checked non-NULL.
    unsafe { ctx.write(null_mut()) };
    let t = T::init(info)?;
    let b = Box::into_raw(Box::new(TunerBox {
        magic: MAGIC,
        tuner: Some(t),
    }));
    // SAFETY: checked non-NULL.
    unsafe { ctx.write(b as *mut c_void) };
    Ok(())
}

unsafe fn finalize_impl<T: Tuner>(ctx: *mut c_void) -> NetResult<()> {
    // SAFETY: `ctx` comes from our init.
    let b = unsafe { tuner::<T>(ctx)? };
    b.magic = 0;
    // SAFETY: created by `Box::into_raw` in `init_impl`, freed only here.
    let mut b = unsafe { Box::from_raw(b as *mut TunerBox<T>) };
    b.tuner.take().map_or(Ok(()), T::finalize)
}

#[allow(clippy::too_many_arguments)]
unsafe fn coll_info_impl<T: Tuner>(
    ctx: *mut c_void,
    coll: abi::ncclFunc_t,
    n_bytes: usize,
    num_pipe_ops: c_int,
    table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) -> NetResult<()> {
    // SAFETY: `ctx` comes from our init.
    let t = unsafe { tuner::<T>(ctx)? }
        .tuner
        .as_ref()
        .ok_or_else(|| NetError::Internal("tuner finalized".into()))?;
    if table.is_null() || n_channels.is_null() {
        return Err(NetError::InvalidArgument(
            "getCollInfo: collCostTable or nChannels is NULL".into(),
        ));
    }
    let (na, np) = (num_algo.max(0) as usize, num_proto.max(0) as usize);
    // SAFETY: NCCL passes a flat float[numAlgo][numProto] cast to float** (reference §3.1).
    let slice = unsafe { std::slice::from_raw_parts_mut(table as *mut f32, na * np) };
    let mut costs = CostTable::new(slice, na, np)?;
    // SAFETY: checked non-NULL.
    let nch = unsafe { &mut *n_channels };
    t.get_coll_info(coll, n_bytes, num_pipe_ops, reg_buff != 0, &mut costs, nch)
}

#[allow(clippy::too_many_arguments)]
unsafe fn coll_info_v2_impl<T: Tuner>(
    ctx: *mut c_void,
    coll: abi::ncclFunc_t,
    n_bytes: usize,
    collnet: c_int,
    nvls: c_int,
    num_pipe_ops: c_int,
    algorithm: *mut c_int,
    protocol: *mut c_int,
    n_channels: *mut c_int,
) -> NetResult<()> {
    if algorithm.is_null() || protocol.is_null() {
        return Err(NetError::InvalidArgument(
            "getCollInfo: algorithm or protocol is NULL".into(),
        ));
    }
    let (na, np) = (abi::NCCL_NUM_ALGORITHMS, abi::NCCL_NUM_PROTOCOLS);
    let mut table = vec![1.0f32; na * np];
    for p in 0..np {
        if collnet == 0 {
            table[abi::NCCL_ALGO_COLLNET_DIRECT as usize * np + p] = abi::NCCL_ALGO_PROTO_IGNORE;
            table[abi::NCCL_ALGO_COLLNET_CHAIN as usize * np + p] = abi::NCCL_ALGO_PROTO_IGNORE;
        }
        if nvls == 0 {
            table[abi::NCCL_ALGO_NVLS as usize * np + p] = abi::NCCL_ALGO_PROTO_IGNORE;
            table[abi::NCCL_ALGO_NVLS_TREE as usize * np + p] = abi::NCCL_ALGO_PROTO_IGNORE;
        }
    }
    let t = {
        // SAFETY: `ctx` comes from our init.
        let b = unsafe { tuner::<T>(ctx)? };
        b.tuner
            .as_ref()
            .ok_or_else(|| NetError::Internal("tuner finalized".into()))?
    };
    let mut costs = CostTable::new(&mut table, na, np)?;
    let mut nch = 0;
    t.get_coll_info(coll, n_bytes, num_pipe_ops, false, &mut costs, &mut nch)?;
    let best = (0..na * np)
        .filter(|&i| table[i] >= 0.0 && table[i] < 1.0)
        .min_by(|&a, &b| table[a].total_cmp(&table[b]));
    if let Some(i) = best {
        // SAFETY: checked non-NULL above.
        unsafe {
            algorithm.write((i / np) as c_int);
            protocol.write((i % np) as c_int);
        }
    }
    if !n_channels.is_null() && nch != 0 {
        // SAFETY: non-NULL out-pointer from NCCL.
        unsafe { n_channels.write(nch) };
    }
    Ok(())
}

fn g<T: Tuner>(what: &str, f: impl FnOnce() -> NetResult<()>) -> ncclResult_t {
    guard(T::NAME, what, f)
}

type Vp = *mut c_void;
type Vpp = *mut *mut c_void;

/// `init` of v2–v4.
#[doc(hidden)]
pub unsafe extern "C" fn init_v2<T: Tuner>(
    n_ranks: usize,
    n_nodes: usize,
    logger: abi::ncclDebugLogger_t,
    ctx: Vpp,
) -> ncclResult_t {
    let info = TunerInit {
        comm_id: 0,
        n_ranks,
        n_nodes,
        nvl_domain: None,
        constants: None,
    };
    // SAFETY: C API contract.
    g::<T>("init", || unsafe { init_impl::<T>(ctx, info, logger) })
}

/// `init` of v5/v6.
#[doc(hidden)]
pub unsafe extern "C" fn init_v5<T: Tuner>(
    ctx: Vpp,
    comm_id: u64,
    n_ranks: usize,
    n_nodes: usize,
    logger: abi::ncclDebugLogger_t,
    nvl: *mut abi::ncclNvlDomainInfo_v5_t,
    constants: *mut abi::ncclTunerConstants_v5_t,
) -> ncclResult_t {
    g::<T>("init", || {
        // SAFETY: NCCL passes valid structs or NULL.
        let info = unsafe {
            TunerInit {
                comm_id,
                n_ranks,
                n_nodes,
                nvl_domain: nvl.as_ref().copied(),
                constants: constants.as_mut(),
            }
        };
        // SAFETY: C API contract.
        unsafe { init_impl::<T>(ctx, info, logger) }
    })
}

/// `getCollInfo` of v2.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn coll_info_v2<T: Tuner>(
    ctx: Vp,
    coll: abi::ncclFunc_t,
    n_bytes: usize,
    collnet: c_int,
    nvls: c_int,
    num_pipe_ops: c_int,
    algorithm: *mut c_int,
    protocol: *mut c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    // SAFETY: C API contract.
    g::<T>("getCollInfo", || unsafe {
        coll_info_v2_impl::<T>(
            ctx,
            coll,
            n_bytes,
            collnet,
            nvls,
            num_pipe_ops,
            algorithm,
            protocol,
            n_channels,
        )
    })
}

/// `getCollInfo` of v3.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn coll_info_v3<T: Tuner>(
    ctx: Vp,
    coll: abi::ncclFunc_t,
    n_bytes: usize,
    num_pipe_ops: c_int,
    table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    // SAFETY: C API contract.
    g::<T>("getCollInfo", || unsafe {
        coll_info_impl::<T>(
            ctx,
            coll,
            n_bytes,
            num_pipe_ops,
            table,
            num_algo,
            num_proto,
            0,
            n_channels,
        )
    })
}

/// `getCollInfo` of v4–v6.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn coll_info_v4<T: Tuner>(
    ctx: Vp,
    coll: abi::ncclFunc_t,
    n_bytes: usize,
    num_pipe_ops: c_int,
    table: *mut *mut f32,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    n_channels: *mut c_int,
) -> ncclResult_t {
    // SAFETY: C API contract.
    g::<T>("getCollInfo", || unsafe {
        coll_info_impl::<T>(
            ctx,
            coll,
            n_bytes,
            num_pipe_ops,
            table,
            num_algo,
            num_proto,
            reg_buff,
            n_channels,
        )
    })
}

/// `destroy` (v2–v4) / `finalize` (v5+).
#[doc(hidden)]
pub unsafe extern "C" fn finalize<T: Tuner>(ctx: Vp) -> ncclResult_t {
    // SAFETY: C API contract.
    g::<T>("finalize", || unsafe { finalize_impl::<T>(ctx) })
}

/// `getChunkSize` (v6).
#[doc(hidden)]
pub unsafe extern "C" fn chunk_size<T: Tuner>(
    ctx: Vp,
    coll: abi::ncclFunc_t,
    n_bytes: usize,
    algo: c_int,
    proto: c_int,
    n_channels: c_int,
    chunk: *mut usize,
) -> ncclResult_t {
    g::<T>("getChunkSize", || {
        // SAFETY: `ctx` comes from our init; `chunk` is NCCL's in/out size_t or NULL.
        unsafe {
            let t = tuner::<T>(ctx)?
                .tuner
                .as_ref()
                .ok_or_else(|| NetError::Internal("tuner finalized".into()))?;
            let chunk = chunk
                .as_mut()
                .ok_or_else(|| NetError::InvalidArgument("chunkSize is NULL".into()))?;
            t.get_chunk_size(coll, n_bytes, algo, proto, n_channels, chunk)
        }
    })
}

/// The `ncclTuner_v2_t` of `T`.
pub const fn tuner_v2<T: Tuner>() -> abi::ncclTuner_v2_t {
    abi::ncclTuner_v2_t {
        name: T::NAME.as_ptr(),
        init: Some(init_v2::<T>),
        getCollInfo: Some(coll_info_v2::<T>),
        destroy: Some(finalize::<T>),
    }
}
/// The `ncclTuner_v3_t` of `T`.
pub const fn tuner_v3<T: Tuner>() -> abi::ncclTuner_v3_t {
    abi::ncclTuner_v3_t {
        name: T::NAME.as_ptr(),
        init: Some(init_v2::<T>),
        getCollInfo: Some(coll_info_v3::<T>),
        destroy: Some(finalize::<T>),
    }
}
/// The `ncclTuner_v4_t` of `T`.
pub const fn tuner_v4<T: Tuner>() -> abi::ncclTuner_v4_t {
    abi::ncclTuner_v4_t {
        name: T::NAME.as_ptr(),
        init: Some(init_v2::<T>),
        getCollInfo: Some(coll_info_v4::<T>),
        destroy: Some(finalize::<T>),
    }
}
/// The `ncclTuner_v5_t` of `T`.
pub const fn tuner_v5<T: Tuner>() -> abi::ncclTuner_v5_t {
    abi::ncclTuner_v5_t {
        name: T::NAME.as_ptr(),
        init: Some(init_v5::<T>),
        getCollInfo: Some(coll_info_v4::<T>),
        finalize: Some(finalize::<T>),
    }
}
/// The `ncclTuner_v6_t` of `T`.
pub const fn tuner_v6<T: Tuner>() -> abi::ncclTuner_v6_t {
    abi::ncclTuner_v6_t {
        name: T::NAME.as_ptr(),
        init: Some(init_v5::<T>),
        getCollInfo: Some(coll_info_v4::<T>),
        finalize: Some(finalize::<T>),
        getChunkSize: Some(chunk_size::<T>),
    }
}
