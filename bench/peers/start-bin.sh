#!/usr/bin/env bash
# start-bin.sh PORT -> a peer binary that takes its port as its one argument (PEER_BIN, e.g. the
# profile-guided actix-peer that pgo-actix.py builds) on 127.0.0.1:PORT/mcp, prints its PID.
# PEER_NAME names its log (default "bin").
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PEER="${PEER_NAME:-bin}"; PORT="${1:?usage: PEER_BIN=PATH start-bin.sh PORT}"
BIN="${PEER_BIN:?start-bin: set PEER_BIN}"
[ -x "$BIN" ] || { echo "start-bin: $BIN missing" >&2; exit 1; }
CMD=("$BIN" "$PORT")
source "$HERE/start-common.inc"
