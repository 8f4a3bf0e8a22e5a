#!/usr/bin/env bash
# Runs every test: first checks the system packages the build and the tests need
# (scripts/system-packages.txt, groups cc ib test) and installs the missing ones
# when it may (Debian/Ubuntu as root or with password-less sudo) or stops at once
# naming them and the apt-get line; then builds every crate (the plugin .so files
# the tests dlopen included) and runs `cargo test --workspace`.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
    echo "scripts/test.sh: cargo not found: install a Rust toolchain (https://rustup.rs), then run this again" >&2
    exit 1
fi
SYSTEM_DEPS_CALLER=scripts/test.sh scripts/system-deps.sh ensure cc ib test
cargo build --workspace --all-targets
# Doc comments link only to items that exist (rustdoc); the documents' other
# names are checked by the test xtask/tests/doc_check.rs (`cargo xtask doc-check`).
RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" cargo doc --no-deps --workspace --document-private-items -q
cargo test --workspace -- --test-threads=2
# The GPU bundle builds, and its run.sh says "no GPU" per check here (exit 0).
scripts/gpu-bundle-test.sh
