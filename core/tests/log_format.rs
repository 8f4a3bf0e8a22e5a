//! NCCL log line shape, level and subsystem filtering, NCCL_DEBUG_FILE expansion.

use std::io::Write;
use std::sync::{Arc, Mutex};

use ferroccl::config::Config;
use ferroccl::log::{self, Level, LogSettings, NcclLayer, expand_debug_file, parse_subsys, subsys};
use ferroccl::{nccl_info, nccl_trace, nccl_version, nccl_warn};
use tracing_subscriber::layer::SubscriberExt;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);
impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn capture(env: &[(&str, &str)], f: impl FnOnce()) -> Vec<String> {
    let cfg = Config::from_sources(env.iter().map(|(k, v)| (k.to_string(), v.to_string())), []);
    let buf = Buf::default();
    let layer = NcclLayer::new(LogSettings::from_config(&cfg), Box::new(buf.clone()));
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    text.lines().map(str::to_string).collect()
}

#[test]
fn info_and_warn_line_shape() {
    let lines = capture(&[("NCCL_DEBUG", "INFO")], || {
        log::set_rank(Some(3));
        nccl_info!(INIT, "comm {} nranks {}", 7, 4);
        nccl_warn!("connect failed");
        log::set_rank(None);
        nccl_info!(INIT, "no rank");
    });
    assert_eq!(lines.len(), 3, "{lines:?}");
    let head = format!("{}:{}:{} [3]", log::hostname(), std::process::id(), log::gettid());
    assert_eq!(lines[0], format!("{head} NCCL INFO comm 7 nranks 4"));
    assert!(lines[1].starts_with(&format!("{head} log_format.rs:")), "{}", lines[1]);
    assert!(lines[1].ends_with(" NCCL WARN connect failed"), "{}", lines[1]);
    assert!(lines[2].ends_with("[-1] NCCL INFO no rank"), "{}", lines[2]);
}

#[test]
fn level_filtering_follows_nccl() {
    let emit = || {
        nccl_version!("version line");
        nccl_warn!("warn line");
        nccl_info!(INIT, "info line");
        nccl_trace!(INIT, "trace line");
    };
    assert!(capture(&[], emit).is_empty(), "unset NCCL_DEBUG prints nothing");
    assert_eq!(capture(&[("NCCL_DEBUG", "VERSION")], emit).len(), 1);
    assert_eq!(capture(&[("NCCL_DEBUG", "warn")], emit).len(), 2);
    assert_eq!(capture(&[("NCCL_DEBUG", "INFO")], emit).len(), 3);
    let t = capture(&[("NCCL_DEBUG", "TRACE")], emit);
    assert_eq!(t.len(), 4);
    assert!(t[3].contains(" NCCL TRACE trace line"), "{}", t[3]);
}

#[test]
fn subsystem_filtering() {
    let emit = || {
        nccl_info!(INIT, "init");
        nccl_info!(NET, "net");
        nccl_info!(BOOTSTRAP, "bootstrap");
        nccl_warn!("warn");
        log::log_raw(Level::Info, subsys::NET | subsys::COLL, "plugin.c", 12, "raw net");
    };
    let msgs = |env: &[(&str, &str)]| -> Vec<String> {
        capture(env, emit)
            .iter()
            .map(|l| l.rsplit(" NCCL ").next().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        msgs(&[("NCCL_DEBUG", "INFO")]),
        ["INFO init", "INFO bootstrap", "WARN warn"]
    );
    assert_eq!(
        msgs(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "NET")]),
        ["INFO net", "WARN warn", "INFO raw net"]
    );
    assert_eq!(
        msgs(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "^INIT,NET")]),
        // flags NET|COLL still intersect the mask through COLL (NCCL's `flags & mask`)
        ["INFO bootstrap", "WARN warn", "INFO raw net"]
    );
    assert_eq!(msgs(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "ALL")]).len(), 5);
    assert_eq!(
        msgs(&[("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "^ALL")]),
        ["WARN warn"]
    );
    assert_eq!(parse_subsys(Some("init,coll")), subsys::INIT | subsys::COLL);
    assert_eq!(parse_subsys(None), subsys::INIT | subsys::BOOTSTRAP | subsys::ENV);
}

#[test]
fn debug_file_substitution_and_writing() {
    assert_eq!(
        expand_debug_file("/tmp/nccl.%h.%p.log", "node1", 42),
        "/tmp/nccl.node1.42.log"
    );
    assert_eq!(expand_debug_file("a%%b%x%", "h", 1), "a%b%x%");
    let dir = std::env::temp_dir();
    let pattern = dir.join("ferroccl-log-%h-%p.txt");
    let cfg = Config::from_sources(
        [
            ("NCCL_DEBUG".to_string(), "WARN".to_string()),
            ("NCCL_DEBUG_FILE".to_string(), pattern.display().to_string()),
        ],
        [],
    );
    let layer = NcclLayer::from_config(&cfg);
    let path = layer.settings().file.clone().unwrap();
    assert_eq!(
        path,
        dir.join(format!("ferroccl-log-{}-{}.txt", log::hostname(), std::process::id()))
    );
    tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || nccl_warn!("to file"));
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(text.ends_with(" NCCL WARN to file\n"), "{text}");
}

#[test]
fn init_is_idempotent() {
    let cfg = Config::from_sources([], []);
    let first = log::init_from_config(&cfg);
    assert!(matches!(
        first,
        log::InitOutcome::Installed | log::InitOutcome::ExistingSubscriber
    ));
    assert_eq!(log::init_from_config(&cfg), log::InitOutcome::AlreadyInitialized);
    assert!(!log::enabled(Level::Warn, subsys::ALL));
}
