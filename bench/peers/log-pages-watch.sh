#!/usr/bin/env bash
# log-pages-watch.sh BIN: a 6 s initialize storm (c=32, host pinned to CPU 1, wrk to CPU 0) on a
# fresh SQLite ledger, printing the bench line and mcp_ledger_log_pages sampled every 0.2 s from
# the host's /metrics (admin port 8081, its token file): how the write-ahead log grows and
# restarts under steady writes. Needs the built harness in /tmp/pp; run from the project root.
set -u
BIN=$1
WORK=/tmp/log-pages-watch
PID=$(OURS_BIN=$BIN PEER_CPUS=1 OURS_WORKDIR=$WORK OURS_ARGS="--config $PWD/bench/peers/ours-bench.toml ${EXTRA:-}" /tmp/pp/start-ours.sh 21398) || exit 1
trap 'kill -9 $PID 2>/dev/null; rm -rf $WORK' EXIT
for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:21398/mcp && break; sleep 0.1; done
(for _ in $(seq 30); do
   sleep 0.2
   curl -s -H "Authorization: Bearer $(head -1 $WORK/mcp-host.admin-token)" http://127.0.0.1:8081/metrics |
     awk '/^mcp_ledger_log_pages /{print $2}'
 done | tr '\n' ' '; echo) &
ONLY=b DURATION=6 WARMUP=0 BENCH_CPUS=0 /tmp/pp/bench.sh http://127.0.0.1:21398/mcp "$PID" 2>&1 | grep -E '^b'
wait
kill "$PID"; for _ in $(seq 300); do [ -e /proc/$PID ] || break; sleep 0.1; done
