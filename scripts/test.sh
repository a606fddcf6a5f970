#!/usr/bin/env bash
# The whole test suite, from a clean clone: sans-IO check, cargo tests (unit, property,
# integration), fuzz targets build, the official conformance suite (0.1.16 and
# 0.2.0-alpha.12) against a freshly started mcp-host, the official Python SDK client, CORS in
# headless Chromium and by curl (scripts/browser.sh), our client against the official
# TypeScript SDK server and mcp-host, a short soak (scripts/soak.sh), and the release build's
# instructions per request against bench/baseline.json (bench/instructions.py, valgrind).
# Installs what it needs (Node 22 and the OAuth provider oidc-provider via npm, Python
# packages via pip, Chromium, redis-server and openssl via apt); starts and stops its own
# mcp-host, redis-server and OAuth provider processes.
#
# Every process of the run inherits MCP_TEST_RUN (a random marker). At the end, and on an early
# exit, no process carrying it may be alive (after 2 s of grace for hosts that exit when their
# parent does): leftovers are listed, killed, and fail the suite. Every mcp-host of the run keeps
# its SQLite ledger in a temporary directory: a ledger file (mcp-host.db*) that the run made or
# changed in the repository tree (outside target/) fails the suite too.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
log=$(mktemp -d)
touch "$log/run-start"   # ledger_leftovers: files not newer than this predate the run
. scripts/lib.sh
MCP_TEST_RUN=$(od -An -N8 -tx8 /dev/urandom | tr -d ' \n')
export MCP_TEST_RUN
run_mark="MCP_TEST_RUN=$MCP_TEST_RUN"

# leftovers: true if no process of this run but this shell is alive within 2 s; else lists
# them, kills them and fails. The scan uses bash builtins only, so it never sees itself.
leftovers() {
  local i p
  for ((i = 0; i < 20; i++)); do
    with_env "$run_mark"
    [ "${#FOUND[@]}" -eq 0 ] && return 0
    sleep 0.1
  done
  echo "test.sh: FAILED: ${#FOUND[@]} process(es) started by this run outlived it (now killed):" >&2
  for p in "${FOUND[@]}"; do
    printf 'test.sh:   pid %s: ' "$p" >&2
    cmdline "$p" >&2
  done
  KW_WATCH=("${FOUND[@]}")
  kill_wait "${FOUND[@]}"
  return 1
}
# ledger_leftovers: true if the run made or changed no ledger file (mcp-host.db, -wal, -shm,
# .key, and the admin token file mcp-host.admin-token beside them) in the repository tree outside target/ directories; else lists them and fails. (A
# ledger that predates the run and that it left alone, say of `cargo run -p mcp-host` here, is
# not the run's.) The files are kept for a look at who wrote them.
ledger_leftovers() {
  local found=() f
  mapfile -t found < <(find . \( -name .git -o -name target \) -prune -o \( -name 'mcp-host.db*' -o -name 'mcp-host.admin-token' \) -newer "$log/run-start" -print)
  [ "${#found[@]}" -eq 0 ] && return 0
  echo "test.sh: FAILED: the run left ${#found[@]} ledger file(s) in the repository (every host must get a temporary ledger: --ledger-path, new_ledger in scripts/lib.sh, mcp_devtools::TempDir):" >&2
  for f in "${found[@]}"; do echo "test.sh:   ${f#./}" >&2; done
  return 1
}
checked=0
on_exit() {
  local rc=$?
  if [ "$checked" -eq 0 ]; then
    echo "test.sh: stopped part-way (exit status $rc)" >&2
    leftovers || true
    ledger_leftovers || true
  fi
}
trap on_exit EXIT

# redis-server for the Redis ledger's tests (each test starts its own on a free loopback port,
# its files in a temporary directory, and stops it): Debian's package, its service not started.
if ! command -v redis-server >/dev/null; then
  no_service=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    no_service=1
  fi
  installed=0
  { apt-get install -y -qq --no-install-recommends redis-server >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server >/dev/null; }; } &&
    installed=1
  # Removed whether or not the install worked (services stay startable on this machine).
  [ -n "$no_service" ] && rm -f /usr/sbin/policy-rc.d
  [ "$installed" -eq 1 ] || { echo "test.sh: FAILED: cannot install redis-server" >&2; exit 1; }
  # A distribution whose package started the service anyway: stop it (the tests use their own).
  if pgrep -x redis-server >/dev/null; then service redis-server stop >/dev/null 2>&1 || true; fi
fi
redis-server --version
# openssl for the certificates of the rediss:// (TLS) tests.
if ! command -v openssl >/dev/null; then
  apt-get install -y -qq --no-install-recommends openssl >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends openssl >/dev/null; } ||
    { echo "test.sh: FAILED: cannot install openssl" >&2; exit 1; }
fi

# The OAuth tests' authorization server (oidc-provider) and its Node 22 runtime, from the npm
# registry (the tests start and stop it themselves: mcp_devtools::OidcProvider).
if ! command -v npm >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
(cd scripts/oidc && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
scripts/oidc/node_modules/.bin/node --version >/dev/null

scripts/check-sans-io.sh
# No import cycle between files of the runtime, the host or mcp-load; proto names no shell.
python3 scripts/check-layers.py --self-test
python3 scripts/check-layers.py
# Every file or folder the docs name exists.
python3 scripts/check-doc-paths.py --self-test
python3 scripts/check-doc-paths.py
cargo fmt --all --check
cargo fmt --manifest-path runtime/fuzz/Cargo.toml --check
# Both lock files must be current before anything long runs (a stale one fails in seconds).
cargo fetch --locked
cargo fetch --locked --manifest-path runtime/fuzz/Cargo.toml
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo build --locked --workspace --all-targets
# The runtime's features: a server-only build compiles no awc; one without `sqlite` still builds.
if cargo tree --locked -p mcp-runtime -e normal --prefix none | grep -q '^awc '; then
  echo "test.sh: FAILED: mcp-runtime with its default features depends on awc" >&2
  exit 1
fi
cargo check --locked -p mcp-runtime --no-default-features --lib
cargo check --locked -p mcp-runtime --no-default-features --features client --lib
cargo test --locked --workspace 2>&1 | tee "$log/cargo.txt"
cargo build --locked --manifest-path runtime/fuzz/Cargo.toml --target-dir target/fuzz
echo "fuzz targets build: event_id jsonrpc replay_ops ledger_codec"
# Instructions per request of the release build (callgrind counts the same on every run of one
# binary, whatever else the machine does) against bench/baseline.json: a legacy SSE echo, a
# 2026-07-28 JSON echo and initialize; one grown more than 10 % fails (docs/benchmarks.md).
if ! command -v valgrind >/dev/null; then
  apt-get install -y -qq --no-install-recommends valgrind >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends valgrind >/dev/null; } ||
    { echo "test.sh: FAILED: cannot install valgrind" >&2; exit 1; }
fi
cargo build --locked --release -p mcp-host
python3 bench/instructions.py --self-test
python3 bench/instructions.py --check bench/baseline.json new=target/release/mcp-host 2>&1 | tee "$log/instructions.txt"
scripts/conformance.sh target/debug/mcp-host 2>&1 | tee "$log/conformance.txt"
scripts/python-sdk.sh target/debug/mcp-host 2>&1 | tee "$log/python.txt"
scripts/browser.sh target/debug/mcp-host 2>&1 | tee "$log/browser.txt"
scripts/interop.sh target/debug/mcp-host target/debug/mcp-load 2>&1 | tee "$log/interop.txt"
scripts/soak.sh target/debug/mcp-host target/debug/mcp-load 2>&1 | tee "$log/soak.txt"

cargo_passed=$(awk '/^test result:/ {s += $4} END {print s+0}' "$log/cargo.txt")
conf_passed=$(awk '/^Total:/ {s += $2} END {print s+0}' "$log/conformance.txt")
py_passed=$(grep -oE '[0-9]+ passed' "$log/python.txt" | tail -1 | awk '{print $1+0}')
browser_passed=$(awk '/^browser: [0-9]+ passed/ {print $2}' "$log/browser.txt")
interop_passed=$(awk '/^interop: [0-9]+ passed/ {print $2}' "$log/interop.txt")
soak_passed=$(awk '/^soak: [0-9]+ passed/ {print $2}' "$log/soak.txt")
instr_passed=$(grep -c '^ok ' "$log/instructions.txt" || true)
echo "cargo tests: $cargo_passed passed; instruction budgets: ${instr_passed:-0} passed; conformance checks: $conf_passed passed; python sdk tests: ${py_passed:-0} passed; browser checks: ${browser_passed:-0} passed; interop probes: ${interop_passed:-0} passed; soak: ${soak_passed:-0} passed"
total=$((cargo_passed + ${instr_passed:-0} + conf_passed + ${py_passed:-0} + ${browser_passed:-0} + ${interop_passed:-0} + ${soak_passed:-0}))
checked=1
left=()
leftovers || left+=("processes left behind")
ledger_leftovers || left+=("ledger files left in the repository")
if [ "${#left[@]}" -eq 0 ]; then
  echo "Summary: $total passed, 0 failed"
else
  joined=$(printf '%s; ' "${left[@]}")
  echo "Summary: $total passed, ${#left[@]} failed (${joined%; }, listed above)"
  exit 1
fi
