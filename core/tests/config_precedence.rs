//! nccl.conf parsing, NCCL precedence, typed parameters and their errors.

use std::path::Path;

use ferroccl::config::{Config, ConfigError, IntParamExt, Source, StrParamExt, params, parse_conf, parse_int};

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn conf_syntax_follows_nccl() {
    let text = "# comment\nNCCL_A=1\r\n #not a comment=x\nno equals sign\nNCCL_SOCKET_IFNAME==ens1f0\nA = B\n=skip\nNCCL_A=2\n";
    let got = parse_conf(text);
    assert_eq!(
        got,
        vec![
            ("NCCL_A".into(), "1".into()),
            (" #not a comment".into(), "x".into()),
            ("NCCL_SOCKET_IFNAME".into(), "=ens1f0".into()),
            ("A ".into(), " B".into()),
            ("NCCL_A".into(), "2".into()),
        ]
    );
    // first assignment in a file wins (setenv overwrite = 0)
    let cfg = Config::from_sources(env(&[]), [(Path::new("/f"), text)]);
    assert_eq!(cfg.raw("NCCL_A"), Some("1"));
    assert_eq!(cfg.raw("A "), Some(" B"));
}

#[test]
fn precedence_env_then_user_file_then_etc() {
    let read = |p: &Path| match p.to_str().unwrap() {
        "/home/u/.nccl.conf" => Some("NCCL_X=home\nNCCL_Y=home\n".to_string()),
        "/custom.conf" => Some("NCCL_X=custom\nNCCL_Y=custom\n".to_string()),
        "/etc/nccl.conf" => Some("NCCL_X=etc\nNCCL_Y=etc\nNCCL_Z=etc\n".to_string()),
        _ => None,
    };
    let cfg = Config::load(env(&[("HOME", "/home/u"), ("NCCL_X", "env")]), read);
    assert_eq!(cfg.raw("NCCL_X"), Some("env"));
    assert_eq!(cfg.raw("NCCL_Y"), Some("home"));
    assert_eq!(cfg.raw("NCCL_Z"), Some("etc"));
    assert_eq!(
        cfg.setting("NCCL_Y").unwrap().source,
        Source::File("/home/u/.nccl.conf".into())
    );
    // NCCL_CONF_FILE replaces ~/.nccl.conf
    let cfg = Config::load(env(&[("HOME", "/home/u"), ("NCCL_CONF_FILE", "/custom.conf")]), read);
    assert_eq!(cfg.raw("NCCL_Y"), Some("custom"));
    assert_eq!(cfg.raw("NCCL_Z"), Some("etc"));
    // ... unless empty
    let cfg = Config::load(env(&[("HOME", "/home/u"), ("NCCL_CONF_FILE", "")]), read);
    assert_eq!(cfg.raw("NCCL_Y"), Some("home"));
}

#[test]
fn real_files_are_read() {
    let dir = std::env::temp_dir().join(format!("ferroccl-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("nccl.conf");
    std::fs::write(&f, "NCCL_BUFFSIZE=0x100000\n").unwrap();
    let cfg = Config::load(env(&[("NCCL_CONF_FILE", f.to_str().unwrap())]), |p| {
        std::fs::read_to_string(p).ok()
    });
    assert_eq!(params::BUFFSIZE.get(&cfg).unwrap(), 1 << 20);
    assert_eq!(
        cfg.echo(),
        vec![
            format!("NCCL_BUFFSIZE set by file {} to 0x100000.", f.display()),
            format!("NCCL_CONF_FILE set by environment to {}.", f.display()),
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn strtoll_syntax() {
    assert_eq!(parse_int("42"), Some(42));
    assert_eq!(parse_int("  -42"), Some(-42));
    assert_eq!(parse_int("+0x1F"), Some(31));
    assert_eq!(parse_int("010"), Some(8));
    assert_eq!(parse_int("0"), Some(0));
    assert_eq!(parse_int("-9223372036854775808"), Some(i64::MIN));
    assert_eq!(parse_int("9223372036854775808"), None);
    assert_eq!(parse_int("12abc"), None);
    assert_eq!(parse_int("08"), None);
    assert_eq!(parse_int("0x"), None);
    assert_eq!(parse_int(""), None);
}

#[test]
fn typed_params_and_errors() {
    let cfg = Config::from_sources(
        env(&[
            ("NCCL_BUFFSIZE", "12"),
            ("NCCL_MIN_NCHANNELS", "two"),
            ("NCCL_MAX_NCHANNELS", ""),
            ("B", "off"),
        ]),
        [],
    );
    let e = params::BUFFSIZE.get(&cfg).unwrap_err();
    assert!(matches!(
        e,
        ConfigError::OutOfRange {
            value: 12,
            min: 4096,
            ..
        }
    ));
    assert_eq!(
        e.to_string(),
        "NCCL_BUFFSIZE=12 (from environment) is out of range; expected an integer in [4096, 1073741824]"
    );
    let e = params::MIN_NCHANNELS.get(&cfg).unwrap_err();
    assert!(
        e.to_string().contains("NCCL_MIN_NCHANNELS=\"two\"") && e.to_string().contains("[1, 64]"),
        "{e}"
    );
    assert_eq!(params::MAX_NCHANNELS.get(&cfg).unwrap(), 64, "empty means default");
    assert_eq!(cfg.get_int("UNSET", 7, 0..=10).unwrap(), 7);
    assert!(!cfg.get_bool("B", true).unwrap());
    assert!(cfg.get_bool("UNSET", true).unwrap());
    assert_eq!(cfg.validate().unwrap_err().len(), 2);
    let cfg = Config::from_sources(env(&[("NCCL_SOCKET_FAMILY", "AF_UNIX")]), []);
    assert!(matches!(
        params::SOCKET_FAMILY.get_checked(&cfg),
        Err(ConfigError::BadChoice { .. })
    ));
    assert_eq!(params::DEBUG_SUBSYS.get(&cfg), Some("INIT,BOOTSTRAP,ENV"));
}

#[test]
fn echo_lists_set_params_with_source() {
    let cfg = Config::from_sources(
        env(&[("NCCL_DEBUG", "INFO"), ("PATH", "/bin"), ("NCCL_FOO", "1")]),
        [(Path::new("/etc/nccl.conf"), "NCCL_DEBUG=WARN\nNCCL_ALGO=Ring\n")],
    );
    assert_eq!(
        cfg.echo(),
        vec![
            "NCCL_ALGO set by file /etc/nccl.conf to Ring.".to_string(),
            "NCCL_DEBUG set by environment to INFO.".to_string(),
            // The runtime knows only its own parameters (a plugin may read NCCL_FOO).
            "NCCL_FOO set by environment to 1. (not a runtime parameter)".to_string(),
        ]
    );
}
