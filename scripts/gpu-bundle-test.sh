#!/usr/bin/env bash
# Builds the GPU bundle (`cargo xtask gpu-bundle`, dev profile: it reuses the
# test build) and runs its run.sh here. Without a GPU every check must say so
# in one line and run.sh must exit 0; with one, run.sh's own verdict stands.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=target/gpu-bundle-test
cargo xtask gpu-bundle "$DIR" --profile dev
out=$("$DIR/run.sh")
echo "$out"
if echo "$out" | grep -q '^cuda driver: none'; then
    n=$(echo "$out" | grep -c '^SKIP .* 0s (no GPU: ')
    total=$(echo "$out" | grep -cE '^(PASS|FAIL|SKIP) ')
    [ "$n" -eq "$total" ] && [ "$n" -ge 8 ] || { echo "gpu-bundle-test: expected one 'no GPU' line per check: $n of $total" >&2; exit 1; }
fi
echo "gpu-bundle-test: OK"
