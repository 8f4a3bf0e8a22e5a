//! What the proxy owns: the connectors, the schedule parameters, the
//! sequence numbers, the plan cache and the profiler's buffers. The proxy
//! thread holds it locked while it runs an item; an enqueuing thread may lock
//! it to run work itself while the thread is idle.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::plan::PlanCache;
use super::profiling::ProfBufs;
use super::shared::Shared;
use super::work::Item;
use crate::bootstrap::Bootstrap;
use crate::coll::desc::OpDesc;
use crate::coll::schedule::SchedParams;
use crate::error::Error;
use crate::profiler::Profiler;
use crate::stream::Completion;
use crate::transport::ConnTable;
use crate::transport::setup::TransportSetup;

/// Everything the proxy thread owns.
pub(crate) struct Proxy {
    /// Transport selection and connection setup (p2p connections on first use).
    pub transports: Arc<TransportSetup>,
    pub params: SchedParams,
    /// Every connector, keyed by (channel, peer, connection index) and direction;
    /// p2p connectors are added on first use.
    pub conns: ConnTable,
    pub shared: Arc<Shared>,
    /// No-progress watchdog bound.
    pub timeout: Duration,
    /// How long an idle proxy busy-polls before yielding the CPU
    /// (`FERROCCL_PROXY_SPIN_US`; zero when the host is oversubscribed).
    pub spin: Duration,
    /// Plugin device of point-to-point connections to each peer.
    pub p2p_devs: Vec<usize>,
    /// Plugin device of tree connections per channel (`None`: the channel's default).
    pub tree_devs: Vec<Option<usize>>,
    /// Devices the plugin reports.
    pub ndev: usize,
    /// Operations whose buffers are at least this many bytes send straight from
    /// registered user memory (`FERROCCL_NET_USER_SEND_MIN`); `None` = always copy
    /// through the FIFO.
    pub user_send_min: Option<usize>,
    /// Sequence number of the next collective.
    pub coll_seq: u64,
    /// Sequence number of the next send to each peer.
    pub p2p_send_seq: BTreeMap<usize, u64>,
    /// Sequence number of the next receive from each peer.
    pub p2p_recv_seq: BTreeMap<usize, u64>,
    /// The bootstrap, for the survivors' failure reports (`crate::diag`).
    pub bootstrap: Arc<Bootstrap>,
    /// Peers the unfinished steps of the last failed work waited on.
    pub waiting_on: Vec<usize>,
    /// The survivors' agreed diagnosis, once this rank took part in the
    /// agreement (`Proxy::agree_on_failure`).
    pub verdict: Option<String>,
    /// The communicator's profiler plugin, if any.
    pub profiler: Option<Arc<Profiler>>,
    /// The last finished work item's plan, for a repeat of it.
    pub plan_cache: PlanCache,
    /// Vectors the profiler's bookkeeping reuses from one work item to the next.
    pub prof_bufs: ProfBufs,
    /// The descriptor vector of the last finished work item, reused by the next.
    pub desc_buf: Vec<OpDesc>,
    /// Whether the running work item registered user memory with its
    /// connectors (released at its end).
    pub user_registered: bool,
    /// Work an enqueuing thread handed over (`ProxyHandle::hand_over`): the
    /// proxy thread runs it before the item it received.
    pub parked: Option<Item>,
    /// Work the proxy thread finished while holding this state, with its
    /// result: completed, and its queue slot released, only once the thread
    /// has unlocked the state (`Proxy::run`), so an enqueuer woken by either
    /// finds the state free to run its next work itself.
    pub finished: Vec<(Arc<Completion>, Result<(), Error>)>,
}
