//! CollNet at communicator init: NCCL's `initTransportsRank` (`src/init.cc`)
//! decides whether the communicator uses CollNet, and `ncclCollNetSetup`
//! (`src/transport/coll_net.cc`) builds the support matrix and connects each
//! channel's collComm.
//!
//! Every rank states in its peer-info record whether it wants CollNet
//! (`NCCL_COLLNET_ENABLE` or the config) with a usable CollNet table, and if so
//! its `reduceSupport` answers; CollNet is used only when every rank does and
//! the communicator spans at least `NCCL_COLLNET_NODE_THRESHOLD` hosts, so all
//! ranks decide alike without another exchange. Then, per channel, each host's
//! heads ([`crate::graph::collnet`]: CollNetDirect's heads, the first of which
//! is the CollNetChain head) listen, the handles go round the bootstrap, and
//! head `h` of every host connects the channel's `h`-th collComm (NCCL's
//! `ncclCollNetSetup` per head index); the link becomes the channel's
//! connectors to peer `nranks` ([`crate::transport::collnet`]).

use std::sync::Arc;

use super::peer_info::PeerInfo;
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::graph::collnet::{self, ChainPos, DirectPos};
use crate::plugin::collnet::{CollNetAdapter, SupportBits, SupportMatrix};
use crate::plugin::net::{NetHandle, NetPlugin, RawComm, RawCtx};
use crate::transport::collnet::CollNetLink;
use crate::transport::{CONN_COLL, CONN_COLL_UP, ConnKey, ConnTable};

/// A communicator's CollNet: the plugin, its context, what it reduces, and
/// this rank's place in every channel's chain.
pub(crate) struct CommCollNet {
    /// The plugin's CollNet table.
    pub adapter: Arc<CollNetAdapter>,
    /// The communicator's CollNet context (finalized at destroy, after the links close).
    pub ctx: RawCtx,
    /// (operation, datatype) pairs every rank's plugin reduces.
    pub matrix: SupportMatrix,
    /// This rank's place in each channel's chain.
    pub chains: Vec<ChainPos>,
    /// This rank's place in each channel's CollNetDirect pattern (`None`: a
    /// host has too many ranks for it, [`collnet::direct_nheads`]).
    pub direct: Option<Vec<DirectPos>>,
    /// Per rank, the first rank of every channel of its host's searched
    /// CollNetDirect graph (all empty: the layout rule), as connected: what the
    /// CollNet AllGather/ReduceScatter schedule orders each host's chain by
    /// ([`collnet::host_order`]).
    pub firsts: Vec<Vec<usize>>,
    /// CollNetDirect heads per host and channel as connected (1 where
    /// CollNetDirect cannot run; [`collnet::direct_nheads`]).
    pub nheads: usize,
}

impl CommCollNet {
    /// CollNetDirect heads per host and channel (`comm->collNetHeadsNum`), `None`
    /// where CollNetDirect cannot run: what the tuning model is told.
    pub(crate) fn direct_heads(&self) -> Option<usize> {
        self.direct.as_ref().and_then(|d| d.first()).map(|p| p.heads.len())
    }

    /// `(AllGather, ReduceScatter)` over CollNet possible with this plugin:
    /// its `iallgather` / `ireducescatter` slots are set (NCCL's
    /// `src/graph/tuning.cc` turns CollNet off for a NULL slot) and it is v9+,
    /// whether the heads are searched or the layout rule's (the schedule orders
    /// each host's chain as the connection setup did, [`collnet::host_order`]).
    /// NCCL also runs v8 tables (its v8 shim takes the one SGE part NCCL
    /// passes, of at most 2^29 bytes); we keep v9+ because a window here may
    /// exceed that part limit on large communicators (nranks × one FIFO step).
    pub(crate) fn sge_support(&self) -> (bool, bool) {
        let v9 = self.adapter.info().version >= 9;
        (
            v9 && self.adapter.has_iallgather(),
            v9 && self.adapter.has_ireducescatter(),
        )
    }
}

/// This rank's CollNet entry for its peer-info record: its `reduceSupport`
/// answers when it wants CollNet and its plugin's table is usable, else `None`
/// (with NCCL's INFO line saying why).
pub(crate) fn local_entry(want: bool, net: &Arc<dyn NetPlugin>) -> Option<Vec<u8>> {
    if !want {
        return None;
    }
    match net.collnet() {
        Some(c) if c.is_enabled() => match c.support_bits() {
            Ok(b) => Some(b.to_bytes().to_vec()),
            Err(e) => {
                crate::log::nccl_info!(INIT, "CollNet disabled: reduceSupport failed: {e}");
                None
            }
        },
        Some(c) => {
            crate::log::nccl_info!(
                INIT,
                "CollNet disabled: plugin {} (ncclCollNet v{}) is {}",
                c.info().name,
                c.info().version,
                c.state()
            );
            None
        }
        None => {
            crate::log::nccl_info!(
                INIT,
                "CollNet disabled: the net plugin {} has no ncclCollNet table",
                net.info().name
            );
            None
        }
    }
}

/// What [`setup`] needs besides the connection table.
pub(crate) struct SetupArgs<'a> {
    pub net: &'a Arc<dyn NetPlugin>,
    pub bootstrap: &'a Bootstrap,
    pub peers: &'a [PeerInfo],
    pub rank: usize,
    pub nchannels: usize,
    /// CollNet heads per host the CollNetDirect graph search found (0: none;
    /// [`collnet::direct_nheads`]).
    pub searched_heads: usize,
    /// Per rank, the first rank of every channel of its host's searched
    /// CollNetDirect graph (all empty: nothing searched; [`collnet::host_order`]).
    pub searched_firsts: &'a [Vec<usize>],
    pub comm_id: u64,
    /// Bytes per FIFO step of the links.
    pub step_size: usize,
    /// `NCCL_COLLNET_NODE_THRESHOLD`.
    pub threshold: i64,
}

/// Connects CollNet on every channel when every rank asked for it (see the
/// module docs) and inserts the links into `conns`; `None` when CollNet is not
/// used (the reason logged). Every rank returns the same kind of answer.
///
/// A failing CollNet `init`, `listen`, `connect` or `regMr` on any rank does
/// not fail the communicator: as NCCL's `ncclCollNetSetup` (its result is not
/// checked by `initTransportsRank`, `src/init.cc`; `ncclTransportCollNetCheck`,
/// `src/transport.cc`), every rank closes what it opened and goes on without
/// CollNet, with NCCL's WARN "Cannot initialize CollNet, using point-to-point
/// network instead" on the first rank of each host. NCCL agrees on the failure
/// within each node only; here every rank of the communicator agrees (one more
/// bootstrap allgather), so no host runs CollNet while another does not.
///
/// Errors: the bootstrap failing.
pub(crate) fn setup(a: &SetupArgs<'_>, conns: &mut ConnTable) -> Result<Option<CommCollNet>> {
    let bits: Option<Vec<&Vec<u8>>> = a.peers.iter().map(|p| p.collnet.as_ref()).collect();
    let Some(bits) = bits else {
        if a.peers[a.rank].collnet.is_some() {
            let off: Vec<String> = a
                .peers
                .iter()
                .filter(|p| p.collnet.is_none())
                .map(|p| p.rank.to_string())
                .collect();
            crate::log::nccl_info!(
                INIT,
                "CollNet disabled: rank(s) {} did not enable it or have no usable CollNet table",
                off.join(",")
            );
        }
        return Ok(None);
    };
    let hosts: Vec<u64> = a.peers.iter().map(|p| p.host_hash).collect();
    let nnodes = hosts.iter().collect::<std::collections::BTreeSet<_>>().len();
    if !super::params::collnet_after_node_threshold(true, nnodes, a.threshold) {
        return Ok(None);
    }
    let Some(adapter) = a.net.collnet() else {
        return Err(Error::Internal(
            "CollNet: the table went away after the peer exchange".into(),
        ));
    };
    let ranks: Vec<SupportBits> = bits
        .iter()
        .enumerate()
        .map(|(r, b)| SupportBits::from_bytes(b).map_err(|e| Error::Remote(format!("rank {r}: CollNet support: {e}"))))
        .collect::<Result<_>>()?;
    let matrix = SupportMatrix::merge(&ranks);
    // Why this rank cannot take part (NCCL's collNetSetupFail).
    let mut failed: Option<String> = None;
    // NCCL inits the CollNet table for every communicator in ncclNetPluginInit
    // (`src/plugin/net.cc`), whether or not CollNet is enabled; we init it only
    // once every rank asked for CollNet and the node threshold is met, so a
    // plugin's `init` (the in-tree one starts its aggregation there) never runs
    // for communicators that will not use it. A failing init disables CollNet
    // as NCCL's does (there: for the process; here: for this communicator).
    let ctx = match adapter.init_ctx(a.comm_id) {
        Ok(c) => Some(c),
        Err(e) => {
            failed = Some(format!("init: {e}"));
            None
        }
    };
    let nranks = a.peers.len();
    // CollNetDirect's heads (src/graph/connect.cc connectCollNet): head `h` of
    // every host joins the channel's `h`-th collComm (NCCL's ncclCollNetSetup
    // sets up one per head index); head 0 is the chain's head, so with one head
    // per host (or CollNetDirect impossible) this is the chain's collComm only.
    let mut per_host: std::collections::BTreeMap<u64, usize> = Default::default();
    for h in &hosts {
        *per_host.entry(*h).or_default() += 1;
    }
    let (min_local, max_local) = (
        per_host.values().copied().min().unwrap_or(1),
        per_host.values().copied().max().unwrap_or(1),
    );
    let direct_heads = collnet::direct_nheads(a.searched_heads, min_local, max_local);
    let nheads = direct_heads.unwrap_or(1);
    // The heads: the searched CollNetDirect graph's (NCCL's `connectCollNet`
    // heads, `src/graph/connect.cc`) where every host has one, else the layout
    // rule (collnet::host_order). The chain's head is CollNetDirect head 0.
    let firsts = a.searched_firsts;
    let chains: Vec<ChainPos> = (0..a.nchannels)
        .map(|c| collnet::position_in(&hosts, firsts, a.rank, c, nheads))
        .collect();
    let direct: Vec<DirectPos> = (0..a.nchannels)
        .map(|c| collnet::direct_position(&hosts, firsts, a.rank, c, nheads))
        .collect();
    let mut links: Vec<(usize, CollNetLink)> = Vec::new();
    let close = |links: Vec<(usize, CollNetLink)>| {
        drop(links);
        if let Some(ctx) = ctx
            && let Err(e) = adapter.finalize_ctx(ctx)
        {
            crate::log::nccl_warn!("CollNet finalize: {e}");
        }
    };
    for (c, pos) in direct.iter().enumerate() {
        let head = pos.head_rank.is_some();
        // Heads listen; every rank sends (status, handle): 1 = a head's handle,
        // 2 = a head whose listen failed, 0 = not a head.
        let mut mine = vec![0u8; 1 + 128];
        let mut listen: Option<RawComm> = None;
        if head && failed.is_some() {
            // A rank that already failed answers as a head whose listen failed.
            mine[0] = 2;
        } else if let (true, Some(ctx)) = (head, ctx) {
            let mut h: NetHandle = [0; 128];
            match adapter.listen(ctx, 0, &mut h) {
                Ok(l) => {
                    mine[0] = 1;
                    mine[1..].copy_from_slice(&h);
                    listen = Some(l);
                    // NCCL's recvSetup line (`src/transport/coll_net.cc`): `CollNet
                    // <head index>/<connIndex 0> : <rank> [receive] via
                    // COLLNET/<name>/<netDev>`; ncclTransportCollNetSetup passes
                    // the head index as the "channel" and collNetRecv (0) as the
                    // connector index. No `/GDRDMA`: the links stage through host memory.
                    let h = pos.head_rank.expect("heads have a head index");
                    crate::log::nccl_info!(
                        INIT,
                        "CollNet {h:02}/0 : {} [receive] via COLLNET/{}/0",
                        a.rank,
                        adapter.info().name
                    );
                }
                Err(e) => {
                    failed = Some(format!("listen on channel {c}: {e}"));
                    mine[0] = 2;
                }
            }
        }
        let all = match a.bootstrap.allgather(&mine) {
            Ok(v) => v,
            Err(e) => {
                if let Some(l) = listen {
                    let _ = adapter.close_listen(l);
                }
                close(links);
                return Err(Error::from(e));
            }
        };
        let heads: Vec<usize> = (0..nheads)
            .flat_map(|h| collnet::direct_members(&hosts, firsts, c, h, nheads))
            .collect();
        let bad: Vec<usize> = heads
            .iter()
            .copied()
            .filter(|&r| all[r].len() != 129 || all[r][0] != 1)
            .collect();
        if !bad.is_empty() {
            if let Some(l) = listen {
                let _ = adapter.close_listen(l);
            }
            close(links);
            if let Some(why) = &failed {
                crate::log::nccl_info!(INIT, "CollNet setup failed on rank {}: {why}", a.rank);
            }
            crate::log::nccl_info!(
                INIT,
                "CollNet disabled: the head(s) {:?} of channel {c} could not set up CollNet",
                bad
            );
            setup_failed_warn(a, &hosts);
            return Ok(None);
        }
        let Some(l) = listen else { continue };
        let h = pos.head_rank.expect("a rank that listened is a head");
        let heads = collnet::direct_members(&hosts, firsts, c, h, nheads);
        let handles: Vec<NetHandle> = heads
            .iter()
            .map(|&r| {
                let mut h: NetHandle = [0; 128];
                h.copy_from_slice(&all[r][1..]);
                h
            })
            .collect();
        let me = heads.iter().position(|&r| r == a.rank).expect("this rank is a head");
        let coll = adapter.connect(&handles, me, l);
        let _ = adapter.close_listen(l);
        let coll = match coll {
            Ok(coll) => coll,
            Err(e) => {
                failed = Some(format!("connect on channel {c}: {e}"));
                continue;
            }
        };
        match CollNetLink::new(adapter.clone(), coll, c, a.step_size) {
            Ok(link) => links.push((c, link)),
            Err(e) => {
                failed = Some(e.to_string());
                continue;
            }
        }
        // NCCL's sendSetup line, after the receive side connected (head index,
        // connIndex 1 = collNetSend).
        crate::log::nccl_info!(
            INIT,
            "CollNet {h:02}/1 : {} [send] via COLLNET/{}/0",
            a.rank,
            adapter.info().name
        );
    }
    // NCCL's ncclTransportCollNetCheck: does any rank lack its part?
    let st = match a.bootstrap.allgather(&[failed.is_some() as u8]) {
        Ok(v) => v,
        Err(e) => {
            close(links);
            return Err(Error::from(e));
        }
    };
    if st.iter().any(|v| v.first() != Some(&0)) {
        if let Some(why) = &failed {
            crate::log::nccl_info!(INIT, "CollNet setup failed on rank {}: {why}", a.rank);
        }
        close(links);
        setup_failed_warn(a, &hosts);
        return Ok(None);
    }
    let Some(ctx) = ctx else {
        close(links);
        return Err(Error::Internal("CollNet: no context after a successful setup".into()));
    };
    // NCCL's ncclCollNetChainBufferSetup line (`src/transport/coll_net.cc`),
    // every rank: ` [c] down->rank->up` per channel, -1 for no rank below and
    // nranks (the network) above a head.
    let mut line = String::new();
    for (c, ch) in chains.iter().enumerate() {
        let down = ch.down.map_or(-1, |d| d as i64);
        line.push_str(&format!(" [{c}] {down}->{}->{}", a.rank, ch.up));
    }
    crate::log::nccl_info!(INIT, "Connected Collnet Chains {line}");
    if let Some(n) = direct_heads {
        for (c, pos) in direct.iter().enumerate() {
            crate::log::nccl_info!(GRAPH, "{}", pos.info_line(c, a.rank, nranks));
        }
        crate::log::nccl_info!(INIT, "CollNetDirect: {n} head(s) per node and channel");
        // NCCL's ncclCollNetDirectBufferSetup line (run when a host has at most
        // NCCL_MAX_DIRECT_ARITY + 1 ranks, as `direct_nheads` decides here).
        crate::log::nccl_info!(INIT, "rank {} Connected CollNet", a.rank);
    }
    for (c, link) in links {
        let key = ConnKey {
            channel: c,
            peer: nranks,
            conn: CONN_COLL,
        };
        conns.insert_send(key, link.send());
        conns.insert_recv(key, link.recv());
        // CollNetDirect's reduce role sends to the network from the channel's
        // "up" lane (it receives from the local ranks there): the same link's
        // send side under that lane's key too.
        conns.insert_send(
            ConnKey {
                conn: CONN_COLL_UP,
                ..key
            },
            link.send(),
        );
    }
    // ferroccl's own summary line: NCCL 2.30.7 prints no "CollNet enabled" line
    // (its lines are the per-head `via COLLNET` ones, `Connected Collnet Chains`,
    // `rank N Connected CollNet` and `%d coll channels, %d collnet channels, …`).
    crate::log::nccl_info!(
        INIT,
        "CollNet enabled: plugin {} (ncclCollNet v{}), {} channel(s), {nnodes} nodes",
        adapter.info().name,
        adapter.info().version,
        a.nchannels
    );
    Ok(Some(CommCollNet {
        adapter,
        ctx,
        matrix,
        chains,
        direct: direct_heads.map(|_| direct),
        firsts: firsts.to_vec(),
        nheads,
    }))
}

/// NCCL's WARN when CollNet setup failed somewhere (`ncclTransportCollNetCheck`,
/// `src/transport.cc`), on the first rank of each host as NCCL's local rank 0.
fn setup_failed_warn(a: &SetupArgs<'_>, hosts: &[u64]) {
    if hosts.iter().position(|h| *h == hosts[a.rank]) == Some(a.rank) {
        crate::log::nccl_warn!("Cannot initialize CollNet, using point-to-point network instead");
    }
}
