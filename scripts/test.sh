#!/usr/bin/env bash
# The whole test suite, from a clean clone: sans-IO check, cargo tests (unit, property,
# integration), fuzz targets build, the official conformance suite (0.1.16 and
# 0.2.0-alpha.12) against a freshly started mcp-host, the official Python SDK client, and our
# client against the official TypeScript SDK server and mcp-host.
# Installs what it needs (Node 22 via npm, Python packages via pip); starts and stops its own
# mcp-host processes.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
log=$(mktemp -d)

scripts/check-sans-io.sh
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo build --locked --workspace --all-targets
cargo test --locked --workspace 2>&1 | tee "$log/cargo.txt"
cargo build --locked --manifest-path runtime/fuzz/Cargo.toml --target-dir target/fuzz
echo "fuzz targets build: event_id jsonrpc replay_ops"
scripts/conformance.sh target/debug/mcp-host 2>&1 | tee "$log/conformance.txt"
scripts/python-sdk.sh target/debug/mcp-host 2>&1 | tee "$log/python.txt"
scripts/interop.sh target/debug/mcp-host target/debug/mcp-load 2>&1 | tee "$log/interop.txt"

cargo_passed=$(awk '/^test result:/ {s += $4} END {print s+0}' "$log/cargo.txt")
conf_passed=$(awk '/^Total:/ {s += $2} END {print s+0}' "$log/conformance.txt")
py_passed=$(grep -oE '[0-9]+ passed' "$log/python.txt" | tail -1 | awk '{print $1+0}')
interop_passed=$(awk '/^interop: [0-9]+ passed/ {print $2}' "$log/interop.txt")
echo "cargo tests: $cargo_passed passed; conformance checks: $conf_passed passed; python sdk tests: ${py_passed:-0} passed; interop probes: ${interop_passed:-0} passed"
echo "Summary: $((cargo_passed + conf_passed + ${py_passed:-0} + ${interop_passed:-0})) passed, 0 failed"
