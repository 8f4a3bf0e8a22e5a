//! Every tuner API version (v2 … v6) driven through the host's adapter
//! (`ferroccl::plugin::tuner::TunerAdapter`) by real shared libraries: the
//! SDK-built test tuner (`testing/tuner-sdk-test`, all versions from one impl)
//! and the C tuners written from the reference layout tables
//! (`testing/tuner-c`, one library per version). Each version's `init`
//! arguments, the cost table `getCollInfo` receives (a realistic 7×3 table from
//! NCCL's model), its outputs, `getChunkSize` (v6) and `finalize` are checked
//! through the call log the tuners write, with two contexts alive at once.
//!
//! This binary holds a single test: it sets the tuners' environment once, before
//! any plugin code runs, so no other thread reads the environment meanwhile.

mod plugin_common;

use std::sync::Arc;

use ferroccl::plugin::tuner::{NvlDomainInfo, TunerAdapter, TunerContext};
use ferroccl::tune::constants::TunerConstants;
use ferroccl::tune::enable::EnableMatrix;
use ferroccl::tune::ids::{Algorithm as A, Func as F, Protocol as P};
use ferroccl::tune::model::*;
use ferroccl::tune::select::{CostTable, IGNORE, TableSupport, coll_cost_table};
use plugin_common::lib;

/// NCCL's model for one node of 8 Hopper GPUs on NVLink (reference §3.4).
fn gpu_table(nbytes: usize) -> CostTable {
    let p = PatternInfo {
        nchannels: 16,
        bw_intra: 20.0,
        bw_inter: 20.0,
        type_intra: path::NVL,
        type_inter: path::PIX,
        latency_inter: 0.0,
        same_channels: true,
    };
    let inp = ModelInput::gpu_cluster(8, 1, 90);
    let g = GraphInfo {
        tree: p,
        ring: p,
        collnet_direct: PatternInfo::NONE,
        collnet_chain: PatternInfo::NONE,
        nvls: PatternInfo::NONE,
        max_tree_pattern: PATTERN_BALANCED_TREE,
    };
    let m = tune_model(
        &inp,
        &g,
        &mut TunerConstants::nccl_gpu(),
        &EnableMatrix::default(),
        &ALL_RUNNABLE,
    );
    let s = TableSupport {
        max_local_ranks: 8,
        local_ranks: 8,
        ..TableSupport::default()
    };
    coll_cost_table(&m, F::AllReduce, nbytes, 1, &s)
}

/// Lines appended to `file` since the last call.
struct Log {
    file: std::path::PathBuf,
    seen: usize,
}

impl Log {
    fn new_lines(&mut self) -> Vec<String> {
        let all: Vec<String> = std::fs::read_to_string(&self.file)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        let new = all[self.seen.min(all.len())..].to_vec();
        self.seen = all.len();
        new
    }
}

fn one(lines: &[String], what: &str) -> String {
    assert_eq!(lines.len(), 1, "{what}: expected one log line, got {lines:?}");
    lines[0].clone()
}

const COMM_ID: u64 = 0xabc;

fn init(a: &Arc<TunerAdapter>) -> (TunerContext, ferroccl_plugin_api::abi::ncclTunerConstants_v5_t) {
    let mut c = TunerConstants::nccl_gpu().to_abi();
    let nvl = NvlDomainInfo {
        n_domains: 2,
        min_ranks: 4,
        max_ranks: 4,
    };
    let ctx = a.init(COMM_ID, 8, 2, nvl, &mut c).expect("init");
    (ctx, c)
}

/// Drives one adapter; `c_style` selects which log format to expect.
fn drive(a: Arc<TunerAdapter>, v: u32, log: &mut Log, sdk: bool) {
    assert_eq!(a.version(), v);
    let (ctx1, consts) = init(&a);
    let l = one(&log.new_lines(), "init");
    match (sdk, v >= 5) {
        (false, true) => assert!(
            l.contains(&format!(
                "init v{v} nRanks=8 nNodes=2 commId={COMM_ID} domains=2 min=4 max=4 ringSimpleBase=8.40"
            )),
            "{l}"
        ),
        (false, false) => assert_eq!(l, format!("init v{v} nRanks=8 nNodes=2")),
        (true, true) => assert!(
            l.contains(&format!(
                "commId={COMM_ID} nvl=Some((2, 4, 4)) constants=ringSimpleBase=8.40"
            )),
            "{l}"
        ),
        (true, false) => assert!(l.contains("commId=0 nvl=None constants=none"), "{l}"),
    }
    // v5+ get the constants and NCCL reads them back; these tuners leave them alone.
    assert_eq!(TunerConstants::from_abi(&consts), TunerConstants::nccl_gpu());
    // A second communicator's context, alive at the same time.
    let (ctx2, _) = init(&a);
    log.new_lines();

    let want = gpu_table(1 << 20);
    let mut t = want;
    let info = ctx1
        .get_coll_info(F::AllReduce.index(), 1 << 20, 1, false, &mut t)
        .expect("getCollInfo");
    // Forced Tree/Simple (entry set to 0.0) and 3 channels; nothing else touched.
    assert_eq!(info.nchannels, 3, "v{v}");
    for a in 0..7 {
        for p in 0..3 {
            let expect = if (a, p) == (A::Tree.index(), P::Simple.index()) {
                0.0
            } else {
                want[a][p]
            };
            assert_eq!(t[a][p], expect, "v{v} entry [{a}][{p}]");
        }
    }
    let l = one(&log.new_lines(), "getCollInfo");
    if v == 2 {
        if !sdk {
            // v2 gets support flags and out-pointers instead of the table.
            assert!(l.contains("func=4 nBytes=1048576 pipe=1 collnet=0 nvls=0"), "{l}");
        }
    } else {
        assert!(l.contains("func=4 nBytes=1048576 pipe=1"), "{l}");
        // The plugin saw NCCL's table: Tree/LL first, -1 for the impossible entries.
        let first = format!(
            "table={:.1},{:.1},{:.1},{:.1}",
            want[0][0], want[0][1], want[0][2], want[1][0]
        );
        assert!(l.contains(&first), "v{v}: {l} (want {first})");
        assert!(l.contains(",-1.0"), "{l}");
        if !sdk {
            assert!(l.contains("numAlgo=7 numProto=3"), "{l}");
            let reg = if v == 3 { "regBuff=-1" } else { "regBuff=0" };
            assert!(l.contains(reg), "v{v}: {l}");
        }
    }
    // Entries NCCL marked impossible stay impossible.
    assert_eq!(t[A::Pat.index()], [IGNORE; 3]);

    let mut chunk = 524_288usize;
    let called = ctx2
        .get_chunk_size(
            F::AllReduce.index(),
            1 << 20,
            A::Ring.index(),
            P::Simple.index(),
            1,
            &mut chunk,
        )
        .expect("getChunkSize");
    if v == 6 {
        assert!(called && chunk == 8192, "v6 getChunkSize answered {chunk}");
        let l = one(&log.new_lines(), "getChunkSize");
        assert!(l.contains("nBytes=1048576 algo=1 proto=2 nch=1 chunk=524288"), "{l}");
    } else {
        assert!(!called && chunk == 524_288, "v{v} has no getChunkSize");
        assert!(log.new_lines().is_empty());
    }
    ctx2.finalize().expect("finalize ctx2");
    let l = one(&log.new_lines(), "finalize");
    assert!(l.contains("finalize") && l.contains("calls=0"), "{l}");
    // Dropping the first context finalizes it too (once).
    drop(ctx1);
    let l = one(&log.new_lines(), "finalize on drop");
    assert!(l.contains("calls=1"), "{l}");
}

#[test]
fn every_version_through_the_adapter() {
    let dir = std::env::temp_dir().join(format!("ferroccl-tuner-versions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c_log, sdk_log) = (dir.join("c.log"), dir.join("sdk.log"));
    // SAFETY: the only test of this binary, run before any other thread or plugin exists.
    unsafe {
        std::env::set_var("CTUNER_LOG", &c_log);
        std::env::set_var("CTUNER_FORCE", "0,2,3");
        std::env::set_var("CTUNER_CHUNK", "8192");
        std::env::set_var("SDK_TUNER_LOG", &sdk_log);
        std::env::set_var("SDK_TUNER_FORCE", "0,2,3");
        std::env::set_var("SDK_TUNER_CHUNK", "8192");
    }
    let mut clog = Log { file: c_log, seen: 0 };
    let mut slog = Log { file: sdk_log, seen: 0 };
    for v in 2..=6 {
        let c = TunerAdapter::open_version(&lib(&format!("libnccl-tuner-cv{v}.so")), v).expect("C tuner");
        assert_eq!(c.name(), format!("CTunerV{v}"));
        assert_eq!(c.has_chunk_size(), v == 6);
        drive(Arc::new(c), v, &mut clog, false);
        let s = TunerAdapter::open_version(&lib("libnccl_tuner_sdktest.so"), v).expect("SDK tuner");
        assert_eq!(s.name(), "SdkTest");
        drive(Arc::new(s), v, &mut slog, true);
    }
    // A version the library does not export is a clear load error.
    let e = TunerAdapter::open_version(&lib("libnccl-tuner-cv3.so"), 4).unwrap_err();
    assert!(e.to_string().contains("does not export ncclTunerPlugin_v4"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
