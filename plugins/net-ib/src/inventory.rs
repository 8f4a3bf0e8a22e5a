//! Read-only RDMA inventory for diagnostics (`ferroccl-info ib`): every HCA,
//! its ports (state, link layer, MTU, speed) and GID table, with the port the
//! plugin would use and the GID index it would pick, and why. Uses the same
//! run-time libibverbs table, `NCCL_IB_HCA` filter and GID selection
//! ([`crate::params::select_gid`]) as [`crate::IbNet`], but creates no PD, QP
//! or thread.

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
