//! Protocols (NCCL's `NCCL_PROTO_LL`, `NCCL_PROTO_LL128`, `NCCL_PROTO_SIMPLE`,
//! `src/include/device.h`) and the `NCCL_PROTO` grammar (`src/graph/tuning.cc`,
//! `parseList`).
//!
//! Which protocol a collective uses is the tuner's choice in NCCL, per operation.
//! Here it is, for now, a property of each shared-memory connection, decided by
//! the receiving rank when it creates the connection's segment (see
//! [`super::shm`]): the network transport carries Simple only. `NCCL_PROTO`
//! narrows the choice as in NCCL; [`shm_protocol`] applies it.

use crate::error::Error;

/// A wire protocol (NCCL §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Protocol {
    /// 8 bytes of data and two 4-byte flags per 16-byte line; the receiver polls
    /// the flags (`prims_ll.h`).
    Ll,
    /// 120 bytes of data and an 8-byte flag per 128-byte line (`prims_ll128.h`);
    /// not implemented.
    Ll128,
    /// Plain data in FIFO slots, published with a `tail` counter and returned with
    /// a `head` counter (`prims_simple.h`).
    Simple,
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
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// NCCL's collective names that may prefix an `NCCL_PROTO` entry (`ncclFuncStr`).
const FUNCS: [&str; 5] = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"];

/// Which protocols `NCCL_PROTO` enables, per collective (`[function][protocol]`,
/// indices as [`FUNCS`] and [`Protocol::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProtoEnable(pub [[bool; 3]; 5]);

impl ProtoEnable {
    /// Every protocol enabled (no `NCCL_PROTO`).
    pub(crate) fn all() -> ProtoEnable {
        ProtoEnable([[true; 3]; 5])
    }

    /// Whether `p` is enabled for at least one collective.
    pub(crate) fn any(&self, p: Protocol) -> bool {
        let i = Protocol::ALL.iter().position(|&q| q == p).expect("known protocol");
        self.0.iter().any(|f| f[i])
    }
}

/// Parses `NCCL_PROTO` as NCCL's `parseList` does: entries separated by `;`,
/// each an optional collective prefix and `:`, then a comma-separated list of
/// protocol names (case-insensitive), optionally preceded by `^` (enable all
/// but these). Only the first entry may lack a prefix; it applies to every
/// collective. `"LL,Simple;allreduce:^LL"`: LL and Simple everywhere, everything
/// but LL for AllReduce.
///
/// Errors: [`Error::InvalidUsage`] naming the unknown token, or a prefix-less
/// entry after the first (NCCL's `ncclInvalidUsage`).
pub(crate) fn parse_nccl_proto(s: &str) -> Result<ProtoEnable, Error> {
    let mut en = ProtoEnable::all();
    for (i, entry) in s.split(';').enumerate() {
        if entry.is_empty() {
            continue;
        }
        let (prefix, list) = match entry.split_once(':') {
            Some((p, l)) => (Some(p), l),
            None if i == 0 => (None, entry),
            None => {
                return Err(Error::InvalidUsage(format!(
                    "NCCL_PROTO=\"{s}\": all entries except the first must have a prefix (a collective name and ':')"
                )));
            }
        };
        let (set, list) = match list.strip_prefix('^') {
            Some(rest) => (false, rest),
            None => (true, list),
        };
        let mut protos = Vec::new();
        for tok in list.split(',').filter(|t| !t.is_empty()) {
            let p = Protocol::ALL
                .iter()
                .position(|p| p.name().eq_ignore_ascii_case(tok))
                .ok_or_else(|| {
                    Error::InvalidUsage(format!(
                        "NCCL_PROTO=\"{s}\": unrecognized protocol \"{tok}\" (expected LL, LL128 or Simple)"
                    ))
                })?;
            protos.push(p);
        }
        let mut found = false;
        for (f, name) in FUNCS.iter().enumerate() {
            if prefix.is_some_and(|p| !p.eq_ignore_ascii_case(name)) {
                continue;
            }
            found = true;
            en.0[f] = [!set; 3];
            for &p in &protos {
                en.0[f][p] = set;
            }
        }
        if !found {
            return Err(Error::InvalidUsage(format!(
                "NCCL_PROTO=\"{s}\": unrecognized collective \"{}\" (expected one of {})",
                prefix.unwrap_or_default(),
                FUNCS.join(", ")
            )));
        }
    }
    Ok(en)
}

/// The protocol shared-memory connections use by default: the faster on the
/// benchmark machine (BENCHMARKS.md, "Shared-memory transport").
pub(crate) const SHM_DEFAULT_PROTOCOL: Protocol = Protocol::Simple;

/// The protocol this rank's shared-memory receive connections use: the default
/// ([`SHM_DEFAULT_PROTOCOL`]) when `NCCL_PROTO` enables it for some collective,
/// else the other of Simple and LL if enabled.
///
/// Errors: [`Error::InvalidUsage`] when `NCCL_PROTO` is malformed or enables
/// neither Simple nor LL (LL128 is not implemented).
pub(crate) fn shm_protocol(nccl_proto: Option<&str>) -> Result<Protocol, Error> {
    let en = match nccl_proto {
        Some(s) if !s.trim().is_empty() => parse_nccl_proto(s.trim())?,
        _ => return Ok(SHM_DEFAULT_PROTOCOL),
    };
    let other = match SHM_DEFAULT_PROTOCOL {
        Protocol::Simple => Protocol::Ll,
        _ => Protocol::Simple,
    };
    [SHM_DEFAULT_PROTOCOL, other]
        .into_iter()
        .find(|&p| en.any(p))
        .ok_or_else(|| {
            Error::InvalidUsage(format!(
                "NCCL_PROTO=\"{}\" enables neither Simple nor LL, the protocols of the shared-memory \
                 transport (LL128 is not implemented)",
                nccl_proto.unwrap_or_default()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_proto_grammar_follows_parse_list() {
        let e = parse_nccl_proto("LL,Simple;allreduce:^LL").unwrap();
        assert_eq!(e.0[0], [true, false, true]);
        assert_eq!(e.0[4], [false, true, true]);
        let e = parse_nccl_proto("^ll128").unwrap();
        assert!(e.0.iter().all(|f| *f == [true, false, true]));
        let e = parse_nccl_proto("simple").unwrap();
        assert!(e.any(Protocol::Simple) && !e.any(Protocol::Ll));
        let m = parse_nccl_proto("LL,Fast").unwrap_err().to_string();
        assert!(m.contains("\"Fast\""), "{m}");
        let m = parse_nccl_proto("LL;Simple").unwrap_err().to_string();
        assert!(m.contains("prefix"), "{m}");
        let m = parse_nccl_proto("alltoall:LL").unwrap_err().to_string();
        assert!(m.contains("\"alltoall\""), "{m}");
    }

    #[test]
    fn shm_protocol_honours_nccl_proto() {
        assert_eq!(shm_protocol(None).unwrap(), SHM_DEFAULT_PROTOCOL);
        assert_eq!(shm_protocol(Some("LL")).unwrap(), Protocol::Ll);
        assert_eq!(shm_protocol(Some("^LL")).unwrap(), Protocol::Simple);
        assert_eq!(shm_protocol(Some("Simple")).unwrap(), Protocol::Simple);
        assert_eq!(shm_protocol(Some("allreduce:LL")).unwrap(), SHM_DEFAULT_PROTOCOL);
        let m = shm_protocol(Some("LL128")).unwrap_err().to_string();
        assert!(m.contains("neither Simple nor LL"), "{m}");
    }
}
