//! scripts/system-deps.sh, the checker of the one package list, run for real:
//! it names exactly the missing packages and the apt-get line, refuses unknown
//! groups, and passes on this (provisioned) machine for what the tests need.
//! A throw-away list (SYSTEM_PACKAGES_FILE) stands in for packages that are
//! surely missing, since the real ones are installed here.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn deps(list: Option<&std::path::Path>, args: &[&str]) -> (i32, String) {
    let mut c = Command::new("bash");
    c.arg(root().join("scripts/system-deps.sh")).args(args);
    c.env_remove("FERROCCL_SKIP_SYSTEM_CHECK");
    if let Some(l) = list {
        c.env("SYSTEM_PACKAGES_FILE", l);
    }
    let out = c.output().expect("run scripts/system-deps.sh");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn fake_list() -> PathBuf {
    let p = std::env::temp_dir().join(format!("ferroccl-system-packages-{}.txt", std::process::id()));
    std::fs::write(
        &p,
        "# test list\n\
         ferroccl-fake-cmd   g1  cmd:ferroccl-no-such-command   a command\n\
         ferroccl-fake-pc    g1  pc:ferroccl-no-such-module     a pkg-config module\n\
         ferroccl-fake-file  g2  file:/nonexistent/ferroccl/*.h a file\n\
         bash-is-here        g2  cmd:bash                       present\n",
    )
    .unwrap();
    p
}

#[test]
fn check_names_exactly_the_missing_packages_and_the_install_line() {
    let list = fake_list();
    let (rc, out) = deps(Some(&list), &["check", "g1", "g2"]);
    assert_eq!(rc, 1, "{out}");
    assert!(
        out.contains("missing system packages: ferroccl-fake-cmd ferroccl-fake-pc ferroccl-fake-file\n"),
        "{out}"
    );
    assert!(
        !out.contains("bash-is-here"),
        "a present package must not be named: {out}"
    );
    if Command::new("sh")
        .args(["-c", "command -v apt-get"])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(
            out.contains(
                "apt-get install -y --no-install-recommends ferroccl-fake-cmd ferroccl-fake-pc ferroccl-fake-file\n"
            ),
            "{out}"
        );
    }
    let (rc, out) = deps(Some(&list), &["check", "g2", "g1"]);
    assert_eq!(rc, 1, "{out}");
    let (rc, out) = deps(Some(&list), &["list", "g2"]);
    assert_eq!((rc, out.trim()), (0, "ferroccl-fake-file bash-is-here"));
    std::fs::remove_file(list).ok();
}

#[test]
fn unknown_groups_are_refused() {
    let (rc, out) = deps(None, &["check", "cc", "tset"]);
    assert_eq!(rc, 2, "{out}");
    assert!(
        out.contains("unknown group 'tset'")
            && ["cc", "ib", "test", "vm", "netns"]
                .iter()
                .all(|g| out.split_whitespace().any(|w| w.trim_end_matches(')') == *g)),
        "{out}"
    );
}

#[test]
fn what_the_tests_need_is_present_here() {
    // scripts/test.sh ensured these before building; if this fails, the list
    // or a probe is wrong (a package the build needed was found missing).
    let (rc, out) = deps(None, &["check", "cc", "ib", "test"]);
    assert_eq!(rc, 0, "{out}");
    let (_, listed) = deps(None, &["list", "cc", "ib", "test"]);
    for p in [
        "gcc",
        "pkg-config",
        "libibverbs-dev",
        "librdmacm-dev",
        "libclang-dev",
        "openmpi-bin",
    ] {
        assert!(
            listed.split_whitespace().any(|x| x == p),
            "{p} not in the list: {listed}"
        );
    }
}
