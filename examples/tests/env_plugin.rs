//! An env plugin (`NCCL_ENV_PLUGIN`, NCCL 2.30.7 `src/plugin/env.cc`) decides the
//! parameters of real ferroccl processes: the SDK test plugin
//! (`testing/env-sdk-test`, `libnccl_env_sdktest.so`) overrides `NCCL_*` values
//! from its file, and `ferroccl-info params` names it as their source; a
//! two-process `ferroccl-perf` run logs because the plugin set `NCCL_DEBUG`, and
//! its communicators use the plugin's channel count and buffer size; a plugin
//! whose `init` fails stops communicator creation with that error, as NCCL's
//! latched `ncclInitEnv` does.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferroccl-envplugin-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// `libnccl_env_sdktest.so` in the profile directory (a dev-dependency builds it).
fn plugin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let so = exe
        .parent()
        .and_then(Path::parent)
        .expect("profile dir")
        .join("libnccl_env_sdktest.so");
    assert!(so.is_file(), "{} missing (a dev-dependency builds it)", so.display());
    so
}

/// `exe args` with none of the caller's NCCL_*/FERROCCL_* variables, then `env`.
fn run(exe: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(exe);
    c.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("NCCL_") || k.starts_with("FERROCCL_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    c.output().unwrap_or_else(|e| panic!("run {exe}: {e}"))
}

fn all(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn row<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed"))
}

#[test]
fn params_come_from_the_env_plugin_and_name_it_as_their_source() {
    let dir = scratch("info");
    let file = dir.join("overrides");
    std::fs::write(&file, "NCCL_BUFFSIZE=1048576\nNCCL_MAX_NCHANNELS=2\n-NCCL_PROTO\n").unwrap();
    let so = plugin();
    let calls = dir.join("calls");
    let o = run(
        env!("CARGO_BIN_EXE_ferroccl-info"),
        &["params", "--json"],
        &[
            ("NCCL_ENV_PLUGIN", so.to_str().unwrap()),
            ("FERROCCL_ENV_SDKTEST_FILE", file.to_str().unwrap()),
            ("FERROCCL_ENV_SDKTEST_LOG", calls.to_str().unwrap()),
            ("NCCL_BUFFSIZE", "65536"),
            ("NCCL_PROTO", "LL"),
            ("NCCL_ALGO", "Ring"),
            ("HOME", dir.to_str().unwrap()),
        ],
    );
    assert!(o.status.success(), "{}", all(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", all(&o)));
    let plugin_source = "env plugin FerrocclEnvSdkTest";
    // Overridden (the environment said 65536), and set only by the plugin.
    assert_eq!(row(&rows, "NCCL_BUFFSIZE")["value"], "1048576");
    assert_eq!(row(&rows, "NCCL_BUFFSIZE")["source"], plugin_source);
    assert_eq!(row(&rows, "NCCL_MAX_NCHANNELS")["value"], "2");
    assert_eq!(row(&rows, "NCCL_MAX_NCHANNELS")["source"], plugin_source);
    // Hidden by the plugin: the default applies although the environment sets it.
    assert_eq!(row(&rows, "NCCL_PROTO")["source"], "default");
    // Passed through: the environment stays the source.
    assert_eq!(row(&rows, "NCCL_ALGO")["value"], "Ring");
    assert_eq!(row(&rows, "NCCL_ALGO")["source"], "environment");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("ENV/Plugin: Using FerrocclEnvSdkTest (v2)")
            && err.contains("Successfully loaded external env plugin"),
        "{err}"
    );
    // init once with NCCL 2.30.7's version and the v2 table, finalize at exit.
    assert_eq!(std::fs::read_to_string(&calls).unwrap(), "init 2.30.7 v2\nfinalize\n");

    // NCCL_ENV_PLUGIN=none: NCCL's internal default, the environment answers.
    let o = run(
        env!("CARGO_BIN_EXE_ferroccl-info"),
        &["params", "--json"],
        &[
            ("NCCL_ENV_PLUGIN", "none"),
            ("FERROCCL_ENV_SDKTEST_FILE", file.to_str().unwrap()),
            ("NCCL_BUFFSIZE", "65536"),
            ("HOME", dir.to_str().unwrap()),
        ],
    );
    assert!(o.status.success(), "{}", all(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(row(&rows, "NCCL_BUFFSIZE")["value"], "65536");
    assert_eq!(row(&rows, "NCCL_BUFFSIZE")["source"], "environment");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn names_resolve_as_for_every_plugin_kind_and_failures_fall_back_to_the_environment() {
    let dir = scratch("names");
    let profile = plugin().parent().unwrap().to_path_buf();
    let info = |env_plugin: &str| {
        let o = run(
            env!("CARGO_BIN_EXE_ferroccl-info"),
            &["params", "--json"],
            &[
                ("NCCL_ENV_PLUGIN", env_plugin),
                ("FERROCCL_PLUGIN_PATH", profile.to_str().unwrap()),
                ("NCCL_BUFFSIZE", "65536"),
                ("HOME", dir.to_str().unwrap()),
            ],
        );
        assert!(o.status.success(), "{}", all(&o));
        let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
        (String::from_utf8_lossy(&o.stderr).into_owned(), rows)
    };
    // `cv1` is not a file: libnccl-env-cv1.so (openPluginLib's second try), a v1 table.
    let (err, rows) = info("cv1");
    assert!(err.contains("ENV/Plugin: Using CEnvV1 (v1)"), "{err}");
    assert_eq!(row(&rows, "NCCL_BUFFSIZE")["value"], "65536");
    // A name that opens nothing, and a library without an env table: a warning,
    // and the environment answers (NCCL falls back to its internal default).
    let socket = profile.join("libnccl_net_socket.so");
    for (name, want) in [
        ("ferroccl-no-such-env", "env plugin 'ferroccl-no-such-env' not found"),
        (
            socket.to_str().unwrap(),
            "exports none of ncclEnvPlugin_v2, ncclEnvPlugin_v1",
        ),
    ] {
        let (err, rows) = info(name);
        assert!(
            err.contains(want) && err.contains("using the internal default"),
            "{name}: {err}"
        );
        assert_eq!(row(&rows, "NCCL_BUFFSIZE")["source"], "environment");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn nccl_conf_names_the_env_plugin_and_its_values_reach_the_plugin() {
    // NCCL applies nccl.conf (initEnv) before it loads the env plugin, so the file
    // may name the plugin, and the plugin's getenv sees the file's values.
    let dir = scratch("conf");
    let file = dir.join("overrides");
    std::fs::write(&file, "NCCL_MIN_NCHANNELS=3\n").unwrap();
    let conf = dir.join("nccl.conf");
    std::fs::write(
        &conf,
        format!(
            "NCCL_ENV_PLUGIN={}\nFERROCCL_ENV_SDKTEST_FILE={}\nNCCL_BUFFSIZE=8192\n",
            plugin().display(),
            file.display()
        ),
    )
    .unwrap();
    let o = run(
        env!("CARGO_BIN_EXE_ferroccl-info"),
        &["params", "--json"],
        &[
            ("NCCL_CONF_FILE", conf.to_str().unwrap()),
            ("HOME", dir.to_str().unwrap()),
        ],
    );
    assert!(o.status.success(), "{}", all(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(row(&rows, "NCCL_MIN_NCHANNELS")["value"], "3");
    assert_eq!(
        row(&rows, "NCCL_MIN_NCHANNELS")["source"],
        "env plugin FerrocclEnvSdkTest"
    );
    // Passed through by the plugin: the file stays the source.
    assert_eq!(row(&rows, "NCCL_BUFFSIZE")["value"], "8192");
    assert_eq!(row(&rows, "NCCL_BUFFSIZE")["source"], "NCCL_CONF_FILE");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn communicators_run_with_what_the_env_plugin_says() {
    let dir = scratch("perf");
    let file = dir.join("overrides");
    // NCCL_DEBUG comes only from the plugin: the INFO lines prove it is asked first.
    std::fs::write(&file, "NCCL_DEBUG=INFO\nNCCL_MAX_NCHANNELS=1\nNCCL_BUFFSIZE=1048576\n").unwrap();
    let so = plugin();
    let args = [
        "--ranks",
        "2",
        "all_reduce",
        "-b",
        "8",
        "-e",
        "8K",
        "-f",
        "32",
        "-c",
        "1",
    ];
    let o = run(
        env!("CARGO_BIN_EXE_ferroccl-perf"),
        &args,
        &[
            ("NCCL_ENV_PLUGIN", so.to_str().unwrap()),
            ("FERROCCL_ENV_SDKTEST_FILE", file.to_str().unwrap()),
            ("NCCL_NET_PLUGIN", "socket"),
            ("HOME", dir.to_str().unwrap()),
        ],
    );
    let text = all(&o);
    assert!(o.status.success(), "{text}");
    for want in [
        "NCCL_MAX_NCHANNELS set by env plugin FerrocclEnvSdkTest to 1.",
        "NCCL_BUFFSIZE set by env plugin FerrocclEnvSdkTest to 1048576.",
        "NCCL_DEBUG set by env plugin FerrocclEnvSdkTest to INFO.",
        "nchannels 1 buffsize 1048576",
    ] {
        assert!(text.contains(want), "missing {want:?}\n{text}");
    }

    // init fails: NCCL latches the error (ncclInitEnv) and no communicator is made.
    let o = run(
        env!("CARGO_BIN_EXE_ferroccl-perf"),
        &args,
        &[
            ("NCCL_ENV_PLUGIN", so.to_str().unwrap()),
            ("FERROCCL_ENV_SDKTEST_FAIL_INIT", "1"),
            ("NCCL_NET_PLUGIN", "socket"),
            ("HOME", dir.to_str().unwrap()),
        ],
    );
    let text = all(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains("env plugin 'FerrocclEnvSdkTest' (ncclEnv v2) init returned ncclSystemError (2)"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
