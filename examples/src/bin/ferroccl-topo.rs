//! `ferroccl-topo`: what NCCL 2.30.7 would build and choose on a machine, offline.
//!
//! ```text
//! ferroccl-topo [TOPO.xml] [--nodes N] [hardware model options] [--why] [--json] [--tuner PLUGIN]
//! ```
//!
//! Reads an `NCCL_TOPO_FILE`-style topology (the positional file, else `NCCL_TOPO_FILE`,
//! else NCCL's default `/var/run/nvidia-topologyd/virtualTopology.xml`), completes it with
//! the facts NCCL gets from the driver and the net plugin (for PCI-skeleton files: `--sm`,
//! `--nvlink`, `--net-speed`, `--cpu`, `--gpus`, `--nics`, `--pci-link`; see
//! `core/tests/data/topo/public/README.md`), and prints, for N identical machines: the system NCCL
//! builds (`ncclTopoPrint`), the ring and tree graphs of one machine
//! (`ncclTopoPrintGraph`), the graphs after the all-gather, every `Channel` line, every
//! rank's `Trees` line, the NIC each rank uses per channel, then NCCL's tuning: the
//! latency/bandwidth table of `ncclTopoTuneModel` as `NCCL_DEBUG_SUBSYS=TUNING` prints it,
//! and per collective the algorithm/protocol `ncclGetAlgoInfo` picks for every
//! power-of-two size from 8 B to 8 GiB with the model's time. `--tuner` adds what a tuner
//! plugin changes; `--json` prints the tuning as data.
//!
//! Every variable NCCL reads for these steps comes from the environment or `nccl.conf` as
//! the runtime reads them (`NCCL_GRAPH_FILE`, `NCCL_CROSS_NIC`, `NCCL_MIN/MAX_NCHANNELS`,
//! `NCCL_ALGO`, `NCCL_PROTO`, `NCCL_NTHREADS`, `NCCL_LL128_*`, `NCCL_NVLS_ENABLE`, …);
//! command-line flags win.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use ferroccl::config::Config;
use ferroccl::graph::CommTopology;
use ferroccl::graph::report::{ReportOptions, report};
use ferroccl::plugin::LoadOptions;
use ferroccl::plugin::tuner::{NvlDomainInfo, TunerAdapter, TunerError};
use ferroccl::topo::model::{CpuModel, HardwareModel, NvlinkModel};
use ferroccl::topo::xml::{self, Schema};
use ferroccl::topo::{DEFAULT_TOPO_FILE, TopoParams};
use ferroccl::tune::constants::TunerConstants;
use ferroccl::tune::gpu::{self, GpuTuneParams, GpuTuning, TunerRow};
use ferroccl::tune::select::{ChoiceRange, human_size};
use ferroccl::tune::{Func, table};
use serde_json::{Value, json};

const AFTER_HELP: &str = "\
Variables (environment, then NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf; flags win):
  NCCL_TOPO_FILE            topology when no file is given
  NCCL_GRAPH_FILE           graphs to load instead of searching (--graph-file)
  NCCL_TOPO_DUMP_FILE[_RANK], NCCL_GRAPH_DUMP_FILE[_RANK]
                            where the fused topology / graphs of that rank's node go (--topo-out, --graph-out)
  NCCL_CROSS_NIC, NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS, NCCL_MIN_CTAS, NCCL_MAX_CTAS,
  NCCL_P2P_LEVEL, NCCL_P2P_DISABLE, NCCL_NVB_DISABLE, NCCL_PXN_DISABLE, NCCL_NET_GDR_LEVEL,
  NCCL_NET_GDR_READ, NCCL_NETDEVS_POLICY, NCCL_NVLS_ENABLE
                            graph search, as NCCL reads them
  NCCL_ALGO, NCCL_PROTO     restrict the table and the choices (NCCL's grammar)
  NCCL_NTHREADS, NCCL_LL128_NTHREADS, NCCL_PAT_ENABLE, NCCL_LL128_C2C, NCCL_NET_OVERHEAD,
  NCCL_THREAD_THRESHOLDS, NCCL_COLLNET_ENABLE
                            tuning model, as NCCL reads them
  NCCL_TUNER_PLUGIN         tuner to compare with (--tuner; \"none\" = no tuner)

Modelled as on the real machine: multicast (NVLS) on sm >= 9.0 GPUs with an NVSwitch; a
host-side net plugin; CollNet only on NICs the topology marks coll=\"1\"; a CUDA 12 build of NCCL.
Sizes are the bytes NCCL tunes on (ncclFuncMaxSendRecvCount x 4 for float32: the whole
AllGather output and ReduceScatter input, as nccl-tests' size column).";

#[derive(Parser, Debug)]
#[command(
    name = "ferroccl-topo",
    about = "Show the rings, trees, channels and algorithm choices NCCL 2.30.7 makes on a topology, offline",
    after_help = AFTER_HELP
)]
struct Args {
    /// Topology file (NCCL_TOPO_FILE format); default $NCCL_TOPO_FILE, then NCCL's default file.
    topo: Option<PathBuf>,
    /// Number of identical machines.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Compute capability of GPUs the file does not describe (e.g. 80).
    #[arg(long)]
    sm: Option<i32>,
    /// NVLinks: none, nvswitch, nvswitch:N, or map:A-BxN,... (GPUs by NVML index).
    #[arg(long, default_value = "none")]
    nvlink: String,
    /// Speed of NICs the file does not describe, Mb/s.
    #[arg(long)]
    net_speed: Option<i32>,
    /// CPU facts where the topology's cpu element lacks them: ARCH,VENDOR,FAMILY,MODEL.
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
    /// Graph XML to load instead of searching (default $NCCL_GRAPH_FILE).
    #[arg(long)]
    graph_file: Option<PathBuf>,
    /// NCCL_CROSS_NIC (0, 1, 2; default $NCCL_CROSS_NIC, else 2).
    #[arg(long)]
    cross_nic: Option<i64>,
    /// NCCL_MIN_NCHANNELS (default $NCCL_MIN_NCHANNELS).
    #[arg(long)]
    min_nchannels: Option<usize>,
    /// NCCL_MAX_NCHANNELS (default $NCCL_MAX_NCHANNELS, else 64).
    #[arg(long)]
    max_nchannels: Option<usize>,
    /// Explain the search: every attempt and where it settled.
    #[arg(long)]
    why: bool,
    /// Include the path table of every GPU and NIC.
    #[arg(long)]
    paths: bool,
    /// Write the graph XML (NCCL_GRAPH_DUMP_FILE format) of the dumping rank's node here
    /// (default $NCCL_GRAPH_DUMP_FILE; rank $NCCL_GRAPH_DUMP_FILE_RANK, else 0).
    #[arg(long)]
    graph_out: Option<PathBuf>,
    /// Write the fused topology XML (NCCL_TOPO_DUMP_FILE format) of the dumping rank's node
    /// here (default $NCCL_TOPO_DUMP_FILE; rank $NCCL_TOPO_DUMP_FILE_RANK, else 0).
    #[arg(long)]
    topo_out: Option<PathBuf>,
    /// Print the tuning (inputs, table, choices, tuner changes) as JSON instead of the report.
    #[arg(long)]
    json: bool,
    /// Tuner plugin to compare with NCCL's own choices (name, libnccl-tuner-NAME.so or a
    /// path, resolved as NCCL_TUNER_PLUGIN; default $NCCL_TUNER_PLUGIN; "none" = no tuner).
    #[arg(long)]
    tuner: Option<String>,
}

/// The topology file: the argument, else `NCCL_TOPO_FILE`, else NCCL's default file if it exists.
fn topo_file(a: &Args, params: &TopoParams) -> Result<PathBuf, String> {
    if let Some(p) = a.topo.clone().or_else(|| params.topo_file.clone()) {
        return Ok(p);
    }
    let d = Path::new(DEFAULT_TOPO_FILE);
    if d.is_file() {
        return Ok(d.to_path_buf());
    }
    Err(format!(
        "no topology: give a file, or set NCCL_TOPO_FILE ({DEFAULT_TOPO_FILE} does not exist)"
    ))
}

/// Graph and tuning parameters: the configuration, then the flags.
fn topo_params(a: &Args, cfg: &Config) -> Result<TopoParams, String> {
    let mut p = TopoParams::from_config(cfg).map_err(|e| e.to_string())?;
    if let Some(g) = &a.graph_file {
        p.graph_file = Some(g.clone());
    }
    if let Some(c) = a.cross_nic {
        p.cross_nic = c;
    }
    if let Some(n) = a.min_nchannels {
        p.min_nchannels = n;
    }
    if let Some(n) = a.max_nchannels {
        p.max_nchannels = n;
    }
    if let Some(f) = &a.graph_out {
        p.graph_dump_file = Some(f.clone());
    }
    if let Some(f) = &a.topo_out {
        p.topo_dump_file = Some(f.clone());
    }
    p.explain = a.why;
    Ok(p)
}

fn hardware_model(a: &Args) -> Result<HardwareModel, String> {
    let pci_link = match &a.pci_link {
        Some(s) => {
            let (sp, w) = s.rsplit_once(',').ok_or("--pci-link expects SPEED,WIDTH")?;
            Some((sp.to_string(), w.to_string()))
        }
        None => None,
    };
    Ok(HardwareModel {
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
    })
}

/// A loaded tuner and what NCCL does with it at communicator creation.
struct Tuned {
    label: String,
    with: GpuTuning,
    constants_changed: bool,
    ctx: ferroccl::plugin::tuner::TunerContext,
}

fn load_tuner(spec: &str, topo: &CommTopology, base: &GpuTuning, p: &GpuTuneParams) -> Result<Tuned, String> {
    let opts = LoadOptions {
        tuner_plugin: Some(spec.to_string()),
        ..LoadOptions::default()
    };
    let aux = ferroccl::plugin::tuner_profiler::tuner_loader()
        .load_with_net_path(&opts, None)
        .map_err(|e| format!("tuner '{spec}': {e}"))?;
    let adapter = Arc::new(TunerAdapter::from_aux(&aux).map_err(|e| format!("tuner '{spec}': {e}"))?);
    let comm = &topo.comm;
    let mut per_node = vec![0i32; comm.n_nodes.max(1)];
    for &n in &comm.rank_to_node {
        per_node[n] += 1;
    }
    // v5+ init: nvlDomainInfo = {nNodes, min/max local ranks}, the default constants to edit.
    let nvl = NvlDomainInfo {
        n_domains: comm.n_nodes as i32,
        min_ranks: per_node.iter().copied().min().unwrap_or(0),
        max_ranks: per_node.iter().copied().max().unwrap_or(0),
    };
    let mut abi = base.constants.to_abi();
    let ctx = adapter
        .init(0x7e5c_0001, comm.nranks, comm.n_nodes, nvl, &mut abi)
        .map_err(|e| format!("tuner '{spec}' init failed (NCCL fails communicator creation): {e}"))?;
    let mut constants = TunerConstants::nccl_gpu();
    let mut constants_changed = false;
    if adapter.version() >= 5 {
        let back = TunerConstants::from_abi(&abi);
        match back.first_invalid() {
            None => {
                constants_changed = back != constants;
                constants = back;
            }
            Some(bad) => eprintln!("ferroccl-topo: tuner init left an invalid constant ({bad}); keeping the defaults"),
        }
    }
    let with = GpuTuning::new(topo, p, constants);
    let file = adapter.file().map(|f| format!(", {}", f.display())).unwrap_or_default();
    Ok(Tuned {
        label: format!("{} (v{}{file})", adapter.name(), adapter.version()),
        with,
        constants_changed,
        ctx,
    })
}

fn tuner_rows_of(base: &GpuTuning, t: &Tuned, f: Func) -> Result<Vec<TunerRow>, String> {
    let mut call = |f: Func, n: usize, table: &mut [[f32; 3]; 7]| -> Result<i32, String> {
        let before = *table;
        match t.ctx.get_coll_info(f.index(), n, 1, false, table) {
            Ok(info) => Ok(info.nchannels),
            Err(e @ TunerError::Call { .. }) => Err(format!("{} {n} bytes: {e}", f.name())),
            Err(e) => {
                // Writes outside the table: the runtime ignores the tuner for the operation.
                eprintln!("ferroccl-topo: {e}; NCCL's table kept for {} {n} bytes", f.name());
                *table = before;
                Ok(0)
            }
        }
    };
    gpu::tuner_rows(base, &t.with, f, gpu::MIN_BYTES, gpu::MAX_BYTES, &mut call)
}

fn range_json(r: &ChoiceRange) -> Value {
    json!({
        "lo_bytes": r.lo, "hi_bytes": r.hi, "algo": r.algo.name(), "proto": r.proto.name(),
        "time_lo_us": r.t_lo, "time_hi_us": r.t_hi,
    })
}

fn table_json(t: &GpuTuning) -> Value {
    let m = &t.model;
    let mut rows = Vec::new();
    for f in Func::ALL {
        for a in ferroccl::tune::Algorithm::ALL {
            for p in ferroccl::tune::Protocol::ALL {
                let (fi, ai, pi) = (f.index(), a.index(), p.index());
                rows.push(json!({
                    "func": f.name(), "algo": a.name(), "proto": p.name(),
                    "latency_us": m.latencies[fi][ai][pi], "bandwidth_gbs": m.bandwidths[fi][ai][pi],
                    "max_threads": m.max_threads[ai][pi],
                }));
            }
        }
    }
    Value::Array(rows)
}

fn row_json(r: &TunerRow) -> Value {
    json!({
        "lo_bytes": r.lo, "hi_bytes": r.hi,
        "nccl": {"algo": r.nccl.0.name(), "proto": r.nccl.1.name()},
        "tuned": r.tuned.map(|(a, p)| json!({"algo": a.name(), "proto": p.name()})),
        "nchannels": r.nchannels, "changed": r.changed(), "was_unavailable": r.was_ignored,
        "time_lo_us": r.t_lo, "time_hi_us": r.t_hi,
    })
}

fn choice_text(c: Option<(ferroccl::tune::Algorithm, ferroccl::tune::Protocol)>) -> String {
    c.map_or_else(
        || "none available".to_string(),
        |(a, p)| format!("{}/{}", a.name(), p.name()),
    )
}

/// Per collective, the tuner's rows.
type TunerRows = Vec<(Func, Vec<TunerRow>)>;

fn tuning_text(t: &GpuTuning, tuned: Option<(&Tuned, &TunerRows)>) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "\n== Tuning (ncclTopoTuneModel; the table NCCL_DEBUG_SUBSYS=TUNING prints) =="
    );
    let _ = writeln!(o, "{}", t.facts());
    for n in &t.notes {
        let _ = writeln!(o, "{n}");
    }
    for l in table::lines(&t.model) {
        let _ = writeln!(o, "{l}");
    }
    let _ = writeln!(o, "{}", table::thread_thresholds_line(&t.model));
    let _ = writeln!(
        o,
        "\n== Choices (ncclGetAlgoInfo; float32 sum, one operation, no tuner) =="
    );
    for f in Func::ALL {
        let _ = writeln!(o, "{}", f.name());
        for r in t.ranges(f, gpu::MIN_BYTES, gpu::MAX_BYTES) {
            let _ = writeln!(o, "  {r}");
        }
    }
    if let Some((tu, rows)) = tuned {
        let _ = writeln!(o, "\n== Tuner {} ==", tu.label);
        if tu.constants_changed {
            let _ = writeln!(o, "init changed the tuning constants; the model with them:");
            for l in table::lines(&tu.with.model) {
                let _ = writeln!(o, "{l}");
            }
        } else {
            let _ = writeln!(o, "constants unchanged");
        }
        for (f, rows) in rows {
            let _ = writeln!(o, "{}", f.name());
            for r in rows {
                let sizes = format!("{:>5} .. {:<5}", human_size(r.lo), human_size(r.hi));
                let nccl = choice_text(Some(r.nccl));
                if !r.changed() {
                    let _ = writeln!(o, "  {sizes}  {nccl:<20}  (unchanged)");
                    continue;
                }
                let mut extra = Vec::new();
                if r.nchannels != 0 {
                    extra.push(format!("nChannels {}", r.nchannels));
                }
                if r.was_ignored {
                    extra.push("an entry NCCL had unavailable".to_string());
                }
                if let (Some(a), Some(b)) = (r.t_lo, r.t_hi) {
                    extra.push(format!("model {a:.2} .. {b:.2} us"));
                }
                let _ = writeln!(
                    o,
                    "  {sizes}  {nccl:<20}  -> {:<20} {}",
                    choice_text(r.tuned),
                    extra.join(", ")
                );
            }
        }
    }
    o
}

fn run(a: &Args) -> Result<(), String> {
    if a.nodes == 0 {
        return Err("--nodes must be at least 1".into());
    }
    let cfg = Config::global();
    let params = topo_params(a, cfg)?;
    let tune_params = GpuTuneParams::from_config(cfg).map_err(|e| e.to_string())?;
    let path = topo_file(a, &params)?;
    let file = xml::load_file(&path, Schema::Topology).map_err(|e| e.to_string())?;
    let model = hardware_model(a)?;
    let records = model.records(&file, a.nodes).map_err(|e| e.to_string())?;
    let topo = CommTopology::build(&records, &params).map_err(|e| e.to_string())?;
    let name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = GpuTuning::new(&topo, &tune_params, TunerConstants::nccl_gpu());
    let tuner_spec = a
        .tuner
        .clone()
        .or_else(|| {
            cfg.get_str(ferroccl::config::params::TUNER_PLUGIN.name)
                .map(str::to_owned)
        })
        .filter(|s| !s.eq_ignore_ascii_case("none"));
    let tuned = match &tuner_spec {
        Some(spec) => Some(load_tuner(spec, &topo, &base, &tune_params)?),
        None => None,
    };
    let mut rows: TunerRows = Vec::new();
    if let Some(t) = &tuned {
        for f in Func::ALL {
            rows.push((f, tuner_rows_of(&base, t, f)?));
        }
    }
    if a.json {
        let collectives: serde_json::Map<String, Value> = Func::ALL
            .iter()
            .map(|f| {
                let r: Vec<Value> = base
                    .ranges(*f, gpu::MIN_BYTES, gpu::MAX_BYTES)
                    .iter()
                    .map(range_json)
                    .collect();
                (f.name().to_string(), Value::Array(r))
            })
            .collect();
        let comm = &topo.comm;
        let g = |x: &ferroccl::graph::GraphInfo| {
            json!({"nchannels": x.n_channels, "bw_intra": x.bw_intra, "bw_inter": x.bw_inter,
                   "type_intra": x.type_intra.to_string(), "type_inter": x.type_inter.to_string(),
                   "same_channels": x.same_channels, "pattern": x.pattern})
        };
        let mut out = json!({
            "topology": {
                "file": name, "nodes": a.nodes, "nranks": comm.nranks, "nchannels": comm.n_channels,
                "ring": g(&comm.ring), "tree": g(&comm.tree), "nvls": g(&comm.nvls),
                "max_tree_pattern": comm.max_tree_pattern,
            },
            "tuning": {
                "facts": base.facts(), "notes": base.notes,
                "table": table_json(&base),
                "thread_thresholds": base.model.thread_thresholds,
                "min_bytes": gpu::MIN_BYTES, "max_bytes": gpu::MAX_BYTES,
                "collectives": collectives,
            },
        });
        if let Some(t) = &tuned {
            let r: serde_json::Map<String, Value> = rows
                .iter()
                .map(|(f, rs)| (f.name().to_string(), Value::Array(rs.iter().map(row_json).collect())))
                .collect();
            out["tuner"] = json!({
                "plugin": t.label, "constants_changed": t.constants_changed,
                "table": if t.constants_changed { table_json(&t.with) } else { Value::Null },
                "collectives": r,
            });
        }
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?);
    } else {
        let opts = ReportOptions {
            paths: a.paths,
            why: a.why,
        };
        print!("{}", report(&topo, &name, &params, opts).map_err(|e| e.to_string())?);
        print!("{}", tuning_text(&base, tuned.as_ref().map(|t| (t, &rows))));
    }
    // NCCL_GRAPH_DUMP_FILE / NCCL_TOPO_DUMP_FILE: the dumping rank's node.
    if let Some(p) = &params.graph_dump_file {
        let host = topo.comm.rank_to_host.get(params.graph_dump_rank).copied().unwrap_or(0);
        let x = topo.graph_xml(host).map_err(|e| e.to_string())?;
        std::fs::write(p, x).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(p) = &params.topo_dump_file {
        let host = topo.comm.rank_to_host.get(params.topo_dump_rank).copied().unwrap_or(0);
        std::fs::write(p, xml::dump(&topo.hosts[host].fused_xml))
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    if let Some(t) = tuned
        && let Err(e) = t.ctx.finalize()
    {
        eprintln!("ferroccl-topo: tuner finalize: {e}");
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
