//! Rings and trees over the ranks (NCCL's `src/graph/`): the per-channel
//! communication pattern every collective schedule follows.
//!
//! A [`Channel`] is this rank's view of one channel, as NCCL's `struct
//! ncclChannel` (`src/include/device.h`) holds it: the ring (`ring.prev`,
//! `ring.next`, `ring.userRanks`) and the tree (`tree.up`, `tree.down[3]`).
//! The communicator's channels come from [`plan()`]: the topology ([`crate::topo`])
//! searched for rings and trees ([`search`], or a graph file, [`graph_xml`]),
//! NCCL's trees across nodes ([`trees`]), and the channels connected as NCCL's
//! `ncclTopoPreset`/`ncclTopoPostset` do ([`connect`]).

pub mod channel;
pub mod collnet;
pub mod connect;
pub mod graph_xml;
pub mod plan;
pub mod report;
pub mod search;
pub mod topo_graph;
pub mod trees;

pub use channel::{Channel, MAX_TREE_ARITY, Ring, TreeLinks};
pub use connect::{CommGraph, GraphInfo, LogLine};
pub use plan::{CommTopology, P2pNet, TopoPlan, plan};
pub use topo_graph::TopoGraph;
