//! Test env plugins written in C, independent of ferroccl's Rust ABI definitions.
//!
//! `build.rs` compiles `csrc/env.c` (hand-written `ncclEnv_v1_t` / `ncclEnv_v2_t`
//! following the layout tables of `docs/reference/nccl-plugin-abi.md` §3.3) once
//! per version and fault into shared libraries in the cargo profile directory
//! (`target/<profile>/`), where the host tests and the conformance suite's `--env`
//! section find them:
//!
//! | file | exports | behaviour | caught by |
//! | --- | --- | --- | --- |
//! | `libnccl-env-cv1.so` | `ncclEnvPlugin_v1` only, name `CEnvV1` | `getenv` pass-through | (conformant) |
//! | `libnccl-env-cv2.so` | `ncclEnvPlugin_v2` only, name `CEnvV2` | `getenv` pass-through | (conformant) |
//! | `libnccl-env-zinitfail.so` | v2 | `init` returns `ncclSystemError` | `env.init` |
//! | `libnccl-env-znoname.so` | v2 | `name` is NULL | `env.name` |
//! | `libnccl-env-zdangling.so` | v2 | `getEnv` returns a per-thread buffer every call overwrites | `env.get_env.stable` |
//! | `libnccl-env-zemptyunset.so` | v2 | `getEnv` returns `""` for unset names instead of NULL | `env.get_env.unset` |
//! | `libnccl-env-zthreadaffine.so` | v2 | `getEnv` answers NULL on any thread but `init`'s | `env.get_env.threads` |
//! | `libnccl-env-zfinalizefail.so` | v2 | `finalize` returns `ncclInternalError` | `env.finalize` |
//!
//! The crate itself has no Rust code.
