//! `ferroccl-info`: what the ferroccl plugin host would load, and why.
//!
//! ```text
//! ferroccl-info plugins            # the full resolution the host does (NCCL_NET_PLUGIN, NCCL_NET, …)
//! ferroccl-info plugins NAME|PATH  # one library: file, exported symbols, devices and properties
//! ferroccl-info params [--json]    # every NCCL_*/FERROCCL_* parameter (runtime and in-tree plugins): type, default, range, value, source
//! ferroccl-info ib                 # RDMA HCAs: ports, link layer, state, GID table, the GID index the IB plugin picks
//! ```
//!
//! `ib` asks the IB plugin itself: it `dlopen`s `libnccl-net-ib.so` (found like
//! `NCCL_NET_PLUGIN=ib`, or `--plugin NAME|PATH`) and calls its
//! `ferrocclIbInventory_v1` export, so this tool builds without rdma-core headers
//! and reports plainly when the plugin or libibverbs is missing.
//!
//! Options: `--max-version N` caps the `ncclNet` version probed (like
//! `FERROCCL_NET_MAX_VERSION`), `--plugin-path DIR` adds a plugin directory (like
//! `FERROCCL_PLUGIN_PATH`). Exit status 0 when a net plugin is usable, 1 otherwise.
//! Every candidate tried is listed with the reason it was rejected and a hint.

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use ferroccl::config::params;
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
    /// Net/collnet/tuner/profiler/env plugins (and GIN/RMA tables): resolution, symbols, devices.
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
    /// Every parameter, the runtime's and each in-tree plugin's (asked from the built
    /// plugin library): type, default, range, current value and its source
    /// (environment, NCCL_CONF_FILE, ~/.nccl.conf, /etc/nccl.conf, default).
    Params {
        /// One JSON list instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// RDMA HCAs as the IB plugin sees them: ports, link layer, state, GID table and chosen GID index.
    Ib {
        /// The IB plugin to ask (resolved like NCCL_NET_PLUGIN): default `ib`, i.e. libnccl-net-ib.so.
        #[arg(long, default_value = "ib")]
        plugin: String,
        /// Extra plugin directory searched first (repeatable), in addition to FERROCCL_PLUGIN_PATH.
        #[arg(long)]
        plugin_path: Vec<std::path::PathBuf>,
    },
}

const ENV_VARS: [&str; 8] = [
    params::NET_PLUGIN.name,
    params::NET.name,
    params::NET_STRICT.name,
    params::NET_MAX_VERSION.name,
    params::PLUGIN_PATH.name,
    params::TUNER_PLUGIN.name,
    params::PROFILER_PLUGIN.name,
    "LD_LIBRARY_PATH",
];

fn main() -> ExitCode {
    let (target, max_version, plugin_path) = match Cli::parse().cmd {
        Cmd::Plugins {
            target,
            max_version,
            plugin_path,
        } => (target, max_version, plugin_path),
        Cmd::Ib { plugin, plugin_path } => return ib_inventory(&plugin, plugin_path),
        Cmd::Params { json } => return list_params(json),
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
    print_gpu();
    println!();
    let ok = match target {
        Some(t) => inspect_one(&t, &opts),
        None => full_resolution(&opts),
    };
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The CUDA driver and the NVRTC that compiles the device kernels: which
/// library was loaded, from where, and its version (`nvrtcVersion`), or why
/// none (one line each).
fn print_gpu() {
    use ferroccl_kernels::cuda;
    match cuda::driver_info() {
        Ok(d) => println!(
            "cuda driver: {}.{} ({} device(s))",
            d.version / 1000,
            (d.version % 1000) / 10,
            d.devices
        ),
        Err(e) => println!("cuda driver: none ({e})"),
    }
    match cuda::nvrtc_info() {
        Ok(n) => println!(
            "nvrtc: {}.{} from {} (loaded as {})",
            n.version.0,
            n.version.1,
            n.path
                .as_deref()
                .map_or_else(|| "?".into(), |p| p.display().to_string()),
            n.found_by
        ),
        Err(e) => println!("nvrtc: none ({e})"),
    }
}

/// `ferroccl-info params`: read exactly as the runtime reads (environment over
/// `NCCL_CONF_FILE` or `~/.nccl.conf` over `/etc/nccl.conf`, then through the
/// env plugin `NCCL_ENV_PLUGIN` if one loads), each value with its own source;
/// the in-tree plugins' parameters are asked from their libraries, and a plugin
/// that cannot be asked is named on stderr, as are the env plugin's loading
/// lines. Exit status 1 when a set value is invalid or the env plugin's `init`
/// failed.
fn list_params(json: bool) -> ExitCode {
    let conf_file = std::env::var(params::CONF_FILE.name).ok();
    let cfg = ferroccl::config::Config::global();
    for w in cfg.warnings() {
        eprintln!("warning: {w}");
    }
    for l in cfg.env_plugin_info() {
        eprintln!("env plugin: {l}");
    }
    let env_error = cfg.env_plugin_result().err();
    if let Some(e) = &env_error {
        eprintln!("error: {e}");
    }
    let (list, missing) = ferroccl_examples::params::plugin_params(cfg);
    for m in missing {
        eprintln!("warning: {m}");
    }
    let rows = ferroccl_examples::params::rows(cfg, conf_file.as_deref(), &list);
    if json {
        match serde_json::to_string_pretty(&rows) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", ferroccl_examples::params::render(&rows));
    }
    if rows.iter().any(|r| r.error.is_some()) || env_error.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
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
    if let Some(n) = &net {
        print_gin_tables(&n.plugin.info().path);
        print_rma_tables(&n.plugin.info().path);
    }
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

/// The GIN tables (`ncclGinPlugin_v14`/`_v13`) in the net plugin's library: NCCL
/// 2.30.7 looks there after `NCCL_GIN_PLUGIN` (`src/plugin/gin.cc`,
/// `initPluginLibsOnceFunc`). ferroccl inspects them (`ferroccl-conformance --gin`)
/// but hosts no GIN device path.
fn print_gin_tables(path: &std::path::Path) {
    let Some(lib) = open_plugin_lib(&path.to_string_lossy(), "libnccl-net", &[]).lib else {
        return;
    };
    let gin: Vec<_> = exported_symbols(&lib)
        .into_iter()
        .filter(|s| s.ty == PluginType::Gin)
        .collect();
    match gin.first() {
        None => println!("gin: none in the net plugin library"),
        Some(first) => {
            let vs: Vec<String> = gin.iter().map(|s| format!("v{}", s.version)).collect();
            println!(
                "gin: '{}' {} in the net plugin library (NCCL 2.30.7 would use {}; inspected, not hosted)",
                first.name.as_deref().unwrap_or("(NULL name)"),
                vs.join(" "),
                first.symbol
            );
        }
    }
}

/// The RMA tables (`ncclRmaPlugin_v14`/`_v13`) in the net plugin's library: NCCL
/// 2.30.7 looks there after `NCCL_RMA_PLUGIN` / `libnccl-rma.so` and the GIN library
/// (`src/plugin/rma.cc`, `ncclRmaPluginLoad`). Hosted by `ferroccl::plugin::rma`,
/// checked by `ferroccl-conformance --rma`.
fn print_rma_tables(path: &std::path::Path) {
    let Some(lib) = open_plugin_lib(&path.to_string_lossy(), "libnccl-net", &[]).lib else {
        return;
    };
    let rma: Vec<_> = exported_symbols(&lib)
        .into_iter()
        .filter(|s| s.ty == PluginType::Rma)
        .collect();
    match rma.first() {
        None => println!("rma: none in the net plugin library"),
        Some(first) => {
            let vs: Vec<String> = rma.iter().map(|s| format!("v{}", s.version)).collect();
            println!(
                "rma: '{}' {} in the net plugin library (NCCL 2.30.7 would use {})",
                first.name.as_deref().unwrap_or("(NULL name)"),
                vs.join(" "),
                first.symbol
            );
        }
    }
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
    match p.collnet() {
        Some(cn) => println!(
            "collnet: '{}' ncclCollNet v{} ({})",
            cn.info().name,
            cn.info().version,
            cn.state()
        ),
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
/// (`libnccl-net-ib.so`) would pick under the current `NCCL_IB_*` variables, as
/// reported by the plugin's `ferrocclIbInventory_v1` export (JSON schema
/// `ferroccl-ib-inventory/1`, see `plugins/net-ib/src/inventory.rs`).
/// Exit status 0 when at least one port is usable by the plugin.
fn ib_inventory(plugin: &str, plugin_path: Vec<std::path::PathBuf>) -> ExitCode {
    let report = match ib_report(plugin, plugin_path) {
        Ok(r) => r,
        Err(why) => {
            println!("cannot inventory RDMA devices: {why}");
            return ExitCode::FAILURE;
        }
    };
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    if let Some(lib) = text(&report["verbs_library"]) {
        println!("libibverbs: {lib}");
    }
    for w in report["warnings"].as_array().into_iter().flatten() {
        println!("warning: {}", w.as_str().unwrap_or_default());
    }
    if let Some(e) = text(&report["error"]) {
        println!("cannot inventory RDMA devices: {e}");
        return ExitCode::FAILURE;
    }
    let hcas = report["hcas"].as_array().cloned().unwrap_or_default();
    if hcas.is_empty() {
        println!("no RDMA devices: ibv_get_device_list found none (no HCA, or rdma_rxe/mlx5_ib not loaded)");
        return ExitCode::FAILURE;
    }
    let mut usable = 0;
    for h in &hcas {
        println!(
            "HCA {}  guid {:#018x}  pciPath {}",
            h["name"].as_str().unwrap_or("?"),
            h["guid"].as_u64().unwrap_or(0),
            h["pci_path"].as_str().unwrap_or("(none: virtual device)")
        );
        if let Some(e) = text(&h["error"]) {
            println!("  cannot query: {e}");
            continue;
        }
        for p in h["ports"].as_array().into_iter().flatten() {
            println!(
                "  port {}: state {}, link layer {}, MTU {}, {} Mbps, LID {}",
                p["port"],
                p["state"].as_str().unwrap_or("?"),
                p["link_layer"].as_str().unwrap_or("?"),
                p["mtu"],
                p["speed_mbps"],
                p["lid"]
            );
            let chosen = p["gid_index"].as_u64();
            for g in p["gids"].as_array().into_iter().flatten() {
                let index = g["index"].as_u64();
                let ver = g["roce_version"]
                    .as_u64()
                    .map_or_else(String::new, |v| format!("RoCE v{v}"));
                println!(
                    "    {} GID[{:>3}] {:<40} {:<8} {}",
                    if chosen.is_some() && chosen == index { "*" } else { " " },
                    index.unwrap_or(0),
                    g["gid"].as_str().unwrap_or("?"),
                    ver,
                    g["ndev"].as_str().unwrap_or("")
                );
            }
            let reason = p["reason"].as_str().unwrap_or("");
            match chosen {
                Some(i) => {
                    usable += 1;
                    println!("    plugin uses GID index {i}: {reason}");
                }
                None => println!("    plugin: {reason}"),
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

/// Name of the IB plugin's inventory export (`plugins/net-ib/src/inventory.rs`).
const IB_INVENTORY_SYMBOL: &std::ffi::CStr = c"ferrocclIbInventory_v1";
/// The JSON schema this tool understands.
const IB_REPORT_SCHEMA: &str = "ferroccl-ib-inventory/1";

/// `ferrocclIbInventory_v1(sink, arg)`, see `nccl_net_ib::inventory`.
type IbInventoryFn = unsafe extern "C" fn(
    sink: Option<unsafe extern "C" fn(*mut std::ffi::c_void, *const std::ffi::c_char, usize)>,
    arg: *mut std::ffi::c_void,
) -> ferroccl_plugin_api::abi::ncclResult_t;

/// Copies the document into the `Vec<u8>` behind `arg`.
///
/// # Safety
/// `arg` is a `*mut Vec<u8>`; `json` points to `len` readable bytes (or `len` is 0).
unsafe extern "C" fn collect_json(arg: *mut std::ffi::c_void, json: *const std::ffi::c_char, len: usize) {
    if arg.is_null() || (json.is_null() && len > 0) {
        return;
    }
    // SAFETY: per the contract above; `arg` is the `Vec<u8>` ib_report passed.
    let out = unsafe { &mut *arg.cast::<Vec<u8>>() };
    if len > 0 {
        // SAFETY: `json` points to `len` bytes valid for the duration of this call.
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(json.cast::<u8>(), len) });
    }
}

/// Prints the plugin's parameters (its `ferrocclParams_v1` export: the
/// `NCCL_IB_*` variables as the plugin declares them) with their values in the
/// environment.
fn print_plugin_environment(lib: &ferroccl::plugin::library::PluginLibrary) {
    println!("environment:");
    match ferroccl::plugin::params::exported_params(lib) {
        Some(Ok(ps)) => {
            for p in ps {
                println!(
                    "  {:<26} {}",
                    p.name(),
                    std::env::var(p.name()).map_or_else(|_| "(unset)".into(), |v| format!("{v:?}"))
                );
            }
        }
        Some(Err(e)) => println!("  (the plugin's parameters cannot be read: {e})"),
        None => println!("  (the plugin does not export its parameters: an older build)"),
    }
}

/// Loads the IB plugin, prints its parameters' values ([`print_plugin_environment`])
/// and returns its inventory document, or why that is impossible (plugin not
/// found or not loadable, no such export, bad document).
fn ib_report(plugin: &str, plugin_path: Vec<std::path::PathBuf>) -> Result<serde_json::Value, String> {
    let mut opts = LoadOptions::try_from_lookup(|k| std::env::var(k).ok()).map_err(|e| e.to_string())?;
    let mut dirs = plugin_path;
    dirs.extend(opts.plugin_path);
    opts.plugin_path = dirs;
    let outcome = open_plugin_lib(plugin, "libnccl-net", &search_dirs(&opts));
    let Some(lib) = &outcome.lib else {
        return Err(format!(
            "the IB plugin '{plugin}' could not be loaded; tried {}. The inventory comes from the plugin: \
             build it with `cargo xtask dist` (needs rdma-core headers: libibverbs-dev librdmacm-dev libclang-dev pkg-config) \
             and put target/dist/lib on LD_LIBRARY_PATH, or name it with --plugin PATH",
            outcome.tried()
        ));
    };
    print_plugin_environment(lib);
    let Some(sym) = lib.symbol(IB_INVENTORY_SYMBOL) else {
        return Err(format!(
            "{} does not export {} (not ferroccl's IB plugin, or a build older than this tool)",
            lib.opened_as(),
            IB_INVENTORY_SYMBOL.to_string_lossy()
        ));
    };
    // SAFETY: the symbol is the IB plugin's `ferrocclIbInventory_v1`, whose C
    // signature is `IbInventoryFn`; `lib` stays open while it runs.
    let f: IbInventoryFn = unsafe { std::mem::transmute::<*const std::ffi::c_void, IbInventoryFn>(sym) };
    let mut buf: Vec<u8> = Vec::new();
    // SAFETY: `collect_json` matches the sink signature and `buf` outlives the call.
    let rc = unsafe { f(Some(collect_json), (&raw mut buf).cast()) };
    if rc != ferroccl_plugin_api::abi::ncclResult_t::ncclSuccess {
        return Err(format!(
            "{}: {} returned {rc:?}",
            lib.opened_as(),
            IB_INVENTORY_SYMBOL.to_string_lossy()
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&buf)
        .map_err(|e| format!("{}: the inventory is not valid JSON: {e}", lib.opened_as()))?;
    if v["schema"] != IB_REPORT_SCHEMA {
        return Err(format!(
            "{}: inventory schema {} where this tool reads {IB_REPORT_SCHEMA:?}",
            lib.opened_as(),
            v["schema"]
        ));
    }
    Ok(v)
}
