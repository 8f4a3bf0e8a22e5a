//! The per-communicator proxy (NCCL's proxy progress thread, `src/proxy.cc`,
//! fused with the host "kernel" that moves and reduces data): it executes
//! enqueued work in order and drives the plugin (`isend`/`irecv`/`test`) for
//! every connection. Device buffers are staged through host memory by the
//! executor (`coll::exec`, `coll::mem`); the CPU reduces.
//!
//! Every wait in the loop is bounded: no progress on any lane for the
//! communicator's timeout fails the operation with [`Error::Timeout`] naming
//! what it was waiting for; the abort flag is checked on every idle turn. On the
//! first error the thread records it as the communicator's asynchronous error
//! and closes all its connections, so peers blocked on this rank fail fast too.
//!
//! By concern, in the order a work item meets them:
//! * [`handover`]: the user's side — decide, run inline or queue, hand over;
//! * [`shared`]: the state both sides share (abort flag, first error, queue slots);
//! * [`work`]: work items and what the thread receives;
//! * [`plan`]: plans, and the one plan cache with its named key;
//! * [`lifecycle`]: plan, ready, advance and end a work item;
//! * [`register`]: user-memory registration with the connectors;
//! * [`profiling`]: the profiler events of a work item;
//! * [`progress`]: the progress loop and its bounded waits;
//! * [`failure`]: the failure agreement among the survivors;
//! * [`thread`]: the proxy thread's body;
//! * [`state`]: what the proxy owns.
//!
//! [`Error::Timeout`]: crate::error::Error::Timeout

mod failure;
mod handover;
mod lifecycle;
mod plan;
mod profiling;
mod progress;
mod register;
mod shared;
mod state;
mod thread;
mod work;

pub(crate) use handover::ProxyHandle;
pub(crate) use plan::PlanCache;
pub(crate) use shared::Shared;
pub(crate) use state::Proxy;
