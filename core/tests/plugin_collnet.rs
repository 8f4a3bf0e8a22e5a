//! The CollNet host adapter against the recording C plugin (`testing/collnet-c`),
//! one library per `ncclCollNet` version v6 … v12: loading from the net plugin's
//! library, init per version, properties conversion, the `reduceSupport` matrix,
//! connect with every rank's handle, registration, `iallreduce` / `iallgather` /
//! `ireducescatter` with SGE conversion and the per-version limits, `iflush`,
//! `test` sizes and teardown order; and the failure paths that disable CollNet
//! only (no table, init failure, zero devices, a NULL slot).
//!
//! Two ranks are two threads of this process; the plugin computes each
//! collective when both have posted it.

mod plugin_common;

use std::ffi::{CStr, CString, c_char};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferroccl::plugin::collnet::{CollNetAdapter, CollNetState, Sge, SupportMatrix};
use ferroccl::plugin::load_net_from;
use ferroccl::plugin::net::{CommConfig, NetError, NetHandle, PtrType, RawComm, RawRequest};
use ferroccl_plugin_api::abi::{MAX_COLLNET_SIZE, NCCL_NET_DEVICE_HOST, ncclDataType_t as T, ncclRedOp_t as O};
use plugin_common::{lib, opts};

/// The plugin's own counters (`cn_stat`) and call log (`cn_log`), read through a
/// second `dlopen` of the same file (the loader returns the same handle).
struct Rec(libloading::Library);

impl Rec {
    fn open(path: &str) -> Rec {
        // SAFETY: the test plugin has no constructors; it is already loaded.
        Rec(unsafe { libloading::Library::new(path) }.expect("dlopen the test plugin again"))
    }

    fn stat(&self, key: &str) -> i64 {
        let k = CString::new(key).unwrap();
        // SAFETY: `long long cn_stat(const char*)` in csrc/collnet.c.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn(*const c_char) -> i64> = self.0.get(b"cn_stat").unwrap();
            f(k.as_ptr())
        }
    }

    fn log(&self) -> String {
        // SAFETY: `const char* cn_log(void)` returns a static NUL-terminated buffer.
        unsafe {
            let f: libloading::Symbol<unsafe extern "C" fn() -> *const c_char> = self.0.get(b"cn_log").unwrap();
            CStr::from_ptr(f()).to_string_lossy().into_owned()
        }
    }
}

const BOUND: Duration = Duration::from_secs(20);

/// Posts until the plugin accepts (`Ok(None)` = busy), bounded.
fn post(what: &str, mut f: impl FnMut() -> Result<Option<RawRequest>, NetError>) -> RawRequest {
    let start = Instant::now();
    loop {
        if let Some(r) = f().unwrap_or_else(|e| panic!("{what}: {e}")) {
            return r;
        }
        assert!(start.elapsed() < BOUND, "{what}: not posted within {BOUND:?}");
        std::thread::yield_now();
    }
}

/// Tests until done, bounded; returns the size the plugin reports.
fn wait(cn: &CollNetAdapter, req: RawRequest) -> usize {
    let start = Instant::now();
    loop {
        if let Some(n) = cn.test(req).expect("test") {
            return n;
        }
        assert!(start.elapsed() < BOUND, "request not done within {BOUND:?}");
        std::thread::yield_now();
    }
}

fn supported(op: usize, ty: usize) -> bool {
    matches!(ty, 0..=5 | 7 | 8) && matches!(op, 0 | 2 | 3)
}

/// One rank's collectives on `coll` (both ranks run this at once).
fn rank_ops(cn: &CollNetAdapter, v: u32, coll: RawComm, r: usize) {
    // iallreduce float32 sum.
    let n = 1000usize;
    let send: Vec<f32> = (0..n).map(|i| (i + r * 10_000) as f32).collect();
    let mut recv = vec![0f32; n];
    let sp = send.as_ptr() as *mut u8;
    let rp = recv.as_mut_ptr().cast::<u8>();
    let smr = cn.reg_mr(coll, sp, n * 4, PtrType::Host).expect("regMr send");
    let rmr = cn.reg_mr(coll, rp, n * 4, PtrType::Host).expect("regMr recv");
    let req = post("iallreduce", || {
        cn.iallreduce(coll, sp, rp, n, T::ncclFloat32, O::ncclSum, Some(smr), Some(rmr))
    });
    assert_eq!(wait(cn, req), n * 4, "test size of an iallreduce is its bytes");
    for (i, x) in recv.iter().enumerate() {
        assert_eq!(*x, (2 * i + 10_000) as f32, "v{v} rank {r}: sum at {i}");
    }
    // iallreduce int32 max.
    let isend: Vec<i32> = (0..64).map(|i| i * (r as i32 + 1) - 5).collect();
    let mut irecv = vec![0i32; 64];
    let req = post("iallreduce max", || {
        cn.iallreduce(
            coll,
            isend.as_ptr() as *mut u8,
            irecv.as_mut_ptr().cast(),
            64,
            T::ncclInt32,
            O::ncclMax,
            None,
            None,
        )
    });
    assert_eq!(wait(cn, req), 256);
    for (i, x) in irecv.iter().enumerate() {
        assert_eq!(*x, (i as i32 * 2 - 5).max(i as i32 - 5), "v{v} rank {r}: max at {i}");
    }
    if v >= 8 {
        // iallgather: 64 bytes per rank, the whole 128-byte window, one part (v8) or two (v9+).
        let mine: Vec<u8> = (0..64).map(|i| (r * 100 + i) as u8).collect();
        let mut all = vec![0u8; 128];
        let ap = all.as_mut_ptr();
        let parts: Vec<Sge> = if v == 8 {
            vec![Sge {
                data: ap,
                size: 128,
                mr: None,
            }]
        } else {
            // SAFETY: offset 48 is inside the 128-byte buffer.
            let second = unsafe { ap.add(48) };
            vec![
                Sge {
                    data: ap,
                    size: 48,
                    mr: None,
                },
                Sge {
                    data: second,
                    size: 80,
                    mr: None,
                },
            ]
        };
        let req = post("iallgather", || {
            cn.iallgather(coll, mine.as_ptr() as *mut u8, None, &parts, 64, 0, 128)
        });
        assert_eq!(wait(cn, req), 128);
        let want: Vec<u8> = (0..2).flat_map(|q| (0..64).map(move |i| (q * 100 + i) as u8)).collect();
        assert_eq!(all, want, "v{v} rank {r}: allgather");
        // ireducescatter int32 sum: 16 ints per rank, the whole window.
        let input: Vec<i32> = (0..32).map(|i| i + 1000 * r as i32).collect();
        let mut out = vec![0i32; 16];
        let ip = input.as_ptr() as *mut u8;
        let sparts: Vec<Sge> = if v == 8 {
            vec![Sge {
                data: ip,
                size: 128,
                mr: None,
            }]
        } else {
            // SAFETY: offset 48 is inside the 128-byte buffer.
            let second = unsafe { ip.add(48) };
            vec![
                Sge {
                    data: ip,
                    size: 48,
                    mr: None,
                },
                Sge {
                    data: second,
                    size: 80,
                    mr: None,
                },
            ]
        };
        let req = post("ireducescatter", || {
            cn.ireducescatter(
                coll,
                &sparts,
                out.as_mut_ptr().cast(),
                None,
                64,
                0,
                128,
                T::ncclInt32,
                O::ncclSum,
            )
        });
        assert_eq!(wait(cn, req), 64);
        for (i, x) in out.iter().enumerate() {
            let k = (r * 16 + i) as i32;
            assert_eq!(*x, 2 * k + 1000, "v{v} rank {r}: reducescatter at {i}");
        }
    }
    // iflush: completes with the flushed size.
    let req = post("iflush", || cn.iflush(coll, rp, n * 4, Some(rmr)));
    assert_eq!(wait(cn, req), n * 4);
    cn.dereg_mr(coll, smr).expect("deregMr");
    cn.dereg_mr(coll, rmr).expect("deregMr");
    cn.close_coll(coll).expect("closeColl");
}

fn drive(v: u32) {
    let path = lib(&format!("libnccl-net-cn{v}.so"));
    let net = load_net_from(&path, &opts()).expect("load");
    let chosen = net.report.chosen().expect("chosen");
    assert_eq!(chosen.net_version, Some(6), "the net table is v6 in every variant");
    assert_eq!(chosen.collnet_version, Some(v));
    assert_eq!(chosen.collnet_state, Some(CollNetState::Enabled { devices: 1 }));
    assert!(
        chosen
            .to_string()
            .contains(&format!("ncclCollNet v{v} (enabled, 1 device(s))")),
        "{chosen}"
    );
    let cn: Arc<CollNetAdapter> = net.plugin.collnet().expect("CollNet adapter");
    assert_eq!(
        (cn.info().name.as_str(), cn.info().version),
        (format!("CNv{v}").as_str(), v)
    );
    let rec = Rec::open(&path);
    assert_eq!(rec.stat("init"), 1, "the load probe initialised CollNet once");
    assert_eq!(rec.stat("logger"), 1, "init got the host's logger");

    // Per-communicator contexts: v11+ init each time, v6-v10 once per process.
    let ctxs: Vec<_> = (0..2u64).map(|r| cn.init_ctx(100 + r).expect("init_ctx")).collect();
    if v >= 11 {
        assert_eq!(rec.stat("init"), 3);
        assert_eq!(rec.stat("commId"), 101);
        assert_eq!(rec.stat("finalize"), 1, "the probe context was finalized");
        assert!(ctxs.iter().all(|c| !c.0.is_null()));
    } else {
        assert_eq!(rec.stat("init"), 1);
        assert!(ctxs.iter().all(|c| c.0.is_null()));
    }
    assert_eq!(rec.stat("devices"), 1, "devices() only after the first init");

    // Properties in the common layout.
    let p = cn.properties(0).expect("properties");
    assert_eq!(
        (p.name.as_str(), p.speed, p.port, p.guid),
        ("cn0", 100 * v as i32, v as i32, 0x1000 + v as u64)
    );
    assert_eq!(
        p.net_device_type, NCCL_NET_DEVICE_HOST,
        "v7/v8 report UNPACK; NCCL shows CollNet as HOST"
    );
    if v >= 9 {
        assert_eq!(p.max_coll_bytes, (1 << 20) * v as usize);
        assert!(p.force_flush);
        assert_eq!(p.vdevs, vec![0]);
    } else {
        assert_eq!(p.max_coll_bytes, MAX_COLLNET_SIZE);
    }
    assert_eq!(p.reg_is_global, v >= 8);
    if v == 12 {
        assert_eq!((p.rail_id, p.plane_id), (3, 4));
    }
    assert!(cn.properties(1).is_err(), "device 1 does not exist");

    // reduceSupport over NCCL's 4 × 12 matrix.
    let bits = cn.support_bits().expect("support bits");
    assert_eq!(rec.stat("reduceSupport"), 48);
    let m = SupportMatrix::merge(&[bits, bits]);
    for op in 0..4 {
        for ty in 0..12 {
            assert_eq!(m.0[op][ty], supported(op, ty), "matrix[{op}][{ty}]");
        }
    }

    // listen on every rank, connect with every rank's handle, then closeListen.
    let mut handles: Vec<NetHandle> = vec![[0u8; 128]; 2];
    let listens: Vec<RawComm> = (0..2)
        .map(|r| cn.listen(ctxs[r], 0, &mut handles[r]).expect("listen"))
        .collect();
    let colls: Vec<RawComm> = std::thread::scope(|s| {
        let joins: Vec<_> = (0..2)
            .map(|r| {
                let (cn, handles, l) = (&cn, &handles, listens[r]);
                s.spawn(move || cn.connect(handles, r, l).expect("connect"))
            })
            .collect();
        joins.into_iter().map(|j| j.join().expect("connect thread")).collect()
    });
    assert_eq!(rec.stat("nranks"), 2);
    for l in listens {
        cn.close_listen(l).expect("closeListen");
    }
    let e = cn.connect(&handles, 2, colls[0]).unwrap_err();
    assert!(e.to_string().contains("rank 2 with 2 handles"), "{e}");

    // Limits the adapter enforces before the plugin sees the call.
    let before = (rec.stat("iallreduce"), rec.stat("regMr"), rec.stat("iallgather"));
    let dummy = std::ptr::NonNull::<u8>::dangling().as_ptr();
    if v <= 8 {
        let e = cn
            .iallreduce(
                colls[0],
                dummy,
                dummy,
                (1 << 30) + 1,
                T::ncclInt8,
                O::ncclSum,
                None,
                None,
            )
            .unwrap_err();
        assert!(
            matches!(e, NetError::InvalidArgument(_)) && e.to_string().contains("1073741824"),
            "{e}"
        );
    }
    if v <= 7 {
        let e = cn.reg_mr(colls[0], dummy, 1 << 31, PtrType::Host).unwrap_err();
        assert!(matches!(e, NetError::InvalidArgument(_)), "{e}");
        assert!(!cn.has_iallgather() && !cn.has_ireducescatter());
        let part = [Sge {
            data: dummy,
            size: 8,
            mr: None,
        }];
        let e = cn.iallgather(colls[0], dummy, None, &part, 8, 0, 8).unwrap_err();
        assert!(
            matches!(e, NetError::InvalidUsage(_)) && e.to_string().contains("no iallgather"),
            "{e}"
        );
        let e = cn
            .ireducescatter(colls[0], &part, dummy, None, 8, 0, 8, T::ncclInt32, O::ncclSum)
            .unwrap_err();
        assert!(matches!(e, NetError::InvalidUsage(_)), "{e}");
    } else {
        assert!(cn.has_iallgather() && cn.has_ireducescatter());
    }
    if v == 8 {
        let two = [
            Sge {
                data: dummy,
                size: 8,
                mr: None,
            },
            Sge {
                data: dummy,
                size: 8,
                mr: None,
            },
        ];
        let e = cn.iallgather(colls[0], dummy, None, &two, 8, 0, 16).unwrap_err();
        assert!(e.to_string().contains("ncclCollNet v8 takes exactly 1"), "{e}");
        let big = [Sge {
            data: dummy,
            size: MAX_COLLNET_SIZE + 1,
            mr: None,
        }];
        let e = cn
            .ireducescatter(colls[0], &big, dummy, None, 8, 0, 8, T::ncclInt32, O::ncclSum)
            .unwrap_err();
        assert!(e.to_string().contains("exceeds ncclCollNet v8's limit"), "{e}");
    }
    assert!(
        cn.iallgather(colls[0], dummy, None, &[], 8, 0, 8).is_err(),
        "no SGE parts"
    );
    assert_eq!(
        (rec.stat("iallreduce"), rec.stat("regMr"), rec.stat("iallgather")),
        before
    );
    // A pair reduceSupport refuses is refused by the plugin, with the plugin's code.
    let e = cn
        .iallreduce(colls[0], dummy, dummy, 1, T::ncclFloat32, O::ncclProd, None, None)
        .unwrap_err();
    assert!(
        matches!(e, NetError::InvalidArgument(_)) && e.to_string().contains("iallreduce returned"),
        "{e}"
    );

    // Both ranks' collectives, concurrently.
    std::thread::scope(|s| {
        for (r, &coll) in colls.iter().enumerate() {
            let cn = &cn;
            s.spawn(move || rank_ops(cn, v, coll, r));
        }
    });
    if v >= 9 {
        assert_eq!((rec.stat("nparts"), rec.stat("part0"), rec.stat("part1")), (2, 48, 80));
    } else if v == 8 {
        assert_eq!((rec.stat("nparts"), rec.stat("part0")), (1, 128));
    }
    if v >= 8 {
        assert_eq!(
            (
                rec.stat("bytesPerRank"),
                rec.stat("windowOffset"),
                rec.stat("windowBytes")
            ),
            (64, 0, 128)
        );
    }
    assert_eq!(rec.stat("flushSize"), 4000);
    assert_eq!(rec.stat("liveMr"), 0, "every registration was released");
    let log = rec.log();
    assert!(log.rfind("deregMr").unwrap() < log.rfind("closeColl").unwrap(), "{log}");
    assert!(
        log.find("closeListen").unwrap() > log.rfind("connect").unwrap(),
        "{log}"
    );

    for c in ctxs {
        cn.finalize_ctx(c).expect("finalize");
    }
    if v >= 11 {
        assert_eq!(rec.stat("finalize"), 3);
    }
    assert_eq!(cn.live_contexts(), 0);
}

#[test]
fn collnet_v6() {
    drive(6);
}
#[test]
fn collnet_v7() {
    drive(7);
}
#[test]
fn collnet_v8() {
    drive(8);
}
#[test]
fn collnet_v9() {
    drive(9);
}
#[test]
fn collnet_v10() {
    drive(10);
}
#[test]
fn collnet_v11() {
    drive(11);
}
#[test]
fn collnet_v12() {
    drive(12);
}

#[test]
fn library_without_collnet_still_loads_its_net_plugin() {
    let net = load_net_from(&lib("libnccl-net-cnnone.so"), &opts()).expect("load");
    let c = net.report.chosen().expect("chosen");
    assert_eq!((c.collnet_version, &c.collnet_state), (None, &None));
    assert!(net.plugin.collnet().is_none());
    assert_eq!(net.plugin.info().name, "CNNet");
    assert_eq!(net.plugin.devices().expect("devices"), 1);
}

/// A CollNet failure at load disables CollNet only; the net plugin is chosen and works.
fn disabled(file: &str, why: &str, inits: i64) {
    let path = lib(file);
    let net = load_net_from(&path, &opts()).expect("the net plugin still loads");
    let c = net.report.chosen().expect("chosen");
    let Some(CollNetState::Disabled(reason)) = &c.collnet_state else {
        panic!("{file}: expected CollNet disabled, got {:?}", c.collnet_state);
    };
    assert!(reason.contains(why), "{file}: {reason}");
    let cn = net.plugin.collnet().expect("the table is still there");
    assert!(!cn.is_enabled());
    let e = cn.init_ctx(7).unwrap_err();
    assert!(
        matches!(e, NetError::InvalidUsage(_)) && e.to_string().contains("disabled"),
        "{e}"
    );
    let rec = Rec::open(&path);
    assert_eq!(
        rec.stat("init"),
        inits,
        "{file}: a disabled CollNet is not initialised again"
    );
    let ctx = net.plugin.init_ctx(1, &CommConfig::default()).expect("net init_ctx");
    assert_eq!(net.plugin.devices().expect("net devices"), 1);
    assert!(net.plugin.properties(0).is_ok());
    net.plugin.finalize_ctx(ctx).expect("net finalize");
}

#[test]
fn collnet_init_failure_disables_collnet_only_v12() {
    disabled("libnccl-net-cn12initfail.so", "init returned ncclSystemError", 1);
}

#[test]
fn collnet_init_failure_disables_collnet_only_v8() {
    disabled("libnccl-net-cn8initfail.so", "init returned ncclSystemError", 1);
}

#[test]
fn collnet_without_devices_is_disabled() {
    disabled("libnccl-net-cn9zerodev.so", "devices() reported 0 devices", 1);
}

#[test]
fn collnet_with_a_null_slot_is_disabled_and_its_context_finalized() {
    disabled("libnccl-net-cn11nullslot.so", "'test' function pointer is NULL", 1);
    let rec = Rec::open(&lib("libnccl-net-cn11nullslot.so"));
    assert_eq!(rec.stat("finalize"), 1, "the probe context was given back");
}

const ROLE: &str = "COLLNET_PARAMS_ROLE";

/// Re-runs `collnet_params_child` with `env` (and no NCCL_*/FERROCCL_* of ours);
/// returns (success, stdout + stderr).
fn params_child(role: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut c = std::process::Command::new(std::env::current_exe().expect("exe"));
    c.args(["collnet_params_child", "--exact", "--nocapture", "--test-threads=1"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    c.env(ROLE, role)
        .env("NCCL_CONF_FILE", "/nonexistent/ferroccl-collnet-test.conf");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run child");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The child side: prints what the resolution gives for a config of `ROLE`.
#[test]
fn collnet_params_child() {
    let Ok(role) = std::env::var(ROLE) else { return };
    ferroccl::log::init_from_config(ferroccl::config::Config::global());
    let cfg = ferroccl::CommConfig {
        collnet_enable: match role.as_str() {
            "config-on" => Some(true),
            "config-off" => Some(false),
            _ => None,
        },
        ..Default::default()
    };
    match ferroccl::resolve_collnet_enable(&cfg) {
        Ok(on) => println!("RESULT enable={on}"),
        Err(e) => println!("RESULT error={e}"),
    }
    let t = ferroccl::collnet_node_threshold().expect("threshold");
    println!("RESULT threshold={t}");
    println!("RESULT after1={}", ferroccl::collnet_after_node_threshold(true, 1, t));
    println!("RESULT after8={}", ferroccl::collnet_after_node_threshold(true, 8, t));
}

#[test]
fn collnet_enable_and_node_threshold_follow_nccl() {
    // Default: off, threshold 2 (NCCL's ncclParamCollNetNodeThreshold).
    let (ok, out) = params_child("none", &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("RESULT enable=false") && out.contains("RESULT threshold=2"),
        "{out}"
    );
    // The config field decides when the environment is silent.
    let (ok, out) = params_child("config-on", &[]);
    assert!(ok && out.contains("RESULT enable=true"), "{out}");
    // NCCL_COLLNET_ENABLE overrides the config, with NCCL's INFO lines.
    let env = [
        ("NCCL_COLLNET_ENABLE", "0"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_COLLNET_NODE_THRESHOLD", "4"),
    ];
    let (ok, out) = params_child("config-on", &env);
    assert!(ok && out.contains("RESULT enable=false"), "{out}");
    assert!(
        out.contains("Comm config collnetEnable reset to NCCL_COLLNET_ENABLE=0"),
        "{out}"
    );
    // ("NCCL_COLLNET_ENABLE set by environment to 0." is the configuration's
    // echo at communicator init, tested in config_precedence.rs.)
    assert!(
        out.contains("RESULT threshold=4") && out.contains("RESULT after1=false"),
        "{out}"
    );
    assert!(out.contains("RESULT after8=true"), "{out}");
    assert!(
        out.contains("Communicator has 1 nodes which is less than CollNet node threshold 4, disabling CollNet"),
        "{out}"
    );
    // A value outside 0..=1 is an error naming the variable.
    let (ok, out) = params_child("none", &[("NCCL_COLLNET_ENABLE", "2")]);
    assert!(
        ok && out.contains("RESULT error=") && out.contains("NCCL_COLLNET_ENABLE"),
        "{out}"
    );
}
