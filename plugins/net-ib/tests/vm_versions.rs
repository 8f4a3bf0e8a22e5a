//! The built `libnccl_net_ib.so`, loaded through the host's dlopen path
//! (`ferroccl::plugin::load_net_from`, version cap `max_net_version` = 6 … 12),
//! exchanges data between two processes over real verbs for every ncclNet API
//! version. Skips (passes) without RDMA devices unless `IB_VM_REQUIRE=1`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferroccl::plugin::net::{NetPlugin, PtrType, RawComm, RawRequest, RecvSlot};
use ferroccl::plugin::{LoadOptions, load_net_from};
use ferroccl_plugin_api::sdk::CommConfig;

const SIZES: &[usize] = &[0, 1, 4097, 1 << 20, 5 << 20];

fn so_path() -> String {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libnccl_net_ib.so")
        .to_string_lossy()
        .into_owned()
}

fn load(version: u32) -> Result<std::sync::Arc<dyn NetPlugin>, String> {
    let opts = LoadOptions {
        max_net_version: version,
        in_tree: false,
        search_exe_dirs: false,
        ..LoadOptions::default()
    };
    load_net_from(&so_path(), &opts)
        .map(|l| l.plugin)
        .map_err(|e| e.to_string())
}

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i.wrapping_mul(13) ^ seed.wrapping_mul(0x51)) >> 2) as u8)
        .collect()
}

fn wait(p: &dyn NetPlugin, req: RawRequest, sizes: &mut [usize]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !p.test(req, sizes).expect("test") {
        assert!(Instant::now() < deadline, "request pending after 60 s");
    }
}

fn hex(b: &[u8]) -> String {
    hex::encode(b)
}

fn sender(version: u32, h: &str) {
    let p = load(version).expect("child load");
    let ctx = p.init_ctx(1, &CommConfig::default()).unwrap();
    let mut handle = [0u8; 128];
    hex::decode_to_slice(h, &mut handle).expect("hex handle");
    let deadline = Instant::now() + Duration::from_secs(60);
    let comm: RawComm = loop {
        if let Some(c) = p.connect(ctx, 0, &mut handle).unwrap() {
            break c;
        }
        assert!(Instant::now() < deadline);
    };
    for &s in SIZES {
        let mut d = pattern(s + version as usize, s.max(1));
        let mr = p.reg_mr(comm, d.as_mut_ptr(), d.len(), PtrType::Host).unwrap();
        let r = loop {
            if let Some(r) = p.isend(comm, d.as_mut_ptr(), s, 3, Some(mr)).unwrap() {
                break r;
            }
        };
        wait(&*p, r, &mut [0; 8]);
        p.dereg_mr(comm, mr).unwrap();
    }
    // Grouped receive: two sends with tags 21 and 20.
    let mut a = pattern(20, 3000);
    let mut b = pattern(21, 5000);
    let ma = p.reg_mr(comm, a.as_mut_ptr(), a.len(), PtrType::Host).unwrap();
    let mb = p.reg_mr(comm, b.as_mut_ptr(), b.len(), PtrType::Host).unwrap();
    let rb = loop {
        if let Some(r) = p.isend(comm, b.as_mut_ptr(), 5000, 21, Some(mb)).unwrap() {
            break r;
        }
    };
    let ra = loop {
        if let Some(r) = p.isend(comm, a.as_mut_ptr(), 3000, 20, Some(ma)).unwrap() {
            break r;
        }
    };
    wait(&*p, rb, &mut [0; 8]);
    wait(&*p, ra, &mut [0; 8]);
    p.close_send(comm).unwrap();
    p.finalize_ctx(ctx).unwrap();
    println!("CHILD v{version} done");
}

#[test]
fn every_api_version_over_verbs() {
    if let (Ok(v), Ok(h)) = (std::env::var("IB_CHILD_VERSION"), std::env::var("IB_CHILD_HANDLE")) {
        sender(v.parse().unwrap(), &h);
        return;
    }
    for version in 6..=12u32 {
        let p = match load(version) {
            Ok(p) => p,
            Err(e) if std::env::var("IB_VM_REQUIRE").is_ok_and(|v| !v.is_empty()) => panic!("v{version}: {e}"),
            Err(e) => {
                eprintln!("skipping: {e}");
                return;
            }
        };
        assert_eq!(p.info().version, version, "loaded {:?}", p.info());
        let ctx = p.init_ctx(1, &CommConfig::default()).unwrap();
        let mut handle = [0u8; 128];
        let listen = p.listen(ctx, 0, &mut handle).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "every_api_version_over_verbs",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("IB_CHILD_VERSION", version.to_string())
            .env("IB_CHILD_HANDLE", hex(&handle))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let comm = loop {
            if let Some(c) = p.accept(listen).unwrap() {
                break c;
            }
            assert!(Instant::now() < deadline, "v{version}: accept timed out");
        };
        p.close_listen(listen).unwrap();
        let mut buf = vec![0u8; 6 << 20];
        let mr = p.reg_mr(comm, buf.as_mut_ptr(), buf.len(), PtrType::Host).unwrap();
        for &s in SIZES {
            let slot = RecvSlot {
                data: buf.as_mut_ptr(),
                size: buf.len(),
                tag: 3,
                mr: Some(mr),
            };
            let r = p.irecv(comm, &[slot], false).unwrap().expect("irecv");
            let mut sizes = [0usize; 8];
            wait(&*p, r, &mut sizes);
            assert_eq!(sizes[0], s, "v{version} size");
            assert!(
                buf[..s] == pattern(s + version as usize, s.max(1))[..s],
                "v{version}: data of size {s}"
            );
        }
        let (mut ga, mut gb) = (vec![0u8; 4096], vec![0u8; 8192]);
        let gma = p.reg_mr(comm, ga.as_mut_ptr(), ga.len(), PtrType::Host).unwrap();
        let gmb = p.reg_mr(comm, gb.as_mut_ptr(), gb.len(), PtrType::Host).unwrap();
        let slots = [
            RecvSlot {
                data: ga.as_mut_ptr(),
                size: ga.len(),
                tag: 20,
                mr: Some(gma),
            },
            RecvSlot {
                data: gb.as_mut_ptr(),
                size: gb.len(),
                tag: 21,
                mr: Some(gmb),
            },
        ];
        let r = p.irecv(comm, &slots, false).unwrap().expect("grouped irecv");
        let mut sizes = [0usize; 8];
        wait(&*p, r, &mut sizes);
        assert_eq!(&sizes[..2], &[3000, 5000], "v{version} grouped sizes");
        assert!(
            ga[..3000] == pattern(20, 3000)[..] && gb[..5000] == pattern(21, 5000)[..],
            "v{version} grouped data"
        );
        let out = child.stdout.take().unwrap();
        // Read to EOF (stopping early would break the child's pipe).
        let lines: Vec<String> = BufReader::new(out).lines().map_while(Result::ok).collect();
        let done = lines.iter().any(|l| l.contains("done"));
        assert!(child.wait().unwrap().success() && done, "v{version}: sender failed");
        p.close_recv(comm).unwrap();
        p.finalize_ctx(ctx).unwrap();
        println!("PARENT v{version} ok");
    }
}
