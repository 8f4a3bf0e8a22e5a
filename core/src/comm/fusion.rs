//! NIC fusion at communicator init (NCCL 2.30.7 `src/graph/topo.cc`
//! `ncclTopoProcessNet`, called from `ncclTopoGetSystem`): the net plugin behind
//! [`crate::topo::fuse::NetFusion`], and the per-process device counts.

use std::sync::Arc;

use ferroccl_plugin_api::sdk::Properties;

use crate::plugin::net::{NetInfo, NetPlugin};
use crate::topo::fuse::{self, FusionParams, NetFusion};

/// The net plugin as fusion sees it.
pub(super) struct PluginFusion<'a> {
    pub(super) net: &'a Arc<dyn NetPlugin>,
    pub(super) version: u32,
}

impl NetFusion for PluginFusion<'_> {
    fn max_devs_per_nic(&self) -> usize {
        if self.version >= 12 {
            fuse::MAX_DEVS_PER_NIC
        } else {
            fuse::MAX_DEVS_PER_NIC_V11
        }
    }
    fn make_vdevice(&mut self, devs: &[i32]) -> Result<usize, String> {
        self.net.make_vdevice(devs).map_err(|e| e.to_string())
    }
    fn devices(&mut self) -> Result<usize, String> {
        self.net.devices().map_err(|e| e.to_string())
    }
    fn properties(&mut self, dev: usize) -> Result<Properties, String> {
        self.net.properties(dev).map_err(|e| e.to_string())
    }
}

/// The key of a plugin's device counts: its library and vtable name (the plugin keeps
/// its virtual devices for the life of the process).
pub(super) fn key(info: &NetInfo) -> String {
    format!("{}|{}", info.path.display(), info.name)
}

/// The fusion parameters from the config layer, with their log lines.
pub(super) fn params() -> (FusionParams, Vec<String>) {
    let cfg = crate::config::Config::global();
    FusionParams::from_lookup(&|k| cfg.get_str(k).map(str::to_string))
}
