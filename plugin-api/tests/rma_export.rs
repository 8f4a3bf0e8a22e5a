//! Drives the `ncclRmaPlugin_v14` / `_v13` statics emitted by `export_rma_plugin!`
//! in-process, with a one-rank loopback plugin, the way NCCL calls them: the v13
//! differences (GIN config, NULL device and GIN handles, no `isStrongSignal`), the
//! checks the shims make before the plugin runs (window bounds, signal alignment and
//! op, context and rank range, handle kinds), requests freed by the `test` that
//! completes them, and a panicking plugin method turned into an error.

use std::ffi::{CStr, c_int, c_void};
use std::ptr::null_mut;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use ferroccl_plugin_api::abi::{self, ncclResult_t};
use ferroccl_plugin_api::sdk::rma::{Rma, RmaConfig, Signal, Xfer};
use ferroccl_plugin_api::sdk::{Buf, Handle, NetResult, Properties, PtrType};

static REQS_DROPPED: AtomicUsize = AtomicUsize::new(0);
static LAST_CONFIG: Mutex<Option<RmaConfig>> = Mutex::new(None);
static SERIAL: Mutex<()> = Mutex::new(());

/// One rank: every operation targets this process's own windows and completes at once.
struct Loop;
struct Win(Buf);
struct Req;
impl Drop for Req {
    fn drop(&mut self) {
        REQS_DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

impl Rma for Loop {
    const NAME: &'static CStr = c"LoopRma";
    type Ctx = ();
    type ListenComm = ();
    type CollComm = ();
    type RmaCtx = ();
    type Mr = Win;
    type Request = Req;

    fn new() -> NetResult<Self> {
        Ok(Loop)
    }
    fn init(&self, _comm_id: u64) -> NetResult<()> {
        Ok(())
    }
    fn devices(&self) -> NetResult<usize> {
        Ok(1)
    }
    fn properties(&self, _dev: usize) -> NetResult<Properties> {
        Ok(Properties {
            name: "loop".into(),
            ptr_support: abi::NCCL_PTR_HOST,
            max_comms: 1,
            max_recvs: 1,
            max_p2p_bytes: 1 << 30,
            max_coll_bytes: 1 << 30,
            ..Properties::default()
        })
    }
    fn listen(&self, _ctx: &(), _dev: usize, handle: &mut Handle) -> NetResult<()> {
        handle[0] = 0x42;
        Ok(())
    }
    fn connect(&self, _ctx: &(), handles: &[Handle], rank: usize, _l: &mut ()) -> NetResult<()> {
        assert_eq!((handles.len(), rank, handles[0][0]), (1, 0, 0x42));
        Ok(())
    }
    fn create_context(&self, _coll: &(), config: &RmaConfig) -> NetResult<()> {
        *LAST_CONFIG.lock().unwrap() = Some(*config);
        Ok(())
    }
    fn reg_mr_sym(&self, _coll: &(), buf: Buf, _ty: PtrType, _flags: u64) -> NetResult<Win> {
        Ok(Win(buf))
    }
    fn iput(&self, _ctx: &(), x: Xfer<'_, Win>, signal: Option<Signal<'_, Win>>) -> NetResult<Req> {
        // SAFETY: the shims checked both ranges against the registrations.
        unsafe {
            std::ptr::copy(x.local.0.ptr.add(x.local_off), x.remote.0.ptr.add(x.remote_off), x.size);
        }
        if let Some(s) = signal {
            // SAFETY: in the window and 8-byte aligned in it (checked by the shims); the
            // test's windows are 8-byte aligned.
            let w = unsafe { AtomicU64::from_ptr(s.window.0.ptr.add(s.off).cast()) };
            w.fetch_add(s.op.delta(s.value), Ordering::Release);
        }
        Ok(Req)
    }
    fn iget(&self, _ctx: &(), _x: Xfer<'_, Win>) -> NetResult<Req> {
        panic!("iget is broken in this plugin");
    }
    fn iflush(&self, _ctx: &(), _c: usize, _mr: &Win, _rank: usize) -> NetResult<Req> {
        Ok(Req)
    }
    fn test(&self, _coll: &(), _req: &mut Req) -> NetResult<bool> {
        Ok(true)
    }
}

ferroccl_plugin_api::export_rma_plugin!(Loop);

const OK: ncclResult_t = ncclResult_t::ncclSuccess;
const BAD_ARG: ncclResult_t = ncclResult_t::ncclInvalidArgument;
const INTERNAL: ncclResult_t = ncclResult_t::ncclInternalError;

/// init → listen → connect(1 rank) → closeListen, through the given table's slots.
macro_rules! connect {
    ($t:expr) => {{
        let t = $t;
        let mut ctx: *mut c_void = null_mut();
        // SAFETY: the slots of our own table, called with valid pointers.
        unsafe {
            assert_eq!(t.init.unwrap()(&mut ctx, 7, None), OK);
            let mut n: c_int = 0;
            assert_eq!(t.devices.unwrap()(&mut n), OK);
            assert_eq!(n, 1);
            let mut p = abi::ncclNetProperties_v12_t::zeroed();
            assert_eq!(t.getProperties.unwrap()(0, &mut p), OK);
            assert_eq!(p.ptrSupport, abi::NCCL_PTR_HOST);
            let mut h = [0u8; 128];
            let mut l: *mut c_void = null_mut();
            assert_eq!(t.listen.unwrap()(ctx, 0, h.as_mut_ptr().cast(), &mut l), OK);
            let mut hp: [*mut c_void; 1] = [h.as_mut_ptr().cast()];
            let mut coll: *mut c_void = null_mut();
            assert_eq!(t.connect.unwrap()(ctx, hp.as_mut_ptr(), 1, 0, l, &mut coll), OK);
            assert_eq!(t.closeListen.unwrap()(l), OK);
            (ctx, coll)
        }
    }};
}

#[test]
fn v14_put_signal_and_the_shims_checks() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = &ncclRmaPlugin_v14.0;
    let (ctx, coll) = connect!(t);
    let mut src = vec![0u64; 64];
    let mut dst = vec![0u64; 64];
    for (i, v) in src.iter_mut().enumerate() {
        *v = i as u64 * 3;
    }
    // SAFETY: our own table's slots with valid pointers throughout.
    unsafe {
        let mut cfg = abi::ncclRmaConfig_v14_t {
            nContexts: 2,
            trafficClass: 5,
        };
        let mut rctx: *mut c_void = null_mut();
        assert_eq!(t.createContext.unwrap()(coll, &mut cfg, &mut rctx), OK);
        assert_eq!(
            *LAST_CONFIG.lock().unwrap(),
            Some(RmaConfig {
                n_contexts: 2,
                traffic_class: 5
            })
        );
        let (mut smr, mut dmr) = (null_mut(), null_mut());
        assert_eq!(
            t.regMrSym.unwrap()(coll, src.as_mut_ptr().cast(), 512, abi::NCCL_PTR_HOST, 0, &mut smr),
            OK
        );
        assert_eq!(
            t.regMrSym.unwrap()(coll, dst.as_mut_ptr().cast(), 512, abi::NCCL_PTR_HOST, 0, &mut dmr),
            OK
        );
        let put_signal = t.iputSignal.unwrap();
        let mut req: *mut c_void = null_mut();
        // 64 bytes from offset 8 to offset 16, signal word at 504: ADD 5.
        assert_eq!(
            put_signal(
                rctx,
                1,
                8,
                smr,
                64,
                16,
                dmr,
                0,
                504,
                dmr,
                5,
                abi::NCCL_NET_SIGNAL_OP_ADD,
                true,
                &mut req
            ),
            OK
        );
        let dropped = REQS_DROPPED.load(Ordering::SeqCst);
        let mut done: c_int = 0;
        assert_eq!(t.test.unwrap()(coll, req, &mut done), OK);
        assert_eq!(done, 1);
        assert_eq!(
            REQS_DROPPED.load(Ordering::SeqCst),
            dropped + 1,
            "test frees a done request"
        );
        assert_eq!(&dst[2..10], &src[1..9]);
        assert_eq!(dst[63], 5);
        // A plain put, tested to completion.
        let mut q: *mut c_void = null_mut();
        assert_eq!(t.iput.unwrap()(rctx, 0, 0, smr, 8, 0, dmr, 0, &mut q), OK);
        assert_eq!(t.test.unwrap()(coll, q, &mut done), OK);
        assert_eq!((done, dst[0]), (1, src[0]));
        // Refused before the plugin runs, each with ncclInvalidArgument:
        let cases: [(&str, ncclResult_t); 7] = [
            (
                "out of the source window",
                t.iput.unwrap()(rctx, 0, 500, smr, 16, 0, dmr, 0, &mut q),
            ),
            (
                "out of the destination window",
                t.iput.unwrap()(rctx, 0, 0, smr, 16, 500, dmr, 0, &mut q),
            ),
            (
                "offset overflow",
                t.iput.unwrap()(rctx, 0, u64::MAX, smr, 16, 0, dmr, 0, &mut q),
            ),
            ("context 2 of 2", t.iput.unwrap()(rctx, 2, 0, smr, 8, 0, dmr, 0, &mut q)),
            ("rank 1 of 1", t.iput.unwrap()(rctx, 0, 0, smr, 8, 0, dmr, 1, &mut q)),
            (
                "misaligned signal",
                put_signal(rctx, 0, 0, smr, 8, 0, dmr, 0, 4, dmr, 1, 1, true, &mut q),
            ),
            (
                "unknown signal op",
                put_signal(rctx, 0, 0, smr, 8, 0, dmr, 0, 8, dmr, 1, 9, true, &mut q),
            ),
        ];
        for (what, r) in cases {
            assert_eq!(r, BAD_ARG, "{what}");
        }
        // A handle of the wrong kind (the collComm as an RMA context) is an internal error.
        assert_eq!(t.iput.unwrap()(coll, 0, 0, smr, 8, 0, dmr, 0, &mut q), INTERNAL);
        // A panicking plugin method comes back as ncclInternalError.
        assert_eq!(t.iget.unwrap()(rctx, 0, 0, smr, 8, 0, dmr, 0, &mut q), INTERNAL);
        let mut has = true;
        assert_eq!(t.queryLastError.unwrap()(rctx, &mut has), OK);
        assert!(!has);
        assert!(t.rmaProgress.is_none(), "no progress function unless HAS_PROGRESS");
        assert_eq!(t.destroyContext.unwrap()(rctx), OK);
        assert_eq!(t.deregMrSym.unwrap()(coll, smr), OK);
        assert_eq!(t.deregMrSym.unwrap()(coll, dmr), OK);
        assert_eq!(t.closeColl.unwrap()(coll), OK);
        assert_eq!(t.finalize.unwrap()(ctx), OK);
    }
}

#[test]
fn v13_takes_the_gin_config_and_returns_null_device_and_gin_handles() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let t = &ncclRmaPlugin_v13.0;
    let (ctx, coll) = connect!(t);
    let mut buf = vec![0u64; 8];
    // SAFETY: our own table's slots with valid pointers throughout.
    unsafe {
        let mut cfg = abi::ncclGinConfig_v13_t {
            nSignals: 9,
            nCounters: 9,
            nContexts: 1,
            queueDepth: 9,
            trafficClass: 3,
        };
        let mut rctx: *mut c_void = null_mut();
        let mut dev = std::ptr::dangling_mut::<abi::ncclNetDeviceHandle_v11_t>();
        assert_eq!(t.createContext.unwrap()(coll, &mut cfg, &mut rctx, &mut dev), OK);
        assert!(dev.is_null(), "host RMA has no device handle");
        assert_eq!(
            *LAST_CONFIG.lock().unwrap(),
            Some(RmaConfig {
                n_contexts: 1,
                traffic_class: 3
            })
        );
        let mut mr: *mut c_void = null_mut();
        let mut gin = std::ptr::dangling_mut::<c_void>();
        assert_eq!(
            t.regMrSym.unwrap()(
                coll,
                buf.as_mut_ptr().cast(),
                64,
                abi::NCCL_PTR_HOST,
                0,
                &mut mr,
                &mut gin
            ),
            OK
        );
        assert!(gin.is_null());
        let mut req: *mut c_void = null_mut();
        // v13 iputSignal: no isStrongSignal; INC adds 1 whatever the value.
        assert_eq!(
            t.iputSignal.unwrap()(
                rctx,
                0,
                0,
                mr,
                0,
                0,
                mr,
                0,
                56,
                mr,
                100,
                abi::NCCL_NET_SIGNAL_OP_INC,
                &mut req
            ),
            OK
        );
        let mut done: c_int = 0;
        assert_eq!(t.test.unwrap()(coll, req, &mut done), OK);
        assert_eq!((done, buf[7]), (1, 1));
        assert_eq!(t.destroyContext.unwrap()(rctx), OK);
        assert_eq!(t.deregMrSym.unwrap()(coll, mr), OK);
        assert_eq!(t.closeColl.unwrap()(coll), OK);
        assert_eq!(t.finalize.unwrap()(ctx), OK);
    }
}
