#!/bin/bash
# three reps of the peers harness's mem-probe on ours: hibernation on (default) and off, fresh process each
cd /work/main
for rep in 1 2 3; do
  for variant in on off; do
    args="--config $PWD/bench/peers/ours-bench.toml"
    [ $variant = off ] && args="$args --set sessions.hibernate_after_ms=0"
    PID=$(OURS_ARGS="$args" /tmp/pp/start-ours.sh 18500)
    for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:18500/mcp && break; sleep 0.1; done
    sleep 1
    LABEL="ours-hibernate-$variant|rep$rep" BENCH_JSON=/tmp/hp/mem/mem.jsonl /tmp/pp/mem-probe.sh http://127.0.0.1:18500/mcp $PID 2>&1 | tail -1
    kill $PID; wait $PID 2>/dev/null; for i in $(seq 50); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
  done
done
