//! Drives the `ncclNetPlugin_v6`/`_v9`/`_v12` statics emitted by `export_net_plugin!`
//! in-process, with an in-memory loopback plugin, the way NCCL would call them.

use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, c_char, c_int, c_ulong, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ferroccl_plugin_api::abi::{self, ncclResult_t};
use ferroccl_plugin_api::sdk::{
    Buf, CommConfig, CommMut, Handle, Net, NetError, NetResult, Properties, PtrType, RecvBuf, TestStatus,
};

// ---------------------------------------------------------------------------
// The loopback plugin.
// ---------------------------------------------------------------------------

type Pipe = Arc<Mutex<VecDeque<(i32, Vec<u8>)>>>;

type Pending = Arc<Mutex<VecDeque<Pipe>>>;

static LISTENERS: Mutex<Option<HashMap<u64, Pending>>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static REQS_DROPPED: AtomicUsize = AtomicUsize::new(0);
static CTX_ALIVE: AtomicUsize = AtomicUsize::new(0);

struct LoopNet;
struct Ctx;
impl Drop for Ctx {
    fn drop(&mut self) {
        CTX_ALIVE.fetch_sub(1, Ordering::SeqCst);
    }
}
struct Listen {
    pending: Arc<Mutex<VecDeque<Pipe>>>,
}
struct Send {
    pipe: Pipe,
}
struct Recv {
    pipe: Pipe,
}
struct Mr(#[allow(dead_code)] usize);
enum Request {
    Send(usize),
    Recv {
        pipe: Pipe,
        bufs: Vec<(Buf, i32)>,
        got: Vec<Option<usize>>,
    },
}
impl Drop for Request {
    fn drop(&mut self) {
        REQS_DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

impl Net for LoopNet {
    const NAME: &'static CStr = c"Loop";
    type Ctx = Ctx;
    type ListenComm = Listen;
    type SendComm = Send;
    type RecvComm = Recv;
    type Mr = Mr;
    type Request = Request;

    fn new() -> NetResult<Self> {
        Ok(LoopNet)
    }
    fn init(&self, _comm_id: u64, _config: &CommConfig) -> NetResult<Ctx> {
        CTX_ALIVE.fetch_add(1, Ordering::SeqCst);
        Ok(Ctx)
    }
    fn devices(&self) -> NetResult<usize> {
        Ok(2)
    }
    fn properties(&self, dev: usize) -> NetResult<Properties> {
        if dev == 1 {
            panic!("boom in properties");
        }
        Ok(Properties {
            name: format!("loop{dev}"),
            pci_path: None,
            guid: 0xabc,
            max_recvs: 4,
            speed: 1000,
            vdevs: vec![],
            max_p2p_bytes: 1 << 33,
            rail_id: 2,
            ..Properties::default()
        })
    }
    fn listen(&self, _ctx: &Ctx, _dev: usize, handle: &mut Handle) -> NetResult<Listen> {
        let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let pending = Arc::new(Mutex::new(VecDeque::new()));
        LISTENERS
            .lock()
            .unwrap()
            .get_or_insert_with(HashMap::new)
            .insert(id, pending.clone());
        handle.fill(0);
        handle[..8].copy_from_slice(&id.to_le_bytes());
        Ok(Listen { pending })
    }
    fn connect(&self, _ctx: &Ctx, _dev: usize, handle: &mut Handle, _c: &CommConfig) -> NetResult<Option<Send>> {
        // First attempt only marks the handle (scratch space), to exercise NCCL's retry loop.
        if handle[8] == 0 {
            handle[8] = 1;
            return Ok(None);
        }
        let id = u64::from_le_bytes(handle[..8].try_into().unwrap());
        let l = LISTENERS.lock().unwrap().as_ref().and_then(|m| m.get(&id).cloned());
        let l = l.ok_or_else(|| NetError::Remote(format!("no listener {id}")))?;
        let pipe = Pipe::default();
        l.lock().unwrap().push_back(pipe.clone());
        Ok(Some(Send { pipe }))
    }
    fn accept(&self, listen: &mut Listen) -> NetResult<Option<Recv>> {
        Ok(listen.pending.lock().unwrap().pop_front().map(|pipe| Recv { pipe }))
    }
    fn reg_mr(&self, _comm: CommMut<'_, Self>, buf: Buf, ty: PtrType) -> NetResult<Mr> {
        if ty != PtrType::Host {
            return Err(NetError::InvalidUsage("host memory only".into()));
        }
        Ok(Mr(buf.len))
    }
    fn isend(&self, comm: &mut Send, buf: Buf, tag: i32, _mr: Option<&Mr>) -> NetResult<Option<Request>> {
        // SAFETY: NCCL contract: the buffer is valid until the request completes.
        let data = unsafe { buf.as_slice() }.to_vec();
        comm.pipe.lock().unwrap().push_back((tag, data));
        Ok(Some(Request::Send(buf.len)))
    }
    fn irecv(&self, comm: &mut Recv, bufs: &[RecvBuf<'_, Mr>]) -> NetResult<Option<Request>> {
        Ok(Some(Request::Recv {
            pipe: comm.pipe.clone(),
            bufs: bufs.iter().map(|b| (b.buf, b.tag)).collect(),
            got: vec![None; bufs.len()],
        }))
    }
    fn test(&self, req: &mut Request) -> NetResult<TestStatus> {
        match req {
            Request::Send(n) => Ok(TestStatus::done1(*n)),
            Request::Recv { pipe, bufs, got } => {
                let mut q = pipe.lock().unwrap();
                for (i, (buf, tag)) in bufs.iter().enumerate() {
                    if got[i].is_some() {
                        continue;
                    }
                    if let Some(pos) = q.iter().position(|(t, _)| t == tag) {
                        let (_, data) = q.remove(pos).unwrap();
                        if data.len() > buf.len {
                            return Err(NetError::InvalidUsage(format!(
                                "message of {} > buffer {}",
                                data.len(),
                                buf.len
                            )));
                        }
                        // SAFETY: the posted receive buffer is valid and ours until completion.
                        unsafe { buf.as_mut_slice()[..data.len()].copy_from_slice(&data) };
                        got[i] = Some(data.len());
                    }
                }
                if got.iter().all(Option::is_some) {
                    let mut sizes = [0; ferroccl_plugin_api::sdk::MAX_RECVS];
                    for (s, g) in sizes.iter_mut().zip(got.iter()) {
                        *s = g.unwrap();
                    }
                    Ok(TestStatus::Done { n: got.len(), sizes })
                } else {
                    Ok(TestStatus::Pending)
                }
            }
        }
    }
    fn make_vdevice(&self, devs: &[i32]) -> NetResult<usize> {
        Ok(100 + devs.len())
    }
}

ferroccl_plugin_api::export_net_plugin!(LoopNet);

// ---------------------------------------------------------------------------
// A capturing logger.
// ---------------------------------------------------------------------------

static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Receives exactly what `ferroccl_plugin_api::log::log` passes: fixed args then `"%s", text`.
extern "C" fn capture(
    _l: c_int,
    _f: c_ulong,
    _file: *const c_char,
    _line: c_int,
    _fmt: *const c_char,
    text: *const c_char,
) {
    // SAFETY: the SDK logger always passes a valid NUL-terminated string as the 6th argument.
    let s = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
    LOG.lock().unwrap().push(s);
}

fn logger() -> abi::ncclDebugLogger_t {
    // SAFETY: on x86-64 and aarch64 Linux a variadic callee receiving six integer/pointer
    // arguments reads them from the same registers as this non-variadic function; the SDK
    // always calls the logger with exactly these six arguments.
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    return Some(unsafe {
        std::mem::transmute::<
            extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, *const c_char),
            ferroccl_plugin_api::log::DebugLogger,
        >(capture)
    });
    #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    None
}

fn logged(needle: &str) -> bool {
    LOG.lock().unwrap().iter().any(|l| l.contains(needle))
}

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

const OK: ncclResult_t = ncclResult_t::ncclSuccess;

fn cstr(p: *const c_char) -> String {
    // SAFETY: the plugin returns valid, process-lifetime C strings.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_owned()
}

/// Calls `connect` until it yields a comm (bounded).
fn until_some(mut f: impl FnMut(*mut *mut c_void) -> ncclResult_t) -> *mut c_void {
    let mut c = null_mut();
    for _ in 0..100 {
        assert_eq!(f(&mut c), OK);
        if !c.is_null() {
            return c;
        }
    }
    panic!("no comm after 100 attempts");
}

fn test_until_done(
    test: impl Fn(*mut c_void, *mut c_int, *mut c_int) -> ncclResult_t,
    req: *mut c_void,
    sizes: *mut c_int,
) {
    let mut done = 0;
    for _ in 0..1000 {
        assert_eq!(test(req, &mut done, sizes), OK);
        if done == 1 {
            return;
        }
    }
    panic!("request not done after 1000 tests");
}

// ---------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------

#[test]
fn symbols_are_the_vtables() {
    assert_eq!(std::mem::size_of_val(&ncclNetPlugin_v6), 136);
    assert_eq!(std::mem::size_of_val(&ncclNetPlugin_v9), 160);
    assert_eq!(std::mem::size_of_val(&ncclNetPlugin_v12), 176);
    assert_eq!(cstr(ncclNetPlugin_v6.name), "Loop");
    assert_eq!(cstr(ncclNetPlugin_v12.name), "Loop");
    // Optional slots NCCL checks for NULL are all provided.
    assert!(ncclNetPlugin_v7.getDeviceMr.is_some() && ncclNetPlugin_v7.irecvConsumed.is_some());
    assert!(ncclNetPlugin_v10.makeVDevice.is_some());
    assert!(ncclNetPlugin_v11.finalize.is_some() && ncclNetPlugin_v11.setNetAttr.is_some());
    assert!(ncclNetPlugin_v8.regMrDmaBuf.is_some());
}

#[test]
fn v6_full_roundtrip() {
    let n = &ncclNetPlugin_v6;
    // SAFETY: (whole test) calling the exported vtable with valid pointers, as NCCL does.
    unsafe {
        assert_eq!(n.init.unwrap()(logger()), OK);
        let mut ndev = 0;
        assert_eq!(n.devices.unwrap()(&mut ndev), OK);
        assert_eq!(ndev, 2);
        let mut p = abi::ncclNetProperties_v6_t::zeroed();
        assert_eq!(n.getProperties.unwrap()(0, &mut p), OK);
        assert_eq!(
            (cstr(p.name).as_str(), p.guid, p.maxRecvs, p.speed),
            ("loop0", 0xabc, 4, 1000)
        );
        assert!(p.pciPath.is_null());
        let mut p2 = abi::ncclNetProperties_v6_t::zeroed();
        assert_eq!(n.getProperties.unwrap()(0, &mut p2), OK);
        assert_eq!(p.name, p2.name, "name strings are cached, not re-leaked");
        assert_eq!(n.getProperties.unwrap()(2, &mut p), ncclResult_t::ncclInvalidArgument);
        assert_eq!(n.getProperties.unwrap()(-1, &mut p), ncclResult_t::ncclInvalidArgument);

        let mut handle = [0u8; abi::NCCL_NET_HANDLE_MAXSIZE];
        let mut listen = null_mut();
        assert_eq!(n.listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut listen), OK);
        assert!(!listen.is_null());
        let send = until_some(|c| n.connect.unwrap()(0, handle.as_mut_ptr().cast(), c));
        let recv = until_some(|c| n.accept.unwrap()(listen, c));

        let mut sbuf = *b"hello v6";
        let mut rbuf = [0u8; 16];
        let mut smr = null_mut();
        assert_eq!(
            n.regMr.unwrap()(send, sbuf.as_mut_ptr().cast(), 8, abi::NCCL_PTR_HOST, &mut smr),
            OK
        );
        assert!(!smr.is_null());
        assert_eq!(
            n.regMr.unwrap()(send, sbuf.as_mut_ptr().cast(), -1, abi::NCCL_PTR_HOST, &mut smr),
            ncclResult_t::ncclInvalidArgument
        );
        // regMr on a listen comm is detected.
        let mut bad = null_mut();
        assert_eq!(
            n.regMr.unwrap()(listen, sbuf.as_mut_ptr().cast(), 8, abi::NCCL_PTR_HOST, &mut bad),
            ncclResult_t::ncclInternalError
        );
        // The plugin's own error is passed through (CUDA unsupported → InvalidUsage).
        assert_eq!(
            n.regMr.unwrap()(send, sbuf.as_mut_ptr().cast(), 8, abi::NCCL_PTR_CUDA, &mut bad),
            ncclResult_t::ncclInvalidUsage
        );

        let mut sreq = null_mut();
        assert_eq!(
            n.isend.unwrap()(send, sbuf.as_mut_ptr().cast(), 8, 7, smr, &mut sreq),
            OK
        );
        assert!(!sreq.is_null());
        let mut data = [rbuf.as_mut_ptr().cast::<c_void>()];
        let mut sizes = [16 as c_int];
        let mut tags = [7 as c_int];
        let mut mhs = [null_mut()];
        let mut rreq = null_mut();
        assert_eq!(
            n.irecv.unwrap()(
                recv,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut rreq
            ),
            OK
        );
        assert!(!rreq.is_null());
        // n above maxRecvs (4) is refused.
        let mut r2 = null_mut();
        assert_eq!(
            n.irecv.unwrap()(
                recv,
                5,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut r2
            ),
            ncclResult_t::ncclInternalError
        );
        assert!(r2.is_null());

        let mut got = [0 as c_int; 1];
        test_until_done(|r, d, s| n.test.unwrap()(r, d, s), rreq, got.as_mut_ptr());
        assert_eq!(got[0], 8);
        assert_eq!(&rbuf[..8], b"hello v6");
        test_until_done(|r, d, s| n.test.unwrap()(r, d, s), sreq, null_mut());
        // A completed request is freed: testing it again is an error, not a crash.
        let mut done = 0;
        assert_eq!(
            n.test.unwrap()(sreq, &mut done, null_mut()),
            ncclResult_t::ncclInternalError
        );

        assert_eq!(n.deregMr.unwrap()(send, smr), OK);
        assert_eq!(n.closeSend.unwrap()(send), OK);
        assert_eq!(n.closeRecv.unwrap()(recv), OK);
        assert_eq!(n.closeListen.unwrap()(listen), OK);
    }
}

#[test]
fn v9_overwrites_optional_recv_completion_hint() {
    let n = &ncclNetPlugin_v9;
    // SAFETY: (whole test) calling the exported vtable with valid pointers, as NCCL does.
    unsafe {
        assert_eq!(n.init.unwrap()(logger()), OK);
        let mut p = abi::ncclNetProperties_v9_t::zeroed();
        assert_eq!(n.getProperties.unwrap()(0, &mut p), OK);
        assert_eq!((p.maxP2pBytes, p.vProps.ndevs, p.vProps.devs[0]), (1 << 33, 1, 0));

        let mut handle = [0u8; abi::NCCL_NET_HANDLE_MAXSIZE];
        let mut listen = null_mut();
        assert_eq!(n.listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut listen), OK);
        let mut dev_comm: *mut abi::ncclNetDeviceHandle_v9_t = std::ptr::dangling_mut();
        let send = until_some(|c| n.connect.unwrap()(0, handle.as_mut_ptr().cast(), c, &mut dev_comm));
        assert!(dev_comm.is_null(), "device handle out-arg set to NULL");
        let recv = until_some(|c| n.accept.unwrap()(listen, c, null_mut()));

        // Two-buffer grouped receive, matched by tag.
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        let mut data = [a.as_mut_ptr().cast::<c_void>(), b.as_mut_ptr().cast()];
        let mut sizes = [8usize, 8];
        let mut tags = [1 as c_int, 2];
        let mut rreq = abi::NCCL_NET_OPTIONAL_RECV_COMPLETION as *mut c_void;
        assert_eq!(
            n.irecv.unwrap()(
                recv,
                2,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                null_mut(),
                &mut rreq
            ),
            OK
        );
        assert!(
            rreq as usize != abi::NCCL_NET_OPTIONAL_RECV_COMPLETION,
            "hint value left in *request"
        );
        assert!(!rreq.is_null());

        for (tag, msg) in [(2, &b"two"[..]), (1, &b"one!"[..])] {
            let mut req = null_mut();
            assert_eq!(
                n.isend.unwrap()(send, msg.as_ptr() as *mut c_void, msg.len(), tag, null_mut(), &mut req),
                OK
            );
            test_until_done(|r, d, s| n.test.unwrap()(r, d, s), req, null_mut());
        }
        let mut got = [0 as c_int; 2];
        test_until_done(|r, d, s| n.test.unwrap()(r, d, s), rreq, got.as_mut_ptr());
        assert_eq!(got, [4, 3]);
        assert_eq!((&a[..4], &b[..3]), (&b"one!"[..], &b"two"[..]));

        // Even a failing irecv clears the hint.
        let mut rreq = abi::NCCL_NET_OPTIONAL_RECV_COMPLETION as *mut c_void;
        assert_eq!(
            n.irecv.unwrap()(
                recv,
                0,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                null_mut(),
                &mut rreq
            ),
            ncclResult_t::ncclInternalError
        );
        assert!(rreq.is_null());

        let mut dptr = std::ptr::dangling_mut();
        assert_eq!(n.getDeviceMr.unwrap()(send, null_mut(), &mut dptr), OK);
        assert!(dptr.is_null());
        assert_eq!(n.irecvConsumed.unwrap()(recv, 1, null_mut()), OK);
        let mut vp = abi::ncclNetVDeviceProps_v9_t {
            ndevs: 2,
            devs: [0, 1, 0, 0],
        };
        let mut vd = -1;
        assert_eq!(n.makeVDevice.unwrap()(&mut vd, &mut vp), OK);
        assert_eq!(vd, 102);
        vp.ndevs = 5;
        assert_eq!(
            n.makeVDevice.unwrap()(&mut vd, &mut vp),
            ncclResult_t::ncclInvalidArgument
        );

        assert_eq!(n.closeSend.unwrap()(send), OK);
        assert_eq!(n.closeRecv.unwrap()(recv), OK);
        assert_eq!(n.closeListen.unwrap()(listen), OK);
    }
}

#[test]
fn v12_per_comm_context_and_flow() {
    let n = &ncclNetPlugin_v12;
    // SAFETY: (whole test) calling the exported vtable with valid pointers, as NCCL does.
    unsafe {
        let mut cfg = abi::ncclNetCommConfig_v12_t { trafficClass: 3 };
        let (mut c1, mut c2) = (null_mut(), null_mut());
        assert_eq!(n.init.unwrap()(&mut c1, 11, &mut cfg, logger(), None), OK);
        assert_eq!(n.init.unwrap()(&mut c2, 12, null_mut(), logger(), None), OK);
        assert!(!c1.is_null() && !c2.is_null() && c1 != c2);
        assert_eq!(
            n.init.unwrap()(null_mut(), 13, null_mut(), logger(), None),
            ncclResult_t::ncclInvalidArgument
        );

        let mut p = abi::ncclNetProperties_v12_t::zeroed();
        assert_eq!(n.getProperties.unwrap()(0, &mut p), OK);
        assert_eq!((p.railId, p.planeId, p.maxRecvs, p.maxMultiRequestSize), (2, -1, 4, 1));
        assert_eq!(cstr(p.name), "loop0");

        let mut attr = abi::ncclNetAttr_v12_t::zeroed();
        assert_eq!(n.setNetAttr.unwrap()(c1, &mut attr), OK);
        assert_eq!(n.setNetAttr.unwrap()(c1, null_mut()), ncclResult_t::ncclInvalidArgument);

        let mut handle = [0u8; abi::NCCL_NET_HANDLE_MAXSIZE];
        let mut listen = null_mut();
        assert_eq!(n.listen.unwrap()(c1, 0, handle.as_mut_ptr().cast(), &mut listen), OK);
        let send = until_some(|c| n.connect.unwrap()(c2, 0, handle.as_mut_ptr().cast(), c, null_mut()));
        let recv = until_some(|c| n.accept.unwrap()(listen, c, null_mut()));

        let msg = vec![0x5au8; 100_000];
        let mut rbuf = vec![0u8; 100_000];
        let mut rmr = null_mut();
        assert_eq!(
            n.regMr.unwrap()(recv, rbuf.as_mut_ptr().cast(), rbuf.len(), abi::NCCL_PTR_HOST, &mut rmr),
            OK
        );
        let mut data = [rbuf.as_mut_ptr().cast::<c_void>()];
        let mut sizes = [rbuf.len()];
        let mut tags = [0 as c_int];
        let mut mhs = [rmr];
        let mut rreq = null_mut();
        assert_eq!(
            n.irecv.unwrap()(
                recv,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                tags.as_mut_ptr(),
                mhs.as_mut_ptr(),
                null_mut(),
                &mut rreq
            ),
            OK
        );
        let mut sreq = null_mut();
        assert_eq!(
            n.isend.unwrap()(
                send,
                msg.as_ptr() as *mut c_void,
                msg.len(),
                0,
                null_mut(),
                null_mut(),
                &mut sreq
            ),
            OK
        );
        let mut got = [0 as c_int];
        test_until_done(|r, d, s| n.test.unwrap()(r, d, s), rreq, got.as_mut_ptr());
        test_until_done(|r, d, s| n.test.unwrap()(r, d, s), sreq, null_mut());
        assert_eq!(got[0], 100_000);
        assert!(rbuf == msg);

        // iflush on host memory: nothing to do → NULL request.
        let mut freq = std::ptr::dangling_mut();
        let mut fsizes = [100 as c_int];
        assert_eq!(
            n.iflush.unwrap()(
                recv,
                1,
                data.as_mut_ptr(),
                fsizes.as_mut_ptr(),
                mhs.as_mut_ptr(),
                &mut freq
            ),
            OK
        );
        assert!(freq.is_null());

        let mut vp = abi::ncclNetVDeviceProps_v12_t {
            ndevs: 6,
            devs: [0, 1, 0, 1, 0, 1, 0, 0],
        };
        let mut vd = -1;
        assert_eq!(n.makeVDevice.unwrap()(&mut vd, &mut vp), OK);
        assert_eq!(vd, 106);

        assert_eq!(n.deregMr.unwrap()(recv, rmr), OK);
        // A deregistered / closed object is detected rather than trusted (the box is
        // freed, so only check the still-live comm with a foreign pointer).
        let fake = [0u64; 4];
        assert_eq!(
            n.deregMr.unwrap()(recv, fake.as_ptr() as *mut c_void),
            ncclResult_t::ncclInternalError
        );
        assert_eq!(n.closeSend.unwrap()(send), OK);
        assert_eq!(n.closeRecv.unwrap()(recv), OK);
        assert_eq!(n.closeListen.unwrap()(listen), OK);

        let alive = CTX_ALIVE.load(Ordering::SeqCst);
        assert_eq!(n.finalize.unwrap()(c1), OK);
        assert_eq!(n.finalize.unwrap()(c2), OK);
        assert!(
            CTX_ALIVE.load(Ordering::SeqCst) <= alive - 2 + 1,
            "finalize drops the contexts"
        );
        assert_eq!(n.finalize.unwrap()(null_mut()), ncclResult_t::ncclInvalidArgument);
    }
}

#[test]
fn panics_become_internal_error_and_are_logged() {
    let n = &ncclNetPlugin_v12;
    // SAFETY: calling the exported vtable with valid pointers.
    unsafe {
        let mut c = null_mut();
        assert_eq!(n.init.unwrap()(&mut c, 1, null_mut(), logger(), None), OK);
        let mut p = abi::ncclNetProperties_v12_t::zeroed();
        assert_eq!(n.getProperties.unwrap()(1, &mut p), ncclResult_t::ncclInternalError);
        if logger().is_some() {
            assert!(
                logged("getProperties panicked: boom in properties"),
                "log: {:?}",
                LOG.lock().unwrap()
            );
        }
        assert_eq!(n.finalize.unwrap()(c), OK);
    }
}

#[test]
fn null_and_foreign_pointers_are_rejected() {
    let n = &ncclNetPlugin_v9;
    // SAFETY: every pointer passed is NULL or valid readable memory.
    unsafe {
        assert_eq!(n.init.unwrap()(logger()), OK);
        assert_eq!(n.devices.unwrap()(null_mut()), ncclResult_t::ncclInvalidArgument);
        assert_eq!(
            n.getProperties.unwrap()(0, null_mut()),
            ncclResult_t::ncclInvalidArgument
        );
        let mut l = null_mut();
        assert_eq!(
            n.listen.unwrap()(0, null_mut(), &mut l),
            ncclResult_t::ncclInvalidArgument
        );
        let mut h = [0u8; 128];
        assert_eq!(
            n.listen.unwrap()(5, h.as_mut_ptr().cast(), &mut l),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(
            n.listen.unwrap()(0, h.as_mut_ptr().cast(), null_mut()),
            ncclResult_t::ncclInvalidArgument
        );
        let mut done = 0;
        assert_eq!(
            n.test.unwrap()(null_mut(), &mut done, null_mut()),
            ncclResult_t::ncclInvalidArgument
        );
        let fake = [0u64; 8];
        let fp = fake.as_ptr() as *mut c_void;
        assert_eq!(
            n.test.unwrap()(fp, &mut done, null_mut()),
            ncclResult_t::ncclInternalError
        );
        let mut req = null_mut();
        assert_eq!(
            n.isend.unwrap()(fp, null_mut(), 0, 0, null_mut(), &mut req),
            ncclResult_t::ncclInternalError
        );
        assert_eq!(
            n.isend.unwrap()(null_mut(), null_mut(), 0, 0, null_mut(), &mut req),
            ncclResult_t::ncclInvalidArgument
        );
        assert_eq!(n.closeSend.unwrap()(fp), ncclResult_t::ncclInternalError);
        assert_eq!(n.closeRecv.unwrap()(null_mut()), ncclResult_t::ncclInvalidArgument);
        assert_eq!(n.closeListen.unwrap()(fp), ncclResult_t::ncclInternalError);
        if logger().is_some() {
            assert!(logged("NET/Loop : isend failed"));
        }
    }
}

#[test]
fn full_request_table_backpressure_and_close_frees_requests() {
    let n = &ncclNetPlugin_v9;
    // SAFETY: (whole test) calling the exported vtable with valid pointers, as NCCL does.
    unsafe {
        assert_eq!(n.init.unwrap()(logger()), OK);
        let mut handle = [0u8; abi::NCCL_NET_HANDLE_MAXSIZE];
        let mut listen = null_mut();
        assert_eq!(n.listen.unwrap()(0, handle.as_mut_ptr().cast(), &mut listen), OK);
        let send = until_some(|c| n.connect.unwrap()(0, handle.as_mut_ptr().cast(), c, null_mut()));
        let byte = 1u8;
        let slots = ferroccl_plugin_api::export::net::SLOTS_PER_COMM;
        let mut reqs = Vec::new();
        for _ in 0..slots {
            let mut r = null_mut();
            assert_eq!(
                n.isend.unwrap()(send, &byte as *const u8 as *mut c_void, 1, 0, null_mut(), &mut r),
                OK
            );
            assert!(!r.is_null());
            reqs.push(r);
        }
        let mut r = std::ptr::dangling_mut();
        assert_eq!(
            n.isend.unwrap()(send, &byte as *const u8 as *mut c_void, 1, 0, null_mut(), &mut r),
            OK
        );
        assert!(r.is_null(), "full table must answer *request = NULL");
        test_until_done(|r, d, s| n.test.unwrap()(r, d, s), reqs.pop().unwrap(), null_mut());
        assert_eq!(
            n.isend.unwrap()(send, &byte as *const u8 as *mut c_void, 1, 0, null_mut(), &mut r),
            OK
        );
        assert!(!r.is_null(), "a freed slot is reused");
        let before = REQS_DROPPED.load(Ordering::SeqCst);
        assert_eq!(n.closeSend.unwrap()(send), OK);
        assert!(
            REQS_DROPPED.load(Ordering::SeqCst) >= before + slots,
            "closing the comm frees its outstanding requests"
        );
        assert_eq!(n.closeListen.unwrap()(listen), OK);
    }
}
