//! The CUDA kernels (`src/cuda/kernels.cu`), launched exactly as the CUDA
//! backend plans them (`cuda::plan`), give the reference results for every
//! datatype × op × pre-op placement, in and out of place, for aligned,
//! offset, mutually misaligned and element-misaligned buffers, across the
//! vector, unrolled and tail paths.
//!
//! **GPU emulation, named as such**: no GPU is needed. The kernel source is
//! compiled by the host C++ compiler with `tests/emu/cuda_emu.h`, which runs
//! every thread of the grid one after another (each launch twice: forward and
//! reverse thread order, so two threads writing one element would show; and,
//! with the real device shapes of H100/H200, A100, 58 and 8 SMs, blocks in a
//! shuffled order, in place).
//! What this cannot check: the device's own arithmetic units, the memory
//! model, NVRTC (see `nvrtc_compile.rs`) and the driver (`cuda_device.rs`,
//! which needs a GPU). Without a C++ compiler (`$CXX`, `c++`, `g++`,
//! `clang++`) the test prints why and passes.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ferroccl_kernels::cuda::plan::{self, DeviceShape, Launch};
use ferroccl_kernels::cuda::source::{self, Unit};
use ferroccl_kernels::{DataType, DevRedOp, Pre, RedOp, Scalar, reference};

type LaunchFn = unsafe extern "C" fn(*const std::ffi::c_void, u32, u32, *const u64, i32);

struct Emu {
    lib: libloading::Library,
    kernels: HashMap<String, usize>,
    launch: LaunchFn,
}

impl Emu {
    /// The emulation library, built once per test process.
    fn get() -> Result<&'static Emu, String> {
        static EMU: std::sync::OnceLock<Result<Emu, String>> = std::sync::OnceLock::new();
        EMU.get_or_init(Emu::build).as_ref().map_err(Clone::clone)
    }

    fn build() -> Result<Emu, String> {
        let cxx = common::find_compiler("CXX", &["c++", "g++", "clang++"])
            .map_err(|e| format!("{e} to build the GPU emulation"))?;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cuda-emu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let src = dir.join("kernels_all.cu");
        std::fs::write(&src, source::program(&Unit::all())).map_err(|e| e.to_string())?;
        let header = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/emu/cuda_emu.h");
        let so = dir.join("libfccl_emu.so");
        let out = Command::new(&cxx)
            .args([
                "-std=c++17",
                "-O1",
                "-fPIC",
                "-shared",
                "-ffp-contract=off",
                "-fno-strict-aliasing",
            ])
            .args(["-Wall", "-Wno-unknown-pragmas", "-Werror=return-type", "-include"])
            .arg(&header)
            .args(["-x", "c++"])
            .arg(&src)
            .arg("-o")
            .arg(&so)
            .output()
            .map_err(|e| format!("{cxx}: {e}"))?;
        // A compiler that runs but rejects the source is a failure, not a skip.
        assert!(
            out.status.success(),
            "{cxx} rejected kernels.cu under the emulation header:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // SAFETY: the library was just built from our source; its initialisers
        // only set up thread-local dims.
        let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| e.to_string())?;
        // SAFETY: `fccl_emu_launch` has this signature (cuda_emu.h).
        let launch = *unsafe { lib.get::<LaunchFn>(b"fccl_emu_launch") }.map_err(|e| e.to_string())?;
        let mut kernels = HashMap::new();
        for u in Unit::all() {
            for k in u.kernels() {
                let name = k.name();
                // SAFETY: looking up a symbol; used only as a function address.
                let f = *unsafe { lib.get::<*const std::ffi::c_void>(name.as_bytes()) }
                    .map_err(|e| format!("{name}: {e}"))?;
                kernels.insert(name, f as usize);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Ok(Emu { lib, kernels, launch })
    }

    /// Runs `l` in thread order `order` (`fccl_emu_launch`: 0 forward, 1
    /// reverse, other values seed a shuffled block order).
    fn run(&self, l: &Launch, order: i32) {
        let _ = &self.lib;
        let f = self.kernels[&l.kernel.name()] as *const std::ffi::c_void;
        // SAFETY: `f` is one of the kernels (eight u64 parameters); the launch's
        // addresses point into live host buffers of the planned sizes.
        unsafe { (self.launch)(f, l.grid, l.block, l.args.as_ptr(), order) };
    }
}

/// Equal bytes, except that two NaNs of a float type count as equal.
fn same(dtype: DataType, x: &[u8], y: &[u8]) -> bool {
    x == y
        || (0..x.len() / dtype.size()).all(|i| match (reference::get(x, dtype, i), reference::get(y, dtype, i)) {
            (reference::Value::F(a), reference::Value::F(b)) => {
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
            }
            (a, b) => a == b,
        })
}

fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

/// Random bytes: every other element a random bit pattern (NaNs, infinities,
/// subnormals), the rest small values, so sums and products are meaningful.
fn fill(rnd: &mut impl FnMut() -> u64, dtype: DataType, buf: &mut [u8]) {
    for i in 0..buf.len() / dtype.size() {
        let r = rnd();
        if r & 1 == 0 {
            let n = dtype.size();
            buf[i * n..(i + 1) * n].copy_from_slice(&r.to_ne_bytes()[..n]);
        } else {
            let v = (r >> 8) as i64 % 200 - 100;
            let val = if dtype.is_float() {
                reference::Value::F(v as f64 * 0.375)
            } else {
                reference::Value::I(v)
            };
            reference::set(buf, dtype, i, val);
        }
    }
}

fn ops(t: DataType) -> Vec<(RedOp, u32)> {
    vec![
        (RedOp::Sum, 2),
        (RedOp::Prod, 2),
        (RedOp::Max, 2),
        (RedOp::Min, 2),
        (RedOp::Avg, 3),
        (RedOp::PreMulSum(Scalar::from_f64(t, -1.5)), 2),
    ]
}

/// A small device: 2 resident blocks of 512 threads, so large buffers go
/// through the grid-stride and unrolled loops.
const SMALL: DeviceShape = DeviceShape {
    sm_count: 1,
    max_threads_per_sm: 1024,
};

/// Byte offsets of (dst, a, b) inside their buffers: all 16-byte aligned; a
/// common offset of one element (head path); mutually misaligned (scalar
/// path); not element-aligned at all (byte loads).
fn offsets(t: DataType) -> [(usize, usize, usize); 4] {
    let e = t.size();
    [(0, 0, 0), (e, e + 16, e + 32), (0, e.min(8), 0), (1, 3, 5)]
}

/// A device to emulate: its shape, and the thread orders to run each launch
/// in (`Emu::run`).
struct Device<'a> {
    shape: &'a DeviceShape,
    orders: &'a [i32],
}

fn check_case(
    emu: &Emu,
    device: &Device,
    t: DataType,
    op: &DevRedOp,
    count: usize,
    offs: (usize, usize, usize),
    seed: u64,
) {
    let (shape, orders) = (device.shape, device.orders);
    let n = count * t.size();
    let mut rnd = xorshift(seed);
    let mut a_buf = vec![0u8; n + 64];
    let mut b_buf = vec![0u8; n + 64];
    fill(&mut rnd, t, &mut a_buf[offs.1..offs.1 + n]);
    fill(&mut rnd, t, &mut b_buf[offs.2..offs.2 + n]);
    let a = a_buf[offs.1..offs.1 + n].to_vec();
    let b = b_buf[offs.2..offs.2 + n].to_vec();
    let what = |p: &str, pre: Pre, order: i32| {
        format!(
            "{p} {t} {} {pre:?} count {count} offsets {offs:?} order {order} {shape:?}",
            op.op
        )
    };
    for pre in [Pre::None, Pre::A, Pre::B, Pre::Both] {
        let mut want = vec![0u8; n];
        reference::reduce(&mut want, &a, &b, op, pre);
        for &rev in orders {
            // Out of place, with guard bytes around dst.
            let mut d_buf = vec![0xA5u8; n + 64];
            let d = d_buf.as_mut_ptr() as u64 + offs.0 as u64;
            let l = plan::reduce(
                shape,
                d,
                a_buf.as_ptr() as u64 + offs.1 as u64,
                b_buf.as_ptr() as u64 + offs.2 as u64,
                n,
                op,
                pre,
            )
            .unwrap();
            if let Some(l) = l {
                emu.run(&l, rev);
            }
            assert!(
                same(t, &d_buf[offs.0..offs.0 + n], &want),
                "{}",
                what("reduce", pre, rev)
            );
            assert!(
                d_buf[..offs.0].iter().chain(&d_buf[offs.0 + n..]).all(|&x| x == 0xA5),
                "{}: wrote outside dst",
                what("reduce", pre, rev)
            );
            // In place: dst = a.
            let mut acc = a_buf.clone();
            let p = acc.as_mut_ptr() as u64 + offs.1 as u64;
            if let Some(l) = plan::reduce(shape, p, p, b_buf.as_ptr() as u64 + offs.2 as u64, n, op, pre).unwrap() {
                emu.run(&l, rev);
            }
            assert!(
                same(t, &acc[offs.1..offs.1 + n], &want),
                "{}",
                what("reduce in place", pre, rev)
            );
        }
    }
    // pre_op (out of place and in place), post_op.
    let mut pw = vec![0u8; n];
    reference::pre_op(&mut pw, &a, op);
    let mut p_buf = vec![0u8; n + 64];
    let pd = p_buf.as_mut_ptr() as u64 + offs.0 as u64;
    if let Some(l) = plan::pre_op(shape, pd, a_buf.as_ptr() as u64 + offs.1 as u64, n, op).unwrap() {
        emu.run(&l, orders[0]);
    }
    assert!(
        same(t, &p_buf[offs.0..offs.0 + n], &pw),
        "{}",
        what("pre_op", Pre::None, orders[0])
    );
    let mut pi = a_buf.clone();
    let pp = pi.as_mut_ptr() as u64 + offs.1 as u64;
    if let Some(l) = plan::pre_op(shape, pp, pp, n, op).unwrap() {
        emu.run(&l, orders[orders.len() - 1]);
    }
    assert!(
        same(t, &pi[offs.1..offs.1 + n], &pw),
        "{}",
        what("pre_op in place", Pre::None, orders[orders.len() - 1])
    );
    let mut qw = a.clone();
    reference::post_op(&mut qw, op);
    let mut q = a_buf.clone();
    let qp = q.as_mut_ptr() as u64 + offs.1 as u64;
    if let Some(l) = plan::post_op(shape, qp, n, op).unwrap() {
        emu.run(&l, orders[0]);
    }
    assert!(
        same(t, &q[offs.1..offs.1 + n], &qw),
        "{}",
        what("post_op", Pre::None, orders[0])
    );
}

#[test]
fn emulated_kernels_match_the_reference() {
    let emu = match Emu::get() {
        Ok(e) => e,
        Err(why) => {
            eprintln!("SKIPPED emulated_kernels_match_the_reference: {why}");
            return;
        }
    };
    let small = Device {
        shape: &SMALL,
        orders: &[0, 1],
    };
    let mut cases = 0;
    for (ti, t) in DataType::ALL.into_iter().enumerate() {
        for (oi, (op, nranks)) in ops(t).into_iter().enumerate() {
            let dev = DevRedOp::new(t, op, nranks).unwrap();
            for (ai, offs) in offsets(t).into_iter().enumerate() {
                for count in [0usize, 1, 3, 7, 17, 33, 100] {
                    check_case(
                        emu,
                        &small,
                        t,
                        &dev,
                        count,
                        offs,
                        1 + (ti * 1000 + oi * 100 + ai * 10) as u64 + count as u64,
                    );
                    cases += 1;
                }
            }
            // Large enough for the 4-way unrolled grid-stride loop (more than
            // 4 x 1024 packs), its remainder, and a tail: aligned and with a
            // common one-element offset.
            let count = 4 * 1024 * (16 / t.size()) + 3 * (16 / t.size()) + 5;
            for offs in [offsets(t)[0], offsets(t)[1]] {
                check_case(emu, &small, t, &dev, count, offs, 77 + ti as u64);
                cases += 1;
            }
        }
    }
    eprintln!("{cases} emulated cases matched the reference");
}

#[test]
fn emulated_copy_moves_every_byte_once() {
    let emu = match Emu::get() {
        Ok(e) => e,
        Err(why) => {
            eprintln!("SKIPPED emulated_copy_moves_every_byte_once: {why}");
            return;
        }
    };
    let h100 = DeviceShape {
        sm_count: 132,
        max_threads_per_sm: 2048,
    };
    let mut rnd = xorshift(5);
    for (shape, len) in [(&SMALL, 1usize << 17), (&SMALL, 1000), (&h100, 3 << 20), (&h100, 1)] {
        for (od, os) in [(0usize, 0usize), (3, 3), (1, 6)] {
            let src: Vec<u8> = (0..len + 32).map(|_| rnd() as u8).collect();
            let mut dst = vec![0u8; len + 32];
            let l = plan::copy(
                shape,
                dst.as_mut_ptr() as u64 + od as u64,
                src.as_ptr() as u64 + os as u64,
                len,
            )
            .unwrap();
            assert!(l.grid >= 1 && l.grid <= shape.resident_blocks());
            emu.run(&l, i32::from(od == 3));
            assert_eq!(
                &dst[od..od + len],
                &src[os..os + len],
                "copy of {len} bytes, offsets {od}/{os}"
            );
            assert!(
                dst[..od].iter().chain(&dst[od + len..]).all(|&x| x == 0),
                "copy wrote outside dst"
            );
        }
    }
}

/// Real device shapes (132 SMs × 2048 threads as on H100/H200, 108 as on A100,
/// 58, 8) at n = 2^20 + 5 and its neighbours, the size and dtypes (1- and
/// 2-byte) at which an H200 gave wrong in-place results, every op that is not
/// idempotent (so a second application would show) and an idempotent one, in
/// and out of place, aligned and with a common one-element offset, blocks
/// run in a shuffled order (threads within each block reversed).
#[test]
fn emulated_real_shapes_shuffled_blocks_in_place() {
    let emu = match Emu::get() {
        Ok(e) => e,
        Err(why) => {
            eprintln!("SKIPPED emulated_real_shapes_shuffled_blocks_in_place: {why}");
            return;
        }
    };
    let mut cases = 0;
    for (si, sm_count) in [132u32, 108, 58, 8].into_iter().enumerate() {
        let shape = DeviceShape {
            sm_count,
            max_threads_per_sm: 2048,
        };
        for (ti, t) in [DataType::Int8, DataType::Uint8, DataType::Float16, DataType::Bfloat16]
            .into_iter()
            .enumerate()
        {
            let all = ops(t);
            // Avg (a pre- or post-op kernel), PreMulSum; Max on one shape each.
            let mut pick = vec![all[4], all[5]];
            if si == ti % 4 {
                pick.push(all[2]);
            }
            for (op, nranks) in pick {
                let dev = DevRedOp::new(t, op, nranks).unwrap();
                for (oi, offs) in [offsets(t)[0], (t.size(), t.size(), t.size())].into_iter().enumerate() {
                    // 2^20 + 5 everywhere, its neighbours on one shape each.
                    let counts: &[usize] = if si == oi {
                        &[(1 << 20) + 4, (1 << 20) + 5, (1 << 20) + 6]
                    } else {
                        &[(1 << 20) + 5]
                    };
                    for &count in counts {
                        let order = 2 + (si * 100 + ti * 10 + oi) as i32;
                        let device = Device {
                            shape: &shape,
                            orders: &[order],
                        };
                        check_case(emu, &device, t, &dev, count, offs, 900 + (si * 10 + ti) as u64);
                        cases += 1;
                    }
                }
            }
        }
    }
    eprintln!("{cases} emulated cases with real device shapes and shuffled blocks matched the reference");
}
