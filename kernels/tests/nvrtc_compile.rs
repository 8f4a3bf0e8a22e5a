//! Every device kernel compiles with NVRTC to PTX for sm_80 and sm_90, on a
//! machine without a GPU: a kernel that does not compile fails here.
//!
//! NVRTC comes from the `nvidia-cuda-nvrtc-cu12` wheel: the file named by
//! `FERROCCL_NVRTC_LIB`, else the wheel found by asking `python3` where
//! `nvidia.cuda_nvrtc` is installed, else `libnvrtc.so.12` on the loader path.
//! Without NVRTC the test prints why and passes, unless
//! `FERROCCL_REQUIRE_NVRTC=1` (CI sets it), where it fails.
//! `FERROCCL_PTX_DUMP_DIR=<dir>` writes each unit's PTX there.

#![cfg(feature = "cuda")]

mod common;

use std::path::PathBuf;
use std::time::Instant;

use ferroccl_kernels::cuda::source::{Unit, kernels_for};
use ferroccl_kernels::cuda::{compile, compile_program, nvrtc_load};
use ferroccl_kernels::{DataType, DevRedOp, KernelError, RedOp, Scalar};

fn require() -> bool {
    std::env::var("FERROCCL_REQUIRE_NVRTC").is_ok_and(|v| v == "1")
}

#[test]
fn every_kernel_compiles_to_ptx_for_sm80_and_sm90() {
    let path = common::nvrtc_path();
    let info = match nvrtc_load(path.as_deref()) {
        Ok(i) => i,
        Err(e) => {
            assert!(!require(), "FERROCCL_REQUIRE_NVRTC=1 but NVRTC cannot be loaded: {e}");
            eprintln!("SKIPPED every_kernel_compiles_to_ptx_for_sm80_and_sm90: {e}");
            return;
        }
    };
    eprintln!(
        "NVRTC {}.{} from {}",
        info.version.0,
        info.version.1,
        info.path
            .as_ref()
            .map_or("the loader path".to_string(), |p| p.display().to_string())
    );
    let mut compiled = 0usize;
    for arch in [80u32, 90] {
        let start = Instant::now();
        let mut entries = Vec::new();
        for unit in Unit::all() {
            let ptx = compile(unit, arch).unwrap_or_else(|e| panic!("{unit} for compute_{arch}: {e}"));
            assert!(
                ptx.contains(&format!(".target sm_{arch}")),
                "{unit}: PTX targets sm_{arch}"
            );
            for k in unit.kernels() {
                let entry = format!(".entry {}(", k.name());
                assert!(ptx.contains(&entry), "{unit} for sm_{arch} defines {entry}");
                entries.push(k);
            }
            if let Some(dir) = std::env::var_os("FERROCCL_PTX_DUMP_DIR") {
                let file = PathBuf::from(dir).join(format!("{}_sm{arch}.ptx", unit.to_string().replace(' ', "_")));
                std::fs::write(&file, ptx.as_bytes()).expect("write PTX dump");
            }
            // The cache hands back the same PTX.
            assert!(std::sync::Arc::ptr_eq(&ptx, &compile(unit, arch).unwrap()));
        }
        // Every dtype x op finds its kernels in what was compiled.
        for t in DataType::ALL {
            for op in [
                RedOp::Sum,
                RedOp::Prod,
                RedOp::Max,
                RedOp::Min,
                RedOp::Avg,
                RedOp::PreMulSum(Scalar::from_f64(t, 3.0)),
            ] {
                for nranks in [1u32, 4] {
                    let dev = DevRedOp::new(t, op, nranks).unwrap();
                    for k in kernels_for(&dev) {
                        assert!(entries.contains(&k), "{t} {op}: {k:?} not compiled");
                    }
                }
            }
        }
        let per_arch = entries.len();
        compiled += per_arch;
        eprintln!(
            "compiled {per_arch} kernels in {} units to PTX for sm_{arch} in {:.2} s",
            Unit::all().len(),
            start.elapsed().as_secs_f64()
        );
    }
    assert_eq!(compiled, 2 * 57);
    assert_eq!(Unit::all().iter().map(|u| u.kernels().len()).sum::<usize>(), 57);
}

#[test]
fn a_kernel_that_does_not_compile_is_an_error_with_the_log() {
    let path = common::nvrtc_path();
    if let Err(e) = nvrtc_load(path.as_deref()) {
        assert!(!require(), "FERROCCL_REQUIRE_NVRTC=1 but NVRTC cannot be loaded: {e}");
        eprintln!("SKIPPED a_kernel_that_does_not_compile_is_an_error_with_the_log: {e}");
        return;
    }
    let bad = "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }";
    match compile_program("broken", bad, 80) {
        Err(KernelError::Compile { program, arch, log }) => {
            assert_eq!((program.as_str(), arch), ("broken", 80));
            assert!(log.contains("undefined_name"), "log names the error: {log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}
