//! `ncclConfig_t` (NCCL 2.30.7 `src/init.cc`, `parseCommConfig` and
//! `envConfigOverride`) and the runtime's `CommConfig` made from it.
//!
//! The struct is read field by field within the `size` the caller's header
//! gave (NCCL's configs only ever grow at the end), so a program built against
//! an older or newer `nccl.h` passes exactly the fields it has.

use std::ffi::{CStr, c_char, c_int};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use ferroccl::CommConfig;
use ferroccl::bootstrap::BootstrapConfig;
use ferroccl::config::{Config, IntParamExt};
use ferroccl::plugin::LoadOptions;

use crate::abi::{NCCL_API_MAGIC, ncclConfig_t};
use crate::api::{Fail, R};

/// `NCCL_CONFIG_UNDEF_INT`.
const UNDEF_INT: c_int = c_int::MIN;

/// What the library uses of a communicator's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `blocking` (after `NCCL_COMM_BLOCKING`); default 1.
    pub blocking: bool,
    /// `maxCTAs`: the most channels the communicator may use.
    pub max_ctas: Option<usize>,
    /// `netName` (as `NCCL_NET`).
    pub net_name: Option<String>,
    /// `commName`, for the logs.
    pub comm_name: Option<String>,
    /// `collnetEnable` (0 or 1; unset: `NCCL_COLLNET_ENABLE` or off).
    pub collnet_enable: Option<bool>,
    /// `trafficClass` (unset: none, `NCCL_NET_TRAFFIC_CLASS_UNDEF` to the plugin).
    pub traffic_class: Option<i32>,
    /// `numRmaCtx` (unset: 1; `NCCL_NUM_RMA_CTX` overrides it, see
    /// `ferroccl::comm::params::resolve_num_rma_ctx`).
    pub num_rma_ctx: Option<i32>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            blocking: true,
            max_ctas: None,
            net_name: None,
            comm_name: None,
            collnet_enable: None,
            traffic_class: None,
            num_rma_ctx: None,
        }
    }
}

/// Reads field `T` at `offset` if the caller's struct (`size` bytes) has it.
///
/// # Safety
/// `base` must be valid for `size` bytes.
unsafe fn field<T: Copy>(base: *const u8, size: usize, offset: usize) -> Option<T> {
    (offset + std::mem::size_of::<T>() <= size).then(|| {
        // SAFETY: inside the caller's `size` bytes (checked above); unaligned
        // reads because nothing promises the caller's alignment.
        unsafe { std::ptr::read_unaligned(base.add(offset).cast::<T>()) }
    })
}

fn c_string(p: *const c_char) -> Option<String> {
    // SAFETY: a non-NULL `const char*` of a config is a NUL-terminated string
    // (NCCL's contract for netName and commName).
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Parses `config` for call `op`; `NULL` gives `inherit` (a split child) or the
/// defaults. `NCCL_COMM_BLOCKING` (0 or 1) overrides `blocking`, as in NCCL.
///
/// Errors (`ncclInvalidArgument`, NCCL's messages): a config not made with
/// `NCCL_CONFIG_INITIALIZER` (magic), one from before NCCL 2.14, `blocking` or
/// `collnetEnable` other than 0, 1 or unset, `maxCTAs` or `minCTAs` out of 1..=64.
pub(crate) fn parse(config: *const ncclConfig_t, inherit: Option<&Settings>, op: &str) -> R<Settings> {
    let mut s = inherit.cloned().unwrap_or_default();
    if !config.is_null() {
        let base = config.cast::<u8>();
        // SAFETY: `size` is the first field of every ncclConfig_t version.
        let size = unsafe { std::ptr::read_unaligned(base.cast::<usize>()) };
        let size = size.min(std::mem::size_of::<ncclConfig_t>());
        macro_rules! get {
            ($f:ident: $t:ty) => {
                // SAFETY: the caller's struct holds `size` bytes (its own sizeof).
                unsafe { field::<$t>(base, size, std::mem::offset_of!(ncclConfig_t, $f)) }
            };
        }
        if get!(magic: u32) != Some(NCCL_API_MAGIC) {
            return Err(Fail::arg(format!(
                "{op} : ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER (magic {:#x}, size {size})",
                get!(magic: u32).unwrap_or(0)
            )));
        }
        let version = get!(version: u32).unwrap_or(0);
        if version < 21400 {
            return Err(Fail::arg(format!(
                "{op} : ncclConfig_t argument of version {version} is older than the first versioned config (21400)"
            )));
        }
        match get!(blocking: c_int) {
            None | Some(UNDEF_INT) => {}
            Some(b @ (0 | 1)) => s.blocking = b == 1,
            Some(b) => return Err(Fail::arg(format!("Invalid config blocking attribute value {b}"))),
        }
        for (name, v) in [("min", get!(minCTAs: c_int)), ("max", get!(maxCTAs: c_int))] {
            match v {
                None | Some(UNDEF_INT) => {}
                Some(n @ 1..=64) if name == "max" => s.max_ctas = Some(n as usize),
                Some(1..=64) => {}
                Some(n) => {
                    return Err(Fail::arg(format!(
                        "Invalid config {name} CTAs attribute value {n} (expected 1..=64)"
                    )));
                }
            }
        }
        // NCCL 2.30.7 src/init.cc parseCommConfig: collnetEnable must be 0 or 1.
        match get!(collnetEnable: c_int) {
            None | Some(UNDEF_INT) => {}
            Some(b @ (0 | 1)) => s.collnet_enable = Some(b == 1),
            Some(b) => return Err(Fail::arg(format!("Invalid config collnetEnable attribute value {b}"))),
        }
        // NCCL 2.30.7 src/init.cc parseCommConfig: configs older than 2.25 have no
        // trafficClass (the default, undefined, is used); any other value is passed
        // to the plugin unchecked.
        if version >= 22500 {
            match get!(trafficClass: c_int) {
                None | Some(UNDEF_INT) => {}
                Some(tc) => s.traffic_class = Some(tc),
            }
        }
        // NCCL 2.30.7 parseCommConfig: numRmaCtx defaults to 1 when undefined; the
        // range is checked when the communicator resolves it.
        match get!(numRmaCtx: c_int) {
            None | Some(UNDEF_INT) => {}
            Some(n) => s.num_rma_ctx = Some(n),
        }
        if let Some(p) = get!(netName: *const c_char) {
            s.net_name = c_string(p).or(s.net_name);
        }
        if let Some(p) = get!(commName: *const c_char) {
            s.comm_name = c_string(p).or(s.comm_name);
        }
    }
    match ferroccl::config::params::COMM_BLOCKING.get(Config::global()) {
        Ok(0) => s.blocking = false,
        Ok(1) => s.blocking = true,
        _ => {}
    }
    Ok(s)
}

/// The directories of this library (as the loader opened it, and with links
/// resolved): plugins installed beside `libnccl.so.2` are found there, wherever
/// the program runs from.
fn library_dirs() -> &'static [PathBuf] {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(|| {
        // SAFETY: Dl_info is plain data (pointers and integers); all-zero is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let here = library_dirs as *const libc::c_void;
        // SAFETY: dladdr only reads the loader's tables; `info` is a valid out-pointer.
        if unsafe { libc::dladdr(here, &mut info) } == 0 || info.dli_fname.is_null() {
            return Vec::new();
        }
        // SAFETY: dli_fname is the loader's NUL-terminated file name.
        let file = PathBuf::from(unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned());
        let mut dirs: Vec<PathBuf> = file.parent().map(PathBuf::from).into_iter().collect();
        if let Some(d) = std::fs::canonicalize(&file)
            .ok()
            .and_then(|f| f.parent().map(PathBuf::from))
            && !dirs.contains(&d)
        {
            dirs.push(d);
        }
        dirs
    })
}

impl Settings {
    /// The runtime's configuration for a communicator with these settings, and
    /// the abort flag of its bootstrap (raised by `ncclCommAbort` during init).
    ///
    /// Errors: invalid bootstrap parameters (`NCCL_SOCKET_*`, `FERROCCL_TIMEOUT_SEC`).
    pub fn comm_config(&self, op: &str) -> R<(CommConfig, Arc<AtomicBool>)> {
        let cfg = Config::global();
        let bootstrap = BootstrapConfig::from_params(cfg).map_err(|e| Fail::arg(format!("{op}: {e}")))?;
        let abort = bootstrap.abort.clone();
        let mut net = LoadOptions::from_env();
        net.plugin_path.extend(library_dirs().iter().cloned());
        if let Some(n) = &self.net_name {
            net.net = Some(n.clone());
        }
        Ok((
            CommConfig {
                nchannels: self.max_ctas,
                collnet_enable: self.collnet_enable,
                traffic_class: self.traffic_class,
                num_rma_ctx: self.num_rma_ctx,
                net: Some(net),
                bootstrap: Some(bootstrap),
                ..Default::default()
            },
            abort,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(version: u32, traffic_class: c_int) -> ncclConfig_t {
        // SAFETY: ncclConfig_t is plain C data (integers and pointers); all-zero is valid.
        let mut c: ncclConfig_t = unsafe { std::mem::zeroed() };
        c.size = std::mem::size_of::<ncclConfig_t>();
        c.magic = NCCL_API_MAGIC;
        c.version = version;
        for f in [
            &mut c.blocking,
            &mut c.minCTAs,
            &mut c.maxCTAs,
            &mut c.collnetEnable,
            &mut c.numRmaCtx,
        ] {
            *f = UNDEF_INT;
        }
        c.trafficClass = traffic_class;
        c
    }

    /// NCCL 2.30.7 `parseCommConfig`: a set trafficClass is kept (from config version
    /// 2.25 on) and reaches the runtime's `CommConfig`; unset or older: none.
    #[test]
    fn traffic_class_from_config_to_comm_config() {
        let s = parse(&config(23007, 0x68), None, "test").unwrap();
        assert_eq!(s.traffic_class, Some(0x68));
        assert_eq!(s.comm_config("test").unwrap().0.traffic_class, Some(0x68));
        assert_eq!(
            parse(&config(23007, UNDEF_INT), None, "test").unwrap().traffic_class,
            None
        );
        assert_eq!(parse(&config(22400, 0x68), None, "test").unwrap().traffic_class, None);
    }

    /// `numRmaCtx`: unset stays unset (the runtime's default, 1); a set value
    /// reaches the runtime's `CommConfig`.
    #[test]
    fn num_rma_ctx_from_config_to_comm_config() {
        assert_eq!(parse(&config(23007, -1), None, "test").unwrap().num_rma_ctx, None);
        let mut c = config(23007, -1);
        c.numRmaCtx = 2;
        let s = parse(&c, None, "test").unwrap();
        assert_eq!(s.comm_config("test").unwrap().0.num_rma_ctx, Some(2));
    }
}
