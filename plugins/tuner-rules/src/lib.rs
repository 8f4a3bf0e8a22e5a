//! `libnccl-tuner-rules.so`: a tuner plugin (every `ncclTuner_v2` … `_v6`) that
//! pins choices from a rule file, for NCCL and for ferroccl.
//!
//! * The file is `NCCL_TUNER_CONFIG_FILE`, else `nccl_tuner.conf` in the working
//!   directory (as NCCL's example tuner). A name ending in `.toml` is read as TOML
//!   rules ([`rules::parse_toml`]); anything else as the CSV format of NCCL's
//!   `plugins/tuner/example` ([`rules::parse_csv`]), so existing rule files carry over.
//! * `getCollInfo`: the first rule matching the collective, size, node and rank
//!   counts (and `numPipeOps` / `regBuff` when given) whose table entry is not -1
//!   sets that entry to 0.0 and, if it names channels, `*nChannels`.
//! * `getChunkSize` (v6): a rule with `chunk_size` for the chosen collective,
//!   algorithm and protocol whose size range holds the part's bytes answers it.
//! * A missing file means no rules (logged); a malformed one fails `init` with
//!   `ncclInvalidUsage` naming the file and line.
//!
//! Differences from NCCL's example: unknown names are errors instead of silent
//! defaults, and `*nChannels` is left alone (0) when no rule applies.

pub mod rules;

use std::ffi::CStr;
use std::path::PathBuf;

use ferroccl_plugin_api::abi;
use ferroccl_plugin_api::sdk::{CostTable, NetError, NetResult, Tuner, TunerInit};
use ferroccl_plugin_api::{net_info, net_trace};
use rules::{ALGOS, FUNCS, PROTOS, Rule};

/// `NCCL_TUNING` subsystem flag.
const NCCL_TUNING: u64 = 0x40;

/// The rule-file tuner of one communicator.
#[derive(Debug)]
pub struct RulesTuner {
    rules: Vec<Rule>,
    nranks: usize,
    nnodes: usize,
}

ferroccl_plugin_api::params! {
    /// The plugin's parameters, exported as `ferrocclParams_v1`.
    pub static PARAMS = [
        /// Also the CSV file of NCCL's example tuner (`plugins/tuner/example`).
        TUNER_CONFIG_FILE: str "NCCL_TUNER_CONFIG_FILE" = Some("nccl_tuner.conf"), "rule file of the rules tuner (TOML or NCCL's example CSV)";
    ];
}
ferroccl_plugin_api::export_params!(PARAMS);

/// The rule file in use: `NCCL_TUNER_CONFIG_FILE` or `nccl_tuner.conf`.
pub fn config_file() -> PathBuf {
    std::env::var_os(TUNER_CONFIG_FILE.name)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(TUNER_CONFIG_FILE.default.unwrap_or_default()))
}

fn name(list: &[&str], i: usize) -> String {
    list.get(i).map_or_else(|| format!("#{i}"), |s| (*s).to_owned())
}

impl RulesTuner {
    /// A tuner for `nranks` ranks on `nnodes` nodes with `rules`.
    pub fn new(rules: Vec<Rule>, nranks: usize, nnodes: usize) -> RulesTuner {
        RulesTuner { rules, nranks, nnodes }
    }

    /// `getCollInfo` on a table (see the crate docs); returns the rule applied.
    pub fn apply(
        &self,
        func: usize,
        nbytes: usize,
        pipe_ops: i32,
        reg_buff: bool,
        costs: &mut CostTable<'_>,
        n_channels: &mut i32,
    ) -> Option<&Rule> {
        for r in &self.rules {
            if !r.matches(func, nbytes as u64, self.nnodes, self.nranks, pipe_ops, reg_buff) {
                continue;
            }
            match costs.get(r.algo, r.proto) {
                Some(v) if v != abi::NCCL_ALGO_PROTO_IGNORE => {
                    costs.set(r.algo, r.proto, 0.0);
                    if let Some(c) = r.channels {
                        *n_channels = c;
                    }
                    return Some(r);
                }
                Some(_) => net_trace!(
                    NCCL_TUNING,
                    "TUNER/Rules: {}: {}/{} is not available for {} ({} bytes); trying the next rule",
                    r.origin,
                    name(&ALGOS, r.algo),
                    name(&PROTOS, r.proto),
                    name(&FUNCS, func),
                    nbytes
                ),
                None => net_trace!(
                    NCCL_TUNING,
                    "TUNER/Rules: {}: algorithm/protocol outside the host's {}x{} table",
                    r.origin,
                    costs.num_algo(),
                    costs.num_proto()
                ),
            }
        }
        None
    }
}

impl Tuner for RulesTuner {
    const NAME: &'static CStr = c"Rules";

    fn init(info: TunerInit<'_>) -> NetResult<Self> {
        let file = config_file();
        let rules = match rules::load(&file) {
            Ok(Some(r)) => {
                net_info!(
                    NCCL_TUNING,
                    "TUNER/Rules: loaded {} rule(s) from {} for {} ranks on {} node(s)",
                    r.len(),
                    file.display(),
                    info.n_ranks,
                    info.n_nodes
                );
                r
            }
            Ok(None) => {
                net_info!(
                    NCCL_TUNING,
                    "TUNER/Rules: config file {} not found, no rules",
                    file.display()
                );
                Vec::new()
            }
            Err(e) => return Err(NetError::InvalidUsage(e.to_string())),
        };
        Ok(RulesTuner::new(rules, info.n_ranks, info.n_nodes))
    }

    fn get_coll_info(
        &self,
        coll: abi::ncclFunc_t,
        n_bytes: usize,
        num_pipe_ops: i32,
        reg_buff: bool,
        costs: &mut CostTable<'_>,
        n_channels: &mut i32,
    ) -> NetResult<()> {
        let func = usize::try_from(coll.0).unwrap_or(usize::MAX);
        if let Some(r) = self.apply(func, n_bytes, num_pipe_ops, reg_buff, costs, n_channels) {
            net_trace!(
                NCCL_TUNING,
                "TUNER/Rules: {} {} bytes -> {}/{} channels {:?} ({})",
                name(&FUNCS, func),
                n_bytes,
                name(&ALGOS, r.algo),
                name(&PROTOS, r.proto),
                r.channels,
                r.origin
            );
        }
        Ok(())
    }

    fn get_chunk_size(
        &self,
        coll: abi::ncclFunc_t,
        n_bytes: usize,
        algo: i32,
        proto: i32,
        _n_channels: i32,
        chunk_size: &mut usize,
    ) -> NetResult<()> {
        let func = usize::try_from(coll.0).unwrap_or(usize::MAX);
        let hit = self.rules.iter().find(|r| {
            r.chunk_size.is_some()
                && r.func == func
                && r.algo as i32 == algo
                && r.proto as i32 == proto
                && (r.min_bytes..=r.max_bytes).contains(&(n_bytes as u64))
                && r.nodes.is_none_or(|n| n == self.nnodes)
                && r.ranks.is_none_or(|n| n == self.nranks)
        });
        if let Some(c) = hit.and_then(|r| r.chunk_size) {
            *chunk_size = c;
        }
        Ok(())
    }
}

ferroccl_plugin_api::export_tuner_plugin!(RulesTuner);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_usable_rule_wins() {
        let rules = rules::parse_csv(
            "allreduce,0,100,nvls,simple,4,-1,-1\nallreduce,0,100,tree,simple,3,-1,-1\nallreduce,0,100,ring,simple,-1,-1,-1\n",
            "t",
        )
        .unwrap();
        let t = RulesTuner::new(rules, 4, 1);
        let mut table = vec![abi::NCCL_ALGO_PROTO_IGNORE; 21];
        table[2] = 10.0; // Tree/Simple
        table[5] = 5.0; // Ring/Simple
        let mut costs = CostTable::new(&mut table, 7, 3).unwrap();
        let mut nch = 0;
        let r = t.apply(4, 64, 1, false, &mut costs, &mut nch).unwrap();
        // NVLS is -1 here: the tree rule applies.
        assert_eq!(r.algo, 0);
        assert_eq!(nch, 3);
        assert_eq!(costs.get(0, 2), Some(0.0));
        assert_eq!(costs.get(1, 2), Some(5.0));
        // Out of range: nothing changes.
        let mut nch = 0;
        assert!(t.apply(4, 101, 1, false, &mut costs, &mut nch).is_none());
        assert_eq!(nch, 0);
    }

    #[test]
    fn chunk_rule_applies_to_the_chosen_pair() {
        let rules = rules::parse_toml(
            "[[rule]]\ncollective = \"allreduce\"\nalgorithm = \"ring\"\nprotocol = \"simple\"\nchunk_size = 32768\n",
            "t.toml",
        )
        .unwrap();
        let t = RulesTuner::new(rules, 2, 1);
        let mut c = 1 << 20;
        t.get_chunk_size(abi::ncclFunc_t(4), 1 << 20, 1, 2, 1, &mut c).unwrap();
        assert_eq!(c, 32768);
        let mut c = 1 << 20;
        t.get_chunk_size(abi::ncclFunc_t(4), 1 << 20, 0, 2, 1, &mut c).unwrap();
        assert_eq!(c, 1 << 20);
    }
}
