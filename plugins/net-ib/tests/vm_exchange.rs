//! Two processes exchange data through `IbNet` over real verbs (the soft-RoCE
//! VM's `rxe0`, see `scripts/ib-vm-test.sh`).
//!
//! Without RDMA devices the test prints why and passes, unless
//! `IB_VM_REQUIRE=1` is set (the VM script sets it), in which case the missing
//! device is a failure. The receiver is this process; the sender is the same
//! test binary re-executed with `IB_CHILD_HANDLE=<hex handle>`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ferroccl_plugin_api::sdk::{Buf, CommConfig, CommMut, Net, NetError, PtrType, RecvBuf, TestStatus};
use nccl_net_ib::IbNet;

const SIZES: &[usize] = &[0, 1, 7, 127, 128, 129, 4096, 65_537, 1 << 20, 3 << 20, 16 << 20];
const GROUP_TAGS: [i32; 3] = [10, 11, 12];
const GROUP_SIZES: [usize; 3] = [1000, 0, 70_000];
const INFLIGHT: usize = 32;
const INFLIGHT_SIZE: usize = 65_536;

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i.wrapping_mul(31) ^ seed.wrapping_mul(0x9e37)) >> 3) as u8)
        .collect()
}

fn wait(net: &IbNet, req: &mut <IbNet as Net>::Request, what: &str) -> Result<TestStatus, NetError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match net.test(req)? {
            TestStatus::Pending if Instant::now() < deadline => std::hint::spin_loop(),
            TestStatus::Pending => panic!("{what}: still pending after 120 s"),
            done => return Ok(done),
        }
    }
}

fn hex(b: &[u8]) -> String {
    hex::encode(b)
}

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).expect("hex handle")
}

/// This test binary re-run as a child process for one test (`--exact`), its
/// stdout lines echoed to stderr and forwarded to the parent.
struct ChildTest {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl ChildTest {
    /// Spawns the child running test `name` with `var=value` in its environment.
    fn spawn(name: &str, var: &str, value: &str) -> ChildTest {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(var, value)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel::<String>();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                eprintln!("[child] {line}");
                let _ = tx.send(line);
            }
        });
        ChildTest { child, lines }
    }

    /// Waits (at most 120 s) for a child line containing `want` and returns it.
    fn expect_line(&self, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(want) => return l,
                Ok(_) => {}
                Err(e) => panic!("waiting for child line {want:?}: {e}"),
            }
        }
    }
}

fn new_net() -> Option<IbNet> {
    match IbNet::new() {
        Ok(n) => Some(n),
        Err(e) if std::env::var("IB_VM_REQUIRE").is_ok_and(|v| !v.is_empty()) => {
            panic!("IB_VM_REQUIRE set but IbNet::new failed: {e}")
        }
        Err(e) => {
            eprintln!("skipping: no usable RDMA here: {e}");
            None
        }
    }
}

/// Sender side, run in the child process.
fn sender(handle_hex: &str) {
    let net = IbNet::new().expect("child: IbNet::new");
    let ctx = net.init(0, &CommConfig::default()).unwrap();
    let mut handle = [0u8; 128];
    handle.copy_from_slice(&unhex(handle_hex));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut comm = loop {
        if let Some(c) = net.connect(&ctx, 0, &mut handle, &CommConfig::default()).unwrap() {
            break c;
        }
        assert!(Instant::now() < deadline, "connect timed out");
    };
    println!("CHILD connected");
    // Phase 1: sizes.
    for &size in SIZES {
        let mut data = pattern(size, size.max(1));
        let mr = net
            .reg_mr(
                CommMut::Send(&mut comm),
                Buf::new(data.as_mut_ptr(), data.len()),
                PtrType::Host,
            )
            .unwrap();
        let mut req = loop {
            if let Some(r) = net
                .isend(&mut comm, Buf::new(data.as_mut_ptr(), size), 7, Some(&mr))
                .unwrap()
            {
                break r;
            }
        };
        let st = wait(&net, &mut req, "isend").unwrap();
        assert_eq!(st, TestStatus::done1(size));
        net.dereg_mr(CommMut::Send(&mut comm), mr).unwrap();
    }
    println!("CHILD sizes done");
    // Phase 2: grouped receive, sent in reverse tag order.
    let mut bufs: Vec<Vec<u8>> = GROUP_SIZES
        .iter()
        .enumerate()
        .map(|(i, &s)| pattern(100 + i, s.max(1)))
        .collect();
    let mut reqs = Vec::new();
    let mut mrs = Vec::new();
    for i in (0..3).rev() {
        let b = &mut bufs[i];
        let mr = net
            .reg_mr(
                CommMut::Send(&mut comm),
                Buf::new(b.as_mut_ptr(), b.len()),
                PtrType::Host,
            )
            .unwrap();
        let r = loop {
            if let Some(r) = net
                .isend(
                    &mut comm,
                    Buf::new(b.as_mut_ptr(), GROUP_SIZES[i]),
                    GROUP_TAGS[i],
                    Some(&mr),
                )
                .unwrap()
            {
                break r;
            }
        };
        reqs.push(r);
        mrs.push(mr);
    }
    for r in &mut reqs {
        wait(&net, r, "grouped isend").unwrap();
    }
    println!("CHILD group done");
    // Phase 3: 32 sends in flight from one registered buffer.
    let mut big = pattern(999, INFLIGHT * INFLIGHT_SIZE);
    let mr = net
        .reg_mr(
            CommMut::Send(&mut comm),
            Buf::new(big.as_mut_ptr(), big.len()),
            PtrType::Host,
        )
        .unwrap();
    let mut reqs = Vec::new();
    for i in 0..INFLIGHT {
        // SAFETY: in bounds of `big`.
        let p = unsafe { big.as_mut_ptr().add(i * INFLIGHT_SIZE) };
        let r = loop {
            if let Some(r) = net.isend(&mut comm, Buf::new(p, INFLIGHT_SIZE), 1, Some(&mr)).unwrap() {
                break r;
            }
        };
        reqs.push(r);
    }
    for r in &mut reqs {
        wait(&net, r, "inflight isend").unwrap();
    }
    println!("CHILD inflight done");
    // Phase 4: wait to be killed (the parent posts a receive we never answer).
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn two_process_exchange() {
    if let Ok(h) = std::env::var("IB_CHILD_HANDLE") {
        sender(&h);
        return;
    }
    let Some(net) = new_net() else { return };
    let props = net.properties(0).unwrap();
    println!("device 0: {props:?}");
    let ctx = net.init(0, &CommConfig::default()).unwrap();
    let mut handle = [0u8; 128];
    let mut listen = net.listen(&ctx, 0, &mut handle).unwrap();
    let mut child = ChildTest::spawn("two_process_exchange", "IB_CHILD_HANDLE", &hex(&handle));
    let expect_line = |want: &str| {
        child.expect_line(want);
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut comm = loop {
        if let Some(c) = net.accept(&mut listen).unwrap() {
            break c;
        }
        assert!(Instant::now() < deadline, "accept timed out");
    };
    net.close_listen(listen).unwrap();

    // Phase 1: every size, verified byte for byte.
    let mut rbuf = vec![0u8; 16 << 20];
    let mr = net
        .reg_mr(
            CommMut::Recv(&mut comm),
            Buf::new(rbuf.as_mut_ptr(), rbuf.len()),
            PtrType::Host,
        )
        .unwrap();
    for &size in SIZES {
        let n = size.min(rbuf.len());
        rbuf[..n].fill(0xEE);
        let rb = [RecvBuf {
            buf: Buf::new(rbuf.as_mut_ptr(), rbuf.len()),
            tag: 7,
            mr: Some(&mr),
        }];
        let mut req = net.irecv(&mut comm, &rb).unwrap().expect("irecv slot");
        let st = wait(&net, &mut req, "irecv").unwrap();
        assert_eq!(st, TestStatus::done1(size), "size {size}");
        assert!(
            rbuf[..size] == pattern(size, size.max(1))[..size],
            "data mismatch at size {size}"
        );
        println!("PARENT size {size} ok");
    }
    expect_line("sizes done");

    // Phase 2: grouped receive of three tagged buffers.
    let mut gb: Vec<Vec<u8>> = GROUP_SIZES.iter().map(|&s| vec![0u8; s + 4096]).collect();
    let gmrs: Vec<_> = gb
        .iter_mut()
        .map(|b| {
            net.reg_mr(
                CommMut::Recv(&mut comm),
                Buf::new(b.as_mut_ptr(), b.len()),
                PtrType::Host,
            )
            .unwrap()
        })
        .collect();
    let rbs: Vec<RecvBuf<'_, _>> = gb
        .iter_mut()
        .zip(&gmrs)
        .enumerate()
        .map(|(i, (b, m))| RecvBuf {
            buf: Buf::new(b.as_mut_ptr(), b.len()),
            tag: GROUP_TAGS[i],
            mr: Some(m),
        })
        .collect();
    let mut req = net.irecv(&mut comm, &rbs).unwrap().expect("grouped irecv");
    let TestStatus::Done { n, sizes } = wait(&net, &mut req, "grouped irecv").unwrap() else {
        unreachable!()
    };
    assert_eq!(n, 3);
    assert_eq!(&sizes[..3], &GROUP_SIZES);
    for (i, &s) in GROUP_SIZES.iter().enumerate() {
        assert!(
            gb[i][..s] == pattern(100 + i, s.max(1))[..s],
            "grouped buffer {i} (tag {}) wrong",
            GROUP_TAGS[i]
        );
    }
    println!("PARENT grouped ok");
    expect_line("group done");

    // Phase 3: 32 receives in flight; the 33rd is refused (NULL request).
    let mut big = vec![0u8; INFLIGHT * INFLIGHT_SIZE];
    let bmr = net
        .reg_mr(
            CommMut::Recv(&mut comm),
            Buf::new(big.as_mut_ptr(), big.len()),
            PtrType::Host,
        )
        .unwrap();
    let mut reqs = Vec::new();
    for i in 0..INFLIGHT {
        // SAFETY: in bounds of `big`.
        let p = unsafe { big.as_mut_ptr().add(i * INFLIGHT_SIZE) };
        let rb = [RecvBuf {
            buf: Buf::new(p, INFLIGHT_SIZE),
            tag: 1,
            mr: Some(&bmr),
        }];
        reqs.push(net.irecv(&mut comm, &rb).unwrap().expect("one of 32 receives"));
    }
    let extra = [RecvBuf {
        buf: Buf::new(rbuf.as_mut_ptr(), 16),
        tag: 1,
        mr: Some(&mr),
    }];
    assert!(
        net.irecv(&mut comm, &extra).unwrap().is_none(),
        "33rd receive must return a NULL request"
    );
    for r in &mut reqs {
        assert_eq!(
            wait(&net, r, "inflight irecv").unwrap(),
            TestStatus::done1(INFLIGHT_SIZE)
        );
    }
    assert!(big == pattern(999, INFLIGHT * INFLIGHT_SIZE), "32-in-flight data wrong");
    println!("PARENT inflight ok");
    expect_line("inflight done");

    // Phase 4: kill the sender while a receive is outstanding: an error, not a hang.
    let rb = [RecvBuf {
        buf: Buf::new(rbuf.as_mut_ptr(), 1 << 20),
        tag: 7,
        mr: Some(&mr),
    }];
    let mut req = net.irecv(&mut comm, &rb).unwrap().expect("irecv");
    child.child.kill().unwrap();
    let _ = child.child.wait();
    let t0 = Instant::now();
    let err = wait(&net, &mut req, "irecv from killed peer").expect_err("a receive from a killed peer must fail");
    println!("PARENT dead peer -> {err} after {:?}", t0.elapsed());
    assert!(matches!(err, NetError::Remote(_)), "{err:?}");
    net.close_recv(comm).unwrap();
    println!("PARENT all phases ok");
}

/// Receiver side of [`dead_receiver_fails_isend`], run in the child process:
/// listens, prints its handle, accepts, then posts nothing and waits to be killed.
fn stalled_receiver() {
    let net = IbNet::new().expect("child: IbNet::new");
    let ctx = net.init(0, &CommConfig::default()).unwrap();
    let mut handle = [0u8; 128];
    let mut listen = net.listen(&ctx, 0, &mut handle).unwrap();
    println!("CHILD handle {}", hex(&handle));
    let deadline = Instant::now() + Duration::from_secs(60);
    let _comm = loop {
        if let Some(c) = net.accept(&mut listen).unwrap() {
            break c;
        }
        assert!(Instant::now() < deadline, "accept timed out");
        std::thread::sleep(Duration::from_millis(1));
    };
    println!("CHILD accepted");
    std::thread::sleep(Duration::from_secs(600));
}

/// A send whose receiver never posts a receive (no CTS) stays NULL ("try again")
/// while the receiver lives; once the receiver process is killed, `isend` must
/// return an error within 15 s instead of NULL forever (conformance check
/// `fault.peer_killed_send`, checklist "teardown and errors").
#[test]
fn dead_receiver_fails_isend() {
    if std::env::var("IB_CHILD_STALLED_RECV").is_ok() {
        stalled_receiver();
        return;
    }
    let Some(net) = new_net() else { return };
    let ctx = net.init(0, &CommConfig::default()).unwrap();
    let mut child = ChildTest::spawn("dead_receiver_fails_isend", "IB_CHILD_STALLED_RECV", "1");
    let expect_line = |want: &str| -> String { child.expect_line(want) };
    let line = expect_line("CHILD handle ");
    let mut handle = [0u8; 128];
    handle.copy_from_slice(&unhex(line.rsplit(' ').next().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut comm = loop {
        if let Some(c) = net.connect(&ctx, 0, &mut handle, &CommConfig::default()).unwrap() {
            break c;
        }
        assert!(Instant::now() < deadline, "connect timed out");
        std::thread::sleep(Duration::from_millis(1));
    };
    expect_line("CHILD accepted");
    let mut data = pattern(3, 1 << 20);
    // The receiver lives and posted nothing: NULL (no CTS), never an error.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        let r = net.isend(&mut comm, Buf::new(data.as_mut_ptr(), data.len()), 7, None);
        assert!(
            matches!(r, Ok(None)),
            "isend without a CTS from a live receiver: {:?}",
            r.map(|o| o.is_some())
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.child.kill().unwrap();
    let _ = child.child.wait();
    let t0 = Instant::now();
    let err = loop {
        match net.isend(&mut comm, Buf::new(data.as_mut_ptr(), data.len()), 7, None) {
            Ok(None) => {
                assert!(
                    t0.elapsed() < Duration::from_secs(15),
                    "isend to a killed receiver still NULL after 15 s"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok(Some(_)) => panic!("isend to a killed receiver that never posted a receive returned a request"),
            Err(e) => break e,
        }
    };
    println!("PARENT dead receiver -> isend error {err} after {:?}", t0.elapsed());
    assert!(matches!(err, NetError::Remote(_)), "{err:?}");
    net.close_send(comm).unwrap();
}
