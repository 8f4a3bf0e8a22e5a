//! The safe SDK trait for profiler plugins (`ncclProfiler_v6` … `_v1`, all
//! seen through the v6 descriptor; reference §3.2).

use std::ffi::CStr;

use crate::abi;
use crate::sdk::NetResult;

/// What NCCL tells a profiler at `init` (per communicator).
#[derive(Debug)]
pub struct ProfilerInit<'a> {
    /// Communicator id (commHash).
    pub comm_id: u64,
    /// Communicator name, if any.
    pub comm_name: Option<&'a CStr>,
    /// Number of nodes.
    pub n_nodes: i32,
    /// Number of ranks.
    pub n_ranks: i32,
    /// This rank.
    pub rank: i32,
}

/// A profiler plugin: one value per communicator. Exported with
/// [`export_profiler_plugin!`](crate::export_profiler_plugin).
///
/// Events are boxed by the SDK; the `eHandle` NCCL sees is the box, freed at
/// `stopEvent` (or, with [`Profiler::UNBOXED`], the event itself). A
/// descriptor's `parentObj` is that opaque handle of the parent event (compare
/// it, never dereference it).
pub trait Profiler: Sized + Send + Sync + 'static {
    /// The vtable `name`.
    const NAME: &'static CStr;
    /// One started event.
    type Event: Send + 'static;

    /// Creates the per-communicator profiler and sets `activation_mask` (bits
    /// `ncclProfile*`; the mask is process-global in NCCL: last writer wins).
    /// An error makes NCCL unload the profiler and continue without it.
    fn init(info: ProfilerInit<'_>, activation_mask: &mut i32) -> NetResult<Self>;

    /// How many stopped events the SDK keeps a copy of (made by
    /// [`Profiler::retain`]) so that later children still find them as their
    /// parent: NCCL parents a Coll to its CollApi event and a ProxyOp to its
    /// Coll event after those were stopped. The oldest copy is dropped first.
    /// 0 (the default): nothing kept.
    const RETAIN_STOPPED: usize = 0;

    /// Starts an event; `Ok(None)` = not tracked (`*eHandle = NULL`).
    fn start_event(&self, descr: &abi::ncclProfilerEventDescr_v6_t) -> NetResult<Option<Self::Event>>;

    /// [`Profiler::start_event`] with the parent event resolved: `parent` is the
    /// event `descr.parentObj` names when it is live or one of the last
    /// [`Profiler::RETAIN_STOPPED`] stopped ones, `None` otherwise (NULL, not
    /// tracked, or forgotten). Default: `start_event`.
    fn start_child(
        &self,
        descr: &abi::ncclProfilerEventDescr_v6_t,
        parent: Option<&Self::Event>,
    ) -> NetResult<Option<Self::Event>> {
        let _ = parent;
        self.start_event(descr)
    }

    /// The copy of a stopping event to keep for its later children (see
    /// [`Profiler::RETAIN_STOPPED`]); called just before [`Profiler::stop_event`].
    /// Default: none.
    fn retain(&self, event: &Self::Event) -> Option<Self::Event> {
        let _ = event;
        None
    }

    /// Records a state transition of a started event (`args` may be absent).
    fn record_event_state(
        &self,
        event: &mut Self::Event,
        state: abi::ncclProfilerEventState_t,
        args: Option<&abi::ncclProfilerEventStateArgs_v6_t>,
    ) -> NetResult<()> {
        let _ = (event, state, args);
        Ok(())
    }

    /// Stops an event; the SDK frees it afterwards.
    fn stop_event(&self, event: Self::Event) -> NetResult<()> {
        drop(event);
        Ok(())
    }

    /// Whether events are their own `eHandle`: `false` (the default), the SDK
    /// boxes each event and the handle NCCL sees is the box (freed at
    /// `stopEvent`, or kept per [`Profiler::RETAIN_STOPPED`]); `true`, the
    /// handle is [`Profiler::handle_of`] the event and no box, copy or lock is
    /// made per event. Meant for small `Copy` events that stay meaningful after
    /// they stopped (ids): a later child's `parentObj` still names its stopped
    /// parent. `recordEventState` and `stopEvent` receive no context, so these
    /// profilers implement [`Profiler::record_unboxed`] and
    /// [`Profiler::stop_unboxed`] instead of the `&self` methods. The SDK keeps
    /// only the handle: [`Profiler::handle_of`] and [`Profiler::event_of_handle`]
    /// must round-trip the event by value.
    const UNBOXED: bool = false;

    /// [`Profiler::UNBOXED`]: the handle of `event` (never 0, which NCCL reads
    /// as "not tracked"). Not called otherwise; default 0.
    fn handle_of(event: &Self::Event) -> usize {
        let _ = event;
        0
    }

    /// [`Profiler::UNBOXED`]: the event handle `h` names (`None`: not one of
    /// this profiler's). `h` may be any value NCCL passes as a handle; it is
    /// never dereferenced. Not called otherwise; default `None`.
    fn event_of_handle(h: usize) -> Option<Self::Event> {
        let _ = h;
        None
    }

    /// [`Profiler::UNBOXED`]: records a state transition (as
    /// [`Profiler::record_event_state`], without the profiler value). Default: nothing.
    fn record_unboxed(
        event: &mut Self::Event,
        state: abi::ncclProfilerEventState_t,
        args: Option<&abi::ncclProfilerEventStateArgs_v6_t>,
    ) -> NetResult<()> {
        let _ = (event, state, args);
        Ok(())
    }

    /// [`Profiler::UNBOXED`]: stops an event (as [`Profiler::stop_event`],
    /// without the profiler value). Default: drops it.
    fn stop_unboxed(event: Self::Event) -> NetResult<()> {
        drop(event);
        Ok(())
    }

    /// Destroys the per-communicator profiler (`finalize`).
    fn finalize(self) -> NetResult<()> {
        Ok(())
    }
}
