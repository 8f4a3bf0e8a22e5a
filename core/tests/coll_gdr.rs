//! GPUDirect RDMA through a net plugin, on a host without a GPU: two real
//! processes over `libnccl-net-zoo-gdr.so` (conformance/zoo/zoo_net.c with
//! `ZOO_QUIRK_GDR`, loaded with `dlopen` by path), with their buffers in
//! **mock** device memory (`ferroccl::mockdev`: pages mapped `PROT_NONE`,
//! reached only through `/proc/self/mem` by the mock device's backend and by the
//! plugin's "DMA engine"). The plugin advertises `NCCL_PTR_CUDA` (and
//! `NCCL_PTR_DMABUF` on request) and logs every `regMr`/`regMrDmaBuf`/`iflush`
//! and every transfer from or into device-registered memory.
//!
//! What is checked, as NCCL 2.30.7 behaves (`src/graph/paths.cc`
//! `ncclTopoCheckGdr`, `src/transport/net.cc` `recvSetup`, `*ProxyRegBuffer`,
//! `recvProxyProgress`):
//! * GPUDirect on (GPU and NIC under one PCI bridge, default
//!   `NCCL_NET_GDR_LEVEL`): device memory is registered with
//!   `regMr(NCCL_PTR_CUDA)` and sent from / received into directly; a GPU
//!   before compute capability 9.0 gets an `iflush` after each non-empty
//!   receive; the INFO lines say `GPU Direct RDMA Enabled` and `/GDRDMA`;
//! * with `NCCL_PTR_DMABUF` and a DMA-BUF capable GPU on compute capability
//!   9.0: `regMrDmaBuf` with an open descriptor, and no flush at all;
//! * `NCCL_NET_GDR_LEVEL=LOC`: nothing registered as device memory, no flush,
//!   everything staged through host memory, `GPU Direct RDMA Disabled`;
//! * `NCCL_NET_GDR_READ=0`: sends staged, receives still GPUDirect.
//!
//! In every case the results equal the CPU reference: a plugin touching the
//! `PROT_NONE` pages as host memory would fail the transfer (`EFAULT`).

#[path = "coll_support/mod.rs"]
mod coll_support;

use std::path::PathBuf;
use std::time::Duration;

use coll_support::mock_mem::{COPY_ONLY, ProcMem, ProtNone};
use coll_support::{assert_all_ok, join, launch, role, target_dir};
use ferroccl::check;
use ferroccl::mockdev::{self, MockGpu};
use ferroccl::stream::Stream;
use ferroccl::{DataType, RedOp, TestOp, group_end, group_start};

const WORKER: &str = "gdr_worker";
const LIMIT: Duration = Duration::from_secs(240);
/// GPU and NIC under the same bridge: PIX.
const GPU_PCI: &str = "/sys/devices/pci0000:00/0000:00:02.0/0000:01:00.0";
const NIC_PCI: &str = "/sys/devices/pci0000:00/0000:00:02.0/0000:01:00.1";

/// `len` bytes of mock device memory of GPU 0 (facts from the environment),
/// served by the copy-only mock device.
struct MockBuf {
    ptr: *mut u8,
    _map: ProtNone,
}

impl MockBuf {
    fn new(len: usize) -> MockBuf {
        let map = ProtNone::new(len);
        let env = |k: &str| std::env::var(k).unwrap_or_default();
        let gpu = MockGpu {
            ordinal: 0,
            cuda_cc: env("MOCK_GPU_CC").parse().expect("MOCK_GPU_CC"),
            gdr: true,
            dmabuf: env("MOCK_GPU_DMABUF") == "1",
            pci_path: Some(GPU_PCI.into()),
        };
        mockdev::declare(map.ptr, map.len, &COPY_ONLY, gpu);
        MockBuf {
            ptr: map.ptr,
            _map: map,
        }
    }
}

impl Drop for MockBuf {
    fn drop(&mut self) {
        // Forgotten before `_map` is unmapped.
        mockdev::forget(self.ptr);
    }
}

/// Runs `top` out of place on mock device buffers; returns the wrong elements.
fn run_device(comm: &ferroccl::Comm, top: TestOp, dtype: DataType, count: usize) -> usize {
    let (n, r) = (comm.nranks(), comm.rank());
    let es = dtype.size();
    let op = RedOp::Sum;
    let (se, re) = top.buffer_elems(count, n);
    let mut input = vec![0u8; se * es];
    check::fill(&mut input, dtype, &op, r, 1);
    let sendbuf = MockBuf::new(se * es);
    let recvbuf = MockBuf::new(re * es);
    ProcMem::write(sendbuf.ptr, &input);
    ProcMem::write(recvbuf.ptr, &vec![0xEE; re * es]);
    let s = Stream::new();
    // SAFETY: the mappings outlive the synchronize below.
    unsafe {
        match top {
            TestOp::AllReduce => comm.all_reduce(sendbuf.ptr, recvbuf.ptr, count, dtype, op, &s),
            TestOp::SendRecv => {
                group_start();
                comm.send(sendbuf.ptr, count, dtype, (r + 1) % n, &s).unwrap();
                comm.recv(recvbuf.ptr, count, dtype, (r + n - 1) % n, &s).unwrap();
                group_end()
            }
            other => panic!("{other:?} is not run here"),
        }
    }
    .expect("enqueue");
    s.synchronize().expect("synchronize");
    let got = ProcMem::read(recvbuf.ptr, re * es);
    match check::expected(top, dtype, &op, n, r, count, 1) {
        Some(want) => check::count_wrong(dtype, &got, &want),
        None => 0,
    }
}

/// Child entry point: AllReduce and SendRecv on mock device memory, sizes above
/// the registration threshold (64 KiB) and over several FIFO steps.
#[test]
fn gdr_worker() {
    let Some(r) = role("gdr") else { return };
    let comm = join(&r, Duration::from_secs(60));
    let mut wrong = 0;
    for count in [1usize << 15, 100_003] {
        for top in [TestOp::AllReduce, TestOp::SendRecv] {
            let w = run_device(&comm, top, DataType::Float32, count);
            println!("{top:?} count {count}: {w} wrong");
            wrong += w;
        }
    }
    comm.destroy().expect("destroy");
    assert_eq!(wrong, 0, "rank {}: wrong elements on mock device buffers", r.rank);
    println!("rank {}: all correct", r.rank);
}

fn zoo_gdr() -> PathBuf {
    let p = target_dir().join("libnccl-net-zoo-gdr.so");
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --workspace` (testing/zoo-quirky builds it)",
        p.display()
    );
    p
}

/// What the plugin logged in one run.
struct PluginLog(Vec<String>);

impl PluginLog {
    fn count(&self, prefix: &str) -> usize {
        self.0
            .iter()
            .filter(|l| l.split_once(' ').is_some_and(|(_, rest)| rest.starts_with(prefix)))
            .count()
    }
    fn lines(&self, prefix: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter_map(|l| l.split_once(' ').map(|(_, rest)| rest))
            .filter(|rest| rest.starts_with(prefix))
            .collect()
    }
}

/// Runs the worker on 2 ranks over zoo-gdr with `env`; returns the plugin's
/// log and every rank's output (NCCL prints its INFO lines on stdout).
fn run(name: &str, cc: i32, dmabuf: bool, env: &[(&str, &str)]) -> (PluginLog, String) {
    let so = zoo_gdr();
    let dir = std::env::temp_dir().join(format!("ferroccl-gdr-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("log dir");
    let log = dir.join("plugin.log");
    let _ = std::fs::remove_file(&log);
    let cc = cc.to_string();
    let mut all = vec![
        ("NCCL_NET_PLUGIN", so.to_str().expect("utf-8 path")),
        ("NCCL_NET", "Zoo"),
        ("NCCL_SHM_DISABLE", "1"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET"),
        ("NCCL_BUFFSIZE", "262144"),
        ("NCCL_MAX_NCHANNELS", "2"),
        ("ZOO_GDR_LOG", log.to_str().expect("utf-8 path")),
        ("ZOO_GDR_PCI_PATH", NIC_PCI),
        ("ZOO_GDR_DMABUF", if dmabuf { "1" } else { "0" }),
        ("MOCK_GPU_DMABUF", if dmabuf { "1" } else { "0" }),
        ("MOCK_GPU_CC", cc.as_str()),
    ];
    all.extend_from_slice(env);
    let outs = launch(WORKER, "gdr", 2, &[0, 1], &all, |_| Vec::new(), LIMIT);
    assert_all_ok(&outs, &format!("GPUDirect over zoo-gdr ({name})"));
    for o in &outs {
        assert!(o.stdout.contains("all correct"), "rank {}:\n{}", o.rank, o.stdout);
    }
    let lines = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let out = outs.iter().map(|o| format!("{}{}", o.stdout, o.stderr)).collect();
    (PluginLog(lines), out)
}

/// GPUDirect with `regMr(NCCL_PTR_CUDA)` and a flush after each receive (compute
/// capability 8.0: NCCL's `ncclTopoNeedFlush`).
#[test]
fn gdr_registers_cuda_memory_and_flushes_before_hopper() {
    let (log, stderr) = run("cuda-flush", 80, false, &[]);
    assert!(log.count("regMr type 2") > 0, "no regMr(NCCL_PTR_CUDA):\n{:?}", log.0);
    assert_eq!(log.count("regMrDmaBuf"), 0, "DMA-BUF not advertised:\n{:?}", log.0);
    assert!(log.count("isend cuda") > 0, "no send from device memory:\n{:?}", log.0);
    assert!(
        log.count("irecv cuda") > 0,
        "no receive into device memory:\n{:?}",
        log.0
    );
    let flushes = log.lines("iflush");
    assert!(!flushes.is_empty(), "no iflush on compute capability 8.0:\n{:?}", log.0);
    for f in &flushes {
        assert!(
            f.ends_with("cuda 1") && f.starts_with("iflush n 1 size ") && !f.contains("size 0 "),
            "flush of something other than one non-empty device-memory receive: {f}"
        );
    }
    // One flush per receive into device memory (every step carries data).
    assert_eq!(
        flushes.len(),
        log.count("irecv cuda"),
        "one iflush per receive into device memory"
    );
    assert!(
        stderr.contains("GPU Direct RDMA Enabled for GPU 1000 / HCA 0 (distance 4 <= 5), read 1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("GPU Direct RDMA Enabled for GPU 1000 / HCA 0 (distance 4 <= 5), read 0"),
        "{stderr}"
    );
    assert!(stderr.contains("[send] via NET/Zoo/0/GDRDMA"), "{stderr}");
    assert!(stderr.contains("[receive] via NET/Zoo/0/GDRDMA"), "{stderr}");
}

/// `regMrDmaBuf` when the plugin advertises `NCCL_PTR_DMABUF` and the GPU
/// supports it; no flush from compute capability 9.0.
#[test]
fn gdr_uses_dmabuf_and_no_flush_on_hopper() {
    let (log, _) = run("dmabuf", 90, true, &[]);
    let regs = log.lines("regMrDmaBuf");
    assert!(!regs.is_empty(), "no regMrDmaBuf:\n{:?}", log.0);
    for r in &regs {
        assert!(r.starts_with("regMrDmaBuf type 4 ") && r.ends_with("fd_valid 1"), "{r}");
    }
    assert_eq!(
        log.count("regMr type 2"),
        0,
        "regMr(NCCL_PTR_CUDA) despite DMA-BUF:\n{:?}",
        log.0
    );
    assert!(
        log.count("isend cuda") > 0 && log.count("irecv cuda") > 0,
        "{:?}",
        log.0
    );
    assert_eq!(log.count("iflush"), 0, "flush on compute capability 9.0:\n{:?}", log.0);
}

/// `NCCL_NET_GDR_LEVEL=LOC`: the GPU–NIC distance (PIX) is too far, so device
/// memory is never registered nor flushed; steps are staged.
#[test]
fn gdr_level_loc_stages_everything() {
    let (log, stderr) = run("level-loc", 80, false, &[("NCCL_NET_GDR_LEVEL", "LOC")]);
    assert_eq!(log.count("regMr type 2"), 0, "{:?}", log.0);
    assert_eq!(log.count("isend cuda") + log.count("irecv cuda"), 0, "{:?}", log.0);
    assert_eq!(log.count("iflush"), 0, "{:?}", log.0);
    assert!(log.count("regMr type 1") > 0, "the FIFOs are host memory:\n{:?}", log.0);
    assert!(
        stderr.contains("GPU Direct RDMA Disabled for GPU 1000 / HCA 0 (distance 4 > 0)"),
        "{stderr}"
    );
    assert!(!stderr.contains("/GDRDMA"), "{stderr}");
}

/// `NCCL_NET_GDR_READ=0`: the send side (the NIC reading GPU memory) is staged,
/// receives still land in device memory (and are flushed on 8.0).
#[test]
fn gdr_read_off_stages_sends_only() {
    let (log, _) = run("read-off", 80, false, &[("NCCL_NET_GDR_READ", "0")]);
    assert_eq!(log.count("isend cuda"), 0, "{:?}", log.0);
    assert!(log.count("irecv cuda") > 0, "{:?}", log.0);
    assert!(log.count("iflush") > 0, "{:?}", log.0);
}
