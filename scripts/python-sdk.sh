#!/usr/bin/env bash
# The official Python SDK client (mcp 2.x, legacy and modern modes) against mcp-host and
# against the README's library example (runtime/examples/one_tool.rs), and in its OAuth mode
# (client credentials, discovery from the 401) against mcp-host and the OAuth provider of
# scripts/oidc (installed by scripts/test.sh; the test starts and stops it).
# Usage: scripts/python-sdk.sh [path/to/mcp-host]
# pytest's fixtures start mcp-host themselves and stop it in a `finally`, which does not run if
# pytest is killed (or if the host outlives `proc.wait(timeout=10)`). So pytest runs as the
# leader of its own session, bounded by `timeout`, and the EXIT trap stops that whole session:
# no host outlives this script. The fixture passes no ledger path (and lives in bins/host/), so
# it is given scripts/host-with-ledger.sh as its binary: each host it starts gets a fresh SQLite
# ledger under this script's ledger directory, removed at exit (after the pytest session is
# stopped), and none lands in the working directory.
set -euo pipefail
cd "$(dirname "$0")/.."
HOST_BIN=${1:-target/debug/mcp-host}
venv=target/pyvenv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" 2>/dev/null || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$venv"; }
fi
"$venv/bin/pip" install -q --disable-pip-version-check -r bins/host/tests/python/requirements.txt
. scripts/lib.sh
trap stop_started EXIT
own_tmp_dir ledgers
export MCP_LEDGER_ROOT=$ledgers MCP_HOST_REAL_BIN=$HOST_BIN
export MCP_HOST_BIN=$PWD/scripts/host-with-ledger.sh
# The README's library example (built by `cargo build --all-targets`), served from a temporary
# working directory by its own fixture.
export MCP_EXAMPLE_BIN=${MCP_EXAMPLE_BIN:-$PWD/target/debug/examples/one_tool}
bg_start_group - timeout 600 "$venv/bin/python" -m pytest -q -p no:cacheprovider bins/host/tests/python
pytest_sid=$BG_PID
status=0
wait "$pytest_sid" || status=$?
in_session "$pytest_sid"
if [ "${#FOUND[@]}" -gt 0 ]; then
  echo "python-sdk: FAILED: pytest left ${#FOUND[@]} process(es) behind (stopped on exit):" >&2
  for p in "${FOUND[@]}"; do printf 'python-sdk:   pid %s: ' "$p" >&2; cmdline "$p" >&2; done
  status=1
fi
exit "$status"
