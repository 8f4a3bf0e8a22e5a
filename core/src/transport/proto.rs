//! Protocols (NCCL's `NCCL_PROTO_LL`, `NCCL_PROTO_LL128`, `NCCL_PROTO_SIMPLE`,
//! `src/include/device.h`) and the `NCCL_PROTO` grammar (`src/graph/tuning.cc`,
//! `parseList`).
//!
//! Which protocol a collective uses is the tuner's choice in NCCL, per operation.
//! Here it is, for now, a property of each shared-memory connection, decided by
//! the receiving rank when it creates the connection's segment (see
//! [`super::shm`]): the network transport carries Simple only. `NCCL_PROTO`
//! narrows the choice as in NCCL; `tune::shm_protocol` applies it.

/// A wire protocol (NCCL §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Protocol {
    /// 8 bytes of data and two 4-byte flags per 16-byte line; the receiver polls
    /// the flags (`prims_ll.h`). `NCCL_PROTO_LL` (0).
    Ll = 0,
    /// 120 bytes of data and an 8-byte flag per 128-byte line (`prims_ll128.h`);
    /// not implemented. `NCCL_PROTO_LL128` (1).
    Ll128 = 1,
    /// Plain data in FIFO slots, published with a `tail` counter and returned with
    /// a `head` counter (`prims_simple.h`). `NCCL_PROTO_SIMPLE` (2).
    Simple = 2,
}

impl Protocol {
    /// NCCL's names (`ncclProtoStr`), in NCCL's index order.
    pub const ALL: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

    /// NCCL's name (`"LL"`, `"LL128"`, `"Simple"`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
            Protocol::Simple => "Simple",
        }
    }

    /// NCCL's `ncclProtoToString` spelling, as profilers get it (`"SIMPLE"`).
    pub fn upper_name(self) -> &'static std::ffi::CStr {
        match self {
            Protocol::Ll => c"LL",
            Protocol::Ll128 => c"LL128",
            Protocol::Simple => c"SIMPLE",
        }
    }

    /// The cost-table index (the `NCCL_PROTO_*` value).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The protocol of index `i` (0–2).
    pub fn from_index(i: usize) -> Option<Protocol> {
        Protocol::ALL.get(i).copied()
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The protocol shared-memory connections use by default: the faster on the
/// benchmark machine (BENCHMARKS.md, "Shared-memory transport").
pub(crate) const SHM_DEFAULT_PROTOCOL: Protocol = Protocol::Simple;
