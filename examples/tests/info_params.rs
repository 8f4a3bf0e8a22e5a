//! `ferroccl-info params --json` lists every parameter (the runtime's, and each
//! in-tree plugin's as the built plugin library exports it) and says where each
//! value came from: the environment, the file `NCCL_CONF_FILE` names,
//! `~/.nccl.conf` (when `NCCL_CONF_FILE` is unset), or the default; an invalid
//! value is reported and makes the exit status 1; a plugin library that cannot
//! be found is named. Build the plugins first (`cargo build --workspace`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferroccl-info-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn params(env: &[(&str, &str)]) -> (Output, Vec<Value>) {
    params_of(Path::new(env!("CARGO_BIN_EXE_ferroccl-info")), env)
}

/// `exe params --json` with `env` and none of our NCCL_*/FERROCCL_* variables.
fn params_of(exe: &Path, env: &[(&str, &str)]) -> (Output, Vec<Value>) {
    let mut c = Command::new(exe);
    c.args(["params", "--json"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    let o = c.output().expect("run ferroccl-info");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let rows: Vec<Value> = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("not a JSON list: {e}\n{text}\n{}", String::from_utf8_lossy(&o.stderr)));
    (o, rows)
}

fn row<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

#[test]
fn every_parameter_is_listed_with_the_source_of_its_value() {
    let dir = scratch("src");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".nccl.conf"), "NCCL_BUFFSIZE=8192\nNCCL_IB_TIMEOUT=12\n").unwrap();
    let conf = dir.join("nccl.conf");
    std::fs::write(&conf, "NCCL_BUFFSIZE=65536\nNCCL_SOCKET_NTHREADS=2\nNCCL_DEBUG=INFO\n").unwrap();
    let (o, rows) = params(&[
        ("HOME", home.to_str().unwrap()),
        ("NCCL_CONF_FILE", conf.to_str().unwrap()),
        ("NCCL_DEBUG", "WARN"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Every parameter, once, in declaration order: the runtime's, then each
    // in-tree plugin's as its built library exports it.
    let profile = PathBuf::from(env!("CARGO_BIN_EXE_ferroccl-info"))
        .parent()
        .unwrap()
        .to_path_buf();
    let mut want: Vec<&str> = ferroccl::config::runtime_params().map(|p| p.name()).collect();
    for lib in [
        "libnccl_tuner_rules.so",
        "libnccl_profiler_trace.so",
        "libnccl_net_socket.so",
        "libnccl_net_ib.so",
    ] {
        let path = profile.join(lib);
        let lib = ferroccl::plugin::library::PluginLibrary::open(path.to_str().unwrap())
            .unwrap_or_else(|e| panic!("{e}: build the plugins (cargo build --workspace)"));
        let declared = ferroccl::plugin::params::exported_params(&lib)
            .expect("exported")
            .expect("readable");
        want.extend(declared.iter().map(|p| p.name()));
    }
    let got: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(got, want);
    let mut unique = want.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), want.len(), "a name is declared twice: {want:?}");

    let b = row(&rows, "NCCL_BUFFSIZE");
    assert_eq!(b["source"], "NCCL_CONF_FILE", "{b}");
    assert_eq!(b["file"], conf.to_str().unwrap(), "{b}");
    assert_eq!(b["value"], "65536", "{b}");
    assert_eq!(b["type"], "int", "{b}");
    assert_eq!(b["default"], "4194304", "{b}");
    assert!(b["range"].as_str().unwrap().starts_with('['), "{b}");
    let t = row(&rows, "NCCL_SOCKET_NTHREADS");
    assert_eq!(
        (t["source"].as_str(), t["value"].as_str(), t["reader"].as_str()),
        (Some("NCCL_CONF_FILE"), Some("2"), Some("net-socket")),
        "{t}"
    );
    // The environment wins over the file.
    let d = row(&rows, "NCCL_DEBUG");
    assert_eq!(
        (d["source"].as_str(), d["value"].as_str()),
        (Some("environment"), Some("WARN")),
        "{d}"
    );
    assert!(d["range"].as_str().unwrap().contains("INFO"), "{d}");
    // ~/.nccl.conf is not read when NCCL_CONF_FILE is set.
    let ib = row(&rows, "NCCL_IB_TIMEOUT");
    assert_eq!(
        (ib["source"].as_str(), ib["value"].as_str()),
        (Some("default"), Some("20")),
        "{ib}"
    );
    assert_eq!(ib["reader"], "net-ib", "{ib}");

    // Without NCCL_CONF_FILE, ~/.nccl.conf is the file.
    let (o, rows) = params(&[("HOME", home.to_str().unwrap())]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = row(&rows, "NCCL_BUFFSIZE");
    assert_eq!(
        (b["source"].as_str(), b["value"].as_str()),
        (Some("~/.nccl.conf"), Some("8192")),
        "{b}"
    );
    let ib = row(&rows, "NCCL_IB_TIMEOUT");
    assert_eq!(
        (ib["source"].as_str(), ib["value"].as_str()),
        (Some("~/.nccl.conf"), Some("12")),
        "{ib}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_plugin_that_is_not_found_is_named() {
    // The tool searches its own directory and its parent: a link to it in a
    // directory of its own (under target/tmp, so a hard link: a copy could
    // still be open for writing in a forked sibling test, ETXTBSY) finds no plugin.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("info-params-{}/bin", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("ferroccl-info");
    std::fs::hard_link(env!("CARGO_BIN_EXE_ferroccl-info"), &exe).expect("hard link in the target directory");
    let (o, rows) = params_of(&exe, &[("HOME", dir.to_str().unwrap()), ("LD_LIBRARY_PATH", "")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    for reader in ["tuner-rules", "profiler-trace", "net-socket", "net-ib"] {
        assert_eq!(
            err.lines()
                .filter(|l| l.starts_with(&format!("warning: {reader}: parameters not listed: ")))
                .count(),
            1,
            "{err}"
        );
    }
    assert!(err.contains("libnccl-net-ib.so"), "{err}");
    assert_eq!(rows.len(), ferroccl::config::runtime_params().count());
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn an_invalid_value_is_reported_and_fails() {
    let dir = scratch("bad");
    let (o, rows) = params(&[("HOME", dir.to_str().unwrap()), ("NCCL_BUFFSIZE", "12Q")]);
    assert_eq!(o.status.code(), Some(1));
    let b = row(&rows, "NCCL_BUFFSIZE");
    assert_eq!(b["source"], "environment", "{b}");
    // The value in effect is the default; the error says why.
    assert_eq!(b["value"], "4194304", "{b}");
    assert!(b["error"].as_str().unwrap().contains("not a valid integer"), "{b}");
    let _ = std::fs::remove_dir_all(&dir);
}
