//! A simulated cluster made by `scripts/netns-cluster.sh up K`: K hosts on one
//! machine, each a network namespace with its own UTS namespace (host name, so
//! every host has its own host hash) and mount namespace (its own sysfs and
//! `/etc/hosts`). `ferroccl-perf --hosts K` reads the cluster's description
//! ([`Cluster::load`]) and starts each process on its host by entering the
//! host's namespaces with `setns(2)` ([`HostNs::enter`]), as `nsenter` would.
//!
//! The description is the file `<dir>/<name>/hosts` (`<dir>` is
//! `$FERROCCL_NETNS_DIR`, else `/run/ferroccl-netns`): a `#` comment line, then
//! one line per host:
//!
//! ```text
//! h<i> <netns file> <uts file> <mnt file> <host name> <address of eth0> [<address of eth1>]
//! ```
//!
//! The script writes it last, so its presence means the cluster is complete.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Default directory of cluster states (`netns-cluster.sh`'s `STATE_ROOT`).
pub const DEFAULT_DIR: &str = "/run/ferroccl-netns";

/// Default cluster name (`netns-cluster.sh`'s `--name` default).
pub const DEFAULT_NAME: &str = "fcc";

/// One host of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// `h<i>`.
    pub id: String,
    /// Its network namespace (`/run/netns/<name>-h<i>`).
    pub netns: PathBuf,
    /// Its UTS namespace (bind-mounted file).
    pub uts: PathBuf,
    /// Its mount namespace (bind-mounted file).
    pub mnt: PathBuf,
    /// Its host name.
    pub hostname: String,
    /// Addresses of its NICs, `eth0` first.
    pub addrs: Vec<String>,
}

/// A cluster's hosts, in index order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// The cluster's name (`--name` of the script).
    pub name: String,
    /// The description file read.
    pub path: PathBuf,
    /// Host 0 first.
    pub hosts: Vec<Host>,
}

impl Cluster {
    /// The cluster named `name` (`None`: `$FERROCCL_NETNS_CLUSTER`, else
    /// [`DEFAULT_NAME`]) under `$FERROCCL_NETNS_DIR` (else [`DEFAULT_DIR`]).
    ///
    /// Errors: the description is missing (with the command that makes it) or
    /// malformed (naming the line).
    pub fn load(name: Option<&str>) -> Result<Cluster, String> {
        let name = name
            .map(str::to_owned)
            .or_else(|| std::env::var("FERROCCL_NETNS_CLUSTER").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| DEFAULT_NAME.to_string());
        let dir = std::env::var_os("FERROCCL_NETNS_DIR")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
        let path = dir.join(&name).join("hosts");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "no simulated cluster '{name}' ({}: {e}); make one with `scripts/netns-cluster.sh --name {name} up K` (as root)",
                path.display()
            )
        })?;
        Cluster::parse(&name, &path, &text)
    }

    /// Parses a description (see the module docs); `path` is only for messages.
    pub fn parse(name: &str, path: &Path, text: &str) -> Result<Cluster, String> {
        let mut hosts = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let want = format!("h{}", hosts.len());
            if f.len() < 6 || f[0] != want {
                return Err(format!(
                    "{} line {}: expected `{want} <netns> <uts> <mnt> <hostname> <addr> [<addr>]`, found {line:?}",
                    path.display(),
                    n + 1
                ));
            }
            hosts.push(Host {
                id: f[0].to_string(),
                netns: PathBuf::from(f[1]),
                uts: PathBuf::from(f[2]),
                mnt: PathBuf::from(f[3]),
                hostname: f[4].to_string(),
                addrs: f[5..].iter().map(|s| s.to_string()).collect(),
            });
        }
        if hosts.is_empty() {
            return Err(format!("{}: no hosts listed", path.display()));
        }
        Ok(Cluster {
            name: name.to_string(),
            path: path.to_path_buf(),
            hosts,
        })
    }
}

/// Host of process `proc` of `nprocs` on `nhosts` hosts: blocks of
/// `nprocs / nhosts` consecutive processes per host (Open MPI's `--map-by
/// slot` with that many slots per host).
pub fn host_of(proc: usize, nprocs: usize, nhosts: usize) -> usize {
    let per = (nprocs / nhosts.max(1)).max(1);
    (proc / per).min(nhosts.saturating_sub(1))
}

/// A host's namespaces, opened: what [`HostNs::enter`] joins.
#[derive(Debug)]
pub struct HostNs {
    uts: OwnedFd,
    net: OwnedFd,
    mnt: OwnedFd,
    /// The working directory to return to after joining the mount namespace
    /// (which resets it to `/`).
    cwd: Option<CString>,
}

impl HostNs {
    /// Opens `host`'s namespace files (needs permission to read them: root).
    pub fn open(host: &Host) -> Result<HostNs, String> {
        let open = |p: &Path, what: &str| {
            File::open(p).map(OwnedFd::from).map_err(|e| {
                format!(
                    "host {} ({}): {what} namespace {}: {e}",
                    host.id,
                    host.hostname,
                    p.display()
                )
            })
        };
        let cwd = std::env::current_dir()
            .ok()
            .and_then(|d| CString::new(d.into_os_string().into_encoded_bytes()).ok());
        Ok(HostNs {
            uts: open(&host.uts, "UTS")?,
            net: open(&host.netns, "network")?,
            mnt: open(&host.mnt, "mount")?,
            cwd,
        })
    }

    /// Moves the calling thread into the host: its UTS, network and mount
    /// namespaces (`setns(2)`, the order `nsenter` uses), then back to the
    /// working directory the namespaces were opened from. Joining a mount
    /// namespace needs a single-threaded process: call it before any thread
    /// starts, or in a child between `fork` and `exec`. Only system calls, no
    /// allocation: async-signal-safe.
    ///
    /// Errors: the `setns`/`chdir` error (EPERM without CAP_SYS_ADMIN; EINVAL for
    /// the mount namespace in a multi-threaded process).
    pub fn enter(&self) -> std::io::Result<()> {
        for (fd, kind) in [
            (&self.uts, libc::CLONE_NEWUTS),
            (&self.net, libc::CLONE_NEWNET),
            (&self.mnt, libc::CLONE_NEWNS),
        ] {
            // SAFETY: setns takes an open namespace file descriptor (owned by
            // `self`) and the namespace type; it touches no memory of ours.
            if unsafe { libc::setns(fd.as_raw_fd(), kind) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        if let Some(cwd) = &self.cwd {
            // SAFETY: `cwd` is a NUL-terminated string owned by `self`. A
            // directory missing in the host's mount namespace leaves us at `/`.
            unsafe { libc::chdir(cwd.as_ptr()) };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_scripts_description() {
        let text = "# ferroccl-netns-v1 fcc: host netns uts mnt hostname addresses\n\
                    h0 /run/netns/fcc-h0 /run/ferroccl-netns/fcc/h0.uts /run/ferroccl-netns/fcc/h0.mnt fcc-h0 198.18.0.1\n\
                    h1 /run/netns/fcc-h1 /run/ferroccl-netns/fcc/h1.uts /run/ferroccl-netns/fcc/h1.mnt fcc-h1 198.18.0.2 198.18.1.2\n";
        let c = Cluster::parse("fcc", Path::new("hosts"), text).unwrap();
        assert_eq!(c.hosts.len(), 2);
        assert_eq!(c.hosts[1].hostname, "fcc-h1");
        assert_eq!(c.hosts[1].addrs, vec!["198.18.0.2", "198.18.1.2"]);
        assert_eq!(c.hosts[0].mnt, PathBuf::from("/run/ferroccl-netns/fcc/h0.mnt"));
    }

    #[test]
    fn rejects_a_gap_or_a_short_line() {
        let gap = "h0 a b c fcc-h0 198.18.0.1\nh2 a b c fcc-h2 198.18.0.3\n";
        let e = Cluster::parse("fcc", Path::new("hosts"), gap).unwrap_err();
        assert!(e.contains("line 2") && e.contains("expected `h1"), "{e}");
        let short = "h0 a b c fcc-h0\n";
        assert!(Cluster::parse("fcc", Path::new("hosts"), short).is_err());
        assert!(Cluster::parse("fcc", Path::new("hosts"), "# only a comment\n").is_err());
    }

    #[test]
    fn processes_fill_hosts_in_blocks() {
        let hosts: Vec<usize> = (0..4).map(|p| host_of(p, 4, 2)).collect();
        assert_eq!(hosts, vec![0, 0, 1, 1]);
        let hosts: Vec<usize> = (0..4).map(|p| host_of(p, 4, 4)).collect();
        assert_eq!(hosts, vec![0, 1, 2, 3]);
        assert_eq!(host_of(7, 8, 4), 3);
    }
}
