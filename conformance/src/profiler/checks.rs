//! The profiler checks: each an id, a one-line rule, the reference section it
//! comes from, a level and the API versions it applies to, and a body that
//! drives the plugin through the runtime's adapter as NCCL 2.30.7 does
//! (`docs/reference/nccl-graph-tuning.md` §6: hierarchy §6.2, where each event starts and
//! stops §6.3, ProxyStep states §6.4, ProxyCtrl §6.5, the net-plugin callback
//! §6.6, version differences §6.7).
//!
//! What the suite feeds is well formed by construction: every descriptor is
//! filled as the runtime fills it, parents are started before their children,
//! every started event is stopped (except in `profiler.unfinished`, which is
//! about the events NCCL leaves open), and only event types the plugin's
//! activation mask asks for (or their ancestors, §6.1) are started. What the
//! plugin must do: return `ncclSuccess` from every call, accept back every
//! handle it gave, tolerate NULL where NCCL passes NULL, never crash, never
//! block (each call under a 10 s watchdog, [`super::worker::LIMIT`]).

use std::ffi::{CStr, CString, c_void};
use std::ptr::null_mut;
use std::sync::Arc;

use ferroccl::plugin::library::PluginLibrary;
use ferroccl::profiler::{self, CommFacts, Event, EventHandle, PHandle, Profiler, StateArgs, bits, state, wants};
use ferroccl_plugin_api::abi;

use super::shim::RawVtable;
use crate::outcome::{Res, Stop};
use crate::registry::Level;
use crate::{ensure, fail};

/// What a check body works with.
#[derive(Debug)]
pub struct ProfCx {
    /// The plugin library (pinned by the adapter at the first `init`).
    pub lib: Arc<PluginLibrary>,
    /// The plugin's own vtable.
    pub real: RawVtable,
    /// The recording shim's vtable, handed to the adapter instead of `real`.
    pub shim: *const c_void,
    /// API version under test.
    pub version: u32,
    /// Extra observations for the report.
    pub notes: Vec<String>,
}

/// One profiler check (id `profiler.*`; the record every plugin section uses).
/// Reference sections: `§3.2` = ABI, `§5.4` = loading, `§6.x` = event model.
pub type ProfilerCheck = crate::section::SectionCheck<ProfCx>;

/// Every profiler check, in run order.
pub fn all() -> Vec<ProfilerCheck> {
    let c = |id, section, rule, min_version, body| ProfilerCheck {
        id,
        section,
        rule,
        level: Level::Required,
        min_version,
        max_version: 6,
        body,
    };
    vec![
        c(
            "profiler.load",
            "§5.4",
            "the library exports ncclProfiler_vN with a non-empty name and no NULL function pointer",
            1,
            load,
        ),
        c(
            "profiler.init",
            "§3.2",
            "init with the version's arguments and NCCL's activation-mask pointer returns ncclSuccess, and finalize too",
            1,
            init,
        ),
        c(
            "profiler.events.coll",
            "§6.3",
            "every collective's event tree (GroupApi, CollApi, Group, Coll, ProxyOp, ProxyStep with its states) is accepted: ncclSuccess, handles accepted back",
            1,
            events_coll,
        ),
        c(
            "profiler.events.p2p",
            "§6.3",
            "a group of send/recv's event tree (GroupApi, P2pApi, Group, P2p, ProxyOp, ProxyStep) is accepted",
            1,
            events_p2p,
        ),
        c(
            "profiler.events.proxy_ctrl",
            "§6.5",
            "parentless ProxyCtrl events with Sleep/Wakeup, Append/AppendEnd, Idle/Active states are accepted",
            1,
            events_proxy_ctrl,
        ),
        c(
            "profiler.events.net_plugin",
            "§6.6",
            "net-plugin events (socket and IB descriptors) through the v10+ callback under a ProxyStep: Start, Update, Stop, UpdateAndStop",
            3,
            events_net_plugin,
        ),
        c(
            "profiler.events.threads",
            "§6.2",
            "event trees of two communicators from four threads at once are accepted",
            1,
            events_threads,
        ),
        c(
            "profiler.null_handles",
            "§6.3",
            "stopEvent(NULL) (the net-plugin Stop path) and a NULL parentObj (a parent whose start gave NULL) are accepted",
            1,
            null_handles,
        ),
        c(
            "profiler.unfinished",
            "§6.4",
            "finalize succeeds while events are still open (NCCL restarts receive steps without stopping them; abort), and a new communicator works after",
            1,
            unfinished,
        ),
        c(
            "profiler.finalize",
            "§5.4",
            "two communicators' contexts live at once and finalize in reverse order; a context created afterwards works",
            1,
            finalize,
        ),
    ]
}

/// Types each version knows (`profiler_v1..v6.cc`; reference §6.7).
fn known(version: u32) -> u64 {
    let v1 = bits::GROUP | bits::COLL | bits::P2P | bits::PROXY_OP | bits::PROXY_STEP | bits::PROXY_CTRL;
    match version {
        1 | 2 => v1,
        3 | 4 => v1 | bits::KERNEL_CH | bits::NET_PLUGIN,
        5 => {
            v1 | bits::KERNEL_CH
                | bits::NET_PLUGIN
                | bits::GROUP_API
                | bits::COLL_API
                | bits::P2P_API
                | bits::KERNEL_LAUNCH
        }
        _ => 0x7fff,
    }
}

fn type_names(m: u64) -> String {
    let v: Vec<&str> = super::shim::TYPE_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| m & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() { "none".into() } else { v.join(",") }
}

impl ProfCx {
    /// `init` for a communicator of 8 ranks on 2 nodes (this process is `rank`),
    /// through the adapter (and the shim).
    pub fn comm(&self, comm_id: u64, rank: i32) -> Res<Profiler> {
        let facts = CommFacts {
            comm_id,
            comm_name: CString::new(format!("conformance-{comm_id:x}")).ok(),
            nnodes: 2,
            nranks: 8,
            rank,
        };
        let name = if self.real.name.is_null() {
            String::new()
        } else {
            // SAFETY: a non-NULL name inside the loaded library, read for the adapter's logs.
            unsafe { CStr::from_ptr(self.real.name) }.to_string_lossy().into_owned()
        };
        // SAFETY: `shim` is a `RawVtable` (the layout of every ncclProfiler_vN_t)
        // forwarding to the plugin's functions of version `self.version`.
        unsafe { Profiler::from_raw(self.lib.clone(), self.shim, self.version, &name, &facts) }.map_err(|e| {
            fail!(
                "init returns ncclSuccess (NCCL otherwise runs the communicator without the profiler)",
                "{e}"
            )
        })
    }

    /// The activation mask the plugin set, as NCCL acts on it for this version
    /// (the types the version knows; ancestors are started for them, §6.1).
    pub fn mask(&self) -> u64 {
        profiler::mask() & known(self.version)
    }

    /// Skips the check when the mask asks for none of `want`'s types.
    fn need(&self, want: u64, what: &str) -> Res<u64> {
        let m = self.mask();
        if m & want == 0 {
            return Err(Stop::Skip(format!(
                "the activation mask the plugin set (0x{:x}: {}) asks for no {what} (NCCL would start none)",
                profiler::mask(),
                type_names(m)
            )));
        }
        Ok(m)
    }
}

const CHUNK: usize = 128 << 10;

/// The ProxySteps of one op, with NCCL's states (§6.4); net-plugin events under
/// each send step when `net`.
fn steps(p: &Profiler, op: EventHandle, mask: u64, send: bool, nsteps: i32, net: bool) {
    if mask & wants::PROXY_STEP_ == 0 {
        return;
    }
    for step in 0..nsteps {
        let h = p.start(op, &Event::ProxyStep { step });
        if send {
            p.record(h, state::SEND_GPU_WAIT, StateArgs::TransSize(0));
            p.record(h, state::SEND_PEER_WAIT, StateArgs::TransSize(CHUNK));
            p.record(h, state::SEND_WAIT, StateArgs::TransSize(CHUNK));
        } else {
            p.record(h, state::RECV_WAIT, StateArgs::TransSize(0));
        }
        if net {
            net_events(p, h, mask, send);
        }
        if !send {
            p.record(h, state::RECV_FLUSH_WAIT, StateArgs::TransSize(CHUNK));
            p.record(h, state::RECV_GPU_WAIT, StateArgs::TransSize(CHUNK));
        }
        p.stop(h);
    }
}

/// Net-plugin events under `step` through the callback v10+ net plugins get
/// (`ncclProfilerCallback`, §6.6), as the built-in socket and IB plugins emit
/// them: a socket task (Start, Update, Stop) and an IB QP work request (Start,
/// UpdateAndStop).
fn net_events(p: &Profiler, step: EventHandle, mask: u64, send: bool) {
    let mut ph = PHandle {
        step,
        prof: p as *const Profiler,
        mask,
    };
    let php: *mut c_void = (&mut ph as *mut PHandle).cast();
    let mut sock = abi::ncclProfilerNetSockDescr_v1_t::zeroed();
    sock.r#type = abi::ncclProfileSocket;
    let mut so = abi::ncclProfilerNetSockSockDescr_v1_t::zeroed();
    so.fd = 42;
    so.op = if send { 0 } else { 1 };
    so.length = CHUNK;
    sock.u.sock = so;
    let mut ib = abi::ncclProfilerNetIbDescr_v1_t::zeroed();
    ib.r#type = abi::ncclProfileQp;
    let mut qp = abi::ncclProfilerNetIbQpDescr_v1_t::zeroed();
    qp.device = 0;
    qp.wr_id = 7;
    qp.opcode = if send { 0 } else { 128 };
    qp.qpNum = 0x11;
    qp.length = CHUNK;
    ib.u.qp = qp;
    let sock_id = (abi::NCCL_PROFILER_NET_TYPE_SOCK | 1) as i64;
    let ib_id = (abi::NCCL_PROFILER_NET_TYPE_IB | 1) as i64;
    let sp: *mut c_void = (&mut sock as *mut abi::ncclProfilerNetSockDescr_v1_t).cast();
    let ip: *mut c_void = (&mut ib as *mut abi::ncclProfilerNetIbDescr_v1_t).cast();
    let mut e1: *mut c_void = null_mut();
    let mut e2: *mut c_void = null_mut();
    // SAFETY: the callback's contract: `eHandle` points to our `void*`, `pHandle`
    // is a live PHandle naming a started step of the live profiler `p`, `extData`
    // outlives every call.
    unsafe {
        profiler::net_callback(&mut e1, abi::ncclProfilerNetEventStart, php, sock_id, sp);
        profiler::net_callback(&mut e2, abi::ncclProfilerNetEventStart, php, ib_id, ip);
        profiler::net_callback(&mut e1, abi::ncclProfilerNetEventUpdate, php, sock_id, sp);
        profiler::net_callback(&mut e1, abi::ncclProfilerNetEventStop, php, sock_id, sp);
        profiler::net_callback(&mut e2, abi::ncclProfilerNetEventUpdateAndStop, php, ib_id, ip);
    }
}

/// A buffer address for descriptors (the suite's own memory; never written).
fn buf(n: usize) -> Vec<u8> {
    vec![0u8; n]
}

const COLLS: [(&CStr, &CStr, &CStr, &CStr); 5] = [
    (c"AllReduce", c"ncclFloat32", c"RING", c"SIMPLE"),
    (c"AllGather", c"ncclInt8", c"RING", c"LL128"),
    (c"ReduceScatter", c"ncclBfloat16", c"RING", c"LL"),
    (c"Broadcast", c"ncclInt8", c"TREE", c"SIMPLE"),
    (c"Reduce", c"ncclFloat64", c"TREE", c"LL"),
];

/// One collective as NCCL emits it (§6.3): GroupApi (23 after start, 24 at
/// group end), CollApi (started and stopped in the API call), then Group and
/// Coll at launch, ProxyOps per (channel, direction) started before the Coll
/// and Group stop, then each op's InProgress state, its steps, its stop.
fn coll_tree(p: &Profiler, mask: u64, seq: u64, which: usize, net: bool) {
    let (func, dtype, algo, proto) = COLLS[which % COLLS.len()];
    let sendb = buf(64);
    let mut recvb = buf(64);
    let ga = if mask & wants::GROUP_API_ != 0 {
        p.start(EventHandle::NULL, &Event::GroupApi { depth: 1 })
    } else {
        EventHandle::NULL
    };
    p.record(ga, state::GROUP_START_API_STOP, StateArgs::None);
    let ca = if mask & wants::COLL_API_ != 0 {
        p.start(
            ga,
            &Event::CollApi {
                func,
                count: 1 << 20,
                dtype,
                root: 0,
            },
        )
    } else {
        EventHandle::NULL
    };
    p.stop(ca);
    p.record(ga, state::GROUP_END_API_START, StateArgs::None);
    let g = if mask & wants::GROUP_ != 0 {
        p.start(EventHandle::NULL, &Event::Group)
    } else {
        EventHandle::NULL
    };
    let c = if mask & wants::COLL_ != 0 {
        p.start(
            ca,
            &Event::Coll {
                seq,
                func,
                send: sendb.as_ptr().cast(),
                recv: recvb.as_mut_ptr().cast(),
                count: 1 << 20,
                root: 0,
                dtype,
                nchannels: 2,
                nwarps: 0,
                algo,
                proto,
                parent_group: g,
            },
        )
    } else {
        EventHandle::NULL
    };
    let mut ops = Vec::new();
    if mask & wants::PROXY_OP_ != 0 {
        for channel in 0..2u8 {
            for is_send in [true, false] {
                let peer = if is_send { 1 } else { 7 };
                let h = p.start(
                    c,
                    &Event::ProxyOp {
                        channel,
                        peer,
                        nsteps: 2,
                        chunk: CHUNK as i32,
                        is_send,
                    },
                );
                ops.push((h, is_send));
            }
        }
    }
    p.stop(c);
    p.stop(g);
    p.stop(ga);
    for (op, is_send) in ops {
        p.record(op, state::OP_IN_PROGRESS, StateArgs::None);
        steps(p, op, mask, is_send, 2, net);
        p.stop(op);
    }
}

/// A group of one Send and one Recv (`ncclGroupStart` … `ncclGroupEnd`, so
/// GroupApi depth 2), as NCCL emits it.
fn p2p_tree(p: &Profiler, mask: u64, net: bool) {
    let mut b = buf(64);
    let ga = if mask & wants::GROUP_API_ != 0 {
        p.start(EventHandle::NULL, &Event::GroupApi { depth: 2 })
    } else {
        EventHandle::NULL
    };
    p.record(ga, state::GROUP_START_API_STOP, StateArgs::None);
    let mut apis = Vec::new();
    for func in [c"Send", c"Recv"] {
        let h = if mask & wants::P2P_API_ != 0 {
            p.start(
                ga,
                &Event::P2pApi {
                    func,
                    count: 4096,
                    dtype: c"ncclFloat32",
                },
            )
        } else {
            EventHandle::NULL
        };
        p.stop(h);
        apis.push((func, h));
    }
    p.record(ga, state::GROUP_END_API_START, StateArgs::None);
    let g = if mask & wants::GROUP_ != 0 {
        p.start(EventHandle::NULL, &Event::Group)
    } else {
        EventHandle::NULL
    };
    let mut ops = Vec::new();
    let mut p2ps = Vec::new();
    for (func, api) in apis {
        let is_send = func == c"Send";
        let peer = if is_send { 1 } else { 7 };
        let e = if mask & wants::P2P_ != 0 {
            p.start(
                api,
                &Event::P2p {
                    func,
                    buff: b.as_mut_ptr().cast(),
                    dtype: c"ncclFloat32",
                    count: 4096,
                    peer,
                    nchannels: 1,
                    parent_group: g,
                },
            )
        } else {
            EventHandle::NULL
        };
        if mask & wants::PROXY_OP_ != 0 {
            let h = p.start(
                e,
                &Event::ProxyOp {
                    channel: 0,
                    peer,
                    nsteps: 1,
                    chunk: 16384,
                    is_send,
                },
            );
            ops.push((h, is_send));
        }
        p2ps.push(e);
    }
    for e in p2ps {
        p.stop(e);
    }
    p.stop(g);
    p.stop(ga);
    for (op, is_send) in ops {
        p.record(op, state::OP_IN_PROGRESS, StateArgs::None);
        steps(p, op, mask, is_send, 1, net);
        p.stop(op);
    }
}

/// The proxy thread's ProxyCtrl events (§6.5): sleep/wakeup, append, idle/active.
fn proxy_ctrl(p: &Profiler) {
    let h = p.start(EventHandle::NULL, &Event::ProxyCtrl);
    p.record(h, state::CTRL_SLEEP, StateArgs::None);
    p.record(h, state::CTRL_WAKEUP, StateArgs::None);
    p.stop(h);
    let h = p.start(EventHandle::NULL, &Event::ProxyCtrl);
    p.record(h, state::CTRL_APPEND, StateArgs::None);
    p.record(h, state::CTRL_APPEND_END, StateArgs::Appended(3));
    p.stop(h);
    for st in [abi::ncclProfilerProxyCtrlIdle, abi::ncclProfilerProxyCtrlActive] {
        let h = p.start(EventHandle::NULL, &Event::ProxyCtrl);
        p.record(h, st, StateArgs::None);
        p.stop(h);
    }
}

fn load(cx: &mut ProfCx) -> Res {
    ensure!(
        !cx.real.name.is_null(),
        "a non-NULL name (NCCL logs it)",
        "name is NULL"
    );
    // SAFETY: non-NULL name inside the loaded library.
    let name = unsafe { CStr::from_ptr(cx.real.name) };
    ensure!(
        !name.to_bytes().is_empty(),
        "a non-empty name (NCCL logs it)",
        "name is empty"
    );
    let slots = [
        ("init", cx.real.init),
        ("startEvent", cx.real.start),
        ("stopEvent", cx.real.stop),
        ("recordEventState", cx.real.record),
        ("finalize", cx.real.finalize),
    ];
    for (n, f) in slots {
        ensure!(
            !f.is_null(),
            "every function pointer set (NCCL calls each without a NULL check)",
            "{n} is NULL"
        );
    }
    Ok(())
}

fn init(cx: &mut ProfCx) -> Res {
    let p = cx.comm(0x1234, 3)?;
    let m = profiler::mask();
    cx.notes.push(format!(
        "activation mask after init: 0x{m:x} ({}; the version knows {})",
        type_names(m as u64),
        type_names(known(cx.version))
    ));
    drop(p);
    Ok(())
}

fn events_coll(cx: &mut ProfCx) -> Res {
    let p = cx.comm(0x2000, 0)?;
    let m = cx.need(wants::GROUP_API_ | wants::GROUP_, "collective events")?;
    for i in 0..COLLS.len() * 2 {
        coll_tree(&p, m, i as u64, i, false);
    }
    drop(p);
    Ok(())
}

fn events_p2p(cx: &mut ProfCx) -> Res {
    let p = cx.comm(0x2001, 0)?;
    let m = cx.need(wants::GROUP_API_ | wants::GROUP_, "send/recv events")?;
    for _ in 0..4 {
        p2p_tree(&p, m, false);
    }
    drop(p);
    Ok(())
}

fn events_proxy_ctrl(cx: &mut ProfCx) -> Res {
    let p = cx.comm(0x2002, 0)?;
    cx.need(bits::PROXY_CTRL, "ProxyCtrl events")?;
    for _ in 0..4 {
        proxy_ctrl(&p);
    }
    drop(p);
    Ok(())
}

fn events_net_plugin(cx: &mut ProfCx) -> Res {
    let p = cx.comm(0x2003, 0)?;
    let m = cx.need(bits::NET_PLUGIN, "NetPlugin events")?;
    for i in 0..4 {
        coll_tree(&p, m, i, 0, true);
        p2p_tree(&p, m, true);
    }
    drop(p);
    Ok(())
}

fn events_threads(cx: &mut ProfCx) -> Res {
    let a = cx.comm(0x3000, 0)?;
    let b = cx.comm(0x3001, 1)?;
    let m = cx.need(wants::GROUP_API_ | wants::GROUP_, "collective or send/recv events")?;
    let comms = [&a, &b];
    std::thread::scope(|s| {
        for t in 0..4usize {
            let p = comms[t % 2];
            s.spawn(move || {
                for i in 0..25usize {
                    coll_tree(p, m, i as u64, i + t, false);
                    p2p_tree(p, m, false);
                }
            });
        }
    });
    drop(b);
    drop(a);
    Ok(())
}

fn null_handles(cx: &mut ProfCx) -> Res {
    let p = cx.comm(0x4000, 0)?;
    let m = cx.mask();
    // The net-plugin Stop path forwards `*eHandle` unfiltered (§6.6): NULL when the
    // plugin's Start was filtered by the mask.
    let mut e: *mut c_void = null_mut();
    // SAFETY: `e` is our `void*`; Stop needs no pHandle.
    unsafe {
        profiler::net_callback(&mut e, abi::ncclProfilerNetEventStop, null_mut(), 0x20001, null_mut());
    }
    // Children whose parent's startEvent left the handle NULL get parentObj NULL.
    let mut b = buf(64);
    if m & wants::COLL_ != 0 {
        let c = p.start(
            EventHandle::NULL,
            &Event::Coll {
                seq: 0,
                func: c"AllReduce",
                send: b.as_ptr().cast(),
                recv: b.as_mut_ptr().cast(),
                count: 16,
                root: 0,
                dtype: c"ncclFloat32",
                nchannels: 1,
                nwarps: 0,
                algo: c"RING",
                proto: c"LL",
                parent_group: EventHandle::NULL,
            },
        );
        p.stop(c);
    }
    if m & wants::PROXY_OP_ != 0 {
        let op = p.start(
            EventHandle::NULL,
            &Event::ProxyOp {
                channel: 0,
                peer: 1,
                nsteps: 1,
                chunk: 4096,
                is_send: true,
            },
        );
        p.record(op, state::OP_IN_PROGRESS, StateArgs::None);
        p.stop(op);
    }
    if m & wants::PROXY_STEP_ != 0 {
        let st = p.start(EventHandle::NULL, &Event::ProxyStep { step: 0 });
        p.record(st, state::SEND_GPU_WAIT, StateArgs::TransSize(0));
        p.stop(st);
    }
    drop(p);
    Ok(())
}

fn unfinished(cx: &mut ProfCx) -> Res {
    let p = cx.comm(0x5000, 0)?;
    let m = cx.need(wants::GROUP_API_ | wants::GROUP_, "events")?;
    let ga = if m & wants::GROUP_API_ != 0 {
        p.start(EventHandle::NULL, &Event::GroupApi { depth: 1 })
    } else {
        EventHandle::NULL
    };
    let g = if m & wants::GROUP_ != 0 {
        p.start(EventHandle::NULL, &Event::Group)
    } else {
        EventHandle::NULL
    };
    let mut b = buf(64);
    let c = if m & wants::COLL_ != 0 {
        p.start(
            ga,
            &Event::Coll {
                seq: 9,
                func: c"AllReduce",
                send: b.as_ptr().cast(),
                recv: b.as_mut_ptr().cast(),
                count: 16,
                root: 0,
                dtype: c"ncclFloat32",
                nchannels: 1,
                nwarps: 0,
                algo: c"RING",
                proto: c"SIMPLE",
                parent_group: g,
            },
        )
    } else {
        EventHandle::NULL
    };
    if m & wants::PROXY_OP_ != 0 {
        let op = p.start(
            c,
            &Event::ProxyOp {
                channel: 0,
                peer: 1,
                nsteps: 4,
                chunk: 4096,
                is_send: false,
            },
        );
        p.record(op, state::OP_IN_PROGRESS, StateArgs::None);
        if m & wants::PROXY_STEP_ != 0 {
            // The receive-side quirk: the same step started twice, neither stopped.
            for _ in 0..2 {
                let st = p.start(op, &Event::ProxyStep { step: 0 });
                p.record(st, state::RECV_WAIT, StateArgs::TransSize(0));
            }
        }
    }
    // finalize with all of the above open (the shim reports a failing finalize).
    drop(p);
    let p = cx.comm(0x5001, 0)?;
    let m = cx.mask();
    coll_tree(&p, m, 0, 0, false);
    drop(p);
    Ok(())
}

fn finalize(cx: &mut ProfCx) -> Res {
    let a = cx.comm(0x6000, 0)?;
    let b = cx.comm(0x6001, 1)?;
    let m = cx.mask();
    coll_tree(&a, m, 0, 0, false);
    coll_tree(&b, m, 0, 1, false);
    drop(b);
    drop(a);
    let c = cx.comm(0x6002, 2)?;
    coll_tree(&c, cx.mask(), 1, 2, false);
    drop(c);
    Ok(())
}
