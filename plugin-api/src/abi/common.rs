//! Types and constants shared by every plugin API: result codes, logging,
//! data types, reduction ops, collective ids, tuner algorithm/protocol ids,
//! and the layout-checking macros used by the sibling modules.
//!
//! Sources: NCCL 2.30.7 `src/nccl.h.in`, `src/include/nccl_common.h`,
//! `src/include/plugin/nccl_tuner.h` (reference §4).

use std::ffi::{c_int, c_void};

/// Defines a `#[repr(C)]` struct and pins its size and every field's offset
/// with `const` assertions. Offsets are written as in the reference tables;
/// `base N` subtracts `N` (for structs nested in a union at offset `N`).
macro_rules! abi_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident, size $size:literal $(, base $base:literal)? {
            $( $(#[$fm:meta])* $f:ident : $t:ty = $off:literal ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub struct $name {
            $( $(#[$fm])* pub $f: $t, )*
        }
        impl $name {
            /// An all-zero value (NULL pointers, `None` function pointers, zero numbers).
            pub const fn zeroed() -> Self {
                // SAFETY: every field of an ABI struct in this crate is an integer, float,
                // bool, raw pointer, `Option` of a function pointer, array or union of
                // those: all-zero bytes are a valid value of each.
                unsafe { ::core::mem::zeroed() }
            }
        }
        const _: () = {
            let base: usize = 0 $(+ $base)?;
            assert!(::core::mem::size_of::<$name>() == $size);
            $( assert!(::core::mem::offset_of!($name, $f) + base == $off); )*
        };
    };
}

/// Defines a `#[repr(C)]` union and pins its size and that every member is at offset 0.
macro_rules! abi_union {
    (
        $(#[$m:meta])*
        pub union $name:ident, size $size:literal {
            $( $(#[$fm:meta])* $f:ident : $t:ty ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy)]
        pub union $name {
            $( $(#[$fm])* pub $f: $t, )*
        }
        impl $name {
            /// An all-zero value.
            pub const fn zeroed() -> Self {
                // SAFETY: every member is a struct of integers, floats, bools and raw
                // pointers, for which all-zero bytes are valid.
                unsafe { ::core::mem::zeroed() }
            }
        }
        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(concat!(stringify!($name), " { .. }"))
            }
        }
        const _: () = {
            assert!(::core::mem::size_of::<$name>() == $size);
            $( assert!(::core::mem::offset_of!($name, $f) == 0); )*
        };
    };
}

/// Defines a `#[repr(transparent)]` wrapper of a C enum's `int` with associated
/// constants, so values coming from C can never be an invalid Rust value.
macro_rules! c_enum {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$vm:meta])* $v:ident = $val:expr ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[repr(transparent)]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub i32);
        impl $name {
            $( $(#[$vm])* pub const $v: $name = $name($val); )*
            /// The raw C value.
            pub const fn raw(self) -> i32 {
                self.0
            }
        }
        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                $( if self.0 == $val { return f.write_str(stringify!($v)); } )*
                write!(f, concat!(stringify!($name), "({})"), self.0)
            }
        }
        impl From<$name> for i32 {
            fn from(v: $name) -> i32 {
                v.0
            }
        }
        const _: () = assert!(::core::mem::size_of::<$name>() == 4);
    };
}

pub(crate) use {abi_struct, abi_union};

c_enum! {
    /// `ncclResult_t` (`src/nccl.h.in`), a 4-byte C enum. A transparent `int` so
    /// an unknown value returned by a plugin is not undefined behaviour; use
    /// [`ncclResult_t::from_raw`] to check it is a known code.
    pub struct ncclResult_t {
        /// 0
        ncclSuccess = 0,
        /// 1
        ncclUnhandledCudaError = 1,
        /// 2: network or system failure.
        ncclSystemError = 2,
        /// 3: API misuse by the caller.
        ncclInternalError = 3,
        /// 4
        ncclInvalidArgument = 4,
        /// 5: user misconfiguration / size mismatch.
        ncclInvalidUsage = 5,
        /// 6
        ncclRemoteError = 6,
        /// 7
        ncclInProgress = 7,
        /// 8 (NCCL 2.30+).
        ncclTimeout = 8,
        /// 9: number of result codes (not a result).
        ncclNumResults = 9,
    }
}

impl ncclResult_t {
    /// `Some` for the known result codes 0 ..= 8, `None` otherwise.
    pub const fn from_raw(v: i32) -> Option<Self> {
        if v >= 0 && v < Self::ncclNumResults.0 {
            Some(ncclResult_t(v))
        } else {
            None
        }
    }

    /// `true` for `ncclSuccess`.
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }

    /// The `ncclGetErrorString`-style name, or `"unknown result"`.
    pub const fn name(self) -> &'static str {
        match self.0 {
            0 => "ncclSuccess",
            1 => "ncclUnhandledCudaError",
            2 => "ncclSystemError",
            3 => "ncclInternalError",
            4 => "ncclInvalidArgument",
            5 => "ncclInvalidUsage",
            6 => "ncclRemoteError",
            7 => "ncclInProgress",
            8 => "ncclTimeout",
            _ => "unknown result",
        }
    }
}

c_enum! {
    /// `ncclDataType_t` (`src/nccl.h.in`), 4-byte C enum.
    pub struct ncclDataType_t {
        /// 0
        ncclInt8 = 0,
        /// 1
        ncclUint8 = 1,
        /// 2
        ncclInt32 = 2,
        /// 3
        ncclUint32 = 3,
        /// 4
        ncclInt64 = 4,
        /// 5
        ncclUint64 = 5,
        /// 6
        ncclFloat16 = 6,
        /// 7
        ncclFloat32 = 7,
        /// 8
        ncclFloat64 = 8,
        /// 9
        ncclBfloat16 = 9,
        /// 10
        ncclFloat8e4m3 = 10,
        /// 11
        ncclFloat8e5m2 = 11,
        /// 12: number of types.
        ncclNumTypes = 12,
    }
}

impl ncclDataType_t {
    /// Alias of `ncclInt8`.
    pub const ncclChar: Self = Self::ncclInt8;
    /// Alias of `ncclInt32`.
    pub const ncclInt: Self = Self::ncclInt32;
    /// Alias of `ncclFloat16`.
    pub const ncclHalf: Self = Self::ncclFloat16;
    /// Alias of `ncclFloat32`.
    pub const ncclFloat: Self = Self::ncclFloat32;
    /// Alias of `ncclFloat64`.
    pub const ncclDouble: Self = Self::ncclFloat64;
}

c_enum! {
    /// `ncclRedOp_t` (`src/nccl.h.in`), 4-byte C enum. Values ≥ `ncclNumOps` are
    /// user-created (PreMulSum) ops.
    pub struct ncclRedOp_t {
        /// 0
        ncclSum = 0,
        /// 1
        ncclProd = 1,
        /// 2
        ncclMax = 2,
        /// 3
        ncclMin = 3,
        /// 4
        ncclAvg = 4,
        /// 5: number of built-in ops; first id of user-created ops.
        ncclNumOps = 5,
        /// 0x7fffffff
        ncclMaxRedOp = 0x7fff_ffff,
    }
}

c_enum! {
    /// `ncclFunc_t` (`src/include/nccl_common.h`): tuner `collType`, bit index of
    /// `ncclNetAttr.op`.
    pub struct ncclFunc_t {
        /// 0
        ncclFuncBroadcast = 0,
        /// 1
        ncclFuncReduce = 1,
        /// 2
        ncclFuncAllGather = 2,
        /// 3
        ncclFuncReduceScatter = 3,
        /// 4
        ncclFuncAllReduce = 4,
        /// 5
        ncclFuncSendRecv = 5,
        /// 6
        ncclFuncSend = 6,
        /// 7
        ncclFuncRecv = 7,
        /// 8
        ncclFuncAlltoAll = 8,
        /// 9
        ncclFuncScatter = 9,
        /// 10
        ncclFuncGather = 10,
        /// 11
        ncclFuncAllGatherV = 11,
        /// 12
        ncclFuncPutSignal = 12,
        /// 13
        ncclFuncSignal = 13,
        /// 14
        ncclFuncWaitSignal = 14,
        /// 15: number of functions (2.29+).
        ncclNumFuncs = 15,
    }
}

/// Collectives that go through the tuner / cost model (`ncclFunc_t` 0 ..= 4).
pub const NCCL_NUM_FUNCTIONS: i32 = 5;

/// `ncclDebugLogLevel` (`src/include/nccl_common.h`), passed as `int`.
pub type ncclDebugLogLevel = c_int;
/// `NCCL_LOG_NONE`
pub const NCCL_LOG_NONE: ncclDebugLogLevel = 0;
/// `NCCL_LOG_VERSION`
pub const NCCL_LOG_VERSION: ncclDebugLogLevel = 1;
/// `NCCL_LOG_WARN`
pub const NCCL_LOG_WARN: ncclDebugLogLevel = 2;
/// `NCCL_LOG_INFO`
pub const NCCL_LOG_INFO: ncclDebugLogLevel = 3;
/// `NCCL_LOG_ABORT`
pub const NCCL_LOG_ABORT: ncclDebugLogLevel = 4;
/// `NCCL_LOG_TRACE`
pub const NCCL_LOG_TRACE: ncclDebugLogLevel = 5;

/// `ncclDebugLogSubSys` bit flags (passed as `unsigned long flags`).
pub type ncclDebugLogSubSys = u64;
/// `NCCL_INIT`
pub const NCCL_INIT: u64 = 0x1;
/// `NCCL_COLL`
pub const NCCL_COLL: u64 = 0x2;
/// `NCCL_P2P`
pub const NCCL_P2P: u64 = 0x4;
/// `NCCL_SHM`
pub const NCCL_SHM: u64 = 0x8;
/// `NCCL_NET`
pub const NCCL_NET: u64 = 0x10;
/// `NCCL_GRAPH`
pub const NCCL_GRAPH: u64 = 0x20;
/// `NCCL_TUNING`
pub const NCCL_TUNING: u64 = 0x40;
/// `NCCL_ENV`
pub const NCCL_ENV: u64 = 0x80;
/// `NCCL_ALLOC`
pub const NCCL_ALLOC: u64 = 0x100;
/// `NCCL_CALL`
pub const NCCL_CALL: u64 = 0x200;
/// `NCCL_PROXY`
pub const NCCL_PROXY: u64 = 0x400;
/// `NCCL_NVLS`
pub const NCCL_NVLS: u64 = 0x800;
/// `NCCL_BOOTSTRAP`
pub const NCCL_BOOTSTRAP: u64 = 0x1000;
/// `NCCL_REG`
pub const NCCL_REG: u64 = 0x2000;
/// `NCCL_PROFILE`
pub const NCCL_PROFILE: u64 = 0x4000;
/// `NCCL_RAS`
pub const NCCL_RAS: u64 = 0x8000;
/// `NCCL_DESTROY` (2.30)
pub const NCCL_DESTROY: u64 = 0x10000;
/// `NCCL_ALLOC_HOST` (2.30.7)
pub const NCCL_ALLOC_HOST: u64 = 0x20000;
/// `NCCL_ALL`
pub const NCCL_ALL: u64 = !0;

/// `ncclDebugLogger_t`: `void (*)(ncclDebugLogLevel, unsigned long flags, const char* file,
/// int line, const char* fmt, ...)`. Nullable in C, hence the `Option`
/// (`None` ⇔ NULL); the function type itself is [`crate::log::DebugLogger`].
pub type ncclDebugLogger_t = Option<crate::log::DebugLogger>;

/// `ncclProfilerCallback_t` (v10+ net `init`): `ncclResult_t (*)(void** eHandle, int type,
/// void* pHandle, int64_t pluginId, void* extData)`. `None` ⇔ NULL.
pub type ncclProfilerCallback_t = Option<
    unsafe extern "C" fn(
        eHandle: *mut *mut c_void,
        r#type: c_int,
        pHandle: *mut c_void,
        pluginId: i64,
        extData: *mut c_void,
    ) -> ncclResult_t,
>;

/// `ncclProfilerNetEventStart`: callback `type` starting a net-plugin event.
pub const ncclProfilerNetEventStart: c_int = 0;
/// `ncclProfilerNetEventStop`
pub const ncclProfilerNetEventStop: c_int = 1;
/// `ncclProfilerNetEventUpdate`
pub const ncclProfilerNetEventUpdate: c_int = 2;
/// `ncclProfilerNetEventUpdateAndStop`
pub const ncclProfilerNetEventUpdateAndStop: c_int = 3;

/// `NCCL_ALGO_UNDEF`
pub const NCCL_ALGO_UNDEF: i32 = -1;
/// `NCCL_ALGO_TREE`
pub const NCCL_ALGO_TREE: i32 = 0;
/// `NCCL_ALGO_RING`
pub const NCCL_ALGO_RING: i32 = 1;
/// `NCCL_ALGO_COLLNET_DIRECT`
pub const NCCL_ALGO_COLLNET_DIRECT: i32 = 2;
/// `NCCL_ALGO_COLLNET_CHAIN`
pub const NCCL_ALGO_COLLNET_CHAIN: i32 = 3;
/// `NCCL_ALGO_NVLS`
pub const NCCL_ALGO_NVLS: i32 = 4;
/// `NCCL_ALGO_NVLS_TREE`
pub const NCCL_ALGO_NVLS_TREE: i32 = 5;
/// `NCCL_ALGO_PAT` (since 2.23)
pub const NCCL_ALGO_PAT: i32 = 6;
/// `NCCL_NUM_ALGORITHMS` (7 since 2.23)
pub const NCCL_NUM_ALGORITHMS: usize = 7;
/// `NCCL_PROTO_UNDEF`
pub const NCCL_PROTO_UNDEF: i32 = -1;
/// `NCCL_PROTO_LL`
pub const NCCL_PROTO_LL: i32 = 0;
/// `NCCL_PROTO_LL128`
pub const NCCL_PROTO_LL128: i32 = 1;
/// `NCCL_PROTO_SIMPLE`
pub const NCCL_PROTO_SIMPLE: i32 = 2;
/// `NCCL_NUM_PROTOCOLS`
pub const NCCL_NUM_PROTOCOLS: usize = 3;
/// `NCCL_ALGO_PROTO_IGNORE`: cost-table entry of an impossible or forbidden combination.
pub const NCCL_ALGO_PROTO_IGNORE: f32 = -1.0;

/// `NCCL_UNIQUE_ID_BYTES`
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

abi_struct! {
    /// `ncclUniqueId` (`src/nccl.h.in`): `struct { char internal[128]; }`.
    pub struct ncclUniqueId, size 128 {
        internal: [u8; NCCL_UNIQUE_ID_BYTES] = 0,
    }
}

/// `NCCL_MAGIC` (`src/include/comm.h`): unique-id magic when `NCCL_COMM_ID` is used.
pub const NCCL_MAGIC: u64 = 0x0280_0280_0280_0280;
/// `NCCL_SOCKET_MAGIC` (`src/include/socket.h`): TCP handshake magic.
pub const NCCL_SOCKET_MAGIC: u64 = 0x564a_b9f2_fc4b_9d6c;
/// `MAX_IFS`: most interfaces the socket code collects.
pub const MAX_IFS: usize = 16;
/// `MAX_IF_NAME_SIZE` (Linux).
pub const MAX_IF_NAME_SIZE: usize = 16;
/// `NCCL_STEPS`: most in-flight steps per connection.
pub const NCCL_STEPS: usize = 8;

c_enum! {
    /// `ncclSocketType` (`src/include/socket.h`), sent in the TCP handshake.
    pub struct ncclSocketType {
        /// 0
        ncclSocketTypeUnknown = 0,
        /// 1
        ncclSocketTypeBootstrap = 1,
        /// 2
        ncclSocketTypeProxy = 2,
        /// 3
        ncclSocketTypeNetSocket = 3,
        /// 4
        ncclSocketTypeNetIb = 4,
        /// 5
        ncclSocketTypeRasNetwork = 5,
    }
}

/// `NCCL_VERSION(X,Y,Z)` for NCCL ≥ 2.9: `X*10000 + Y*100 + Z`.
pub const fn nccl_version(x: i32, y: i32, z: i32) -> i32 {
    if x <= 2 && y <= 8 {
        x * 1000 + y * 100 + z
    } else {
        x * 10000 + y * 100 + z
    }
}
