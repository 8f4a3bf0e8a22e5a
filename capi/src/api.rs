//! What every exported function shares: the guard that keeps panics out of the
//! C ABI and reports errors, the last-error text, NCCL's error strings, and the
//! calls that need no communicator (`ncclGetVersion`, `ncclGetUniqueId`).

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, Once};

use crate::abi::{NCCL_UNIQUE_ID_BYTES, NCCL_VERSION_CODE, ncclResult_t, ncclUniqueId};
use crate::enums::result;

/// A call's failure: the `ncclResult_t` to return and the WARN text (NCCL's
/// wording where NCCL has one for the same misuse). `ncclInProgress` is carried
/// here too, without a message: it is returned, not reported. Boxed, so that a
/// call's `Result` is one word and the success path moves nothing else.
#[derive(Debug, Clone)]
pub(crate) struct Fail(Box<FailInner>);

/// What a [`Fail`] holds.
#[derive(Debug, Clone)]
pub(crate) struct FailInner {
    pub code: ncclResult_t,
    pub msg: String,
}

impl std::ops::Deref for Fail {
    type Target = FailInner;
    fn deref(&self) -> &FailInner {
        &self.0
    }
}

/// A call's outcome.
pub(crate) type R<T = ()> = Result<T, Fail>;

impl Fail {
    /// A failure with `code` and `msg`.
    #[cold]
    pub fn new(code: ncclResult_t, msg: impl Into<String>) -> Fail {
        Fail(Box::new(FailInner { code, msg: msg.into() }))
    }

    /// `ncclInvalidArgument` with `msg`.
    pub fn arg(msg: impl Into<String>) -> Fail {
        Fail::new(result::INVALID_ARGUMENT, msg)
    }

    /// `ncclInvalidUsage` with `msg`.
    pub fn usage(msg: impl Into<String>) -> Fail {
        Fail::new(result::INVALID_USAGE, msg)
    }

    /// `ncclSystemError` with `msg`.
    pub fn system(msg: impl Into<String>) -> Fail {
        Fail::new(result::SYSTEM_ERROR, msg)
    }

    /// `ncclInProgress`: not an error; nothing is logged.
    pub fn in_progress() -> Fail {
        Fail::new(result::IN_PROGRESS, String::new())
    }

    /// A runtime error of call `what`, with the code the runtime maps it to
    /// (`ferroccl::Error::nccl_result`).
    pub fn runtime(what: &str, e: &ferroccl::Error) -> Fail {
        Fail::new(e.nccl_result(), format!("{what}: {e}"))
    }
}

/// The text of the last error of any call (NCCL keeps one per process too,
/// `ncclLastError` in `src/debug.cc`).
static LAST_ERROR: Mutex<String> = Mutex::new(String::new());

thread_local! {
    /// This thread's copy of [`LAST_ERROR`], whose pointer `ncclGetLastError`
    /// returns (valid until this thread's next call to it).
    static LAST_ERROR_COPY: RefCell<CString> = RefCell::new(CString::default());
}

/// Logs `msg` as NCCL's `WARN` does and keeps it for `ncclGetLastError`.
pub(crate) fn report(msg: &str) {
    ferroccl::nccl_warn!("{msg}");
    let mut g = LAST_ERROR.lock().unwrap_or_else(|e| e.into_inner());
    g.clear();
    g.push_str(msg);
}

/// NCCL's logging, set up once from `NCCL_DEBUG` & co. before the first call does
/// anything (NCCL's `ncclInit` → `initEnv`, `ncclDebugInit`).
fn ensure_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        ferroccl::log::init_from_config(ferroccl::config::Config::global());
    });
}

/// Runs the body of exported function `name`: a panic becomes
/// `ncclInternalError` (never unwinding into C), a failure is logged and kept
/// for `ncclGetLastError`, `ncclInProgress` is returned as is.
#[inline(always)]
pub(crate) fn guard(name: &str, f: impl FnOnce() -> R) -> ncclResult_t {
    ensure_logging();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => result::SUCCESS,
        Ok(Err(fail)) => {
            if fail.code != result::IN_PROGRESS {
                report(&fail.msg);
            }
            fail.code
        }
        Err(p) => {
            report(&format!(
                "{name}: internal error: the library panicked ({}); no state was changed by the panic's unwinding \
                 beyond this call",
                ferroccl::error::panic_text(p.as_ref())
            ));
            result::INTERNAL_ERROR
        }
    }
}

/// `*out = v` for a caller's out-pointer, `ncclInvalidArgument` when it is NULL
/// (NCCL's `PtrCheck`: "`<op> : <name> argument is NULL`").
pub(crate) fn store<T>(out: *mut T, v: T, op: &str, name: &str) -> R {
    if out.is_null() {
        return Err(Fail::arg(format!("{op} : {name} argument is NULL")));
    }
    // SAFETY: non-NULL, and the caller passes a pointer valid for one `T` (the
    // NCCL contract of every out-parameter).
    unsafe { out.write(v) };
    Ok(())
}

/// `ncclGetVersion`.
pub(crate) fn get_version(version: *mut c_int) -> ncclResult_t {
    guard("ncclGetVersion", || {
        store(version, NCCL_VERSION_CODE, "ncclGetVersion", "version")
    })
}

/// `ncclGetUniqueId`: starts a bootstrap root in this process (or, with
/// `NCCL_COMM_ID`, encodes that address) and stores the 128-byte id.
pub(crate) fn get_unique_id(out: *mut ncclUniqueId) -> ncclResult_t {
    guard("ncclGetUniqueId", || {
        if out.is_null() {
            return Err(Fail::arg("ncclGetUniqueId : uniqueId argument is NULL"));
        }
        let cfg = ferroccl::bootstrap::BootstrapConfig::from_params(ferroccl::config::Config::global())
            .map_err(|e| Fail::arg(format!("ncclGetUniqueId: {e}")))?;
        let id =
            ferroccl::get_unique_id(&cfg).map_err(|e| Fail::runtime("ncclGetUniqueId", &ferroccl::Error::from(e)))?;
        let mut raw = ncclUniqueId {
            internal: [0; NCCL_UNIQUE_ID_BYTES],
        };
        for (d, s) in raw.internal.iter_mut().zip(id.as_bytes()) {
            *d = *s as c_char;
        }
        store(out, raw, "ncclGetUniqueId", "uniqueId")
    })
}

/// The runtime's unique id from the C struct.
pub(crate) fn unique_id(id: &ncclUniqueId) -> ferroccl::UniqueId {
    let mut b = [0u8; NCCL_UNIQUE_ID_BYTES];
    for (d, s) in b.iter_mut().zip(id.internal) {
        *d = s as u8;
    }
    ferroccl::UniqueId::from_bytes(b)
}

/// `ncclGetErrorString`: NCCL's text for each code (`src/init.cc`).
pub(crate) fn error_string(code: ncclResult_t) -> *const c_char {
    catch_unwind(|| error_text(code).as_ptr()).unwrap_or(c"".as_ptr())
}

fn error_text(code: ncclResult_t) -> &'static CStr {
    let s: &'static CStr = match code {
        result::SUCCESS => c"no error",
        result::UNHANDLED_CUDA_ERROR => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        result::SYSTEM_ERROR => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        result::INTERNAL_ERROR => c"internal error - please report this issue to the NCCL developers",
        result::INVALID_ARGUMENT => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        result::INVALID_USAGE => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        result::REMOTE_ERROR => c"remote process exited or there was a network error",
        result::IN_PROGRESS => c"NCCL operation in progress",
        result::TIMEOUT => c"timeout",
        _ => c"unknown result code",
    };
    s
}

/// `ncclGetLastError`: the text of the last error of any call in this process
/// (`comm` is unused, as in NCCL); valid until this thread calls it again.
pub(crate) fn last_error(_comm: crate::abi::ncclComm_t) -> *const c_char {
    catch_unwind(last_error_copy).unwrap_or(c"".as_ptr())
}

fn last_error_copy() -> *const c_char {
    let text = LAST_ERROR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // NUL bytes cannot be in a C string; drop them rather than fail.
    let c = CString::new(text.replace('\0', "")).unwrap_or_default();
    LAST_ERROR_COPY.with(|slot| {
        *slot.borrow_mut() = c;
        slot.borrow().as_ptr()
    })
}
