//! `NCCL_ALGO` / `NCCL_PROTO`: NCCL's grammar (`src/graph/tuning.cc: parseList`,
//! reference `docs/reference/nccl-graph-tuning.md` §3.2 "Enable matrix and user overrides") and
//! the per-function enable matrix it produces.
//!
//! ```text
//! value := entry (';' entry)*          empty entries are skipped
//! entry := [func ':'] list             only the first entry may omit func
//! list  := ['^'] elem (',' elem)*      '^' = everything except the listed ones
//! ```
//! Keywords are case-insensitive; for each function row an entry touches, every
//! element is first reset (to 1 for an exclusion list, else 0), then the listed
//! ones are set to the opposite; later entries overwrite earlier ones. An unknown
//! element or function, or a prefix-less entry after the first, is an error
//! (NCCL: WARN and `ncclInvalidUsage`).

use crate::coll::ids::{ALGO_NAMES, FUNC_NAMES, NUM_ALGOS, NUM_FUNCS, NUM_PROTOS, PROTO_NAMES, Protocol};

/// Why a value of `NCCL_ALGO` or `NCCL_PROTO` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrammarError {
    /// An entry after the first has no `func:` prefix.
    #[error("{var}=\"{value}\": all entries except the first must have a prefix (found \"{entry}\")")]
    MissingPrefix {
        /// The variable.
        var: &'static str,
        /// The whole value.
        value: String,
        /// The entry without a prefix.
        entry: String,
    },
    /// An element that is not one of the keywords.
    #[error("{var}=\"{value}\": unrecognized element token \"{token}\" (expected one of {expected})")]
    UnknownElement {
        /// The variable.
        var: &'static str,
        /// The whole value.
        value: String,
        /// The bad token.
        token: String,
        /// The keywords, comma-separated.
        expected: String,
    },
    /// A prefix that is not a function name.
    #[error("{var}=\"{value}\": unrecognized prefix token \"{token}\" (expected one of {expected})")]
    UnknownPrefix {
        /// The variable.
        var: &'static str,
        /// The whole value.
        value: String,
        /// The bad prefix.
        token: String,
        /// The function names, comma-separated.
        expected: String,
    },
}

/// NCCL's `parseList`: applies `value` to `list` (row-major `[NUM_FUNCS][elems.len()]`).
///
/// Errors: [`GrammarError`] as described in the module docs; `list` may then
/// be partly updated (NCCL fails the communicator in that case).
pub fn parse_list(var: &'static str, value: &str, elems: &[&str], list: &mut [u8]) -> Result<(), GrammarError> {
    let ne = elems.len();
    debug_assert_eq!(list.len(), NUM_FUNCS * ne);
    // strtok_r(";") skips empty tokens; a prefix-less entry is allowed only when it
    // starts the string (NCCL compares the token pointer with the string start).
    let mut offset = 0;
    for raw in value.split(';') {
        let at_start = offset == 0;
        offset += raw.len() + 1;
        if raw.is_empty() {
            continue;
        }
        // strtok_r(":"): the first non-empty piece is the prefix, the second the list.
        let mut pieces = raw.split(':').filter(|s| !s.is_empty());
        let p0 = pieces.next();
        let p1 = pieces.next();
        let (prefix, elem_list) = match (p0, p1) {
            (Some(p), Some(l)) => (Some(p), l),
            (Some(l), None) => {
                if !at_start {
                    return Err(GrammarError::MissingPrefix {
                        var,
                        value: value.to_owned(),
                        entry: raw.to_owned(),
                    });
                }
                (None, l)
            }
            // Only ':' characters: strtok finds no token; nothing to apply.
            (None, _) => continue,
        };
        let (unset, set, elem_list) = match elem_list.strip_prefix('^') {
            Some(rest) => (1u8, 0u8, rest),
            None => (0u8, 1u8, elem_list),
        };
        let mut found = false;
        for (f, fname) in FUNC_NAMES.iter().enumerate() {
            if prefix.is_some_and(|p| !p.eq_ignore_ascii_case(fname)) {
                continue;
            }
            found = true;
            let row = &mut list[f * ne..(f + 1) * ne];
            row.fill(unset);
            for tok in elem_list.split(',').filter(|s| !s.is_empty()) {
                match elems.iter().position(|e| e.eq_ignore_ascii_case(tok)) {
                    Some(e) => row[e] = set,
                    None => {
                        return Err(GrammarError::UnknownElement {
                            var,
                            value: value.to_owned(),
                            token: tok.to_owned(),
                            expected: elems.join(", "),
                        });
                    }
                }
            }
        }
        if !found {
            return Err(GrammarError::UnknownPrefix {
                var,
                value: value.to_owned(),
                token: prefix.unwrap_or_default().to_owned(),
                expected: FUNC_NAMES.join(", "),
            });
        }
    }
    Ok(())
}

/// The user's enable matrix (`protoEnable`, `algoEnable` of `ncclTopoTuneModel`
/// after `NCCL_PROTO` and `NCCL_ALGO`): per function, 0 = off, 1 = on, 2 = auto
/// (LL128 only: on where NCCL's LL128 conditions hold).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnableMatrix {
    /// `[func][proto]`.
    pub proto: [[u8; NUM_PROTOS]; NUM_FUNCS],
    /// `[func][algo]`.
    pub algo: [[u8; NUM_ALGOS]; NUM_FUNCS],
    /// `NCCL_PROTO` as given (for messages and the matrix print).
    pub proto_str: Option<String>,
    /// `NCCL_ALGO` as given.
    pub algo_str: Option<String>,
}

impl Default for EnableMatrix {
    fn default() -> Self {
        EnableMatrix {
            proto: [[1, 2, 1]; NUM_FUNCS],
            algo: [[1; NUM_ALGOS]; NUM_FUNCS],
            proto_str: None,
            algo_str: None,
        }
    }
}

impl EnableMatrix {
    /// The matrix for `NCCL_PROTO=proto` and `NCCL_ALGO=algo` (either may be
    /// `None`: unset), parsed protocols first as NCCL does.
    ///
    /// Errors: the first [`GrammarError`].
    pub fn parse(proto: Option<&str>, algo: Option<&str>) -> Result<EnableMatrix, GrammarError> {
        let mut m = EnableMatrix {
            proto_str: proto.map(str::to_owned),
            algo_str: algo.map(str::to_owned),
            ..EnableMatrix::default()
        };
        if let Some(v) = proto {
            let mut flat = m.proto.concat();
            parse_list(crate::config::params::PROTO.name, v, &PROTO_NAMES, &mut flat)?;
            for (f, row) in m.proto.iter_mut().enumerate() {
                row.copy_from_slice(&flat[f * NUM_PROTOS..(f + 1) * NUM_PROTOS]);
            }
        }
        if let Some(v) = algo {
            let mut flat = m.algo.concat();
            parse_list(crate::config::params::ALGO.name, v, &ALGO_NAMES, &mut flat)?;
            for (f, row) in m.algo.iter_mut().enumerate() {
                row.copy_from_slice(&flat[f * NUM_ALGOS..(f + 1) * NUM_ALGOS]);
            }
        }
        Ok(m)
    }

    /// Whether either variable was set.
    pub fn user_set(&self) -> bool {
        self.proto_str.is_some() || self.algo_str.is_some()
    }

    /// NCCL's `Enabled NCCL Func/Proto/Algo Matrix:` text (printed at INFO/ENV by
    /// rank 0 when either variable is set), starting with the newline NCCL puts
    /// after the colon.
    pub fn matrix_text(&self) -> String {
        let mut s = String::from("\n     Function | ");
        for p in PROTO_NAMES {
            s.push_str(&format!("{p:>8}  "));
        }
        s.push_str(" | ");
        for a in ALGO_NAMES {
            s.push_str(&format!("{a:>13}  "));
        }
        s.push('\n');
        for (f, fname) in FUNC_NAMES.iter().enumerate() {
            s.push_str(&format!("{fname:>13} | "));
            for v in self.proto[f] {
                s.push_str(&format!("{v:>8}  "));
            }
            s.push_str(" | ");
            for v in self.algo[f] {
                s.push_str(&format!("{v:>13}  "));
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::ids::{Algorithm as A, Func as F, Protocol as P};

    fn algo(m: &EnableMatrix, f: F, a: A) -> u8 {
        m.algo[f.index()][a.index()]
    }
    fn proto(m: &EnableMatrix, f: F, p: P) -> u8 {
        m.proto[f.index()][p.index()]
    }

    #[test]
    fn defaults_are_all_on_and_ll128_auto() {
        let m = EnableMatrix::parse(None, None).unwrap();
        assert_eq!(m, EnableMatrix::default());
        assert_eq!(proto(&m, F::AllReduce, P::Ll128), 2);
        assert!(!m.user_set());
    }

    #[test]
    fn the_source_examples() {
        // tuning.cc's own examples.
        let m = EnableMatrix::parse(
            None,
            Some("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring"),
        )
        .unwrap();
        assert_eq!(m.algo[F::Reduce.index()], [0, 1, 1, 0, 0, 0, 0]);
        assert_eq!(m.algo[F::AllReduce.index()], [1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(m.algo[F::Broadcast.index()], [0, 1, 0, 0, 0, 0, 0]);
        let m = EnableMatrix::parse(Some("LL,Simple;allreduce:^LL"), None).unwrap();
        assert_eq!(m.proto[F::AllGather.index()], [1, 0, 1]);
        assert_eq!(m.proto[F::AllReduce.index()], [0, 1, 1]);
        let m = EnableMatrix::parse(Some("^LL128;allreduce:LL128"), None).unwrap();
        assert_eq!(m.proto[F::Broadcast.index()], [1, 0, 1]);
        assert_eq!(m.proto[F::AllReduce.index()], [0, 1, 0]);
    }

    #[test]
    fn case_exclusion_and_overwrite() {
        let m = EnableMatrix::parse(Some("sImPlE"), Some("TREE")).unwrap();
        assert_eq!(proto(&m, F::AllReduce, P::Simple), 1);
        assert_eq!(proto(&m, F::AllReduce, P::Ll), 0);
        // A list that names LL128 explicitly bypasses the auto rules (value 1, not 2).
        assert_eq!(EnableMatrix::parse(Some("ll128"), None).unwrap().proto[0], [0, 1, 0]);
        assert_eq!(algo(&m, F::Broadcast, A::Ring), 0);
        assert_eq!(algo(&m, F::AllReduce, A::Tree), 1);
        let m = EnableMatrix::parse(None, Some("^ring")).unwrap();
        assert_eq!(m.algo[F::AllGather.index()], [1, 0, 1, 1, 1, 1, 1]);
        // "^" alone enables everything; empty entries are skipped.
        let m = EnableMatrix::parse(Some("^;;allreduce:simple;"), None).unwrap();
        assert_eq!(m.proto[F::Reduce.index()], [1, 1, 1]);
        assert_eq!(m.proto[F::AllReduce.index()], [0, 0, 1]);
        // Later entries overwrite earlier ones per row.
        let m = EnableMatrix::parse(None, Some("allreduce:tree;ALLREDUCE:ring")).unwrap();
        assert_eq!(m.algo[F::AllReduce.index()], [0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(m.algo[F::AllGather.index()], [1; 7]);
        // The first entry may carry a prefix too.
        let m = EnableMatrix::parse(None, Some("allgather:ring")).unwrap();
        assert_eq!(m.algo[F::AllGather.index()], [0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(m.algo[F::AllReduce.index()], [1; 7]);
    }

    #[test]
    fn errors_name_the_token() {
        let e = EnableMatrix::parse(None, Some("ring;tree")).unwrap_err();
        assert!(
            matches!(&e, GrammarError::MissingPrefix { entry, .. } if entry == "tree"),
            "{e}"
        );
        let e = EnableMatrix::parse(Some("LL,Fast"), None).unwrap_err();
        assert!(
            matches!(&e, GrammarError::UnknownElement { token, .. } if token == "Fast"),
            "{e}"
        );
        assert!(e.to_string().contains("NCCL_PROTO=\"LL,Fast\""), "{e}");
        assert!(e.to_string().contains("LL, LL128, Simple"), "{e}");
        let e = EnableMatrix::parse(None, Some("alltoall:ring")).unwrap_err();
        assert!(
            matches!(&e, GrammarError::UnknownPrefix { token, .. } if token == "alltoall"),
            "{e}"
        );
        // NCCL does not trim: a space is part of the token.
        assert!(EnableMatrix::parse(None, Some("ring, tree")).is_err());
    }

    #[test]
    fn matrix_text_has_nccl_columns() {
        let m = EnableMatrix::parse(Some("simple"), Some("allreduce:tree")).unwrap();
        let t = m.matrix_text();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "");
        assert!(
            lines[1].starts_with("     Function |       LL     LL128    Simple   | "),
            "{t}"
        );
        assert!(
            lines[6].starts_with("    AllReduce |        0         0         1   | "),
            "{t}"
        );
        assert!(lines[6].ends_with("            1              0              0              0              0              0              0  "), "{t}");
    }
}

/// The protocol this rank's shared-memory receive connections use (a property
/// of the connection here, see `transport::proto`): `default` when the enable
/// matrix turns it on for some function, else the other of Simple and LL if on.
///
/// Errors: [`crate::error::Error::InvalidUsage`] when the matrix enables neither
/// Simple nor LL for any function (LL128 is not implemented).
pub fn shm_protocol(m: &EnableMatrix, default: Protocol) -> Result<Protocol, crate::error::Error> {
    let on = |p: Protocol| m.proto.iter().any(|row| row[p.index()] == 1);
    let other = if default == Protocol::Simple {
        Protocol::Ll
    } else {
        Protocol::Simple
    };
    [default, other].into_iter().find(|&p| on(p)).ok_or_else(|| {
        crate::error::Error::InvalidUsage(format!(
            "NCCL_PROTO=\"{}\" enables neither Simple nor LL, the protocols of the shared-memory \
             transport (LL128 is not implemented)",
            m.proto_str.as_deref().unwrap_or_default()
        ))
    })
}

#[cfg(test)]
mod shm_protocol_tests {
    use super::*;

    fn pick(proto: Option<&str>) -> Result<Protocol, crate::error::Error> {
        shm_protocol(&EnableMatrix::parse(proto, None).unwrap(), Protocol::Simple)
    }

    #[test]
    fn shm_protocol_honours_nccl_proto() {
        assert_eq!(pick(None).unwrap(), Protocol::Simple);
        assert_eq!(pick(Some("LL")).unwrap(), Protocol::Ll);
        assert_eq!(pick(Some("^LL")).unwrap(), Protocol::Simple);
        assert_eq!(pick(Some("Simple")).unwrap(), Protocol::Simple);
        assert_eq!(pick(Some("allreduce:LL")).unwrap(), Protocol::Simple);
        assert_eq!(pick(Some("^Simple")).unwrap(), Protocol::Ll);
        let m = pick(Some("LL128")).unwrap_err().to_string();
        assert!(m.contains("neither Simple nor LL"), "{m}");
    }
}
