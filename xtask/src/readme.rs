//! The README's quick start as data: parsed from `README.md` (so that the
//! README is what CI runs, not a copy of it) and checked for its shape.
//!
//! Shape: under `## Quick start`, a line starting with `Prerequisites:` above
//! exactly two fenced `sh` blocks of one command each; the first runs the perf
//! tool on 4 local ranks with data checked (`ferroccl-perf --ranks 4 … -c 1`),
//! the second is `./scripts/test.sh`.

/// The section heading.
pub const HEADING: &str = "## Quick start";
/// The test command (the second one).
pub const TEST_COMMAND: &str = "./scripts/test.sh";

/// The parsed quick start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuickStart {
    /// The prerequisites line (starts with `Prerequisites:`).
    pub prerequisites: String,
    /// The command that runs the main job (perf tool, 4 ranks, data checked).
    pub run: String,
    /// The command that runs every test.
    pub test: String,
}

/// Parses and checks the quick start of `readme` (the text of `README.md`).
///
/// # Errors
/// A message naming what was expected and what was found.
pub fn parse(readme: &str) -> Result<QuickStart, String> {
    let mut lines = readme.lines();
    lines
        .by_ref()
        .find(|l| l.trim_end() == HEADING)
        .ok_or_else(|| format!("README has no '{HEADING}' section"))?;
    let section: Vec<&str> = lines.take_while(|l| !l.starts_with("## ")).collect();
    let mut blocks: Vec<Vec<String>> = Vec::new();
    let mut prerequisites = None;
    let mut in_block: Option<Vec<String>> = None;
    for l in &section {
        let t = l.trim();
        match in_block.as_mut() {
            Some(b) if t.starts_with("```") => {
                blocks.push(std::mem::take(b));
                in_block = None;
            }
            Some(b) => {
                if !t.is_empty() && !t.starts_with('#') {
                    b.push(t.to_string());
                }
            }
            None if t.starts_with("```") => {
                if t != "```sh" {
                    return Err(format!(
                        "quick start: code block '{t}' where only ```sh blocks are expected"
                    ));
                }
                in_block = Some(Vec::new());
            }
            None => {
                if t.starts_with("Prerequisites:") && blocks.is_empty() && prerequisites.is_none() {
                    prerequisites = Some(t.to_string());
                }
            }
        }
    }
    if in_block.is_some() {
        return Err("quick start: unterminated code block".into());
    }
    let prerequisites =
        prerequisites.ok_or("quick start: no line starting with 'Prerequisites:' above the commands")?;
    if blocks.len() != 2 || blocks.iter().any(|b| b.len() != 1) {
        return Err(format!(
            "quick start: expected exactly two ```sh blocks of one command each, found {} block(s) with {:?} command(s)",
            blocks.len(),
            blocks.iter().map(Vec::len).collect::<Vec<_>>()
        ));
    }
    let run = blocks[0][0].clone();
    let test = blocks[1][0].clone();
    for needle in ["ferroccl-perf", "--ranks 4", "-c 1"] {
        if !run.split(" && ").last().unwrap_or_default().contains(needle) {
            return Err(format!(
                "quick start: the first command must end by running the perf tool with '{needle}' (4 local ranks, data checked); found: {run}"
            ));
        }
    }
    if test != TEST_COMMAND {
        return Err(format!(
            "quick start: the second command must be '{TEST_COMMAND}'; found: {test}"
        ));
    }
    Ok(QuickStart {
        prerequisites,
        run,
        test,
    })
}

/// `cmd` with the perf tool's largest size (`-e <bytes>`) replaced by `max`,
/// everything else verbatim.
///
/// # Errors
/// When the command has no `-e <bytes>` (then the range cannot be made small).
pub fn with_max_size(cmd: &str, max: &str) -> Result<String, String> {
    let mut words: Vec<String> = cmd.split(' ').map(str::to_owned).collect();
    let mut replaced_e = false;
    for i in 0..words.len().saturating_sub(1) {
        if words[i] == "-e" {
            words[i + 1] = max.to_string();
            replaced_e = true;
        }
    }
    if !replaced_e {
        return Err(format!(
            "the quick-start command has no '-e <max bytes>' to shrink: {cmd}"
        ));
    }
    Ok(words.join(" "))
}

/// The plugin file the command makes the perf tool load, from its
/// `NCCL_NET_PLUGIN=<value>`: a path's file name, a `lib*.so` as is, a name `X`
/// as `libnccl-net-X.so` (NCCL's second try, reference §5.1).
///
/// # Errors
/// When the command sets no `NCCL_NET_PLUGIN` (the quick start must say which
/// plugin it runs over).
pub fn expected_plugin_file(cmd: &str) -> Result<String, String> {
    let v = cmd
        .split_whitespace()
        .find_map(|w| w.strip_prefix("NCCL_NET_PLUGIN="))
        .ok_or_else(|| format!("the quick-start command sets no NCCL_NET_PLUGIN: {cmd}"))?;
    Ok(if v.contains('/') {
        v.rsplit('/').next().unwrap_or(v).to_string()
    } else if v.starts_with("lib") && v.ends_with(".so") {
        v.to_string()
    } else {
        format!("libnccl-net-{v}.so")
    })
}

/// The largest size the perf tool runs for `cmd` whose `-e` is `max_bytes`:
/// nccl-tests' sweep (`src/common.cu`, `TimeTest`) goes from `-b` (default 32M)
/// times `-f` while at most `-e`, or plus `-i` (default 1M) when `-f` is 1
/// (the default), without clamping the last step to `-e`.
///
/// # Errors
/// A `-b`, `-f` or `-i` value that does not parse.
pub fn largest_size(cmd: &str, max_bytes: u64) -> Result<u64, String> {
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let flag = |f: &str| words.windows(2).rev().find(|w| w[0] == f).map(|w| w[1]);
    let size = |f: &str, default: u64| match flag(f) {
        Some(v) => parse_size(v).ok_or_else(|| format!("bad {f} {v:?} in the quick-start command")),
        None => Ok(default),
    };
    let mut size_now = size("-b", 32 << 20)?;
    let step = size("-i", 1 << 20)?;
    let factor = match flag("-f") {
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| format!("bad -f {v:?} in the quick-start command"))?,
        None => 1,
    };
    let mut largest = size_now;
    while size_now <= max_bytes {
        largest = size_now;
        let next = if factor > 1 {
            size_now.checked_mul(factor)
        } else {
            size_now.checked_add(step)
        };
        match next {
            Some(n) if n > size_now => size_now = n,
            _ => break,
        }
    }
    Ok(largest)
}

/// Bytes of a perf-tool size (`8`, `64K`, `1M`, `2G`).
pub fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

/// Checks the perf tool's output of the quick start: every result checked and
/// correct (`# Out of bounds values : 0 OK`), sizes up to `max_bytes` (the
/// sweep's last size, [`largest_size`]), and the
/// net plugin loaded from a file with NCCL's name `nccl_file`.
///
/// # Errors
/// What is missing or wrong, quoting the output's line.
pub fn check_output(stdout: &str, max_bytes: u64, nccl_file: &str) -> Result<(), String> {
    let plugin = stdout
        .lines()
        .find(|l| l.starts_with("# net plugin:"))
        .ok_or("no '# net plugin:' line in the perf tool's output")?;
    let from = plugin
        .split(" from ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .ok_or_else(|| format!("cannot read the plugin file from: {plugin}"))?;
    if std::path::Path::new(from).file_name().and_then(|f| f.to_str()) != Some(nccl_file) {
        return Err(format!(
            "the perf tool loaded {from}, not a {nccl_file} (NCCL's file name): {plugin}"
        ));
    }
    if !stdout.lines().any(|l| l.trim_end() == "# Out of bounds values : 0 OK") {
        return Err("no '# Out of bounds values : 0 OK' line: results were wrong or not checked".into());
    }
    let largest = stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .max()
        .ok_or("no result rows in the perf tool's output")?;
    if largest != max_bytes {
        return Err(format!("largest size run is {largest} B, expected {max_bytes} B"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# x\n\n## Quick start\n\nPrerequisites: Rust and a C compiler.\n\nRun:\n\n```sh\ncargo xtask dist && NCCL_NET_PLUGIN=socket target/dist/bin/ferroccl-perf --ranks 4 all_reduce -b 8 -e 64M -f 4 -c 1\n```\n\nTest:\n\n```sh\n./scripts/test.sh\n```\n\n## Next\n\n```sh\nother\n```\n";

    #[test]
    fn parses_the_two_commands() {
        let q = parse(GOOD).unwrap();
        assert!(q.run.starts_with("cargo xtask dist && "));
        assert_eq!(q.test, "./scripts/test.sh");
        assert_eq!(q.prerequisites, "Prerequisites: Rust and a C compiler.");
    }

    #[test]
    fn refuses_other_shapes() {
        let three = GOOD.replace("Test:", "```sh\nextra\n```\n\nTest:");
        assert!(parse(&three).unwrap_err().contains("exactly two"));
        let two_lines = GOOD.replace("./scripts/test.sh", "./scripts/test.sh\ncargo doc");
        assert!(parse(&two_lines).unwrap_err().contains("exactly two"));
        let no_pre = GOOD.replace("Prerequisites: Rust and a C compiler.", "You need Rust.");
        assert!(parse(&no_pre).unwrap_err().contains("Prerequisites:"));
        let no_check = GOOD.replace(" -c 1", "");
        assert!(parse(&no_check).unwrap_err().contains("-c 1"));
        let three_ranks = GOOD.replace("--ranks 4", "--ranks 3");
        assert!(parse(&three_ranks).unwrap_err().contains("--ranks 4"));
        assert!(parse("# nothing\n").unwrap_err().contains("Quick start"));
    }

    #[test]
    fn size_range_is_replaced_and_nothing_else() {
        let q = parse(GOOD).unwrap();
        let small = with_max_size(&q.run, "1M").unwrap();
        assert_eq!(small, q.run.replace("-e 64M", "-e 1M"));
        assert!(with_max_size("ferroccl-perf --ranks 4 -c 1", "1M").is_err());
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("8"), Some(8));
        assert_eq!(parse_size("x"), None);
        // nccl-tests' sweep: 8 x 4^k while <= 1M ends at 512K; -f 1 adds -i.
        assert_eq!(largest_size(&small, 1 << 20), Ok(512 << 10));
        assert_eq!(largest_size("p -b 1M -e 4M", 4 << 20), Ok(4 << 20));
        assert_eq!(largest_size("p -b 8 -f 2", 1 << 20), Ok(1 << 20));
    }

    #[test]
    fn plugin_file_of_the_command() {
        assert_eq!(
            expected_plugin_file(&parse(GOOD).unwrap().run).unwrap(),
            "libnccl-net-socket.so"
        );
        assert_eq!(
            expected_plugin_file("NCCL_NET_PLUGIN=/a/b/libnccl-net-x.so p").unwrap(),
            "libnccl-net-x.so"
        );
        assert!(expected_plugin_file("ferroccl-perf --ranks 4").is_err());
    }

    #[test]
    fn output_checks() {
        let ok = "# net plugin: 'Socket' (ncclNet v10) from /r/target/dist/lib/libnccl-net-socket.so; nchannels 2\n#\n           8             2     float     sum      -1    10.0    0.00    0.00       0\n     1048576        262144     float     sum      -1    10.0    0.00    0.00       0\n# Out of bounds values : 0 OK\n";
        check_output(ok, 1 << 20, "libnccl-net-socket.so").unwrap();
        let cargo_name = ok.replace("libnccl-net-socket.so", "libnccl_net_socket.so");
        assert!(check_output(&cargo_name, 1 << 20, "libnccl-net-socket.so").is_err());
        let wrong = ok.replace("0 OK", "3 FAILED");
        assert!(check_output(&wrong, 1 << 20, "libnccl-net-socket.so").is_err());
        assert!(check_output(ok, 1 << 21, "libnccl-net-socket.so").is_err());
    }
}
