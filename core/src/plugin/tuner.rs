//! The tuner adapter: one [`TunerAdapter`] drives any `ncclTuner_v2_t` …
//! `ncclTuner_v6_t` with the newest semantics, as NCCL 2.30.7's
//! `src/plugin/tuner/tuner_v2..v6.cc` adapters do (reference
//! `docs/reference/nccl-plugin-abi.md` §3.1, `docs/reference/nccl-graph-tuning.md` §3.5):
//!
//! * **init**: v5/v6 `init(&ctx, commId, nRanks, nNodes, logger, &nvlDomainInfo,
//!   &constants)` with the model's constants, read back afterwards; v2–v4
//!   `init(nRanks, nNodes, logger, &ctx)` (no commId, no domain info, constants
//!   not offered). A failing `init` fails communicator creation, as in NCCL.
//! * **getCollInfo**: v3+ get the 7×3 cost table (a flat `float[7][3]` passed as
//!   `float**`), `numPipeOps` and (v4+) `regBuff`; v2 gets `collNetSupport` and
//!   `nvlsSupport` derived from the table and returns one algorithm/protocol,
//!   whose entry the adapter sets to 0.0 when it is in range and not -1.
//!   `nChannels` is pre-set to 0 (keep the host's choice).
//! * **getChunkSize** (v6, optional): in/out chunk size in bytes.
//! * **finalize** (v5+) / **destroy** (v2–v4) once per context.
//!
//! Beyond NCCL, the adapter checks what the plugin did instead of trusting it:
//! the table is handed over between guard zones that are checked after the call
//! (a plugin writing outside the table gets [`TunerError::OutOfBounds`]), and an
//! error return, a NULL required slot or a NULL context from `init` each become a
//! [`TunerError`] naming the plugin, version and call. (A plugin that crashes
//! the process cannot be caught in-process; the conformance suite runs tuners in
//! worker processes for that.)

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::Arc;

use ferroccl_plugin_api::abi::{
    NCCL_ALGO_PROTO_IGNORE, NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, ncclFunc_t, ncclNvlDomainInfo_v5_t, ncclResult_t,
    ncclTuner_v2_t, ncclTuner_v3_t, ncclTuner_v4_t, ncclTuner_v5_t, ncclTuner_v6_t, ncclTunerConstants_v5_t,
};

use super::library::{PluginLibrary, open_plugin_lib, search_dirs};
use super::logger;
use super::options::LoadOptions;
use super::symbols::{PluginType, vtable_name};
use super::tuner_profiler::AuxPlugin;

/// Floats of guard zone on each side of the cost table handed to a plugin.
const GUARD: usize = 64;
/// The guard pattern (a NaN no plugin writes by accident).
const GUARD_BITS: u32 = 0x7fc0_dead;
const NA: usize = NCCL_NUM_ALGORITHMS;
const NP: usize = NCCL_NUM_PROTOCOLS;

/// What went wrong in a tuner call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TunerError {
    /// The plugin returned an error code.
    #[error("tuner '{plugin}' (ncclTuner v{version}) {call} returned {code}")]
    Call {
        /// vtable name.
        plugin: String,
        /// API version.
        version: u32,
        /// The call.
        call: &'static str,
        /// The result code (name and number).
        code: String,
    },
    /// A slot the host must call is NULL.
    #[error("tuner '{plugin}' (ncclTuner v{version}) has a NULL '{slot}' function pointer")]
    NullSlot {
        /// vtable name.
        plugin: String,
        /// API version.
        version: u32,
        /// The slot.
        slot: &'static str,
    },
    /// The plugin wrote outside what it was given.
    #[error("tuner '{plugin}' (ncclTuner v{version}) {call} wrote outside the {what}: {detail}")]
    OutOfBounds {
        /// vtable name.
        plugin: String,
        /// API version.
        version: u32,
        /// The call.
        call: &'static str,
        /// What it was given (e.g. `7x3 cost table`).
        what: &'static str,
        /// Where it wrote.
        detail: String,
    },
    /// The plugin returned success with an unusable result.
    #[error("tuner '{plugin}' (ncclTuner v{version}) {call}: {detail}")]
    BadOutput {
        /// vtable name.
        plugin: String,
        /// API version.
        version: u32,
        /// The call.
        call: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The library could not be loaded for the requested version.
    #[error("{0}")]
    Load(String),
}

/// The plugin's vtable, copied out of the exported symbol, tagged by version.
#[derive(Clone, Copy)]
enum Table {
    V2(ncclTuner_v2_t),
    V3(ncclTuner_v3_t),
    V4(ncclTuner_v4_t),
    V5(ncclTuner_v5_t),
    V6(ncclTuner_v6_t),
}

/// Drives one loaded `ncclTunerPlugin_vN` symbol (N = 2 … 6).
pub struct TunerAdapter {
    lib: Arc<PluginLibrary>,
    table: Table,
    version: u32,
    name: String,
    file: Option<PathBuf>,
}

// SAFETY: the table holds plugin function pointers and a C string, which NCCL's
// contract allows to be used from any thread; nothing is mutated after creation.
unsafe impl Send for TunerAdapter {}
// SAFETY: as above.
unsafe impl Sync for TunerAdapter {}

impl std::fmt::Debug for TunerAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunerAdapter")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("file", &self.file)
            .finish()
    }
}

fn code_text(r: ncclResult_t) -> String {
    format!("{r:?} ({})", r.0)
}

/// NCCL's per-communicator NVLink-domain summary handed to v5+ `init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvlDomainInfo {
    /// Domains (NCCL passes the node count).
    pub n_domains: i32,
    /// Fewest ranks in a domain (fewest local ranks).
    pub min_ranks: i32,
    /// Most ranks in a domain.
    pub max_ranks: i32,
}

impl TunerAdapter {
    /// Wraps the vtable at `sym` of `version` (2 ..= 6) in `lib`.
    ///
    /// # Safety
    /// `sym` must point to a readable `ncclTuner_v<version>_t` inside `lib`.
    pub unsafe fn new(lib: Arc<PluginLibrary>, sym: *const c_void, version: u32) -> Result<TunerAdapter, TunerError> {
        // SAFETY: per the caller; `read_unaligned` because nothing promises alignment.
        let table = unsafe {
            match version {
                2 => Table::V2(std::ptr::read_unaligned(sym.cast())),
                3 => Table::V3(std::ptr::read_unaligned(sym.cast())),
                4 => Table::V4(std::ptr::read_unaligned(sym.cast())),
                5 => Table::V5(std::ptr::read_unaligned(sym.cast())),
                6 => Table::V6(std::ptr::read_unaligned(sym.cast())),
                v => {
                    return Err(TunerError::Load(format!(
                        "ncclTuner v{v} is not a known version (2 ..= 6)"
                    )));
                }
            }
        };
        // SAFETY: every tuner struct starts with `const char* name`.
        let name = unsafe { vtable_name(sym) }.unwrap_or_default();
        Ok(TunerAdapter {
            lib,
            table,
            version,
            name,
            file: PluginLibrary::file_of(sym),
        })
    }

    /// The adapter for a plugin found by the tuner loader.
    pub fn from_aux(p: &AuxPlugin) -> Result<TunerAdapter, TunerError> {
        // SAFETY: the loader found `vtable()` as `ncclTunerPlugin_v<version>` in `library()`.
        unsafe { TunerAdapter::new(p.library().clone(), p.vtable(), p.version) }
    }

    /// Opens `spec` (a path, or a name resolved like `NCCL_TUNER_PLUGIN`: the name,
    /// then `libnccl-tuner-<name>.so`, in ferroccl's search directories too) and
    /// takes exactly `ncclTunerPlugin_v<version>` from it (tests and the
    /// conformance suite drive each exported version this way).
    ///
    /// Errors: [`TunerError::Load`] naming the files tried or the missing symbol.
    pub fn open_version(spec: &str, version: u32) -> Result<TunerAdapter, TunerError> {
        let dirs = search_dirs(&LoadOptions::default());
        let out = open_plugin_lib(spec, "libnccl-tuner", &dirs);
        let tried: Vec<String> = out
            .attempts
            .iter()
            .map(|a| format!("{} ({:?})", a.file, a.result))
            .collect();
        let lib = out
            .lib
            .ok_or_else(|| TunerError::Load(format!("could not open tuner '{spec}': tried {}", tried.join("; "))))?;
        let (sym_name, _) = PluginType::Tuner
            .symbols()
            .iter()
            .find(|(_, v)| *v == version)
            .ok_or_else(|| TunerError::Load(format!("ncclTuner v{version} is not a known version (2 ..= 6)")))?;
        let sym = lib.symbol(sym_name).ok_or_else(|| {
            TunerError::Load(format!(
                "{} does not export {}",
                lib.opened_as(),
                sym_name.to_string_lossy()
            ))
        })?;
        // SAFETY: `sym` is the address of `ncclTunerPlugin_v<version>` in `lib`.
        unsafe { TunerAdapter::new(Arc::new(lib), sym, version) }
    }

    /// The vtable `name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The API version in use.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The file the vtable lives in.
    pub fn file(&self) -> Option<&PathBuf> {
        self.file.as_ref()
    }

    /// Whether the plugin has a `getChunkSize` (v6 with a non-NULL slot).
    pub fn has_chunk_size(&self) -> bool {
        matches!(self.table, Table::V6(t) if t.getChunkSize.is_some())
    }

    fn call_err(&self, call: &'static str, r: ncclResult_t) -> Result<(), TunerError> {
        if r == ncclResult_t::ncclSuccess {
            Ok(())
        } else {
            Err(TunerError::Call {
                plugin: self.name.clone(),
                version: self.version,
                call,
                code: code_text(r),
            })
        }
    }

    fn null(&self, slot: &'static str) -> TunerError {
        TunerError::NullSlot {
            plugin: self.name.clone(),
            version: self.version,
            slot,
        }
    }

    /// `init` for one communicator. For v5/v6 `constants` is offered to the
    /// plugin and holds what it left there on return; v2–v4 leave it untouched.
    ///
    /// Errors: the plugin's error code, a NULL `init`, or success without a context
    /// is not an error (NCCL passes a NULL context on to later calls too).
    pub fn init(
        self: &Arc<Self>,
        comm_id: u64,
        nranks: usize,
        nnodes: usize,
        nvl: NvlDomainInfo,
        constants: &mut ncclTunerConstants_v5_t,
    ) -> Result<TunerContext, TunerError> {
        // From here on plugin code runs: never unload the library.
        self.lib.pin();
        let log = Some(logger::nccl_logger());
        let mut ctx: *mut c_void = null_mut();
        let r = match self.table {
            Table::V2(t) => {
                let f = t.init.ok_or_else(|| self.null("init"))?;
                // SAFETY: C ABI call with valid arguments; `ctx` is a writable out-pointer.
                unsafe { f(nranks, nnodes, log, &mut ctx) }
            }
            Table::V3(t) => {
                let f = t.init.ok_or_else(|| self.null("init"))?;
                // SAFETY: as above.
                unsafe { f(nranks, nnodes, log, &mut ctx) }
            }
            Table::V4(t) => {
                let f = t.init.ok_or_else(|| self.null("init"))?;
                // SAFETY: as above.
                unsafe { f(nranks, nnodes, log, &mut ctx) }
            }
            Table::V5(_) | Table::V6(_) => {
                let f = match self.table {
                    Table::V5(t) => t.init,
                    Table::V6(t) => t.init,
                    _ => None,
                }
                .ok_or_else(|| self.null("init"))?;
                let mut info = ncclNvlDomainInfo_v5_t {
                    nNvlDomains: nvl.n_domains,
                    minRanksPerNvlDomain: nvl.min_ranks,
                    maxRanksPerNvlDomain: nvl.max_ranks,
                };
                // SAFETY: C ABI call; `ctx`, `info` and `constants` are valid for the call.
                unsafe { f(&mut ctx, comm_id, nranks, nnodes, log, &mut info, constants) }
            }
        };
        self.call_err("init", r)?;
        // Every slot used later must be present (checked once per context).
        let missing = match self.table {
            Table::V2(t) => t.getCollInfo.is_none().then_some("getCollInfo"),
            Table::V3(t) => t.getCollInfo.is_none().then_some("getCollInfo"),
            Table::V4(t) => t.getCollInfo.is_none().then_some("getCollInfo"),
            Table::V5(t) => t.getCollInfo.is_none().then_some("getCollInfo"),
            Table::V6(t) => t.getCollInfo.is_none().then_some("getCollInfo"),
        };
        let ctx = TunerContext {
            adapter: self.clone(),
            ctx: Ctx(ctx),
            finalized: false,
        };
        if let Some(slot) = missing {
            // The context exists: give it back before refusing the plugin.
            let _ = ctx.finalize();
            return Err(self.null(slot));
        }
        Ok(ctx)
    }
}

/// A raw context pointer (the plugin's, opaque).
#[derive(Debug, Clone, Copy)]
struct Ctx(*mut c_void);
// SAFETY: NCCL hands the context to whatever thread runs a collective; the
// plugin must allow that (its contract). Calls are serialized by the owner.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

/// One communicator's tuner context: `getCollInfo` / `getChunkSize` / `finalize`.
/// Dropping it finalizes it (errors logged) if [`TunerContext::finalize`] was not called.
#[derive(Debug)]
pub struct TunerContext {
    adapter: Arc<TunerAdapter>,
    ctx: Ctx,
    finalized: bool,
}

/// What `getCollInfo` produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollInfo {
    /// `*nChannels` on return (0 = keep the host's).
    pub nchannels: i32,
}

impl TunerContext {
    /// The adapter.
    pub fn adapter(&self) -> &Arc<TunerAdapter> {
        &self.adapter
    }

    /// `getCollInfo` on `table` (`[algo][proto]`, µs or -1). The plugin edits a
    /// copy between guard zones; the copy is taken back only when the guards
    /// are intact.
    ///
    /// Errors: [`TunerError::Call`] on an error code, [`TunerError::OutOfBounds`]
    /// when a guard changed (the table is then left as it was).
    pub fn get_coll_info(
        &self,
        func: usize,
        nbytes: usize,
        num_pipe_ops: usize,
        reg_buff: bool,
        table: &mut [[f32; NP]; NA],
    ) -> Result<CollInfo, TunerError> {
        let a = &*self.adapter;
        let mut buf = vec![f32::from_bits(GUARD_BITS); GUARD + NA * NP + GUARD];
        for (i, row) in table.iter().enumerate() {
            buf[GUARD + i * NP..GUARD + (i + 1) * NP].copy_from_slice(row);
        }
        let mut nch: c_int = 0;
        let coll = ncclFunc_t(func as i32);
        let pipe = num_pipe_ops.min(c_int::MAX as usize) as c_int;
        let tp = buf[GUARD..].as_mut_ptr();
        let tpp = tp as *mut *mut f32;
        let r = match a.table {
            Table::V2(t) => {
                let f = t.getCollInfo.ok_or_else(|| a.null("getCollInfo"))?;
                let collnet = table[3][2] != NCCL_ALGO_PROTO_IGNORE;
                let nvls = table[4][2] != NCCL_ALGO_PROTO_IGNORE || table[5][2] != NCCL_ALGO_PROTO_IGNORE;
                let (mut algo, mut proto): (c_int, c_int) = (-1, -1);
                // SAFETY: C ABI call; the out-pointers are valid for the call.
                let r = unsafe {
                    f(
                        self.ctx.0,
                        coll,
                        nbytes,
                        collnet as c_int,
                        nvls as c_int,
                        pipe,
                        &mut algo,
                        &mut proto,
                        &mut nch,
                    )
                };
                if r == ncclResult_t::ncclSuccess
                    && (0..NA as c_int).contains(&algo)
                    && (0..NP as c_int).contains(&proto)
                {
                    let i = GUARD + algo as usize * NP + proto as usize;
                    if buf[i] != NCCL_ALGO_PROTO_IGNORE {
                        buf[i] = 0.0;
                    }
                }
                r
            }
            Table::V3(t) => {
                let f = t.getCollInfo.ok_or_else(|| a.null("getCollInfo"))?;
                // SAFETY: C ABI call; `tpp` points to NA×NP floats inside `buf`.
                unsafe { f(self.ctx.0, coll, nbytes, pipe, tpp, NA as c_int, NP as c_int, &mut nch) }
            }
            // v4, v5 and v6 share getCollInfo's signature (regBuff added in v4).
            Table::V4(_) | Table::V5(_) | Table::V6(_) => {
                let f = match a.table {
                    Table::V4(t) => t.getCollInfo,
                    Table::V5(t) => t.getCollInfo,
                    Table::V6(t) => t.getCollInfo,
                    _ => None,
                }
                .ok_or_else(|| a.null("getCollInfo"))?;
                // SAFETY: as above.
                unsafe {
                    f(
                        self.ctx.0,
                        coll,
                        nbytes,
                        pipe,
                        tpp,
                        NA as c_int,
                        NP as c_int,
                        reg_buff as c_int,
                        &mut nch,
                    )
                }
            }
        };
        let guards_ok = |range: std::ops::Range<usize>| range.clone().find(|&i| buf[i].to_bits() != GUARD_BITS);
        let before = guards_ok(0..GUARD);
        let after = guards_ok(GUARD + NA * NP..buf.len());
        if let Some(i) = before.or(after) {
            let off = i as isize - GUARD as isize;
            return Err(TunerError::OutOfBounds {
                plugin: a.name.clone(),
                version: a.version,
                call: "getCollInfo",
                what: "7x3 cost table",
                detail: format!(
                    "float index {off} relative to the table start (the table is indices 0 ..= {}), value {}",
                    NA * NP - 1,
                    buf[i]
                ),
            });
        }
        a.call_err("getCollInfo", r)?;
        for (i, row) in table.iter_mut().enumerate() {
            row.copy_from_slice(&buf[GUARD + i * NP..GUARD + (i + 1) * NP]);
        }
        Ok(CollInfo { nchannels: nch })
    }

    /// v6 `getChunkSize`: `chunk` in, the plugin's chunk out. Returns whether the
    /// plugin has the call (v2–v5 and a NULL slot leave `chunk` alone).
    ///
    /// Errors: [`TunerError::Call`] on an error code.
    pub fn get_chunk_size(
        &self,
        func: usize,
        nbytes: usize,
        algo: usize,
        proto: usize,
        nchannels: usize,
        chunk: &mut usize,
    ) -> Result<bool, TunerError> {
        let a = &*self.adapter;
        let Table::V6(t) = a.table else { return Ok(false) };
        let Some(f) = t.getChunkSize else { return Ok(false) };
        let mut c = *chunk;
        // SAFETY: C ABI call; `c` is a valid in/out size_t.
        let r = unsafe {
            f(
                self.ctx.0,
                ncclFunc_t(func as i32),
                nbytes,
                algo as c_int,
                proto as c_int,
                nchannels.min(c_int::MAX as usize) as c_int,
                &mut c,
            )
        };
        a.call_err("getChunkSize", r)?;
        *chunk = c;
        Ok(true)
    }

    /// `finalize` (v5+) / `destroy` (v2–v4). Calling it twice is a no-op.
    ///
    /// Errors: the plugin's error code.
    pub fn finalize(mut self) -> Result<(), TunerError> {
        self.finalize_inner()
    }

    fn finalize_inner(&mut self) -> Result<(), TunerError> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        let a = &*self.adapter;
        let (f, call) = match a.table {
            Table::V2(t) => (t.destroy, "destroy"),
            Table::V3(t) => (t.destroy, "destroy"),
            Table::V4(t) => (t.destroy, "destroy"),
            Table::V5(t) => (t.finalize, "finalize"),
            Table::V6(t) => (t.finalize, "finalize"),
        };
        let Some(f) = f else { return Ok(()) };
        // SAFETY: C ABI call with the context the plugin's init returned.
        let r = unsafe { f(self.ctx.0) };
        a.call_err(call, r)
    }
}

impl Drop for TunerContext {
    fn drop(&mut self) {
        if let Err(e) = self.finalize_inner() {
            crate::log::nccl_warn!("TUNER/Plugin: {e}");
        }
    }
}
