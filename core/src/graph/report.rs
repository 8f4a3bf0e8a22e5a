//! The explorer's report (`ferroccl-topo`): what a [`CommTopology`] holds, printed in
//! NCCL's own formats where NCCL has one (`ncclTopoPrint`, `ncclTopoPrintGraph`,
//! `Channel xx/yy :`, `Trees [c] …`).

use std::fmt::Write as _;

use super::plan::CommTopology;
use super::search::{net_dev, print_graph};
use super::topo_graph::pattern_name;
use crate::topo::types::i64_to_bus_id;
use crate::topo::{NodeType, TopoError, TopoParams};

/// What to include.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportOptions {
    /// Include the per-GPU/NET path table of `ncclTopoPrint`.
    pub paths: bool,
    /// Include the searches' relaxation steps.
    pub why: bool,
}

/// The report for `topo` (deterministic; `name` labels the header).
pub fn report(topo: &CommTopology, name: &str, params: &TopoParams, opts: ReportOptions) -> Result<String, TopoError> {
    let mut o = String::new();
    let h0 = &topo.hosts[0];
    let sys = &h0.graphs.system;
    let comm = &topo.comm;
    let nranks = comm.nranks;
    let _ = writeln!(
        o,
        "# ferroccl-topo {name}: {} node(s), {} rank(s) per node, {} ranks, {} net device(s) per node",
        topo.hosts.len(),
        h0.ranks.len(),
        nranks,
        sys.count(NodeType::Net)
    );
    let _ = writeln!(o, "\n== System (node 0) ==");
    for l in &h0.system_log {
        let is_path = l.starts_with("GPU/") || l.starts_with("NET/");
        if is_path && !opts.paths {
            continue;
        }
        let _ = writeln!(o, "{l}");
    }
    let _ = writeln!(o, "\n== Devices (node 0) ==");
    for (i, g) in sys.of(NodeType::Gpu).iter().enumerate() {
        let (dev, rank, cc, gdr, parent) = g.gpu();
        let bus = i64_to_bus_id(sys.of(NodeType::Dev)[parent].id & 0x00ff_ffff_ffff);
        let _ = writeln!(
            o,
            "GPU index {i}: rank {rank} dev {dev} sm {cc} gdr {} busid {bus}",
            u8::from(gdr)
        );
    }
    for (i, n) in sys.of(NodeType::Net).iter().enumerate() {
        let ni = n.net();
        let _ = writeln!(
            o,
            "NET index {i}: dev {} name {} bw {} GB/s gdr {} localGpu {}",
            ni.dev,
            ni.name,
            ni.bw,
            u8::from(ni.gdr),
            ni.local_gpu
        );
    }
    let _ = writeln!(o, "\n== Graphs (node 0, as searched) ==");
    for (label, g) in [("Ring", &h0.graphs.ring), ("Tree", &h0.graphs.tree)] {
        let _ = writeln!(o, "{label} graph (id {}): {}", g.id, pattern_name(g.pattern));
        for l in print_graph(sys, g) {
            let _ = writeln!(o, "  {l}");
        }
        for c in 0..g.n_channels {
            let ranks: Vec<String> = g.channel(c).iter().map(i32::to_string).collect();
            let nets = if sys.inter {
                let (i, out) = g.nets(c);
                let d = |id| net_dev(sys, id).map_or("-".to_string(), |d| d.to_string());
                format!(", NIC {} -> {}", d(i), d(out))
            } else {
                String::new()
            };
            let _ = writeln!(o, "  channel {c:2}: ranks {}{nets}", ranks.join(" "));
        }
    }
    let _ = writeln!(o, "\n== After the all-gather ==");
    for (label, g) in [("ring", &comm.ring), ("tree", &comm.tree)] {
        let _ = writeln!(
            o,
            "{label}: pattern {}, nChannels {}, bw {}/{}, type {}/{}, sameChannels {}, crossNic {}",
            g.pattern,
            g.n_channels,
            g.bw_intra,
            g.bw_inter,
            g.type_intra,
            g.type_inter,
            u8::from(g.same_channels),
            g.cross_nic
        );
    }
    let _ = writeln!(o, "nNodes {}, channels {}", comm.n_nodes, comm.n_channels);
    let _ = writeln!(o, "\n== Channels ==");
    for l in comm.log.iter().filter(|l| l.text.starts_with("Channel ")) {
        let _ = writeln!(o, "{}", l.text);
    }
    let _ = writeln!(o, "\n== Trees ==");
    for l in comm.log.iter().filter(|l| l.text.starts_with("Trees")) {
        let _ = writeln!(o, "rank {:>3}: {}", l.rank, l.text);
    }
    let _ = writeln!(o, "\n== NIC per channel (ring | tree; - = no network connection) ==");
    for r in 0..nranks {
        let plan = topo.plan_for(r, params)?;
        let ring: Vec<String> = plan
            .channels
            .iter()
            .map(|c| c.net_dev.map_or("-".into(), |d| d.to_string()))
            .collect();
        let tree: Vec<String> = plan
            .tree_net_dev
            .iter()
            .map(|d| d.map_or("-".into(), |d| d.to_string()))
            .collect();
        let _ = writeln!(o, "rank {r:>3}: {} | {}", ring.join(" "), tree.join(" "));
    }
    if opts.why {
        let _ = writeln!(o, "\n== Why (node 0: ring search, then tree search) ==");
        for l in &h0.why {
            let _ = writeln!(o, "{l}");
        }
    }
    Ok(o)
}
