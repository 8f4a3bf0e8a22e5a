//! `ferroccl-topo`: what NCCL 2.30.7 would build on a machine, offline.
//!
//! ```text
//! ferroccl-topo TOPO.xml --nodes N [hardware model options] [--why]
//! ```
//!
//! Reads an `NCCL_TOPO_FILE`-style topology, completes it with the facts NCCL gets from the
//! driver and the net plugin (for PCI-skeleton files: `--sm`, `--nvlink`, `--net-speed`,
//! `--cpu`, `--gpus`, `--nics`, `--pci-link`; see `core/tests/data/topo/public/README.md`), and prints,
//! for N identical machines: the system NCCL builds (`ncclTopoPrint`), the ring and tree
//! graphs of one machine (`ncclTopoPrintGraph`), the graphs after the all-gather, every
//! `Channel` line, every rank's `Trees` line and the NIC each rank uses per channel.
//! `--why` adds the search's relaxation steps and where it settled. `--graph-out` /
//! `--topo-out` write node 0's graph XML (`NCCL_GRAPH_DUMP_FILE` format) and fused topology
//! (`NCCL_TOPO_DUMP_FILE` format).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ferroccl::graph::CommTopology;
use ferroccl::graph::report::{ReportOptions, report};
use ferroccl::topo::TopoParams;
use ferroccl::topo::model::{CpuModel, HardwareModel, NvlinkModel};
use ferroccl::topo::xml::{self, Schema};

#[derive(Parser, Debug)]
#[command(
    name = "ferroccl-topo",
    about = "Show the rings, trees and channels NCCL 2.30.7 builds on a topology, offline"
)]
struct Args {
    /// Topology file (NCCL_TOPO_FILE format).
    topo: PathBuf,
    /// Number of identical machines.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Compute capability of GPUs the file does not describe (e.g. 80).
    #[arg(long)]
    sm: Option<i32>,
    /// NVLinks: none, nvswitch[:N], or map:A-BxN,... (GPUs by NVML index).
    #[arg(long, default_value = "none")]
    nvlink: String,
    /// Speed of NICs the file does not describe, Mb/s.
    #[arg(long)]
    net_speed: Option<i32>,
    /// CPU facts where <cpu> lacks them: ARCH,VENDOR,FAMILY,MODEL.
    #[arg(long)]
    cpu: Option<String>,
    /// Bus ids that are GPUs (for files without class codes), comma-separated.
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<String>,
    /// Bus ids that are NICs (for files without class codes), comma-separated.
    #[arg(long, value_delimiter = ',')]
    nics: Vec<String>,
    /// link_speed,link_width for PCI devices without them (e.g. "16.0 GT/s PCIe,16").
    #[arg(long)]
    pci_link: Option<String>,
    /// NCCL_GRAPH_FILE to load instead of searching.
    #[arg(long)]
    graph_file: Option<PathBuf>,
    /// NCCL_CROSS_NIC (0, 1, 2).
    #[arg(long, default_value_t = 2)]
    cross_nic: i64,
    /// NCCL_MIN_NCHANNELS.
    #[arg(long, default_value_t = 0)]
    min_nchannels: usize,
    /// NCCL_MAX_NCHANNELS.
    #[arg(long, default_value_t = 64)]
    max_nchannels: usize,
    /// Explain the search: every attempt and where it settled.
    #[arg(long)]
    why: bool,
    /// Include the path table of every GPU and NIC.
    #[arg(long)]
    paths: bool,
    /// Write node 0's graph XML (NCCL_GRAPH_DUMP_FILE format) here.
    #[arg(long)]
    graph_out: Option<PathBuf>,
    /// Write node 0's fused topology XML (NCCL_TOPO_DUMP_FILE format) here.
    #[arg(long)]
    topo_out: Option<PathBuf>,
}

fn run(a: &Args) -> Result<(), String> {
    if a.nodes == 0 {
        return Err("--nodes must be at least 1".into());
    }
    let file = xml::load_file(&a.topo, Schema::Topology).map_err(|e| e.to_string())?;
    let pci_link = match &a.pci_link {
        Some(s) => {
            let (sp, w) = s.rsplit_once(',').ok_or("--pci-link expects SPEED,WIDTH")?;
            Some((sp.to_string(), w.to_string()))
        }
        None => None,
    };
    let model = HardwareModel {
        sm: a.sm,
        nvlink: NvlinkModel::parse(&a.nvlink).map_err(|e| e.to_string())?,
        net_speed: a.net_speed,
        cpu: a
            .cpu
            .as_deref()
            .map(CpuModel::parse)
            .transpose()
            .map_err(|e| e.to_string())?,
        gpus: a.gpus.iter().map(|s| s.to_ascii_lowercase()).collect(),
        nics: a.nics.iter().map(|s| s.to_ascii_lowercase()).collect(),
        pci_link,
        gdr: true,
    };
    let records = model.records(&file, a.nodes).map_err(|e| e.to_string())?;
    let params = TopoParams {
        graph_file: a.graph_file.clone(),
        cross_nic: a.cross_nic,
        min_nchannels: a.min_nchannels,
        max_nchannels: a.max_nchannels,
        explain: a.why,
        ..TopoParams::default()
    };
    let topo = CommTopology::build(&records, &params).map_err(|e| e.to_string())?;
    let name = a
        .topo
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let opts = ReportOptions {
        paths: a.paths,
        why: a.why,
    };
    print!("{}", report(&topo, &name, &params, opts).map_err(|e| e.to_string())?);
    if let Some(p) = &a.graph_out {
        let x = topo.graph_xml(0).map_err(|e| e.to_string())?;
        std::fs::write(p, x).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(p) = &a.topo_out {
        std::fs::write(p, xml::dump(&topo.hosts[0].fused_xml))
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferroccl-topo: {e}");
            ExitCode::FAILURE
        }
    }
}
