//! The GIN checks: the host-side calls of a GIN table, made as NCCL 2.30.7 makes
//! them (`src/plugin/gin.cc`), through the table's typed slots
//! ([`ferroccl_plugin_api::abi::GinHostSlots`]).

use std::ffi::{CStr, c_int, c_void};

use ferroccl_plugin_api::abi::{
    GinHostSlots, NCCL_NET_DEVICE_GIN_GDAKI, NCCL_NET_DEVICE_GIN_GPI, NCCL_NET_DEVICE_GIN_PROXY,
    ncclGinProperties_v14_t, ncclNetProperties_v12_t, ncclResult_t,
};

use super::worker::enter;
use crate::outcome::Res;
use crate::registry::Level;
use crate::{ensure, fail};

/// What a check body works with: the table's host-side slots (the library stays
/// open for the worker's life).
#[derive(Debug)]
pub struct GinCx {
    /// The slots of the table under test.
    pub slots: GinHostSlots,
    /// API version under test (13 or 14).
    pub version: u32,
    /// Extra observations for the report.
    pub notes: Vec<String>,
}

/// One GIN check.
pub type GinCheck = crate::section::SectionCheck<GinCx>;

/// Every GIN check, in run order.
pub fn all() -> Vec<GinCheck> {
    let c = |id, rule, body| GinCheck {
        id,
        section: "§GIN",
        rule,
        level: Level::Required,
        min_version: 13,
        max_version: 14,
        body,
    };
    vec![
        c(
            "gin.load",
            "the table has a non-NULL, non-empty name and non-NULL init, devices, getProperties, finalize (v14: getGinProperties)",
            load,
        ),
        c(
            "gin.init",
            "init(&ctx, commHash, logger) succeeds, and finalize(ctx) then succeeds (gin.cc ncclGinPluginInit / ncclGinPluginFinalize)",
            init,
        ),
        c(
            "gin.devices",
            "devices succeeds after init with a count in 0..=64 (gin.cc: ndev <= 0 disables the table)",
            devices,
        ),
        c(
            "gin.properties",
            "getProperties succeeds for every device with a name and a GIN netDeviceType (GIN_PROXY, GIN_GDAKI or GIN_GPI); v14 getGinProperties succeeds",
            properties,
        ),
    ]
}

fn name_of(r: ncclResult_t) -> String {
    r.name().to_string()
}

/// `init(&ctx, 0x61A0 + n, logger)`.
fn init_ctx(cx: &GinCx, n: u64) -> Res<*mut c_void> {
    let Some(init) = cx.slots.init else {
        return Err(fail!("a non-NULL init slot", "init is NULL"));
    };
    let mut ctx: *mut c_void = std::ptr::null_mut();
    let r = {
        let _g = enter("init");
        // SAFETY: the table's init slot, called with NCCL's arguments (a valid
        // out-pointer, a commHash, the host's logger).
        unsafe { init(&mut ctx, 0x61A0 + n, Some(ferroccl::plugin::logger::nccl_logger())) }
    };
    ensure!(
        r.is_success(),
        "init succeeds (NCCL disables a GIN table whose init fails)",
        "init returned {}",
        name_of(r)
    );
    Ok(ctx)
}

fn finalize(cx: &GinCx, ctx: *mut c_void) -> Res {
    let Some(f) = cx.slots.finalize else {
        return Err(fail!("a non-NULL finalize slot", "finalize is NULL"));
    };
    let r = {
        let _g = enter("finalize");
        // SAFETY: the context this table's init returned.
        unsafe { f(ctx) }
    };
    ensure!(
        r.is_success(),
        "finalize(ctx) succeeds",
        "finalize returned {}",
        name_of(r)
    );
    Ok(())
}

fn ndev(cx: &GinCx) -> Res<c_int> {
    let Some(devices) = cx.slots.devices else {
        return Err(fail!("a non-NULL devices slot", "devices is NULL"));
    };
    let mut n: c_int = -1;
    let r = {
        let _g = enter("devices");
        // SAFETY: a valid out-pointer.
        unsafe { devices(&mut n) }
    };
    ensure!(
        r.is_success(),
        "devices succeeds after init",
        "devices returned {}",
        name_of(r)
    );
    ensure!(
        (0..=64).contains(&n),
        "devices reports a count in 0..=64",
        "devices reported {n}"
    );
    Ok(n)
}

fn load(cx: &mut GinCx) -> Res {
    let s = &cx.slots;
    ensure!(!s.name.is_null(), "a non-NULL name (NCCL logs it)", "name is NULL");
    // SAFETY: a non-NULL name of a plugin table is a NUL-terminated string the library keeps.
    let name = unsafe { CStr::from_ptr(s.name) }.to_string_lossy().into_owned();
    ensure!(!name.is_empty(), "a non-empty name", "name is \"\"");
    let mut missing = Vec::new();
    for (slot, set) in [
        ("init", s.init.is_some()),
        ("devices", s.devices.is_some()),
        ("getProperties", s.get_properties.is_some()),
        ("finalize", s.finalize.is_some()),
        ("getGinProperties", cx.version < 14 || s.get_gin_properties.is_some()),
    ] {
        if !set {
            missing.push(slot);
        }
    }
    ensure!(
        missing.is_empty(),
        "NCCL calls these slots unconditionally",
        "NULL slot(s): {}",
        missing.join(", ")
    );
    cx.notes.push(format!("name '{name}'"));
    Ok(())
}

fn init(cx: &mut GinCx) -> Res {
    let ctx = init_ctx(cx, 1)?;
    finalize(cx, ctx)?;
    // NCCL inits once per communicator: a second context after the first is gone.
    let ctx = init_ctx(cx, 2)?;
    finalize(cx, ctx)
}

fn devices(cx: &mut GinCx) -> Res {
    let ctx = init_ctx(cx, 3)?;
    let n = ndev(cx)?;
    cx.notes.push(format!("{n} device(s)"));
    finalize(cx, ctx)
}

fn properties(cx: &mut GinCx) -> Res {
    let ctx = init_ctx(cx, 4)?;
    let n = ndev(cx)?;
    if n == 0 {
        finalize(cx, ctx)?;
        return Err(crate::outcome::Stop::Skip(
            "devices reported 0: NCCL disables the table and reads no properties".into(),
        ));
    }
    let Some(get) = cx.slots.get_properties else {
        return Err(fail!("a non-NULL getProperties slot", "getProperties is NULL"));
    };
    for d in 0..n {
        let mut p = ncclNetProperties_v12_t::zeroed();
        let r = {
            let _g = enter("getProperties");
            // SAFETY: a valid, zeroed properties struct of the v12 layout the table declares.
            unsafe { get(d, &mut p) }
        };
        ensure!(
            r.is_success(),
            "getProperties succeeds for every device",
            "getProperties({d}) returned {}",
            name_of(r)
        );
        ensure!(
            !p.name.is_null(),
            "every device has a name",
            "getProperties({d}) left name NULL"
        );
        ensure!(
            [
                NCCL_NET_DEVICE_GIN_PROXY,
                NCCL_NET_DEVICE_GIN_GDAKI,
                NCCL_NET_DEVICE_GIN_GPI
            ]
            .contains(&p.netDeviceType),
            "netDeviceType is a GIN type: GIN_PROXY (2), GIN_GDAKI (3) or GIN_GPI (4) (gin.cc ncclGinPluginAssignToComm takes it as the GIN type)",
            "getProperties({d}) reported netDeviceType {}",
            p.netDeviceType
        );
        // SAFETY: checked non-NULL; the plugin keeps its device names alive.
        let name = unsafe { CStr::from_ptr(p.name) }.to_string_lossy().into_owned();
        cx.notes.push(format!(
            "device {d}: '{name}', type {}, {} Mb/s",
            p.netDeviceType, p.speed
        ));
    }
    if cx.version >= 14 {
        let Some(gp) = cx.slots.get_gin_properties else {
            return Err(fail!(
                "a non-NULL getGinProperties slot (v14)",
                "getGinProperties is NULL"
            ));
        };
        let mut g = ncclGinProperties_v14_t::zeroed();
        let r = {
            let _g = enter("getGinProperties");
            // SAFETY: a valid out-pointer of the v14 layout.
            unsafe { gp(&mut g) }
        };
        ensure!(
            r.is_success(),
            "getGinProperties succeeds (v14)",
            "getGinProperties returned {}",
            name_of(r)
        );
        cx.notes.push(format!(
            "strong signals {}, VA signals {}",
            g.supportsStrongSignals, g.supportsVASignals
        ));
    }
    finalize(cx, ctx)
}
