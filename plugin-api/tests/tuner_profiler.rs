//! Drives the exported tuner (`ncclTunerPlugin_v2`/`_v6`) and profiler (`ncclProfiler_v6`)
//! statics in-process.

use std::ffi::{CStr, c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

use ferroccl_plugin_api::abi::{self, ncclResult_t};
use ferroccl_plugin_api::sdk::{CostTable, NetError, NetResult, Profiler, ProfilerInit, Tuner, TunerInit};

struct RingTuner {
    n_ranks: usize,
}

impl Tuner for RingTuner {
    const NAME: &'static CStr = c"RingTuner";
    fn init(info: TunerInit<'_>) -> NetResult<Self> {
        if let Some(c) = info.constants {
            c.baseLatencies[0][0] = 42.0;
        }
        Ok(RingTuner { n_ranks: info.n_ranks })
    }
    fn get_coll_info(
        &self,
        _coll: abi::ncclFunc_t,
        n_bytes: usize,
        _pipe: i32,
        _reg: bool,
        costs: &mut CostTable<'_>,
        n_channels: &mut i32,
    ) -> NetResult<()> {
        if n_bytes == 666 {
            panic!("tuner panic");
        }
        costs.set(abi::NCCL_ALGO_RING as usize, abi::NCCL_PROTO_SIMPLE as usize, 0.0);
        *n_channels = self.n_ranks as i32;
        Ok(())
    }
    fn get_chunk_size(
        &self,
        _c: abi::ncclFunc_t,
        _n: usize,
        _a: i32,
        _p: i32,
        _ch: i32,
        chunk: &mut usize,
    ) -> NetResult<()> {
        *chunk = 1 << 20;
        Ok(())
    }
}

ferroccl_plugin_api::export_tuner_plugin!(RingTuner);

static EVENTS: AtomicUsize = AtomicUsize::new(0);
static STATES: AtomicUsize = AtomicUsize::new(0);

struct CountProfiler;
impl Profiler for CountProfiler {
    const NAME: &'static CStr = c"Count";
    type Event = u64;
    fn init(info: ProfilerInit<'_>, mask: &mut i32) -> NetResult<Self> {
        if info.rank < 0 {
            return Err(NetError::InvalidArgument("negative rank".into()));
        }
        *mask = (abi::ncclProfileColl | abi::ncclProfileProxyStep) as i32;
        Ok(CountProfiler)
    }
    fn start_event(&self, d: &abi::ncclProfilerEventDescr_v6_t) -> NetResult<Option<u64>> {
        Ok((d.r#type == abi::ncclProfileColl).then_some(d.r#type))
    }
    fn record_event_state(
        &self,
        _e: &mut u64,
        _s: i32,
        _a: Option<&abi::ncclProfilerEventStateArgs_v6_t>,
    ) -> NetResult<()> {
        STATES.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn stop_event(&self, _e: u64) -> NetResult<()> {
        EVENTS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

ferroccl_plugin_api::export_profiler_plugin!(CountProfiler);

const OK: ncclResult_t = ncclResult_t::ncclSuccess;

#[test]
fn tuner_v6_cost_table_chunk_size_and_panic() {
    let t = &ncclTunerPlugin_v6;
    // SAFETY: (whole test) calling the exported vtable with valid pointers, as NCCL does.
    unsafe {
        let mut ctx = null_mut();
        let mut nvl = abi::ncclNvlDomainInfo_v5_t {
            nNvlDomains: 1,
            minRanksPerNvlDomain: 4,
            maxRanksPerNvlDomain: 4,
        };
        let mut consts = abi::ncclTunerConstants_v5_t::zeroed();
        assert_eq!(t.init.unwrap()(&mut ctx, 9, 4, 1, None, &mut nvl, &mut consts), OK);
        assert_eq!(consts.baseLatencies[0][0], 42.0);
        let mut table = [[1.0f32; 3]; 7];
        let mut nch: c_int = 0;
        let tp = table.as_mut_ptr() as *mut *mut f32;
        assert_eq!(
            t.getCollInfo.unwrap()(ctx, abi::ncclFunc_t::ncclFuncAllReduce, 1024, 1, tp, 7, 3, 0, &mut nch),
            OK
        );
        assert_eq!(
            table[abi::NCCL_ALGO_RING as usize][abi::NCCL_PROTO_SIMPLE as usize],
            0.0
        );
        assert_eq!(nch, 4);
        assert_eq!(
            t.getCollInfo.unwrap()(ctx, abi::ncclFunc_t::ncclFuncAllReduce, 666, 1, tp, 7, 3, 0, &mut nch),
            ncclResult_t::ncclInternalError
        );
        let mut chunk = 4096usize;
        assert_eq!(
            t.getChunkSize.unwrap()(ctx, abi::ncclFunc_t::ncclFuncAllReduce, 1 << 24, 1, 2, 4, &mut chunk),
            OK
        );
        assert_eq!(chunk, 1 << 20);
        assert_eq!(t.finalize.unwrap()(ctx), OK);
        assert_eq!(t.finalize.unwrap()(null_mut()), ncclResult_t::ncclInvalidArgument);
    }
}

#[test]
fn tuner_v2_reports_lowered_entry() {
    let t = &ncclTunerPlugin_v2;
    // SAFETY: (whole test) calling the exported vtable with valid pointers, as NCCL does.
    unsafe {
        let mut ctx = null_mut();
        assert_eq!(t.init.unwrap()(8, 2, None, &mut ctx), OK);
        let (mut algo, mut proto, mut nch): (c_int, c_int, c_int) = (-1, -1, 0);
        assert_eq!(
            t.getCollInfo.unwrap()(
                ctx,
                abi::ncclFunc_t::ncclFuncAllReduce,
                1024,
                0,
                0,
                1,
                &mut algo,
                &mut proto,
                &mut nch
            ),
            OK
        );
        assert_eq!((algo, proto, nch), (abi::NCCL_ALGO_RING, abi::NCCL_PROTO_SIMPLE, 8));
        assert_eq!(t.destroy.unwrap()(ctx), OK);
    }
}

#[test]
fn profiler_v6_event_lifecycle() {
    let p = &ncclProfiler_v6;
    // SAFETY: (whole test) calling the exported vtable with valid pointers, as NCCL does.
    unsafe {
        let mut ctx = null_mut();
        let mut mask: c_int = 0;
        assert_eq!(
            p.init.unwrap()(&mut ctx, 7, &mut mask, c"comm".as_ptr(), 1, 2, 0, None),
            OK
        );
        assert_eq!(mask as u64, abi::ncclProfileColl | abi::ncclProfileProxyStep);
        assert_eq!(
            p.init.unwrap()(&mut null_mut(), 7, &mut mask, null_mut(), 1, 2, -1, None),
            ncclResult_t::ncclInvalidArgument
        );

        let mut d = abi::ncclProfilerEventDescr_v6_t::zeroed();
        d.r#type = abi::ncclProfileColl;
        let mut h: *mut c_void = null_mut();
        assert_eq!(p.startEvent.unwrap()(ctx, &mut h, &mut d), OK);
        assert!(!h.is_null());
        let mut args = abi::ncclProfilerEventStateArgs_v6_t::zeroed();
        assert_eq!(
            p.recordEventState.unwrap()(h, abi::ncclProfilerProxyStepSendWait, &mut args),
            OK
        );
        assert_eq!(
            p.recordEventState.unwrap()(h, abi::ncclProfilerKernelChStop, null_mut()),
            OK
        );
        let before = EVENTS.load(Ordering::SeqCst);
        assert_eq!(p.stopEvent.unwrap()(h), OK);
        assert_eq!(EVENTS.load(Ordering::SeqCst), before + 1);
        assert!(STATES.load(Ordering::SeqCst) >= 2);

        d.r#type = abi::ncclProfileP2p;
        let mut h2: *mut c_void = std::ptr::dangling_mut();
        assert_eq!(p.startEvent.unwrap()(ctx, &mut h2, &mut d), OK);
        assert!(h2.is_null(), "untracked events get a NULL handle");
        // NCCL forwards a net plugin's Stop of an untracked event as stopEvent(NULL);
        // profilers must accept it (docs/reference/nccl-graph-tuning.md §6.3 notes).
        assert_eq!(p.stopEvent.unwrap()(null_mut()), OK);
        assert_eq!(p.finalize.unwrap()(ctx), OK);
    }
}
