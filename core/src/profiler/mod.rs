//! The profiler adapter: one [`Profiler`] drives any `ncclProfiler_v1_t` …
//! `ncclProfiler_v6_t` with NCCL 2.30.7's event model (`src/plugin/profiler.cc`,
//! `src/plugin/profiler/profiler_v1..v6.cc`; reference `docs/reference/nccl-graph-tuning.md` §6,
//! `docs/reference/nccl-plugin-abi.md` §3.2, §5.4).
//!
//! * **Loading**: `NCCL_PROFILER_PLUGIN` through [`crate::plugin::tuner_profiler`]
//!   (`none` ⇒ off; `libnccl-profiler.so` by default; fallback into the external
//!   net plugin's library; sticky per process), then `init` per communicator. A
//!   failing `init` is logged and the communicator runs without a profiler.
//! * **Activation mask**: one process-global `int` ([`EVENT_MASK`], NCCL's
//!   `ncclProfilerEventMask`) whose address every `init` receives; the plugin
//!   writes the event bits it wants (last writer wins) and may change them later.
//!   The host samples it once per API call (relaxed load) and, as NCCL, starts
//!   the ancestors of any requested type ([`wants`]).
//! * **Versions**: events and states a version does not know are dropped
//!   (`*eHandle` = NULL, nothing called); v1–v4 see Coll/P2p parented to the
//!   Group event; v1 receives enum codes instead of strings; v1–v3 receive their
//!   own state-argument union. Descriptors are zero-initialised for every version.
//! * **Cost when off**: the communicator holds `Option<Arc<Profiler>>`; with no
//!   profiler every emission point is one predictable branch on that option,
//!   and with an empty mask one more on a relaxed load.
//!
//! # Where the events come from (ferroccl has no GPU kernel)
//!
//! | event | emitted |
//! |---|---|
//! | GroupApi | first operation of an outermost group on this thread (or of a standalone call), stopped after the group's work was handed to the proxy threads (`group.rs`, `enqueue.rs`) |
//! | CollApi / P2pApi | around the argument check and queueing of one call |
//! | Group | by the proxy thread when it starts a work item (NCCL: `hostStreamPlanTask` after the kernel launch); stopped right after its children were posted |
//! | Coll / P2p | per operation of the work item, with the tuning decision; stopped right after the proxy ops were posted (zero host duration, as in NCCL: completion is inferred from the children) |
//! | ProxyOp | per (channel, peer, direction) NET connection an operation uses; `ProxyOpInProgress_v4` when its steps start; stopped when the work item is done |
//! | ProxyStep | per network transfer of a NET connection ([`crate::transport::net`]), with NCCL's states |
//! | NetPlugin | by v10+ net plugins through [`net_callback`], under the step whose `phandle` they were given |
//! | ProxyCtrl | the proxy thread sleeping/waking while idle, and appending a work item |
//! | KernelCh, KernelLaunch, Ce* | not emitted: there is no kernel and no copy engine; the host executor runs inside the proxy thread, so its time is the ProxyStep `SendGPUWait`/`RecvGPUWait` intervals |

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use ferroccl_kernels::DataType;
use ferroccl_plugin_api::abi::{self, ncclResult_t};

use crate::plugin::library::PluginLibrary;
use crate::plugin::tuner_profiler::AuxPlugin;

/// NCCL's process-global `ncclProfilerEventMask`: the address handed to every
/// profiler `init` as `eActivationMask` (`src/plugin/profiler.cc`).
pub static EVENT_MASK: AtomicI32 = AtomicI32::new(0);

/// Event type bits (`ncclProfile*`, `nccl_profiler.h`).
pub mod bits {
    use ferroccl_plugin_api::abi;
    /// `ncclProfileGroup`.
    pub const GROUP: u64 = abi::ncclProfileGroup;
    /// `ncclProfileColl`.
    pub const COLL: u64 = abi::ncclProfileColl;
    /// `ncclProfileP2p`.
    pub const P2P: u64 = abi::ncclProfileP2p;
    /// `ncclProfileProxyOp`.
    pub const PROXY_OP: u64 = abi::ncclProfileProxyOp;
    /// `ncclProfileProxyStep`.
    pub const PROXY_STEP: u64 = abi::ncclProfileProxyStep;
    /// `ncclProfileProxyCtrl`.
    pub const PROXY_CTRL: u64 = abi::ncclProfileProxyCtrl;
    /// `ncclProfileKernelCh`.
    pub const KERNEL_CH: u64 = abi::ncclProfileKernelCh;
    /// `ncclProfileNetPlugin`.
    pub const NET_PLUGIN: u64 = abi::ncclProfileNetPlugin;
    /// `ncclProfileGroupApi`.
    pub const GROUP_API: u64 = abi::ncclProfileGroupApi;
    /// `ncclProfileCollApi`.
    pub const COLL_API: u64 = abi::ncclProfileCollApi;
    /// `ncclProfileP2pApi`.
    pub const P2P_API: u64 = abi::ncclProfileP2pApi;
    /// `ncclProfileKernelLaunch`.
    pub const KERNEL_LAUNCH: u64 = abi::ncclProfileKernelLaunch;
    /// `ncclProfileCeColl | CeSync | CeBatch`.
    pub const CE: u64 = abi::ncclProfileCeColl | abi::ncclProfileCeSync | abi::ncclProfileCeBatch;
}

/// For each event type, the bits any of which makes NCCL start it (a requested
/// child type implicitly creates its ancestors; reference §6.1, §6.3 table).
pub mod wants {
    use super::bits::*;
    /// Under a ProxyStep.
    pub const NET_PLUGIN_: u64 = NET_PLUGIN;
    /// ProxyStep.
    pub const PROXY_STEP_: u64 = PROXY_STEP | NET_PLUGIN;
    /// ProxyOp.
    pub const PROXY_OP_: u64 = PROXY_OP | PROXY_STEP_;
    /// Coll.
    pub const COLL_: u64 = COLL | PROXY_OP_ | KERNEL_CH;
    /// P2p.
    pub const P2P_: u64 = P2P | PROXY_OP_ | KERNEL_CH;
    /// Group.
    pub const GROUP_: u64 = GROUP | COLL_ | P2P_;
    /// CollApi.
    pub const COLL_API_: u64 = COLL_API | COLL_ | CE;
    /// P2pApi.
    pub const P2P_API_: u64 = P2P_API | P2P_;
    /// GroupApi.
    pub const GROUP_API_: u64 = GROUP_API | COLL_API_ | P2P_API_ | GROUP_ | KERNEL_LAUNCH;
}

/// Event states (`ncclProfilerEventState_t`).
pub mod state {
    pub use abi::{
        ncclProfilerGroupEndApiStart as GROUP_END_API_START, ncclProfilerGroupStartApiStop as GROUP_START_API_STOP,
        ncclProfilerNetPluginUpdate as NET_PLUGIN_UPDATE, ncclProfilerProxyCtrlAppend as CTRL_APPEND,
        ncclProfilerProxyCtrlAppendEnd as CTRL_APPEND_END, ncclProfilerProxyCtrlSleep as CTRL_SLEEP,
        ncclProfilerProxyCtrlWakeup as CTRL_WAKEUP, ncclProfilerProxyOpInProgress_v4 as OP_IN_PROGRESS,
        ncclProfilerProxyStepRecvFlushWait as RECV_FLUSH_WAIT, ncclProfilerProxyStepRecvGPUWait as RECV_GPU_WAIT,
        ncclProfilerProxyStepRecvWait as RECV_WAIT, ncclProfilerProxyStepSendGPUWait as SEND_GPU_WAIT,
        ncclProfilerProxyStepSendPeerWait_v4 as SEND_PEER_WAIT, ncclProfilerProxyStepSendWait as SEND_WAIT,
    };
    use ferroccl_plugin_api::abi;
}

/// The current activation mask (relaxed load of [`EVENT_MASK`]).
#[inline]
pub fn mask() -> u64 {
    EVENT_MASK.load(Ordering::Relaxed) as u32 as u64
}

/// A profiler's event handle (`void* eHandle`); NULL = no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventHandle(pub *mut c_void);

// SAFETY: an opaque token the plugin gave; NCCL hands event handles between its
// user and proxy threads, and profilers must accept calls from any thread.
unsafe impl Send for EventHandle {}
// SAFETY: as above.
unsafe impl Sync for EventHandle {}

impl EventHandle {
    /// No event.
    pub const NULL: EventHandle = EventHandle(null_mut());
    /// Whether this is no event.
    pub fn is_null(self) -> bool {
        self.0.is_null()
    }
}

impl Default for EventHandle {
    fn default() -> Self {
        EventHandle::NULL
    }
}

/// `ncclFunc_t` of an operation (v1 descriptors).
fn func_code(name: &CStr) -> u8 {
    match name.to_bytes() {
        b"Broadcast" => 0,
        b"Reduce" => 1,
        b"AllGather" => 2,
        b"ReduceScatter" => 3,
        b"AllReduce" => 4,
        b"SendRecv" => 5,
        b"Send" => 6,
        b"Recv" => 7,
        _ => 0xff,
    }
}

/// NCCL's `ncclDatatypeToString` spelling (which maps `ncclUint8` to `Unknown`).
pub fn dtype_name(d: DataType) -> &'static CStr {
    match d {
        DataType::Int8 => c"ncclInt8",
        DataType::Uint8 => c"Unknown",
        DataType::Int32 => c"ncclInt32",
        DataType::Uint32 => c"ncclUint32",
        DataType::Int64 => c"ncclInt64",
        DataType::Uint64 => c"ncclUint64",
        DataType::Float16 => c"ncclFloat16",
        DataType::Float32 => c"ncclFloat32",
        DataType::Float64 => c"ncclFloat64",
        DataType::Bfloat16 => c"ncclBfloat16",
    }
}

fn dtype_code(name: &CStr) -> u8 {
    DataType::ALL
        .iter()
        .find(|d| dtype_name(**d) == name)
        .map_or(1, |d| *d as u8)
}

fn code_of(table: &[&CStr], name: &CStr) -> u8 {
    table.iter().position(|n| *n == name).map_or(0xff, |i| i as u8)
}
const ALGOS: [&CStr; 7] = [
    c"TREE",
    c"RING",
    c"COLLNET_DIRECT",
    c"COLLNET_CHAIN",
    c"NVLS",
    c"NVLS_TREE",
    c"PAT",
];
const PROTOS: [&CStr; 3] = [c"LL", c"LL128", c"SIMPLE"];

/// One event to start, in the newest (v6) terms; converted per version.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    /// `ncclProfileGroupApi`: `groupDepth` 1 for a standalone call, ≥ 2 inside `ncclGroupStart`.
    GroupApi {
        /// `groupApi.groupDepth`.
        depth: i32,
    },
    /// `ncclProfileCollApi` (the user's count and datatype).
    CollApi {
        /// `ncclFuncToString` of the call.
        func: &'static CStr,
        /// Elements.
        count: usize,
        /// `ncclDatatypeToString`.
        dtype: &'static CStr,
        /// Root rank (-1 where the call has none... NCCL passes the task's root, 0).
        root: i32,
    },
    /// `ncclProfileP2pApi`.
    P2pApi {
        /// `Send` / `Recv`.
        func: &'static CStr,
        /// Elements.
        count: usize,
        /// `ncclDatatypeToString`.
        dtype: &'static CStr,
    },
    /// `ncclProfileGroup` (one per work item handed to the proxy thread).
    Group,
    /// `ncclProfileColl`.
    Coll {
        /// `comm->seqNumber[func]` before the increment.
        seq: u64,
        /// `ncclFuncToString`.
        func: &'static CStr,
        /// Send buffer.
        send: *const c_void,
        /// Receive buffer.
        recv: *mut c_void,
        /// Elements (bytes and `ncclInt8` for AllGather/Broadcast, as NCCL's task).
        count: usize,
        /// Root (0 where none).
        root: i32,
        /// `ncclDatatypeToString`.
        dtype: &'static CStr,
        /// Channels used.
        nchannels: u8,
        /// Warps per block (0: no kernel here).
        nwarps: u8,
        /// `ncclAlgoToString`.
        algo: &'static CStr,
        /// `ncclProtoToString`.
        proto: &'static CStr,
        /// The Group event (v5+ `coll.parentGroup`; the parent for v1–v4).
        parent_group: EventHandle,
    },
    /// `ncclProfileP2p`.
    P2p {
        /// `Send` / `Recv`.
        func: &'static CStr,
        /// User buffer.
        buff: *mut c_void,
        /// `ncclDatatypeToString`.
        dtype: &'static CStr,
        /// Elements.
        count: usize,
        /// Peer rank.
        peer: i32,
        /// Channels used.
        nchannels: u8,
        /// The Group event.
        parent_group: EventHandle,
    },
    /// `ncclProfileProxyOp`.
    ProxyOp {
        /// Channel.
        channel: u8,
        /// Peer rank.
        peer: i32,
        /// Network transfers (`ceil(nsteps / sliceSteps)`).
        nsteps: i32,
        /// Bytes per transfer (`chunkSize × sliceSteps`).
        chunk: i32,
        /// Send side.
        is_send: bool,
    },
    /// `ncclProfileProxyStep`.
    ProxyStep {
        /// Step index within the op.
        step: i32,
    },
    /// `ncclProfileProxyCtrl`.
    ProxyCtrl,
    /// `ncclProfileNetPlugin` (from a net plugin's callback).
    NetPlugin {
        /// `pluginId` (type << 16 | descriptor version).
        id: i64,
        /// `extData`.
        data: *mut c_void,
    },
}

impl Event {
    /// The event's type bit.
    pub fn bit(&self) -> u64 {
        match self {
            Event::GroupApi { .. } => bits::GROUP_API,
            Event::CollApi { .. } => bits::COLL_API,
            Event::P2pApi { .. } => bits::P2P_API,
            Event::Group => bits::GROUP,
            Event::Coll { .. } => bits::COLL,
            Event::P2p { .. } => bits::P2P,
            Event::ProxyOp { .. } => bits::PROXY_OP,
            Event::ProxyStep { .. } => bits::PROXY_STEP,
            Event::ProxyCtrl => bits::PROXY_CTRL,
            Event::NetPlugin { .. } => bits::NET_PLUGIN,
        }
    }
}

/// Arguments of a state record (`ncclProfilerEventStateArgs_v*_t`).
#[derive(Debug, Clone, Copy)]
pub enum StateArgs {
    /// None (NULL is passed).
    None,
    /// `proxyStep.transSize` (v1–v3: `proxyOp.transSize`).
    TransSize(usize),
    /// `proxyCtrl.appendedProxyOps`.
    Appended(i32),
    /// `netPlugin.data`.
    NetData(*mut c_void),
}

#[derive(Clone, Copy)]
enum Table {
    V1(abi::ncclProfiler_v1_t),
    V2(abi::ncclProfiler_v2_t),
    V3(abi::ncclProfiler_v3_t),
    V4(abi::ncclProfiler_v4_t),
    V5(abi::ncclProfiler_v5_t),
    V6(abi::ncclProfiler_v6_t),
}

/// Event types each version knows.
fn known(version: u32) -> u64 {
    use bits::*;
    let v1 = GROUP | COLL | P2P | PROXY_OP | PROXY_STEP | PROXY_CTRL;
    match version {
        1 | 2 => v1,
        3 | 4 => v1 | KERNEL_CH | NET_PLUGIN,
        5 => v1 | KERNEL_CH | NET_PLUGIN | GROUP_API | COLL_API | P2P_API | KERNEL_LAUNCH,
        _ => u64::MAX,
    }
}

/// One communicator's initialised profiler plugin.
///
/// Aligned to 128 bytes so that, inside an `Arc`, its fields (read by every
/// event on the user and proxy threads) do not share a cache line (or its
/// adjacent-line prefetch pair) with the reference counts, which both threads
/// change per operation: a count's change would otherwise evict the vtable
/// from the other thread's cache.
#[repr(align(128))]
pub struct Profiler {
    lib: Arc<PluginLibrary>,
    table: Table,
    version: u32,
    name: String,
    ctx: *mut c_void,
    rank: c_int,
    pid: i32,
    known: u64,
}

// SAFETY: plugin function pointers and the plugin's context, which NCCL calls from
// its user and proxy threads alike (profilers must be thread-safe).
unsafe impl Send for Profiler {}
// SAFETY: as above; nothing in `Profiler` is mutated after `init`.
unsafe impl Sync for Profiler {}

impl std::fmt::Debug for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiler")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("rank", &self.rank)
            .finish()
    }
}

/// What the communicator tells the profiler's `init`.
#[derive(Debug, Clone)]
pub struct CommFacts {
    /// `commId` / `commHash`.
    pub comm_id: u64,
    /// `commName` (NULL when `None`, as NCCL without `config.commName`).
    pub comm_name: Option<std::ffi::CString>,
    /// Hosts.
    pub nnodes: i32,
    /// Ranks.
    pub nranks: i32,
    /// This rank.
    pub rank: i32,
}

macro_rules! each {
    ($t:expr, $v:ident => $e:expr) => {
        match $t {
            Table::V1($v) => $e,
            Table::V2($v) => $e,
            Table::V3($v) => $e,
            Table::V4($v) => $e,
            Table::V5($v) => $e,
            Table::V6($v) => $e,
        }
    };
}

/// The collective member of a v2–v6 descriptor (`$ty`) of an `Event::Coll`,
/// the fields every version has by the same names, plus the channel count
/// under the version's name (`$ch`: `nMaxChannels` before v4, `nChannels`
/// after) and, from v5 on, the parent Group (`pg: parentGroup`); any other
/// event gives a zeroed member.
macro_rules! coll_descr {
    ($ty:ty, $ev:expr, $ch:ident $(, pg: $pg:ident)?) => {{
        let mut c = <$ty>::zeroed();
        if let Event::Coll {
            seq,
            func,
            send,
            recv,
            count,
            root,
            dtype,
            nchannels,
            nwarps,
            algo,
            proto,
            parent_group,
        } = *$ev
        {
            c.seqNumber = seq;
            c.func = func.as_ptr();
            c.sendBuff = send;
            c.recvBuff = recv;
            c.count = count;
            c.root = root;
            c.datatype = dtype.as_ptr();
            c.$ch = nchannels;
            c.nWarps = nwarps;
            c.algo = algo.as_ptr();
            c.proto = proto.as_ptr();
            $(c.$pg = parent_group.0;)?
            let _ = parent_group;
        }
        c
    }};
}

/// The point-to-point member of a v2–v6 descriptor (`$ty`) of an
/// `Event::P2p`: the fields every version has, plus the channel count from
/// v4 on (`ch: nChannels`) and the parent Group from v5 on (`pg: parentGroup`).
macro_rules! p2p_descr {
    ($ty:ty, $ev:expr $(, ch: $ch:ident)? $(, pg: $pg:ident)?) => {{
        let mut c = <$ty>::zeroed();
        if let Event::P2p {
            func,
            buff,
            dtype,
            count,
            peer,
            nchannels,
            parent_group,
        } = *$ev
        {
            c.func = func.as_ptr();
            c.buff = buff;
            c.datatype = dtype.as_ptr();
            c.count = count;
            c.peer = peer;
            $(c.$ch = nchannels;)?
            $(c.$pg = parent_group.0;)?
            let _ = (nchannels, parent_group);
        }
        c
    }};
}

/// One version's event descriptor (`$d: $t`): the header every version has
/// (type, parent, rank), the version's own members (`$arms`, match arms on
/// the event), and the ProxyOp and ProxyStep members, alike in every version;
/// with `net`, the NetPlugin member (v3 on) too.
macro_rules! descr {
    ($d:ident: $t:ty = $self:ident, $parent:expr, $rank:expr, $ev:expr, $ty:expr, net; $($arms:tt)*) => {{
        let mut $d = <$t>::zeroed();
        $d.r#type = $ty;
        $d.parentObj = $parent;
        $d.rank = $rank;
        match *$ev {
            $($arms)*
            Event::ProxyOp { .. } => $d.u.proxyOp = $self.proxy_op($ev),
            Event::ProxyStep { step } => $d.u.proxyStep.step = step,
            Event::NetPlugin { id, data } => {
                $d.u.netPlugin.id = id;
                $d.u.netPlugin.data = data;
            }
            #[allow(unreachable_patterns)]
            _ => {}
        }
        $d
    }};
    ($d:ident: $t:ty = $self:ident, $parent:expr, $rank:expr, $ev:expr, $ty:expr; $($arms:tt)*) => {{
        let mut $d = <$t>::zeroed();
        $d.r#type = $ty;
        $d.parentObj = $parent;
        $d.rank = $rank;
        match *$ev {
            $($arms)*
            Event::ProxyOp { .. } => $d.u.proxyOp = $self.proxy_op($ev),
            Event::ProxyStep { step } => $d.u.proxyStep.step = step,
            _ => {}
        }
        $d
    }};
}

impl Profiler {
    /// Initialises the loaded profiler `p` for one communicator (`init` with the
    /// version's arguments and the address of [`EVENT_MASK`]), and logs NCCL's
    /// `Profiler event mask` line.
    ///
    /// Errors: a text naming the plugin, version and result when `init` fails or a
    /// required slot is NULL (the caller logs it and runs without a profiler).
    pub fn init(p: &AuxPlugin, facts: &CommFacts) -> Result<Profiler, String> {
        // SAFETY: the loader found `vtable()` as `ncclProfiler_v<version>`.
        unsafe { Profiler::from_raw(p.library().clone(), p.vtable(), p.version, &p.name, facts) }
    }

    /// [`Profiler::init`] from a raw vtable.
    ///
    /// # Safety
    /// `sym` must point to a readable `ncclProfiler_v<version>_t` inside `lib`.
    pub unsafe fn from_raw(
        lib: Arc<PluginLibrary>,
        sym: *const c_void,
        version: u32,
        name: &str,
        facts: &CommFacts,
    ) -> Result<Profiler, String> {
        // SAFETY: per the caller; unaligned read since nothing promises alignment.
        let table = unsafe {
            match version {
                1 => Table::V1(std::ptr::read_unaligned(sym.cast())),
                2 => Table::V2(std::ptr::read_unaligned(sym.cast())),
                3 => Table::V3(std::ptr::read_unaligned(sym.cast())),
                4 => Table::V4(std::ptr::read_unaligned(sym.cast())),
                5 => Table::V5(std::ptr::read_unaligned(sym.cast())),
                6 => Table::V6(std::ptr::read_unaligned(sym.cast())),
                v => return Err(format!("ncclProfiler v{v} is not a known version (1 ..= 6)")),
            }
        };
        let complete = each!(&table, t => t.init.is_some() && t.startEvent.is_some() && t.stopEvent.is_some()
            && t.recordEventState.is_some() && t.finalize.is_some());
        if !complete {
            return Err(format!(
                "profiler '{name}' (ncclProfiler v{version}) has a NULL function pointer"
            ));
        }
        lib.pin();
        let mut ctx: *mut c_void = null_mut();
        let mask_ptr = EVENT_MASK.as_ptr();
        let cname: *const c_char = facts.comm_name.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let logger = Some(crate::plugin::logger::nccl_logger());
        let (nn, nr, r, id) = (facts.nnodes, facts.nranks, facts.rank, facts.comm_id);
        // SAFETY: per-version `init` signatures (reference §3.2); every pointer
        // outlives the call; the slot was checked non-NULL above.
        let res = unsafe {
            match &table {
                Table::V1(t) => (t.init.unwrap_unchecked())(&mut ctx, mask_ptr),
                Table::V2(t) => (t.init.unwrap_unchecked())(&mut ctx, mask_ptr),
                Table::V3(t) => (t.init.unwrap_unchecked())(&mut ctx, mask_ptr),
                Table::V4(t) => (t.init.unwrap_unchecked())(&mut ctx, mask_ptr, cname, id, nn, nr, r, logger),
                Table::V5(t) => (t.init.unwrap_unchecked())(&mut ctx, id, mask_ptr, cname, nn, nr, r, logger),
                Table::V6(t) => (t.init.unwrap_unchecked())(&mut ctx, id, mask_ptr, cname, nn, nr, r, logger),
            }
        };
        if res != ncclResult_t::ncclSuccess {
            return Err(format!(
                "profiler '{name}' (ncclProfiler v{version}) init returned {res:?} ({})",
                res.0
            ));
        }
        let known = known(version);
        let _ = NET_FNS.set(SyncTable(table, version));
        let m = mask();
        crate::log::nccl_info!(
            INIT,
            "Profiler event mask: 0x{m:x} ({m}) - Enabled: {} ('{name}', ncclProfiler v{version})",
            enabled_names(m & known)
        );
        Ok(Profiler {
            lib,
            table,
            version,
            name: name.to_owned(),
            ctx,
            rank: facts.rank,
            pid: std::process::id() as i32,
            known,
        })
    }

    /// The plugin's API version (1 ..= 6).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The vtable's `name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The activation mask this profiler acts on: [`EVENT_MASK`] less the bits
    /// its version does not know (ancestors of known types are still started).
    #[inline]
    pub fn mask(&self) -> u64 {
        mask()
    }

    /// Starts `ev` under `parent`; returns the plugin's handle (NULL when the
    /// version does not know the type, or the plugin returned NULL or an error).
    pub fn start(&self, parent: EventHandle, ev: &Event) -> EventHandle {
        if ev.bit() & self.known == 0 {
            return EventHandle::NULL;
        }
        let mut h: *mut c_void = null_mut();
        let v = self.version;
        // v1–v4 have no API events: Coll/P2p hang under the Group event.
        let parent = match ev {
            Event::Coll { parent_group, .. } | Event::P2p { parent_group, .. } if v <= 4 => *parent_group,
            _ => parent,
        };
        let rank = match ev {
            Event::Coll { .. }
            | Event::P2p { .. }
            | Event::ProxyOp { .. }
            | Event::ProxyStep { .. }
            | Event::NetPlugin { .. } => self.rank,
            _ => 0,
        };
        // SAFETY: the descriptor lives across the call; the slots were checked at init;
        // `h` is the out-parameter NCCL passes.
        let r = unsafe {
            match &self.table {
                Table::V1(t) => {
                    let mut d = self.descr_v1(parent.0, rank, ev);
                    (t.startEvent.unwrap_unchecked())(self.ctx, &mut h, &mut d)
                }
                Table::V2(t) => {
                    let mut d = self.descr_v2(parent.0, rank, ev);
                    (t.startEvent.unwrap_unchecked())(self.ctx, &mut h, &mut d)
                }
                Table::V3(t) => {
                    let mut d = self.descr_v3(parent.0, rank, ev);
                    (t.startEvent.unwrap_unchecked())(self.ctx, &mut h, &mut d)
                }
                Table::V4(t) => {
                    let mut d = self.descr_v4(parent.0, rank, ev);
                    (t.startEvent.unwrap_unchecked())(self.ctx, &mut h, &mut d)
                }
                Table::V5(t) => {
                    let mut d: abi::ncclProfilerEventDescr_v5_t =
                        std::mem::transmute(self.descr_v6(parent.0, rank, ev));
                    (t.startEvent.unwrap_unchecked())(self.ctx, &mut h, &mut d)
                }
                Table::V6(t) => {
                    let mut d = self.descr_v6(parent.0, rank, ev);
                    (t.startEvent.unwrap_unchecked())(self.ctx, &mut h, &mut d)
                }
            }
        };
        if r != ncclResult_t::ncclSuccess {
            tracing::debug!(target: "ferroccl::profiler", "startEvent returned {}", r.0);
            return EventHandle::NULL;
        }
        EventHandle(h)
    }

    /// Stops event `h` (nothing for NULL).
    pub fn stop(&self, h: EventHandle) {
        if h.is_null() {
            return;
        }
        // SAFETY: `h` came from this plugin's startEvent; the slot was checked.
        let _ = unsafe { each!(&self.table, t => (t.stopEvent.unwrap_unchecked())(h.0)) };
    }

    /// Records state `st` of event `h` (nothing for NULL, or for a state the
    /// version does not know).
    pub fn record(&self, h: EventHandle, st: i32, args: StateArgs) {
        record_in(&self.table, self.version, h, st, args)
    }

    fn descr_v6(&self, parent: *mut c_void, rank: c_int, ev: &Event) -> abi::ncclProfilerEventDescr_v6_t {
        descr!(d: abi::ncclProfilerEventDescr_v6_t = self, parent, rank, ev, ev.bit(), net;
            Event::GroupApi { depth } => {
                d.u.groupApi.graphCaptured = false;
                d.u.groupApi.groupDepth = depth;
            }
            Event::CollApi {
                func,
                count,
                dtype,
                root,
            } => {
                let mut c = abi::ncclProfilerCollApiDescr_v5_t::zeroed();
                c.func = func.as_ptr();
                c.count = count;
                c.datatype = dtype.as_ptr();
                c.root = root;
                d.u.collApi = c;
            }
            Event::P2pApi { func, count, dtype } => {
                let mut c = abi::ncclProfilerP2pApiDescr_v5_t::zeroed();
                c.func = func.as_ptr();
                c.count = count;
                c.datatype = dtype.as_ptr();
                d.u.p2pApi = c;
            }
            Event::Group | Event::ProxyCtrl => {}
            Event::Coll { .. } => d.u.coll = coll_descr!(abi::ncclProfilerCollDescr_v5_t, ev, nChannels, pg: parentGroup),
            Event::P2p { .. } => d.u.p2p = p2p_descr!(abi::ncclProfilerP2pDescr_v5_t, ev, ch: nChannels, pg: parentGroup),
        )
    }

    fn proxy_op(&self, ev: &Event) -> abi::ncclProfilerProxyOpDescr_v1_t {
        let mut o = abi::ncclProfilerProxyOpDescr_v1_t::zeroed();
        if let Event::ProxyOp {
            channel,
            peer,
            nsteps,
            chunk,
            is_send,
        } = *ev
        {
            o.pid = self.pid;
            o.channelId = channel;
            o.peer = peer;
            o.nSteps = nsteps;
            o.chunkSize = chunk;
            o.isSend = is_send as c_int;
        }
        o
    }

    fn descr_v4(&self, parent: *mut c_void, rank: c_int, ev: &Event) -> abi::ncclProfilerEventDescr_v4_t {
        descr!(d: abi::ncclProfilerEventDescr_v4_t = self, parent, rank, ev, ev.bit() as u8, net;
            Event::Coll { .. } => d.u.coll = coll_descr!(abi::ncclProfilerCollDescr_v4_t, ev, nChannels),
            Event::P2p { .. } => d.u.p2p = p2p_descr!(abi::ncclProfilerP2pDescr_v4_t, ev, ch: nChannels),
        )
    }

    fn descr_v3(&self, parent: *mut c_void, rank: c_int, ev: &Event) -> abi::ncclProfilerEventDescr_v3_t {
        descr!(d: abi::ncclProfilerEventDescr_v3_t = self, parent, rank, ev, ev.bit() as u8, net;
            Event::Coll { .. } => d.u.coll = coll_descr!(abi::ncclProfilerCollDescr_v3_t, ev, nMaxChannels),
            Event::P2p { .. } => d.u.p2p = p2p_descr!(abi::ncclProfilerP2pDescr_v2_t, ev),
        )
    }

    fn descr_v2(&self, parent: *mut c_void, rank: c_int, ev: &Event) -> abi::ncclProfilerEventDescr_v2_t {
        descr!(d: abi::ncclProfilerEventDescr_v2_t = self, parent, rank, ev, ev.bit() as u8;
            Event::Coll { .. } => d.u.coll = coll_descr!(abi::ncclProfilerCollDescr_v2_t, ev, nMaxChannels),
            Event::P2p { .. } => d.u.p2p = p2p_descr!(abi::ncclProfilerP2pDescr_v2_t, ev),
        )
    }

    /// v1 carries codes (`ncclFunc_t`, `ncclDataType_t`, algorithm and
    /// protocol ids) where later versions carry names.
    fn descr_v1(&self, parent: *mut c_void, rank: c_int, ev: &Event) -> abi::ncclProfilerEventDescr_v1_t {
        descr!(d: abi::ncclProfilerEventDescr_v1_t = self, parent, rank, ev, ev.bit() as u8;
            Event::Coll {
                seq,
                func,
                send,
                recv,
                count,
                root,
                dtype,
                nchannels,
                nwarps,
                algo,
                proto,
                ..
            } => {
                let mut c = abi::ncclProfilerCollDescr_v1_t::zeroed();
                c.seqNumber = seq;
                c.func = func_code(func);
                c.sendBuff = send;
                c.recvBuff = recv;
                c.count = count;
                c.root = root;
                c.datatype = dtype_code(dtype);
                c.nMaxChannels = nchannels;
                c.nWarps = nwarps;
                c.algo = code_of(&ALGOS, algo);
                c.proto = code_of(&PROTOS, proto);
                d.u.coll = c;
            }
            Event::P2p {
                func,
                buff,
                dtype,
                count,
                peer,
                ..
            } => {
                let mut c = abi::ncclProfilerP2pDescr_v1_t::zeroed();
                c.func = func_code(func);
                c.buff = buff;
                c.datatype = dtype_code(dtype);
                c.count = count;
                c.peer = peer;
                d.u.p2p = c;
            }
        )
    }
}

/// `recordEventState` through `table` of version `v` (see [`Profiler::record`]).
fn record_in(table: &Table, v: u32, h: EventHandle, st: i32, args: StateArgs) {
    if h.is_null() {
        return;
    }
    // v1–v3 know neither the _v4 states nor KernelChStop / NetPluginUpdate;
    // v1–v5 know no CE states; v1–v4 no group-API states.
    if (v <= 3 && (19..=22).contains(&st)) || (v <= 5 && st >= 25) || (v <= 4 && (23..=24).contains(&st)) {
        return;
    }
    let r = if v <= 3 {
        let mut a = abi::ncclProfilerEventStateArgs_v1_t::zeroed();
        match args {
            StateArgs::TransSize(n) => a.proxyOp.transSize = n,
            StateArgs::Appended(n) => a.proxyCtrl.appendedProxyOps = n,
            _ => {}
        }
        let p: *mut _ = if matches!(args, StateArgs::None) {
            null_mut()
        } else {
            &mut a
        };
        // SAFETY: `p` is NULL or a live union of the version's type.
        unsafe {
            match table {
                Table::V1(t) => (t.recordEventState.unwrap_unchecked())(h.0, st, p),
                Table::V2(t) => (t.recordEventState.unwrap_unchecked())(h.0, st, p),
                Table::V3(t) => (t.recordEventState.unwrap_unchecked())(h.0, st, p),
                _ => unreachable!("version checked"),
            }
        }
    } else {
        let mut a = abi::ncclProfilerEventStateArgs_v4_t::zeroed();
        match args {
            StateArgs::TransSize(n) => a.proxyStep.transSize = n,
            StateArgs::Appended(n) => a.proxyCtrl.appendedProxyOps = n,
            StateArgs::NetData(d) => a.netPlugin.data = d,
            StateArgs::None => {}
        }
        let p: *mut _ = if matches!(args, StateArgs::None) {
            null_mut()
        } else {
            &mut a
        };
        // SAFETY: as above (v4–v6 share the union type).
        unsafe {
            match table {
                Table::V4(t) => (t.recordEventState.unwrap_unchecked())(h.0, st, p),
                Table::V5(t) => (t.recordEventState.unwrap_unchecked())(h.0, st, p),
                Table::V6(t) => (t.recordEventState.unwrap_unchecked())(h.0, st, p),
                _ => unreachable!("version checked"),
            }
        }
    };
    let _ = r;
}

/// The profiler's vtable for the net-plugin callback's Stop/Update, which carry
/// no step handle: NCCL's profiler plugin is process-wide (§5.4), and these
/// slots need no context. Set by the first successful `init`; the library is
/// pinned, so the pointers stay valid.
struct SyncTable(Table, u32);
// SAFETY: function pointers and the vtable's name pointer, never mutated.
unsafe impl Send for SyncTable {}
// SAFETY: as above.
unsafe impl Sync for SyncTable {}
static NET_FNS: std::sync::OnceLock<SyncTable> = std::sync::OnceLock::new();

impl Drop for Profiler {
    /// `finalize(context)` once per communicator; the library stays loaded (pinned).
    fn drop(&mut self) {
        // SAFETY: `ctx` came from this plugin's init; finalize is called exactly once.
        let _ = unsafe { each!(&self.table, t => (t.finalize.unwrap_unchecked())(self.ctx)) };
        let _ = &self.lib;
    }
}

/// Names of the event types in `m`, for the init log line.
fn enabled_names(m: u64) -> String {
    const NAMES: [(u64, &str); 12] = [
        (bits::GROUP, "Group"),
        (bits::COLL, "Coll"),
        (bits::P2P, "P2p"),
        (bits::PROXY_OP, "ProxyOp"),
        (bits::PROXY_STEP, "ProxyStep"),
        (bits::PROXY_CTRL, "ProxyCtrl"),
        (bits::KERNEL_CH, "KernelCh"),
        (bits::NET_PLUGIN, "NetPlugin"),
        (bits::GROUP_API, "GroupApi"),
        (bits::COLL_API, "CollApi"),
        (bits::P2P_API, "P2pApi"),
        (bits::KERNEL_LAUNCH, "KernelLaunch"),
    ];
    let v: Vec<&str> = NAMES.iter().filter(|(b, _)| m & b != 0).map(|(_, n)| *n).collect();
    if v.is_empty() { "none".into() } else { v.join(",") }
}

/// Loads (once per process) and initialises the profiler for one communicator:
/// `NCCL_PROFILER_PLUGIN` (§5.4), falling back into the external net plugin's
/// library. `None` when there is none, it is disabled, or its `init` failed
/// (logged; the communicator goes on without profiling, as NCCL).
pub fn load(
    opts: &crate::plugin::LoadOptions,
    external_net: Option<&std::path::Path>,
    facts: &CommFacts,
) -> Option<Arc<Profiler>> {
    let aux = crate::plugin::tuner_profiler::profiler_loader()
        .load_with_net_path(opts, external_net)
        .ok()?;
    match Profiler::init(&aux, facts) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            crate::log::nccl_warn!("PROFILER/Plugin: {e}; continuing without a profiler");
            None
        }
    }
}

/// What the net transport needs to emit one op's ProxyStep events: the profiler
/// (borrowed: a connector's [`StepTracker`] clones it once, at its first op),
/// the ProxyOp event (parent), the op's mask sample.
#[derive(Debug, Clone, Copy)]
pub struct StepProf<'a> {
    /// The profiler.
    pub prof: &'a Arc<Profiler>,
    /// The ProxyOp event.
    pub op: EventHandle,
    /// The op's activation mask.
    pub mask: u64,
}

/// The record whose address is the `phandle` a v10+ net plugin receives with
/// `isend`/`irecv` (NCCL's `{stepEventHandle, subArgPtr}` in `sub->pHandles[step % 8]`).
/// It must stay at a fixed address while the step is in flight.
#[derive(Debug)]
#[repr(C)]
pub struct PHandle {
    /// The ProxyStep event.
    pub step: EventHandle,
    /// The profiler (NULL: none), borrowed from the connector's [`StepTracker`].
    pub prof: *const Profiler,
    /// The op's activation mask.
    pub mask: u64,
}

// SAFETY: `prof` points into an `Arc<Profiler>` (which is Send + Sync) kept alive by
// the owning `StepTracker`; the record moves with its connector between threads.
unsafe impl Send for PHandle {}

impl Default for PHandle {
    fn default() -> Self {
        PHandle {
            step: EventHandle::NULL,
            prof: std::ptr::null(),
            mask: 0,
        }
    }
}

/// What an operation carries from its API call to the proxy thread for the
/// profiler: its CollApi/P2pApi event (the parent of its Coll/P2p event) and
/// the activation mask sampled when its group's GroupApi event started
/// (0: nothing to emit).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiTag {
    /// The CollApi / P2pApi event.
    pub api: EventHandle,
    /// The mask sampled at the GroupApi start.
    pub mask: u64,
}

/// `ncclProfilerCallback` (`src/plugin/profiler.cc`), handed to v10+ net
/// plugins' `init`: Start (0) creates a NetPlugin event under the ProxyStep
/// `pHandle` names when the op's mask has NetPlugin (else `*eHandle` is left
/// alone); Stop (1) stops `*eHandle` (unfiltered, may be NULL); Update (2)
/// records `NetPluginUpdate` with `extData`; UpdateAndStop (3) both. Always
/// returns `ncclSuccess`; a NULL or unknown `pHandle` does nothing.
///
/// # Safety
/// Called by plugins per the ABI: `e_handle` points to a `void*` the plugin
/// owns; `p_handle` is NULL or a `phandle` this host passed to `isend`/`irecv`
/// for a step still in flight.
pub unsafe extern "C" fn net_callback(
    e_handle: *mut *mut c_void,
    ty: c_int,
    p_handle: *mut c_void,
    plugin_id: i64,
    ext_data: *mut c_void,
) -> ncclResult_t {
    if e_handle.is_null() {
        return ncclResult_t::ncclSuccess;
    }
    if ty != 0 {
        // Stop / Update / UpdateAndStop act on `*eHandle` alone (no step handle).
        let Some(SyncTable(table, v)) = NET_FNS.get() else {
            return ncclResult_t::ncclSuccess;
        };
        // SAFETY: `e_handle` points to the plugin's `void*`.
        let eh = unsafe { *e_handle };
        if ty == 2 || ty == 3 {
            record_in(
                table,
                *v,
                EventHandle(eh),
                state::NET_PLUGIN_UPDATE,
                StateArgs::NetData(ext_data),
            );
        }
        if ty == 1 || ty == 3 {
            // SAFETY: the plugin's stopEvent; profilers accept NULL (reference §6.3 notes).
            let _ = unsafe { each!(table, t => (t.stopEvent.unwrap_unchecked())(eh)) };
        }
        return ncclResult_t::ncclSuccess;
    }
    if p_handle.is_null() {
        return ncclResult_t::ncclSuccess;
    }
    // SAFETY: per the contract, `p_handle` is one of our live `PHandle`s.
    let ph = unsafe { &*(p_handle as *const PHandle) };
    if ph.prof.is_null() {
        return ncclResult_t::ncclSuccess;
    }
    // SAFETY: the connector keeps the `Arc<Profiler>` alive while steps are in flight.
    let prof = unsafe { &*ph.prof };
    // SAFETY: `e_handle` points to the plugin's `void*`.
    let eh = unsafe { &mut *e_handle };
    match ty {
        0 if ph.mask & bits::NET_PLUGIN != 0 => {
            let h = prof.start(
                ph.step,
                &Event::NetPlugin {
                    id: plugin_id,
                    data: ext_data,
                },
            );
            *eh = h.0;
        }
        _ => {}
    }
    ncclResult_t::ncclSuccess
}

/// Per-connector ProxyStep bookkeeping of the NET transport: which ProxyOp the
/// next steps belong to, and the [`PHandle`] of every FIFO step in flight
/// (indexed like the FIFO, at a fixed address for the net plugin's callback).
/// Empty (no allocation, every call one branch) until a profiler attaches.
#[derive(Debug, Default)]
pub struct StepTracker {
    inner: Option<Box<TrackerInner>>,
}

#[derive(Debug)]
struct TrackerInner {
    /// Ops whose steps are still to begin: (ProxyOp event, its mask sample,
    /// steps left, next step index).
    ops: std::collections::VecDeque<(EventHandle, u64, usize, i32)>,
    /// Keeps the profiler alive while handles in `ph` point to it.
    prof: Arc<Profiler>,
    ph: [PHandle; crate::config::NCCL_STEPS],
}

impl StepTracker {
    /// Profiles the next `nsteps` steps under `op`. The profiler is cloned
    /// only at the first attach: a communicator's connectors all serve its one
    /// profiler, so later ops add no reference-count traffic.
    pub fn attach(&mut self, op: StepProf<'_>, nsteps: usize) {
        if nsteps == 0 {
            return;
        }
        let inner = self.inner.get_or_insert_with(|| {
            Box::new(TrackerInner {
                ops: Default::default(),
                prof: op.prof.clone(),
                ph: Default::default(),
            })
        });
        debug_assert!(Arc::ptr_eq(&inner.prof, op.prof), "one profiler per communicator");
        inner.ops.push_back((op.op, op.mask, nsteps, 0));
    }

    /// Forgets steps that never began (end of a work item).
    pub fn detach(&mut self) {
        if let Some(i) = &mut self.inner {
            i.ops.clear();
        }
    }

    /// Begins the step in FIFO `slot` (once: a second call before [`Self::end`]
    /// does nothing): starts its ProxyStep event under the waiting op when the
    /// op's mask wants it. Nothing when no op is waiting.
    #[inline]
    pub fn begin(&mut self, slot: usize) {
        if let Some(i) = &mut self.inner {
            i.begin(slot);
        }
    }

    /// Records state `st` of the step in `slot` with `trans_size` bytes.
    #[inline]
    pub fn record(&self, slot: usize, st: i32, trans_size: usize) {
        if let Some(i) = &self.inner {
            let h = i.ph[slot].step;
            if !h.is_null() {
                i.prof.record(h, st, StateArgs::TransSize(trans_size));
            }
        }
    }

    /// Stops the step in `slot` and frees its record.
    #[inline]
    pub fn end(&mut self, slot: usize) {
        if let Some(i) = &mut self.inner {
            let h = std::mem::take(&mut i.ph[slot]);
            i.prof.stop(h.step);
        }
    }

    /// The `phandle` to hand the net plugin for the step in `slot` (NULL when
    /// the step has no event).
    #[inline]
    pub fn phandle(&mut self, slot: usize) -> *mut c_void {
        match &mut self.inner {
            Some(i) if !i.ph[slot].step.is_null() => (&mut i.ph[slot] as *mut PHandle).cast(),
            _ => null_mut(),
        }
    }

    /// Stops every step event still open (the connection closes).
    pub fn abandon(&mut self) {
        if let Some(i) = &mut self.inner {
            i.ops.clear();
            for slot in 0..i.ph.len() {
                let h = std::mem::take(&mut i.ph[slot]);
                i.prof.stop(h.step);
            }
        }
    }
}

impl TrackerInner {
    fn begin(&mut self, slot: usize) {
        if !self.ph[slot].prof.is_null() {
            return;
        }
        let Some((op, mask, left, next)) = self.ops.front_mut() else {
            return;
        };
        let step = *next;
        *next += 1;
        *left -= 1;
        let h = if *mask & wants::PROXY_STEP_ != 0 {
            self.prof.start(*op, &Event::ProxyStep { step })
        } else {
            EventHandle::NULL
        };
        self.ph[slot] = PHandle {
            step: h,
            prof: Arc::as_ptr(&self.prof),
            mask: *mask,
        };
        if *left == 0 {
            self.ops.pop_front();
        }
    }
}
