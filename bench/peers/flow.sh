#!/usr/bin/env bash
# flow.sh BIN [REPS] [THREADS]: a legacy client's whole life per session (lua/flow.lua:
# initialize, notifications/initialized, FLOW_CALLS echo calls, DELETE), THREADS connections
# (default 16) for 5 s, host pinned to CPU 1 and wrk to CPU 0 as run-all.sh pins them, a fresh
# SQLite ledger each rep; prints sessions/s and the host's CPU per session.
# Needs the built harness in /tmp/pp (see docs/benchmarks.md); run from the project root.
set -u
BIN=$1; REPS=${2:-1}; T=${3:-16}; PORT=21398; PID=
trap '[ -n "$PID" ] && kill -9 "$PID" 2>/dev/null' EXIT
for r in $(seq "$REPS"); do
  PID=$(OURS_BIN=$BIN PEER_CPUS=1 OURS_ARGS="--config $PWD/bench/peers/ours-bench.toml" /tmp/pp/start-ours.sh $PORT) || exit 1
  for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$PORT/mcp && break; sleep 0.1; done
  t0=$(awk '{print $14+$15}' /proc/$PID/stat)
  out=$(taskset -c 0 wrk -t"$T" -c"$T" -d5s --timeout 10s -s "$PWD/bench/peers/lua/flow.lua" http://127.0.0.1:$PORT/mcp)
  t1=$(awk '{print $14+$15}' /proc/$PID/stat)
  line=$(echo "$out" | grep '^FLOW')
  rate=$(echo "$line" | sed 's/.*sessions\/s=\([0-9]*\).*/\1/')
  echo "$line cpu_us_per_session=$(( (t1 - t0) * 10000 / (rate * 5 + 1) ))"
  kill "$PID"; for i in $(seq 300); do [ -e /proc/$PID ] || break; sleep 0.1; done; kill -9 "$PID" 2>/dev/null; PID=
done
