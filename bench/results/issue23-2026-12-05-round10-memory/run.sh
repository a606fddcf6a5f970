#!/bin/bash
# A/B of per-session / per-stream RSS SETTLE s after (mem-probe of the harness), host pinned to CPU 1, wrk on CPU 0.
set -u
REPS=${REPS:-2}; SETTLE=${SETTLE:-25}; OUT=${OUT:?}
PORT=18600; PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null' EXIT
for rep in $(seq "$REPS"); do
  for b in $BUILDS; do
    name=${b%%=*}; bin=${b#*=}
    PID=$(OURS_BIN="$bin" PEER_CPUS=1 OURS_ARGS="--config $PWD/bench/peers/ours-bench.toml" /tmp/pp/start-ours.sh "$PORT")
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/mcp" && break; sleep 0.1; done
    sleep 1
    SETTLE="$SETTLE" BENCH_CPUS=0 LABEL="$name|rep$rep" BENCH_JSON="$OUT" /tmp/pp/mem-probe.sh "http://127.0.0.1:$PORT/mcp" "$PID" 2>&1 | tail -2
    kill "$PID"; for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    PID=
  done
done
