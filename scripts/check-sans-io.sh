#!/usr/bin/env bash
# runtime/src/proto, runtime/src/client and the ledger's records, codec and memory store must
# stay sans-IO: no async runtime, no actix, no clock reads.
set -euo pipefail
cd "$(dirname "$0")/.."
hits=$(grep -rnE '^\s*(use|extern crate)\s+(::)?(tokio|actix|actix_web|actix_rt|futures)\b|\b(tokio|actix|actix_web|actix_rt)::|Instant::now|SystemTime::now' runtime/src/proto runtime/src/client runtime/src/ledger/codec.rs runtime/src/ledger/mod.rs runtime/src/ledger/memory.rs || true)
if [ -n "$hits" ]; then
  echo "check-sans-io: runtime/src/proto and runtime/src/client must not do I/O or read a clock:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "check-sans-io: runtime/src/proto and runtime/src/client are sans-IO"
