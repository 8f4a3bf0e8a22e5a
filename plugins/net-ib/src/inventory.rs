//! Read-only RDMA inventory for diagnostics (`ferroccl-info ib`): every HCA,
//! its ports (state, link layer, MTU, speed) and GID table, with the port the
//! plugin would use and the GID index it would pick, and why. Uses the same
//! run-time libibverbs table, `NCCL_IB_HCA` filter and GID selection
//! ([`crate::params::select_gid`]) as [`crate::IbNet`], but creates no PD, QP
//! or thread.
//!
//! Programs that must not link this crate (it needs rdma-core headers to build)
//! get the same listing as JSON from the built plugin through the exported C
//! function [`ferrocclIbInventory_v1`] (a ferroccl extension, not part of NCCL's
//! ABI): `ferroccl-info ib` `dlopen`s `libnccl-net-ib.so` and calls it.

use std::ffi::{c_char, c_void};

use ferroccl_plugin_api::abi::ncclResult_t;
use ferroccl_plugin_api::{NetError, NetResult};
use serde::Serialize;

use crate::params::{self, GidCandidate, IbParams};
use crate::verbs::{self, Context, Verbs, sys};

/// One GID table entry (all-zero entries are left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// Index in the port's GID table.
    pub index: u32,
    /// The GID bytes (network order).
    pub gid: [u8; 16],
    /// RoCE version from sysfs (`None`: InfiniBand or unknown).
    pub roce_version: Option<u32>,
    /// Netdev behind the GID (RoCE), from sysfs.
    pub ndev: Option<String>,
}

/// One port of an HCA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// Port number (1-based).
    pub port: u8,
    /// `ibv_port_state` text (`ACTIVE`, `DOWN`, …).
    pub state: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// Active MTU in bytes.
    pub mtu: u32,
    /// Speed in Mbps (width × lane speed).
    pub speed_mbps: i32,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// Non-zero GID table entries.
    pub gids: Vec<GidEntry>,
    /// What the plugin does with this port: `Ok((gid_index, reason))` if it
    /// would use it, `Err(reason)` if not (inactive, filtered by
    /// `NCCL_IB_HCA`, no usable GID).
    pub plugin_choice: Result<(u32, String), String>,
}

/// One HCA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaInfo {
    /// Device name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// Node GUID (host order).
    pub guid: u64,
    /// PCI path from sysfs (`None` for virtual devices such as rxe).
    pub pci_path: Option<String>,
    /// Ports, or why the device could not be opened/queried.
    pub ports: Result<Vec<PortInfo>, String>,
}

fn state_str(s: u32) -> &'static str {
    use sys::ibv_port_state as S;
    match s {
        S::IBV_PORT_DOWN => "DOWN",
        S::IBV_PORT_INIT => "INIT",
        S::IBV_PORT_ARMED => "ARMED",
        S::IBV_PORT_ACTIVE => "ACTIVE",
        S::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "NOP",
    }
}

/// Lists every RDMA device with its ports and GID tables and the plugin's
/// choice for each port, under `params` (normally [`IbParams::from_env`]).
///
/// # Errors
/// A message when libibverbs cannot be loaded (`"cannot load libibverbs.so.1 …"`)
/// or the device list cannot be read. No devices is `Ok(vec![])`.
pub fn inventory(params: &IbParams) -> Result<Vec<HcaInfo>, String> {
    let v = Verbs::get()?;
    let mut out = Vec::new();
    for info in verbs::list_devices(v)? {
        let ports = (|| -> Result<Vec<PortInfo>, String> {
            let ctx = Context::open(v, &info)?;
            let dattr = ctx.query_device()?;
            let mut ports = Vec::new();
            for port in 1..=dattr.phys_port_cnt {
                let pa = ctx.query_port(port)?;
                let roce = u32::from(pa.link_layer) == 2;
                let gids: Vec<GidEntry> = (0..pa.gid_tbl_len.max(0) as u32)
                    .filter_map(|i| {
                        let gid = ctx.query_gid(port, i as i32).ok()?;
                        (gid != [0; 16]).then(|| GidEntry {
                            index: i,
                            gid,
                            roce_version: verbs::sysfs_gid_roce_version(&info.name, port, i),
                            ndev: verbs::sysfs_gid_ndev(&info.name, port, i),
                        })
                    })
                    .collect();
                let plugin_choice = if pa.state != sys::ibv_port_state::IBV_PORT_ACTIVE {
                    Err("not used: port not ACTIVE".to_string())
                } else if !params.hca.selects(&info.name, u32::from(port)) {
                    Err("not used: not selected by NCCL_IB_HCA".to_string())
                } else if roce {
                    let cands: Vec<GidCandidate> = gids
                        .iter()
                        .map(|g| GidCandidate {
                            index: g.index,
                            gid: g.gid,
                            roce_version: g.roce_version,
                        })
                        .collect();
                    params::select_gid(&cands, params).map_err(|e| format!("not used: {e}"))
                } else {
                    Ok((
                        params.gid_index.max(0) as u32,
                        "InfiniBand: LID routing, GID for GRH only".to_string(),
                    ))
                };
                ports.push(PortInfo {
                    port,
                    state: state_str(pa.state).to_string(),
                    link_layer: if roce { "Ethernet (RoCE)" } else { "InfiniBand" }.to_string(),
                    mtu: verbs::mtu_bytes(pa.active_mtu),
                    speed_mbps: params::port_speed_mbps(pa.active_width, pa.active_speed),
                    lid: pa.lid,
                    gids,
                    plugin_choice,
                });
            }
            Ok(ports)
        })();
        out.push(HcaInfo {
            pci_path: verbs::sysfs_pci_path(&info.name),
            name: info.name,
            guid: info.guid,
            ports,
        });
    }
    Ok(out)
}

/// Version tag of the [`InventoryReport`] JSON document.
pub const REPORT_SCHEMA: &str = "ferroccl-ib-inventory/1";

/// Name of the exported C function that hands out the report (see
/// [`ferrocclIbInventory_v1`]).
pub const INVENTORY_SYMBOL: &str = "ferrocclIbInventory_v1";

/// The inventory as one JSON document (schema [`REPORT_SCHEMA`]), what
/// [`ferrocclIbInventory_v1`] returns.
#[derive(Debug, Clone, Serialize)]
pub struct InventoryReport {
    /// Always [`REPORT_SCHEMA`].
    pub schema: &'static str,
    /// The libibverbs file that was loaded (as passed to `dlopen`), if any.
    pub verbs_library: Option<String>,
    /// Warnings of loading (deprecated variable, `NCCL_IBVERBS_LIB` not openable).
    pub warnings: Vec<String>,
    /// Why nothing could be listed: the `NCCL_IB_*` parameters were rejected,
    /// or libibverbs could not be loaded, or the device list could not be read.
    pub error: Option<String>,
    /// Every RDMA device (empty: none, or `error` is set).
    pub hcas: Vec<HcaReport>,
}

/// One HCA in an [`InventoryReport`].
#[derive(Debug, Clone, Serialize)]
pub struct HcaReport {
    /// Device name.
    pub name: String,
    /// Node GUID (host order).
    pub guid: u64,
    /// PCI path (`None`: virtual device).
    pub pci_path: Option<String>,
    /// Why the device could not be opened or queried (then `ports` is empty).
    pub error: Option<String>,
    /// Its ports.
    pub ports: Vec<PortReport>,
}

/// One port in an [`InventoryReport`].
#[derive(Debug, Clone, Serialize)]
pub struct PortReport {
    /// Port number (1-based).
    pub port: u8,
    /// `ACTIVE`, `DOWN`, …
    pub state: String,
    /// `InfiniBand` or `Ethernet (RoCE)`.
    pub link_layer: String,
    /// Active MTU, bytes.
    pub mtu: u32,
    /// Speed, Mbps.
    pub speed_mbps: i32,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Non-zero GID table entries.
    pub gids: Vec<GidReport>,
    /// The GID index the plugin would use; `None`: the plugin does not use this port.
    pub gid_index: Option<u32>,
    /// Why the plugin uses this GID index, or why it does not use the port.
    pub reason: String,
}

/// One GID table entry in an [`InventoryReport`].
#[derive(Debug, Clone, Serialize)]
pub struct GidReport {
    /// Index in the port's GID table.
    pub index: u32,
    /// The GID as an IPv6 address (`::ffff:10.0.2.15`, `fe80::…`).
    pub gid: String,
    /// RoCE version (1, 2) from sysfs, if known.
    pub roce_version: Option<u32>,
    /// Netdev behind the GID, if any.
    pub ndev: Option<String>,
}

impl From<HcaInfo> for HcaReport {
    fn from(h: HcaInfo) -> Self {
        let (ports, error) = match h.ports {
            Ok(p) => (p, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        HcaReport {
            name: h.name,
            guid: h.guid,
            pci_path: h.pci_path,
            error,
            ports: ports
                .into_iter()
                .map(|p| {
                    let (gid_index, reason) = match p.plugin_choice {
                        Ok((i, why)) => (Some(i), why),
                        Err(why) => (None, why),
                    };
                    PortReport {
                        port: p.port,
                        state: p.state,
                        link_layer: p.link_layer,
                        mtu: p.mtu,
                        speed_mbps: p.speed_mbps,
                        lid: p.lid,
                        gids: p
                            .gids
                            .into_iter()
                            .map(|g| GidReport {
                                index: g.index,
                                gid: std::net::Ipv6Addr::from(g.gid).to_string(),
                                roce_version: g.roce_version,
                                ndev: g.ndev,
                            })
                            .collect(),
                        gid_index,
                        reason,
                    }
                })
                .collect(),
        }
    }
}

/// The inventory under the process environment (`NCCL_IB_*`,
/// `NCCL_IBVERBS_LIB`): never fails, a failure is described in
/// [`InventoryReport::error`].
pub fn report_from_env() -> InventoryReport {
    let mut r = InventoryReport {
        schema: REPORT_SCHEMA,
        verbs_library: None,
        warnings: Vec::new(),
        error: None,
        hcas: Vec::new(),
    };
    let params = match IbParams::from_env() {
        Ok(p) => p,
        Err(e) => {
            r.error = Some(format!("IB plugin parameters rejected: {e}"));
            return r;
        }
    };
    let (verbs, warnings) = Verbs::get_with_warnings();
    r.warnings = warnings.to_vec();
    match verbs {
        Ok(v) => r.verbs_library = Some(v.library().to_string()),
        Err(e) => {
            r.error = Some(e);
            return r;
        }
    }
    match inventory(&params) {
        Ok(h) => r.hcas = h.into_iter().map(HcaReport::from).collect(),
        Err(e) => r.error = Some(e),
    }
    r
}

/// Receives the inventory document from [`ferrocclIbInventory_v1`]: `json`
/// points to `len` bytes of UTF-8 JSON (not NUL-terminated), valid only during
/// the call; `arg` is the caller's pointer, passed through.
pub type InventorySink = unsafe extern "C" fn(arg: *mut c_void, json: *const c_char, len: usize);

/// ferroccl extension exported by `libnccl-net-ib.so` (not part of NCCL's ABI):
/// builds [`report_from_env`] and calls `sink(arg, json, len)` once with it as
/// JSON ([`REPORT_SCHEMA`]). Needs no `init`; creates no PD, QP or thread.
///
/// Returns `ncclSuccess` once `sink` has been called (the document itself says
/// whether anything could be listed), `ncclInvalidArgument` for a NULL `sink`,
/// `ncclInternalError` if the report cannot be built (a panic is caught, never
/// crosses this boundary).
///
/// # Safety
/// `sink` must be NULL or a function with the [`InventorySink`] signature that
/// may be called with `arg` from this thread.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn ferrocclIbInventory_v1(sink: Option<InventorySink>, arg: *mut c_void) -> ncclResult_t {
    ferroccl_plugin_api::export::guard(c"FerrocclIB", INVENTORY_SYMBOL, || -> NetResult<()> {
        let sink = sink.ok_or_else(|| NetError::InvalidArgument("sink is NULL".into()))?;
        let json = serde_json::to_string(&report_from_env())
            .map_err(|e| NetError::Internal(format!("cannot serialise the inventory: {e}")))?;
        // SAFETY: the caller guarantees `sink` accepts (arg, bytes, len); `json`
        // outlives the call.
        unsafe { sink(arg, json.as_ptr().cast(), json.len()) };
        Ok(())
    })
}
