//! The worker side of the CollNet section: one check on one API version in this
//! process (`--collnet --worker ID`), and the peer rank of
//! `collnet.fault.peer_killed` (`--collnet --worker collnet.peer:RANK:NRANKS`), a
//! process of its own that joins the group over pipes and is killed mid-reduction.
//!
//! A watchdog fails the check when it does not finish within [`LIMIT`], naming the
//! phase that was running (every wait inside a check is bounded by
//! [`super::checks::WAIT`] already; this catches a plugin call that never returns).

use std::io::{BufRead, BufReader, Write};
use std::panic::AssertUnwindSafe;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use ferroccl::plugin::net::{NetHandle, PtrType};
use ferroccl_kernels::DataType;
use ferroccl_plugin_api::abi::{ncclDataType_t, ncclRedOp_t};

use super::SECTION;
use super::checks::{
    Area, CollNetCx, WAIT, finish_connect, input, listen_ranks, post_retry, spawn_ranks, start_connect,
};
use crate::outcome::{CheckOutcome, Res};
use crate::section::{die_with_parent, judge_body};
use crate::watch::emit_result;
use crate::{fail, loader};

/// Longest a whole check may run in its worker (the section's worker deadline is 120 s).
pub const LIMIT: Duration = Duration::from_secs(100);

static PHASE: Mutex<String> = Mutex::new(String::new());

/// Names what the check is doing now (for the watchdog's message).
pub fn phase(p: &str) {
    *PHASE.lock().unwrap_or_else(|e| e.into_inner()) = p.to_owned();
}

fn start_watch() {
    let start = Instant::now();
    let _ = std::thread::Builder::new()
        .name("collnet-watchdog".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(50));
                if start.elapsed() > LIMIT {
                    let p = PHASE.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    emit_result(&CheckOutcome::fail(
                        format!(
                            "the check finishes within {} s (every CollNet call returns)",
                            LIMIT.as_secs()
                        ),
                        format!("still in {p} after {} s (the worker was stopped)", LIMIT.as_secs()),
                    ));
                    // SAFETY: ending the worker while a thread is stuck in the plugin.
                    unsafe { libc::_exit(0) };
                }
            }
        });
}

/// Loads `plugin` for `version` through the host and takes its CollNet table.
pub fn setup(plugin: &str, version: u32) -> Result<CollNetCx, Box<CheckOutcome>> {
    phase("load");
    let opts = loader::options(version);
    let loaded = ferroccl::plugin::load_net_from(plugin, &opts).map_err(|e| {
        Box::new(CheckOutcome::fail(
            format!("the library loads through the host with a ncclNetPlugin ≤ v{version} beside the CollNet table"),
            e.to_string(),
        ))
    })?;
    let net = loaded.plugin;
    let Some(adapter) = net.collnet() else {
        return Err(Box::new(CheckOutcome::fail(
            format!("ncclCollNetPlugin_v{version} is found beside the net table"),
            "the host found no CollNet table",
        )));
    };
    let got = adapter.info().version;
    if got != version {
        return Err(Box::new(CheckOutcome::fail(
            format!("the host loads ncclCollNetPlugin_v{version}"),
            format!("it loaded ncclCollNetPlugin_v{got}"),
        )));
    }
    Ok(CollNetCx {
        adapter,
        net,
        version,
        plugin: plugin.to_owned(),
        notes: Vec::new(),
    })
}

/// Runs CollNet check `id` on version `version` of `plugin` (never panics).
pub fn run_check(id: &str, plugin: &str, version: u32) -> CheckOutcome {
    let check = match SECTION.find(id) {
        Ok(c) => c,
        Err(out) => return *out,
    };
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut cx = match setup(plugin, version) {
            Ok(cx) => cx,
            Err(o) => return *o,
        };
        let mut out = judge_body(check.body, &mut cx, CheckOutcome::pass);
        out.notes.append(&mut cx.notes);
        out
    }));
    r.unwrap_or_else(|_| CheckOutcome::fail("the check runs to completion", "the conformance suite itself panicked"))
}

/// Body of `--collnet --worker ID`.
pub fn worker_main(id: &str, plugin: &str, version: u32) -> i32 {
    die_with_parent();
    if let Some(spec) = id.strip_prefix("collnet.peer:") {
        return peer_main(spec, plugin, version);
    }
    start_watch();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}

/// The pair and size a peer-death round reduces (elements).
const KILL_COUNT: usize = 1 << 20;

/// The peer rank: `RANK:NRANKS:OP:TYPE`. Prints `handle HEX`, reads `handles
/// HEX,HEX,…`, connects, posts one iallreduce, prints `posted`, then waits to be killed.
fn peer_main(spec: &str, plugin: &str, version: u32) -> i32 {
    let v: Vec<usize> = spec.split(':').filter_map(|s| s.parse().ok()).collect();
    let [rank, n, op, ty] = v[..] else {
        println!("error bad peer spec {spec:?}");
        return 2;
    };
    let run = || -> Result<(), String> {
        let cx = setup(plugin, version).map_err(|o| o.message)?;
        let l = listen_ranks(&cx, n, &[rank]).map_err(|e| format!("{e:?}"))?;
        println!("handle {}", hex::encode(l.handles[rank]));
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map_err(|e| e.to_string())?;
        let hs: Vec<NetHandle> = line
            .trim()
            .strip_prefix("handles ")
            .ok_or("no handles line")?
            .split(',')
            .map(|h| {
                let b = hex::decode(h).map_err(|e| e.to_string())?;
                b.try_into().map_err(|_| "a handle of 128 bytes".to_owned())
            })
            .collect::<Result<_, String>>()?;
        let mut l = l;
        l.handles = hs;
        let p = start_connect(&cx, &l);
        let ranks = finish_connect(&cx, &l, p).map_err(|e| format!("{e:?}"))?;
        let rk = &ranks[0];
        let esize = DataType::from_nccl(ty as i32).map_err(|e| e.to_string())?.size();
        let len = KILL_COUNT * esize;
        let mut s = Area::new(len, 0, Some(&input(op as i32, ty as i32, rank, KILL_COUNT)));
        let mut r = Area::new(len, 0, None);
        let smr =
            rk.a.reg_mr(rk.coll, s.ptr(), len, PtrType::Host)
                .map_err(|e| e.to_string())?;
        let rmr =
            rk.a.reg_mr(rk.coll, r.ptr(), len, PtrType::Host)
                .map_err(|e| e.to_string())?;
        let (sp, rp) = (s.ptr(), r.ptr());
        let _req = post_retry("iallreduce", || {
            rk.a.iallreduce(
                rk.coll,
                sp,
                rp,
                KILL_COUNT,
                ncclDataType_t(ty as i32),
                ncclRedOp_t(op as i32),
                Some(smr),
                Some(rmr),
            )
        })?;
        println!("posted");
        let _ = std::io::stdout().flush();
        // Killed here by the check; never longer than a minute on its own.
        std::thread::sleep(Duration::from_secs(60));
        Ok(())
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("error {e}");
            1
        }
    }
}

/// Kills the peer when dropped (every path of the round).
struct Peer(Child);

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One round of `collnet.fault.peer_killed`: rank `victim` of an `n`-rank group is a
/// peer process, the others are threads here. Every rank posts one iallreduce; once
/// the peer has posted it is killed with SIGKILL; the survivors post a second one
/// (which the dead rank never joins). Each survivor's first request may complete or
/// fail, its second must fail within [`WAIT`]; closeColl must then return.
pub fn peer_killed_round(cx: &mut CollNetCx, (op, ty): (i32, i32), n: usize, victim: usize) -> Res {
    let exe = std::env::current_exe().map_err(|e| fail!("the suite finds its own binary", "{e}"))?;
    phase(&format!("starting the peer process (rank {victim} of {n})"));
    let child = Command::new(exe)
        .args([
            "--collnet".to_owned(),
            "--worker".to_owned(),
            format!("collnet.peer:{victim}:{n}:{op}:{ty}"),
            "--api".to_owned(),
            format!("v{}", cx.version),
            cx.plugin.clone(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| fail!("the peer process starts", "{e}"))?;
    let mut peer = Peer(child);
    let stdout = peer.0.stdout.take().expect("piped stdout");
    let (ltx, lrx) = channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if ltx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = |what: &str| -> Res<String> {
        match lrx.recv_timeout(WAIT) {
            Ok(l) if l.starts_with("error ") => Err(fail!(
                format!("the peer rank {what}"),
                "peer rank {victim}: {}",
                &l[6..]
            )),
            Ok(l) => Ok(l),
            Err(_) => Err(fail!(
                format!("the peer rank {what} within {} s", WAIT.as_secs()),
                "peer rank {victim} did not: it exited or hung"
            )),
        }
    };
    let line = next_line("listens")?;
    let peer_handle: NetHandle = line
        .strip_prefix("handle ")
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| fail!("a handle line from the peer", "{line:?}"))?;
    let local: Vec<usize> = (0..n).filter(|&r| r != victim).collect();
    let mut l = listen_ranks(cx, n, &local)?;
    l.handles[victim] = peer_handle;
    let all: Vec<String> = l.handles.iter().map(hex::encode).collect();
    {
        let stdin = peer.0.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "handles {}", all.join(","))
            .and_then(|()| stdin.flush())
            .map_err(|e| fail!("the handles reach the peer", "{e}"))?;
    }
    let p = start_connect(cx, &l);
    let ranks = finish_connect(cx, &l, p)?;
    phase("iallreduce while the peer dies");
    let survivors = spawn_ranks(&ranks, "the survivors' iallreduce", move |rk| {
        let esize = DataType::from_nccl(ty).map_err(|e| e.to_string())?.size();
        let len = KILL_COUNT * esize;
        let mut bufs = Vec::new();
        let mut reqs = Vec::new();
        for k in 0..2 {
            let mut s = Area::new(len, 0, Some(&input(op, ty, rk.rank, KILL_COUNT)));
            let mut r = Area::new(len, 0, None);
            let smr =
                rk.a.reg_mr(rk.coll, s.ptr(), len, PtrType::Host)
                    .map_err(|e| e.to_string())?;
            let rmr =
                rk.a.reg_mr(rk.coll, r.ptr(), len, PtrType::Host)
                    .map_err(|e| e.to_string())?;
            let (sp, rp) = (s.ptr(), r.ptr());
            match rk.a.iallreduce(
                rk.coll,
                sp,
                rp,
                KILL_COUNT,
                ncclDataType_t(ty),
                ncclRedOp_t(op),
                Some(smr),
                Some(rmr),
            ) {
                Ok(Some(req)) => reqs.push(Some(req)),
                // Busy or refused at the post: the error is the verdict for #2.
                Ok(None) | Err(_) if k == 1 => reqs.push(None),
                Ok(None) => return Err("iallreduce #1 returned a NULL request".into()),
                Err(e) => return Err(format!("iallreduce #1: {e}")),
            }
            bufs.push((s, r));
        }
        // Tested in posting order, as NCCL's proxy does; a failed #1 fails the comm.
        let end = Instant::now() + WAIT;
        let mut outcome = Vec::new();
        for req in reqs {
            let Some(req) = req else {
                outcome.push(Err("refused at the post".to_owned()));
                continue;
            };
            let res = loop {
                match rk.a.test(req) {
                    Ok(Some(n)) => break Ok(n),
                    Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_micros(200)),
                    Ok(None) => {
                        return Err(format!(
                            "iallreduce #{} neither completed nor failed within {} s of the peer's death (test kept returning done = 0)",
                            outcome.len() + 1,
                            WAIT.as_secs()
                        ));
                    }
                    Err(e) => break Err(e.to_string()),
                }
            };
            let failed = res.is_err();
            outcome.push(res);
            if failed {
                break;
            }
        }
        match outcome.last() {
            Some(Err(_)) => Ok(()),
            _ => Err("iallreduce #2, which the killed rank never posted, completed".to_owned()),
        }
    });
    let line = next_line("posts its iallreduce")?;
    if line != "posted" {
        return Err(fail!("the peer posts its iallreduce", "{line:?}"));
    }
    phase("killing the peer");
    drop(peer);
    survivors.join(WAIT + Duration::from_secs(10))?;
    // closeColl returns after the failure (its result is not judged: the comm is broken).
    phase("closeColl after the peer's death");
    let closing = spawn_ranks(&ranks, "closeColl after the peer's death", |rk| {
        let _ = rk.a.close_coll(rk.coll);
        Ok(())
    });
    closing.join(WAIT)?;
    for rk in &ranks {
        let _ = rk.a.finalize_ctx(rk.ctx);
    }
    Ok(())
}
