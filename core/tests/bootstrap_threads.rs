//! Bootstrap with ranks as threads in one process, real TCP on loopback.

mod bootstrap_common;

#[path = "port_support/mod.rs"]
mod port_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bootstrap_common::*;
use ferroccl::bootstrap::{Bootstrap, BootstrapError, NCCL_MAGIC, get_unique_id};

#[test]
fn ranks_as_threads_1_2_3_8() {
    init_tracing();
    for n in [1, 2, 3, 8] {
        let c = cfg(OK_TIMEOUT);
        let id = new_id(&c);
        assert!(id.root_addr().unwrap().ip().is_loopback());
        run_threads(id, n, &c, move |bs| exercise(bs, &format!("threads{n}")));
    }
}

#[test]
fn two_independent_bootstraps_in_one_process() {
    init_tracing();
    let c = cfg(OK_TIMEOUT);
    let (a, b) = (new_id(&c), new_id(&c));
    assert_ne!(a, b);
    assert_ne!(a.magic(), b.magic());
    let ca = c.clone();
    let ta = std::thread::spawn(move || run_threads(a, 3, &ca, |bs| exercise(bs, "A")));
    let tb = std::thread::spawn(move || run_threads(b, 4, &c, |bs| exercise(bs, "B")));
    ta.join().expect("bootstrap A");
    tb.join().expect("bootstrap B");
}

#[test]
fn nccl_comm_id_rank0_starts_root() {
    init_tracing();
    let port = port_support::unused_port();
    let mut c = cfg(OK_TIMEOUT);
    c.comm_id = Some(format!("127.0.0.1:{port}"));
    // With NCCL_COMM_ID, get_unique_id encodes the address and starts nothing.
    let id = get_unique_id(&c).unwrap();
    assert_eq!(id.magic(), NCCL_MAGIC);
    assert_eq!(id.root_addr().unwrap(), format!("127.0.0.1:{port}").parse().unwrap());
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "no root may listen yet"
    );
    run_threads(id, 3, &c, |bs| exercise(bs, "commid"));
}

#[test]
fn abort_unblocks_a_waiting_recv() {
    init_tracing();
    let c = cfg(OK_TIMEOUT);
    let id = new_id(&c);
    let c1 = c.clone();
    let h = std::thread::spawn(move || {
        let bs = Bootstrap::init(&id, 1, 2, &c1).unwrap();
        let flag = bs.abort_flag();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            flag.store(true, Ordering::SeqCst);
        });
        let t0 = Instant::now();
        let e = bs.recv(0, 9).unwrap_err();
        t.join().unwrap();
        (e, t0.elapsed())
    });
    let mut c0 = c.clone();
    c0.abort = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bs0 = Bootstrap::init(&id, 0, 2, &c0).unwrap();
    let (e, took) = h.join().unwrap();
    assert!(matches!(e, BootstrapError::Aborted { .. }), "{e}");
    assert!(e.to_string().contains("tag 9 from rank 0"), "{e}");
    assert!(took < Duration::from_secs(10), "abort took {took:?}");
    drop(bs0);
}

#[test]
fn peer_close_fails_a_waiting_recv_promptly() {
    init_tracing();
    let c = cfg(OK_TIMEOUT);
    let id = new_id(&c);
    let c0 = c.clone();
    let h = std::thread::spawn(move || {
        let bs = Bootstrap::init(&id, 0, 2, &c0).unwrap();
        bs.send(1, 5, b"last words").unwrap();
        bs.barrier().unwrap();
        bs.close();
        assert!(matches!(bs.send(1, 5, b"x"), Err(BootstrapError::Closed)));
    });
    let bs = Bootstrap::init(&id, 1, 2, &c).unwrap();
    bs.barrier().unwrap();
    h.join().unwrap();
    // Already-delivered data survives the close; then the close is reported, not a hang.
    assert_eq!(bs.recv(0, 5).unwrap(), b"last words");
    let t0 = Instant::now();
    let e = bs.recv(0, 5).unwrap_err();
    assert!(matches!(e, BootstrapError::PeerClosed { peer: 0, .. }), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn invalid_arguments() {
    let c = cfg(OK_TIMEOUT);
    let id = new_id(&c);
    assert!(matches!(
        Bootstrap::init(&id, 2, 2, &c),
        Err(BootstrapError::InvalidArgument(_))
    ));
    assert!(matches!(
        Bootstrap::init(&id, 0, 0, &c),
        Err(BootstrapError::InvalidArgument(_))
    ));
    let mut bad = c.clone();
    bad.ifname = Some("=no_such_interface0".into());
    let e = get_unique_id(&bad).unwrap_err();
    assert!(matches!(e, BootstrapError::NoInterface(_)), "{e}");
    bad.ifname = None;
    bad.comm_id = Some("127.0.0.1".into());
    assert!(matches!(get_unique_id(&bad), Err(BootstrapError::InvalidCommId { .. })));
    run_threads(id, 1, &c, |bs| {
        assert!(matches!(bs.send(1, 0, b""), Err(BootstrapError::InvalidArgument(_))));
        assert!(matches!(bs.broadcast(3, b""), Err(BootstrapError::InvalidArgument(_))));
    });
}

#[test]
fn survivor_exchange_runs_beside_a_blocked_receive() {
    use ferroccl::bootstrap::{MAX_SURVIVOR_BYTES, SurvivorStatus};
    let c = cfg(OK_TIMEOUT);
    let id = new_id(&c);
    run_threads(id, 3, &c, |bs| {
        let (r, n) = (bs.rank(), bs.nranks());
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        std::thread::scope(|sc| {
            // Another thread of this rank is blocked in a receive (and holds no lock the
            // exchange needs) until the exchange is over.
            let blocked = sc.spawn(|| bs.recv(prev, 99));
            for tag in [7u32, 8] {
                let mine = format!("tag {tag} from rank {r}");
                let s = bs
                    .exchange_among_survivors(tag, mine.as_bytes(), Duration::from_secs(20))
                    .expect("exchange");
                assert_eq!(s.answered(), vec![0, 1, 2], "{s:?}");
                assert!(s.missing().is_empty());
                for p in 0..n {
                    assert_eq!(s.data(p).unwrap(), format!("tag {tag} from rank {p}").as_bytes());
                    assert!(matches!(s.status[p], SurvivorStatus::Answered(_)));
                }
            }
            bs.send(next, 99, b"release").unwrap();
            assert_eq!(blocked.join().unwrap().unwrap(), b"release");
        });
        let e = bs
            .exchange_among_survivors(1, &vec![0u8; MAX_SURVIVOR_BYTES + 1], Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(e, BootstrapError::InvalidArgument(_)), "{e}");
        bs.barrier().unwrap();
    });
}
