#!/usr/bin/env bash
# The short soak: `mcp-load soak` starts its own mcp-host (short TTLs, small replay window),
# runs 8 s of abusive and unlucky traffic (session churn, abandoned and replaced streams,
# unanswered elicitations, payloads at and over every limit, resumes into gaps, slow bodies,
# stalled readers, a caller hogging the 2026-07-28 places, calls pinning large arguments, a
# caller flooding keyed write calls into its receipt bound), then
# waits in silence; its gates: sessions, streams and request memory back to 0, RSS back within
# 2x idle, receipts within their total, no refusal but the provoked ones. mcp-load stops its host on every path (and the host exits if mcp-load
# dies), and gives it a fresh SQLite ledger in a temporary directory that it removes (under this
# script's TMPDIR, removed at exit). The 10-minute run is in docs/testing.md.
# Usage: scripts/soak.sh [path/to/mcp-host] [path/to/mcp-load]
set -euo pipefail
cd "$(dirname "$0")/.."
HOST_BIN=${1:-target/debug/mcp-host}
LOAD_BIN=${2:-target/debug/mcp-load}
log=$(mktemp -d)
. scripts/lib.sh
trap stop_started EXIT
own_dir "$log/tmp"
export TMPDIR=$log/tmp
if timeout 300 "$LOAD_BIN" soak --spawn-host "$HOST_BIN" --clients 8 --seconds 8 --no-progress \
    --json-out "$log/soak.json" --svg-out "$log/soak.svg" > "$log/soak.txt" 2>&1; then
  grep -E '^soak:|^RSS MiB' "$log/soak.txt"
  echo "soak: 1 passed, 0 failed"
else
  cat "$log/soak.txt"
  echo "soak: 0 passed, 1 failed"
  exit 1
fi
