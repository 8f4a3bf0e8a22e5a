//! A test tuner built with ferroccl's SDK (`ferroccl_plugin_api::sdk::Tuner`),
//! exporting `ncclTunerPlugin_v2` … `_v6` from one implementation
//! (`libnccl_tuner_sdktest.so`, vtable name `SdkTest`). Driven by the
//! environment, read in `init`:
//!
//! * `SDK_TUNER_LOG=<file>`: one line per call (`init`, `coll`, `chunk`,
//!   `finalize`) with the arguments received;
//! * `SDK_TUNER_FORCE=<algo>,<proto>[,<nChannels>]`: that entry set to 0.0 (when
//!   not -1) and `*nChannels` set;
//! * `SDK_TUNER_CHUNK=<bytes>`: `getChunkSize` (v6) answers this size.

use std::ffi::CStr;
use std::io::Write;

use ferroccl_plugin_api::abi;
use ferroccl_plugin_api::sdk::{CostTable, NetResult, Tuner, TunerInit};

struct SdkTest {
    log: Option<String>,
    force: Option<(usize, usize, i32)>,
    chunk: Option<usize>,
    calls: std::sync::atomic::AtomicUsize,
}

impl SdkTest {
    fn line(&self, s: &str) {
        if let Some(p) = &self.log
            && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p)
        {
            let _ = writeln!(f, "{s}");
        }
    }
}

impl Tuner for SdkTest {
    const NAME: &'static CStr = c"SdkTest";

    fn init(info: TunerInit<'_>) -> NetResult<Self> {
        let force = std::env::var("SDK_TUNER_FORCE").ok().and_then(|v| {
            let f: Vec<i64> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            (f.len() >= 2).then(|| (f[0] as usize, f[1] as usize, f.get(2).copied().unwrap_or(0) as i32))
        });
        let t = SdkTest {
            log: std::env::var("SDK_TUNER_LOG").ok(),
            force,
            chunk: std::env::var("SDK_TUNER_CHUNK").ok().and_then(|v| v.parse().ok()),
            calls: 0.into(),
        };
        t.line(&format!(
            "init nRanks={} nNodes={} commId={} nvl={:?} constants={}",
            info.n_ranks,
            info.n_nodes,
            info.comm_id,
            info.nvl_domain
                .map(|d| (d.nNvlDomains, d.minRanksPerNvlDomain, d.maxRanksPerNvlDomain)),
            info.constants.map_or("none".to_string(), |c| format!(
                "ringSimpleBase={:.2}",
                c.baseLatencies[1][2]
            ))
        ));
        Ok(t)
    }

    fn get_coll_info(
        &self,
        coll: abi::ncclFunc_t,
        n_bytes: usize,
        num_pipe_ops: i32,
        reg_buff: bool,
        costs: &mut CostTable<'_>,
        n_channels: &mut i32,
    ) -> NetResult<()> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut cells = Vec::new();
        for a in 0..costs.num_algo() {
            for p in 0..costs.num_proto() {
                cells.push(format!("{:.1}", costs.get(a, p).unwrap_or(f32::NAN)));
            }
        }
        self.line(&format!(
            "coll func={} nBytes={n_bytes} pipe={num_pipe_ops} regBuff={reg_buff} nch={} table={}",
            coll.0,
            *n_channels,
            cells.join(",")
        ));
        if let Some((a, p, n)) = self.force {
            if costs.get(a, p).is_some_and(|v| v != abi::NCCL_ALGO_PROTO_IGNORE) {
                costs.set(a, p, 0.0);
            }
            if n > 0 {
                *n_channels = n;
            }
        }
        Ok(())
    }

    fn get_chunk_size(
        &self,
        coll: abi::ncclFunc_t,
        n_bytes: usize,
        algo: i32,
        proto: i32,
        n_channels: i32,
        chunk_size: &mut usize,
    ) -> NetResult<()> {
        self.line(&format!(
            "chunk func={} nBytes={n_bytes} algo={algo} proto={proto} nch={n_channels} chunk={chunk_size}",
            coll.0
        ));
        if let Some(c) = self.chunk {
            *chunk_size = c;
        }
        Ok(())
    }

    fn finalize(self) -> NetResult<()> {
        self.line(&format!(
            "finalize calls={}",
            self.calls.load(std::sync::atomic::Ordering::Relaxed)
        ));
        Ok(())
    }
}

ferroccl_plugin_api::export_tuner_plugin!(SdkTest);
