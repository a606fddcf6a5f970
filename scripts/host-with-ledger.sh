#!/usr/bin/env bash
# mcp-host on a fresh SQLite ledger of its own, for a test driver that starts hosts itself and
# passes no ledger path (the pytest fixture in bins/host/tests/python): point the driver's
# host binary at this script. Each start makes a new directory under MCP_LEDGER_ROOT (the
# calling script owns it and removes it at exit) and execs MCP_HOST_REAL_BIN with
# `--ledger-path DIR/mcp-host.db` after the given arguments. exec: the driver's pid is the
# host's, so its signals and its stdout pipe reach the host directly. Arguments that already
# choose a ledger (`--ledger`, `--ledger-path`) are passed through unchanged.
set -euo pipefail
: "${MCP_LEDGER_ROOT:?MCP_LEDGER_ROOT: the directory for the ledgers}"
: "${MCP_HOST_REAL_BIN:?MCP_HOST_REAL_BIN: the mcp-host binary}"
for a in "$@"; do
  case $a in
    --ledger | --ledger=* | --ledger-path | --ledger-path=*) exec "$MCP_HOST_REAL_BIN" "$@" ;;
  esac
done
dir=$(mktemp -d "$MCP_LEDGER_ROOT/host.XXXXXX")
admin=(--admin-port 0)
for a in "$@"; do
  case $a in --admin-port | --admin-port=* | --no-admin) admin=() ;; esac
done
exec "$MCP_HOST_REAL_BIN" "$@" --ledger-path "$dir/mcp-host.db" "${admin[@]}"
