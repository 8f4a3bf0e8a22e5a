//! `ferroccl-info params --json` lists every registered parameter (runtime and
//! in-tree plugins) and says where each value came from: the environment, the
//! file `NCCL_CONF_FILE` names, `~/.nccl.conf` (when `NCCL_CONF_FILE` is unset),
//! or the default; an invalid value is reported and makes the exit status 1.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferroccl-info-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn params(env: &[(&str, &str)]) -> (Output, Vec<Value>) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferroccl-info"));
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

    // Every registered parameter, once, in registration order.
    let want: Vec<&str> = ferroccl::config::all_params().map(|(_, p)| p.name()).collect();
    let got: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(got, want);

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
