//! `ncclCommSplit`: new communicators from groups of an existing one's ranks
//! (NCCL 2.30.7 `src/init.cc`, `ncclCommSplit` / `commGetSplitInfo`).
//!
//! Every rank of the parent calls [`Comm::split`] with a color (or none) and a
//! key. Ranks with the same color form one new communicator, ordered by key and
//! then by parent rank (NCCL's order); a rank without a color gets none. The
//! parent's bootstrap carries two all-gathers: the `(color, key)` of every rank,
//! then, from the first rank of each color, a fresh unique id that the members
//! of that color join with [`Comm::init_rank`].
//!
//! NCCL derives the child's bootstrap from the parent's (`bootstrapSplit`);
//! here the child's first rank starts an ordinary bootstrap root (on the
//! interface `NCCL_SOCKET_IFNAME` selects, never at `NCCL_COMM_ID`, which the
//! parent may already hold), so a child is exactly a communicator made by
//! `ncclCommInitRank`.

use super::{Comm, CommConfig, Error, Result};
use crate::bootstrap::{BootstrapConfig, NCCL_UNIQUE_ID_BYTES, UniqueId};

/// One rank's split request as exchanged: color (`-1` = none) and key, little-endian.
const REQUEST_BYTES: usize = 12;

fn encode_request(color: Option<u32>, key: i32) -> [u8; REQUEST_BYTES] {
    let mut b = [0u8; REQUEST_BYTES];
    b[..8].copy_from_slice(&color.map_or(-1i64, i64::from).to_le_bytes());
    b[8..].copy_from_slice(&key.to_le_bytes());
    b
}

fn decode_request(rank: usize, b: &[u8]) -> Result<(Option<u32>, i32)> {
    if b.len() != REQUEST_BYTES {
        return Err(Error::Remote(format!(
            "split: rank {rank} sent a request of {} bytes, expected {REQUEST_BYTES}",
            b.len()
        )));
    }
    let color = i64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let key = i32::from_le_bytes(b[8..].try_into().expect("4 bytes"));
    let color = match color {
        -1 => None,
        c => Some(u32::try_from(c).map_err(|_| Error::Remote(format!("split: rank {rank} sent color {c}")))?),
    };
    Ok((color, key))
}

/// The parent ranks that share `color`, in the child's rank order (key, then
/// parent rank).
fn members(requests: &[(Option<u32>, i32)], color: u32) -> Vec<usize> {
    let mut m: Vec<usize> = (0..requests.len()).filter(|&r| requests[r].0 == Some(color)).collect();
    m.sort_by_key(|&r| (requests[r].1, r));
    m
}

impl Comm {
    /// `ncclCommSplit`: the communicator of the parent ranks that pass the same
    /// `color` (`None` = `NCCL_SPLIT_NOCOLOR`: this rank joins none and gets
    /// `Ok(None)`), ranked by `key` and then by parent rank. Every rank of this
    /// communicator must call it (it is a collective over the parent's
    /// bootstrap); `config` is the child's.
    ///
    /// Errors: the parent's bootstrap failing (a rank that never calls split
    /// makes the others fail after the communicator's timeout, naming it);
    /// [`Comm::init_rank`]'s errors for the child.
    pub fn split(&self, color: Option<u32>, key: i32, config: CommConfig) -> Result<Option<Comm>> {
        let me = self.rank();
        let all = self.inner.bootstrap.allgather(&encode_request(color, key))?;
        let requests = all
            .iter()
            .enumerate()
            .map(|(r, b)| decode_request(r, b))
            .collect::<Result<Vec<_>>>()?;
        // The child's root: a plain bootstrap root started by its first rank,
        // never at NCCL_COMM_ID (the parent's root may hold that address).
        let mut bcfg = match &config.bootstrap {
            Some(b) => b.clone(),
            None => BootstrapConfig::from_params(crate::config::Config::global())
                .map_err(|e| Error::InvalidArgument(format!("split: bootstrap parameters: {e}")))?,
        };
        bcfg.comm_id = None;
        let mine = color.map(|c| members(&requests, c)).unwrap_or_default();
        let leads = mine.first() == Some(&me);
        let id = if leads {
            Some(crate::bootstrap::get_unique_id(&bcfg)?)
        } else {
            None
        };
        let ids = self
            .inner
            .bootstrap
            .allgather(id.as_ref().map_or(&[][..], |i| &i.as_bytes()[..]))?;
        let Some(&first) = mine.first() else {
            return Ok(None);
        };
        let bytes: [u8; NCCL_UNIQUE_ID_BYTES] = ids[first].as_slice().try_into().map_err(|_| {
            Error::Remote(format!(
                "split: rank {first} sent a unique id of {} bytes, expected {NCCL_UNIQUE_ID_BYTES}",
                ids[first].len()
            ))
        })?;
        let child_rank = mine
            .iter()
            .position(|&r| r == me)
            .expect("this rank is a member of its color");
        let mut config = config;
        config.bootstrap = Some(bcfg);
        crate::log::nccl_info!(
            INIT,
            "ncclCommSplit: parent rank {me} color {} key {key} -> rank {child_rank} of {}",
            color.map_or(-1, i64::from),
            mine.len()
        );
        Comm::init_rank(mine.len(), &UniqueId::from_bytes(bytes), child_rank, config).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_members_follow_key_then_rank() {
        for (c, k) in [(None, 0), (Some(0), -5), (Some(u32::MAX), i32::MAX)] {
            assert_eq!(decode_request(0, &encode_request(c, k)).unwrap(), (c, k));
        }
        assert!(decode_request(3, &[0u8; 5]).unwrap_err().to_string().contains("rank 3"));
        let reqs = [(Some(1), 5), (None, 0), (Some(1), 2), (Some(0), 0), (Some(1), 2)];
        assert_eq!(members(&reqs, 1), vec![2, 4, 0]);
        assert_eq!(members(&reqs, 0), vec![3]);
        assert!(members(&reqs, 7).is_empty());
    }
}
