//! A test env plugin written with the SDK (`ferroccl_plugin_api::sdk::env::Env`),
//! exporting `ncclEnvPlugin_v2` and `ncclEnvPlugin_v1` (`libnccl_env_sdktest.so`).
//!
//! Its answers come from a file named by `FERROCCL_ENV_SDKTEST_FILE`, read once at
//! `init`: a line `NAME=VALUE` overrides `NAME` (the value is everything after the
//! first `=`), a line `-NAME` hides `NAME` (getEnv returns NULL), blank lines and
//! lines starting with `#` are skipped. Every other name is passed through from
//! the process environment. `FERROCCL_ENV_SDKTEST_FAIL_INIT=1` makes `init` fail
//! with `ncclSystemError` (for the host's latched-failure test).
//! `FERROCCL_ENV_SDKTEST_LOG=<file>` appends one line per `init`
//! (`init <major>.<minor>.<patch> v<api>`) and `finalize`, so tests can check what
//! the host called and when.

use std::collections::HashMap;
use std::ffi::CStr;

use ferroccl_plugin_api::sdk::env::{Env, EnvInit, process_env};
use ferroccl_plugin_api::{NetError, NetResult};

/// The variable naming the overrides file.
pub const FILE_VAR: &str = "FERROCCL_ENV_SDKTEST_FILE";
/// The variable that makes `init` fail.
pub const FAIL_INIT_VAR: &str = "FERROCCL_ENV_SDKTEST_FAIL_INIT";
/// The variable naming the call log.
pub const LOG_VAR: &str = "FERROCCL_ENV_SDKTEST_LOG";

/// Appends `line` to the call log, if one is named.
fn log_call(line: &str) {
    use std::io::Write;
    if let Some(f) = process_env(LOG_VAR)
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(f)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// The plugin: the overrides read at `init` (`None` = hidden).
#[derive(Debug)]
pub struct SdkTestEnv {
    overrides: HashMap<String, Option<String>>,
}

/// Parses the overrides file (see the crate docs).
pub fn parse_overrides(text: &str) -> HashMap<String, Option<String>> {
    let mut m = HashMap::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('-') {
            m.insert(name.to_owned(), None);
        } else if let Some((k, v)) = line.split_once('=') {
            m.insert(k.to_owned(), Some(v.to_owned()));
        }
    }
    m
}

impl Env for SdkTestEnv {
    const NAME: &'static CStr = c"FerrocclEnvSdkTest";

    fn init(info: &EnvInit) -> NetResult<Self> {
        log_call(&format!(
            "init {}.{}.{} v{}",
            info.major, info.minor, info.patch, info.api_version
        ));
        if process_env(FAIL_INIT_VAR).as_deref() == Some("1") {
            return Err(NetError::System(format!("{FAIL_INIT_VAR}=1")));
        }
        let overrides = match process_env(FILE_VAR) {
            Some(f) => parse_overrides(
                &std::fs::read_to_string(&f).map_err(|e| NetError::System(format!("{FILE_VAR}={f}: {e}")))?,
            ),
            None => HashMap::new(),
        };
        ferroccl_plugin_api::net_info!(
            ferroccl_plugin_api::log::NCCL_INIT,
            "ENV/SdkTest : init by NCCL {}.{}.{} (ncclEnv v{}), {} overrides",
            info.major,
            info.minor,
            info.patch,
            info.api_version,
            overrides.len()
        );
        Ok(SdkTestEnv { overrides })
    }

    fn get_env(&self, name: &str) -> Option<String> {
        match self.overrides.get(name) {
            Some(v) => v.clone(),
            None => process_env(name),
        }
    }

    fn finalize(self) -> NetResult<()> {
        log_call("finalize");
        Ok(())
    }
}

ferroccl_plugin_api::export_env_plugin!(SdkTestEnv);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_file_grammar() {
        let m = parse_overrides("# c\nNCCL_A=1=2\n-NCCL_B\n\nNCCL_C=\n");
        assert_eq!(m["NCCL_A"].as_deref(), Some("1=2"));
        assert_eq!(m["NCCL_B"], None);
        assert_eq!(m["NCCL_C"].as_deref(), Some(""));
        assert_eq!(m.len(), 3);
    }
}
