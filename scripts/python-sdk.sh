#!/usr/bin/env bash
# The official Python SDK client (mcp 2.x, legacy mode) against mcp-host.
# Usage: scripts/python-sdk.sh [path/to/mcp-host]
set -euo pipefail
cd "$(dirname "$0")/.."
HOST_BIN=${1:-target/debug/mcp-host}
venv=target/pyvenv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" 2>/dev/null || { apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$venv"; }
fi
"$venv/bin/pip" install -q --disable-pip-version-check -r bins/host/tests/python/requirements.txt
MCP_HOST_BIN="$HOST_BIN" "$venv/bin/python" -m pytest -q -p no:cacheprovider bins/host/tests/python
