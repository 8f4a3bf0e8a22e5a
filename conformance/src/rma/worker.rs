//! The worker side of the RMA section: one check on one API version in this process
//! (`--rma --worker ID`), and the peer rank of `rma.fault.peer_killed`
//! (`--rma --worker rma.peer:RANK:NRANKS`), a process of its own that joins the group
//! over pipes and is killed while the other ranks put to it.
//!
//! A watchdog fails the check when it does not finish within [`LIMIT`], naming the
//! phase that was running (every wait inside a check is bounded by
//! [`super::checks::WAIT`] already; this catches a plugin call that never returns).

use std::io::{BufRead, BufReader, Write};
use std::panic::AssertUnwindSafe;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferroccl::plugin::net::NetHandle;
use ferroccl::plugin::rma::RmaAdapter;

use super::SECTION;
use super::checks::{Barrier, Meet, Rank, RmaCx, WAIT, collect, connect_rest, run_group_with, xfer};
use crate::fail;
use crate::outcome::{CheckOutcome, Res};
use crate::section::{die_with_parent, judge_body};
use crate::watch::emit_result;

/// Longest a whole check may run in its worker (the section's worker deadline is 120 s).
pub const LIMIT: Duration = Duration::from_secs(100);

static PHASE: Mutex<String> = Mutex::new(String::new());

/// Names what the check is doing now (for the watchdog's message).
pub fn phase(p: &str) {
    *PHASE.lock().unwrap_or_else(|e| e.into_inner()) = p.to_owned();
}

fn start_watch() {
    let start = Instant::now();
    let _ = std::thread::Builder::new().name("rma-watchdog".into()).spawn(move || {
        loop {
            std::thread::sleep(Duration::from_millis(50));
            if start.elapsed() > LIMIT {
                let p = PHASE.lock().unwrap_or_else(|e| e.into_inner()).clone();
                emit_result(&CheckOutcome::fail(
                    format!(
                        "the check finishes within {} s (every RMA call returns)",
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

/// Opens `plugin` and wraps its `ncclRmaPlugin_v<version>` in the host's adapter.
pub fn setup(plugin: &str, version: u32) -> Result<RmaCx, Box<CheckOutcome>> {
    phase("load");
    let lib = SECTION
        .open(plugin)
        .map_err(|e| Box::new(CheckOutcome::fail("the RMA library opens", e)))?;
    let lib = Arc::new(lib);
    // RMA_PLUGIN_SYMBOLS: index 0 is v14, 1 is v13.
    let adapter = RmaAdapter::probe_from(lib.clone(), if version >= 14 { 0 } else { 1 }).ok_or_else(|| {
        Box::new(CheckOutcome::fail(
            format!("the library exports ncclRmaPlugin_v{version}"),
            "the host found no RMA table",
        ))
    })?;
    let got = adapter.info().version;
    if got != version {
        return Err(Box::new(CheckOutcome::fail(
            format!("the host loads ncclRmaPlugin_v{version}"),
            format!("it loaded {} (v{got})", adapter.info().symbol),
        )));
    }
    Ok(RmaCx {
        adapter: Arc::new(adapter),
        lib,
        version,
        plugin: plugin.to_owned(),
        notes: Vec::new(),
    })
}

/// Runs RMA check `id` on version `version` of `plugin` (never panics).
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

/// Body of `--rma --worker ID`.
pub fn worker_main(id: &str, plugin: &str, version: u32) -> i32 {
    die_with_parent();
    if let Some(spec) = id.strip_prefix("rma.peer:") {
        return peer_main(spec, plugin, version);
    }
    start_watch();
    let out = run_check(id, plugin, version);
    emit_result(&out);
    0
}

/// Bytes of the window every rank of a peer-death round registers, and of each put.
const KILL_BYTES: usize = 1 << 20;
/// The communicator id of a peer-death round.
const KILL_COMM: u64 = 0x524d_dead;

/// The peer rank: `RANK:NRANKS`. Prints `handle HEX`, reads `handles HEX,HEX,…`,
/// connects, registers its window, posts puts to rank 0, prints `posted`, then waits
/// to be killed.
fn peer_main(spec: &str, plugin: &str, version: u32) -> i32 {
    let v: Vec<usize> = spec.split(':').filter_map(|s| s.parse().ok()).collect();
    let [rank, n] = v[..] else {
        println!("error bad peer spec {spec:?}");
        return 2;
    };
    let run = || -> Result<(), String> {
        let cx = setup(plugin, version).map_err(|o| o.message)?;
        let a = &cx.adapter;
        let ctx = a.init_ctx(KILL_COMM).map_err(|e| format!("init: {e}"))?;
        let mut h: NetHandle = [0; 128];
        let listen = a.listen(ctx, 0, &mut h).map_err(|e| format!("listen: {e}"))?;
        println!("handle {}", hex::encode(h));
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map_err(|e| e.to_string())?;
        let mut hs: Vec<NetHandle> = line
            .trim()
            .strip_prefix("handles ")
            .ok_or("no handles line")?
            .split(',')
            .map(|h| {
                let b = hex::decode(h).map_err(|e| e.to_string())?;
                b.try_into().map_err(|_| "a handle of 128 bytes".to_owned())
            })
            .collect::<Result<_, String>>()?;
        let r = connect_rest(a, n, rank, ctx, listen, &mut hs)?;
        let mut win = vec![7u8; KILL_BYTES];
        let mr = r.reg(&mut win, 0)?;
        // Mid-operation: puts to rank 0 in flight when the kill comes.
        for _ in 0..4 {
            let _ = r.a.iput(r.rctx, &xfer(0, mr, KILL_BYTES, 0, mr, 0));
        }
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

/// One round of `rma.fault.peer_killed`: rank `victim` of an `n`-rank group is a peer
/// process, the others are threads here. Every rank registers a 1 MiB window; the
/// survivors put to the victim in a loop (each put waited for, bounded) while the
/// peer, once it has posted its own puts, is killed with SIGKILL. Within [`WAIT`] of
/// the kill, a survivor's put to it must fail (at the post or at `test`), never hang;
/// `closeColl` must then return.
pub fn peer_killed_round(cx: &mut RmaCx, n: usize, victim: usize) -> Res {
    let exe = std::env::current_exe().map_err(|e| fail!("the suite finds its own binary", "{e}"))?;
    phase(&format!("starting the peer process (rank {victim} of {n})"));
    let child = Command::new(exe)
        .args([
            "--rma".to_owned(),
            "--worker".to_owned(),
            format!("rma.peer:{victim}:{n}"),
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
    let mut hs = vec![[0u8; 128]; n];
    hs[victim] = peer_handle;
    let local: Vec<usize> = (0..n).filter(|&r| r != victim).collect();
    let meet = Arc::new(Meet {
        handles: Mutex::new(hs),
        // The local ranks and this thread, which hands the handles to the peer.
        bar: Barrier::new(local.len() + 1),
    });
    let killed: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let (k2, s2, seen2) = (killed.clone(), stop.clone(), seen.clone());
    phase("puts to the peer while it dies");
    let rx = run_group_with(
        &cx.adapter,
        n,
        &local,
        false,
        KILL_COMM,
        meet.clone(),
        Arc::new(move |r: &Rank, _bar: &Barrier| {
            let mut win = vec![r.rank as u8; KILL_BYTES];
            let mr = r.reg(&mut win, 0)?;
            let mut puts = 0usize;
            let verdict = loop {
                if s2.load(Ordering::Acquire) {
                    break Err("stopped: the check failed elsewhere".to_owned());
                }
                let res =
                    r.a.iput(r.rctx, &xfer(0, mr, KILL_BYTES, 0, mr, victim))
                        .map_err(|e| format!("iput: {e}"))
                        .and_then(|q| r.wait(q, "iput"));
                let since = *k2.lock().unwrap_or_else(|e| e.into_inner());
                match (res, since) {
                    // The verdict: an error after the peer died.
                    (Err(e), Some(t)) => {
                        seen2.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                            "rank {}: {puts} puts completed, then one failed {} ms after the kill: {e}",
                            r.rank,
                            t.elapsed().as_millis()
                        ));
                        break Ok(());
                    }
                    (Err(e), None) => {
                        // A wait that timed out before the kill is a hang too.
                        break Err(format!("put #{puts} to the peer failed before it was killed: {e}"));
                    }
                    (Ok(()), Some(t)) if t.elapsed() > WAIT => {
                        break Err(format!(
                            "puts to the killed rank {victim} kept completing {} s after its death ({puts} puts)",
                            WAIT.as_secs()
                        ));
                    }
                    (Ok(()), _) => puts += 1,
                }
                std::thread::sleep(Duration::from_millis(2));
            };
            // The window stays registered: the group is broken, closeColl follows.
            let _ = r.a.dereg_mr_sym(r.coll, mr);
            drop(win);
            verdict
        }),
    );
    // This thread's part of the all-gather: every local handle is in, hand them over.
    meet.bar.wait().map_err(|e| fail!("every local rank listens", "{e}"))?;
    let all: Vec<String> = meet
        .handles
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(hex::encode)
        .collect();
    {
        let stdin = peer.0.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "handles {}", all.join(","))
            .and_then(|()| stdin.flush())
            .map_err(|e| fail!("the handles reach the peer", "{e}"))?;
    }
    let line = next_line("connects and posts its puts");
    let line = match line {
        Ok(l) => l,
        Err(e) => {
            stop.store(true, Ordering::Release);
            return Err(e);
        }
    };
    if line != "posted" {
        stop.store(true, Ordering::Release);
        return Err(fail!("the peer posts its puts", "{line:?}"));
    }
    // Let some of the survivors' puts to the peer run, then kill it.
    std::thread::sleep(Duration::from_millis(100));
    phase("killing the peer");
    *killed.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
    drop(peer);
    phase("the survivors' puts after the peer's death");
    let res = collect(
        &rx,
        local.len(),
        WAIT * 3,
        "a put to a killed peer fails with an error within 20 s (at the post or at test), never hangs",
    );
    cx.notes.append(&mut seen.lock().unwrap_or_else(|e| e.into_inner()));
    res
}
