//! The GPU memory checks (`memory.cuda`, `memory.dmabuf`) against the socket
//! plugin, every API version: they skip, and the reason names everything that
//! applies: the plugin does not claim NCCL_PTR_CUDA / NCCL_PTR_DMABUF, and, on
//! a machine where CUDA cannot be used, why not (the driver's own answer as
//! ferroccl-kernels reports it). Their bodies need a GPU and a plugin claiming
//! GPU memory (`src/checks/gpu.rs`); they have not run here.

mod common;

use common::{config, plugin_so};
use ferroccl_conformance::{Status, run};

#[test]
fn gpu_memory_checks_skip_with_every_reason() {
    let so = plugin_so("nccl_net_socket");
    let rep = run(&config(&so, Some("memory.cuda,memory.dmabuf")));
    let no_gpu = ferroccl_kernels::cuda::driver_info().err().map(|e| e.to_string());
    let results: Vec<_> = rep
        .results
        .iter()
        .filter(|r| r.id == "memory.cuda" || r.id == "memory.dmabuf")
        .collect();
    for id in ["memory.cuda", "memory.dmabuf"] {
        assert!(
            results.iter().filter(|r| r.id == id).count() >= 7,
            "{id} ran for every version v6..v12: {:?}",
            results.iter().map(|r| (&r.id, r.version)).collect::<Vec<_>>()
        );
    }
    for r in &results {
        let m = &r.outcome.message;
        assert_eq!(r.outcome.status, Status::Skip, "v{} {}: {m}", r.version, r.id);
        let bit = if r.id == "memory.cuda" {
            "NCCL_PTR_CUDA"
        } else {
            "NCCL_PTR_DMABUF"
        };
        assert!(
            m.contains(&format!("does not claim {bit}")),
            "v{} {}: {m}",
            r.version,
            r.id
        );
        if let Some(why) = &no_gpu {
            assert!(
                m.contains("this machine cannot run GPU checks") && m.contains(why.as_str()),
                "v{} {}: the skip gives the machine's reason ({why}): {m}",
                r.version,
                r.id
            );
        }
        assert!(!r.nccl.is_empty(), "{} names its NCCL source", r.id);
    }
    eprintln!(
        "memory.cuda skip reason: {}",
        results.first().map_or("", |r| r.outcome.message.as_str())
    );
}
