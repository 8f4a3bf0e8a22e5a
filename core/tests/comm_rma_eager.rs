//! `NCCL_RMA_EAGER_INIT=1` (NCCL 2.30.7 `src/init.cc`): the RMA plugin is set up
//! at communicator init, so `signal` and `wait_signal`, which take no window, work
//! before any window is registered. Its own binary: the variable is process-wide.

use std::time::Duration;

use ferroccl::bootstrap::{BootstrapConfig, get_unique_id};
use ferroccl::{Comm, CommConfig, Stream, WaitSignalDesc};

#[test]
fn eager_init_allows_signals_before_any_window() {
    // SAFETY: this binary's one test sets them before any communicator reads them.
    unsafe {
        std::env::set_var("NCCL_SOCKET_IFNAME", "lo");
        std::env::set_var("NCCL_NET_PLUGIN", "socket");
        std::env::set_var("NCCL_SOCKET_RMA_ENABLE", "1");
        std::env::set_var("NCCL_RMA_EAGER_INIT", "1");
    }
    let t = Duration::from_secs(60);
    let id = get_unique_id(&BootstrapConfig::loopback(t)).expect("unique id");
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let id = &id;
                s.spawn(move || {
                    let config = CommConfig {
                        timeout: Some(t),
                        bootstrap: Some(BootstrapConfig::loopback(t)),
                        ..Default::default()
                    };
                    let c = Comm::init_rank(2, id, r, config).expect("init");
                    c.rma_status().expect("set up at init");
                    let st = Stream::new();
                    for _ in 0..3 {
                        c.signal(1 - r, 0, 0, 0, &st).expect("signal");
                    }
                    let d = WaitSignalDesc {
                        op_cnt: 3,
                        peer: 1 - r,
                        sig_idx: 0,
                        ctx: 0,
                    };
                    c.wait_signal(&[d], &st).expect("wait_signal");
                    st.synchronize().expect("three signals arrive");
                    c.destroy().expect("destroy");
                })
            })
            .collect();
        for h in hs {
            h.join().expect("rank thread");
        }
    });
}
