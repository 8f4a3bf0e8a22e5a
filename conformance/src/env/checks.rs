//! The env checks: each an id, a one-line rule, the reference section it comes
//! from (§3.3), a level and the API versions it applies to, and a body that
//! drives the plugin through the host's loader as NCCL 2.30.7 does: `init` once
//! with NCCL's version, `getEnv` for every lookup from any thread, the returned
//! strings kept like `getenv`'s, `finalize` at exit.

use std::ffi::{CStr, CString, c_char};
use std::sync::Barrier;

use ferroccl::plugin::env::EnvPlugin;

use super::worker::{SET_VARS, enter, unset_names};
use crate::outcome::{Res, Stop};
use crate::registry::Level;
use crate::{ensure, fail, skip};

/// What a check body works with.
#[derive(Debug)]
pub struct EnvCx {
    /// The plugin, loaded for the version under test (not yet initialised).
    pub plugin: EnvPlugin,
    /// API version under test.
    pub version: u32,
    /// Extra observations for the report.
    pub notes: Vec<String>,
}

/// One env check (id `env.*`).
pub type EnvCheck = crate::section::SectionCheck<EnvCx>;

/// Threads of the concurrency check.
const THREADS: usize = 8;
/// Rounds over every name per thread.
const ROUNDS: usize = 200;

/// Every env check, in run order.
pub fn all() -> Vec<EnvCheck> {
    let c = |id, rule, level, body| EnvCheck {
        id,
        section: "§3.3",
        rule,
        level,
        min_version: 1,
        max_version: 2,
        body,
    };
    vec![
        c(
            "env.name",
            "the table's name is non-NULL, non-empty and printable (NCCL logs it when it loads the plugin)",
            Level::Required,
            name,
        ),
        c(
            "env.init",
            "init(2, 30, 7, \"\"[, logger]) returns ncclSuccess (a failure fails every NCCL call of the process)",
            Level::Required,
            init,
        ),
        c(
            "env.get_env.unset",
            "getEnv returns NULL for a name that is not set, as getenv does (\"\" is a value: it is not unset)",
            Level::Required,
            get_unset,
        ),
        c(
            "env.get_env.stable",
            "a string getEnv returned keeps its text after later lookups, and a name gets the same text each time",
            Level::Required,
            get_stable,
        ),
        c(
            "env.get_env.threads",
            "getEnv answers from 8 threads at once exactly as it answers from init's thread",
            Level::Required,
            get_threads,
        ),
        c(
            "env.get_env.passthrough",
            "a name the plugin has no reason to change is answered with the process environment's value",
            Level::Advisory,
            get_passthrough,
        ),
        c(
            "env.finalize",
            "finalize returns ncclSuccess after init",
            Level::Required,
            finalize,
        ),
    ]
}

fn name(cx: &mut EnvCx) -> Res {
    let n = cx.plugin.name();
    ensure!(
        n.is_some_and(|n| !n.is_empty() && !n.chars().any(char::is_control)),
        "a non-NULL, non-empty, printable name",
        "the name is {}",
        match n {
            None => "NULL".to_string(),
            Some(n) => format!("{n:?}"),
        }
    );
    Ok(())
}

fn init(cx: &mut EnvCx) -> Res {
    let _g = enter("init");
    cx.plugin.init().map_err(|e| fail!("init returns ncclSuccess", "{e}"))
}

/// `init` for the checks after `env.init`: a failure skips them (it is
/// `env.init`'s verdict, not theirs).
fn setup(cx: &mut EnvCx) -> Res {
    let _g = enter("init");
    cx.plugin.init().map_err(|e| skip!("init failed ({e}): see env.init"))
}

/// One `getEnv(name)`: the pointer, or a failure for a NULL slot.
fn raw(cx: &EnvCx, name: &CStr) -> Res<*const c_char> {
    let _g = enter("getEnv");
    cx.plugin
        .get_env_raw(name)
        .map_err(|e| fail!("a getEnv function", "{e}"))
}

/// The text at `p` (`None` for NULL).
fn text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: a non-NULL pointer getEnv returned, which the contract makes a
    // NUL-terminated string that stays valid (a plugin breaking that is what the
    // checks look for: a crash here fails the check, naming getEnv's string).
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn cname(s: &str) -> CString {
    CString::new(s).expect("check names have no NUL")
}

fn get_unset(cx: &mut EnvCx) -> Res {
    setup(cx)?;
    for n in unset_names() {
        let p = raw(cx, &cname(&n))?;
        if let Some(t) = text(p) {
            return Err(fail!(
                "NULL for a name that is not set",
                "getEnv(\"{n}\") returned {t:?} (a non-NULL answer makes NCCL use it as the value)"
            ));
        }
    }
    Ok(())
}

fn get_stable(cx: &mut EnvCx) -> Res {
    setup(cx)?;
    let names: Vec<CString> = SET_VARS.iter().map(|(k, _)| cname(k)).collect();
    let firsts: Vec<(usize, *const c_char, String)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| raw(cx, n).map(|p| (i, p, text(p))))
        .collect::<Res<Vec<_>>>()?
        .into_iter()
        .filter_map(|(i, p, t)| t.map(|t| (i, p, t)))
        .collect();
    if firsts.is_empty() {
        return Err(skip!(
            "getEnv returned NULL for every variable the worker set ({}): no string to check",
            SET_VARS.map(|(k, _)| k).join(", ")
        ));
    }
    let unset = unset_names();
    for round in 0..20 {
        for n in names
            .iter()
            .chain(unset.iter().map(|u| cname(u)).collect::<Vec<_>>().iter())
        {
            raw(cx, n)?;
        }
        for (i, p, first) in &firsts {
            let name = SET_VARS[*i].0;
            let now = text(*p).unwrap_or_default();
            if &now != first {
                return Err(fail!(
                    "the string getEnv returned keeps its text (NCCL keeps the pointer, as getenv's)",
                    "getEnv(\"{name}\") returned {first:?}; after {} more lookups the same pointer reads {now:?}",
                    (round + 1) * (names.len() + unset.len())
                ));
            }
            let again = text(raw(cx, &names[*i])?);
            if again.as_deref() != Some(first.as_str()) {
                return Err(fail!(
                    "the same text for the same name each time",
                    "getEnv(\"{name}\") returned {first:?}, then {again:?}"
                ));
            }
        }
    }
    Ok(())
}

fn get_threads(cx: &mut EnvCx) -> Res {
    setup(cx)?;
    let mut names: Vec<String> = SET_VARS.iter().map(|(k, _)| k.to_string()).collect();
    names.extend(unset_names());
    let cnames: Vec<CString> = names.iter().map(|n| cname(n)).collect();
    let want: Vec<Option<String>> = cnames.iter().map(|n| raw(cx, n).map(text)).collect::<Res<Vec<_>>>()?;
    let barrier = Barrier::new(THREADS);
    let plugin = &cx.plugin;
    let _g = enter("getEnv");
    let mismatch: Option<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (barrier, cnames, want, names) = (&barrier, &cnames, &want, &names);
                s.spawn(move || {
                    barrier.wait();
                    for _ in 0..ROUNDS {
                        for (i, n) in cnames.iter().enumerate() {
                            let got = match plugin.get_env_raw(n) {
                                Ok(p) => text(p),
                                Err(e) => return Some(e.to_string()),
                            };
                            if got != want[i] {
                                return Some(format!(
                                    "thread {t}: getEnv(\"{}\") returned {got:?}; init's thread got {:?}",
                                    names[i], want[i]
                                ));
                            }
                        }
                    }
                    None
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap_or_else(|_| Some("a calling thread panicked".into())))
            .next()
    });
    match mismatch {
        None => Ok(()),
        Some(m) => Err(Stop::Fail {
            expected: format!(
                "the same answers from {THREADS} threads as from init's thread (NCCL looks parameters up from any thread)"
            ),
            observed: m,
        }),
    }
}

fn get_passthrough(cx: &mut EnvCx) -> Res {
    setup(cx)?;
    for (k, v) in SET_VARS {
        let got = text(raw(cx, &cname(k))?);
        ensure!(
            got.as_deref() == Some(v),
            format!("the environment's value {v:?}"),
            "getEnv(\"{k}\") returned {got:?}"
        );
    }
    Ok(())
}

fn finalize(cx: &mut EnvCx) -> Res {
    setup(cx)?;
    let _g = enter("finalize");
    cx.plugin
        .finalize()
        .map_err(|e| fail!("finalize returns ncclSuccess", "{e}"))
}
