//! `cargo xtask` (alias in `.cargo/config.toml`): see the library docs.
//!
//! ```text
//! cargo xtask dist [--profile P] [--out DIR] [--require-all]   # tools + plugins under NCCL's names
//! cargo xtask readme [--run] [--max-size 1M]                   # the README's quick start: checked, run
//! cargo xtask doc-check [--conformance PATH]                   # docs name only what exists
//! cargo xtask gpu-bundle DIR [--profile P]                     # GPU checks for a machine without cargo
//! ```

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use clap::{Parser, Subcommand};
use xtask::dist::{DistOptions, dist};
use xtask::workspace::{Workspace, cargo};
use xtask::{doccheck, readme};

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", about = "ferroccl project tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build the tools and every plugin of plugins/ into one prefix: bin/ and lib/,
    /// the plugins under NCCL's file names (libnccl-net-socket.so, …).
    Dist {
        /// Cargo profile.
        #[arg(long, default_value = "release")]
        profile: String,
        /// Output prefix (default: <target dir>/dist).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Fail (instead of skipping) when a plugin's system packages are missing.
        #[arg(long)]
        require_all: bool,
    },
    /// Check the README's quick start (two commands, prerequisites line); with --run,
    /// run its first command verbatim with a small size range and check the output.
    Readme {
        /// Run the first command (in the workspace root) and check its output.
        #[arg(long)]
        run: bool,
        /// Largest message size for the run (replaces the command's `-e`).
        #[arg(long, default_value = "1M")]
        max_size: String,
    },
    /// Build every check of the GPU path (the GPU tests, the reduction benchmark,
    /// the tools, the plugins, the conformance suite) into DIR with a run.sh that
    /// runs them all on a GPU machine without a Rust toolchain.
    GpuBundle {
        /// The bundle directory.
        dir: PathBuf,
        /// Cargo profile (`dev` builds faster, for trying the bundle itself).
        #[arg(long, default_value = "release")]
        profile: String,
    },
    /// Check that the documents and doc comments name only files, Rust items and
    /// conformance check ids that exist (rustdoc for the doc links, then the
    /// backticked names; builds ferroccl-conformance for the ids).
    DocCheck {
        /// The ferroccl-conformance binary whose --list gives the check ids
        /// (default: build it and use <target dir>/debug/ferroccl-conformance).
        #[arg(long)]
        conformance: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ws = match Workspace::load(&std::env::current_dir().unwrap_or_else(|_| ".".into())) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = match cli.cmd {
        Cmd::Dist {
            profile,
            out,
            require_all,
        } => dist(
            &ws,
            &DistOptions {
                profile,
                out,
                require_all,
            },
        )
        .map(|rep| print!("{}", rep.summary())),
        Cmd::Readme { run, max_size } => readme_cmd(&ws, run, &max_size),
        Cmd::DocCheck { conformance } => doc_check_cmd(&ws, conformance),
        Cmd::GpuBundle { dir, profile } => {
            let dir = std::path::absolute(&dir).unwrap_or(dir);
            xtask::gpubundle::gpu_bundle(
                &ws,
                &xtask::gpubundle::BundleOptions {
                    out: dir.clone(),
                    profile,
                },
            )
            .map(|files| {
                println!(
                    "GPU bundle in {} ({} files); on the GPU machine run:",
                    dir.display(),
                    files.len()
                );
                println!("  {}/run.sh", dir.display());
            })
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn readme_cmd(ws: &Workspace, run: bool, max_size: &str) -> Result<(), String> {
    let path = ws.root.join("README.md");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let q = readme::parse(&text)?;
    println!(
        "README quick start:\n  {}\n  $ {}\n  $ {}",
        q.prerequisites, q.run, q.test
    );
    if !run {
        return Ok(());
    }
    let max_bytes = readme::parse_size(max_size).ok_or_else(|| format!("bad --max-size {max_size:?}"))?;
    let cmd = readme::with_max_size(&q.run, max_size)?;
    println!("running (in {}):\n  $ {cmd}", ws.root.display());
    let mut child = Command::new("bash")
        .args(["-c", &cmd])
        .current_dir(&ws.root)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    let mut stdout = String::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.map_err(|e| format!("reading the command's output: {e}"))?;
            println!("{line}");
            stdout.push_str(&line);
            stdout.push('\n');
        }
    }
    let status = child.wait().map_err(|e| format!("waiting for the command: {e}"))?;
    if !status.success() {
        return Err(format!("the README's quick-start command failed ({status})"));
    }
    let plugin = readme::expected_plugin_file(&q.run)?;
    let largest = readme::largest_size(&cmd, max_bytes)?;
    readme::check_output(&stdout, largest, &plugin)?;
    println!(
        "README quick start: OK (sizes up to {largest} B of -e {max_size}, every result checked, plugin {plugin})"
    );
    Ok(())
}

fn doc_check_cmd(ws: &Workspace, conformance: Option<PathBuf>) -> Result<(), String> {
    let exe = match conformance {
        Some(p) => p,
        None => {
            let st = cargo()
                .args([
                    "build",
                    "-q",
                    "-p",
                    "ferroccl-conformance",
                    "--bin",
                    "ferroccl-conformance",
                ])
                .current_dir(&ws.root)
                .status()
                .map_err(|e| format!("cannot run cargo: {e}"))?;
            if !st.success() {
                return Err("building ferroccl-conformance failed".into());
            }
            ws.target_dir.join("debug/ferroccl-conformance")
        }
    };
    // Doc comments' links, by rustdoc itself.
    let st = cargo()
        .args(["doc", "-q", "--no-deps", "--workspace", "--document-private-items"])
        .env("RUSTDOCFLAGS", "-D warnings -A rustdoc::private_intra_doc_links")
        .current_dir(&ws.root)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !st.success() {
        return Err("cargo doc found broken doc links (above)".into());
    }
    let mut ix = doccheck::Index::new(&ws.root, doccheck::tracked_files(&ws.root)?);
    ix.check_ids = doccheck::check_ids(&exe)?;
    let findings = doccheck::check(&ix);
    for f in &findings {
        println!("{f}");
    }
    if findings.is_empty() {
        println!(
            "doc-check: OK ({} files, {} check ids)",
            ix.files.len(),
            ix.check_ids.len()
        );
        Ok(())
    } else {
        Err(format!("doc-check: {} name(s) that do not exist", findings.len()))
    }
}
