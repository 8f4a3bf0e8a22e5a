//! Peer processes for cross-process checks: the suite re-executes itself with
//! the hidden `--peer ROLE` option; the 128-byte handle travels over the peer's
//! stdin/stdout as hex, and progress is reported as text lines.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use ferroccl::plugin::net::NetHandle;

use crate::cx::{Cx, fill, verify};
use crate::outcome::{Res, Stop};
use crate::{fail, skip};

/// What a peer process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Reads a handle, connects, sends `--sizes` (message i has pattern i), prints `done`.
    Sender,
    /// Listens, prints `handle <hex>`, accepts, receives and verifies `--sizes`, prints `ok` or `bad <why>`.
    Receiver,
    /// Reads a handle, connects, sends one 4 KiB message, prints `sent`, posts a 64 MiB send, prints `partial` and stops itself (SIGSTOP) so the send stays unfinished (to be killed).
    StallSender,
    /// Listens, prints `handle <hex>`, accepts, receives one 4 KiB message, prints `received`, then idles (to be killed).
    StallReceiver,
}

/// Longest a peer lives, whatever happens.
const PEER_LIFETIME: Duration = Duration::from_secs(120);

/// Hex of a handle.
pub fn to_hex(h: &NetHandle) -> String {
    hex::encode(h)
}

/// Handle from hex; `None` if malformed.
pub fn from_hex(s: &str) -> Option<Box<NetHandle>> {
    let mut h: Box<NetHandle> = Box::new([0u8; 128]);
    hex::decode_to_slice(s.trim(), &mut h[..]).ok()?;
    Some(h)
}

/// A running peer process, killed when dropped.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Peer {
    /// Starts `ROLE` with the same plugin, API version and device as `cx`.
    pub fn spawn(cx: &Cx, role: Role, sizes: &[usize]) -> Res<Peer> {
        let exe = std::env::current_exe()
            .map_err(|e| skip!("cannot find the suite's own executable to start a peer: {e}"))?;
        let role_name = clap::ValueEnum::to_possible_value(&role)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        let sizes: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
        let mut cmd = Command::new(exe);
        cmd.arg("--peer")
            .arg(&role_name)
            .arg("--api")
            .arg(format!("v{}", cx.version))
            .arg("--device")
            .arg(cx.dev.to_string())
            .arg("--sizes")
            .arg(if sizes.is_empty() {
                "0".to_owned()
            } else {
                sizes.join(",")
            })
            .arg(&cx.plugin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .map_err(|e| fail!("the suite can start its peer process", "spawning the peer failed: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Peer {
            stdin: child.stdin.take(),
            child,
            lines: rx,
        })
    }

    /// The next line starting with `prefix` (other lines, e.g. plugin prints, are skipped).
    pub fn expect(&mut self, prefix: &str, within: Duration) -> Res<String> {
        let end = Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return Ok(l[prefix.len()..].trim().to_owned()),
                Ok(l) if l.starts_with("error ") => {
                    return Err(fail!(
                        format!("the peer process reports '{prefix}'"),
                        "peer process: {}",
                        &l[6..]
                    ));
                }
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(fail!(
                        format!("the peer process reports '{prefix}'"),
                        "the peer process did not report '{prefix}' within {} s",
                        within.as_secs()
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let st = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    return Err(fail!(
                        format!("the peer process reports '{prefix}'"),
                        "the peer process exited ({st}) before reporting '{prefix}'"
                    ));
                }
            }
        }
    }

    /// Sends one line to the peer.
    pub fn send_line(&mut self, line: &str) -> Res {
        let r = self
            .stdin
            .as_mut()
            .map(|s| writeln!(s, "{line}").and_then(|_| s.flush()));
        match r {
            Some(Ok(())) => Ok(()),
            _ => Err(fail!(
                "the peer process is alive",
                "could not write to the peer process"
            )),
        }
    }

    /// SIGSTOPs the peer: it stays alive (its sockets open) but runs no code, like
    /// a peer stuck in a debugger or descheduled for long. [`Peer::kill`] (or drop)
    /// still ends it.
    pub fn stop(&mut self) -> Res {
        let pid = self.child.id() as i32;
        // SAFETY: signalling our own child process by pid; it has not been reaped.
        let rc = unsafe { libc::kill(pid, libc::SIGSTOP) };
        if rc != 0 {
            return Err(fail!(
                "the suite can stop its peer process",
                "kill(SIGSTOP) failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        // Wait until it is really stopped (state 'T' in /proc/<pid>/stat).
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if st.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(fail!(
            "the suite can stop its peer process",
            "the peer did not stop within 5 s of SIGSTOP"
        ))
    }

    /// SIGKILLs the peer and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stdin.take();
        let end = Instant::now() + Duration::from_millis(500);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}

fn read_stdin_line() -> Option<String> {
    let mut s = String::new();
    match std::io::stdin().lock().read_line(&mut s) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(s),
    }
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// Body of a peer process (`--peer ROLE`); returns the process exit code.
pub fn run_peer(cx: &mut Cx, role: Role, sizes: &[usize]) -> i32 {
    // Never outlive the suite, nor a generous lifetime.
    // SAFETY: prctl(PR_SET_PDEATHSIG) only changes this process's own settings.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    std::thread::spawn(|| {
        std::thread::sleep(PEER_LIFETIME);
        std::process::exit(3);
    });
    match peer_body(cx, role, sizes) {
        Ok(()) => 0,
        Err(Stop::Fail { expected, observed }) => {
            say(&format!("error {observed} (expected: {expected})"));
            1
        }
        Err(Stop::Skip(r)) => {
            say(&format!("error skipped: {r}"));
            1
        }
    }
}

fn peer_body(cx: &mut Cx, role: Role, sizes: &[usize]) -> Res {
    match role {
        Role::Sender | Role::StallSender => {
            let line = read_stdin_line().ok_or_else(|| fail!("a handle on stdin", "stdin closed"))?;
            let mut h = from_hex(&line).ok_or_else(|| fail!("a 256-digit hex handle on stdin", "got {line:?}"))?;
            let (ctx, dev) = (cx.ctx, cx.dev);
            let start = Instant::now();
            let send = loop {
                if let Some(c) = cx.call(crate::watch::Call::Connect, "connect", |n| n.connect(ctx, dev, &mut h))? {
                    break c;
                }
                if start.elapsed() > crate::cx::CONNECT_DEADLINE {
                    return Err(fail!(
                        "connect completes",
                        "connect still NULL after {:?}",
                        start.elapsed()
                    ));
                }
                std::thread::sleep(Duration::from_micros(100));
            };
            if role == Role::Sender {
                for (i, &len) in sizes.iter().enumerate() {
                    let mut buf = vec![0u8; len.max(1)];
                    fill(&mut buf[..len], i as u64);
                    let mr = cx.reg_mr(send, &mut buf)?;
                    let r = cx.post("peer isend", |cx| cx.isend(send, &mut buf[..len], 0, mr))?;
                    cx.wait_all("peer isend", &[r])?;
                    cx.dereg_mr(send, mr)?;
                }
                say("done");
                let _ = read_stdin_line();
            } else {
                let mut buf = vec![0u8; 4096];
                fill(&mut buf, 0);
                let mr = cx.reg_mr(send, &mut buf)?;
                let r = cx.post("peer isend", |cx| cx.isend(send, &mut buf, 0, mr))?;
                cx.wait_all("peer isend", &[r])?;
                say("sent");
                // Start a 64 MiB message, push a little of it, then stop driving it:
                // the receiver sees a transfer that stops midway, then the process dies
                // (or is stopped).
                let mut big = vec![0u8; 64 << 20];
                fill(&mut big, 1);
                let bmr = cx.reg_mr(send, &mut big)?;
                let _r = cx.post("peer isend", |cx| cx.isend(send, &mut big, 0, bmr))?;
                say("partial");
                // Stop this whole process (helper threads of a plugin that progresses
                // in the background included) right after the post, so the message
                // stays unfinished; the test then kills or leaves it stopped.
                // SAFETY: raise() only signals this process.
                unsafe { libc::raise(libc::SIGSTOP) };
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            let _ = cx.close_send(send, "closeSend");
            Ok(())
        }
        Role::Receiver | Role::StallReceiver => {
            let (l, h) = cx.listen()?;
            say(&format!("handle {}", to_hex(&h)));
            let start = Instant::now();
            let recv = loop {
                if let Some(c) = cx.call(crate::watch::Call::Accept, "accept", |n| n.accept(l))? {
                    break c;
                }
                if start.elapsed() > crate::cx::CONNECT_DEADLINE {
                    return Err(fail!(
                        "accept completes",
                        "accept still NULL after {:?}",
                        start.elapsed()
                    ));
                }
                std::thread::sleep(Duration::from_micros(100));
            };
            let list: Vec<usize> = if role == Role::Receiver {
                sizes.to_vec()
            } else {
                vec![4096]
            };
            for (i, &len) in list.iter().enumerate() {
                let mut buf = vec![0u8; len.max(1)];
                let mr = cx.reg_mr(recv, &mut buf)?;
                let r = cx.post("peer irecv", |cx| cx.irecv(recv, &mut buf, 0, mr))?;
                cx.wait_all("peer irecv", &[r])?;
                cx.dereg_mr(recv, mr)?;
                // Data only: the received size is checked by transfer.recv_larger.
                if let Err(at) = verify(&buf[..len], i as u64) {
                    say(&format!("bad message {i} ({len} bytes): wrong byte at offset {at}"));
                    return Ok(());
                }
            }
            if role == Role::Receiver {
                say("ok");
                let _ = read_stdin_line();
            } else {
                say("received");
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            let _ = cx.close_recv(recv, "closeRecv");
            let _ = cx.close_listen(l, "closeListen");
            Ok(())
        }
    }
}
