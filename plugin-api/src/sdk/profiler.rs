//! The safe SDK trait for profiler plugins (`ncclProfiler_v6`, reference §3.2).

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
/// `stopEvent`. A descriptor's `parentObj` is that opaque handle of the parent
/// event (compare it, never dereference it).
pub trait Profiler: Sized + Send + Sync + 'static {
    /// The vtable `name`.
    const NAME: &'static CStr;
    /// One started event.
    type Event: Send + 'static;

    /// Creates the per-communicator profiler and sets `activation_mask` (bits
    /// `ncclProfile*`; the mask is process-global in NCCL: last writer wins).
    /// An error makes NCCL unload the profiler and continue without it.
    fn init(info: ProfilerInit<'_>, activation_mask: &mut i32) -> NetResult<Self>;

    /// Starts an event; `Ok(None)` = not tracked (`*eHandle = NULL`).
    fn start_event(&self, descr: &abi::ncclProfilerEventDescr_v6_t) -> NetResult<Option<Self::Event>>;

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

    /// Destroys the per-communicator profiler (`finalize`).
    fn finalize(self) -> NetResult<()> {
        Ok(())
    }
}
