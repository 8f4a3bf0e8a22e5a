//! Communicator management: init (by rank, all in one process, scalable),
//! split, finalize, destroy, abort, and the queries (NCCL 2.30.7 `src/init.cc`).
//!
//! Blocking communicators do the work in the call. Non-blocking ones
//! (`config.blocking = 0`) return `ncclInProgress` and do it on a thread;
//! `ncclCommGetAsyncError` reports `ncclInProgress` until it is done. Inside
//! `ncclGroupStart`/`ncclGroupEnd`, inits and splits wait for the group's end,
//! which runs them together (so one thread can create several ranks).

use std::ffi::c_int;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ferroccl::{Comm, CommConfig};

use crate::abi::{NCCL_SPLIT_NOCOLOR, ncclComm_t, ncclConfig_t, ncclResult_t, ncclUniqueId};
use crate::api::{Fail, R, guard, store, unique_id};
use crate::config::{Settings, parse};
use crate::enums::result;
use crate::group;
use crate::handles::{self, Entry};
use crate::job::Job;

/// The CUDA device a communicator made on this thread binds (NCCL: `cudaGetDevice`
/// at init), -1 without CUDA.
fn current_cuda_device() -> i32 {
    match ferroccl_kernels::cuda::current_device() {
        Ok(Some(d)) => d as i32,
        Ok(None) => 0,
        Err(_) => -1,
    }
}

/// Prints the version banner once (NCCL prints `NCCL version …` at its first init).
fn banner() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        ferroccl::nccl_version!(
            "NCCL version 2.30.7+ferroccl-{} (libnccl.so.2 over the ferroccl runtime)",
            env!("CARGO_PKG_VERSION")
        );
    });
}

/// Starts job `job` as NCCL would: inside a group, deferred to `ncclGroupEnd`;
/// blocking, run now (the handle is unregistered and `*out` set to NULL if it
/// fails); non-blocking, run on a thread (`ncclInProgress`).
fn start(job: Job, out: *mut ncclComm_t) -> R {
    let entry = job.entry.clone();
    if group::in_group() {
        group::defer(job);
        return Ok(());
    }
    match entry {
        Some(e) if !e.settings.blocking => {
            e.spawn(job.op, move |_| {
                if let Err(f) = job.run() {
                    crate::api::report(&f.msg);
                }
            })?;
            Err(Fail::in_progress())
        }
        e => {
            let r = job.run();
            if r.is_err()
                && let Some(e) = e
            {
                handles::remove(e.handle());
                if !out.is_null() {
                    // SAFETY: the caller's out-pointer, checked non-NULL.
                    unsafe { out.write(std::ptr::null_mut()) };
                }
            }
            r
        }
    }
}

/// A new handle for a communicator with `settings`, stored in `*out` at once
/// (NCCL sets `*newcomm` before a non-blocking init finishes), and its config.
fn new_handle(out: *mut ncclComm_t, settings: Settings, op: &str) -> R<(Arc<Entry>, CommConfig)> {
    let (mut config, abort) = settings.comm_config(op)?;
    let dev = current_cuda_device();
    // NCCL binds the current device at init (`src/init.cc`: cudaGetDevice).
    config.cuda_dev = usize::try_from(dev).ok();
    let e = handles::create(settings, dev, abort);
    store(out, e.handle(), op, "newcomm").inspect_err(|_| {
        handles::remove(e.handle());
    })?;
    banner();
    Ok((e, config))
}

fn check_rank(nranks: c_int, rank: c_int) -> R<(usize, usize)> {
    if nranks < 1 || rank < 0 || rank >= nranks {
        return Err(Fail::arg(format!("Invalid rank requested : {rank}/{nranks}")));
    }
    Ok((nranks as usize, rank as usize))
}

/// `ncclCommInitRankConfig`.
pub(crate) fn init_rank_config(
    out: *mut ncclComm_t,
    nranks: c_int,
    id: ncclUniqueId,
    rank: c_int,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    guard("ncclCommInitRankConfig", || {
        init("ncclCommInitRankConfig", out, nranks, id, rank, config)
    })
}

fn init(
    op: &'static str,
    out: *mut ncclComm_t,
    nranks: c_int,
    id: ncclUniqueId,
    rank: c_int,
    config: *const ncclConfig_t,
) -> R {
    if out.is_null() {
        return Err(Fail::arg(format!("{op} : newcomm argument is NULL")));
    }
    let (n, r) = check_rank(nranks, rank)?;
    let settings = parse(config, None, op)?;
    let (entry, config) = new_handle(out, settings, op)?;
    let id = unique_id(&id);
    start(
        Job {
            entry: Some(entry),
            config,
            make: Box::new(move |c| Comm::init_rank(n, &id, r, c).map(Some)),
            op,
        },
        out,
    )
}

/// `ncclCommInitRank`.
pub(crate) fn init_rank(out: *mut ncclComm_t, nranks: c_int, id: ncclUniqueId, rank: c_int) -> ncclResult_t {
    guard("ncclCommInitRank", || {
        init("ncclCommInitRank", out, nranks, id, rank, std::ptr::null())
    })
}

/// `ncclCommInitRankScalable`: `nId` unique ids (NCCL spreads the bootstrap over
/// several roots); ferroccl bootstraps through the first, which every rank has.
pub(crate) fn init_rank_scalable(
    out: *mut ncclComm_t,
    nranks: c_int,
    rank: c_int,
    n_id: c_int,
    ids: *mut ncclUniqueId,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    guard("ncclCommInitRankScalable", || {
        if n_id < 1 || ids.is_null() {
            return Err(Fail::arg(format!(
                "ncclCommInitRankScalable : invalid number of unique ids {n_id} (or NULL commIds)"
            )));
        }
        // SAFETY: `ids` holds `nId` ids (the caller's contract), nId >= 1.
        let first = unsafe { ids.read() };
        init("ncclCommInitRankScalable", out, nranks, first, rank, config)
    })
}

/// `ncclCommInitAll`: `ndev` ranks in this process, one thread each, sharing a
/// fresh unique id; all succeed or none is left.
pub(crate) fn init_all(comms: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t {
    guard("ncclCommInitAll", || {
        if comms.is_null() {
            return Err(Fail::arg("ncclCommInitAll : comms argument is NULL"));
        }
        if ndev < 1 {
            return Err(Fail::arg(format!("Invalid device count requested : {ndev}")));
        }
        let n = ndev as usize;
        let devs: Vec<i32> = if devlist.is_null() {
            (0..ndev).collect()
        } else {
            // SAFETY: `devlist` holds `ndev` ints (the caller's contract).
            unsafe { std::slice::from_raw_parts(devlist, n) }.to_vec()
        };
        let cfg = ferroccl::bootstrap::BootstrapConfig::from_params(ferroccl::config::Config::global())
            .map_err(|e| Fail::arg(format!("ncclCommInitAll: {e}")))?;
        let id =
            ferroccl::get_unique_id(&cfg).map_err(|e| Fail::runtime("ncclCommInitAll", &ferroccl::Error::from(e)))?;
        let cuda = current_cuda_device() >= 0;
        let mut entries = Vec::with_capacity(n);
        let mut jobs = Vec::with_capacity(n);
        for (r, dev) in devs.iter().enumerate() {
            let settings = Settings::default();
            let (mut config, abort) = settings.comm_config("ncclCommInitAll")?;
            if cuda {
                config.cuda_dev = usize::try_from(*dev).ok();
            }
            let e = handles::create(settings, if cuda { *dev } else { -1 }, abort);
            entries.push(e.clone());
            jobs.push(Job {
                entry: Some(e),
                config,
                make: Box::new(move |c| Comm::init_rank(n, &id, r, c).map(Some)),
                op: "ncclCommInitAll",
            });
        }
        banner();
        let results = group::run_jobs(jobs);
        if let Some(f) = results.into_iter().find_map(Result::err) {
            for e in &entries {
                if let Some(c) = handles::remove(e.handle()).and_then(|e| e.take_comm()) {
                    c.abort();
                }
            }
            return Err(f);
        }
        for (i, e) in entries.iter().enumerate() {
            // SAFETY: `comms` holds `ndev` handles (the caller's contract).
            unsafe { comms.add(i).write(e.handle()) };
        }
        Ok(())
    })
}

/// `ncclCommSplit`.
pub(crate) fn split(
    comm: ncclComm_t,
    color: c_int,
    key: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> ncclResult_t {
    guard("ncclCommSplit", || {
        const OP: &str = "ncclCommSplit";
        let parent = handles::get(comm, OP)?;
        if newcomm.is_null() {
            return Err(Fail::arg("ncclCommSplit : newcomm argument is NULL"));
        }
        if color < 0 && color != NCCL_SPLIT_NOCOLOR {
            return Err(Fail::arg(format!(
                "ncclCommSplit : invalid color {color} (expected a color >= 0 or NCCL_SPLIT_NOCOLOR)"
            )));
        }
        let pcomm = parent.comm(OP)?;
        let settings = parse(config, Some(&parent.settings), OP)?;
        if color == NCCL_SPLIT_NOCOLOR {
            store(newcomm, std::ptr::null_mut(), OP, "newcomm")?;
            let (config, _) = settings.comm_config(OP)?;
            return start(
                Job {
                    entry: None,
                    config,
                    make: Box::new(move |c| pcomm.split(None, key, c)),
                    op: OP,
                },
                newcomm,
            );
        }
        let (entry, config) = new_handle(newcomm, settings, OP)?;
        start(
            Job {
                entry: Some(entry),
                config,
                make: Box::new(move |c| pcomm.split(Some(color as u32), key, c)),
                op: OP,
            },
            newcomm,
        )
    })
}

/// `ncclCommFinalize`: waits for the communicator's operations and synchronizes
/// with its peers (non-blocking: on a thread).
pub(crate) fn finalize(comm: ncclComm_t) -> ncclResult_t {
    guard("ncclCommFinalize", || {
        const OP: &str = "ncclCommFinalize";
        let e = handles::get(comm, OP)?;
        let c = e.comm(OP)?;
        if e.settings.blocking {
            return c.finalize().map_err(|err| Fail::runtime(OP, &err));
        }
        e.spawn("finalize", move |e| {
            if let Err(err) = c.finalize() {
                let f = Fail::runtime(OP, &err);
                crate::api::report(&f.msg);
                e.fail(f);
            }
        })?;
        Err(Fail::in_progress())
    })
}

/// Unregisters `comm` for destroy or abort; `None` for NULL (NCCL returns
/// success for a NULL comm there).
fn unregister(comm: ncclComm_t, op: &str) -> R<Option<Arc<Entry>>> {
    if comm.is_null() {
        return Ok(None);
    }
    handles::get(comm, op)?;
    handles::remove(comm)
        .ok_or_else(|| Fail::arg(format!("{op} : comm {comm:p} was destroyed by another thread")))
        .map(Some)
}

/// `ncclCommDestroy`: finishes the communicator's operations and frees it; the
/// handle is dead from now on.
pub(crate) fn destroy(comm: ncclComm_t) -> ncclResult_t {
    guard("ncclCommDestroy", || {
        const OP: &str = "ncclCommDestroy";
        let Some(e) = unregister(comm, OP)? else { return Ok(()) };
        handles::forget(&e);
        e.join();
        let Some(c) = e.take_comm() else { return Ok(()) };
        ferroccl::nccl_info!(
            INIT,
            "comm {:#x} rank {} nranks {} - Destroy COMPLETE",
            e.token,
            c.rank(),
            c.nranks()
        );
        match Arc::try_unwrap(c) {
            Ok(c) => c.destroy().map_err(|err| Fail::runtime(OP, &err)),
            // Another thread's calls still hold it: it is freed when that
            // thread's cache lets it go (its next call to another
            // communicator, or its exit); dropping a communicator destroys it.
            Err(_) => Ok(()),
        }
    })
}

/// `ncclCommAbort`: stops everything in flight (an init still in its bootstrap
/// included), closes the connections and frees the communicator promptly.
pub(crate) fn abort(comm: ncclComm_t) -> ncclResult_t {
    guard("ncclCommAbort", || {
        let Some(e) = unregister(comm, "ncclCommAbort")? else {
            return Ok(());
        };
        e.abort_flag.store(true, Ordering::SeqCst);
        if let Some(c) = e.ready_comm() {
            c.abort();
        }
        e.join();
        if let Some(c) = e.take_comm() {
            c.abort();
            ferroccl::nccl_info!(
                INIT,
                "comm {:#x} rank {} nranks {} - Abort COMPLETE",
                e.token,
                c.rank(),
                c.nranks()
            );
        }
        Ok(())
    })
}

/// `ncclCommGetAsyncError`.
pub(crate) fn get_async_error(comm: ncclComm_t, out: *mut ncclResult_t) -> ncclResult_t {
    guard("ncclCommGetAsyncError", || {
        const OP: &str = "ncclCommGetAsyncError";
        let e = handles::get(comm, OP)?;
        store(out, state(&e), OP, "asyncError")
    })
}

/// A communicator's state as `ncclCommGetAsyncError` reports it.
fn state(e: &Entry) -> ncclResult_t {
    if e.busy() {
        return result::IN_PROGRESS;
    }
    if let Some(f) = e.error() {
        return f.code;
    }
    let Some(c) = e.ready_comm() else {
        return result::INVALID_USAGE;
    };
    if let Some(err) = c.async_error() {
        return err.nccl_result();
    }
    if !e.settings.blocking {
        // Host operations of a non-blocking communicator: in progress until done,
        // then their first error (kept).
        if !e.host_stream.query() {
            return result::IN_PROGRESS;
        }
        if let Err(err) = e.host_stream.synchronize() {
            let f = Fail::runtime("ncclCommGetAsyncError", &err);
            crate::api::report(&f.msg);
            e.fail(f.clone());
            return f.code;
        }
    }
    result::SUCCESS
}

/// `ncclCommCount`.
pub(crate) fn count(comm: ncclComm_t, out: *mut c_int) -> ncclResult_t {
    guard("ncclCommCount", || {
        let c = handles::get(comm, "ncclCommCount")?.comm("ncclCommCount")?;
        store(out, c.nranks() as c_int, "ncclCommCount", "count")
    })
}

/// `ncclCommUserRank`.
pub(crate) fn user_rank(comm: ncclComm_t, out: *mut c_int) -> ncclResult_t {
    guard("ncclCommUserRank", || {
        let c = handles::get(comm, "ncclCommUserRank")?.comm("ncclCommUserRank")?;
        store(out, c.rank() as c_int, "ncclCommUserRank", "rank")
    })
}

/// `ncclCommCuDevice`: the CUDA device bound at init; -1 without CUDA (host
/// memory, a ferroccl extension).
pub(crate) fn cu_device(comm: ncclComm_t, out: *mut c_int) -> ncclResult_t {
    guard("ncclCommCuDevice", || {
        let e = handles::get(comm, "ncclCommCuDevice")?;
        e.comm("ncclCommCuDevice")?;
        store(out, e.cuda_dev, "ncclCommCuDevice", "device")
    })
}
