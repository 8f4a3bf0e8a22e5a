//! Test tuner plugins written in C, independent of ferroccl's Rust ABI definitions.
//!
//! `build.rs` compiles `csrc/tuner.c` (hand-written `ncclTuner_v2_t` … `ncclTuner_v6_t`
//! following the layout tables of `docs/reference/nccl-plugin-abi.md` §3.1) once
//! per API version and fault into shared libraries in the cargo profile directory
//! (`target/<profile>/`), where the host tests and the conformance suite find them:
//!
//! | file | exports | behaviour |
//! | --- | --- | --- |
//! | `libnccl-tuner-cv2.so` … `libnccl-tuner-cv6.so` | `ncclTunerPlugin_vN` only, name `CTunerVN` | working tuner |
//! | `libnccl-tuner-ccrash.so` | v6 | `getCollInfo` dereferences NULL |
//! | `libnccl-tuner-coob.so` | v6 | `getCollInfo` writes one float before and one after the 7×3 table |
//! | `libnccl-tuner-cerror.so` | v6 | `getCollInfo` returns `ncclInternalError` |
//! | `libnccl-tuner-cinitfail.so` | v6 | `init` returns `ncclSystemError` |
//!
//! The working tuners are driven by the environment (read in `init`):
//!
//! * `CTUNER_LOG=<file>`: append one line per call (`init`, `coll`, `chunk`,
//!   `finalize`) with the arguments received, so tests can check what the host passed;
//! * `CTUNER_FORCE=<algo>,<proto>[,<nChannels>]`: v3+ set that table entry to 0.0
//!   (unless it is -1) and `*nChannels`; v2 return the pair;
//! * `CTUNER_OVERWRITE=1`: force the entry even when it is -1 (an impossible choice);
//! * `CTUNER_CHUNK=<bytes>`: v6 `getChunkSize` returns this chunk size;
//! * `CTUNER_RING_BASE=<us>`: v5+ `init` writes `baseLatencies[Ring][*]`.
//!
//! The crate itself has no Rust code.
