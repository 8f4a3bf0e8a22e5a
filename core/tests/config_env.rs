//! `nccl.conf` as NCCL reads it (`src/misc/param.cc` `initEnv`/`setEnvFile`): the
//! files reach the process environment without overwriting it, so plugin
//! selection (`NCCL_NET_PLUGIN`, `NCCL_NET`) and the plugins' own `NCCL_*`
//! parameters see them, with NCCL's precedence; reads are bounded (regular
//! files, at most `MAX_CONF_BYTES`); every variable the runtime reads is
//! declared once, validated and echoed, and every variable an in-tree plugin
//! reads is declared once, by the runtime (the shared `NCCL_SOCKET_*`) or by
//! the plugin itself (its `ferrocclParams_v1` export).
//!
//! The process-wide configuration is built once per process, so the tests that
//! need it run in a child process (this test binary re-executed with
//! `CONF_ENV_ROLE` set); the others build a `Config` of their own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferroccl::config::{ConfFile, Config, MAX_CONF_BYTES, find_param, read_conf_file, runtime_params};

const ROLE: &str = "CONF_ENV_ROLE";

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferroccl-conf-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

/// Re-runs this binary's test `test` in a child with `env` (and nothing from
/// NCCL_*/HOME of ours), returning (success, stdout).
fn child(test: &str, role: &str, env: &[(&str, &str)]) -> (bool, String) {
    let exe = std::env::current_exe().expect("exe");
    let mut c = Command::new(exe);
    c.args([test, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    c.env(ROLE, role);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Child body: prints what the process sees after `Config::global()`.
#[test]
fn conf_child() {
    let Ok(role) = std::env::var(ROLE) else { return };
    match role.as_str() {
        "selection" => {
            // Before: the file's values are not in the environment yet.
            assert!(std::env::var("NCCL_NET").is_err());
            let opts = ferroccl::plugin::LoadOptions::from_env();
            println!("net_plugin={:?} net={:?}", opts.net_plugin, opts.net);
            // After: applied without overwriting (what a plugin's getenv sees).
            for k in ["NCCL_NET_PLUGIN", "NCCL_NET", "NCCL_SOCKET_NTHREADS", "NCCL_IB_TIMEOUT"] {
                println!("env {k}={:?}", std::env::var(k).ok());
            }
        }
        "plugin" => {
            // The in-tree socket plugin reads NCCL_SOCKET_* with getenv at its init.
            let so = std::env::var("SOCKET_SO").expect("SOCKET_SO");
            let cap = ferroccl::plugin::logger::LogCapture::start();
            let opts = ferroccl::plugin::LoadOptions {
                in_tree: false,
                ..Default::default()
            };
            let net = ferroccl::plugin::load_net_from(&so, &opts).expect("load the socket plugin");
            let _ = net.plugin.info();
            for l in cap.lines_containing("NCCL_SOCKET_INLINE") {
                println!("plugin log: {}", l.message);
            }
        }
        "warn" => {
            ferroccl::log::init_from_config(Config::global());
            for l in Config::global().echo() {
                println!("echo: {l}");
            }
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn conf_file_values_reach_plugin_selection_with_nccl_precedence() {
    let d = tmpdir("sel");
    let conf = d.join("nccl.conf");
    std::fs::write(
        &conf,
        "NCCL_NET_PLUGIN=from-conf-file\nNCCL_NET=FromConf\nNCCL_SOCKET_NTHREADS=3\nNCCL_IB_TIMEOUT=22\n",
    )
    .unwrap();
    let home = d.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".nccl.conf"), "NCCL_NET=FromHome\nNCCL_IB_TIMEOUT=9\n").unwrap();
    // NCCL_CONF_FILE (the environment still wins for NCCL_NET_PLUGIN).
    let (ok, out) = child(
        "conf_child",
        "selection",
        &[
            ("NCCL_CONF_FILE", conf.to_str().unwrap()),
            ("HOME", home.to_str().unwrap()),
            ("NCCL_NET_PLUGIN", "from-env"),
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains(r#"net_plugin=Some("from-env") net=Some("FromConf")"#),
        "{out}"
    );
    assert!(out.contains(r#"env NCCL_NET_PLUGIN=Some("from-env")"#), "{out}");
    assert!(out.contains(r#"env NCCL_NET=Some("FromConf")"#), "{out}");
    assert!(out.contains(r#"env NCCL_SOCKET_NTHREADS=Some("3")"#), "{out}");
    // Without NCCL_CONF_FILE: $HOME/.nccl.conf.
    let (ok, out) = child("conf_child", "selection", &[("HOME", home.to_str().unwrap())]);
    assert!(ok, "{out}");
    assert!(out.contains(r#"net=Some("FromHome")"#), "{out}");
    assert!(out.contains(r#"env NCCL_IB_TIMEOUT=Some("9")"#), "{out}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn conf_file_values_reach_a_plugins_own_parameters() {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
    let so = ["libnccl_net_socket.so", "libnccl-net-socket.so"]
        .iter()
        .map(|f| profile.join(f))
        .find(|p| p.exists())
        .expect("the socket plugin is built (cargo build --workspace)");
    let d = tmpdir("plugin");
    let conf = d.join("nccl.conf");
    std::fs::write(&conf, "NCCL_SOCKET_INLINE=777\n").unwrap();
    let (ok, out) = child(
        "conf_child",
        "plugin",
        &[
            ("NCCL_CONF_FILE", conf.to_str().unwrap()),
            ("SOCKET_SO", so.to_str().unwrap()),
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("NCCL_SOCKET_INLINE=777"),
        "the plugin saw the file's value:\n{out}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn unreadable_conf_files_warn_once_and_values_are_validated() {
    let d = tmpdir("warn");
    let conf = d.join("nccl.conf");
    std::fs::write(&conf, "NCCL_BUFFSIZE=12\nNCCL_IB_TIMEOUT=99\nNCCL_SOCKET_NTHREADS=4\n").unwrap();
    let (ok, out) = child(
        "conf_child",
        "warn",
        &[
            ("NCCL_CONF_FILE", "/dev/urandom"),
            ("NCCL_DEBUG", "INFO"),
            ("HOME", "/nonexistent"),
        ],
    );
    assert!(ok, "{out}");
    assert_eq!(
        out.matches("NCCL WARN config file /dev/urandom is a character device")
            .count(),
        1,
        "{out}"
    );
    let (ok, out) = child(
        "conf_child",
        "warn",
        &[("NCCL_CONF_FILE", conf.to_str().unwrap()), ("NCCL_DEBUG", "WARN")],
    );
    assert!(ok, "{out}");
    // The runtime validates and echoes its own parameters.
    assert!(
        out.contains("NCCL WARN NCCL_BUFFSIZE=12 (from file") && out.contains("[4096, 1073741824]"),
        "{out}"
    );
    assert!(
        out.contains("echo: NCCL_BUFFSIZE set by file") && out.contains("(invalid:"),
        "{out}"
    );
    // A plugin's parameters are the plugin's own (it declares, reads and checks
    // them): the runtime echoes them as set, says it does not read them, and
    // does not judge their values.
    assert!(
        out.contains(&format!(
            "echo: NCCL_SOCKET_NTHREADS set by file {} to 4. (not a runtime parameter)\n",
            conf.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "echo: NCCL_IB_TIMEOUT set by file {} to 99. (not a runtime parameter)\n",
            conf.display()
        )) && !out.contains("NCCL WARN NCCL_IB_TIMEOUT"),
        "{out}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn conf_reads_are_bounded() {
    let d = tmpdir("bounded");
    let check = |path: &Path, needle: &str| {
        let start = Instant::now();
        let got = read_conf_file(path);
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{path:?} took {:?}",
            start.elapsed()
        );
        match got {
            ConfFile::Skipped(why) => assert!(why.contains(needle), "{path:?}: {why}"),
            other => panic!("{path:?}: {other:?}"),
        }
    };
    check(Path::new("/dev/urandom"), "is a character device");
    check(Path::new("/dev/zero"), "is a character device");
    check(&d, "is a directory");
    let fifo = d.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path in our own temporary directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    check(&fifo, "is a FIFO");
    let big = d.join("big.conf");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(100 << 20).unwrap(); // sparse: no disk used
    check(&big, &format!("more than the {MAX_CONF_BYTES} bytes"));
    assert_eq!(read_conf_file(&d.join("missing")), ConfFile::Missing);
    let ok = d.join("ok.conf");
    std::fs::write(&ok, "NCCL_DEBUG=INFO\n").unwrap();
    assert_eq!(read_conf_file(&ok), ConfFile::Text("NCCL_DEBUG=INFO\n".into()));
    // Through the loader: a skipped file is a warning, the next file is still read.
    let env = vec![("NCCL_CONF_FILE".to_string(), "/dev/urandom".to_string())];
    let cfg = Config::load_with(env, |p| {
        if p == Path::new("/etc/nccl.conf") {
            ConfFile::Text("NCCL_ALGO=Ring\n".into())
        } else {
            read_conf_file(p)
        }
    });
    assert_eq!(cfg.warnings().len(), 1, "{:?}", cfg.warnings());
    assert_eq!(cfg.raw("NCCL_ALGO"), Some("Ring"));
    std::fs::remove_dir_all(&d).unwrap();
}

/// String literals naming NCCL_*/FERROCCL_* variables in `dir`'s Rust sources,
/// with whether they sit in test code (a `tests/` directory, or after a file's
/// first `#[cfg(test)]`).
fn variable_literals(dir: &Path, out: &mut Vec<(String, PathBuf, bool)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            variable_literals(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap();
            let tests_from = text.find("#[cfg(test)]").unwrap_or(text.len());
            for (i, _) in text.match_indices('"') {
                let rest = &text[i + 1..];
                if !(rest.starts_with("NCCL_") || rest.starts_with("FERROCCL_")) {
                    continue;
                }
                let end = rest.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'));
                if let Some(end) = end
                    && rest[end..].starts_with('"')
                    && !rest[..end].ends_with('_')
                {
                    let in_test = i > tests_from || p.components().any(|c| c.as_os_str() == "tests");
                    out.push((rest[..end].to_string(), p.clone(), in_test));
                }
            }
        }
    }
}

/// The parameters the built in-tree plugin `plugins/<dir>` exports.
fn plugin_declared(dir: &str) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|d| d.parent()).unwrap();
    let so = profile.join(format!("libnccl_{}.so", dir.replace('-', "_")));
    let lib = ferroccl::plugin::library::PluginLibrary::open(so.to_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: build the plugins first (cargo build --workspace)"));
    let declared = ferroccl::plugin::params::exported_params(&lib)
        .unwrap_or_else(|| panic!("{} exports no ferrocclParams_v1", so.display()))
        .unwrap_or_else(|e| panic!("{e}"));
    declared.iter().map(|p| p.name().to_string()).collect()
}

#[test]
fn every_variable_the_runtime_or_an_in_tree_plugin_reads_is_declared_once() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // (name, file, in test code, declared by the runtime or by the file's plugin)
    let mut found = Vec::new();
    variable_literals(&root.join("core/src"), &mut found);
    let mut owners: Vec<(String, Vec<String>)> = vec![(
        "runtime".into(),
        runtime_params().map(|p| p.name().to_string()).collect(),
    )];
    let mut plugins: Vec<_> = std::fs::read_dir(root.join("plugins")).unwrap().flatten().collect();
    plugins.sort_by_key(|e| e.file_name());
    let mut missing = Vec::new();
    for e in plugins {
        let src = e.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let dir = e.file_name().to_string_lossy().into_owned();
        let declared = plugin_declared(&dir);
        let mut here = Vec::new();
        variable_literals(&src, &mut here);
        for (n, p, _) in &here {
            if find_param(n).is_none() && !declared.contains(n) {
                missing.push(format!(
                    "{n} ({}: not declared by the runtime or by {dir})",
                    p.display()
                ));
            }
        }
        found.extend(here);
        owners.push((dir, declared));
    }
    assert!(found.len() > 30, "the scan found the variables: {found:?}");
    for (n, p, _) in &found {
        if p.starts_with(root.join("core/src")) && find_param(n).is_none() {
            missing.push(format!("{n} ({}: not declared in core/src/config.rs)", p.display()));
        }
    }
    assert!(missing.is_empty(), "read but not declared:\n{}", missing.join("\n"));
    // A library built on another in-tree plugin (net-collnet-socket on
    // net-socket) exports that plugin's table as its own: one owner.
    let mut uniq: Vec<(String, Vec<String>)> = Vec::new();
    for (dir, names) in owners {
        if !uniq.iter().any(|(_, u)| *u == names) {
            uniq.push((dir, names));
        }
    }
    let owners = uniq;
    // Each name has one owner, and one declaration: outside test code, a
    // string literal naming it appears once (the declaration; readers go
    // through it).
    let mut all: Vec<&str> = owners
        .iter()
        .flat_map(|(_, ns)| ns.iter().map(String::as_str))
        .collect();
    all.sort_unstable();
    let twice: Vec<&&str> = all.windows(2).filter(|w| w[0] == w[1]).map(|w| &w[0]).collect();
    assert!(twice.is_empty(), "declared by two owners: {twice:?} ({owners:?})");
    let mut spelled: Vec<String> = Vec::new();
    for n in all {
        let places: Vec<String> = found
            .iter()
            .filter(|(f, _, in_test)| f == n && !in_test)
            .map(|(_, p, _)| p.display().to_string())
            .collect();
        if places.len() > 1 {
            spelled.push(format!("{n}: {}", places.join(", ")));
        }
    }
    assert!(
        spelled.is_empty(),
        "a declared name is spelled again outside its declaration (read it through the declaration):\n{}",
        spelled.join("\n")
    );
}
