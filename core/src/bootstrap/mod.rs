//! Bootstrap: how ranks find each other before any transport exists (NCCL 2.30
//! `src/bootstrap.cc`; facts in `docs/reference/nccl-plugin-abi.md` §7).
//!
//! * [`get_unique_id`] starts a root listener on the bootstrap interface and returns
//!   the 128-byte [`UniqueId`] holding its address; with `NCCL_COMM_ID`
//!   ([`BootstrapConfig::comm_id`]) it only encodes that address with [`NCCL_MAGIC`]
//!   and rank 0 starts the root inside [`Bootstrap::init`].
//! * [`Bootstrap::init`] sends the root this rank's listen addresses, receives its
//!   ring successor's address, connects the ring and all-gathers every rank's listen
//!   address. Then: [`Bootstrap::allgather`], tagged [`Bootstrap::send`] /
//!   [`Bootstrap::recv`], [`Bootstrap::barrier`], [`Bootstrap::broadcast`], and
//!   [`Bootstrap::exchange_among_survivors`] (a bounded all-to-all that tolerates dead
//!   ranks, for failure reports).
//! * Every connection starts with NCCL's generic handshake (u64 magic = the id's
//!   magic, u32 socket type Bootstrap = 1); every message is a 4-byte length-prefixed
//!   frame. Connections failing the handshake are logged and dropped.
//!
//! # Limits on what peers and callers can make this do
//! * nranks is at most [`MAX_NRANKS`]; every rank, count and length a peer sends is
//!   checked against what this rank knows before it sizes anything, and allocations
//!   sized from input are fallible ([`BootstrapError::Alloc`]), never an abort.
//! * Each listener is one event-loop thread (mio) however many connections it holds;
//!   at most [`MAX_PENDING_CONNECTIONS`] unauthenticated connections are kept (the
//!   oldest is dropped, logged); `accept` failures for lack of descriptors back off
//!   and retry, and a later timeout says the listener ran out of file descriptors.
//!
//! # Time bound
//! Every wait ends within [`BootstrapConfig::timeout`] (`FERROCCL_TIMEOUT_SEC`) plus
//! [`TIMEOUT_SLACK`]: connecting (retries stop at the deadline, or after
//! `NCCL_SOCKET_RETRY_CNT` retries as in NCCL, whichever comes first), the root's
//! reply (`timeout` + slack, so that the root's own report of missing ranks, sent
//! `timeout` after the first rank arrived, can still arrive), every receive
//! (`timeout`, then up to the slack to find out who is to blame). A raised abort
//! flag ends every wait within ~50 ms with [`BootstrapError::Aborted`].
//!
//! # Blame
//! Errors about one peer carry it: [`BootstrapError::culprit`]. A receive that times
//! out probes the awaited rank (answered by its listener thread, even while its
//! application thread is blocked): if it waits on another rank, that one is probed,
//! and so on, so every survivor names the rank that actually stopped. A rank whose
//! bootstrap operation fails because of a peer tells the ranks it is connected to
//! (a failure notice), so their waits fail at once naming the same peer.
//!
//! The root's gathering logic is the sans-IO [`RootGather`]; connection decoding is
//! the sans-IO `frame::Inbound`; the socket layer is mio for listeners and blocking
//! `std::net` for outgoing connections.

mod comm;
mod error;
mod frame;
mod id;
mod iface;
mod reactor;
mod root;
mod wire;

use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub use comm::{Bootstrap, MAX_MESSAGE_BYTES, MAX_SURVIVOR_BYTES, PROBE_WAIT, SurvivorStatus, Survivors};
pub use error::{BootstrapError, Result};
pub use id::{
    NCCL_MAGIC, NCCL_UNIQUE_ID_BYTES, SOCKET_ADDRESS_BYTES, UniqueId, decode_socket_address, encode_socket_address,
    parse_comm_id,
};
pub use iface::{
    IfnameFilter, Interface, MAX_IFS, SocketFamily, bootstrap_interface, find_interfaces, list_interfaces,
    select_interfaces,
};
pub use reactor::MAX_PENDING_CONNECTIONS;
pub use root::{CONNECT_INFO_BYTES, EXT_INFO_BYTES, Outgoing, RankInfo, Reply, RootGather};
pub use wire::{HANDSHAKE_BYTES, SOCKET_TYPE_BOOTSTRAP, check_handshake, encode_handshake};

/// Default `NCCL_SOCKET_RETRY_CNT`.
pub const DEFAULT_RETRY_COUNT: u32 = 34;
/// Default `NCCL_SOCKET_RETRY_SLEEP_MSEC`.
pub const DEFAULT_RETRY_SLEEP: Duration = Duration::from_millis(100);
/// Default bound on every bootstrap wait (`FERROCCL_TIMEOUT_SEC`'s default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The most any bootstrap wait may run past [`BootstrapConfig::timeout`]: room for
/// the root's report of missing ranks (sent `timeout` after the first rank arrived)
/// to reach the ranks, and for a timed-out receive to probe who is to blame.
pub const TIMEOUT_SLACK: Duration = Duration::from_secs(5);
/// Largest nranks the bootstrap accepts (2^20 = 1,048,576).
///
/// NCCL has no hard cap (`int nranks`) but allocates per rank at the root and in
/// every rank; so do we (about 100 bytes per rank at init, fallibly). The cap is ten
/// times the largest published jobs (~10^5 GPUs), so a bad `nranks` (from a caller,
/// `WORLD_SIZE`, or a peer's record) is an error instead of a multi-gigabyte request.
pub const MAX_NRANKS: usize = 1 << 20;

/// Everything the bootstrap needs, as plain values (the runtime fills it from its
/// config; nothing here reads the environment).
#[derive(Clone, Debug)]
pub struct BootstrapConfig {
    /// `NCCL_SOCKET_IFNAME` (prefix list, `^` exclude, `=` exact); `None` = auto.
    pub ifname: Option<String>,
    /// `NCCL_SOCKET_FAMILY`.
    pub family: SocketFamily,
    /// Bound on every wait (root gathering, root reply, each receive, connects).
    pub timeout: Duration,
    /// `NCCL_COMM_ID` as given (`<ip-or-host>:<port>`, `[<ipv6>]:<port>`).
    pub comm_id: Option<String>,
    /// Unique-id magic override for [`get_unique_id`]; `None` = random, or
    /// [`NCCL_MAGIC`] when `comm_id` is set.
    pub magic: Option<u64>,
    /// `NCCL_SOCKET_RETRY_CNT`: connect retries on transient errors.
    pub retry_count: u32,
    /// `NCCL_SOCKET_RETRY_SLEEP_MSEC`: retry *n* sleeps `n × retry_sleep`.
    pub retry_sleep: Duration,
    /// Abort flag: once true, every blocked wait returns [`BootstrapError::Aborted`]
    /// within ~50 ms. Share it with the communicator's abort flag; clones of the
    /// config share the same flag.
    pub abort: Arc<AtomicBool>,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            ifname: None,
            family: SocketFamily::Any,
            timeout: DEFAULT_TIMEOUT,
            comm_id: None,
            magic: None,
            retry_count: DEFAULT_RETRY_COUNT,
            retry_sleep: DEFAULT_RETRY_SLEEP,
            abort: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl BootstrapConfig {
    /// Loopback-only config (`ifname = "lo"`, IPv4) with the given timeout; for tests
    /// and single-host use.
    pub fn loopback(timeout: Duration) -> Self {
        BootstrapConfig {
            ifname: Some("lo".into()),
            family: SocketFamily::Inet,
            timeout,
            ..Default::default()
        }
    }

    /// The bootstrap settings from the runtime's parameters: `NCCL_SOCKET_IFNAME`,
    /// `NCCL_SOCKET_FAMILY`, `NCCL_COMM_ID`, `NCCL_SOCKET_RETRY_CNT`,
    /// `NCCL_SOCKET_RETRY_SLEEP_MSEC` and `FERROCCL_TIMEOUT_SEC` (environment, then
    /// `nccl.conf`), with a fresh abort flag. For programs that create the unique id
    /// themselves (the root gets the same timeout as the ranks).
    ///
    /// Errors: a parameter outside its range (the config layer's message).
    pub fn from_params(cfg: &crate::config::Config) -> std::result::Result<Self, String> {
        use crate::config::{IntParamExt, StrParamExt, params};
        let int = |p: &crate::config::IntParam| p.get(cfg).map_err(|e| e.to_string());
        let text = |p: &crate::config::StrParam| p.get(cfg).map(str::to_string);
        Ok(BootstrapConfig {
            ifname: text(&params::SOCKET_IFNAME),
            family: SocketFamily::from_nccl(params::SOCKET_FAMILY.get(cfg)),
            timeout: Duration::from_secs(int(&params::TIMEOUT_SEC)?.max(1) as u64),
            comm_id: text(&params::COMM_ID),
            magic: None,
            retry_count: int(&params::SOCKET_RETRY_CNT)?.max(0) as u32,
            retry_sleep: Duration::from_millis(int(&params::SOCKET_RETRY_SLEEP_MSEC)?.max(0) as u64),
            abort: Arc::new(AtomicBool::new(false)),
        })
    }

    pub(crate) fn retry(&self) -> wire::Retry {
        wire::Retry {
            count: self.retry_count,
            sleep: self.retry_sleep,
        }
    }

    /// The parsed `comm_id`, if set.
    pub fn comm_id_addr(&self) -> Result<Option<SocketAddr>> {
        self.comm_id.as_deref().map(parse_comm_id).transpose()
    }

    /// The local address bootstrap sockets bind to (port 0), per the interface rules.
    pub fn bind_address(&self) -> Result<SocketAddr> {
        let hint = self.comm_id_addr()?;
        let iface = bootstrap_interface(self.ifname.as_deref(), self.family, hint.as_ref())?;
        Ok(bind_addr_for(&iface))
    }
}

fn bind_addr_for(iface: &Interface) -> SocketAddr {
    match iface.addr {
        IpAddr::V4(a) => SocketAddr::new(IpAddr::V4(a), 0),
        IpAddr::V6(a) => {
            let link_local = (a.segments()[0] & 0xffc0) == 0xfe80;
            let scope = if link_local {
                std::ffi::CString::new(iface.name.as_str())
                    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
                    .map(|c| unsafe { libc::if_nametoindex(c.as_ptr()) })
                    .unwrap_or(0)
            } else {
                0
            };
            SocketAddr::V6(SocketAddrV6::new(a, 0, 0, scope))
        }
    }
}

/// `ncclGetUniqueId`: with `config.comm_id` set, encodes that address with
/// [`NCCL_MAGIC`] (or `config.magic`) and starts nothing; otherwise binds an
/// ephemeral port on the bootstrap interface, starts the root there in a detached
/// thread and returns an id holding its address and a random magic.
///
/// The root waits indefinitely for its first valid record (it cannot know when the
/// ranks start); from then on it gives up after `config.timeout`, telling the ranks
/// that arrived which ranks never connected and which records it rejected. It learns
/// nranks from the first valid record (as NCCL's root does).
/// Errors: bad `comm_id`, no matching interface, bind failure.
pub fn get_unique_id(config: &BootstrapConfig) -> Result<UniqueId> {
    if let Some(addr) = config.comm_id_addr()? {
        return Ok(UniqueId::new(config.magic.unwrap_or(NCCL_MAGIC), addr));
    }
    let magic = config.magic.unwrap_or_else(id::random_magic);
    let listener = wire::listen(config.bind_address()?)?;
    let addr = listener
        .local_addr()
        .map_err(|e| BootstrapError::io("root listener address", e))?;
    root::spawn_root(
        listener,
        root::RootParams {
            magic,
            timeout: config.timeout,
            retry: config.retry(),
            abort: config.abort.clone(),
            nranks: None,
        },
    )?;
    tracing::info!(target: "ferroccl::bootstrap", "bootstrap root listening on {addr}");
    Ok(UniqueId::new(magic, addr))
}
