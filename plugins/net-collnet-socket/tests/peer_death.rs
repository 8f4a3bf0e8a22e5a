//! A rank PROCESS killed in the middle of a stream of 4 MiB iallreduces: every
//! surviving rank's collective fails within a bound (nothing hangs) and the error
//! names the dead peer. Run twice: the victim is a non-aggregator rank (1), then
//! the aggregator (rank 0). The victim is this test binary re-executed with
//! `COLLNET_TEST_ROLE` set, running only `child_role`; the survivors are threads of
//! the parent. One test per binary (it sets the environment the library reads).

#[macro_use]
mod common;

use std::ffi::{CStr, c_char, c_int, c_ulong, c_void};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::ptr::null_mut;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use ferroccl_plugin_api::abi::{self, ncclDataType_t, ncclRedOp_t};

const ROLE: &str = "COLLNET_TEST_ROLE";
const NRANKS: usize = 3;
const COUNT: usize = 1 << 20; // floats: 4 MiB
/// How quickly every survivor must fail after the kill.
const DETECT: Duration = Duration::from_secs(60);

static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Receives what `ferroccl_plugin_api::log::log` passes: fixed args then `"%s", text`.
extern "C" fn capture(
    _l: c_int,
    _f: c_ulong,
    _file: *const c_char,
    _line: c_int,
    _fmt: *const c_char,
    text: *const c_char,
) {
    // SAFETY: the SDK logger passes a valid NUL-terminated string as the 6th argument.
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

fn set_env() {
    // SAFETY: set before any other thread of this binary reads the environment.
    unsafe {
        std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
        std::env::set_var("NCCL_COLLNET_SOCKET_TIMEOUT_MS", "60000");
    }
}

/// Listens on device 0 with a fresh context; returns (ctx, listenComm, handle).
fn listen(t: T12, log: bool) -> (P, P, [u8; 128]) {
    let mut ctx = null_mut();
    ok(call!(t, init(&mut ctx, 9, if log { logger() } else { None })), "init");
    let mut h = [0u8; 128];
    let mut l = null_mut();
    ok(call!(t, listen(ctx, 0, h.as_mut_ptr().cast(), &mut l)), "listen");
    (P(ctx), P(l), h)
}

fn connect(t: T12, handles: &[[u8; 128]], rank: usize, l: P) -> P {
    let mut hs = handles.to_vec();
    let mut ptrs: Vec<*mut c_void> = hs.iter_mut().map(|h| h.as_mut_ptr().cast()).collect();
    let mut coll = null_mut();
    ok(
        call!(
            t,
            connect(ptrs.as_mut_ptr(), NRANKS as c_int, rank as c_int, l.get(), &mut coll)
        ),
        "connect",
    );
    ok(call!(t, closeListen(l.get())), "closeListen");
    P(coll)
}

/// Runs iallreduces until one fails or `give_up`; `Ok(n)` = n done without error (a
/// hang would trip `wait`'s bound instead), `Err` = (collectives done, result code).
fn stream(t: T12, coll: P, mut on_done: impl FnMut(usize), give_up: Instant) -> Result<usize, (usize, i32)> {
    let mut buf = vec![1.0f32; COUNT];
    let mut k = 0;
    while Instant::now() < give_up {
        let p: *mut c_void = buf.as_mut_ptr().cast();
        let mut req = null_mut();
        let (dt, op) = (ncclDataType_t::ncclFloat32, ncclRedOp_t::ncclMax);
        let r = call!(
            t,
            iallreduce(coll.get(), p, p, COUNT, dt, op, null_mut(), null_mut(), &mut req)
        );
        if !r.is_success() {
            return Err((k, r.raw()));
        }
        if let Err(e) = wait(t.test.unwrap(), req) {
            return Err((k, e.raw()));
        }
        k += 1;
        on_done(k);
    }
    Ok(k)
}

/// The victim process; does nothing in a normal test run.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else { return };
    set_env();
    let rank: usize = role.parse().unwrap();
    let lib = load();
    let (_ctx, l, h) = listen(lib.v12, false);
    println!("HANDLE {}", hex::encode(h));
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let handles: Vec<[u8; 128]> = line
        .split_whitespace()
        .map(|s| {
            let mut h = [0u8; 128];
            hex::decode_to_slice(s, &mut h).unwrap();
            h
        })
        .collect();
    let coll = connect(lib.v12, &handles, rank, l);
    let give_up = Instant::now() + Duration::from_secs(120);
    let _ = stream(
        lib.v12,
        coll,
        |k| {
            if k == 2 {
                println!("RUNNING");
                std::io::stdout().flush().unwrap();
            }
        },
        give_up,
    );
}

fn run(lib: &Lib, victim: usize) {
    let t = lib.v12;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ROLE, victim.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the victim rank");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut expect = |prefix: &str| -> String {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "victim exited before {prefix}");
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_string();
            }
        }
    };
    let mut handles = vec![[0u8; 128]; NRANKS];
    hex::decode_to_slice(expect("HANDLE "), &mut handles[victim]).unwrap();
    let mine: Vec<usize> = (0..NRANKS).filter(|&r| r != victim).collect();
    let mut local = Vec::new();
    for &r in &mine {
        let (ctx, l, h) = listen(t, true);
        handles[r] = h;
        local.push((r, ctx, l));
    }
    let line: Vec<String> = handles.iter().map(hex::encode).collect();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", line.join(" ")).unwrap();
    stdin.flush().unwrap();

    let give_up = Instant::now() + Duration::from_secs(120);
    let survivors: Vec<_> = local
        .into_iter()
        .map(|(r, ctx, l)| {
            let handles = handles.clone();
            std::thread::spawn(move || {
                let coll = connect(t, &handles, r, l);
                let res = stream(t, coll, |_| {}, give_up);
                (r, ctx, coll, res, Instant::now())
            })
        })
        .collect();
    expect("RUNNING");
    let killed_at = Instant::now();
    child.kill().expect("kill the victim");
    let _ = child.wait();
    for s in survivors {
        let (r, ctx, coll, res, at) = s.join().unwrap();
        let (k, code) = res.expect_err("a survivor finished its stream without noticing the dead rank");
        assert!(
            code == abi::ncclResult_t::ncclRemoteError.raw() || code == abi::ncclResult_t::ncclSystemError.raw(),
            "rank {r}: code {code} after {k} collectives"
        );
        let waited = at.saturating_duration_since(killed_at);
        eprintln!("victim {victim}: rank {r} failed after {k} collectives, {waited:?} after the kill, code {code}");
        assert!(
            waited < DETECT,
            "rank {r} noticed the dead rank {victim} only after {waited:?}"
        );
        ok(call!(t, closeColl(coll.get())), "closeColl after the failure");
        ok(call!(t, finalize(ctx.get())), "finalize");
    }
    let log = LOG.lock().unwrap().join("\n");
    let named = if victim == 0 {
        "the aggregator, rank 0".to_string()
    } else {
        format!("rank {victim} (")
    };
    assert!(
        log.contains(&named),
        "no error names the dead rank {victim} ({named}):\n{log}"
    );
    eprintln!("victim {victim}, survivors' log:\n{log}");
    LOG.lock().unwrap().clear();
}

#[test]
fn peer_killed_mid_reduction() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    set_env();
    let lib = load();
    run(&lib, 1);
    run(&lib, 0);
}
