#!/usr/bin/env bash
# Builds every crate (the plugin .so files the tests dlopen included) and runs all tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --all-targets
cargo test --workspace -- --test-threads=2
