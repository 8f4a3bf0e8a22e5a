//! Helpers shared by the `topo_*` tests: the public topology files and their hardware models
//! (`tests/data/topo/public/README.md`).
#![allow(dead_code)]

use std::path::PathBuf;

use ferroccl::graph::CommTopology;
use ferroccl::topo::model::{CpuModel, HardwareModel, NvlinkModel};
use ferroccl::topo::xml::{self, Schema, XmlNode};
use ferroccl::topo::{TopoParams, TopoRecord};

/// `core/tests/data/topo`.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/topo")
}

/// A public file and the model of its real machine.
pub struct Machine {
    /// Short name (expectation file stem).
    pub name: &'static str,
    /// Path under `public/`.
    pub file: &'static str,
    /// Explorer options, as text (for humans and the expectation headers).
    pub options: &'static str,
    /// The model.
    pub model: HardwareModel,
}

const NDV2_MAP: &str =
    "map:0-1x1,0-2x1,0-3x2,0-4x2,1-2x2,1-3x1,1-5x2,2-3x2,2-6x1,3-7x1,4-5x1,4-6x1,4-7x2,5-6x2,5-7x1,6-7x2";

fn nvswitch(sm: i32) -> HardwareModel {
    HardwareModel {
        sm: Some(sm),
        nvlink: NvlinkModel::NvSwitch(None),
        ..HardwareModel::default()
    }
}

/// Every public topology with its model.
pub fn machines() -> Vec<Machine> {
    vec![
        Machine {
            name: "ncv4",
            file: "azhpc-images/ncv4-topo.xml",
            options: "",
            model: HardwareModel::default(),
        },
        Machine {
            name: "ndv2",
            file: "azhpc-images/ndv2-topo.xml",
            options: "--sm 70 --nvlink <DGX-1V map> --net-speed 100000",
            model: HardwareModel {
                sm: Some(70),
                nvlink: NvlinkModel::parse(NDV2_MAP).unwrap(),
                net_speed: Some(100_000),
                ..HardwareModel::default()
            },
        },
        Machine {
            name: "ndv4",
            file: "azhpc-images/ndv4-topo.xml",
            options: "--sm 80 --nvlink nvswitch",
            model: nvswitch(80),
        },
        Machine {
            name: "ndv5",
            file: "azhpc-images/ndv5-topo.xml",
            options: "--sm 90 --nvlink nvswitch",
            model: nvswitch(90),
        },
        Machine {
            name: "p4d",
            file: "aws-ofi-nccl/p4d-24xl-topo.xml",
            options: "--sm 80 --nvlink nvswitch",
            model: nvswitch(80),
        },
        Machine {
            name: "p4de",
            file: "aws-ofi-nccl/p4de-24xl-topo.xml",
            options: "--sm 80 --nvlink nvswitch",
            model: nvswitch(80),
        },
        Machine {
            name: "g5",
            file: "aws-ofi-nccl/g5.48xl-topo.xml",
            options: "--sm 86 --nvlink none --cpu x86_64,AuthenticAMD,23,49 --gpus 0000:00:16.0..1d.0 --nics 0000:00:15.0",
            model: HardwareModel {
                sm: Some(86),
                cpu: Some(CpuModel::parse("x86_64,AuthenticAMD,23,49").unwrap()),
                gpus: ["16", "17", "18", "19", "1a", "1b", "1c", "1d"]
                    .iter()
                    .map(|d| format!("0000:00:{d}.0"))
                    .collect(),
                nics: vec!["0000:00:15.0".to_string()],
                ..HardwareModel::default()
            },
        },
    ]
}

/// The machine named `name`.
pub fn machine(name: &str) -> Machine {
    machines().into_iter().find(|m| m.name == name).expect("known machine")
}

/// Parsed public file.
pub fn load(m: &Machine) -> XmlNode {
    xml::load_file(&data_dir().join("public").join(m.file), Schema::Topology).expect("public file parses")
}

/// Records of `nodes` copies of the machine.
pub fn records(m: &Machine, nodes: usize) -> Vec<TopoRecord> {
    m.model.records(&load(m), nodes).expect("model applies")
}

/// The communicator topology of `nodes` copies.
pub fn build(m: &Machine, nodes: usize, params: &TopoParams) -> CommTopology {
    CommTopology::build(&records(m, nodes), params).expect("topology builds")
}
