//! `libnccl-profiler-trace.so`: a profiler plugin (`ncclProfiler_v6`, for NCCL
//! and ferroccl) that writes a timeline every rank's collectives, proxy ops,
//! proxy steps and network transfers in the Chrome trace event format (JSON),
//! which Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing` open.
//!
//! # Options (environment, read at the first `init` of the process)
//! * `NCCL_PROFILER_TRACE_FILE`: output path; `%h` is replaced by the host name,
//!   `%p` by the process id (default `ferroccl-trace-%h-%p.json`). One file per
//!   process, rewritten at every communicator's `finalize` with everything so
//!   far. Processes of one job share the wall clock (`CLOCK_REALTIME`, µs), so
//!   their files can be loaded together.
//! * `NCCL_PROFILE_EVENT_MASK`: the activation mask (NCCL's example profiler's
//!   variable and meaning: `ncclProfile*` bits); default: every event type
//!   except ProxyCtrl (`0x7fdf`).
//!
//! # What the trace shows
//! * one trace process per rank (`pid` = rank, named `rank R`);
//! * track `API`: GroupApi, CollApi, P2pApi (the user's calls);
//! * track `ops`: Group, Coll and P2p events; a Coll/P2p span is stretched to
//!   the last stop of its descendants (NCCL stops them as soon as the proxy
//!   ops are posted), so each collective covers its proxy ops and steps; its
//!   args carry seqNumber, count, datatype, algorithm, protocol, channels;
//! * one track per (channel, peer, direction) — `ch C send→P` / `ch C recv←P`
//!   — with the ProxyOp spans, and per FIFO slot (`… slot S`) the ProxyStep
//!   spans cut into their states (`SendGPUWait`, `SendPeerWait`, `SendWait`,
//!   `RecvWait`, `RecvFlushWait`, `RecvGPUWait`) with the transfer size;
//! * net-plugin events on the track of their step; ProxyCtrl on `proxy`.
//!
//! Memory: every event is kept until the process ends (a trace tool).

use std::ffi::{CStr, c_char};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use ferroccl_plugin_api::abi;
use ferroccl_plugin_api::export::profiler::event_of;
use ferroccl_plugin_api::sdk::{NetResult, Profiler, ProfilerInit};
use serde_json::{Value, json};

/// The default activation mask: every type but ProxyCtrl.
pub const DEFAULT_MASK: i32 = 0x7fff & !(abi::ncclProfileProxyCtrl as i32);

/// One recorded event.
#[derive(Debug, Clone)]
pub struct Rec {
    /// `ncclProfile*` bit.
    pub ty: u64,
    /// Display name.
    pub name: String,
    /// Rank (trace pid).
    pub rank: i32,
    /// Track name.
    pub track: String,
    /// Start, µs since the epoch.
    pub start: f64,
    /// Stop, µs (None while running).
    pub stop: Option<f64>,
    /// Parent record.
    pub parent: Option<usize>,
    /// The Group record of a Coll/P2p (`parentGroup`, v5+).
    pub group: Option<usize>,
    /// Arguments.
    pub args: serde_json::Map<String, Value>,
    /// State records: (state, µs, transfer size).
    pub states: Vec<(i32, f64, Option<u64>)>,
}

#[derive(Debug, Default)]
struct Store {
    recs: Vec<Rec>,
    /// Live contexts in this process.
    contexts: usize,
}

fn store() -> &'static Mutex<Store> {
    static S: OnceLock<Mutex<Store>> = OnceLock::new();
    S.get_or_init(Default::default)
}

fn now_us() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

/// `NCCL_PROFILER_TRACE_FILE` with `%h`/`%p` expanded.
pub fn trace_path() -> PathBuf {
    let pat = std::env::var("NCCL_PROFILER_TRACE_FILE").unwrap_or_else(|_| "ferroccl-trace-%h-%p.json".into());
    let mut host = [0u8; 256];
    // SAFETY: `host` is writable for its length; gethostname NUL-terminates on success.
    let host = if unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0 {
        let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
        String::from_utf8_lossy(&host[..end]).into_owned()
    } else {
        "host".into()
    };
    PathBuf::from(pat.replace("%h", &host).replace("%p", &std::process::id().to_string()))
}

/// Reads a C string from a descriptor (NULL → empty).
fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: NCCL's descriptors hold NUL-terminated strings valid for the call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn state_name(s: i32) -> &'static str {
    match s {
        8 => "SendGPUWait",
        9 => "SendWait",
        10 => "RecvWait",
        11 => "RecvFlushWait",
        12 => "RecvGPUWait",
        13 => "Idle",
        14 => "Active",
        15 => "Sleep",
        16 => "Wakeup",
        17 => "Append",
        18 => "AppendEnd",
        19 => "InProgress",
        20 => "SendPeerWait",
        21 => "NetPluginUpdate",
        22 => "KernelChStop",
        23 => "GroupStartApiStop",
        24 => "GroupEndApiStart",
        _ => "State",
    }
}

/// The trace profiler of one communicator.
#[derive(Debug)]
pub struct TraceProfiler {
    rank: i32,
}

impl TraceProfiler {
    /// Builds the record of an event from its descriptor (`parent` resolved by the SDK).
    fn rec_of(&self, d: &abi::ncclProfilerEventDescr_v6_t, parent: Option<usize>) -> Rec {
        let st = store().lock().unwrap_or_else(|e| e.into_inner());
        let prec = parent.and_then(|p| st.recs.get(p));
        let mut args = serde_json::Map::new();
        let rank = if d.rank != 0 { d.rank } else { self.rank };
        let mut group = None;
        let (name, track) = match d.r#type {
            abi::ncclProfileGroupApi => {
                // SAFETY: the type selects the union member.
                let g = unsafe { d.u.groupApi };
                args.insert("groupDepth".into(), json!(g.groupDepth));
                ("GroupApi".to_string(), "API".to_string())
            }
            abi::ncclProfileCollApi => {
                // SAFETY: as above.
                let c = unsafe { d.u.collApi };
                args.insert("count".into(), json!(c.count));
                args.insert("datatype".into(), json!(cstr(c.datatype)));
                args.insert("root".into(), json!(c.root));
                (format!("{} (API)", cstr(c.func)), "API".to_string())
            }
            abi::ncclProfileP2pApi => {
                // SAFETY: as above.
                let c = unsafe { d.u.p2pApi };
                args.insert("count".into(), json!(c.count));
                args.insert("datatype".into(), json!(cstr(c.datatype)));
                (format!("{} (API)", cstr(c.func)), "API".to_string())
            }
            abi::ncclProfileGroup => ("Group".to_string(), "ops".to_string()),
            abi::ncclProfileColl => {
                // SAFETY: as above.
                let c = unsafe { d.u.coll };
                // SAFETY: `parentGroup` is NULL or one of this profiler's event handles.
                group = unsafe { event_of::<TraceProfiler>(c.parentGroup) }.copied();
                args.insert("seqNumber".into(), json!(c.seqNumber));
                args.insert("count".into(), json!(c.count));
                args.insert("datatype".into(), json!(cstr(c.datatype)));
                args.insert("root".into(), json!(c.root));
                args.insert("algorithm".into(), json!(cstr(c.algo)));
                args.insert("protocol".into(), json!(cstr(c.proto)));
                args.insert("nChannels".into(), json!(c.nChannels));
                (cstr(c.func), "ops".to_string())
            }
            abi::ncclProfileP2p => {
                // SAFETY: as above.
                let c = unsafe { d.u.p2p };
                // SAFETY: as above.
                group = unsafe { event_of::<TraceProfiler>(c.parentGroup) }.copied();
                args.insert("count".into(), json!(c.count));
                args.insert("datatype".into(), json!(cstr(c.datatype)));
                args.insert("peer".into(), json!(c.peer));
                (format!("{} peer {}", cstr(c.func), c.peer), "ops".to_string())
            }
            abi::ncclProfileProxyOp => {
                // SAFETY: as above.
                let o = unsafe { d.u.proxyOp };
                args.insert("channel".into(), json!(o.channelId));
                args.insert("peer".into(), json!(o.peer));
                args.insert("nSteps".into(), json!(o.nSteps));
                args.insert("chunkSize".into(), json!(o.chunkSize));
                if let Some(p) = prec {
                    args.insert("of".into(), json!(p.name));
                    if let Some(s) = p.args.get("seqNumber") {
                        args.insert("seqNumber".into(), s.clone());
                    }
                }
                let track = if o.isSend != 0 {
                    format!("ch {} send→{}", o.channelId, o.peer)
                } else {
                    format!("ch {} recv←{}", o.channelId, o.peer)
                };
                (
                    if o.isSend != 0 { "ProxyOp send" } else { "ProxyOp recv" }.to_string(),
                    track,
                )
            }
            abi::ncclProfileProxyStep => {
                // SAFETY: as above.
                let s = unsafe { d.u.proxyStep };
                args.insert("step".into(), json!(s.step));
                let base = prec.map_or_else(|| "steps".to_string(), |p| p.track.clone());
                (
                    format!("step {}", s.step),
                    format!("{base} slot {}", s.step.rem_euclid(8)),
                )
            }
            abi::ncclProfileNetPlugin => {
                // SAFETY: as above.
                let n = unsafe { d.u.netPlugin };
                args.insert("pluginId".into(), json!(format!("0x{:x}", n.id)));
                let track = prec.map_or_else(|| "net".to_string(), |p| format!("{} net", p.track));
                ("net".to_string(), track)
            }
            abi::ncclProfileProxyCtrl => ("ProxyCtrl".to_string(), "proxy".to_string()),
            abi::ncclProfileKernelCh => {
                // SAFETY: as above.
                let k = unsafe { d.u.kernelCh };
                ("KernelCh".to_string(), format!("kernel ch {}", k.channelId))
            }
            t => (format!("event 0x{t:x}"), "other".to_string()),
        };
        Rec {
            ty: d.r#type,
            name,
            rank,
            track,
            start: now_us(),
            stop: None,
            parent,
            group,
            args,
            states: Vec::new(),
        }
    }
}

impl Profiler for TraceProfiler {
    const NAME: &'static CStr = c"FerrocclTrace";
    type Event = usize;
    const RETAIN_STOPPED: usize = 1 << 16;

    fn init(info: ProfilerInit<'_>, activation_mask: &mut i32) -> NetResult<Self> {
        *activation_mask = std::env::var("NCCL_PROFILE_EVENT_MASK")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_MASK);
        store().lock().unwrap_or_else(|e| e.into_inner()).contexts += 1;
        Ok(TraceProfiler { rank: info.rank })
    }

    fn start_event(&self, descr: &abi::ncclProfilerEventDescr_v6_t) -> NetResult<Option<usize>> {
        self.start_child(descr, None)
    }

    fn start_child(
        &self,
        descr: &abi::ncclProfilerEventDescr_v6_t,
        parent: Option<&usize>,
    ) -> NetResult<Option<usize>> {
        let rec = self.rec_of(descr, parent.copied());
        let mut st = store().lock().unwrap_or_else(|e| e.into_inner());
        st.recs.push(rec);
        Ok(Some(st.recs.len() - 1))
    }

    fn retain(&self, event: &usize) -> Option<usize> {
        Some(*event)
    }

    fn record_event_state(
        &self,
        event: &mut usize,
        state: abi::ncclProfilerEventState_t,
        args: Option<&abi::ncclProfilerEventStateArgs_v6_t>,
    ) -> NetResult<()> {
        let t = now_us();
        let mut st = store().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = st.recs.get_mut(*event) {
            let size = match (r.ty, args) {
                // SAFETY: ProxyStep states carry `proxyStep.transSize`.
                (abi::ncclProfileProxyStep, Some(a)) => Some(unsafe { a.proxyStep.transSize } as u64),
                (abi::ncclProfileProxyCtrl, Some(a)) if state == 18 => {
                    // SAFETY: `ProxyCtrlAppendEnd` carries `proxyCtrl.appendedProxyOps`.
                    let n = unsafe { a.proxyCtrl.appendedProxyOps };
                    Some(n.max(0) as u64)
                }
                _ => None,
            };
            r.states.push((state, t, size));
        }
        Ok(())
    }

    fn stop_event(&self, event: usize) -> NetResult<()> {
        let t = now_us();
        let mut st = store().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = st.recs.get_mut(event) {
            r.stop = Some(t);
        }
        Ok(())
    }

    fn finalize(self) -> NetResult<()> {
        let path = trace_path();
        let json = {
            let mut st = store().lock().unwrap_or_else(|e| e.into_inner());
            st.contexts = st.contexts.saturating_sub(1);
            to_chrome(&st.recs)
        };
        if let Err(e) = std::fs::write(&path, json.to_string()) {
            ferroccl_plugin_api::net_warn!("PROFILER/Trace: cannot write {}: {e}", path.display());
        } else {
            ferroccl_plugin_api::net_info!(0x1, "PROFILER/Trace: wrote {}", path.display());
        }
        Ok(())
    }
}

/// The Chrome trace (`{"traceEvents": [...]}`) of `recs`: complete (`X`) events
/// with parents stretched over their descendants, state intervals of
/// ProxySteps as nested events, and track/process names as metadata.
pub fn to_chrome(recs: &[Rec]) -> Value {
    // End of each event = max(own stop, descendants' ends); children come after
    // their parents, so one reverse pass suffices.
    let mut end: Vec<f64> = recs.iter().map(|r| r.stop.unwrap_or(r.start)).collect();
    for i in (0..recs.len()).rev() {
        if let Some(p) = recs[i].parent
            && p < i
            && matches!(
                recs[p].ty,
                abi::ncclProfileColl | abi::ncclProfileP2p | abi::ncclProfileGroup
            )
        {
            end[p] = end[p].max(end[i]);
        }
        if let Some(g) = recs[i].group
            && g < i
        {
            end[g] = end[g].max(end[i]);
        }
    }
    let mut tids: Vec<(i32, String)> = Vec::new();
    let mut tid_of = |rank: i32, track: &str| -> usize {
        match tids.iter().position(|(r, t)| *r == rank && t == track) {
            Some(i) => i,
            None => {
                tids.push((rank, track.to_string()));
                tids.len() - 1
            }
        }
    };
    let mut out = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        let tid = tid_of(r.rank, &r.track);
        let mut args = r.args.clone();
        args.insert("id".into(), json!(i));
        if let Some(p) = r.parent {
            args.insert("parent".into(), json!(p));
        }
        if let Some(g) = r.group {
            args.insert("group".into(), json!(g));
        }
        if r.stop.is_none() {
            args.insert("notStopped".into(), json!(true));
        }
        if let Some((_, _, Some(n))) = r.states.iter().find(|s| s.2.is_some()) {
            args.insert("transSize".into(), json!(n));
        }
        out.push(json!({
            "name": r.name, "cat": cat(r.ty), "ph": "X", "pid": r.rank, "tid": tid,
            "ts": r.start, "dur": (end[i] - r.start).max(0.0), "args": args,
        }));
        if r.ty == abi::ncclProfileProxyStep {
            for (k, s) in r.states.iter().enumerate() {
                let until = r.states.get(k + 1).map_or(end[i], |n| n.1);
                out.push(json!({
                    "name": state_name(s.0), "cat": "state", "ph": "X", "pid": r.rank, "tid": tid,
                    "ts": s.1, "dur": (until - s.1).max(0.0),
                    "args": {"state": s.0, "transSize": s.2, "of": i},
                }));
            }
        }
    }
    let mut ranks: Vec<i32> = tids.iter().map(|t| t.0).collect();
    ranks.sort();
    ranks.dedup();
    for r in ranks {
        out.push(json!({"name": "process_name", "ph": "M", "pid": r, "args": {"name": format!("rank {r}")}}));
    }
    for (tid, (rank, name)) in tids.iter().enumerate() {
        out.push(json!({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}}));
        out.push(json!({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid, "args": {"sort_index": tid}}));
    }
    json!({"traceEvents": out, "displayTimeUnit": "ns"})
}

fn cat(ty: u64) -> &'static str {
    match ty {
        abi::ncclProfileGroupApi | abi::ncclProfileCollApi | abi::ncclProfileP2pApi => "api",
        abi::ncclProfileGroup => "group",
        abi::ncclProfileColl => "coll",
        abi::ncclProfileP2p => "p2p",
        abi::ncclProfileProxyOp => "proxyOp",
        abi::ncclProfileProxyStep => "proxyStep",
        abi::ncclProfileNetPlugin => "net",
        abi::ncclProfileProxyCtrl => "proxyCtrl",
        _ => "other",
    }
}

ferroccl_plugin_api::export_profiler_plugin!(TraceProfiler);
