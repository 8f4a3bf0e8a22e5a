//! The host drives real plugin `.so` files through every `ncclNet` version:
//! the SDK test plugin capped to each of v6 … v12, and the C v6 plugin written
//! from the reference tables (C compatibility independent of our Rust ABI types).

mod plugin_common;

use ferroccl::plugin::logger::LogCapture;
use ferroccl::plugin::net::{NetError, PtrType, RecvSlot};
use ferroccl::plugin::{LoadOptions, PluginError, load_net_from};
use plugin_common::*;

/// `isend` tag that makes the SDK test plugin panic (`testing/net-sdk-test`).
const PANIC_TAG: i32 = 0x0BAD_F00D;

fn capped(v: u32) -> LoadOptions {
    LoadOptions {
        max_net_version: v,
        ..opts()
    }
}

#[test]
fn sdk_plugin_driven_through_each_version() {
    for v in 6..=12 {
        let loaded = load_net_from(&sdk_lib(), &capped(v)).unwrap_or_else(|e| panic!("v{v}: {e}"));
        let net = &*loaded.plugin;
        assert_eq!(net.info().version, v, "cap {v} selects ncclNetPlugin_v{v}");
        assert_eq!(net.info().name, "SdkLoop");
        assert!(
            net.info().path.ends_with("libferroccl_test_net_sdk.so"),
            "{:?}",
            net.info().path
        );
        drive_roundtrip(net, 0x1000 + u64::from(v));
    }
}

#[test]
fn properties_are_converted_per_version() {
    for v in 6..=12 {
        let loaded = load_net_from(&sdk_lib(), &capped(v)).unwrap();
        let p = loaded.plugin.properties(0).unwrap();
        assert_eq!(p.name, "sdkloop0", "v{v}");
        assert_eq!(p.guid, 0x5d4, "v{v}");
        assert_eq!(p.speed, 4321, "v{v}");
        assert_eq!(p.port, 1, "v{v}");
        assert_eq!(p.pci_path, None, "v{v}");
        assert_eq!(p.max_recvs, 4, "v{v}");
        // NCCL's assumed values for fields older versions lack.
        let (p2p, multi, rail) = match v {
            6..=8 => (1usize << 30, 1, -1),
            9 | 10 => (1 << 33, 1, -1),
            11 => (1 << 33, 2, -1),
            _ => (1 << 33, 2, 3),
        };
        assert_eq!(p.max_p2p_bytes, p2p, "maxP2pBytes v{v}");
        assert_eq!(p.max_multi_request_size, multi, "maxMultiRequestSize v{v}");
        assert_eq!(p.rail_id, rail, "railId v{v}");
    }
}

#[test]
fn grouped_receive_matches_tags() {
    for v in [9, 12] {
        let loaded = load_net_from(&sdk_lib(), &capped(v)).unwrap();
        let net = &*loaded.plugin;
        let p = connect_pair(net, 77);
        let mut a = pattern(64, 1);
        let mut b = pattern(32, 2);
        let mut da = vec![0u8; 64];
        let mut db = vec![0u8; 64];
        let slots = [
            RecvSlot {
                data: da.as_mut_ptr(),
                size: 64,
                tag: 1,
                mr: None,
            },
            RecvSlot {
                data: db.as_mut_ptr(),
                size: 64,
                tag: 2,
                mr: None,
            },
        ];
        let r = until("irecv", || net.irecv(p.recv, &slots, false).unwrap());
        // Sent in the opposite order of the posted buffers: tags decide.
        let sb = until("isend", || net.isend(p.send, b.as_mut_ptr(), 32, 2, None).unwrap());
        let sa = until("isend", || net.isend(p.send, a.as_mut_ptr(), 64, 1, None).unwrap());
        wait(net, sa, 1);
        wait(net, sb, 1);
        assert_eq!(wait(net, r, 2), vec![64, 32], "v{v}");
        assert_eq!(da, a);
        assert_eq!(&db[..32], &b[..]);
        net.close_send(p.send).unwrap();
        net.close_recv(p.recv).unwrap();
        net.close_listen(p.listen).unwrap();
        net.finalize_ctx(p.ctx).unwrap();
    }
}

#[test]
fn old_versions_reject_sizes_their_c_int_cannot_carry() {
    let mut buf = [0u8; 8];
    for v in 6..=8 {
        let loaded = load_net_from(&sdk_lib(), &capped(v)).unwrap();
        let net = &*loaded.plugin;
        let p = connect_pair(net, 5);
        // The adapter refuses before calling the plugin, so the buffer is never read.
        let e = net.isend(p.send, buf.as_mut_ptr(), (1 << 30) + 1, 0, None).unwrap_err();
        assert!(matches!(e, NetError::InvalidArgument(_)), "v{v} isend: {e}");
        let slot = RecvSlot {
            data: buf.as_mut_ptr(),
            size: (1 << 30) + 1,
            tag: 0,
            mr: None,
        };
        let e = net.irecv(p.recv, &[slot], false).unwrap_err();
        assert!(matches!(e, NetError::InvalidArgument(_)), "v{v} irecv: {e}");
        if v <= 7 {
            let e = net
                .reg_mr(p.send, buf.as_mut_ptr(), 1 << 31, PtrType::Host)
                .unwrap_err();
            assert!(matches!(e, NetError::InvalidArgument(_)), "v{v} regMr: {e}");
        }
        net.close_send(p.send).unwrap();
        net.close_recv(p.recv).unwrap();
        net.close_listen(p.listen).unwrap();
        net.finalize_ctx(p.ctx).unwrap();
    }
}

#[test]
fn panic_inside_plugin_is_an_error_not_an_abort() {
    for v in [6, 10, 12] {
        let loaded = load_net_from(&sdk_lib(), &capped(v)).unwrap();
        let net = &*loaded.plugin;
        let p = connect_pair(net, 9);
        let mut buf = pattern(16, 3);
        let e = net.isend(p.send, buf.as_mut_ptr(), 16, PANIC_TAG, None).unwrap_err();
        assert!(matches!(e, NetError::Internal(_)), "v{v}: {e}");
        assert!(e.to_string().contains("ncclInternalError"), "{e}");
        // The plugin still works afterwards.
        let s = until("isend", || net.isend(p.send, buf.as_mut_ptr(), 16, 1, None).unwrap());
        wait(net, s, 1);
        net.close_send(p.send).unwrap();
        net.close_recv(p.recv).unwrap();
        net.close_listen(p.listen).unwrap();
        net.finalize_ctx(p.ctx).unwrap();
    }
}

#[test]
fn make_vdevice_only_from_v9() {
    for v in 6..=12 {
        let loaded = load_net_from(&sdk_lib(), &capped(v)).unwrap();
        let r = loaded.plugin.make_vdevice(&[0, 0]);
        if v >= 9 {
            assert_eq!(r.unwrap(), 102, "v{v}");
        } else {
            assert!(matches!(r, Err(NetError::InvalidUsage(_))), "v{v}: {r:?}");
        }
    }
}

#[test]
fn plugin_logs_reach_the_host_logger() {
    let cap = LogCapture::start();
    let loaded = load_net_from(&sdk_lib(), &capped(12)).unwrap();
    let ctx = loaded.plugin.init_ctx(0xfeed_beef, &Default::default()).unwrap();
    loaded.plugin.finalize_ctx(ctx).unwrap();
    let lines = cap.lines_containing("SdkLoop init comm 0xfeedbeef");
    assert_eq!(lines.len(), 1, "{:?}", cap.lines());
    assert_eq!(lines[0].level, 3, "NCCL_LOG_INFO");
    assert_eq!(lines[0].flags, 0x1, "NCCL_INIT");
}

#[test]
fn pre_v11_init_runs_once_per_library() {
    // v6–v10 have a single process-wide init: many contexts, one plugin init.
    let a = load_net_from(&sdk_lib(), &capped(8)).unwrap();
    let b = load_net_from(&sdk_lib(), &capped(8)).unwrap();
    let c1 = a.plugin.init_ctx(1, &Default::default()).unwrap();
    let c2 = b.plugin.init_ctx(2, &Default::default()).unwrap();
    a.plugin.finalize_ctx(c1).unwrap();
    b.plugin.finalize_ctx(c2).unwrap();
    // Loading the same symbol again reuses the same adapter (same address).
    assert!(std::ptr::eq(
        std::sync::Arc::as_ptr(&a.plugin) as *const u8,
        std::sync::Arc::as_ptr(&b.plugin) as *const u8
    ));
    drive_roundtrip(&*b.plugin, 3);
}

#[test]
fn c_v6_plugin_is_driven_by_the_host() {
    let cap = LogCapture::start();
    let loaded = load_net_from(&lib("libnccl-net-cv6.so"), &opts()).unwrap();
    let net = &*loaded.plugin;
    assert_eq!(net.info().version, 6);
    assert_eq!(net.info().name, "CV6");
    assert_eq!(net.info().collnet_version, None);
    let p = net.properties(0).unwrap();
    assert_eq!(p.name, "cv6-loop0");
    assert_eq!(p.pci_path, None);
    assert_eq!(p.guid, 0xC6);
    assert_eq!(p.ptr_support, 1);
    assert_eq!((p.speed, p.port, p.max_comms, p.max_recvs), (1234, 7, 4096, 1));
    assert_eq!(p.latency, 1.5);
    assert_eq!(p.max_p2p_bytes, 1 << 30, "v6: NCCL assumes MAX_NET_SIZE");
    assert_eq!(p.max_coll_bytes, 1 << 29, "v6: NCCL assumes MAX_COLLNET_SIZE");
    assert_eq!(p.net_device_type, 0);
    assert!(!net.has_dmabuf(), "regMrDmaBuf is NULL in the C table");
    drive_roundtrip(net, 1);
    // The C plugin formatted "%s init: v%d loopback, %s" through our variadic logger.
    let lines = cap.lines_containing("CV6 init: v6 loopback, ready");
    assert_eq!(lines.len(), 1, "{:?}", cap.lines());
    assert!(lines[0].file.ends_with("plugin_v6.c"), "{:?}", lines[0]);
    assert_eq!(lines[0].flags, 0x11);
}

#[test]
fn c_table_filled_in_by_init_is_read_after_init() {
    let loaded = load_net_from(&lib("libnccl-net-cv6late.so"), &opts()).unwrap();
    assert_eq!(loaded.plugin.info().name, "CV6Late");
    drive_roundtrip(&*loaded.plugin, 2);
}

#[test]
fn unpack_device_type_is_refused_with_a_reason() {
    let e = load_net_from(&lib("libnccl-net-cv6unpack.so"), &opts()).unwrap_err();
    match &e {
        PluginError::DeviceTypeUnusable {
            device_type: 1,
            device_version: 7,
            why,
            ..
        } => {
            assert!(why.contains("UNPACK"), "{why}")
        }
        other => panic!("expected DeviceTypeUnusable, got {other}"),
    }
}
