//! Every function of NCCL 2.30.7's `nccl.h`, exported under its name and its
//! `pnccl` profiling name, as NCCL exports both (`src/include/core.h`,
//! `NCCL_API`). Each export is one line into the implementation
//! (`api`, `comm`, `colls`, `group`, `mem`, `unimplemented`), which runs under
//! `api::guard`: no panic crosses the C ABI, every error is logged
//! (WARN) and kept for `ncclGetLastError`.
//!
//! Both names call the Rust implementation directly (never one export through
//! the other), so a tool that interposes `ncclAllReduce` and calls
//! `pncclAllReduce` reaches the library, not itself.
//!
//! cbindgen reads this file to write the functions of `nccl.h` (`build.rs`).
//!
//! # Safety
//! The contract of every function is NCCL's (its header and documentation):
//! pointers are valid for the accesses the function documents, buffers stay
//! valid until the operation completes, and a `ncclComm_t` is one this library
//! returned. A handle that is `NULL`, destroyed or unknown is detected and
//! reported; other invalid pointers cannot be.
#![allow(
    non_snake_case,
    unused_variables,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::abi::*;
use crate::{api, colls, comm, group, mem, rma, unimplemented};

/// Allocates `size` bytes for buffers: device memory of the current CUDA device where CUDA is present, else page-aligned host memory (ferroccl extension).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
    mem::alloc(ptr, size)
}

/// Allocates `size` bytes for buffers: device memory of the current CUDA device where CUDA is present, else page-aligned host memory (ferroccl extension).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> ncclResult_t {
    mem::alloc(ptr, size)
}

/// Frees memory from `ncclMemAlloc` (`NULL` is a no-op).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclMemFree(ptr: *mut c_void) -> ncclResult_t {
    mem::free(ptr)
}

/// Frees memory from `ncclMemAlloc` (`NULL` is a no-op).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclMemFree(ptr: *mut c_void) -> ncclResult_t {
    mem::free(ptr)
}

/// Stores `NCCL_VERSION_CODE` (23007: the NCCL API version implemented).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> ncclResult_t {
    api::get_version(version)
}

/// Stores `NCCL_VERSION_CODE` (23007: the NCCL API version implemented).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclGetVersion(version: *mut c_int) -> ncclResult_t {
    api::get_version(version)
}

/// Starts a bootstrap root in this process and stores its id (pass it to every rank).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t {
    api::get_unique_id(uniqueId)
}

/// Starts a bootstrap root in this process and stores its id (pass it to every rank).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclGetUniqueId(uniqueId: *mut ncclUniqueId) -> ncclResult_t {
    api::get_unique_id(uniqueId)
}

/// Creates rank `rank` of an `nranks`-rank communicator; `config` may be `NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut ncclComm_t,
    nranks: c_int,
    commId: ncclUniqueId,
    rank: c_int,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    comm::init_rank_config(comm, nranks, commId, rank, config)
}

/// Creates rank `rank` of an `nranks`-rank communicator; `config` may be `NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommInitRankConfig(
    comm: *mut ncclComm_t,
    nranks: c_int,
    commId: ncclUniqueId,
    rank: c_int,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    comm::init_rank_config(comm, nranks, commId, rank, config)
}

/// Creates rank `rank` of an `nranks`-rank communicator (blocks until every rank joined).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut ncclComm_t,
    nranks: c_int,
    commId: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    comm::init_rank(comm, nranks, commId, rank)
}

/// Creates rank `rank` of an `nranks`-rank communicator (blocks until every rank joined).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommInitRank(
    comm: *mut ncclComm_t,
    nranks: c_int,
    commId: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    comm::init_rank(comm, nranks, commId, rank)
}

/// Creates all `ndev` ranks of a communicator in this process (one thread each).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
    comm::init_all(comm, ndev, devlist)
}

/// Creates all `ndev` ranks of a communicator in this process (one thread each).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommInitAll(comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
    comm::init_all(comm, ndev, devlist)
}

/// Flushes the communicator's operations and synchronizes with its peers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t {
    comm::finalize(comm)
}

/// Flushes the communicator's operations and synchronizes with its peers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommFinalize(comm: ncclComm_t) -> ncclResult_t {
    comm::finalize(comm)
}

/// Frees the communicator (finishing its operations first).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    comm::destroy(comm)
}

/// Frees the communicator (finishing its operations first).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    comm::destroy(comm)
}

/// Stops the communicator's operations, closes its connections and frees it; returns promptly.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    comm::abort(comm)
}

/// Stops the communicator's operations, closes its connections and frees it; returns promptly.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    comm::abort(comm)
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommRevoke(comm: ncclComm_t, revokeFlags: c_int) -> ncclResult_t {
    unimplemented::missing("ncclCommRevoke")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommRevoke(comm: ncclComm_t, revokeFlags: c_int) -> ncclResult_t {
    unimplemented::missing("ncclCommRevoke")
}

/// Creates communicators from groups of this one's ranks: same `color`, ordered by `key`; `NCCL_SPLIT_NOCOLOR` gives `NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: ncclComm_t,
    color: c_int,
    key: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    comm::split(comm, color, key, newcomm, config)
}

/// Creates communicators from groups of this one's ranks: same `color`, ordered by `key`; `NCCL_SPLIT_NOCOLOR` gives `NULL`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommSplit(
    comm: ncclComm_t,
    color: c_int,
    key: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    comm::split(comm, color, key, newcomm, config)
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommShrink(
    comm: ncclComm_t,
    excludeRanksList: *mut c_int,
    excludeRanksCount: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
    shrinkFlags: c_int,
) -> ncclResult_t {
    unimplemented::missing("ncclCommShrink")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommShrink(
    comm: ncclComm_t,
    excludeRanksList: *mut c_int,
    excludeRanksCount: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
    shrinkFlags: c_int,
) -> ncclResult_t {
    unimplemented::missing("ncclCommShrink")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetUniqueId(comm: ncclComm_t, uniqueId: *mut ncclUniqueId) -> ncclResult_t {
    unimplemented::missing("ncclCommGetUniqueId")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommGetUniqueId(comm: ncclComm_t, uniqueId: *mut ncclUniqueId) -> ncclResult_t {
    unimplemented::missing("ncclCommGetUniqueId")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGrow(
    comm: ncclComm_t,
    nRanks: c_int,
    uniqueId: *const ncclUniqueId,
    rank: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    unimplemented::missing("ncclCommGrow")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommGrow(
    comm: ncclComm_t,
    nRanks: c_int,
    uniqueId: *const ncclUniqueId,
    rank: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    unimplemented::missing("ncclCommGrow")
}

/// As `ncclCommInitRankConfig` with `nId` unique ids (ferroccl bootstraps through the first).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    myrank: c_int,
    nId: c_int,
    commIds: *mut ncclUniqueId,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    comm::init_rank_scalable(newcomm, nranks, myrank, nId, commIds, config)
}

/// As `ncclCommInitRankConfig` with `nId` unique ids (ferroccl bootstraps through the first).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommInitRankScalable(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    myrank: c_int,
    nId: c_int,
    commIds: *mut ncclUniqueId,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    comm::init_rank_scalable(newcomm, nranks, myrank, nId, commIds, config)
}

/// A static text for each result code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetErrorString(result: ncclResult_t) -> *const c_char {
    api::error_string(result)
}

/// A static text for each result code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclGetErrorString(result: ncclResult_t) -> *const c_char {
    api::error_string(result)
}

/// The text of the last error (WARN) of any call in this process; `comm` is unused.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGetLastError(comm: ncclComm_t) -> *const c_char {
    api::last_error(comm)
}

/// The text of the last error (WARN) of any call in this process; `comm` is unused.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclGetLastError(comm: ncclComm_t) -> *const c_char {
    api::last_error(comm)
}

/// Not implemented by ferroccl: logs a WARN line naming it and does nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclResetDebugInit() {
    unimplemented::missing_void("ncclResetDebugInit")
}

/// Not implemented by ferroccl: logs a WARN line naming it and does nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclResetDebugInit() {
    unimplemented::missing_void("ncclResetDebugInit")
}

/// The communicator's state: `ncclInProgress` while a non-blocking call is under way, else its first error or `ncclSuccess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t {
    comm::get_async_error(comm, asyncError)
}

/// The communicator's state: `ncclInProgress` while a non-blocking call is under way, else its first error or `ncclSuccess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommGetAsyncError(comm: ncclComm_t, asyncError: *mut ncclResult_t) -> ncclResult_t {
    comm::get_async_error(comm, asyncError)
}

/// Stores the number of ranks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    comm::count(comm, count)
}

/// Stores the number of ranks.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    comm::count(comm, count)
}

/// Stores the CUDA device bound at init (-1 without CUDA: host memory, ferroccl extension).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    comm::cu_device(comm, device)
}

/// Stores the CUDA device bound at init (-1 without CUDA: host memory, ferroccl extension).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    comm::cu_device(comm, device)
}

/// Stores this rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    comm::user_rank(comm, rank)
}

/// Stores this rank.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    comm::user_rank(comm, rank)
}

/// Registers a buffer with the communicator (a handle for `ncclCommDeregister`; ferroccl registers buffers with the network per operation).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommRegister(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> ncclResult_t {
    mem::register(comm, buff, size, handle)
}

/// Registers a buffer with the communicator (a handle for `ncclCommDeregister`; ferroccl registers buffers with the network per operation).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommRegister(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> ncclResult_t {
    mem::register(comm, buff, size, handle)
}

/// Releases a handle from `ncclCommRegister`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
    mem::deregister(comm, handle)
}

/// Releases a handle from `ncclCommRegister`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) -> ncclResult_t {
    mem::deregister(comm, handle)
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSuspend(comm: ncclComm_t, flags: c_int) -> ncclResult_t {
    unimplemented::missing("ncclCommSuspend")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommSuspend(comm: ncclComm_t, flags: c_int) -> ncclResult_t {
    unimplemented::missing("ncclCommSuspend")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommResume(comm: ncclComm_t) -> ncclResult_t {
    unimplemented::missing("ncclCommResume")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommResume(comm: ncclComm_t) -> ncclResult_t {
    unimplemented::missing("ncclCommResume")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommMemStats(comm: ncclComm_t, stat: ncclCommMemStat_t, value: *mut u64) -> ncclResult_t {
    unimplemented::missing("ncclCommMemStats")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommMemStats(comm: ncclComm_t, stat: ncclCommMemStat_t, value: *mut u64) -> ncclResult_t {
    unimplemented::missing("ncclCommMemStats")
}

/// `ncclCommWindowRegister`: Registers a symmetric memory window (collective).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommWindowRegister(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    win: *mut ncclWindow_t,
    winFlags: c_int,
) -> ncclResult_t {
    rma::window_register(comm, buff, size, win, winFlags)
}

/// `ncclCommWindowRegister`: Registers a symmetric memory window (collective).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommWindowRegister(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    win: *mut ncclWindow_t,
    winFlags: c_int,
) -> ncclResult_t {
    rma::window_register(comm, buff, size, win, winFlags)
}

/// `ncclCommWindowDeregister`: Deregisters a window (collective).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommWindowDeregister(comm: ncclComm_t, win: ncclWindow_t) -> ncclResult_t {
    rma::window_deregister(comm, win)
}

/// `ncclCommWindowDeregister`: Deregisters a window (collective).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclCommWindowDeregister(comm: ncclComm_t, win: ncclWindow_t) -> ncclResult_t {
    rma::window_deregister(comm, win)
}

/// `ncclWinGetUserPtr`: The user buffer of a window.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclWinGetUserPtr(
    comm: ncclComm_t,
    win: ncclWindow_t,
    outUserPtr: *mut *mut c_void,
) -> ncclResult_t {
    rma::win_get_user_ptr(comm, win, outUserPtr)
}

/// `ncclWinGetUserPtr`: The user buffer of a window.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclWinGetUserPtr(
    comm: ncclComm_t,
    win: ncclWindow_t,
    outUserPtr: *mut *mut c_void,
) -> ncclResult_t {
    rma::win_get_user_ptr(comm, win, outUserPtr)
}

/// Creates an operator that multiplies each input by `*scalar`, then sums, for `comm` and `datatype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut ncclRedOp_t,
    scalar: *mut c_void,
    datatype: ncclDataType_t,
    residence: ncclScalarResidence_t,
    comm: ncclComm_t,
) -> ncclResult_t {
    colls::red_op_create_pre_mul_sum(op, scalar, datatype, residence, comm)
}

/// Creates an operator that multiplies each input by `*scalar`, then sums, for `comm` and `datatype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclRedOpCreatePreMulSum(
    op: *mut ncclRedOp_t,
    scalar: *mut c_void,
    datatype: ncclDataType_t,
    residence: ncclScalarResidence_t,
    comm: ncclComm_t,
) -> ncclResult_t {
    colls::red_op_create_pre_mul_sum(op, scalar, datatype, residence, comm)
}

/// Destroys an operator from `ncclRedOpCreatePreMulSum`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t {
    colls::red_op_destroy(op, comm)
}

/// Destroys an operator from `ncclRedOpCreatePreMulSum`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) -> ncclResult_t {
    colls::red_op_destroy(op, comm)
}

/// Reduces `count` elements of every rank's `sendbuff` into `root`'s `recvbuff`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::reduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream)
}

/// Reduces `count` elements of every rank's `sendbuff` into `root`'s `recvbuff`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::reduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream)
}

/// In-place broadcast of `root`'s `buff` (deprecated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::bcast(buff, count, datatype, root, comm, stream)
}

/// In-place broadcast of `root`'s `buff` (deprecated).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::bcast(buff, count, datatype, root, comm, stream)
}

/// Copies `count` elements of `root`'s `sendbuff` to every rank's `recvbuff`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::broadcast(sendbuff, recvbuff, count, datatype, root, comm, stream)
}

/// Copies `count` elements of `root`'s `sendbuff` to every rank's `recvbuff`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::broadcast(sendbuff, recvbuff, count, datatype, root, comm, stream)
}

/// Reduces `count` elements over all ranks; every rank gets the result.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream)
}

/// Reduces `count` elements over all ranks; every rank gets the result.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream)
}

/// Reduces `nranks × recvcount` elements; rank i gets block i.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream)
}

/// Reduces `nranks × recvcount` elements; rank i gets block i.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::reduce_scatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream)
}

/// Gathers `sendcount` elements from every rank into every rank's `recvbuff` (rank i at offset i·sendcount).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream)
}

/// Gathers `sendcount` elements from every rank into every rank's `recvbuff` (rank i at offset i·sendcount).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::all_gather(sendbuff, recvbuff, sendcount, datatype, comm, stream)
}

/// Sends block j of `sendbuff` to rank j; block i of `recvbuff` comes from rank i.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::all_to_all(sendbuff, recvbuff, count, datatype, comm, stream)
}

/// Sends block j of `sendbuff` to rank j; block i of `recvbuff` comes from rank i.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::all_to_all(sendbuff, recvbuff, count, datatype, comm, stream)
}

/// Every rank's `count` elements go to `root`'s `recvbuff` (rank i at offset i·count).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::gather(sendbuff, recvbuff, count, datatype, root, comm, stream)
}

/// Every rank's `count` elements go to `root`'s `recvbuff` (rank i at offset i·count).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::gather(sendbuff, recvbuff, count, datatype, root, comm, stream)
}

/// Block i of `root`'s `sendbuff` goes to rank i's `recvbuff`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::scatter(sendbuff, recvbuff, count, datatype, root, comm, stream)
}

/// Block i of `root`'s `sendbuff` goes to rank i's `recvbuff`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::scatter(sendbuff, recvbuff, count, datatype, root, comm, stream)
}

/// Sends `count` elements to `peer` (matched with its `ncclRecv`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::send(sendbuff, count, datatype, peer, comm, stream)
}

/// Sends `count` elements to `peer` (matched with its `ncclRecv`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::send(sendbuff, count, datatype, peer, comm, stream)
}

/// Receives `count` elements from `peer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::recv(recvbuff, count, datatype, peer, comm, stream)
}

/// Receives `count` elements from `peer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    colls::recv(recvbuff, count, datatype, peer, comm, stream)
}

/// `ncclPutSignal`: Puts `count` elements into `peer`'s window at `peerWinOffset`, then signals `peer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclPutSignal(
    localbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    peerWin: ncclWindow_t,
    peerWinOffset: usize,
    sigIdx: c_int,
    ctx: c_int,
    flags: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    rma::put_signal(
        localbuff,
        count,
        datatype,
        peer,
        peerWin,
        peerWinOffset,
        sigIdx,
        ctx,
        flags,
        comm,
        stream,
    )
}

/// `ncclPutSignal`: Puts `count` elements into `peer`'s window at `peerWinOffset`, then signals `peer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclPutSignal(
    localbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    peerWin: ncclWindow_t,
    peerWinOffset: usize,
    sigIdx: c_int,
    ctx: c_int,
    flags: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    rma::put_signal(
        localbuff,
        count,
        datatype,
        peer,
        peerWin,
        peerWinOffset,
        sigIdx,
        ctx,
        flags,
        comm,
        stream,
    )
}

/// `ncclSignal`: Signals `peer` (a put of no data).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclSignal(
    peer: c_int,
    sigIdx: c_int,
    ctx: c_int,
    flags: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    rma::signal(peer, sigIdx, ctx, flags, comm, stream)
}

/// `ncclSignal`: Signals `peer` (a put of no data).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclSignal(
    peer: c_int,
    sigIdx: c_int,
    ctx: c_int,
    flags: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    rma::signal(peer, sigIdx, ctx, flags, comm, stream)
}

/// `ncclWaitSignal`: Waits for the signals the descriptors name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclWaitSignal(
    nDesc: c_int,
    signalDescs: *mut ncclWaitSignalDesc_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    rma::wait_signal(nDesc, signalDescs, comm, stream)
}

/// `ncclWaitSignal`: Waits for the signals the descriptors name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclWaitSignal(
    nDesc: c_int,
    signalDescs: *mut ncclWaitSignalDesc_t,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    rma::wait_signal(nDesc, signalDescs, comm, stream)
}

/// Opens a group: operations issued until the matching `ncclGroupEnd` run together.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupStart() -> ncclResult_t {
    group::start()
}

/// Opens a group: operations issued until the matching `ncclGroupEnd` run together.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclGroupStart() -> ncclResult_t {
    group::start()
}

/// Closes a group; the outermost one launches its operations (and, with the NULL stream on host memory, waits for them).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupEnd() -> ncclResult_t {
    group::end()
}

/// Closes a group; the outermost one launches its operations (and, with the NULL stream on host memory, waits for them).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclGroupEnd() -> ncclResult_t {
    group::end()
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupSimulateEnd(simInfo: *mut ncclSimInfo_t) -> ncclResult_t {
    unimplemented::missing("ncclGroupSimulateEnd")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclGroupSimulateEnd(simInfo: *mut ncclSimInfo_t) -> ncclResult_t {
    unimplemented::missing("ncclGroupSimulateEnd")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamBind(out: *mut ncclParamHandle_t, key: *const c_char) -> ncclResult_t {
    unimplemented::missing("ncclParamBind")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamBind(out: *mut ncclParamHandle_t, key: *const c_char) -> ncclResult_t {
    unimplemented::missing("ncclParamBind")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetI8(h: ncclParamHandle_t, out: *mut i8) -> ncclResult_t {
    unimplemented::missing("ncclParamGetI8")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetI8(h: ncclParamHandle_t, out: *mut i8) -> ncclResult_t {
    unimplemented::missing("ncclParamGetI8")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetI16(h: ncclParamHandle_t, out: *mut i16) -> ncclResult_t {
    unimplemented::missing("ncclParamGetI16")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetI16(h: ncclParamHandle_t, out: *mut i16) -> ncclResult_t {
    unimplemented::missing("ncclParamGetI16")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetI32(h: ncclParamHandle_t, out: *mut i32) -> ncclResult_t {
    unimplemented::missing("ncclParamGetI32")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetI32(h: ncclParamHandle_t, out: *mut i32) -> ncclResult_t {
    unimplemented::missing("ncclParamGetI32")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetI64(h: ncclParamHandle_t, out: *mut i64) -> ncclResult_t {
    unimplemented::missing("ncclParamGetI64")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetI64(h: ncclParamHandle_t, out: *mut i64) -> ncclResult_t {
    unimplemented::missing("ncclParamGetI64")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetU8(h: ncclParamHandle_t, out: *mut u8) -> ncclResult_t {
    unimplemented::missing("ncclParamGetU8")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetU8(h: ncclParamHandle_t, out: *mut u8) -> ncclResult_t {
    unimplemented::missing("ncclParamGetU8")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetU16(h: ncclParamHandle_t, out: *mut u16) -> ncclResult_t {
    unimplemented::missing("ncclParamGetU16")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetU16(h: ncclParamHandle_t, out: *mut u16) -> ncclResult_t {
    unimplemented::missing("ncclParamGetU16")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetU32(h: ncclParamHandle_t, out: *mut u32) -> ncclResult_t {
    unimplemented::missing("ncclParamGetU32")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetU32(h: ncclParamHandle_t, out: *mut u32) -> ncclResult_t {
    unimplemented::missing("ncclParamGetU32")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetU64(h: ncclParamHandle_t, out: *mut u64) -> ncclResult_t {
    unimplemented::missing("ncclParamGetU64")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetU64(h: ncclParamHandle_t, out: *mut u64) -> ncclResult_t {
    unimplemented::missing("ncclParamGetU64")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetStr(h: ncclParamHandle_t, out: *mut *const c_char) -> ncclResult_t {
    unimplemented::missing("ncclParamGetStr")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetStr(h: ncclParamHandle_t, out: *mut *const c_char) -> ncclResult_t {
    unimplemented::missing("ncclParamGetStr")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGet(
    h: ncclParamHandle_t,
    out: *mut c_void,
    maxLen: c_int,
    len: *mut c_int,
) -> ncclResult_t {
    unimplemented::missing("ncclParamGet")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGet(
    h: ncclParamHandle_t,
    out: *mut c_void,
    maxLen: c_int,
    len: *mut c_int,
) -> ncclResult_t {
    unimplemented::missing("ncclParamGet")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetParameter(
    key: *const c_char,
    value: *mut *const c_char,
    valueLen: *mut c_int,
) -> ncclResult_t {
    unimplemented::missing("ncclParamGetParameter")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetParameter(
    key: *const c_char,
    value: *mut *const c_char,
    valueLen: *mut c_int,
) -> ncclResult_t {
    unimplemented::missing("ncclParamGetParameter")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamGetAllParameterKeys(
    table: *mut *mut *const c_char,
    tableLen: *mut c_int,
) -> ncclResult_t {
    unimplemented::missing("ncclParamGetAllParameterKeys")
}

/// Not implemented by ferroccl: returns `ncclInvalidUsage` with a WARN line naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamGetAllParameterKeys(
    table: *mut *mut *const c_char,
    tableLen: *mut c_int,
) -> ncclResult_t {
    unimplemented::missing("ncclParamGetAllParameterKeys")
}

/// Not implemented by ferroccl: logs a WARN line naming it and does nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclParamDumpAll() {
    unimplemented::missing_void("ncclParamDumpAll")
}

/// Not implemented by ferroccl: logs a WARN line naming it and does nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pncclParamDumpAll() {
    unimplemented::missing_void("ncclParamDumpAll")
}
