//! Plugin resolution as NCCL 2.30.7 does it (reference §5), with real `dlopen`
//! of real `.so` files: names, paths, comma lists, `none`, failures of every kind,
//! `NCCL_NET`, strict mode, the version cap, and the tuner fallback. Options are
//! built explicitly (never by mutating this process's environment).

mod plugin_common;

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use ferroccl::plugin::library::AttemptResult;
use ferroccl::plugin::logger::LogCapture;
use ferroccl::plugin::tuner_profiler::{AuxKind, AuxLoader};
use ferroccl::plugin::{CandidateKind, LoadOptions, Outcome, PluginError, Rejection, load_net, load_net_from};
use plugin_common::*;

fn with(net_plugin: &str) -> LoadOptions {
    LoadOptions {
        net_plugin: Some(net_plugin.into()),
        ..opts()
    }
}

fn report_of(e: &PluginError) -> &str {
    match e {
        PluginError::NoPlugin { report } => report,
        other => panic!("expected NoPlugin, got {other}"),
    }
}

/// A fresh temporary directory (removed by the caller's guard).
struct TempDir(PathBuf);
impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("ferroccl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

thread_local! {
    /// Where this thread's log lines go while [`logged`] runs.
    static CAPTURE: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with this thread's INFO-and-up log lines captured into a string.
///
/// One process-wide subscriber is installed once and routes each line to the
/// writing thread's capture buffer (dropped when none). A scoped subscriber per
/// test (`with_default`) would race the other test threads over tracing's cached
/// per-callsite interest and sometimes capture nothing.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    struct ThreadWriter;
    impl Write for ThreadWriter {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            CAPTURE.with(|c| {
                if let Some(v) = c.borrow_mut().as_mut() {
                    v.extend_from_slice(b);
                }
            });
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(|| ThreadWriter)
            .finish();
        tracing::subscriber::set_global_default(sub).expect("no other global subscriber in this test binary");
    });
    CAPTURE.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let r = f();
    let text = CAPTURE.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (r, String::from_utf8_lossy(&text).into_owned())
}

#[test]
fn unset_tries_libnccl_net_so() {
    let e = load_net(&opts()).unwrap_err();
    let r = report_of(&e);
    assert!(r.contains("'libnccl-net.so'"), "{r}");
    assert!(r.contains("not found"), "{r}");
}

#[test]
fn unset_report_as_data() {
    // Unset NCCL_NET_PLUGIN with the default library present only in a plugin dir.
    let dir = TempDir::new("unset");
    std::os::unix::fs::symlink(lib("libnccl-net-cv6.so"), dir.0.join("libnccl-net.so")).unwrap();
    let o = LoadOptions {
        plugin_path: vec![dir.0.clone()],
        ..opts()
    };
    let loaded = load_net(&o).unwrap();
    let c = loaded.report.chosen().unwrap();
    assert_eq!(c.requested, "libnccl-net.so");
    assert_eq!(c.kind, CandidateKind::External);
    assert_eq!(c.attempts[0].file, "libnccl-net.so");
    assert!(matches!(c.attempts[0].result, AttemptResult::NotFound(_)));
    assert!(c.attempts.last().unwrap().from_search_dir);
    assert_eq!(loaded.plugin.info().name, "CV6");
}

#[test]
fn bare_name_tries_name_then_prefixed_name() {
    let loaded = load_net(&with("cv6")).unwrap();
    let c = loaded.report.chosen().unwrap();
    let files: Vec<&str> = c.attempts.iter().map(|a| a.file.as_str()).collect();
    assert_eq!(files[0], "cv6");
    assert!(matches!(c.attempts[0].result, AttemptResult::NotFound(_)));
    assert_eq!(files[1], "libnccl-net-cv6.so");
    // `cargo test` puts target/<profile> on LD_LIBRARY_PATH, so the loader may find
    // it; otherwise ferroccl's plugin directories (the exe's parent) do.
    assert!(
        files.len() == 2 || (files.len() == 3 && c.attempts[2].from_search_dir),
        "{files:?}"
    );
    assert_eq!(c.net_version, Some(6));
    assert_eq!(c.name.as_deref(), Some("CV6"));
    assert!(c.file.as_ref().unwrap().ends_with("libnccl-net-cv6.so"));
}

#[test]
fn plugin_dirs_find_bare_names_in_nccl_and_cargo_spelling() {
    let dir = TempDir::new("dirs");
    // Copies (new inodes) under names the loader's path does not have.
    std::fs::copy(lib("libnccl-net-cv6.so"), dir.0.join("libnccl-net-cv6dash.so")).unwrap();
    std::fs::copy(lib("libnccl-net-cv6.so"), dir.0.join("libnccl_net_cv6under.so")).unwrap();
    let o = LoadOptions {
        plugin_path: vec![dir.0.clone()],
        search_exe_dirs: false,
        ..opts()
    };
    for name in ["cv6dash", "cv6under"] {
        let loaded = load_net(&LoadOptions {
            net_plugin: Some(name.into()),
            ..o.clone()
        })
        .unwrap();
        let c = loaded.report.chosen().unwrap();
        let files: Vec<&str> = c.attempts.iter().map(|a| a.file.as_str()).collect();
        assert_eq!(
            files[..2],
            [name.to_string(), format!("libnccl-net-{name}.so")],
            "{files:?}"
        );
        assert!(
            c.attempts[2].from_search_dir && files[2].starts_with(dir.0.to_str().unwrap()),
            "{files:?}"
        );
        assert_eq!(c.attempts[2].result, AttemptResult::Opened);
    }
    // Without the directory the same names are not found.
    let e = load_net(&LoadOptions {
        net_plugin: Some("cv6dash".into()),
        search_exe_dirs: false,
        ..opts()
    });
    assert!(report_of(&e.unwrap_err()).contains("not found"));
}

#[test]
fn path_is_used_as_given() {
    let p = lib("libnccl-net-cv6.so");
    let loaded = load_net(&with(&p)).unwrap();
    let c = loaded.report.chosen().unwrap();
    assert_eq!(c.attempts.len(), 1, "a path gets no second try: {:?}", c.attempts);
    assert_eq!(c.attempts[0].file, p);
}

#[test]
fn comma_list_falls_back_in_order_and_reports_each() {
    let loaded = load_net(&with("ferroccl-absent,,cv6initfail,cv6zerodev,cv6")).unwrap();
    let cs = &loaded.report.candidates;
    assert_eq!(cs.len(), 4, "{}", loaded.report);
    assert_eq!(cs[0].rejection(), Some(&Rejection::NotFound));
    match cs[1].rejection() {
        Some(Rejection::InitFailed { code: Some(2), error }) => assert!(error.contains("ncclSystemError"), "{error}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(cs[2].rejection(), Some(&Rejection::NoDevices));
    assert_eq!(cs[3].outcome, Outcome::Chosen);
}

#[test]
fn none_disables_external_plugins_then_in_tree_order_is_ib_then_socket() {
    assert!(
        load_net(&with("none"))
            .unwrap_err()
            .to_string()
            .contains("failed to initialize any NET plugin")
    );
    // Stand-in in-tree plugins in a plugin dir (the real ones are tested by their crates).
    let dir = TempDir::new("intree");
    std::os::unix::fs::symlink(lib("libnccl-net-cv6.so"), dir.0.join("libnccl_net_socket.so")).unwrap();
    let o = LoadOptions {
        net_plugin: Some("NONE".into()),
        in_tree: true,
        search_exe_dirs: false,
        plugin_path: vec![dir.0.clone()],
        ..LoadOptions::default()
    };
    let loaded = load_net(&o).unwrap();
    let cs = &loaded.report.candidates;
    assert_eq!(cs.len(), 2, "{}", loaded.report);
    assert_eq!(cs[0].kind, CandidateKind::InTreeIb);
    assert!(cs[0].rejection().is_some(), "{}", loaded.report);
    assert_eq!(cs[1].kind, CandidateKind::InTreeSocket);
    assert_eq!(cs[1].outcome, Outcome::Chosen);
    assert!(!loaded.is_external());
}

#[test]
fn missing_library() {
    let e = load_net(&with("/nonexistent/libnccl-net-x.so")).unwrap_err();
    assert!(report_of(&e).contains("not found"));
    let e = load_net_from("/nonexistent/libnccl-net-x.so", &opts()).unwrap_err();
    assert!(matches!(e, PluginError::NotFound { .. }), "{e}");
}

#[test]
fn missing_dependency_dlerror_reaches_report_and_log() {
    let (r, log) = logged(|| load_net(&with("missingdep")));
    let e = r.unwrap_err();
    assert!(report_of(&e).contains("libferroccl_missing.so"), "{e}");
    assert!(
        log.contains("libferroccl_missing.so"),
        "dlerror text in the INFO log:\n{log}"
    );
    assert!(log.contains("dlopen failed"), "{log}");
    let e = load_net_from("missingdep", &opts()).unwrap_err();
    match e {
        PluginError::DlOpen { file, dlerror } => {
            assert!(file.ends_with("libnccl-net-missingdep.so"), "{file}");
            assert!(dlerror.contains("libferroccl_missing.so"), "{dlerror}");
        }
        other => panic!("expected DlOpen, got {other}"),
    }
}

#[test]
fn library_without_a_supported_symbol() {
    let loaded = load_net(&with("cv6nosym")).unwrap_err();
    assert!(report_of(&loaded).contains("no symbol ncclNetPlugin_v12"), "{loaded}");
    let e = load_net_from("cv6nosym", &opts()).unwrap_err();
    assert!(matches!(e, PluginError::NoSymbol { cap: 12, .. }), "{e}");
    // The main program exports no plugin either (STATIC_PLUGIN → dlopen(NULL)).
    let e = load_net_from("STATIC_PLUGIN", &opts()).unwrap_err();
    assert!(matches!(e, PluginError::NoSymbol { .. }), "{e}");
}

#[test]
fn init_failure_is_reported_with_code_and_plugin_log() {
    // A private copy: a library whose init failed stays disabled for the process,
    // so other tests loading the shared file must not have touched this one.
    let dir = TempDir::new("initfail");
    let copy = dir.0.join("libnccl-net-initfail-private.so");
    std::fs::copy(lib("libnccl-net-cv6initfail.so"), &copy).unwrap();
    let copy = copy.to_string_lossy().into_owned();
    let cap = LogCapture::start();
    let e = load_net_from(&copy, &opts()).unwrap_err();
    match &e {
        PluginError::Call {
            call: "init", plugin, ..
        } => assert_eq!(plugin, "CV6InitFail"),
        other => panic!("expected init Call error, got {other}"),
    }
    assert!(e.to_string().contains("ncclSystemError (2)"), "{e}");
    let needle = "CV6InitFail init failing on purpose (code 2)";
    let n_after_first = cap.lines_containing(needle).len();
    assert!(
        n_after_first >= 1,
        "the plugin's WARN reached the host logger: {:?}",
        cap.lines()
    );
    // Disabled for the process: a second attempt does not call init again.
    let e2 = load_net_from(&copy, &opts()).unwrap_err();
    assert!(e2.to_string().contains("init failed earlier"), "{e2}");
    // The library was not unloaded after its init ran (it is pinned).
    drop(dir);
    let e3 = load_net_from("cv6initfail", &opts()).unwrap_err();
    assert!(matches!(e3, PluginError::Call { call: "init", .. }), "{e3}");
}

#[test]
fn zero_devices() {
    let e = load_net_from("cv6zerodev", &opts()).unwrap_err();
    assert!(matches!(e, PluginError::NoDevices { .. }), "{e}");
}

#[test]
fn nccl_net_selects_by_name_case_insensitively_and_disables_fallback() {
    let o = LoadOptions {
        net: Some("cv6".into()),
        ..with("cv6zerodev,cv6late,cv6")
    };
    let loaded = load_net(&o).unwrap();
    let cs = &loaded.report.candidates;
    assert!(
        matches!(cs[1].rejection(), Some(Rejection::NameMismatch { .. })),
        "{}",
        loaded.report
    );
    assert_eq!(loaded.plugin.info().name, "CV6");

    let o = LoadOptions {
        net: Some("NoSuchNet".into()),
        ..with("cv6,cv6late")
    };
    let e = load_net(&o).unwrap_err();
    let r = report_of(&e);
    assert!(r.contains("is not NCCL_NET=NoSuchNet"), "{r}");
}

#[test]
fn strict_mode_refuses_to_fall_back() {
    let o = LoadOptions {
        strict: true,
        ..with("cv6zerodev,cv6")
    };
    match load_net(&o).unwrap_err() {
        PluginError::Strict { candidate, why } => {
            assert_eq!(candidate, "cv6zerodev");
            assert_eq!(why, "0 devices");
        }
        other => panic!("expected Strict, got {other}"),
    }
    // Without strict the same list falls back.
    assert_eq!(load_net(&with("cv6zerodev,cv6")).unwrap().plugin.info().name, "CV6");
    // Name-mismatch skips are not fallbacks.
    let o = LoadOptions {
        strict: true,
        net: Some("CV6".into()),
        ..with("cv6late,cv6")
    };
    assert_eq!(load_net(&o).unwrap().plugin.info().name, "CV6");
}

#[test]
fn version_cap() {
    let o = LoadOptions {
        max_net_version: 9,
        ..with(&sdk_lib())
    };
    let loaded = load_net(&o).unwrap();
    assert_eq!(loaded.plugin.info().version, 9);
    // A library exporting only v7, capped at 6: "no symbol" naming what it has.
    let o = LoadOptions {
        max_net_version: 6,
        ..opts()
    };
    let e = load_net(&LoadOptions {
        net_plugin: Some("cv6unpack".into()),
        ..o.clone()
    })
    .unwrap_err();
    assert!(report_of(&e).contains("exports only versions [7]"), "{e}");
    let bad = LoadOptions {
        max_net_version: 13,
        ..opts()
    };
    assert!(matches!(load_net(&bad), Err(PluginError::InvalidOption { .. })));
}

#[test]
fn options_from_an_environment_map() {
    let env: HashMap<String, String> = [
        ("NCCL_NET_PLUGIN", "ferroccl-absent,cv6"),
        ("NCCL_NET", "cv6"),
        ("FERROCCL_NET_MAX_VERSION", "6"),
        ("FERROCCL_NET_STRICT", "0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let o = LoadOptions {
        in_tree: false,
        ..LoadOptions::from_env_map(&env)
    };
    let loaded = load_net(&o).unwrap();
    assert_eq!(loaded.report.candidates.len(), 2);
    assert_eq!(loaded.plugin.info().name, "CV6");
}

#[test]
fn resolution_is_logged_at_info() {
    let (r, log) = logged(|| load_net(&with("ferroccl-absent,cv6")));
    r.unwrap();
    assert!(
        log.contains("external 'ferroccl-absent'") && log.contains("rejected, not found"),
        "{log}"
    );
    assert!(log.contains("NET/Plugin: using 'CV6' (ncclNet v6) from"), "{log}");
}

#[test]
fn tuner_none_not_found_sticky_and_fallback_into_net_library() {
    let l = AuxLoader::new(AuxKind::Tuner);
    let o = LoadOptions {
        tuner_plugin: Some("none".into()),
        ..opts()
    };
    assert!(matches!(l.load(&o, None), Err(PluginError::Disabled { .. })));
    // Sticky: even a valid setting is not retried in this process.
    let o2 = LoadOptions {
        tuner_plugin: Some(sdk_lib()),
        ..opts()
    };
    assert!(matches!(l.load(&o2, None), Err(PluginError::StickyFailure { .. })));

    let l = AuxLoader::new(AuxKind::Tuner);
    assert!(matches!(l.load(&opts(), None), Err(PluginError::NotFound { .. })));

    // Unset NCCL_TUNER_PLUGIN, no libnccl-tuner.so: NCCL looks into the external net library.
    let net = load_net_from(&sdk_lib(), &opts()).unwrap();
    assert!(net.is_external());
    let l = AuxLoader::new(AuxKind::Tuner);
    let t = l.load(&opts(), Some(&net)).unwrap();
    assert!(t.from_net_library);
    assert_eq!(t.version, 6);
    assert_eq!(t.symbol, "ncclTunerPlugin_v6");
    assert_eq!(t.name, "SdkLoopTuner");
    // Success is shared by later callers.
    assert!(Arc::ptr_eq(&t, &l.load(&opts(), None).unwrap()));

    // A net library without a profiler: "no symbol", then sticky.
    let l = AuxLoader::new(AuxKind::Profiler);
    assert!(matches!(l.load(&opts(), Some(&net)), Err(PluginError::NoSymbol { .. })));
    assert!(matches!(
        l.load(&opts(), Some(&net)),
        Err(PluginError::StickyFailure { .. })
    ));
}
