//! Result files: nccl-tests' JSON layout (`-J FILE`, NVIDIA/nccl-tests
//! `src/util.cu`: `jsonOutputInit`, `writeDeviceReport`, `writeBenchmarkLine*`,
//! `writeResultFooter`, `writeErrors`, `jsonOutputFinalize`) and a reader that
//! takes either that layout or ferroccl-perf's own `--json` document
//! ([`read_series`]), for plots and comparisons.
//!
//! Layout details kept from nccl-tests: booleans in `config` and the `okay`
//! fields are the strings `"true"`/`"false"` (its `jsonBool`), `root` is the
//! column text (`"     0"`), the time key is `time` or, with `-C`, `cpu_time`,
//! `nwrong` is `null` without checking, `average_bus_bandwidth.okay` is
//! `"unchecked"` unless `NCCL_TESTS_MIN_BW` is set. `env` holds only the
//! `NCCL_*`/`FERROCCL_*` variables (nccl-tests writes the whole environment).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// nccl-tests' `JSON_FILE_VERSION`.
pub const JSON_FILE_VERSION: i64 = 1;

/// One `-J` file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NcclTestsJson {
    /// [`JSON_FILE_VERSION`].
    pub version: i64,
    /// `%Y-%m-%d %H:%M:%S`, local time.
    pub start_time: String,
    /// The command line, `argv[0]` first.
    pub args: Vec<String>,
    /// `NAME=VALUE` of the `NCCL_*`/`FERROCCL_*` environment.
    pub env: Vec<String>,
    /// NCCL version code this runtime reports (`ncclGetVersion`).
    pub nccl_version: i64,
    /// Run parameters and devices.
    pub config: JsonConfig,
    /// One row per (datatype, op, size), in order.
    pub results: Vec<JsonRow>,
    /// `# Out of bounds values`.
    pub out_of_bounds: JsonOutOfBounds,
    /// `# Avg bus bandwidth`.
    pub average_bus_bandwidth: JsonAvgBw,
    /// Error strings (`ncclGetLastError`); empty when none.
    pub errors: Vec<String>,
    /// `%Y-%m-%d %H:%M:%S`, local time.
    pub end_time: String,
}

/// nccl-tests' `config` object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JsonConfig {
    /// `-t`.
    pub nthreads: i64,
    /// `-g`.
    pub ngpus: i64,
    /// `-b` in bytes.
    pub minimum_bytes: u64,
    /// `-e` in bytes.
    pub maximum_bytes: u64,
    /// `-f`, written when above 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_factor: Option<i64>,
    /// `-i`, written when `-f` is 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_bytes: Option<u64>,
    /// `-w`.
    pub warmup_iters: i64,
    /// `-n`.
    pub iterations: i64,
    /// `-m`.
    pub aggregated_iterations: i64,
    /// `-c`.
    pub validation: i64,
    /// `-G` (always 0 here).
    pub graph: i64,
    /// `-z`, `"true"`/`"false"`.
    pub blocking_collectives: String,
    /// `-p`, `"true"`/`"false"`.
    pub parallel_init: String,
    /// One entry per rank (the `#  Rank …` lines).
    pub devices: Vec<JsonDevice>,
}

/// One `#  Rank …` line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JsonDevice {
    /// Global rank.
    pub rank: i64,
    /// Split group (always 0: no `NCCL_TESTS_SPLIT_MASK`).
    pub group: i64,
    /// Process id.
    pub pid: i64,
    /// Host name.
    pub hostname: String,
    /// Device index (here: the rank's index inside its process).
    pub device: i64,
    /// PCI id text between the brackets.
    pub device_hex: String,
    /// Device description.
    pub device_info: String,
}

/// One result row.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JsonRow {
    /// Bytes (the `size` column).
    pub size: u64,
    /// Elements (the `count` column).
    pub count: u64,
    /// Datatype name.
    #[serde(rename = "type")]
    pub dtype: String,
    /// Reduction name, `none` when the collective does not reduce.
    pub redop: String,
    /// The root column's text (`%6i`).
    pub root: String,
    /// Out-of-place numbers.
    pub out_of_place: Option<JsonPerf>,
    /// In-place numbers (`null` where there is no in-place variant).
    pub in_place: Option<JsonPerf>,
    /// Iterations timed (`-n` x `-m`).
    pub actual_iterations: i64,
    /// The program name (`all_reduce_perf`).
    pub experiment_name: String,
}

/// The numbers of one variant.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JsonPerf {
    /// Completion time per operation, µs (without `-C`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<f64>,
    /// Enqueue (CPU) time per operation, µs (with `-C`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<f64>,
    /// Algorithm bandwidth, GB/s.
    pub alg_bw: f64,
    /// Bus bandwidth, GB/s.
    pub bus_bw: f64,
    /// Wrong elements, `null` without checking.
    pub nwrong: Option<f64>,
}

/// nccl-tests' `out_of_bounds`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JsonOutOfBounds {
    /// Sizes with wrong values.
    pub count: i64,
    /// `"true"` when `count` is 0.
    pub okay: String,
}

/// nccl-tests' `average_bus_bandwidth`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JsonAvgBw {
    /// Mean busbw over every row and variant, GB/s.
    pub bandwidth: f64,
    /// `"unchecked"`, or `"true"`/`"false"` against `NCCL_TESTS_MIN_BW`.
    pub okay: String,
}

/// nccl-tests' `jsonBool`: a string.
pub fn json_bool(b: bool) -> String {
    if b { "true" } else { "false" }.to_string()
}

/// Opens `path` for a new JSON file as nccl-tests does: never overwriting, an
/// existing file makes it try `path.0`, `path.1`, … Returns the file and the path
/// used, or an error naming the path.
pub fn create_new(path: &Path) -> Result<(std::fs::File, PathBuf), String> {
    let mut try_path = path.to_path_buf();
    for i in 0..10_000 {
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&try_path) {
            Ok(f) => return Ok((f, try_path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mut s = path.as_os_str().to_owned();
                s.push(format!(".{i}"));
                try_path = PathBuf::from(s);
            }
            Err(e) => return Err(format!("{} not accessible: {e}", try_path.display())),
        }
    }
    Err(format!("{}: no free name among {0}.0 … {0}.9999", path.display()))
}

/// Local time as `%Y-%m-%d %H:%M:%S` (nccl-tests' `formatNow`).
pub fn format_now() -> String {
    // SAFETY: time/localtime_r/strftime write only into the locals passed.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return String::new();
        }
        let mut buf = [0u8; 64];
        let n = libc::strftime(buf.as_mut_ptr().cast(), buf.len(), c"%Y-%m-%d %H:%M:%S".as_ptr(), &tm);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

/// One point of a sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Bytes.
    pub size: u64,
    /// Time per operation, µs (out of place).
    pub time_us: f64,
    /// Bus bandwidth, GB/s (out of place).
    pub busbw: f64,
}

/// The sweeps of one result file: one series per (datatype, reduction).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// `file` or `file type/redop` when the file has several.
    pub label: String,
    /// Points in file order.
    pub points: Vec<Point>,
}

fn num(v: &serde_json::Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// Reads the out-of-place sweeps of a result file: nccl-tests' `-J` layout or
/// ferroccl-perf's `--json` document (told apart by `version`/`alg_bw` vs
/// `time_us`). Errors name the file and what was expected.
pub fn read_series(path: &Path) -> Result<Vec<Series>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
    let rows = v.get("results").and_then(|r| r.as_array()).ok_or_else(|| {
        format!(
            "{}: no \"results\" list (expected nccl-tests -J or ferroccl-perf --json output)",
            path.display()
        )
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let top_type = v.get("datatype").and_then(|t| t.as_str()).unwrap_or("");
    let top_op = v.get("redop").and_then(|t| t.as_str()).unwrap_or("");
    let mut out: Vec<(String, Vec<Point>)> = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let bad = |what: &str| format!("{}: results[{i}]: {what}", path.display());
        let size = row
            .get("size")
            .and_then(|s| s.as_u64())
            .ok_or_else(|| bad("no integer \"size\""))?;
        let perf = row
            .get("out_of_place")
            .filter(|p| !p.is_null())
            .or_else(|| row.get("in_place").filter(|p| !p.is_null()))
            .ok_or_else(|| bad("neither \"out_of_place\" nor \"in_place\" numbers"))?;
        let time_us = ["time", "cpu_time", "time_us"]
            .iter()
            .find_map(|k| perf.get(*k).and_then(num))
            .ok_or_else(|| bad("no \"time\", \"cpu_time\" or \"time_us\""))?;
        let busbw = ["bus_bw", "busbw"]
            .iter()
            .find_map(|k| perf.get(*k).and_then(num))
            .ok_or_else(|| bad("no \"bus_bw\" or \"busbw\""))?;
        let ty = row.get("type").and_then(|t| t.as_str()).unwrap_or(top_type);
        let op = row.get("redop").and_then(|t| t.as_str()).unwrap_or(top_op).trim();
        let key = format!("{ty}/{op}");
        let p = Point { size, time_us, busbw };
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, pts)) => pts.push(p),
            None => out.push((key, vec![p])),
        }
    }
    let several = out.len() > 1;
    Ok(out
        .into_iter()
        .map(|(k, points)| Series {
            label: if several { format!("{stem} {k}") } else { stem.clone() },
            points,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_file_is_kept_and_the_next_free_name_used() {
        let d = std::env::temp_dir().join(format!("ferroccl-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("r.json");
        std::fs::write(&p, "keep").unwrap();
        let (_, first) = create_new(&p).unwrap();
        assert_eq!(first, d.join("r.json.0"));
        let (_, second) = create_new(&p).unwrap();
        assert_eq!(second, d.join("r.json.1"));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "keep");
        let e = create_new(&d.join("missing/r.json")).unwrap_err();
        assert!(e.contains("not accessible"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
