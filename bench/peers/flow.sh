#!/usr/bin/env bash
# flow.sh BIN [REPS] [THREADS]: a legacy client's whole life per session (lua/flow.lua:
# initialize, notifications/initialized, FLOW_CALLS echo calls, DELETE), THREADS connections
# (default 16) for 5 s, host pinned to CPU 1 and wrk to CPU 0 as run-all.sh pins them, a fresh
# SQLite ledger each rep (removed after it); prints sessions/s and the host's CPU per session.
# Needs the built harness in /tmp/pp (see docs/benchmarks.md); run from the project root.
set -u
BIN=$1; REPS=${2:-1}; T=${3:-16}; PORT=21398; PID=
WORK=/tmp/flow-work-$PORT
# The host is found by its port too: one started but not yet recorded in PID is stopped as well.
stop() {
  [ -n "$PID" ] && kill "$PID" 2>/dev/null
  for _ in $(seq 300); do { [ -z "$PID" ] || [ ! -e "/proc/$PID" ]; } && break; sleep 0.1; done
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  pkill -9 -f -- "--port $PORT " 2>/dev/null
  PID=; rm -rf "$WORK"
}
trap stop EXIT
HZ=$(getconf CLK_TCK)
for r in $(seq "$REPS"); do
  PID=$(OURS_BIN=$BIN OURS_WORKDIR=$WORK PEER_CPUS=1 OURS_ARGS="--config $PWD/bench/peers/ours-bench.toml" /tmp/pp/start-ours.sh $PORT) || exit 1
  up=
  for _ in $(seq 100); do curl -s -m 1 -o /dev/null http://127.0.0.1:$PORT/mcp && { up=1; break; }; sleep 0.1; done
  [ -n "$up" ] || { echo "flow.sh: the host did not come up on port $PORT" >&2; exit 1; }
  t0=$(awk '{print $14+$15}' /proc/$PID/stat)
  s0=$(date +%s.%N)
  out=$(timeout 60 taskset -c 0 wrk -t"$T" -c"$T" -d5s --timeout 10s -s "$PWD/bench/peers/lua/flow.lua" http://127.0.0.1:$PORT/mcp)
  s1=$(date +%s.%N)
  t1=$(awk '{print $14+$15}' /proc/$PID/stat)
  line=$(echo "$out" | grep '^FLOW') || { echo "flow.sh: wrk printed no FLOW line: $out" >&2; exit 1; }
  sessions=$(echo "$line" | sed 's/.*sessions=\([0-9]*\).*/\1/')
  [ "$sessions" -gt 0 ] || { echo "flow.sh: no session completed: $line" >&2; exit 1; }
  cpu_us=$(python3 -c "print(round(($t1 - $t0) / $HZ * 1e6 / $sessions))")
  echo "$line wall_s=$(python3 -c "print(round($s1 - $s0, 1))") cpu_us_per_session=$cpu_us"
  stop
done
