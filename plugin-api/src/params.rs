//! `NCCL_*` parameters, declared once each, in the spirit of NCCL's
//! `NCCL_PARAM(name, env, default)` (`src/include/param.h`).
//!
//! * [`params!`](crate::params!) declares a list of parameters, one line each:
//!   a `static` descriptor per parameter ([`IntParam`] or [`StrParam`], with a
//!   doc comment generated from its name and description) and the list of them
//!   all ([`Param`]), so the list can never drift from the declarations.
//! * [`export_params!`](crate::export_params!) exports a plugin's list to its
//!   host as the C function `ferrocclParams_v1` (a ferroccl extension, not part
//!   of NCCL's ABI; see [`ferrocclParam_v1_t`]); a host reads it back with
//!   [`read_table`]. This is how `ferroccl-info params` lists the in-tree
//!   plugins' parameters: each plugin declares and reads its own, and the
//!   runtime does not keep a copy.
//! * [`socket`]: the socket parameters NCCL reads in its shared socket code
//!   (`src/misc/socket.cc`), read both by the runtime's bootstrap and by the
//!   in-tree net plugins, so declared here, where both can name them.
//!
//! Reading a value is left to the reader: the runtime checks values against
//! the declared range or choices (`ferroccl::config`); the in-tree plugins read
//! the environment through the declarations (name, default) with the parsing
//! NCCL's own transports use.

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::OnceLock;

use crate::abi::ncclResult_t;

/// An integer parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntParam {
    /// Variable name, e.g. `NCCL_BUFFSIZE`.
    pub name: &'static str,
    /// Value when unset or empty.
    pub default: i64,
    /// Smallest accepted value.
    pub min: i64,
    /// Largest accepted value.
    pub max: i64,
    /// What it controls.
    pub description: &'static str,
}

/// A string parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrParam {
    /// Variable name, e.g. `NCCL_DEBUG`.
    pub name: &'static str,
    /// Value when unset or empty (`None`: no value).
    pub default: Option<&'static str>,
    /// Accepted values (ASCII case-insensitive); empty: anything.
    pub choices: &'static [&'static str],
    /// What it controls.
    pub description: &'static str,
}

/// Any parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// Integer.
    Int(&'static IntParam),
    /// String.
    Str(&'static StrParam),
}

impl Param {
    /// Variable name.
    pub fn name(&self) -> &'static str {
        match self {
            Param::Int(p) => p.name,
            Param::Str(p) => p.name,
        }
    }

    /// Description.
    pub fn description(&self) -> &'static str {
        match self {
            Param::Int(p) => p.description,
            Param::Str(p) => p.description,
        }
    }
}

/// Declares parameters, one line each, and the list of them all.
///
/// ```
/// ferroccl_plugin_api::params! {
///     /// Everything this crate reads.
///     pub static PARAMS = [
///         BUFFSIZE: int "NCCL_BUFFSIZE" = 1 << 22, 1 << 12..=1 << 30, "bytes of buffer per connection";
///         DEBUG: str "NCCL_DEBUG" = None, ["VERSION", "WARN", "INFO"], "log level";
///         DEBUG_FILE: str "NCCL_DEBUG_FILE" = None, "log file path";
///     ];
/// }
/// assert_eq!(BUFFSIZE.max, 1 << 30);
/// assert_eq!(DEBUG.choices, ["VERSION", "WARN", "INFO"]);
/// assert_eq!(PARAMS.iter().map(|p| p.name()).collect::<Vec<_>>(), ["NCCL_BUFFSIZE", "NCCL_DEBUG", "NCCL_DEBUG_FILE"]);
/// ```
///
/// Each line is `IDENT: int "NAME" = default, min..=max, "description";` (an
/// [`IntParam`]) or `IDENT: str "NAME" = default, ["choice", …], "description";`
/// (a [`StrParam`]; `default` is an `Option<&str>`, the choices may be left
/// out). Every `IDENT` becomes a `static` with the list's visibility and a doc
/// comment made of the name, the description, the default and the range;
/// attributes written before a line (more doc comment) are added to it. The
/// list is a `static` `&[Param]` in declaration order.
#[macro_export]
macro_rules! params {
    ($(#[$list_attr:meta])* $vis:vis static $list:ident = [ $($body:tt)* ];) => {
        $crate::params!(@each [$vis] [$(#[$list_attr])*] $list [] $($body)*);
    };
    (@each [$vis:vis] $list_attrs:tt $list:ident [$($acc:tt)*]
        $(#[$attr:meta])* $id:ident : int $name:literal = $default:expr, $range:expr, $desc:literal; $($rest:tt)*) => {
        #[doc = concat!("`", $name, "`: ", $desc, " (default `", stringify!($default), "`, accepted `",
            stringify!($range), "`).")]
        $(#[$attr])*
        $vis static $id: $crate::params::IntParam = $crate::params::IntParam {
            name: $name,
            default: $default,
            min: *($range).start(),
            max: *($range).end(),
            description: $desc,
        };
        $crate::params!(@each [$vis] $list_attrs $list [$($acc)* $crate::params::Param::Int(&$id),] $($rest)*);
    };
    (@each [$vis:vis] $list_attrs:tt $list:ident [$($acc:tt)*]
        $(#[$attr:meta])* $id:ident : str $name:literal = $default:expr, [$($choice:literal),* $(,)?], $desc:literal;
        $($rest:tt)*) => {
        #[doc = concat!("`", $name, "`: ", $desc, " (default `", stringify!($default), "`, one of ",
            stringify!($($choice),*), ").")]
        $(#[$attr])*
        $vis static $id: $crate::params::StrParam = $crate::params::StrParam {
            name: $name,
            default: $default,
            choices: &[$($choice),*],
            description: $desc,
        };
        $crate::params!(@each [$vis] $list_attrs $list [$($acc)* $crate::params::Param::Str(&$id),] $($rest)*);
    };
    (@each [$vis:vis] $list_attrs:tt $list:ident [$($acc:tt)*]
        $(#[$attr:meta])* $id:ident : str $name:literal = $default:expr, $desc:literal; $($rest:tt)*) => {
        #[doc = concat!("`", $name, "`: ", $desc, " (default `", stringify!($default), "`).")]
        $(#[$attr])*
        $vis static $id: $crate::params::StrParam = $crate::params::StrParam {
            name: $name,
            default: $default,
            choices: &[],
            description: $desc,
        };
        $crate::params!(@each [$vis] $list_attrs $list [$($acc)* $crate::params::Param::Str(&$id),] $($rest)*);
    };
    (@each [$vis:vis] [$($list_attr:tt)*] $list:ident [$($acc:tt)*]) => {
        $($list_attr)*
        $vis static $list: &[$crate::params::Param] = &[$($acc)*];
    };
}

/// `NCCL_SOCKET_*` parameters of NCCL's shared socket code (`src/misc/socket.cc`,
/// `ncclFindInterfaces`, `ncclSocketConnect`): the runtime's bootstrap reads
/// them, and so do the in-tree net plugins (the socket plugin's connections,
/// the IB plugin's out-of-band address).
pub mod socket {
    crate::params! {
        /// The shared socket parameters, in the order `ferroccl-info params` lists them.
        pub static PARAMS = [
            IFNAME: str "NCCL_SOCKET_IFNAME" = None, "network interfaces to use: prefix list, ^ excludes, = exact match";
            FAMILY: str "NCCL_SOCKET_FAMILY" = None, ["AF_INET", "AF_INET6"], "address family for sockets: AF_INET or AF_INET6 (default: any)";
            RETRY_CNT: int "NCCL_SOCKET_RETRY_CNT" = 34, 0..=1 << 20, "socket connect retries";
            RETRY_SLEEP_MSEC: int "NCCL_SOCKET_RETRY_SLEEP_MSEC" = 100, 0..=60_000, "milliseconds between socket connect retries (times the retry number)";
        ];
    }
}

/// Name of the exported function (see [`ferrocclParams_v1_fn`]).
pub const PARAMS_SYMBOL: &CStr = c"ferrocclParams_v1";

/// [`ferrocclParam_v1_t::kind`] of an integer parameter.
pub const FERROCCL_PARAM_INT: c_int = 0;
/// [`ferrocclParam_v1_t::kind`] of a string parameter.
pub const FERROCCL_PARAM_STRING: c_int = 1;

/// One parameter as `ferrocclParams_v1` describes it (a ferroccl extension).
///
/// ```c
/// typedef struct {
///   const char* name;         // "NCCL_IB_TIMEOUT"
///   const char* description;
///   int kind;                 // 0 integer, 1 string
///   int nchoices;             // strings: entries of choices (0: any value)
///   int64_t intDefault, intMin, intMax;  // integers
///   const char* strDefault;   // strings: NULL when there is none
///   const char* const* choices;
/// } ferrocclParam_v1_t;       // 64 bytes
/// ncclResult_t ferrocclParams_v1(const ferrocclParam_v1_t** params, int* nparams);
/// ```
///
/// The table and its strings stay valid while the library is loaded.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ferrocclParam_v1_t {
    /// Variable name (NUL-terminated).
    pub name: *const c_char,
    /// What it controls.
    pub description: *const c_char,
    /// [`FERROCCL_PARAM_INT`] or [`FERROCCL_PARAM_STRING`].
    pub kind: c_int,
    /// Number of entries of `choices`.
    pub nchoices: c_int,
    /// Integer: value when unset.
    pub int_default: i64,
    /// Integer: smallest accepted value.
    pub int_min: i64,
    /// Integer: largest accepted value.
    pub int_max: i64,
    /// String: value when unset; NULL when there is none.
    pub str_default: *const c_char,
    /// String: the accepted values (`nchoices` pointers).
    pub choices: *const *const c_char,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<ferrocclParam_v1_t>() == 64);
    assert!(offset_of!(ferrocclParam_v1_t, name) == 0);
    assert!(offset_of!(ferrocclParam_v1_t, description) == 8);
    assert!(offset_of!(ferrocclParam_v1_t, kind) == 16);
    assert!(offset_of!(ferrocclParam_v1_t, nchoices) == 20);
    assert!(offset_of!(ferrocclParam_v1_t, int_default) == 24);
    assert!(offset_of!(ferrocclParam_v1_t, int_min) == 32);
    assert!(offset_of!(ferrocclParam_v1_t, int_max) == 40);
    assert!(offset_of!(ferrocclParam_v1_t, str_default) == 48);
    assert!(offset_of!(ferrocclParam_v1_t, choices) == 56);
};

/// `ferrocclParams_v1(params, nparams)`: sets `*params` to the plugin's table
/// and `*nparams` to its length.
#[allow(non_camel_case_types)]
pub type ferrocclParams_v1_fn =
    unsafe extern "C" fn(params: *mut *const ferrocclParam_v1_t, nparams: *mut c_int) -> ncclResult_t;

/// A parameter list as C structs, with the C strings they point into.
#[derive(Debug)]
pub struct ParamTable {
    entries: Vec<ferrocclParam_v1_t>,
    // Owned here so the pointers in `entries` stay valid (a `CString`'s and a
    // `Vec`'s heap buffer do not move when the owner does).
    _strings: Vec<CString>,
    _choices: Vec<Vec<*const c_char>>,
}

// SAFETY: the table is immutable after construction; its raw pointers point
// only into buffers it owns.
unsafe impl Send for ParamTable {}
// SAFETY: as above.
unsafe impl Sync for ParamTable {}

impl ParamTable {
    /// Builds the C table of `list`. Errors when a string holds a NUL byte.
    pub fn new(list: &[Param]) -> Result<ParamTable, String> {
        let mut strings = Vec::new();
        let mut choices_keep = Vec::new();
        let mut cstr = |s: &str| -> Result<*const c_char, String> {
            let c = CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"))?;
            let p = c.as_ptr();
            strings.push(c);
            Ok(p)
        };
        let mut entries = Vec::with_capacity(list.len());
        for p in list {
            let mut e = ferrocclParam_v1_t {
                name: cstr(p.name())?,
                description: cstr(p.description())?,
                kind: FERROCCL_PARAM_INT,
                nchoices: 0,
                int_default: 0,
                int_min: 0,
                int_max: 0,
                str_default: std::ptr::null(),
                choices: std::ptr::null(),
            };
            match p {
                Param::Int(ip) => (e.int_default, e.int_min, e.int_max) = (ip.default, ip.min, ip.max),
                Param::Str(sp) => {
                    e.kind = FERROCCL_PARAM_STRING;
                    if let Some(d) = sp.default {
                        e.str_default = cstr(d)?;
                    }
                    let ptrs = sp.choices.iter().map(|c| cstr(c)).collect::<Result<Vec<_>, _>>()?;
                    e.nchoices = c_int::try_from(ptrs.len()).map_err(|_| "too many choices".to_string())?;
                    e.choices = ptrs.as_ptr();
                    choices_keep.push(ptrs);
                }
            }
            entries.push(e);
        }
        Ok(ParamTable {
            entries,
            _strings: strings,
            _choices: choices_keep,
        })
    }

    /// The C entries.
    pub fn entries(&self) -> &[ferrocclParam_v1_t] {
        &self.entries
    }
}

/// The body of an exported `ferrocclParams_v1` (see
/// [`export_params!`](crate::export_params!)): builds `list`'s table once in
/// `cell` and hands it out. `ncclInvalidArgument` for NULL out-pointers,
/// `ncclInternalError` if the table cannot be built; never panics across the ABI.
///
/// # Safety
/// `params` and `nparams` are NULL or valid for writes.
pub unsafe fn export_table(
    cell: &OnceLock<Result<ParamTable, String>>,
    list: &[Param],
    params: *mut *const ferrocclParam_v1_t,
    nparams: *mut c_int,
) -> ncclResult_t {
    crate::export::guard(PARAMS_SYMBOL, "ferrocclParams_v1", || {
        if params.is_null() || nparams.is_null() {
            return Err(crate::NetError::InvalidArgument("NULL params or nparams".into()));
        }
        let table = cell
            .get_or_init(|| ParamTable::new(list))
            .as_ref()
            .map_err(|e| crate::NetError::Internal(format!("parameter table: {e}")))?;
        let n = c_int::try_from(table.entries.len())
            .map_err(|_| crate::NetError::Internal("too many parameters".into()))?;
        // SAFETY: both pointers are non-NULL and valid for writes (the caller's contract).
        unsafe {
            *params = table.entries.as_ptr();
            *nparams = n;
        }
        Ok(())
    })
}

/// Exports a [`params!`](crate::params!) list as the C function
/// `ferrocclParams_v1` (see [`ferrocclParam_v1_t`]), so a host can list the
/// plugin's parameters. Invoke once per cdylib:
///
/// ```ignore
/// ferroccl_plugin_api::params! { pub static PARAMS = [ /* … */ ]; }
/// ferroccl_plugin_api::export_params!(PARAMS);
/// ```
#[macro_export]
macro_rules! export_params {
    ($list:path) => {
        /// The plugin's parameters (ferroccl extension; see
        /// `ferroccl_plugin_api::params::ferrocclParam_v1_t`).
        ///
        /// # Safety
        /// `params` and `nparams` are NULL or valid for writes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn ferrocclParams_v1(
            params: *mut *const $crate::params::ferrocclParam_v1_t,
            nparams: *mut ::std::ffi::c_int,
        ) -> $crate::abi::ncclResult_t {
            static TABLE: ::std::sync::OnceLock<
                ::std::result::Result<$crate::params::ParamTable, ::std::string::String>,
            > = ::std::sync::OnceLock::new();
            // SAFETY: forwarded from this function's own contract.
            unsafe { $crate::params::export_table(&TABLE, $list, params, nparams) }
        }
    };
}

/// Most entries [`read_table`] accepts (a plugin declares tens).
pub const MAX_PARAMS: usize = 4096;

/// Calls a plugin's `ferrocclParams_v1` and copies its table into descriptors
/// that live for the rest of the process (the copies are leaked: a few hundred
/// bytes per parameter; a tool reads each plugin once). Errors name what was
/// wrong: a failing call, a NULL table, a bad kind, a NULL or non-UTF-8 string,
/// `min > max`.
///
/// # Safety
/// `f` is a `ferrocclParams_v1` function whose library stays loaded during the call.
pub unsafe fn read_table(f: ferrocclParams_v1_fn) -> Result<Vec<Param>, String> {
    let mut table: *const ferrocclParam_v1_t = std::ptr::null();
    let mut n: c_int = -1;
    // SAFETY: `f` has the declared signature; both out-pointers are valid.
    let rc = unsafe { f(&raw mut table, &raw mut n) };
    if rc != ncclResult_t::ncclSuccess {
        return Err(format!("ferrocclParams_v1 returned {rc:?}"));
    }
    let n = usize::try_from(n).map_err(|_| format!("ferrocclParams_v1 gave {n} parameters"))?;
    if n > MAX_PARAMS {
        return Err(format!("ferrocclParams_v1 gave {n} parameters, more than {MAX_PARAMS}"));
    }
    if n > 0 && table.is_null() {
        return Err(format!("ferrocclParams_v1 gave {n} parameters and a NULL table"));
    }
    let text = |p: *const c_char, what: &str, i: usize| -> Result<&'static str, String> {
        if p.is_null() {
            return Err(format!("parameter {i}: NULL {what}"));
        }
        // SAFETY: a non-NULL string of the table, NUL-terminated per the ABI.
        let s = unsafe { CStr::from_ptr(p) }
            .to_str()
            .map_err(|_| format!("parameter {i}: {what} is not UTF-8"))?;
        Ok(Box::leak(s.to_owned().into_boxed_str()))
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `table` holds `n` entries (the ABI's contract), checked non-NULL above.
        let e = unsafe { *table.add(i) };
        let name = text(e.name, "name", i)?;
        let description = text(e.description, "description", i)?;
        out.push(match e.kind {
            FERROCCL_PARAM_INT if e.int_min <= e.int_max => Param::Int(Box::leak(Box::new(IntParam {
                name,
                default: e.int_default,
                min: e.int_min,
                max: e.int_max,
                description,
            }))),
            FERROCCL_PARAM_INT => {
                return Err(format!("{name}: range [{}, {}] is empty", e.int_min, e.int_max));
            }
            FERROCCL_PARAM_STRING => {
                let default = if e.str_default.is_null() {
                    None
                } else {
                    Some(text(e.str_default, "default", i)?)
                };
                let nchoices = usize::try_from(e.nchoices).map_err(|_| format!("{name}: {} choices", e.nchoices))?;
                if nchoices > 0 && e.choices.is_null() {
                    return Err(format!("{name}: {nchoices} choices and a NULL list"));
                }
                let choices = (0..nchoices)
                    // SAFETY: `choices` holds `nchoices` pointers (the ABI's contract).
                    .map(|j| text(unsafe { *e.choices.add(j) }, "choice", i))
                    .collect::<Result<Vec<_>, _>>()?;
                Param::Str(Box::leak(Box::new(StrParam {
                    name,
                    default,
                    choices: Box::leak(choices.into_boxed_slice()),
                    description,
                })))
            }
            k => return Err(format!("{name}: unknown kind {k}")),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::params! {
        /// A test list.
        pub static LIST = [
            A: int "FERROCCL_TEST_A" = -1, -1..=i64::MAX, "an integer";
            /// More words.
            B: str "FERROCCL_TEST_B" = Some("x"), ["x", "y"], "a choice";
            C: str "FERROCCL_TEST_C" = None, "anything";
        ];
    }
    crate::export_params!(LIST);

    #[test]
    fn the_list_is_the_declarations() {
        assert_eq!(LIST, [Param::Int(&A), Param::Str(&B), Param::Str(&C)]);
        assert_eq!((A.default, A.min, A.max), (-1, -1, i64::MAX));
        assert_eq!((B.default, B.choices), (Some("x"), &["x", "y"][..]));
        assert_eq!((C.default, C.choices.len()), (None, 0));
    }

    #[test]
    fn export_round_trips() {
        // SAFETY: this test binary's own export.
        let got = unsafe { read_table(ferrocclParams_v1) }.expect("read back");
        assert_eq!(got.len(), LIST.len());
        for (g, w) in got.iter().zip(LIST) {
            match (g, w) {
                (Param::Int(g), Param::Int(w)) => assert_eq!(g, w),
                (Param::Str(g), Param::Str(w)) => assert_eq!(g, w),
                _ => panic!("{g:?} != {w:?}"),
            }
        }
        // The same table on a second call.
        let (mut t1, mut t2, mut n) = (std::ptr::null(), std::ptr::null(), 0);
        // SAFETY: valid out-pointers.
        unsafe {
            assert_eq!(ferrocclParams_v1(&raw mut t1, &raw mut n), ncclResult_t::ncclSuccess);
            assert_eq!(ferrocclParams_v1(&raw mut t2, &raw mut n), ncclResult_t::ncclSuccess);
        }
        assert_eq!((t1, n), (t2, 3));
    }

    #[test]
    fn null_out_pointers_are_refused() {
        let mut n = 0;
        // SAFETY: NULL is allowed (and refused).
        let rc = unsafe { ferrocclParams_v1(std::ptr::null_mut(), &raw mut n) };
        assert_eq!(rc, ncclResult_t::ncclInvalidArgument);
    }

    /// A table whose one entry has an unknown kind.
    unsafe extern "C" fn bad(params: *mut *const ferrocclParam_v1_t, nparams: *mut c_int) -> ncclResult_t {
        static T: OnceLock<ParamTable> = OnceLock::new();
        let t = T.get_or_init(|| {
            let mut t = ParamTable::new(&[Param::Int(&A)]).unwrap();
            t.entries[0].kind = 7;
            t
        });
        // SAFETY: read_table passes valid out-pointers.
        unsafe {
            *params = t.entries.as_ptr();
            *nparams = 1;
        }
        ncclResult_t::ncclSuccess
    }

    #[test]
    fn a_malformed_table_is_an_error() {
        // SAFETY: `bad` has the signature and lives in this binary.
        let e = unsafe { read_table(bad) }.unwrap_err();
        assert_eq!(e, "FERROCCL_TEST_A: unknown kind 7");
    }
}
