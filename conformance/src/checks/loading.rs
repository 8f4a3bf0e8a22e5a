//! Loading: symbols, name, init with the host logger, devices, per-comm contexts, reload.

use ferroccl::plugin::net::CommConfig;

use crate::cx::Cx;
use crate::loader::Probe;
use crate::outcome::Res;
use crate::registry::Registry;
use crate::watch::Call;
use crate::{ensure, fail};

pub(crate) fn register(r: &mut Registry) {
    r.add_probe(
        "load.symbols",
        "§5.2",
        "the library exports ncclNetPlugin_vN for the version under test (reported: every version found)",
        symbols,
    )
    .nccl("src/plugin/net.cc: dlsym ncclNetPlugin_v12 ... _v6, the first symbol found wins");
    r.add_probe(
        "load.name",
        "§1.3",
        "the vtable name is a non-NULL, non-empty C string without spaces",
        name,
    )
    .nccl("src/plugin/net.cc: NCCL_NET / ncclConfig_t.netName is compared with ncclNet->name, case-insensitively");
    r.add(
        "load.init",
        "§1.5",
        "init succeeds with the host's ncclDebugLogger_t and devices() reports at least 1 device (src/plugin/net.cc: an init error or 0 devices disables the plugin; every other check depends on this one)",
        init,
    )
    .nccl("src/plugin/net.cc ncclNetInit: an init error, a devices() error or ndev <= 0 disables the plugin");
    r.add(
        "load.logger",
        "§4.3",
        "the plugin logs through the logger passed to init (messages arrive)",
        logger,
    )
    .advisory()
    .nccl("src/plugin/net.cc: init(&netContext, commHash, &config, ncclDebugLog, ncclProfilerCallback)");
    r.add(
        "load.ctx_cycles",
        "§1.5",
        "init(ctx)/finalize(ctx) can be repeated per communicator, and each ctx works",
        ctx_cycles,
    )
    .since(11)
    .nccl("src/plugin/net.cc: v11+ init(&comm->netContext, ...) for every communicator, finalize(netContext) at its destruction");
    r.add(
        "load.ctx_last_finalize",
        "§1.5",
        "after the last context is finalized, init(ctx) works again and the plugin is fully usable, 5 times (NCCL: init per communicator, finalize at its destruction; src/plugin/net.cc)",
        ctx_last_finalize,
    )
    .since(11)
    .nccl("src/plugin/net.cc: v11+ finalize(netContext) at every communicator's destruction, init again for the next one");
    r.add(
        "load.reload",
        "§5.2",
        "finalize, then loading the library again, works (devices and properties again)",
        reload,
    )
    .nccl("src/plugin/net.cc ncclNetFinalize: the last user dlcloses an external library; the next communicator loads and inits it again");
}

fn symbols(p: &Probe, v: u32) -> Res {
    let found: Vec<String> = p.versions.iter().map(|x| format!("v{}", x.version)).collect();
    ensure!(
        p.versions.iter().any(|x| x.version == v),
        format!("symbol ncclNetPlugin_v{v} is exported"),
        "{} exports {}",
        p.path,
        if found.is_empty() {
            "no ncclNetPlugin_vN symbol".to_owned()
        } else {
            found.join(", ")
        }
    );
    Ok(())
}

fn name(p: &Probe, v: u32) -> Res {
    let entry = p
        .versions
        .iter()
        .find(|x| x.version == v)
        .ok_or_else(|| fail!(format!("ncclNetPlugin_v{v} is exported"), "not exported"))?;
    match &entry.name {
        None => Err(fail!(
            "name is a non-NULL C string (NCCL matches NCCL_NET against it and prints it)",
            "ncclNetPlugin_v{v}.name is NULL"
        )),
        Some(n) if n.is_empty() => Err(fail!("name is non-empty", "ncclNetPlugin_v{v}.name is an empty string")),
        Some(n) if n.chars().any(char::is_whitespace) => Err(fail!(
            "name has no spaces (NCCL_NET=<name> selects it)",
            "ncclNetPlugin_v{v}.name is {n:?}"
        )),
        Some(_) => Ok(()),
    }
}

fn init(cx: &mut Cx, _: u64) -> Res {
    ensure!(
        cx.ndev >= 1,
        "devices() >= 1 after a successful init (0 devices disables the plugin, §1.5)",
        "devices() = {}",
        cx.ndev
    );
    let n = cx.call(Call::Devices, "devices", |n| n.devices())?;
    ensure!(
        n == cx.ndev,
        "devices() is stable",
        "devices() returned {} at load, {n} now",
        cx.ndev
    );
    cx.notes.push(format!("{} device(s)", n));
    Ok(())
}

fn logger(cx: &mut Cx, _: u64) -> Res {
    ensure!(
        cx.init_log_lines > 0,
        "the plugin reports through the ncclDebugLogger_t it was given (NCCL_DEBUG=INFO is how users debug it)",
        "no message arrived through the logger during load and init"
    );
    cx.notes.push(format!("{} log line(s) during init", cx.init_log_lines));
    Ok(())
}

fn ctx_cycles(cx: &mut Cx, _: u64) -> Res {
    for i in 0..4u64 {
        let ctx = cx.call(Call::Init, "init (per-communicator)", |n| {
            n.init_ctx(0x1000 + i, &CommConfig::default())
        })?;
        let saved = cx.ctx;
        cx.ctx = ctx;
        let r = cx.pair().and_then(|p| {
            cx.roundtrip(&p, 4096, 4096, i)?;
            cx.close_pair(p)
        });
        cx.ctx = saved;
        r?;
        cx.call(Call::Finalize, "finalize", |n| n.finalize_ctx(ctx))?;
    }
    Ok(())
}

fn ctx_last_finalize(cx: &mut Cx, _: u64) -> Res {
    // Finalize the worker's own context: no context is live now, and a plugin
    // may tear everything down (NCCL finalizes at every communicator's end).
    let own = cx.ctx;
    cx.call(Call::Finalize, "finalize of the only live context", |n| {
        n.finalize_ctx(own)
    })?;
    for i in 0..5u64 {
        let what = format!("cycle {} of 5 after the last finalize", i + 1);
        let ctx = cx.call(Call::Init, &format!("init ({what})"), |n| {
            n.init_ctx(0x2000 + i, &CommConfig::default())
        })?;
        cx.ctx = ctx;
        let n = cx.call(Call::Devices, &format!("devices ({what})"), |n| n.devices())?;
        ensure!(
            n == cx.ndev,
            "the same device count after init again",
            "{} devices first, {n} in {what}",
            cx.ndev
        );
        let dev = cx.dev;
        cx.call(Call::GetProperties, &format!("getProperties ({what})"), |n| {
            n.properties(dev)
        })?;
        let p = cx.pair()?;
        cx.roundtrip(&p, 4096 + i as usize, 8192, 40 + i)?;
        cx.close_pair(p)?;
        cx.call(Call::Finalize, &format!("finalize ({what})"), |n| n.finalize_ctx(ctx))?;
    }
    // Leave a live context for the worker's end.
    cx.ctx = cx.call(Call::Init, "init (final)", |n| {
        n.init_ctx(0x3000, &CommConfig::default())
    })?;
    Ok(())
}

fn reload(cx: &mut Cx, _: u64) -> Res {
    let ctx = cx.ctx;
    cx.call(Call::Finalize, "finalize", |n| n.finalize_ctx(ctx))?;
    let g = crate::watch::enter(Call::Init);
    let again = crate::loader::load(&cx.plugin, cx.version);
    drop(g);
    let net = again.map_err(|e| fail!("the plugin loads again after finalize", "second load failed: {e}"))?;
    cx.net = net;
    cx.ctx = cx.call(Call::Init, "init (after reload)", |n| {
        n.init_ctx(1, &CommConfig::default())
    })?;
    let n = cx.call(Call::Devices, "devices (after reload)", |n| n.devices())?;
    ensure!(
        n == cx.ndev,
        "the same device count after reloading",
        "{} devices first, {n} after reload",
        cx.ndev
    );
    let dev = cx.dev;
    cx.call(Call::GetProperties, "getProperties (after reload)", |n| {
        n.properties(dev)
    })?;
    let p = cx.pair()?;
    cx.roundtrip(&p, 1000, 1000, 7)?;
    cx.close_pair(p)
}
