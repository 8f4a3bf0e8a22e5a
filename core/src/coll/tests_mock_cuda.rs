//! Stream ordering against a **mock CUDA driver** that models what made the
//! H200 hang of issue 28 possible: every stream's work runs on its own engine
//! thread, but host functions of *all* streams run on **one** callback thread
//! (a legal CUDA implementation: `cuLaunchHostFunc` promises no more), and a
//! stream's later work waits until its host function has returned. A wait that
//! blocks inside a host function ([`crate::stream::DeviceStream::wait_for`] as
//! it was) then deadlocks two ranks of one process on two streams: rank 0's
//! wait holds the callback thread, rank 1's gate (a host function) never runs,
//! and rank 0's operation needs rank 1's. [`FlagWaitStream`] waits on the
//! device for a host flag instead (`cuStreamWaitValue32`), which the mock's
//! engine thread polls, so nothing blocks the callback thread.
//!
//! Every wait here is bounded: a cycle fails the test with what each stream
//! was waiting on, never hangs it (the mock's waits give up after [`BOUND`];
//! the test's watchdog then ends the process with a report if the teardown
//! cannot finish either, as it cannot when a gate never opens).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ferroccl_kernels::{DataType, RedOp};

use super::tests::with_comms;
use crate::check::{self, TestOp};
use crate::error::Error;
use crate::stream::{FlagPool, FlagWaitStream, Stream, StreamDriver};

/// How long any mock wait may last before the test fails (a deadlock, not
/// slowness: the work itself takes milliseconds).
const BOUND: Duration = Duration::from_secs(30);

type HostFn = Box<dyn FnOnce() + Send>;

/// The mock driver's one callback thread, shared by every stream.
struct CallbackThread {
    tx: Mutex<mpsc::Sender<(HostFn, mpsc::Sender<()>)>>,
}

impl CallbackThread {
    fn start() -> Arc<CallbackThread> {
        let (tx, rx) = mpsc::channel::<(HostFn, mpsc::Sender<()>)>();
        std::thread::Builder::new()
            .name("mock-cuda-callback".into())
            .spawn(move || {
                for (f, done) in rx {
                    f();
                    let _ = done.send(());
                }
            })
            .expect("spawn the mock callback thread");
        Arc::new(CallbackThread { tx: Mutex::new(tx) })
    }
}

enum Item {
    HostFn(HostFn),
    WaitValue(u64, u32),
    Kernel(HostFn),
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Item>,
    /// What the engine is doing now (for the failure message).
    doing: String,
    closed: bool,
    /// A bounded wait gave up: the stream is stuck (a cycle).
    stuck: Option<String>,
}

/// One mock stream: an engine thread running its items in order.
struct MockCudaStream {
    name: String,
    /// Items the engine has started.
    started: std::sync::atomic::AtomicUsize,
    q: Mutex<Queue>,
    cv: Condvar,
}

impl std::fmt::Debug for MockCudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl MockCudaStream {
    fn start(name: String, cb: Arc<CallbackThread>) -> Arc<MockCudaStream> {
        let s = Arc::new(MockCudaStream {
            name,
            started: std::sync::atomic::AtomicUsize::new(0),
            q: Mutex::new(Queue::default()),
            cv: Condvar::new(),
        });
        let e = s.clone();
        std::thread::Builder::new()
            .name(format!("mock-cuda-{}", s.name))
            .spawn(move || e.engine(&cb))
            .expect("spawn a mock stream engine");
        s
    }

    fn push(&self, i: Item) {
        self.q.lock().unwrap().items.push_back(i);
        self.cv.notify_all();
    }

    fn set_doing(&self, d: &str) {
        self.q.lock().unwrap().doing = d.to_string();
    }

    fn engine(&self, cb: &CallbackThread) {
        loop {
            let item = {
                let mut g = self.q.lock().unwrap();
                loop {
                    if let Some(i) = g.items.pop_front() {
                        break i;
                    }
                    if g.closed {
                        g.doing = "idle (closed)".into();
                        self.cv.notify_all();
                        return;
                    }
                    g.doing = "idle".into();
                    self.cv.notify_all();
                    g = self.cv.wait(g).unwrap();
                }
            };
            self.started.fetch_add(1, Ordering::SeqCst);
            let stuck = match item {
                Item::Kernel(f) => {
                    self.set_doing("kernel");
                    f();
                    None
                }
                Item::HostFn(f) => {
                    // CUDA: the stream's later work waits until the host
                    // function, run on the shared callback thread, returns.
                    self.set_doing("host function (queued on or running on the shared callback thread)");
                    let (tx, rx) = mpsc::channel();
                    cb.tx.lock().unwrap().send((f, tx)).expect("callback thread alive");
                    rx.recv_timeout(BOUND)
                        .err()
                        .map(|_| format!("{}: host function did not return within {BOUND:?}", self.name))
                }
                Item::WaitValue(addr, value) => {
                    self.set_doing(&format!("cuStreamWaitValue32(EQ {value})"));
                    // SAFETY: `addr` is a flag word of `alloc_flags` (leaked, never freed).
                    let w = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
                    let t0 = Instant::now();
                    loop {
                        if w.load(Ordering::SeqCst) == value {
                            break None;
                        }
                        if t0.elapsed() > BOUND {
                            break Some(format!("{}: flag never reached {value} within {BOUND:?}", self.name));
                        }
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            };
            if let Some(why) = stuck {
                let mut g = self.q.lock().unwrap();
                g.stuck = Some(why);
                self.cv.notify_all();
                return;
            }
        }
    }

    /// Waits until every item pushed so far has run (`cuStreamSynchronize`),
    /// bounded; the error names what the stream was stuck on.
    fn synchronize(&self) -> Result<(), String> {
        let t0 = Instant::now();
        let mut g = self.q.lock().unwrap();
        loop {
            if let Some(s) = &g.stuck {
                return Err(s.clone());
            }
            if g.items.is_empty() && g.doing.starts_with("idle") {
                return Ok(());
            }
            if t0.elapsed() > BOUND + Duration::from_secs(5) {
                return Err(format!(
                    "{}: synchronize gave up; engine doing: {}; {} item(s) queued",
                    self.name,
                    g.doing,
                    g.items.len()
                ));
            }
            g = self.cv.wait_timeout(g, Duration::from_millis(100)).unwrap().0;
        }
    }

    fn close(&self) {
        self.q.lock().unwrap().closed = true;
        self.cv.notify_all();
    }
}

/// The [`StreamDriver`] of a mock stream.
#[derive(Debug)]
struct MockDriver {
    stream: Arc<MockCudaStream>,
    pool: Arc<FlagPool>,
}

impl StreamDriver for MockDriver {
    fn host_func(&self, f: Box<dyn FnOnce() + Send>) -> Result<(), Error> {
        self.stream.push(Item::HostFn(f));
        Ok(())
    }

    fn alloc_flags(&self, n: usize) -> Result<(*mut u32, u64), Error> {
        // Host memory the mock "device" reads at the same address (a mapped
        // pinned page); leaked like the real pool's pages.
        let words: &'static mut [u32] = Box::leak(vec![0u32; n].into_boxed_slice());
        let p = words.as_mut_ptr();
        Ok((p, p as u64))
    }

    fn wait_value(&self, addr: u64, value: u32) -> Result<(), Error> {
        self.stream.push(Item::WaitValue(addr, value));
        Ok(())
    }

    fn flag_pool(&self) -> &Arc<FlagPool> {
        &self.pool
    }
}

/// Two ranks of one process, each ordering AllReduces with its own stream of
/// one mock GPU whose host functions share one callback thread: every result is
/// right and both streams drain. The blocking host-function wait that hung on
/// the H200 deadlocks here (rank 0's wait holds the callback thread that rank
/// 1's gate needs), which the bounded waits report as a failure naming the
/// stuck stream.
#[test]
fn streams_sharing_a_callback_thread_do_not_deadlock() {
    let cb = CallbackThread::start();
    let pool = FlagPool::new();
    let devs: Vec<Arc<MockCudaStream>> = (0..2)
        .map(|r| MockCudaStream::start(format!("rank{r}-stream"), cb.clone()))
        .collect();
    let (devs2, pool2) = (devs.clone(), pool.clone());
    let devs3 = devs.clone();
    let _watchdog = ferroccl_test_watchdog::Watchdog::arm(
        "streams_sharing_a_callback_thread_do_not_deadlock",
        BOUND * 3,
        move || {
            devs3
                .iter()
                .map(|d| {
                    let g = d.q.lock().unwrap_or_else(|e| e.into_inner());
                    format!(
                        "{}: doing {}; {} item(s) queued; stuck: {:?}\n",
                        d.name,
                        g.doing,
                        g.items.len(),
                        g.stuck
                    )
                })
                .collect()
        },
    );
    with_comms(2, 64 << 10, 2, move |comm| {
        let (r, n, dtype, op, count) = (comm.rank(), comm.nranks(), DataType::Float32, RedOp::Sum, 20_000usize);
        let dev = devs2[r].clone();
        if r == 1 {
            // The schedule that hung: rank 1's earlier work (a kernel) still
            // runs when rank 0's stream reaches the item after its gate (the
            // wait), so rank 1's gate reaches the callback thread after it.
            let d0 = devs2[0].clone();
            dev.push(Item::Kernel(Box::new(move || {
                let t0 = Instant::now();
                while d0.started.load(Ordering::SeqCst) < 2 && t0.elapsed() < BOUND {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })));
        }
        let s = Stream::new().on_device(Arc::new(FlagWaitStream::new(MockDriver {
            stream: dev.clone(),
            pool: pool2.clone(),
        })));
        let mut input = vec![0u8; count * dtype.size()];
        check::fill(&mut input, dtype, &op, r, 1);
        let want = check::expected(TestOp::AllReduce, dtype, &op, n, r, count, 1).expect("expected");
        // Several operations back to back, each read by later stream work: the
        // flag words are recycled between them.
        let outs: Vec<Arc<Mutex<Vec<u8>>>> = (0..4).map(|_| Arc::new(Mutex::new(vec![0u8; input.len()]))).collect();
        let seen: Vec<Arc<Mutex<Vec<u8>>>> = (0..4).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
        for (o, sn) in outs.iter().zip(&seen) {
            let op_ = o.lock().unwrap().as_mut_ptr();
            // SAFETY: the buffers live until the end of this closure, after both
            // the mock stream and `s` are synchronized.
            unsafe { comm.all_reduce(input.as_ptr(), op_, count, dtype, op, &s) }.expect("enqueue");
            let (o, sn) = (o.clone(), sn.clone());
            dev.push(Item::Kernel(Box::new(move || {
                *sn.lock().unwrap() = o.lock().unwrap().clone()
            })));
        }
        let synced = dev.synchronize();
        dev.close();
        if let Err(why) = synced {
            panic!("rank {r}: the caller's stream never drained (a cycle): {why}");
        }
        s.synchronize().expect("synchronize");
        for (i, sn) in seen.iter().enumerate() {
            let got = sn.lock().unwrap().clone();
            assert_eq!(
                check::count_wrong(dtype, &got, &want),
                0,
                "rank {r}: operation {i}'s output as the stream's later work read it"
            );
        }
    });
    drop((cb, pool, devs));
}
