//! `ferroccl-info`: what the ferroccl plugin host would load, and why.
//!
//! ```text
//! ferroccl-info plugins            # the full resolution the host does (NCCL_NET_PLUGIN, NCCL_NET, …)
//! ferroccl-info plugins NAME|PATH  # one library: file, exported symbols, devices and properties
//! ferroccl-info ib                 # RDMA HCAs: ports, link layer, state, GID table, the GID index the IB plugin picks
//! ```
//!
//! Options: `--max-version N` caps the `ncclNet` version probed (like
//! `FERROCCL_NET_MAX_VERSION`), `--plugin-path DIR` adds a plugin directory (like
//! `FERROCCL_PLUGIN_PATH`). Exit status 0 when a net plugin is usable, 1 otherwise.
//! Every candidate tried is listed with the reason it was rejected and a hint.

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use ferroccl::plugin::library::{AttemptResult, open_plugin_lib, search_dirs};
use ferroccl::plugin::logger::LogCapture;
use ferroccl::plugin::net::{CommConfig, NetPlugin, Properties};
use ferroccl::plugin::symbols::{PluginType, exported_symbols};
use ferroccl::plugin::tuner_profiler::{AuxKind, AuxLoader};
use ferroccl::plugin::{LoadOptions, LoadedNet, Outcome, PluginError, load_net, load_net_from};

#[derive(Parser, Debug)]
#[command(name = "ferroccl-info", about = "Shows what the ferroccl plugin host loads, and why")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Net/collnet/tuner/profiler/env plugins: resolution, symbols, devices.
    Plugins {
        /// A plugin name (resolved like NCCL_NET_PLUGIN) or a path; omit for the full resolution.
        target: Option<String>,
        /// Newest ncclNet version to probe (6..=12), overrides FERROCCL_NET_MAX_VERSION.
        #[arg(long)]
        max_version: Option<u32>,
        /// Extra plugin directory searched first (repeatable), in addition to FERROCCL_PLUGIN_PATH.
        #[arg(long)]
        plugin_path: Vec<std::path::PathBuf>,
    },
    /// RDMA HCAs as the IB plugin sees them: ports, link layer, state, GID table and chosen GID index.
    Ib,
}

const ENV_VARS: [&str; 8] = [
    "NCCL_NET_PLUGIN",
    "NCCL_NET",
    "FERROCCL_NET_STRICT",
    "FERROCCL_NET_MAX_VERSION",
    "FERROCCL_PLUGIN_PATH",
    "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN",
    "LD_LIBRARY_PATH",
];

fn main() -> ExitCode {
    let (target, max_version, plugin_path) = match Cli::parse().cmd {
        Cmd::Plugins {
            target,
            max_version,
            plugin_path,
        } => (target, max_version, plugin_path),
        Cmd::Ib => return ib_inventory(),
    };
    // Environment over NCCL_CONF_FILE / ~/.nccl.conf over /etc/nccl.conf, as the runtime reads it.
    let opts = match LoadOptions::try_from_config() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut opts = opts;
    if let Some(v) = max_version {
        opts.max_net_version = v;
    }
    let mut dirs = plugin_path;
    dirs.extend(opts.plugin_path);
    opts.plugin_path = dirs;
    println!("environment:");
    for k in ENV_VARS {
        println!(
            "  {k:<26} {}",
            std::env::var(k).map_or_else(|_| "(unset)".into(), |v| format!("{v:?}"))
        );
    }
    println!("plugin directories searched after the dynamic loader:");
    for d in search_dirs(&opts) {
        println!("  {}", d.display());
    }
    println!("ncclNet versions probed: v{} … v6", opts.max_net_version);
    println!();
    let ok = match target {
        Some(t) => inspect_one(&t, &opts),
        None => full_resolution(&opts),
    };
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn print_plugin_log(cap: &LogCapture) {
    let lines = cap.lines();
    if lines.is_empty() {
        return;
    }
    println!("  plugin log:");
    for l in lines {
        let lvl = match l.level {
            2 => "WARN",
            3 => "INFO",
            5 => "TRACE",
            _ => "LOG",
        };
        println!("    {lvl} {}:{} {}", l.file, l.line, l.message);
    }
}

/// `ferroccl-info plugins NAME|PATH`.
fn inspect_one(target: &str, opts: &LoadOptions) -> bool {
    println!("library '{target}':");
    let outcome = open_plugin_lib(target, "libnccl-net", &search_dirs(opts));
    for a in &outcome.attempts {
        let r = match &a.result {
            AttemptResult::Opened => "opened".to_owned(),
            AttemptResult::NotFound(e) => format!("not found ({e})"),
            AttemptResult::Failed(e) => format!("FOUND BUT dlopen FAILED: {e}"),
        };
        let dir = if a.from_search_dir {
            " [ferroccl plugin dir]"
        } else {
            ""
        };
        println!("  tried {}{dir}: {r}", a.file);
    }
    let Some(lib) = outcome.lib else {
        if outcome.failure().is_some() {
            println!("  hint: run `ldd` on the file to find missing dependencies");
        } else {
            println!("  hint: give a full path, or add the directory to LD_LIBRARY_PATH or --plugin-path");
        }
        return false;
    };
    let syms = exported_symbols(&lib);
    let file = syms
        .first()
        .and_then(|s| lib.symbol(&std::ffi::CString::new(s.symbol).ok()?))
        .and_then(ferroccl::plugin::library::PluginLibrary::file_of);
    println!(
        "  file: {}",
        file.map_or_else(|| lib.opened_as().to_owned(), |f| f.display().to_string())
    );
    println!("  exported plugin symbols:");
    for ty in PluginType::ALL {
        let of: Vec<_> = syms.iter().filter(|s| s.ty == ty).collect();
        if of.is_empty() {
            println!("    {:<9} none", ty.as_str());
        } else {
            let vs: Vec<String> = of.iter().map(|s| format!("v{}", s.version)).collect();
            let name = of[0].name.as_deref().unwrap_or("(NULL name)");
            println!(
                "    {:<9} {} (name '{name}'; NCCL 2.30.7 would use {})",
                ty.as_str(),
                vs.join(" "),
                of[0].symbol
            );
        }
    }
    drop(lib);
    println!();
    let cap = LogCapture::start();
    let r = load_net_from(target, opts);
    match r {
        Ok(net) => {
            print_net(&net);
            print_plugin_log(&cap);
            true
        }
        Err(e) => {
            println!("net plugin: NOT USABLE: {e}");
            print_plugin_log(&cap);
            false
        }
    }
}

/// `ferroccl-info plugins`.
fn full_resolution(opts: &LoadOptions) -> bool {
    let cap = LogCapture::start();
    let r = load_net(opts);
    let net = match r {
        Ok(net) => {
            println!("net plugin resolution:");
            print_candidates(&net);
            println!();
            print_net(&net);
            print_plugin_log(&cap);
            Some(net)
        }
        Err(e) => {
            println!("net plugin resolution FAILED: {e}");
            print_plugin_log(&cap);
            if matches!(e, PluginError::NoPlugin { .. } | PluginError::Strict { .. }) {
                println!("  (run `ferroccl-info plugins NAME|PATH` to inspect one candidate)");
            }
            None
        }
    };
    println!();
    for kind in [AuxKind::Tuner, AuxKind::Profiler] {
        let what = if kind == AuxKind::Tuner { "tuner" } else { "profiler" };
        match AuxLoader::new(kind).load(opts, net.as_ref()) {
            Ok(p) => println!(
                "{what}: '{}' ({}{}) from {}",
                p.name,
                p.symbol,
                if p.from_net_library {
                    ", found in the net plugin library"
                } else {
                    ""
                },
                p.file.as_ref().map_or("?".into(), |f| f.display().to_string())
            ),
            Err(e) => println!("{what}: none ({e})"),
        }
    }
    net.is_some()
}

fn print_candidates(net: &LoadedNet) {
    for (i, c) in net.report.candidates.iter().enumerate() {
        println!("  [{i}] {c}");
        if let Outcome::Rejected(r) = &c.outcome
            && let Some(h) = r.hint()
        {
            println!("      hint: {h}");
        }
    }
}

fn print_net(net: &LoadedNet) {
    let p: &Arc<dyn NetPlugin> = &net.plugin;
    let info = p.info();
    println!(
        "net plugin: '{}' ncclNet v{} from {}",
        info.name,
        info.version,
        info.path.display()
    );
    match info.collnet_version {
        Some(v) => println!("collnet: ncclCollNet v{v} exported (ferroccl does not drive CollNet yet)"),
        None => println!("collnet: none"),
    }
    println!("regMrDmaBuf: {}", if p.has_dmabuf() { "present" } else { "absent" });
    // Query devices with a context open, as NCCL does (devices/getProperties run
    // between a communicator's init and finalize, src/plugin/net.cc): a v11/v12
    // plugin may tear down its device state when its last context is finalized,
    // and the host's load check already finalized its probe context.
    let ctx = match p.init_ctx(0, &CommConfig::default()) {
        Ok(c) => Some(c),
        Err(e) => {
            println!("devices: init (a context to query devices in) failed: {e}");
            None
        }
    };
    if ctx.is_some() {
        match p.devices() {
            Ok(n) => {
                println!("devices: {n}");
                for d in 0..n {
                    match p.properties(d) {
                        Ok(props) => print_props(d, &props),
                        Err(e) => println!("  dev {d}: getProperties failed: {e}"),
                    }
                }
            }
            Err(e) => println!("devices: failed: {e}"),
        }
    }
    if let Some(c) = ctx
        && let Err(e) = p.finalize_ctx(c)
    {
        println!("finalize of the query context failed: {e}");
    }
}

fn print_props(d: usize, p: &Properties) {
    let mut ptr = Vec::new();
    for (bit, n) in [(1, "HOST"), (2, "CUDA"), (4, "DMABUF")] {
        if p.ptr_support & bit != 0 {
            ptr.push(n);
        }
    }
    println!("  dev {d}: {}", p.name);
    println!(
        "    pciPath            {}",
        p.pci_path.as_deref().unwrap_or("(none: virtual device)")
    );
    println!("    guid               {:#x}", p.guid);
    println!("    ptrSupport         {:#x} ({})", p.ptr_support, ptr.join("|"));
    println!("    regIsGlobal        {}", p.reg_is_global);
    println!("    forceFlush         {}", p.force_flush);
    println!("    speed              {} Mbps", p.speed);
    println!("    port               {}", p.port);
    println!("    latency            {} us", p.latency);
    println!("    maxComms           {}", p.max_comms);
    println!("    maxRecvs           {}", p.max_recvs);
    println!(
        "    netDeviceType      {} (version {})",
        p.net_device_type, p.net_device_version
    );
    println!("    vProps.devs        {:?}", p.vdevs);
    println!("    maxP2pBytes        {}", p.max_p2p_bytes);
    println!("    maxCollBytes       {}", p.max_coll_bytes);
    println!("    maxMultiRequestSize {}", p.max_multi_request_size);
    println!("    railId / planeId   {} / {}", p.rail_id, p.plane_id);
}

/// `ferroccl-info ib`: every HCA, port and GID, and what the IB plugin
/// (`libnccl-net-ib.so`) would pick under the current `NCCL_IB_*` variables.
/// Exit status 0 when at least one port is usable by the plugin.
fn ib_inventory() -> ExitCode {
    use nccl_net_ib::{inventory, params::IbParams};
    println!("environment:");
    for k in [
        "NCCL_IB_HCA",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_ADDR_FAMILY",
        "NCCL_IB_ADDR_RANGE",
        "NCCL_IB_ROCE_VERSION_NUM",
    ] {
        println!(
            "  {k:<26} {}",
            std::env::var(k).map_or_else(|_| "(unset)".into(), |v| format!("{v:?}"))
        );
    }
    let params = match IbParams::from_env() {
        Ok(p) => p,
        Err(e) => {
            println!("IB plugin parameters rejected: {e}");
            return ExitCode::FAILURE;
        }
    };
    let hcas = match inventory::inventory(&params) {
        Ok(h) => h,
        Err(e) => {
            println!("no libibverbs / no RDMA devices: {e}");
            return ExitCode::FAILURE;
        }
    };
    if hcas.is_empty() {
        println!(
            "no libibverbs / no RDMA devices: ibv_get_device_list found none (no HCA, or rdma_rxe/mlx5_ib not loaded)"
        );
        return ExitCode::FAILURE;
    }
    let mut usable = 0;
    for h in &hcas {
        println!(
            "HCA {}  guid {:#018x}  pciPath {}",
            h.name,
            h.guid,
            h.pci_path.as_deref().unwrap_or("(none: virtual device)")
        );
        let ports = match &h.ports {
            Ok(p) => p,
            Err(e) => {
                println!("  cannot query: {e}");
                continue;
            }
        };
        for p in ports {
            println!(
                "  port {}: state {}, link layer {}, MTU {}, {} Mbps, LID {}",
                p.port, p.state, p.link_layer, p.mtu, p.speed_mbps, p.lid
            );
            let chosen = p.plugin_choice.as_ref().ok().map(|c| c.0);
            for g in &p.gids {
                let ver = g.roce_version.map_or_else(String::new, |v| format!("RoCE v{v}"));
                println!(
                    "    {} GID[{:>3}] {:<40} {:<8} {}",
                    if chosen == Some(g.index) { "*" } else { " " },
                    g.index,
                    std::net::Ipv6Addr::from(g.gid).to_string(),
                    ver,
                    g.ndev.as_deref().unwrap_or("")
                );
            }
            match &p.plugin_choice {
                Ok((i, why)) => {
                    usable += 1;
                    println!("    plugin uses GID index {i}: {why}");
                }
                Err(why) => println!("    plugin: {why}"),
            }
        }
    }
    println!("{usable} port(s) usable by the IB plugin");
    if usable > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
