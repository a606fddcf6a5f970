#!/usr/bin/env bash
# start-ours.sh PORT -> the project's mcp-host (OURS_BIN, default ./target/release/mcp-host: run from the project root)
# on 127.0.0.1:PORT/mcp with OURS_WORKERS (1) HTTP workers, prints PID. Extra flags: OURS_ARGS.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PEER=ours; PORT="${1:?usage: start-ours.sh PORT}"
# Default: the release build of the project checkout that stands beside shared/ (../main or the cwd).
BIN="${OURS_BIN:-$PWD/target/release/mcp-host}"
[ -x "$BIN" ] || { echo "start-ours: $BIN missing (cargo build --release -p mcp-host)" >&2; exit 1; }
# A fresh working directory per start: the default SQLite ledger (mcp-host.db and its key
# file) is created there, so every rep starts on an empty ledger and the project root stays clean.
WORK="${OURS_WORKDIR:-/tmp/peers-ours-$PORT}"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
# shellcheck disable=SC2206
CMD=("$BIN" --port "$PORT" --workers "${OURS_WORKERS:-1}" ${OURS_ARGS:-})
source "$HERE/start-common.inc"
