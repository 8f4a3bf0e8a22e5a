//! The constants of NCCL's cost model (`ncclTunerConstants_t`): NCCL 2.30.7's
//! GPU defaults (`src/graph/tuning.cc: ncclTunerConstantsDefaults`, reference
//! `docs/reference/nccl-graph-tuning.md` §3.1) and ferroccl's set for CPU hosts, whose values
//! and the measurements behind them are in `BENCHMARKS.md` ("Tuning: the CPU-host
//! constants"). A v5/v6 tuner plugin may rewrite either set in `init`.

use ferroccl_plugin_api::abi::ncclTunerConstants_v5_t;

use crate::coll::ids::{NUM_ALGOS, NUM_PROTOS};

/// HW link index `NCCL_HW_NVLINK`.
pub const HW_NVLINK: usize = 0;
/// HW link index `NCCL_HW_PCI` (on a CPU host: within one host).
pub const HW_PCI: usize = 1;
/// HW link index `NCCL_HW_NET`.
pub const HW_NET: usize = 2;
/// Compute-capability rows of the bandwidth tables (`NCCL_NUM_COMPCAPS`).
pub const NUM_COMPCAPS: usize = 4;
/// Node-count columns of the bandwidth tables (`NCCL_NUM_TUNING_SCALES`): 1, 2, ≥ 3 nodes.
pub const NUM_SCALES: usize = 3;

/// A `[compcap][scale]` table (GB/s).
pub type BwTable = [[f64; NUM_SCALES]; NUM_COMPCAPS];

/// NCCL's tuning constants (`ncclTunerConstants_v5_t` field for field; µs and GB/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TunerConstants {
    /// `baseLatencies[algo][proto]` (µs).
    pub base_latencies: [[f64; NUM_PROTOS]; NUM_ALGOS],
    /// `hwLatencies[hw][algo][proto]` (µs), `hw` = [`HW_NVLINK`], [`HW_PCI`], [`HW_NET`].
    pub hw_latencies: [[[f64; NUM_PROTOS]; NUM_ALGOS]; 3],
    /// `llMaxBws[row][scale]`: LL bandwidth ceiling (row: compcap on one node, CPU vendor across nodes).
    pub ll_max_bws: BwTable,
    /// `perChMaxRingLL128Bws`: per-channel Ring/LL128 ceiling.
    pub per_ch_max_ring_ll128_bws: BwTable,
    /// `perChMaxTreeLL128Bws`: per-channel Tree/LL128 ceiling.
    pub per_ch_max_tree_ll128_bws: BwTable,
    /// `perChMaxTreeBws`: per-channel Tree ceiling.
    pub per_ch_max_tree_bws: BwTable,
    /// `perChMaxNVLSTreeBws`: per-channel NVLSTree ceiling.
    pub per_ch_max_nvls_tree_bws: BwTable,
}

impl TunerConstants {
    /// NCCL 2.30.7's defaults (`ncclTunerConstantsDefaults`).
    pub const fn nccl_gpu() -> TunerConstants {
        TunerConstants {
            base_latencies: [
                [6.8, 14.0, 8.4], // Tree
                [6.6, 14.0, 8.4], // Ring
                [0.0, 0.0, 0.0],  // CollNetDirect
                [0.0, 0.0, 0.0],  // CollNetChain
                [0.0, 0.0, 0.0],  // NVLS
                [0.0, 0.0, 0.0],  // NVLSTree
                [8.0, 8.0, 8.0],  // PAT
            ],
            hw_latencies: [
                // NVLINK
                [
                    [0.6, 1.25, 4.0],
                    [0.6, 1.9, 3.4],
                    [0.0, 0.0, 3.7],
                    [0.0, 0.0, 2.8],
                    [0.0, 0.0, 25.0],
                    [0.0, 0.0, 25.0],
                    [0.0, 0.0, 4.0],
                ],
                // PCI
                [
                    [1.0, 1.9, 4.0],
                    [1.0, 2.5, 5.7],
                    [0.0, 0.0, 3.7],
                    [0.0, 0.0, 2.8],
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 0.0],
                    [0.0, 0.0, 4.0],
                ],
                // NET
                [
                    [5.0, 8.5, 14.0],
                    [2.7, 4.0, 14.0],
                    [0.0, 0.0, 31.0],
                    [0.0, 0.0, 30.0],
                    [0.0, 0.0, 18.0],
                    [0.0, 0.0, 20.9],
                    [0.0, 0.0, 14.0],
                ],
            ],
            ll_max_bws: [
                [39.0, 39.0, 20.4],
                [87.7, 22.5, 19.0],
                [141.0, 45.0, 35.0],
                [282.0, 90.0, 70.0],
            ],
            per_ch_max_ring_ll128_bws: [
                [20.0, 20.0, 20.0],
                [20.0, 20.0, 20.0],
                [36.7, 36.7, 36.7],
                [40.0, 40.0, 40.0],
            ],
            per_ch_max_tree_ll128_bws: [
                [20.0, 20.0, 20.0],
                [20.0, 20.0, 20.0],
                [36.7, 36.7, 29.0],
                [55.6, 31.67, 20.0],
            ],
            per_ch_max_tree_bws: [
                [26.5, 18.5, 10.0],
                [24.0, 23.6, 17.8],
                [38.7, 41.4, 36.0],
                [70.0, 42.8, 24.0],
            ],
            per_ch_max_nvls_tree_bws: [
                [26.5, 18.5, 10.0],
                [24.0, 23.6, 17.8],
                [0.0, 57.7, 45.5],
                [0.0, 96.0, 80.0],
            ],
        }
    }

    /// ferroccl's constants for a CPU host (host memory, a CPU thread per
    /// communicator moving and reducing data, the network plugin for every
    /// connection). Only the Tree and Ring rows are used (the other algorithms
    /// do not run on a host); every compute-capability row is the same, so the
    /// GPU generation index has no effect. Values and measurements:
    /// `BENCHMARKS.md`, "Tuning: the CPU-host constants".
    pub const fn cpu_host() -> TunerConstants {
        let mut c = TunerConstants::nccl_gpu();
        // Per-operation cost before the first message: enqueue, wake-up of the
        // proxy thread, plan building, completion.
        c.base_latencies[0] = [HOST_BASE_LAT, HOST_BASE_LAT, HOST_BASE_LAT];
        c.base_latencies[1] = [HOST_BASE_LAT, HOST_BASE_LAT, HOST_BASE_LAT];
        // Per hop: one message over the transport and the receiver noticing it.
        let intra = [HOST_HOP_LAT_INTRA, HOST_HOP_LAT_INTRA, HOST_HOP_LAT_INTRA];
        let net = [HOST_HOP_LAT_NET, HOST_HOP_LAT_NET, HOST_HOP_LAT_NET];
        c.hw_latencies[HW_NVLINK][0] = intra;
        c.hw_latencies[HW_NVLINK][1] = intra;
        c.hw_latencies[HW_PCI][0] = intra;
        c.hw_latencies[HW_PCI][1] = intra;
        c.hw_latencies[HW_NET][0] = net;
        c.hw_latencies[HW_NET][1] = net;
        let row = [HOST_MAX_BW, HOST_MAX_BW, HOST_MAX_BW];
        c.ll_max_bws = [row; NUM_COMPCAPS];
        c.per_ch_max_ring_ll128_bws = [row; NUM_COMPCAPS];
        c.per_ch_max_tree_ll128_bws = [row; NUM_COMPCAPS];
        c.per_ch_max_tree_bws = [row; NUM_COMPCAPS];
        c
    }

    /// [`TunerConstants::cpu_host`] for a host oversubscribed by `factor`
    /// (see `host::HostFacts::oversubscription`): a Ring hop's latency is
    /// multiplied by `factor` (every rank of a ring is busy at every step, so a
    /// hop waits for its receiver to be scheduled among all of them), a Tree
    /// hop's by `factor ^` [`HOST_TREE_OVERSUB_EXP`] (in a chain only the ranks
    /// of the current hops are busy). The measurements behind this are in
    /// `BENCHMARKS.md`.
    pub fn cpu_host_oversubscribed(factor: f64) -> TunerConstants {
        let mut c = TunerConstants::cpu_host();
        let f = factor.max(1.0);
        for hw in [HW_NVLINK, HW_PCI, HW_NET] {
            for p in 0..NUM_PROTOS {
                c.hw_latencies[hw][0][p] *= f.powf(HOST_TREE_OVERSUB_EXP);
                c.hw_latencies[hw][1][p] *= f;
            }
        }
        c
    }

    /// Copies the constants into the C struct a v5/v6 tuner `init` receives.
    pub fn to_abi(&self) -> ncclTunerConstants_v5_t {
        ncclTunerConstants_v5_t {
            baseLatencies: self.base_latencies,
            hwLatencies: self.hw_latencies,
            llMaxBws: self.ll_max_bws,
            perChMaxRingLL128Bws: self.per_ch_max_ring_ll128_bws,
            perChMaxTreeLL128Bws: self.per_ch_max_tree_ll128_bws,
            perChMaxTreeBws: self.per_ch_max_tree_bws,
            perChMaxNVLSTreeBws: self.per_ch_max_nvls_tree_bws,
        }
    }

    /// Reads back the constants a v5/v6 tuner's `init` may have rewritten.
    pub fn from_abi(c: &ncclTunerConstants_v5_t) -> TunerConstants {
        TunerConstants {
            base_latencies: c.baseLatencies,
            hw_latencies: c.hwLatencies,
            ll_max_bws: c.llMaxBws,
            per_ch_max_ring_ll128_bws: c.perChMaxRingLL128Bws,
            per_ch_max_tree_ll128_bws: c.perChMaxTreeLL128Bws,
            per_ch_max_tree_bws: c.perChMaxTreeBws,
            per_ch_max_nvls_tree_bws: c.perChMaxNVLSTreeBws,
        }
    }

    /// The first value that is not a finite number ≥ 0, named by field and index
    /// (a tuner wrote garbage), or `None`.
    pub fn first_invalid(&self) -> Option<String> {
        let bad = |v: f64| !v.is_finite() || v < 0.0;
        for (a, row) in self.base_latencies.iter().enumerate() {
            for (p, &v) in row.iter().enumerate() {
                if bad(v) {
                    return Some(format!("baseLatencies[{a}][{p}] = {v}"));
                }
            }
        }
        for (h, t) in self.hw_latencies.iter().enumerate() {
            for (a, row) in t.iter().enumerate() {
                for (p, &v) in row.iter().enumerate() {
                    if bad(v) {
                        return Some(format!("hwLatencies[{h}][{a}][{p}] = {v}"));
                    }
                }
            }
        }
        let tables = [
            ("llMaxBws", &self.ll_max_bws),
            ("perChMaxRingLL128Bws", &self.per_ch_max_ring_ll128_bws),
            ("perChMaxTreeLL128Bws", &self.per_ch_max_tree_ll128_bws),
            ("perChMaxTreeBws", &self.per_ch_max_tree_bws),
            ("perChMaxNVLSTreeBws", &self.per_ch_max_nvls_tree_bws),
        ];
        for (name, t) in tables {
            for (c, row) in t.iter().enumerate() {
                for (s, &v) in row.iter().enumerate() {
                    if bad(v) {
                        return Some(format!("{name}[{c}][{s}] = {v}"));
                    }
                }
            }
        }
        None
    }
}

/// CPU host: fixed cost of one operation (µs).
pub const HOST_BASE_LAT: f64 = 10.0;
/// CPU host: cost of one hop between ranks of one host (µs).
pub const HOST_HOP_LAT_INTRA: f64 = 5.0;
/// CPU host: cost of one hop between hosts (µs).
pub const HOST_HOP_LAT_NET: f64 = 20.0;
/// CPU host: how a Tree hop's latency grows with oversubscription (`factor ^ exp`;
/// a Ring hop's grows as `factor`). Fit to the 4- and 8-rank medians in
/// `BENCHMARKS.md`.
pub const HOST_TREE_OVERSUB_EXP: f64 = 0.6;
/// CPU host: per-channel bandwidth ceiling (GB/s) standing in for the GPU
/// per-channel caps (far above what a host channel reaches, so the measured
/// graph bandwidth decides).
pub const HOST_MAX_BW: f64 = 1000.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_round_trip_and_reference_values() {
        let c = TunerConstants::nccl_gpu();
        assert_eq!(TunerConstants::from_abi(&c.to_abi()), c);
        // Spot checks against reference §3.1.
        assert_eq!(c.hw_latencies[HW_NET][0][2], 14.0);
        assert_eq!(c.hw_latencies[HW_NET][5][2], 20.9);
        assert_eq!(c.ll_max_bws[3], [282.0, 90.0, 70.0]);
        assert_eq!(c.per_ch_max_tree_ll128_bws[3][1], 31.67);
        assert!(c.first_invalid().is_none());
        let mut bad = c;
        bad.per_ch_max_tree_bws[1][2] = f64::NAN;
        assert_eq!(bad.first_invalid().as_deref(), Some("perChMaxTreeBws[1][2] = NaN"));
    }
}
