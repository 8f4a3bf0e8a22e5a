//! `cargo xtask doc-check`: the documents (every tracked `*.md` outside
//! `docs/reference/`, NCCL's facts) and the doc comments (`//!`, `///`) name
//! only what exists. It reads every backticked span and checks three kinds:
//!
//! * **files**: a path with one of the repository's extensions (`.rs`, `.md`,
//!   `.toml`, `.sh`, `.py`, `.json`, …) or a directory (`core/src/proxy/`) must
//!   exist, relative to the repository root, the document's directory, or (in a
//!   crate) the crate's root or its `src/`. NCCL's own files (`src/…`, `.cc`,
//!   `.cu`, headers nowhere in this repository) are not ours and are skipped.
//! * **Rust paths**: `a::b::c` rooted in something of ours (`crate`, a
//!   workspace crate, a module or item defined here) must name items that are
//!   defined somewhere in the workspace (modules, files, functions, types,
//!   constants, variants, fields, macros); paths into other crates (`std::…`,
//!   `tracing::…`) are skipped.
//! * **conformance check ids**: `load.init`, `profiler.symbols`, … must be
//!   checks the suite lists (`ferroccl-conformance --list`, `--tuner --list`,
//!   `--profiler --list`, `--collnet --list`, `--env`, `--gin`, `--rma`).
//!
//! Spans holding placeholders (`<n>`, `{…}`, `*`, `%`) are patterns, not names,
//! and are skipped. What it cannot see: a bare identifier (`try_run`) or prose.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One name a document uses that does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The document, relative to the repository root.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// The backticked span.
    pub span: String,
    /// What is missing.
    pub why: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: `{}`: {}",
            self.file.display(),
            self.line,
            self.span,
            self.why
        )
    }
}

/// Extensions of files this repository holds (a path with one of these is
/// checked; NCCL's `.cc`/`.cu`/`.h` only when it names a file of ours).
const OUR_EXTS: [&str; 13] = [
    "rs", "md", "toml", "sh", "py", "json", "csv", "svg", "txt", "yml", "xml", "c", "h",
];

/// Prefixes of the conformance suite's check ids.
const CHECK_PREFIXES: [&str; 13] = [
    "load", "props", "conn", "transfer", "memory", "fault", "perf", "gpu", "tuner", "profiler", "collnet", "env", "rma",
];

/// What the repository defines, for the checks.
#[derive(Debug, Default)]
pub struct Index {
    /// The repository root.
    pub root: PathBuf,
    /// Tracked files, relative to the root.
    pub files: BTreeSet<PathBuf>,
    /// Directories holding tracked files, relative to the root.
    pub dirs: BTreeSet<PathBuf>,
    /// File names (`net.rs`) of tracked files.
    pub basenames: BTreeSet<String>,
    /// Every name defined in the workspace's Rust sources, and every module
    /// (file stem, directory) and crate name.
    pub idents: BTreeSet<String>,
    /// Crate names of the workspace (`ferroccl`, `ferroccl_plugin_api`, …).
    pub crates: BTreeSet<String>,
    /// The conformance suite's check ids (empty: not checked).
    pub check_ids: BTreeSet<String>,
}

impl Index {
    /// Indexes `files` (tracked paths relative to `root`), reading the Rust
    /// sources among them.
    pub fn new(root: &Path, files: impl IntoIterator<Item = PathBuf>) -> Index {
        let mut ix = Index {
            root: root.to_path_buf(),
            ..Index::default()
        };
        for f in files {
            let mut d = f.parent();
            while let Some(p) = d.filter(|p| !p.as_os_str().is_empty()) {
                ix.dirs.insert(p.to_path_buf());
                if let Some(n) = p.file_name() {
                    ix.idents.insert(n.to_string_lossy().replace('-', "_"));
                }
                d = p.parent();
            }
            if let Some(n) = f.file_name() {
                ix.basenames.insert(n.to_string_lossy().into_owned());
            }
            if f.extension().is_some_and(|e| e == "rs") {
                if let Some(s) = f.file_stem() {
                    ix.idents.insert(s.to_string_lossy().into_owned());
                }
                if let Ok(text) = std::fs::read_to_string(root.join(&f)) {
                    rust_idents(&text, &mut ix.idents);
                }
            }
            if f.file_name().is_some_and(|n| n == "Cargo.toml")
                && let Ok(text) = std::fs::read_to_string(root.join(&f))
            {
                for name in package_names(&text) {
                    ix.crates.insert(name.replace('-', "_"));
                    ix.idents.insert(name.replace('-', "_"));
                }
            }
            ix.files.insert(f);
        }
        ix.crates.insert("crate".into());
        ix.idents.insert("crate".into());
        ix.idents.insert("self".into());
        ix.idents.insert("super".into());
        ix
    }

    /// The `src/` directories of the workspace's crates.
    fn src_dirs(&self) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter(|f| f.file_name().is_some_and(|n| n == "Cargo.toml"))
            .filter_map(|f| f.parent().map(|d| d.join("src")))
            .filter(|d| self.dirs.contains(d))
            .collect()
    }

    /// Whether `rel` (relative to the root) is a tracked file or directory.
    fn exists(&self, rel: &Path) -> bool {
        let rel = normalize(rel);
        self.files.contains(&rel) || self.dirs.contains(&rel)
    }
}

/// `rel` with `.` and `..` components resolved lexically.
fn normalize(rel: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// The `name = "…"` of each `[package]` table in a Cargo.toml.
fn package_names(toml: &str) -> Vec<String> {
    let mut in_package = false;
    let mut out = Vec::new();
    for line in toml.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_package = l == "[package]";
            continue;
        }
        if in_package && let Some(v) = l.strip_prefix("name") {
            let v = v.trim_start().trim_start_matches('=').trim().trim_matches('"');
            out.push(v.to_string());
        }
    }
    // The library may be renamed (`[lib] name = "nccl_net_socket"`).
    let mut in_lib = false;
    for line in toml.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_lib = l == "[lib]";
            continue;
        }
        if in_lib && let Some(v) = l.strip_prefix("name") {
            out.push(
                v.trim_start()
                    .trim_start_matches('=')
                    .trim()
                    .trim_matches('"')
                    .to_string(),
            );
        }
    }
    out
}

/// Adds every name a Rust source defines: items after `fn`, `struct`, `enum`,
/// `trait`, `type`, `const`, `static`, `mod`, `union`, `macro_rules!`; enum
/// variants and struct fields (a capitalised or lower-case identifier that
/// starts an indented line followed by `,`, `(`, `{` or `:`).
fn rust_idents(text: &str, out: &mut BTreeSet<String>) {
    const KEYWORDS: [&str; 10] = [
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "type ",
        "const ",
        "static ",
        "mod ",
        "union ",
        "macro_rules! ",
    ];
    for line in text.lines() {
        let l = line.trim_start();
        if l.starts_with("//") {
            continue;
        }
        for kw in KEYWORDS {
            let mut rest = l;
            while let Some(i) = rest.find(kw) {
                let before = &rest[..i];
                let boundary = before.is_empty() || before.ends_with([' ', '(', '{', '<', ';']);
                let after = &rest[i + kw.len()..];
                if boundary {
                    let name: String = after
                        .trim_start_matches("mut ")
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        out.insert(name);
                    }
                }
                rest = after;
            }
        }
        // Variants and fields: `Name,` `Name(` `Name {` `name:` at the start
        // of an indented line (after an optional `pub` / `pub(crate)`).
        if line.starts_with(' ') {
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub(super) "))
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            let name: String = l.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && !name.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                let tail = l[name.len()..].trim_start();
                if tail.is_empty() || tail.starts_with([',', '(', '{', ':']) && !tail.starts_with("::") {
                    out.insert(name);
                }
            }
        }
    }
}

/// Where a document's text is: whole lines of a Markdown file, or the doc
/// comment lines of a Rust file (`//!`, `///`), with their line numbers.
fn doc_lines(path: &Path, text: &str) -> Vec<(usize, String)> {
    let rust = path.extension().is_some_and(|e| e == "rs");
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, line) in text.lines().enumerate() {
        let l = line.trim_start();
        let doc = if rust {
            match l.strip_prefix("//!").or_else(|| l.strip_prefix("///")) {
                Some(d) => d,
                None => continue,
            }
        } else {
            line
        };
        // Code blocks hold commands and code, not names to check.
        if doc.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, doc.to_string()));
        }
    }
    out
}

/// The backticked spans of one line (an unmatched backtick ends the line).
fn spans(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(a) = rest.find('`') {
        let after = &rest[a + 1..];
        // Skip runs of backticks (code spans with nested backticks are rare
        // and hold code).
        if after.starts_with('`') {
            rest = after.trim_start_matches('`');
            continue;
        }
        let Some(b) = after.find('`') else { break };
        out.push(&after[..b]);
        rest = &after[b + 1..];
    }
    out
}

/// Checks one span of `doc` (relative to the root); `None` when it names
/// nothing checkable or what it names exists.
fn check_span(ix: &Index, doc: &Path, span: &str) -> Option<String> {
    // Check ids are named in the documents and in the suite's own sources;
    // elsewhere `conn.step` is NCCL's field, not a check.
    let ids_here = doc.extension().is_some_and(|e| e == "md") || doc.starts_with("conformance");
    let s = span.trim();
    if s.is_empty()
        || s.contains(' ')
        || s.contains(['<', '>', '{', '}', '*', '%', '$', '|', '=', '"', '\'', '[', ']', ','])
        || s.contains("...")
        || s.contains('…')
    {
        return None;
    }
    if ids_here && let Some(why) = check_check_id(ix, s) {
        return why;
    }
    if s.contains("::") {
        return check_rust_path(ix, s);
    }
    check_file(ix, doc, s)
}

/// A conformance check id: `Some(None)` when it exists, `Some(Some(why))`
/// when not, `None` when `s` is not shaped like one.
fn check_check_id(ix: &Index, s: &str) -> Option<Option<String>> {
    let (prefix, rest) = s.split_once('.')?;
    if !CHECK_PREFIXES.contains(&prefix)
        || rest.is_empty()
        || !rest
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')
        || OUR_EXTS.iter().any(|e| s.ends_with(&format!(".{e}")))
        || ix.check_ids.is_empty()
    {
        return None;
    }
    // A family named by its prefix (`transfer.size`) exists when a check starts with it.
    let family = format!("{s}.");
    if ix.check_ids.contains(s) || ix.check_ids.iter().any(|id| id.starts_with(&family)) {
        return Some(None);
    }
    Some(Some(
        "no conformance check has this id (ferroccl-conformance --list)".into(),
    ))
}

/// A Rust path rooted in something of ours must name defined items.
fn check_rust_path(ix: &Index, s: &str) -> Option<String> {
    let path = s.trim_end_matches("()").trim_end_matches('!');
    let segs: Vec<&str> = path.split("::").collect();
    if segs
        .iter()
        .any(|g| g.is_empty() || !g.chars().all(|c| c.is_alphanumeric() || c == '_'))
    {
        return None;
    }
    let first = segs[0];
    // `nccl::INIT` & co. are tracing targets (NCCL's subsystems), not paths.
    if first == "nccl" {
        return None;
    }
    let ours = ix.crates.contains(first) || (ix.idents.contains(first) && first != "std");
    if !ours || is_foreign_root(first) {
        return None;
    }
    let missing: Vec<&str> = segs.iter().copied().filter(|g| !ix.idents.contains(*g)).collect();
    if missing.is_empty() {
        None
    } else {
        Some(format!(
            "no module or item named {} in the workspace",
            missing.join(", ")
        ))
    }
}

/// Roots of paths into crates outside the workspace, and std's prelude types.
fn is_foreign_root(first: &str) -> bool {
    const FOREIGN: [&str; 40] = [
        "std",
        "core",
        "alloc",
        "libc",
        "tracing",
        "tracing_subscriber",
        "serde",
        "serde_json",
        "cudarc",
        "libloading",
        "socket2",
        "mio",
        "nix",
        "clap",
        "smallvec",
        "thiserror",
        "toml",
        "hex",
        "procfs",
        "getrandom",
        "rdma_sys",
        "quick_xml",
        "proptest",
        "cc",
        "bindgen",
        "Vec",
        "String",
        "Option",
        "Result",
        "Box",
        "Arc",
        "Rc",
        "Some",
        "None",
        "Ok",
        "Err",
        "Duration",
        "Instant",
        "Mutex",
        "HashMap",
    ];
    FOREIGN.contains(&first)
}

/// A file or directory path (one of our extensions, or ending in `/`) must exist.
fn check_file(ix: &Index, doc: &Path, s: &str) -> Option<String> {
    // `path:line` and `path#anchor` name the path.
    let s = s.split('#').next().unwrap_or(s);
    let s = match s.rsplit_once(':') {
        Some((p, l)) if l.chars().all(|c| c.is_ascii_digit()) => p,
        _ => s,
    };
    if s.contains(':') || s.starts_with('/') || s.starts_with('-') || s.starts_with("~/") {
        return None;
    }
    let is_dir = s.ends_with('/') && s.len() > 1 && s[..s.len() - 1].contains(|c: char| c.is_alphanumeric());
    let ext = Path::new(s).extension().map(|e| e.to_string_lossy().into_owned());
    let ours_ext = ext.as_deref().is_some_and(|e| OUR_EXTS.contains(&e));
    if !is_dir && !ours_ext {
        return None;
    }
    // NCCL's tree (`src/…`) and build outputs are not ours.
    if s.starts_with("src/") || s.starts_with("target/") || s.starts_with("./target") {
        return None;
    }
    let p = Path::new(s.trim_end_matches('/'));
    let mut bases: Vec<PathBuf> = vec![PathBuf::new()];
    if let Some(d) = doc.parent() {
        bases.push(d.to_path_buf());
        // The crate the document is in (the nearest directory with a Cargo.toml).
        let mut c = Some(d);
        while let Some(dir) = c {
            if ix.files.contains(&dir.join("Cargo.toml")) {
                bases.push(dir.to_path_buf());
                bases.push(dir.join("src"));
                break;
            }
            c = dir.parent();
        }
    }
    // Paths relative to a crate's sources (`transport/net.rs` for
    // `core/src/transport/net.rs`), as the documents write them.
    bases.extend(ix.src_dirs());
    if bases.iter().any(|b| ix.exists(&b.join(p))) {
        return None;
    }
    // NCCL's example plugins (`plugins/net/`, `plugins/tuner/example/`): ours
    // are named `<kind>-<name>`.
    let mut comps = p.components().map(|c| c.as_os_str().to_string_lossy().into_owned());
    if comps.next().as_deref() == Some("plugins")
        && let Some(second) = comps.next()
        && !second.contains('-')
        && !ix.dirs.contains(&Path::new("plugins").join(&second))
    {
        return None;
    }
    let bare = p.components().count() == 1;
    if bare {
        if ix.basenames.contains(s) || ix.idents.contains(s.trim_end_matches('/')) {
            return None;
        }
        // A bare C/C++ file name is most likely NCCL's or another project's,
        // and a bare data file name (`.xml`, `.json`, …) a file a tool writes.
        if !matches!(ext.as_deref(), Some("rs" | "md" | "toml" | "sh" | "py")) || is_dir {
            return None;
        }
        return Some("no file of this name in the repository".into());
    }
    let first = p
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned());
    let top_level_ours = first.as_deref().is_some_and(|f| ix.dirs.contains(Path::new(f)));
    if top_level_ours || ext.as_deref() == Some("rs") {
        return Some("no such file or directory in the repository".into());
    }
    None
}

/// Every finding in the documents of `ix` (tracked `*.md` outside
/// `docs/reference/`, and the doc comments of tracked `*.rs`).
pub fn check(ix: &Index) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in &ix.files {
        let md = f.extension().is_some_and(|e| e == "md");
        let rs = f.extension().is_some_and(|e| e == "rs");
        if !(md || rs) || f.starts_with("docs/reference") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(ix.root.join(f)) else {
            continue;
        };
        for (line, doc) in doc_lines(f, &text) {
            for span in spans(&doc) {
                if let Some(why) = check_span(ix, f, span) {
                    out.push(Finding {
                        file: f.clone(),
                        line,
                        span: span.to_string(),
                        why,
                    });
                }
            }
        }
    }
    out
}

/// The tracked files of the repository at `root` (`git ls-files`).
///
/// Errors: git cannot be run or `root` is not a git work tree.
pub fn tracked_files(root: &Path) -> Result<Vec<PathBuf>, String> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run git ls-files: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git ls-files failed in {}: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out
        .stdout
        .split(|&b| b == 0)
        .filter(|b| !b.is_empty())
        .map(|b| PathBuf::from(String::from_utf8_lossy(b).into_owned()))
        .filter(|p| root.join(p).exists())
        .collect())
}

/// The check ids `ferroccl-conformance` at `exe` lists (net, tuner,
/// profiler, CollNet, env, GIN and RMA sections).
///
/// Errors: the binary cannot be run or fails.
pub fn check_ids(exe: &Path) -> Result<BTreeSet<String>, String> {
    let mut ids = BTreeSet::new();
    for args in [
        &["--list"][..],
        &["--tuner", "--list"],
        &["--profiler", "--list"],
        &["--collnet", "--list"],
        &["--env", "--list"],
        &["--gin", "--list"],
        &["--rma", "--list"],
    ] {
        let out = std::process::Command::new(exe)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
        if !out.status.success() {
            return Err(format!("{} {} failed", exe.display(), args.join(" ")));
        }
        ids.extend(ids_of_list(&String::from_utf8_lossy(&out.stdout)));
    }
    Ok(ids)
}

/// The check ids of a `--list` text (the first word of each line that does
/// not start with a space).
pub fn ids_of_list(list: &str) -> BTreeSet<String> {
    list.lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|id| id.contains('.'))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> Index {
        let files = [
            "core/Cargo.toml",
            "core/src/lib.rs",
            "core/src/proxy/plan.rs",
            "docs/ARCHITECTURE.md",
            "README.md",
        ]
        .map(PathBuf::from);
        let mut ix = Index::new(Path::new("/nonexistent"), files);
        ix.idents
            .extend(["PlanCache", "decisions_for", "ferroccl", "proxy"].map(String::from));
        ix.crates.insert("ferroccl".into());
        ix.check_ids
            .extend(["load.init", "transfer.size.4096"].map(String::from));
        ix
    }

    #[test]
    fn spans_are_read_between_backticks() {
        assert_eq!(spans("a `b` c ``d`` `e::f` `unclosed"), vec!["b", "e::f"]);
    }

    #[test]
    fn files_resolve_from_root_doc_dir_and_crate() {
        let ix = index();
        let doc = Path::new("core/src/lib.rs");
        assert_eq!(check_span(&ix, doc, "core/src/proxy/plan.rs"), None);
        assert_eq!(check_span(&ix, doc, "proxy/plan.rs"), None);
        assert_eq!(check_span(&ix, doc, "core/src/proxy/"), None);
        assert!(check_span(&ix, doc, "core/src/proxy.rs").is_some());
        assert!(check_span(&ix, doc, "proxy.rs").is_some());
        assert!(check_span(&ix, doc, "docs/DESIGN.md").is_some());
        // NCCL's files and build outputs are not checked.
        assert_eq!(check_span(&ix, doc, "src/graph/tuning.cc"), None);
        assert_eq!(check_span(&ix, doc, "src/proxy.rs"), None);
        assert_eq!(check_span(&ix, doc, "nccl_net.h"), None);
        assert_eq!(check_span(&ix, doc, "target/dist/lib/"), None);
    }

    #[test]
    fn rust_paths_rooted_here_must_exist() {
        let ix = index();
        let doc = Path::new("README.md");
        assert_eq!(check_span(&ix, doc, "ferroccl::proxy::PlanCache::decisions_for"), None);
        assert_eq!(check_span(&ix, doc, "std::thread::spawn"), None);
        assert!(
            check_span(&ix, doc, "crate::proxy::rank_order_channels()")
                .is_some_and(|w| w.contains("rank_order_channels"))
        );
    }

    #[test]
    fn check_ids_must_be_listed() {
        let ix = index();
        let doc = Path::new("README.md");
        assert_eq!(check_span(&ix, doc, "load.init"), None);
        assert_eq!(check_span(&ix, doc, "transfer.size"), None);
        assert!(check_span(&ix, doc, "profiler.symbols").is_some());
        // A file name, not a check id.
        assert!(check_span(&ix, doc, "load.rs").is_some_and(|w| w.contains("file")));
    }

    #[test]
    fn idents_include_items_variants_and_fields() {
        let mut s = BTreeSet::new();
        rust_idents(
            "pub(crate) struct Plan {\n    pub tasks: Vec<Task>,\n}\nenum E {\n    Fresh(Work),\n    Wake,\n}\nfn go() {}\nmacro_rules! m {}\n",
            &mut s,
        );
        for n in ["Plan", "tasks", "E", "Fresh", "Wake", "go", "m"] {
            assert!(s.contains(n), "{n} in {s:?}");
        }
    }
}
