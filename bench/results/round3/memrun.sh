#!/bin/bash
# The mem-probe of the side-by-side harness (copied to /tmp/pp, as README's Performance says)
# on mcp-host with hibernation on (default) and off, a fresh host per rep. Run from the project
# root. Written after the runs, as one script for the three near-copies that ran them (same
# steps; they used ports 18500 and 18600 and wrote to /tmp first). How this round ran it:
#   REPS=3 SETTLE=2                   OUT=mem.jsonl    (unpinned, on 4a790a8; its labels lacked -settle2)
#   REPS=2 SETTLE=15 PIN=1 BENCH_CPUS=0 OUT=mem15.jsonl
#   REPS=1 SETTLE=25 PIN=1 BENCH_CPUS=0 OUT=mem25.jsonl
# PIN: the host's CPU list (taskset), empty for none; BENCH_CPUS: wrk's, read by mem-probe.
set -u
REPS="${REPS:-3}"; SETTLE="${SETTLE:-2}"; PIN="${PIN:-}"; OUT="${OUT:?OUT=file.jsonl}"
PORT=18600; PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null' EXIT
for rep in $(seq "$REPS"); do
  for variant in on off; do
    args="--config $PWD/bench/peers/ours-bench.toml"
    [ "$variant" = off ] && args="$args --set sessions.hibernate_after_ms=0"
    PID=$(PEER_CPUS="$PIN" OURS_ARGS="$args" /tmp/pp/start-ours.sh "$PORT")
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/mcp" && break; sleep 0.1; done
    sleep 1
    SETTLE="$SETTLE" LABEL="ours-hibernate-$variant-settle$SETTLE|rep$rep" BENCH_JSON="$OUT" \
      /tmp/pp/mem-probe.sh "http://127.0.0.1:$PORT/mcp" "$PID" 2>&1 | tail -1
    kill "$PID"; for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    PID=
  done
done
