#!/usr/bin/env bash
# stop-time.sh BIN [REPS]: how long a host takes to stop with many idle sessions. Each rep, on a
# fresh ledger: the side-by-side run's `b` row (initialize, 5 s, c=32: some 140,000 sessions,
# each kept as data until a first request that never comes), then SIGTERM, timed to the
# process's exit, with the log's split: the drain (the sessions stopped, their writes queued)
# and the ledger's commit of those writes up to the clean-stop mark. FLOW=1: the sessions are
# made as a client makes them (initialize, then notifications/initialized; lua/flow.lua with
# FLOW_CALLS=0 FLOW_DELETE=0, 32 connections) instead. EXTRA="--set k=v ..." adds host flags.
# Needs the built harness in /tmp/pp (see docs/benchmarks.md); run from the project root.
# Stops what it started on every exit path.
set -u
BIN=$1; REPS=${2:-2}; PORT=21398; PID=
WORK=/tmp/stoptime-work-$PORT
LOG=/tmp/stoptime-host-$PORT.log
# The host is found by its port too: one started but not yet recorded in PID is stopped as well.
stop() {
  [ -n "$PID" ] && [ -e "/proc/$PID" ] && kill -9 "$PID" 2>/dev/null
  pkill -9 -f -- "--port $PORT " 2>/dev/null
  PID=; rm -rf "$WORK" "$LOG"
}
trap stop EXIT
# Exited: gone, or a zombie (start-ours.sh leaves it orphaned, and the reaper of orphans in a
# container may take a second or more to collect it).
exited() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
  [ -z "$st" ] || [ "$st" = Z ]
}
for r in $(seq "$REPS"); do
  PID=$(PEER_LOG=$LOG OURS_BIN=$BIN PEER_CPUS=1 OURS_WORKDIR=$WORK OURS_ARGS="--config $PWD/bench/peers/ours-bench.toml ${EXTRA:-}" /tmp/pp/start-ours.sh $PORT) || exit 1
  up=
  for _ in $(seq 100); do curl -s -m 1 -o /dev/null http://127.0.0.1:$PORT/mcp && { up=1; break; }; sleep 0.1; done
  [ -n "$up" ] || { echo "stop-time.sh: the host did not come up on port $PORT" >&2; exit 1; }
  if [ -n "${FLOW:-}" ]; then
    load=$(FLOW_CALLS=0 FLOW_DELETE=0 timeout 60 taskset -c 0 wrk -t32 -c32 -d5s --timeout 10s -s "$PWD/bench/peers/lua/flow.lua" http://127.0.0.1:$PORT/mcp | grep '^FLOW' | cut -d' ' -f1-3)
  else
    load=$(ONLY=b DURATION=5 WARMUP=1 BENCH_CPUS=0 /tmp/pp/bench.sh http://127.0.0.1:$PORT/mcp "$PID" 2>&1 | grep -E '^b ' | cut -d' ' -f1-6)
  fi
  [ -n "$load" ] || { echo "stop-time.sh: the load printed no result line" >&2; exit 1; }
  echo "$load"
  sleep 1
  T0=$(date +%s.%N)
  kill "$PID"
  for _ in $(seq 1200); do exited "$PID" && break; sleep 0.025; done
  T1=$(date +%s.%N)
  KILLED=
  exited "$PID" || KILLED=1
  python3 - "$T0" "$T1" "$LOG" "$KILLED" <<'EOF'
import re, sys
from datetime import datetime
t0, t1, log, killed = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
at = {}
sessions = "?"
for line in open(log):
    # The log's times are UTC ("...Z").
    stamp = line[:27].replace("Z", "+00:00")
    for key, pat in (("stopping", "mcp_host: stopping"), ("drained", "drained sessions="),
                     ("marked", "stopped cleanly")):
        if pat in line and key not in at:
            at[key] = datetime.fromisoformat(stamp).timestamp()
    m = re.search(r"drained sessions=(\d+)", line)
    if m:
        sessions = m.group(1)
split = ""
if {"stopping", "drained", "marked"} <= at.keys():
    split = (f"; SIGTERM to the stopping line {at['stopping'] - t0:.2f} s, drain {at['drained'] - at['stopping']:.2f} s, "
             f"commit to the clean mark {at['marked'] - at['drained']:.2f} s, then exit {t1 - at['marked']:.2f} s")
if killed:
    print(f"stop: still running {t1 - t0:.0f} s after SIGTERM: killed, {sessions} sessions{split}")
else:
    print(f"stop: {t1 - t0:.2f} s from SIGTERM to exit, {sessions} sessions{split}"
          + ("" if "marked" in at else "; NOT marked stopped cleanly"))
EOF
  stop
done
