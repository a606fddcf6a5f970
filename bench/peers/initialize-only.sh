#!/usr/bin/env bash
# initialize-only.sh BIN [REPS]: the side-by-side run's `b` row (initialize, 5 s, c=32) for one
# build of ours, pinned as run-all.sh pins it, each rep on a fresh ledger; after each rep the
# host's write syscalls and bytes (/proc/PID/io). EXTRA="--set k=v ..." adds host flags.
# Needs the built harness in /tmp/pp (see docs/benchmarks.md); run from the project root.
set -u
BIN=$1; REPS=${2:-2}
for r in $(seq $REPS); do
  PID=$(OURS_BIN=$BIN PEER_CPUS=1 OURS_WORKDIR=/tmp/initexp-work OURS_ARGS="--config $PWD/bench/peers/ours-bench.toml ${EXTRA:-}" /tmp/pp/start-ours.sh 21399) || exit 1
  trap 'kill -9 $PID 2>/dev/null; rm -rf /tmp/initexp-work' EXIT
  for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:21399/mcp && break; sleep 0.1; done
  ONLY=b DURATION=5 WARMUP=1 BENCH_CPUS=0 /tmp/pp/bench.sh http://127.0.0.1:21399/mcp $PID 2>&1 | grep -E '^b|rror'
  grep -E "wchar|syscw" /proc/$PID/io | tr "\n" " "; echo
  kill $PID; for i in $(seq 300); do [ -e /proc/$PID ] || break; sleep 0.1; done; kill -9 $PID 2>/dev/null
  # STATS=1: sessions recorded, their records' mean size, the file's pages.
  if [ -n "${STATS:-}" ]; then
    sqlite3 /tmp/initexp-work/mcp-host.db "SELECT count(*), avg(length(value)) FROM kv WHERE key LIKE 's/%'; PRAGMA page_count;"
  fi
done
