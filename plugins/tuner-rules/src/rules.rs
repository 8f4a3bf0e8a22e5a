//! Rule files: parsing (TOML, and the CSV format of NCCL's example tuner) and
//! matching. Pure code, no plugin ABI.
//!
//! A rule says: for this collective, in this size range, on this many nodes and
//! ranks (and optionally this `numPipeOps` / `regBuff`), run this algorithm and
//! protocol, on this many channels, with this chunk size. The first rule that
//! matches and names a table entry NCCL considers possible wins (as in NCCL's
//! `plugins/tuner/example/plugin.c`).

use std::path::Path;

use serde::Deserialize;

/// `ncclFunc_t` values of the tuned collectives.
pub const FUNCS: [&str; 5] = ["broadcast", "reduce", "allgather", "reducescatter", "allreduce"];
/// Algorithm keywords in `NCCL_ALGO_*` order (NCCL's example spelling).
pub const ALGOS: [&str; 7] = [
    "tree",
    "ring",
    "collnet_direct",
    "collnet_chain",
    "nvls",
    "nvls_tree",
    "pat",
];
/// `NCCL_ALGO` spellings accepted too (`ncclAlgoStr`).
const ALGOS_NCCL: [&str; 7] = [
    "tree",
    "ring",
    "collnetdirect",
    "collnetchain",
    "nvls",
    "nvlstree",
    "pat",
];
/// Protocol keywords in `NCCL_PROTO_*` order.
pub const PROTOS: [&str; 3] = ["ll", "ll128", "simple"];

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `ncclFunc_t` (0–4).
    pub func: usize,
    /// Smallest `nBytes`, inclusive.
    pub min_bytes: u64,
    /// Largest `nBytes`, inclusive.
    pub max_bytes: u64,
    /// `NCCL_ALGO_*`.
    pub algo: usize,
    /// `NCCL_PROTO_*`.
    pub proto: usize,
    /// Channels (`None` = keep the host's).
    pub channels: Option<i32>,
    /// Nodes to match (`None` = any).
    pub nodes: Option<usize>,
    /// Ranks to match (`None` = any).
    pub ranks: Option<usize>,
    /// `numPipeOps` to match (`None` = any).
    pub pipe_ops: Option<i32>,
    /// `regBuff` to match (`None` = any).
    pub reg_buff: Option<bool>,
    /// Chunk size answered by `getChunkSize` (v6) when this rule's collective,
    /// algorithm and protocol are the ones chosen (`None` = keep the host's).
    pub chunk_size: Option<usize>,
    /// Where the rule comes from (`file:line`), for logs.
    pub origin: String,
}

/// Why a rule file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// The file could not be read.
    #[error("cannot read tuner rules {file}: {why}")]
    Read {
        /// The file.
        file: String,
        /// The OS error.
        why: String,
    },
    /// A line or field is not what the format says.
    #[error("{origin}: {why}")]
    Bad {
        /// `file:line` (CSV) or `file: rule N` (TOML).
        origin: String,
        /// What was wrong.
        why: String,
    },
}

fn keyword(what: &str, v: &str, list: &[&str], alt: &[&str], origin: &str) -> Result<usize, RulesError> {
    let l = v.trim().to_ascii_lowercase();
    list.iter()
        .position(|k| *k == l)
        .or_else(|| alt.iter().position(|k| *k == l))
        .ok_or_else(|| RulesError::Bad {
            origin: origin.to_owned(),
            why: format!("unknown {what} {v:?} (expected one of {})", list.join(", ")),
        })
}

impl Rule {
    /// Whether the rule applies to a `getCollInfo` call.
    pub fn matches(
        &self,
        func: usize,
        nbytes: u64,
        nnodes: usize,
        nranks: usize,
        pipe_ops: i32,
        reg_buff: bool,
    ) -> bool {
        self.func == func
            && (self.min_bytes..=self.max_bytes).contains(&nbytes)
            && self.nodes.is_none_or(|n| n == nnodes)
            && self.ranks.is_none_or(|n| n == nranks)
            && self.pipe_ops.is_none_or(|n| n == pipe_ops)
            && self.reg_buff.is_none_or(|b| b == reg_buff)
    }
}

/// Parses NCCL's example-tuner CSV (`plugins/tuner/example/README.md`):
/// `collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]`,
/// `#` comments and empty lines skipped, `-1` = any / keep the default.
/// Unlike the example (which maps unknown names to defaults), an unknown name or
/// a line with the wrong number of fields is an error naming the line.
pub fn parse_csv(text: &str, file: &str) -> Result<Vec<Rule>, RulesError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let origin = format!("{file}:{}", i + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        if !(8..=10).contains(&f.len()) {
            return Err(RulesError::Bad {
                origin,
                why: format!(
                    "{} fields; expected 8 to 10: collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]",
                    f.len()
                ),
            });
        }
        let num = |k: usize, what: &str| -> Result<i64, RulesError> {
            f[k].parse::<i64>().map_err(|_| RulesError::Bad {
                origin: origin.clone(),
                why: format!("{what} {:?} is not an integer", f[k]),
            })
        };
        let any = |v: i64| (v >= 0).then_some(v);
        let (min, max) = (num(1, "min_bytes")?, num(2, "max_bytes")?);
        if min < 0 || max < min {
            return Err(RulesError::Bad {
                origin,
                why: format!("size range {min}..{max} is empty or negative"),
            });
        }
        let channels = num(5, "channels")?;
        out.push(Rule {
            func: keyword("collective", f[0], &FUNCS, &[], &origin)?,
            min_bytes: min as u64,
            max_bytes: max as u64,
            algo: keyword("algorithm", f[3], &ALGOS, &ALGOS_NCCL, &origin)?,
            proto: keyword("protocol", f[4], &PROTOS, &[], &origin)?,
            channels: (channels > 0).then_some(channels as i32),
            nodes: any(num(6, "nNodes")?).map(|v| v as usize),
            ranks: any(num(7, "nRanks")?).map(|v| v as usize),
            pipe_ops: if f.len() >= 9 {
                any(num(8, "numPipeOps")?).map(|v| v as i32)
            } else {
                None
            },
            reg_buff: if f.len() >= 10 {
                any(num(9, "regBuff")?).map(|v| v != 0)
            } else {
                None
            },
            chunk_size: None,
            origin,
        });
    }
    Ok(out)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    #[serde(default)]
    rule: Vec<TomlRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlRule {
    collective: String,
    #[serde(default)]
    min_bytes: u64,
    #[serde(default = "u64_max")]
    max_bytes: u64,
    algorithm: String,
    protocol: String,
    channels: Option<i32>,
    nodes: Option<usize>,
    ranks: Option<usize>,
    pipe_ops: Option<i32>,
    reg_buff: Option<bool>,
    chunk_size: Option<usize>,
}

fn u64_max() -> u64 {
    u64::MAX
}

/// Parses the TOML rule format:
///
/// ```toml
/// [[rule]]
/// collective = "allreduce"   # broadcast, reduce, allgather, reducescatter, allreduce
/// min_bytes = 0              # inclusive; default 0
/// max_bytes = 65536          # inclusive; default: no limit
/// nodes = 1                  # optional: only on this many nodes
/// ranks = 8                  # optional: only with this many ranks
/// pipe_ops = 1               # optional: only for this numPipeOps
/// reg_buff = false           # optional: only for (un)registered buffers
/// algorithm = "tree"         # tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat
/// protocol = "simple"        # ll, ll128, simple
/// channels = 2               # optional
/// chunk_size = 131072        # optional (getChunkSize, ncclTuner v6)
/// ```
pub fn parse_toml(text: &str, file: &str) -> Result<Vec<Rule>, RulesError> {
    let doc: TomlFile = toml::from_str(text).map_err(|e| RulesError::Bad {
        origin: file.to_owned(),
        why: e.to_string().trim().to_owned(),
    })?;
    doc.rule
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let origin = format!("{file}: rule {}", i + 1);
            if r.max_bytes < r.min_bytes {
                return Err(RulesError::Bad {
                    origin,
                    why: format!("max_bytes {} is below min_bytes {}", r.max_bytes, r.min_bytes),
                });
            }
            if r.channels.is_some_and(|c| c <= 0) || r.chunk_size == Some(0) {
                return Err(RulesError::Bad {
                    origin,
                    why: "channels and chunk_size must be positive (leave them out to keep the host's)".into(),
                });
            }
            Ok(Rule {
                func: keyword("collective", &r.collective, &FUNCS, &[], &origin)?,
                min_bytes: r.min_bytes,
                max_bytes: r.max_bytes,
                algo: keyword("algorithm", &r.algorithm, &ALGOS, &ALGOS_NCCL, &origin)?,
                proto: keyword("protocol", &r.protocol, &PROTOS, &[], &origin)?,
                channels: r.channels,
                nodes: r.nodes,
                ranks: r.ranks,
                pipe_ops: r.pipe_ops,
                reg_buff: r.reg_buff,
                chunk_size: r.chunk_size,
                origin,
            })
        })
        .collect()
}

/// Reads a rule file: TOML when the name ends in `.toml`, NCCL's CSV otherwise.
/// A missing file is `Ok(None)` (NCCL's example: "not found, using defaults").
pub fn load(path: &Path) -> Result<Option<Vec<Rule>>, RulesError> {
    let file = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(RulesError::Read {
                file,
                why: e.to_string(),
            });
        }
    };
    let toml = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"));
    let rules = if toml {
        parse_toml(&text, &file)?
    } else {
        parse_csv(&text, &file)?
    };
    Ok(Some(rules))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example configuration of NCCL's `plugins/tuner/example/README.md`.
    const NCCL_EXAMPLE: &str = "\
# Single-node, small allreduce: use tree algorithm, registered buffers only
allreduce,0,65536,tree,simple,2,1,-1,-1,1

# 4-node, 32-rank setup: medium allreduce, single pipeline op, non-registered buffers
allreduce,65537,1048576,ring,simple,4,4,32,1,0

# Any topology: large allreduce with LL128, multiple pipeline ops, any buffer type
allreduce,1048577,4294967295,ring,ll128,-1,-1,-1,4,-1

# Single-node broadcast: prefer tree, any pipeOps, registered buffers (backward compatible)
broadcast,0,32768,tree,simple,-1,1,-1

# Multi-node broadcast: optimized for non-registered buffers, single pipeline op
broadcast,32769,4294967295,ring,simple,2,-1,-1,1,0
";

    #[test]
    fn nccl_example_file_carries_over() {
        let r = parse_csv(NCCL_EXAMPLE, "nccl_tuner.conf").unwrap();
        assert_eq!(r.len(), 5);
        assert_eq!(
            r[0],
            Rule {
                func: 4,
                min_bytes: 0,
                max_bytes: 65536,
                algo: 0,
                proto: 2,
                channels: Some(2),
                nodes: Some(1),
                ranks: None,
                pipe_ops: None,
                reg_buff: Some(true),
                chunk_size: None,
                origin: "nccl_tuner.conf:2".into(),
            }
        );
        assert_eq!(r[2].proto, 1);
        assert_eq!(r[2].channels, None);
        assert_eq!(r[2].pipe_ops, Some(4));
        assert_eq!(r[2].reg_buff, None);
        // 8 fields: any numPipeOps and regBuff.
        assert_eq!((r[3].func, r[3].pipe_ops, r[3].reg_buff), (0, None, None));
        assert!(r[1].matches(4, 65537, 4, 32, 1, false));
        assert!(!r[1].matches(4, 65537, 4, 32, 1, true));
        assert!(!r[1].matches(4, 65537, 2, 32, 1, false));
        assert!(r[4].matches(0, 1 << 30, 7, 99, 1, false));
    }

    #[test]
    fn csv_errors_name_the_line() {
        let e = parse_csv("allreduce,0,10,tree,simple,1,1\n", "f.csv").unwrap_err();
        assert!(e.to_string().starts_with("f.csv:1: 7 fields"), "{e}");
        let e = parse_csv("# c\nallreduce,0,10,fast,simple,1,1,1\n", "f.csv").unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.csv:2: unknown algorithm \"fast\" (expected one of tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree, pat)"
        );
        let e = parse_csv("allreduce,10,1,tree,simple,1,1,1\n", "f.csv").unwrap_err();
        assert!(e.to_string().contains("empty or negative"), "{e}");
        // Spaces around fields are trimmed (the example does too); NCCL spellings accepted.
        let r = parse_csv(" AllReduce , 0 , 10 , NVLSTree , Simple , -1 , -1 , -1 \n", "f").unwrap();
        assert_eq!((r[0].algo, r[0].proto), (5, 2));
    }

    #[test]
    fn toml_rules() {
        let t = r#"
[[rule]]
collective = "allreduce"
max_bytes = 65536
nodes = 1
algorithm = "tree"
protocol = "simple"
channels = 1
chunk_size = 16384

[[rule]]
collective = "broadcast"
min_bytes = 1
algorithm = "ring"
protocol = "simple"
"#;
        let r = parse_toml(t, "r.toml").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].func, r[0].algo, r[0].proto, r[0].channels), (4, 0, 2, Some(1)));
        assert_eq!(r[0].chunk_size, Some(16384));
        assert_eq!((r[1].min_bytes, r[1].max_bytes), (1, u64::MAX));
        assert!(r[0].matches(4, 100, 1, 5, 3, true));
        assert!(!r[0].matches(4, 65537, 1, 5, 3, true));
        let e = parse_toml(
            "[[rule]]\ncollective = \"allreduce\"\nalgorithm = \"tree\"\nprotocol = \"simple\"\nchannel = 2\n",
            "x.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `channel`"), "{e}");
        let e = parse_toml(
            "[[rule]]\ncollective = \"alltoall\"\nalgorithm = \"tree\"\nprotocol = \"simple\"\n",
            "x.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.toml: rule 1: unknown collective \"alltoall\" (expected one of broadcast, reduce, allgather, reducescatter, allreduce)"
        );
    }

    #[test]
    fn missing_file_is_not_an_error() {
        assert_eq!(load(Path::new("/nonexistent/ferroccl-rules.toml")).unwrap(), None);
    }
}
