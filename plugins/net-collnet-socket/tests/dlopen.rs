//! The built `libnccl_net_collnet_socket.so` loaded with dlopen and driven through
//! its `ncclCollNetPlugin_v12` / `_v8` tables as NCCL drives them, ranks as threads
//! over TCP on loopback. One test per binary: it sets `NCCL_SOCKET_IFNAME=lo` before
//! the library reads it.

#[macro_use]
mod common;

use std::ffi::{CStr, c_int, c_void};
use std::ptr::null_mut;

use common::*;
use ferroccl_plugin_api::abi::{
    self, ncclCollNet_v12_t, ncclDataType_t, ncclNet_v12_t, ncclNetProperties_v12_t, ncclNetSGE_v8_t, ncclNetSGE_v9_t,
    ncclRedOp_t, ncclResult_t,
};
use half::{bf16, f16};

const DTYPES: [i32; 10] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
const OPS: [i32; 4] = [0, 1, 2, 3];

/// The small integer rank `r` contributes at element `i` (exact in every dtype,
/// and every reduction of ≤ 8 ranks stays exact in half and bfloat16).
fn input(dt: i32, op: i32, r: usize, i: usize) -> i64 {
    let unsigned = matches!(dt, 1 | 3 | 5);
    if op == 1 {
        if unsigned {
            1 + ((i + r) % 2) as i64
        } else {
            [1, 2, -1][(i + r) % 3]
        }
    } else {
        let v = ((i * 7 + r * 3) % 5) as i64;
        if unsigned { v } else { v - 2 }
    }
}

fn put(dt: i32, v: i128, out: &mut Vec<u8>) {
    match dt {
        0 => out.extend((v as i8).to_ne_bytes()),
        1 => out.extend((v as u8).to_ne_bytes()),
        2 => out.extend((v as i32).to_ne_bytes()),
        3 => out.extend((v as u32).to_ne_bytes()),
        4 => out.extend((v as i64).to_ne_bytes()),
        5 => out.extend((v as u64).to_ne_bytes()),
        6 => out.extend(f16::from_f64(v as f64).to_ne_bytes()),
        7 => out.extend((v as f32).to_ne_bytes()),
        8 => out.extend((v as f64).to_ne_bytes()),
        _ => out.extend(bf16::from_f64(v as f64).to_ne_bytes()),
    }
}

fn encode(dt: i32, vals: impl Iterator<Item = i128>) -> Vec<u8> {
    let mut out = Vec::new();
    for v in vals {
        put(dt, v, &mut out);
    }
    out
}

/// The reduction of the ranks' inputs, computed exactly in i128 and then encoded
/// (wrapping for integers, like NCCL's kernels).
fn expected(dt: i32, op: i32, n: usize, count: usize) -> Vec<u8> {
    encode(
        dt,
        (0..count).map(|i| {
            let vs = (0..n).map(|r| i128::from(input(dt, op, r, i)));
            match op {
                0 => vs.sum(),
                1 => vs.product::<i128>(),
                2 => vs.max().unwrap(),
                _ => vs.min().unwrap(),
            }
        }),
    )
}

/// A buffer of `len` bytes starting `off` bytes into an allocation (misaligned when odd).
struct Area {
    mem: Vec<u8>,
    off: usize,
    len: usize,
}
impl Area {
    fn new(off: usize, data: &[u8]) -> Area {
        let mut mem = vec![0xeeu8; off + data.len() + 8];
        mem[off..off + data.len()].copy_from_slice(data);
        Area {
            mem,
            off,
            len: data.len(),
        }
    }
    fn ptr(&mut self) -> *mut c_void {
        self.mem[self.off..].as_mut_ptr().cast()
    }
    fn bytes(&self) -> &[u8] {
        &self.mem[self.off..self.off + self.len]
    }
}

fn allreduce_matrix(t: T12, n: usize) {
    let ranks = group(t, n);
    let sizes = [0usize, 1, 3, 1000, 70_001];
    let rk = ranks.clone();
    let res = on_ranks(n, move |r| {
        let coll = rk[r].coll;
        let mut checked = 0;
        for (k, &count) in sizes.iter().enumerate() {
            for dt in DTYPES {
                for op in OPS {
                    let data = encode(dt, (0..count).map(|i| i128::from(input(dt, op, r, i))));
                    // Odd offsets for odd sizes (misaligned), in place for count 3.
                    let mut send = Area::new(k % 2, &data);
                    let mut recv = Area::new((k + 1) % 2 * 3, &vec![0u8; data.len()]);
                    let inplace = count == 3;
                    let (sp, rp) = if inplace {
                        (send.ptr(), send.ptr())
                    } else {
                        (send.ptr(), recv.ptr())
                    };
                    let mut req = null_mut();
                    ok(
                        call!(
                            t,
                            iallreduce(
                                coll.get(),
                                sp,
                                rp,
                                count,
                                ncclDataType_t(dt),
                                ncclRedOp_t(op),
                                null_mut(),
                                null_mut(),
                                &mut req
                            )
                        ),
                        "iallreduce",
                    );
                    let size = wait(t.test.unwrap(), req).expect("iallreduce failed");
                    assert_eq!(size as usize, data.len());
                    let got = if inplace { send.bytes() } else { recv.bytes() };
                    assert!(
                        got == expected(dt, op, n, count).as_slice(),
                        "rank {r}/{n}: dtype {dt} op {op} count {count}: wrong result"
                    );
                    checked += 1;
                }
            }
        }
        checked
    });
    assert!(res.iter().all(|&c| c == sizes.len() * 40));
    close(t, ranks);
}

fn sge_collectives(lib: &Lib) {
    let t = lib.v12;
    let t8 = lib.v8;
    let n = 4;
    let ranks = group(t, n);
    let rk = ranks.clone();
    // AllGather of 4 × 1000 bytes, window [700, 2800), received into 3 misaligned parts.
    let (bpr, wo, wb) = (1000usize, 700usize, 2100usize);
    let global: Vec<u8> = (0..n * bpr).map(|i| (i * 13 + i / bpr) as u8).collect();
    let g2 = global.clone();
    on_ranks(n, move |r| {
        let coll = rk[r].coll;
        for v8 in [false, true] {
            let mine = &g2[r * bpr..(r + 1) * bpr];
            let local = wo.max(r * bpr).saturating_sub(r * bpr).min(bpr);
            let mut send = Area::new(1, mine);
            let sp = send.ptr().wrapping_byte_add(local);
            let sizes = [500usize, 1, wb - 501];
            let mut parts: Vec<Area> = sizes.iter().map(|&s| Area::new(3, &vec![0u8; s])).collect();
            let mut req = null_mut();
            if v8 {
                let mut sg: Vec<ncclNetSGE_v8_t> = parts
                    .iter_mut()
                    .map(|a| ncclNetSGE_v8_t {
                        mhandle: null_mut(),
                        address: a.ptr(),
                        size: a.len as u32,
                    })
                    .collect();
                ok(
                    call!(
                        t8,
                        iallgather(coll.get(), sp, 3, sg.as_mut_ptr(), bpr, wo, wb, null_mut(), &mut req)
                    ),
                    "iallgather v8",
                );
            } else {
                let mut sg: Vec<ncclNetSGE_v9_t> = parts
                    .iter_mut()
                    .map(|a| ncclNetSGE_v9_t {
                        mhandle: null_mut(),
                        address: a.ptr(),
                        size: a.len,
                    })
                    .collect();
                ok(
                    call!(
                        t,
                        iallgather(coll.get(), sp, 3, sg.as_mut_ptr(), bpr, wo, wb, null_mut(), &mut req)
                    ),
                    "iallgather",
                );
            }
            assert_eq!(wait(t.test.unwrap(), req).unwrap() as usize, wb);
            let got: Vec<u8> = parts.iter().flat_map(|a| a.bytes().to_vec()).collect();
            assert!(got == g2[wo..wo + wb], "rank {r} (v8 {v8}): allgather window differs");
        }
    });

    // ReduceScatter of float32 sums: 4 ranks × 40 floats, window [80, 560) bytes,
    // each rank's window in 2 parts; rank r gets the sum of its part of the window.
    let rk = ranks.clone();
    on_ranks(n, move |r| {
        let coll = rk[r].coll;
        let (bpr, wo, wb) = (160usize, 80usize, 480usize);
        let full: Vec<f32> = (0..n * 40).map(|i| ((i * 3 + r) % 7) as f32 - 3.0).collect();
        let fb: Vec<u8> = full.iter().flat_map(|v| v.to_ne_bytes()).collect();
        for v8 in [false, true] {
            let win = &fb[wo..wo + wb];
            let mut p0 = Area::new(1, &win[..100]);
            let mut p1 = Area::new(2, &win[100..]);
            let (beg, end) = (r * bpr, (r + 1) * bpr);
            let (lo, hi) = (beg.max(wo), end.min(wo + wb));
            let len = hi.saturating_sub(lo);
            let mut recv = Area::new(1, &vec![0u8; bpr]);
            let rp = recv.ptr().wrapping_byte_add(lo.saturating_sub(beg).min(bpr));
            let (f32t, sum) = (ncclDataType_t::ncclFloat32, ncclRedOp_t::ncclSum);
            let mut req = null_mut();
            if v8 {
                let mut sg = [
                    ncclNetSGE_v8_t {
                        mhandle: null_mut(),
                        address: p0.ptr(),
                        size: 100,
                    },
                    ncclNetSGE_v8_t {
                        mhandle: null_mut(),
                        address: p1.ptr(),
                        size: (wb - 100) as u32,
                    },
                ];
                ok(
                    call!(
                        t8,
                        ireducescatter(
                            coll.get(),
                            2,
                            sg.as_mut_ptr(),
                            rp,
                            bpr,
                            wo,
                            wb,
                            f32t,
                            sum,
                            null_mut(),
                            &mut req
                        )
                    ),
                    "ireducescatter v8",
                );
            } else {
                let mut sg = [
                    ncclNetSGE_v9_t {
                        mhandle: null_mut(),
                        address: p0.ptr(),
                        size: 100,
                    },
                    ncclNetSGE_v9_t {
                        mhandle: null_mut(),
                        address: p1.ptr(),
                        size: wb - 100,
                    },
                ];
                ok(
                    call!(
                        t,
                        ireducescatter(
                            coll.get(),
                            2,
                            sg.as_mut_ptr(),
                            rp,
                            bpr,
                            wo,
                            wb,
                            f32t,
                            sum,
                            null_mut(),
                            &mut req
                        )
                    ),
                    "ireducescatter",
                );
            }
            assert_eq!(wait(t.test.unwrap(), req).unwrap() as usize, len);
            let off = lo.saturating_sub(beg).min(bpr);
            let got = &recv.bytes()[off..off + len];
            let want: Vec<u8> = (lo / 4..lo / 4 + len / 4)
                .flat_map(|i| {
                    let s: f32 = (0..n).map(|q| ((i * 3 + q) % 7) as f32 - 3.0).sum();
                    s.to_ne_bytes()
                })
                .collect();
            assert_eq!(got, &want[..], "rank {r} (v8 {v8}): reducescatter part differs");
            // Bytes outside this rank's part are untouched.
            assert!(recv.bytes()[..off].iter().all(|&b| b == 0));
        }
    });
    close(t, ranks);
}

fn many_in_flight(t: T12) {
    let n = 4;
    let ranks = group(t, n);
    let rk = ranks.clone();
    on_ranks(n, move |r| {
        let coll = rk[r].coll;
        let k = 64;
        let mut bufs: Vec<Vec<i32>> = (0..k)
            .map(|j| (0..1000).map(|i| (i + j * 10 + r) as i32).collect())
            .collect();
        let mut reqs = Vec::new();
        for b in bufs.iter_mut() {
            let mut req = null_mut();
            let p: *mut c_void = b.as_mut_ptr().cast();
            let (dt, op) = (ncclDataType_t::ncclInt32, ncclRedOp_t::ncclSum);
            ok(
                call!(
                    t,
                    iallreduce(coll.get(), p, p, 1000usize, dt, op, null_mut(), null_mut(), &mut req)
                ),
                "post",
            );
            assert!(!req.is_null());
            reqs.push(P(req));
        }
        for q in reqs.iter().rev() {
            assert_eq!(wait(t.test.unwrap(), q.0).unwrap(), 4000);
        }
        for (j, b) in bufs.iter().enumerate() {
            for (i, &v) in b.iter().enumerate() {
                let want: i32 = (0..n).map(|q| (i + j * 10 + q) as i32).sum();
                assert_eq!(v, want, "rank {r}: collective {j} element {i}");
            }
        }
    });
    close(t, ranks);
}

fn refusals_and_properties(t: T12) {
    // reduceSupport: exactly the 10 dtypes × sum/prod/max/min.
    for dt in -1..=12 {
        for op in -1..=6 {
            let mut s = -1;
            ok(
                call!(t, reduceSupport(ncclDataType_t(dt), ncclRedOp_t(op), &mut s)),
                "reduceSupport",
            );
            assert_eq!(
                s == 1,
                (0..=9).contains(&dt) && (0..=3).contains(&op),
                "dtype {dt} op {op}"
            );
        }
    }
    // SAFETY: all-zero is a valid bit pattern for this plain C struct.
    let mut props: ncclNetProperties_v12_t = unsafe { std::mem::zeroed() };
    ok(call!(t, getProperties(0, &mut props)), "getProperties");
    // SAFETY: the plugin keeps `name` alive.
    assert_eq!(unsafe { CStr::from_ptr(props.name) }, c"lo");
    assert_eq!(props.ptrSupport, abi::NCCL_PTR_HOST);
    assert_eq!(props.maxCollBytes, 1 << 29);

    // A collComm of one rank: the aggregator alone.
    let ranks = group(t, 1);
    let c = ranks[0].coll.get();
    let mut v = [1.5f64, -2.0, 3.25];
    let p: *mut c_void = v.as_mut_ptr().cast();
    let mut w = [0f64; 3];
    let mut req = null_mut();
    let (f64t, max) = (ncclDataType_t::ncclFloat64, ncclRedOp_t::ncclMax);
    ok(
        call!(
            t,
            iallreduce(
                c,
                p,
                w.as_mut_ptr().cast(),
                3usize,
                f64t,
                max,
                null_mut(),
                null_mut(),
                &mut req
            )
        ),
        "1 rank",
    );
    assert_eq!(wait(t.test.unwrap(), req).unwrap(), 24);
    assert_eq!(w, v);
    // Unclaimed pairs are refused at the call, cleanly.
    let mut req = null_mut();
    let r = call!(
        t,
        iallreduce(
            c,
            p,
            p,
            3usize,
            f64t,
            ncclRedOp_t::ncclAvg,
            null_mut(),
            null_mut(),
            &mut req
        )
    );
    assert_eq!(r, ncclResult_t::ncclInvalidArgument);
    assert!(req.is_null());
    let r = call!(
        t,
        iallreduce(
            c,
            p,
            p,
            3usize,
            ncclDataType_t::ncclFloat8e4m3,
            ncclRedOp_t::ncclSum,
            null_mut(),
            null_mut(),
            &mut req
        )
    );
    assert_eq!(r, ncclResult_t::ncclInvalidArgument);
    // Registration: host memory yes, CUDA and DMA-BUF no.
    let mut mh = null_mut();
    ok(call!(t, regMr(c, p, 24, abi::NCCL_PTR_HOST, &mut mh)), "regMr host");
    let mut m2 = null_mut();
    assert_eq!(
        call!(t, regMr(c, p, 24, abi::NCCL_PTR_CUDA, &mut m2)),
        ncclResult_t::ncclInvalidArgument
    );
    assert_eq!(
        call!(t, regMrDmaBuf(c, p, 24, abi::NCCL_PTR_CUDA, 0, 5, &mut m2)),
        ncclResult_t::ncclInvalidArgument
    );
    assert!(m2.is_null());
    // iflush of host memory completes at once (NULL request).
    let mut fr = std::ptr::dangling_mut::<c_void>();
    ok(call!(t, iflush(c, p, 24, mh, &mut fr)), "iflush");
    assert!(fr.is_null());
    ok(call!(t, deregMr(c, mh)), "deregMr");
    close(t, ranks);
}

fn net_tables_are_the_socket_plugins(lib: &libloading::Library) {
    // SAFETY: `ncclNetPlugin_v12` is an `ncclNet_v12_t` static of the library.
    let net = unsafe { &**lib.get::<*const ncclNet_v12_t>(b"ncclNetPlugin_v12").unwrap() };
    // SAFETY: a static C string.
    assert_eq!(unsafe { CStr::from_ptr(net.name) }, c"FerrocclSocket");
    // SAFETY: as above.
    let cn = unsafe { &**lib.get::<*const ncclCollNet_v12_t>(b"ncclCollNetPlugin_v12").unwrap() };
    // SAFETY: a static C string.
    assert_eq!(unsafe { CStr::from_ptr(cn.name) }, c"FerrocclCollNetSocket");
    for v in 6..=12 {
        // SAFETY: only checking the symbols exist.
        unsafe {
            assert!(
                lib.get::<*const c_void>(format!("ncclNetPlugin_v{v}").as_bytes())
                    .is_ok()
            );
            assert!(
                lib.get::<*const c_void>(format!("ncclCollNetPlugin_v{v}").as_bytes())
                    .is_ok()
            );
        }
    }
}

#[test]
fn collnet_through_dlopen() {
    // SAFETY: set before any thread of this binary reads the environment (one test per binary).
    unsafe { std::env::set_var("NCCL_SOCKET_IFNAME", "lo") };
    let lib = load();
    // SAFETY: as in `load`.
    let raw = unsafe { libloading::Library::new(so_path()) }.unwrap();
    net_tables_are_the_socket_plugins(&raw);
    let t = lib.v12;
    let mut ctx = null_mut();
    ok(call!(t, init(&mut ctx, 1, None)), "init");
    let mut nd: c_int = 0;
    ok(call!(t, devices(&mut nd)), "devices");
    assert_eq!(nd, 1);
    ok(call!(t, finalize(ctx)), "finalize");

    refusals_and_properties(t);
    for n in [2, 3, 8] {
        allreduce_matrix(t, n);
    }
    sge_collectives(&lib);
    many_in_flight(t);
}
