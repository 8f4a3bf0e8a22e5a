//! Drives the `ncclCollNetPlugin_v6` … `_v12` statics emitted by
//! `export_collnet_plugin!` in-process, with a recording plugin, the way NCCL calls
//! them: argument conversion per version (int vs size_t counts, v8 vs v9 SGEs, the
//! window checks), size limits, and errors (never panics) for bad input.

use std::ffi::{CStr, c_int, c_void};
use std::ptr::null_mut;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use ferroccl_plugin_api::abi::{self, ncclDataType_t, ncclRedOp_t, ncclResult_t};
use ferroccl_plugin_api::sdk::collnet::{CollNet, Sge, Window};
use ferroccl_plugin_api::sdk::{Buf, Handle, NetError, NetResult, Properties, PtrType};

/// What the plugin was called with, as plain values.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Connect {
        nranks: usize,
        rank: usize,
        first: u8,
    },
    RegMr {
        len: usize,
        ty: PtrType,
    },
    AllReduce {
        send_len: usize,
        recv_len: usize,
        count: usize,
        dtype: i32,
        op: i32,
        mrs: (bool, bool),
    },
    AllGather {
        send_len: usize,
        parts: Vec<(usize, bool)>,
        window: Window,
    },
    ReduceScatter {
        parts: Vec<usize>,
        recv_len: usize,
        window: Window,
        dtype: i32,
    },
    Flush {
        len: usize,
    },
}

static CALLS: Mutex<Vec<Call>> = Mutex::new(Vec::new());
static REQS_DROPPED: AtomicUsize = AtomicUsize::new(0);
static CTXS: AtomicUsize = AtomicUsize::new(0);
/// Serializes the tests (they share the statics above).
static SERIAL: Mutex<()> = Mutex::new(());

fn record(c: Call) {
    CALLS.lock().unwrap().push(c);
}
fn last() -> Call {
    CALLS.lock().unwrap().last().cloned().expect("no call recorded")
}

struct Rec;
struct Listen;
struct Coll {
    rank: usize,
}
struct Mr;
/// Completes on the second `test`; `size` is what it reports.
struct Req {
    tests: u32,
    size: usize,
}
impl Drop for Req {
    fn drop(&mut self) {
        REQS_DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

fn req(size: usize) -> NetResult<Option<Req>> {
    Ok(Some(Req { tests: 0, size }))
}

impl CollNet for Rec {
    const NAME: &'static CStr = c"Rec";
    const HAS_IALLGATHER_IREDUCESCATTER: bool = true;
    type Ctx = ();
    type ListenComm = Listen;
    type CollComm = Coll;
    type Mr = Mr;
    type Request = Req;

    fn new() -> NetResult<Self> {
        Ok(Rec)
    }
    fn init(&self, _comm_id: u64) -> NetResult<()> {
        CTXS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn devices(&self) -> NetResult<usize> {
        Ok(1)
    }
    fn properties(&self, _dev: usize) -> NetResult<Properties> {
        Ok(Properties {
            name: "rec0".into(),
            ..Properties::default()
        })
    }
    fn listen(&self, _ctx: &(), _dev: usize, handle: &mut Handle) -> NetResult<Listen> {
        handle[0] = 0xab;
        Ok(Listen)
    }
    fn connect(&self, handles: &[&Handle], rank: usize, _l: &mut Listen) -> NetResult<Coll> {
        record(Call::Connect {
            nranks: handles.len(),
            rank,
            first: handles[0][0],
        });
        if rank == 7 {
            panic!("boom in connect");
        }
        Ok(Coll { rank })
    }
    fn reduce_support(&self, dtype: ncclDataType_t, op: ncclRedOp_t) -> bool {
        dtype == ncclDataType_t::ncclFloat32 && op == ncclRedOp_t::ncclSum
    }
    fn reg_mr(&self, _c: &mut Coll, buf: Buf, ty: PtrType) -> NetResult<Mr> {
        record(Call::RegMr { len: buf.len, ty });
        Ok(Mr)
    }
    fn iallreduce(
        &self,
        _c: &mut Coll,
        send: Buf,
        recv: Buf,
        count: usize,
        dtype: ncclDataType_t,
        op: ncclRedOp_t,
        smr: Option<&Mr>,
        rmr: Option<&Mr>,
    ) -> NetResult<Option<Req>> {
        record(Call::AllReduce {
            send_len: send.len,
            recv_len: recv.len,
            count,
            dtype: dtype.raw(),
            op: op.raw(),
            mrs: (smr.is_some(), rmr.is_some()),
        });
        if count == 12345 {
            return Ok(None);
        }
        if count == 999 {
            return Err(NetError::Remote("peer rank 1 died".into()));
        }
        req(recv.len)
    }
    fn iallgather(
        &self,
        _c: &mut Coll,
        send: Buf,
        _smr: Option<&Mr>,
        parts: &[Sge<'_, Mr>],
        window: Window,
    ) -> NetResult<Option<Req>> {
        record(Call::AllGather {
            send_len: send.len,
            parts: parts.iter().map(|p| (p.buf.len, p.mr.is_some())).collect(),
            window,
        });
        req(window.bytes)
    }
    fn ireducescatter(
        &self,
        c: &mut Coll,
        parts: &[Sge<'_, Mr>],
        recv: Buf,
        _rmr: Option<&Mr>,
        window: Window,
        dtype: ncclDataType_t,
        _op: ncclRedOp_t,
    ) -> NetResult<Option<Req>> {
        record(Call::ReduceScatter {
            parts: parts.iter().map(|p| p.buf.len).collect(),
            recv_len: recv.len,
            window,
            dtype: dtype.raw(),
        });
        req(window.rank_part(c.rank).1)
    }
    fn iflush(&self, _c: &mut Coll, buf: Buf, _mr: Option<&Mr>) -> NetResult<Option<Req>> {
        record(Call::Flush { len: buf.len });
        if buf.len == 0 { Ok(None) } else { req(0) }
    }
    fn test(&self, r: &mut Req) -> NetResult<Option<usize>> {
        r.tests += 1;
        Ok((r.tests >= 2).then_some(r.size))
    }
}

ferroccl_plugin_api::export_collnet_plugin!(Rec);

const OK: ncclResult_t = ncclResult_t::ncclSuccess;

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A collComm of rank `rank` of `nranks` through the v12 table.
fn connect_v12(nranks: usize, rank: usize) -> (*mut c_void, *mut c_void) {
    let t = &ncclCollNetPlugin_v12;
    let mut ctx = null_mut();
    // SAFETY: valid out-pointers; logger may be None.
    assert_eq!(unsafe { t.init.unwrap()(&mut ctx, 42, None) }, OK);
    let mut handle: Handle = [0; 128];
    let mut listen = null_mut();
    assert_eq!(
        // SAFETY: valid ctx, handle buffer and out-pointer.
        unsafe { t.listen.unwrap()(ctx, 0, handle.as_mut_ptr() as *mut c_void, &mut listen) },
        OK
    );
    let mut hs: Vec<Handle> = vec![handle; nranks];
    let mut ptrs: Vec<*mut c_void> = hs.iter_mut().map(|h| h.as_mut_ptr() as *mut c_void).collect();
    let mut coll = null_mut();
    // SAFETY: `ptrs` holds nranks handle pointers.
    let r = unsafe { t.connect.unwrap()(ptrs.as_mut_ptr(), nranks as c_int, rank as c_int, listen, &mut coll) };
    assert_eq!(r, OK);
    // SAFETY: from our listen.
    assert_eq!(unsafe { t.closeListen.unwrap()(listen) }, OK);
    assert!(!coll.is_null());
    (ctx, coll)
}

fn finish(ctx: *mut c_void, coll: *mut c_void) {
    let t = &ncclCollNetPlugin_v12;
    // SAFETY: from our connect / init.
    unsafe {
        assert_eq!(t.closeColl.unwrap()(coll), OK);
        assert_eq!(t.finalize.unwrap()(ctx), OK);
    }
}

/// Tests `req` until done through `test`, returning the size reported.
fn wait(test: unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int) -> ncclResult_t, req: *mut c_void) -> c_int {
    assert!(!req.is_null());
    for _ in 0..10 {
        let (mut done, mut size) = (0, -1);
        // SAFETY: `req` is a live request of ours.
        assert_eq!(unsafe { test(req, &mut done, &mut size) }, OK);
        if done == 1 {
            return size;
        }
    }
    panic!("request never completed");
}

#[test]
fn tables_have_the_version_slots() {
    let _g = lock();
    // SAFETY: `name` is the plugin's static C string.
    assert_eq!(unsafe { CStr::from_ptr(ncclCollNetPlugin_v6.name) }, c"Rec");
    assert!(ncclCollNetPlugin_v8.iallgather.is_some() && ncclCollNetPlugin_v8.ireducescatter.is_some());
    assert!(ncclCollNetPlugin_v9.makeVDevice.is_some());
    assert!(ncclCollNetPlugin_v11.finalize.is_some() && ncclCollNetPlugin_v12.finalize.is_some());
    // A plugin without iallgather/ireducescatter gets NULL slots (NCCL then skips
    // CollNet for AllGather/ReduceScatter).
    struct NoAg;
    impl CollNet for NoAg {
        const NAME: &'static CStr = c"NoAg";
        type Ctx = ();
        type ListenComm = ();
        type CollComm = ();
        type Mr = ();
        type Request = ();
        fn new() -> NetResult<Self> {
            Ok(NoAg)
        }
        fn init(&self, _: u64) -> NetResult<()> {
            Ok(())
        }
        fn devices(&self) -> NetResult<usize> {
            Ok(0)
        }
        fn properties(&self, _: usize) -> NetResult<Properties> {
            Ok(Properties::default())
        }
        fn listen(&self, _: &(), _: usize, _: &mut Handle) -> NetResult<()> {
            Ok(())
        }
        fn connect(&self, _: &[&Handle], _: usize, _: &mut ()) -> NetResult<()> {
            Ok(())
        }
        fn reduce_support(&self, _: ncclDataType_t, _: ncclRedOp_t) -> bool {
            false
        }
        fn reg_mr(&self, _: &mut (), _: Buf, _: PtrType) -> NetResult<()> {
            Ok(())
        }
        fn iallreduce(
            &self,
            _: &mut (),
            _: Buf,
            _: Buf,
            _: usize,
            _: ncclDataType_t,
            _: ncclRedOp_t,
            _: Option<&()>,
            _: Option<&()>,
        ) -> NetResult<Option<()>> {
            Ok(None)
        }
        fn test(&self, _: &mut ()) -> NetResult<Option<usize>> {
            Ok(Some(0))
        }
    }
    ferroccl_plugin_api::collnet_plugin_state!(NoAg);
    let v8 = ferroccl_plugin_api::export::collnet::collnet_v8::<NoAg>();
    let v12 = ferroccl_plugin_api::export::collnet::collnet_v12::<NoAg>();
    assert!(v8.iallgather.is_none() && v8.ireducescatter.is_none());
    assert!(v12.iallgather.is_none() && v12.ireducescatter.is_none());
}

#[test]
fn v6_shared_context_int_sizes_and_limits() {
    let _g = lock();
    let t = &ncclCollNetPlugin_v6;
    // SAFETY: plain C calls with valid pointers as NCCL makes them.
    unsafe {
        assert_eq!(t.init.unwrap()(None), OK);
        let mut n = 0;
        assert_eq!(t.devices.unwrap()(&mut n), OK);
        assert_eq!(n, 1);
        let mut props: abi::ncclNetProperties_v6_t = std::mem::zeroed();
        assert_eq!(t.getProperties.unwrap()(0, &mut props), OK);
        assert_eq!(CStr::from_ptr(props.name), c"rec0");
        assert_ne!(t.getProperties.unwrap()(1, &mut props), OK, "device 1 is out of range");

        let mut sup = -1;
        assert_eq!(
            t.reduceSupport.unwrap()(ncclDataType_t::ncclFloat32, ncclRedOp_t::ncclSum, &mut sup),
            OK
        );
        assert_eq!(sup, 1);
        assert_eq!(
            t.reduceSupport.unwrap()(ncclDataType_t::ncclInt8, ncclRedOp_t::ncclAvg, &mut sup),
            OK
        );
        assert_eq!(sup, 0);

        let mut handle: Handle = [0; 128];
        let mut listen = null_mut();
        assert_eq!(
            t.listen.unwrap()(0, handle.as_mut_ptr() as *mut c_void, &mut listen),
            OK
        );
        let mut hs = [handle; 3];
        let mut ptrs: Vec<*mut c_void> = hs.iter_mut().map(|h| h.as_mut_ptr() as *mut c_void).collect();
        let mut coll = null_mut();
        assert_eq!(t.connect.unwrap()(ptrs.as_mut_ptr(), 3, 1, listen, &mut coll), OK);
        assert_eq!(
            last(),
            Call::Connect {
                nranks: 3,
                rank: 1,
                first: 0xab
            }
        );
        // rank outside 0..nranks, NULL handle entry: errors, not crashes.
        let mut c2 = null_mut();
        assert_eq!(
            t.connect.unwrap()(ptrs.as_mut_ptr(), 3, 3, listen, &mut c2),
            ncclResult_t::ncclInvalidArgument
        );
        ptrs[2] = null_mut();
        assert_eq!(
            t.connect.unwrap()(ptrs.as_mut_ptr(), 3, 0, listen, &mut c2),
            ncclResult_t::ncclInvalidArgument
        );
        assert!(c2.is_null());
        assert_eq!(t.closeListen.unwrap()(listen), OK);

        let mut data = vec![0f32; 16];
        let p = data.as_mut_ptr() as *mut c_void;
        let mut mh = null_mut();
        assert_eq!(t.regMr.unwrap()(coll, p, 64, abi::NCCL_PTR_HOST, &mut mh), OK);
        assert_eq!(
            last(),
            Call::RegMr {
                len: 64,
                ty: PtrType::Host
            }
        );
        assert_eq!(
            t.regMr.unwrap()(coll, p, -1, abi::NCCL_PTR_HOST, &mut mh),
            ncclResult_t::ncclInvalidArgument
        );
        let mut mh = null_mut();
        assert_eq!(t.regMr.unwrap()(coll, p, 64, abi::NCCL_PTR_HOST, &mut mh), OK);

        // int count → elements × dtype size.
        let mut req = null_mut();
        let (f32t, sum) = (ncclDataType_t::ncclFloat32, ncclRedOp_t::ncclSum);
        assert_eq!(
            t.iallreduce.unwrap()(coll, p, p, 16, f32t, sum, mh, null_mut(), &mut req),
            OK
        );
        assert_eq!(
            last(),
            Call::AllReduce {
                send_len: 64,
                recv_len: 64,
                count: 16,
                dtype: 7,
                op: 0,
                mrs: (true, false)
            }
        );
        assert_eq!(wait(t.test.unwrap(), req), 64);
        // Negative and > 2^30 int counts are rejected before the plugin sees them.
        let n = CALLS.lock().unwrap().len();
        assert_eq!(
            t.iallreduce.unwrap()(coll, p, p, -1, f32t, sum, mh, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(
            t.iallreduce.unwrap()(coll, p, p, (1 << 30) + 1, f32t, sum, mh, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        // Unknown dtype, NULL data with a non-zero count.
        assert_eq!(
            t.iallreduce.unwrap()(coll, p, p, 4, ncclDataType_t(77), sum, mh, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(
            t.iallreduce.unwrap()(coll, null_mut(), p, 4, f32t, sum, mh, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        assert!(req.is_null());
        assert_eq!(
            CALLS.lock().unwrap().len(),
            n,
            "rejected calls must not reach the plugin"
        );
        // Count 0 with NULL buffers is fine (empty collective).
        assert_eq!(
            t.iallreduce.unwrap()(
                coll,
                null_mut(),
                null_mut(),
                0,
                f32t,
                sum,
                null_mut(),
                null_mut(),
                &mut req
            ),
            OK
        );
        assert_eq!(wait(t.test.unwrap(), req), 0);
        // Plugin errors pass through with their code; Ok(None) leaves *request NULL.
        let mut big = vec![0f32; 12345];
        let bp = big.as_mut_ptr() as *mut c_void;
        let mut r2 = std::ptr::dangling_mut::<c_void>();
        assert_eq!(
            t.iallreduce.unwrap()(coll, bp, bp, 12345, f32t, sum, mh, mh, &mut r2),
            OK
        );
        assert!(r2.is_null());
        let mut b9 = vec![0f32; 999];
        let b9p = b9.as_mut_ptr() as *mut c_void;
        assert_eq!(
            t.iallreduce.unwrap()(coll, b9p, b9p, 999, f32t, sum, mh, mh, &mut r2),
            ncclResult_t::ncclRemoteError
        );

        // iflush int size: 0 bytes → nothing to do (NULL request = complete);
        // negative → error.
        let mut fr = std::ptr::dangling_mut::<c_void>();
        assert_eq!(t.iflush.unwrap()(coll, p, 0, mh, &mut fr), OK);
        assert!(fr.is_null());
        assert_eq!(t.iflush.unwrap()(coll, p, 64, mh, &mut fr), OK);
        assert_eq!(last(), Call::Flush { len: 64 });
        // test with a NULL size pointer (NCCL's recv proxy passes NULL).
        let mut done = 0;
        while done == 0 {
            assert_eq!(t.test.unwrap()(fr, &mut done, null_mut()), OK);
        }
        assert_eq!(
            t.iflush.unwrap()(coll, p, -4, mh, &mut fr),
            ncclResult_t::ncclInvalidArgument
        );

        assert_eq!(t.deregMr.unwrap()(coll, mh), OK);
        // The mhandle is gone: using it again is an error, not a crash.
        assert_eq!(t.deregMr.unwrap()(coll, mh), ncclResult_t::ncclInternalError);
        assert_eq!(t.closeColl.unwrap()(coll), OK);
        assert_eq!(t.closeColl.unwrap()(coll), ncclResult_t::ncclInternalError);
    }
}

#[test]
fn v8_sges_are_32_bit_and_limited_v9_are_size_t() {
    let _g = lock();
    let t8 = &ncclCollNetPlugin_v8;
    let t9 = &ncclCollNetPlugin_v9;
    // SAFETY: v8/v9 share the pre-v11 shared context.
    assert_eq!(unsafe { t8.init.unwrap()(None) }, OK);
    let (ctx, coll) = connect_v12(4, 2);
    let mut buf = vec![0u8; 4096];
    let base = buf.as_mut_ptr();
    let mut mh = null_mut();
    // SAFETY: the collComm is shared across table versions (same plugin object).
    unsafe {
        assert_eq!(
            t8.regMr.unwrap()(coll, base as *mut c_void, 4096, abi::NCCL_PTR_HOST, &mut mh),
            OK
        );
        assert_eq!(
            last(),
            Call::RegMr {
                len: 4096,
                ty: PtrType::Host
            }
        );

        // 4 ranks × 100 bytes, window [150, 350): rank 2 owns [200, 300) → 100 bytes.
        let mut p8 = [
            abi::ncclNetSGE_v8_t {
                mhandle: mh,
                address: base as *mut c_void,
                size: 120,
            },
            abi::ncclNetSGE_v8_t {
                mhandle: null_mut(),
                address: base.add(1000) as *mut c_void,
                size: 80,
            },
        ];
        let mut req = null_mut();
        let send = base.add(2000) as *mut c_void;
        assert_eq!(
            t8.iallgather.unwrap()(coll, send, 2, p8.as_mut_ptr(), 100, 150, 200, mh, &mut req),
            OK
        );
        let w = Window {
            bytes_per_rank: 100,
            offset: 150,
            bytes: 200,
        };
        assert_eq!(
            last(),
            Call::AllGather {
                send_len: 100,
                parts: vec![(120, true), (80, false)],
                window: w
            }
        );
        assert_eq!(wait(t8.test.unwrap(), req), 200);

        // Parts that do not add up to windowBytes; a window past the end; a v8 part
        // above 2^29; a negative part count: errors.
        let n = CALLS.lock().unwrap().len();
        assert_eq!(
            t8.iallgather.unwrap()(coll, send, 2, p8.as_mut_ptr(), 100, 150, 199, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(
            t8.iallgather.unwrap()(coll, send, 2, p8.as_mut_ptr(), 100, 250, 200, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        p8[0].size = (1 << 29) + 1;
        assert_eq!(
            t8.iallgather.unwrap()(coll, send, 1, p8.as_mut_ptr(), 1 << 30, 0, (1 << 29) + 1, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(
            t8.iallgather.unwrap()(coll, send, -1, p8.as_mut_ptr(), 100, 0, 0, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(
            t8.iallgather.unwrap()(coll, send, 1, null_mut(), 100, 0, 10, mh, &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(CALLS.lock().unwrap().len(), n);

        // v9: size_t parts beyond 32 bits pass through unchanged.
        let huge = (1usize << 33) - 8;
        let mut p9 = [abi::ncclNetSGE_v9_t {
            mhandle: mh,
            address: base as *mut c_void,
            size: huge,
        }];
        assert_eq!(
            t9.iallgather.unwrap()(coll, send, 1, p9.as_mut_ptr(), 1 << 32, 1 << 33, huge, mh, &mut req),
            OK
        );
        let w9 = Window {
            bytes_per_rank: 1 << 32,
            offset: 1 << 33,
            bytes: huge,
        };
        assert_eq!(
            last(),
            Call::AllGather {
                send_len: 1 << 32,
                parts: vec![(huge, true)],
                window: w9
            }
        );
        // The test size saturates at INT_MAX (collnet test size is an int in every version).
        assert_eq!(wait(t9.test.unwrap(), req), c_int::MAX);

        // ireducescatter, v8 and v9; rank 2's part of window [150, 350) is 100 bytes.
        let mut p8 = [abi::ncclNetSGE_v8_t {
            mhandle: mh,
            address: base as *mut c_void,
            size: 200,
        }];
        let f32t = ncclDataType_t::ncclFloat32;
        let recv = base.add(3000) as *mut c_void;
        assert_eq!(
            t8.ireducescatter.unwrap()(
                coll,
                1,
                p8.as_mut_ptr(),
                recv,
                100,
                152,
                200,
                f32t,
                ncclRedOp_t::ncclSum,
                mh,
                &mut req
            ),
            OK
        );
        let w = Window {
            bytes_per_rank: 100,
            offset: 152,
            bytes: 200,
        };
        assert_eq!(
            last(),
            Call::ReduceScatter {
                parts: vec![200],
                recv_len: 100,
                window: w,
                dtype: 7
            }
        );
        assert_eq!(wait(t8.test.unwrap(), req), 100);
        // Window not a multiple of the element size: error.
        assert_eq!(
            t8.ireducescatter.unwrap()(
                coll,
                1,
                p8.as_mut_ptr(),
                recv,
                100,
                150,
                200,
                f32t,
                ncclRedOp_t::ncclSum,
                mh,
                &mut req
            ),
            ncclResult_t::ncclInvalidArgument
        );
        let mut p9 = [
            abi::ncclNetSGE_v9_t {
                mhandle: mh,
                address: base as *mut c_void,
                size: 8,
            },
            abi::ncclNetSGE_v9_t {
                mhandle: mh,
                address: base.add(64) as *mut c_void,
                size: 24,
            },
        ];
        assert_eq!(
            t9.ireducescatter.unwrap()(
                coll,
                2,
                p9.as_mut_ptr(),
                recv,
                16,
                16,
                32,
                f32t,
                ncclRedOp_t::ncclSum,
                mh,
                &mut req
            ),
            OK
        );
        let w = Window {
            bytes_per_rank: 16,
            offset: 16,
            bytes: 32,
        };
        assert_eq!(
            last(),
            Call::ReduceScatter {
                parts: vec![8, 24],
                recv_len: 16,
                window: w,
                dtype: 7
            }
        );
        assert_eq!(wait(t9.test.unwrap(), req), 16);
        assert_eq!(t9.deregMr.unwrap()(coll, mh), OK);
    }
    finish(ctx, coll);
}

#[test]
fn v12_per_comm_contexts_and_request_lifetime() {
    let _g = lock();
    let before = CTXS.load(Ordering::SeqCst);
    let (ctx, coll) = connect_v12(2, 0);
    let (ctx2, coll2) = connect_v12(2, 1);
    assert_eq!(CTXS.load(Ordering::SeqCst), before + 2, "one context per init");
    let t = &ncclCollNetPlugin_v12;
    let mut data = vec![0u64; 4];
    let p = data.as_mut_ptr() as *mut c_void;
    let dropped = REQS_DROPPED.load(Ordering::SeqCst);
    // SAFETY: plain C calls with valid pointers.
    unsafe {
        // Many requests in flight, then closeColl frees those never completed.
        let mut reqs = Vec::new();
        for _ in 0..5 {
            let mut r = null_mut();
            let (u64t, max) = (ncclDataType_t::ncclUint64, ncclRedOp_t::ncclMax);
            assert_eq!(
                t.iallreduce.unwrap()(coll, p, p, 4usize, u64t, max, null_mut(), null_mut(), &mut r),
                OK
            );
            assert!(!r.is_null());
            reqs.push(r);
        }
        assert_eq!(wait(t.test.unwrap(), reqs[0]), 32);
        // A completed request is freed: testing it again is an error.
        let (mut done, mut size) = (0, 0);
        assert_eq!(
            t.test.unwrap()(reqs[0], &mut done, &mut size),
            ncclResult_t::ncclInternalError
        );
        // A collComm is not a request, a request is not a collComm.
        assert_eq!(
            t.test.unwrap()(coll, &mut done, &mut size),
            ncclResult_t::ncclInternalError
        );
        assert_eq!(t.closeColl.unwrap()(reqs[1]), ncclResult_t::ncclInternalError);
        assert_eq!(
            t.test.unwrap()(null_mut(), &mut done, &mut size),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(
            t.test.unwrap()(reqs[1], null_mut(), &mut size),
            ncclResult_t::ncclInvalidArgument
        );
        // DMA-BUF registration is unsupported by default: an error, not a crash.
        let mut mh = null_mut();
        assert_eq!(
            t.regMrDmaBuf.unwrap()(coll, p, 32, abi::NCCL_PTR_CUDA, 0, 3, &mut mh),
            ncclResult_t::ncclInternalError
        );
        assert!(mh.is_null());
        assert_eq!(
            t.regMr.unwrap()(coll, p, 32, 99, &mut mh),
            ncclResult_t::ncclInvalidArgument
        );
        let mut d = 0;
        let mut vp: abi::ncclNetVDeviceProps_v12_t = std::mem::zeroed();
        vp.ndevs = 1;
        assert_eq!(t.makeVDevice.unwrap()(&mut d, &mut vp), ncclResult_t::ncclInvalidUsage);
    }
    finish(ctx, coll);
    assert_eq!(
        REQS_DROPPED.load(Ordering::SeqCst),
        dropped + 5,
        "closeColl frees the 4 outstanding requests"
    );
    finish(ctx2, coll2);
}

#[test]
fn request_table_full_returns_null_request() {
    let _g = lock();
    let (ctx, coll) = connect_v12(1, 0);
    let t = &ncclCollNetPlugin_v12;
    let mut data = [0u8; 8];
    let p = data.as_mut_ptr() as *mut c_void;
    let max = ferroccl_plugin_api::export::collnet::MAX_COLL_REQUESTS;
    let mut reqs = Vec::new();
    // SAFETY: plain C calls with valid pointers.
    unsafe {
        for _ in 0..max {
            let mut r = null_mut();
            let (dt, op) = (ncclDataType_t::ncclUint8, ncclRedOp_t::ncclSum);
            assert_eq!(
                t.iallreduce.unwrap()(coll, p, p, 8, dt, op, null_mut(), null_mut(), &mut r),
                OK
            );
            assert!(!r.is_null());
            reqs.push(r);
        }
        let mut r = std::ptr::dangling_mut::<c_void>();
        let (dt, op) = (ncclDataType_t::ncclUint8, ncclRedOp_t::ncclSum);
        assert_eq!(
            t.iallreduce.unwrap()(coll, p, p, 8, dt, op, null_mut(), null_mut(), &mut r),
            OK
        );
        assert!(r.is_null(), "a full table posts nothing; NCCL retries");
        // Completing one frees its slot for the next post.
        wait(t.test.unwrap(), reqs[7]);
        assert_eq!(
            t.iallreduce.unwrap()(coll, p, p, 8, dt, op, null_mut(), null_mut(), &mut r),
            OK
        );
        assert_eq!(r, reqs[7], "the freed slot is reused");
    }
    finish(ctx, coll);
}

#[test]
fn panics_become_internal_errors() {
    let _g = lock();
    let t = &ncclCollNetPlugin_v12;
    let mut ctx = null_mut();
    // SAFETY: plain C calls with valid pointers.
    unsafe {
        assert_eq!(t.init.unwrap()(&mut ctx, 1, None), OK);
        let mut handle: Handle = [0; 128];
        let mut listen = null_mut();
        assert_eq!(
            t.listen.unwrap()(ctx, 0, handle.as_mut_ptr() as *mut c_void, &mut listen),
            OK
        );
        let mut hs = [handle; 8];
        let mut ptrs: Vec<*mut c_void> = hs.iter_mut().map(|h| h.as_mut_ptr() as *mut c_void).collect();
        let mut coll = null_mut();
        // The plugin panics for rank 7: the shim returns ncclInternalError, no unwind.
        assert_eq!(
            t.connect.unwrap()(ptrs.as_mut_ptr(), 8, 7, listen, &mut coll),
            ncclResult_t::ncclInternalError
        );
        assert!(coll.is_null());
        assert_eq!(t.closeListen.unwrap()(listen), OK);
        // Foreign and misaligned pointers.
        let mut junk = [0u64; 4];
        assert_eq!(
            t.closeListen.unwrap()(junk.as_mut_ptr() as *mut c_void),
            ncclResult_t::ncclInternalError
        );
        assert_eq!(
            t.closeColl.unwrap()((junk.as_mut_ptr() as *mut u8).add(1) as *mut c_void),
            ncclResult_t::ncclInternalError
        );
        assert_eq!(t.finalize.unwrap()(ctx), OK);
    }
}
