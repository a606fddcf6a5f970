#!/usr/bin/env bash
# stop-time.sh BIN [REPS]: how long a host takes to stop with many idle sessions. Each rep, on a
# fresh ledger: the side-by-side run's `b` row (initialize, 5 s, c=32: some 150,000 sessions,
# each kept as data until a first request that never comes), then SIGTERM, timed to the
# process's exit, with the log's split: the drain (the sessions stopped, their writes queued)
# and the ledger's commit of those writes up to the clean-stop mark. FLOW=1: the sessions are
# made as a client makes them (initialize, then notifications/initialized; lua/flow.lua with
# FLOW_CALLS=0 FLOW_DELETE=0, 32 connections) instead. EXTRA="--set k=v ..." adds host flags. Needs the built harness in /tmp/pp (see docs/benchmarks.md); run from the project
# root. Stops what it started on every exit path.
set -u
BIN=$1; REPS=${2:-2}
WORK=/tmp/stoptime-work
LOG=/tmp/stoptime-host.log
for r in $(seq "$REPS"); do
  PID=$(PEER_LOG=$LOG OURS_BIN=$BIN PEER_CPUS=1 OURS_WORKDIR=$WORK OURS_ARGS="--config $PWD/bench/peers/ours-bench.toml ${EXTRA:-}" /tmp/pp/start-ours.sh 21398) || exit 1
  trap 'kill -9 $PID 2>/dev/null; rm -rf $WORK $LOG' EXIT
  for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:21398/mcp && break; sleep 0.1; done
  if [ -n "${FLOW:-}" ]; then
    FLOW_CALLS=0 FLOW_DELETE=0 timeout 60 taskset -c 0 wrk -t32 -c32 -d5s --timeout 10s -s "$PWD/bench/peers/lua/flow.lua" http://127.0.0.1:21398/mcp | grep '^FLOW' | cut -d' ' -f1-3
  else
    ONLY=b DURATION=5 WARMUP=1 BENCH_CPUS=0 /tmp/pp/bench.sh http://127.0.0.1:21398/mcp "$PID" 2>&1 | grep -E '^b|rror' | cut -d' ' -f1-6
  fi
  sleep 1
  T0=$(date +%s.%N)
  kill "$PID"
  # Gone, or a zombie: it exited (start-ours.sh leaves it orphaned, and the reaper of orphans
  # in a container may take a second or more to collect it).
  for i in $(seq 1200); do
    st=$(awk '{print $3}' /proc/$PID/stat 2>/dev/null) || break
    { [ -z "$st" ] || [ "$st" = Z ]; } && break
    sleep 0.025
  done
  T1=$(date +%s.%N)
  kill -9 "$PID" 2>/dev/null
  python3 - "$T0" "$T1" "$LOG" <<'EOF'
import re, sys
from datetime import datetime
t0, t1, log = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
at = {}
sessions = "?"
for line in open(log) if log else []:
    stamp = line[:27]
    for key, pat in (("stopping", "mcp_host: stopping"), ("drained", "drained sessions="),
                     ("marked", "stopped cleanly"), ("stopped", "mcp_host: stopped")):
        if pat in line and key not in at:
            at[key] = datetime.fromisoformat(stamp.rstrip("Z")).timestamp()
    m = re.search(r"drained sessions=(\d+)", line)
    if m:
        sessions = m.group(1)
split = ""
if {"stopping", "drained", "marked"} <= at.keys():
    split = (f"; SIGTERM to the stopping line {at['stopping'] - t0:.2f} s, drain {at['drained'] - at['stopping']:.2f} s, "
             f"commit to the clean mark {at['marked'] - at['drained']:.2f} s, then exit {t1 - at['marked']:.2f} s")
print(f"stop: {t1 - t0:.2f} s from SIGTERM to exit, {sessions} sessions{split}" + ("" if "marked" in at else "; NOT marked stopped cleanly"))
EOF
  rm -rf $WORK $LOG
done
