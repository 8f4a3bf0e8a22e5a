//! A peer PROCESS killed in the middle of a 64 MiB transfer: `test` must return an
//! error (never hang). The peer is this test binary re-executed with
//! `FERROCCL_SOCKET_TEST_ROLE` set, running only `child_role`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use ferroccl_plugin_api::sdk::{CommConfig, Handle, Net, NetError, TestStatus};

const ROLE: &str = "FERROCCL_SOCKET_TEST_ROLE";
const HANDLE: &str = "FERROCCL_SOCKET_TEST_HANDLE";
const SIZE: usize = 64 << 20;
/// How quickly a killed peer must be noticed.
const DETECT: Duration = Duration::from_secs(30);

fn hex(h: &Handle) -> String {
    hex::encode(h)
}

fn unhex(s: &str) -> Handle {
    let mut h = [0u8; 128];
    hex::decode_to_slice(s, &mut h).expect("hex handle");
    h
}

fn spawn(role: &str, handle: Option<&Handle>) -> (Child, BufReader<ChildStdout>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(h) = handle {
        cmd.env(HANDLE, hex(h));
    }
    let mut child = cmd.spawn().expect("spawn peer process");
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// Reads the child's stdout until a line starting with `prefix`; returns its rest.
fn expect_line(out: &mut BufReader<ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "peer exited before printing {prefix}"
        );
        // libtest may print "test child_role ... " on the same line first.
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_string();
        }
    }
}

/// The peer side; does nothing in a normal test run.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else { return };
    let net = net();
    let give_up = Instant::now() + Duration::from_secs(120);
    match role.as_str() {
        "sender" => {
            let mut handle = unhex(&std::env::var(HANDLE).unwrap());
            let mut s = loop {
                if let Some(s) = net.connect(&(), 0, &mut handle, &CommConfig::default()).unwrap() {
                    break s;
                }
                assert!(Instant::now() < give_up);
            };
            let mut src = pattern(5, SIZE);
            let mut req = post(|| net.isend(&mut s, buf(&mut src), 0, None));
            println!("PEER-SENDING");
            std::io::stdout().flush().unwrap();
            // Keep the transfer going until killed.
            while Instant::now() < give_up {
                if !matches!(net.test(&mut req), Ok(TestStatus::Pending)) {
                    break;
                }
            }
        }
        "receiver" => {
            let mut handle: Handle = [0; 128];
            let mut l = net.listen(&(), 0, &mut handle).unwrap();
            println!("PEER-HANDLE {}", hex(&handle));
            std::io::stdout().flush().unwrap();
            let _r = loop {
                if let Some(r) = net.accept(&mut l).unwrap() {
                    break r;
                }
                assert!(Instant::now() < give_up);
            };
            println!("PEER-ACCEPTED");
            std::io::stdout().flush().unwrap();
            // Never posts a receive: the sender stays mid-transfer until we are killed.
            while Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        other => panic!("unknown role {other}"),
    }
}

fn assert_fails_in_time(res: Result<Vec<usize>, NetError>, t0: Instant) {
    let e = res.expect_err("the transfer cannot complete: the peer was killed mid-transfer");
    assert!(matches!(e, NetError::Remote(_) | NetError::System(_)), "{e}");
    assert!(
        e.to_string().contains("127.0.0.1"),
        "the error names the peer address: {e}"
    );
    assert!(t0.elapsed() < DETECT, "error after {:?}", t0.elapsed());
}

#[test]
fn sender_process_killed_during_64mib_receive() {
    let net = net();
    let mut handle: Handle = [0; 128];
    let mut l = net.listen(&(), 0, &mut handle).unwrap();
    let (mut child, mut out) = spawn("sender", Some(&handle));
    let t0 = Instant::now();
    let mut r = loop {
        if let Some(r) = net.accept(&mut l).unwrap() {
            break r;
        }
        assert!(t0.elapsed() < BOUND, "peer never connected");
    };
    expect_line(&mut out, "PEER-SENDING");
    // Freeze the sender: only what already sits in its socket buffers (a few MiB,
    // far below 64 MiB) can still arrive, so the receive cannot complete.
    // SAFETY: plain kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) }, 0);
    let mut dst = vec![0u8; SIZE];
    let mut req = post(|| net.irecv(&mut r, &[rb(&mut dst, 0)]));
    for _ in 0..100 {
        assert_eq!(net.test(&mut req).unwrap(), TestStatus::Pending);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let t0 = Instant::now();
    assert_fails_in_time(wait(&net, &mut req), t0);
    net.close_recv(r).unwrap();
}

#[test]
fn receiver_process_killed_during_64mib_send() {
    let net = net();
    let (mut child, mut out) = spawn("receiver", None);
    let mut handle = unhex(&expect_line(&mut out, "PEER-HANDLE"));
    let t0 = Instant::now();
    let mut s = loop {
        if let Some(s) = net.connect(&(), 0, &mut handle, &CommConfig::default()).unwrap() {
            break s;
        }
        assert!(t0.elapsed() < BOUND, "could not connect to the peer");
    };
    expect_line(&mut out, "PEER-ACCEPTED");
    let mut src = pattern(6, SIZE);
    let mut req = post(|| net.isend(&mut s, buf(&mut src), 0, None));
    for _ in 0..100 {
        assert_eq!(net.test(&mut req).unwrap(), TestStatus::Pending);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let t0 = Instant::now();
    assert_fails_in_time(wait(&net, &mut req), t0);
    net.close_send(s).unwrap();
}
