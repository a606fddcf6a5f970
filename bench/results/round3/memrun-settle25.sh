#!/bin/bash
# mem-probe with SETTLE=25 (past the host's 10 s trim check), server pinned to CPU 1, wrk to CPU 0
cd /work/main
for rep in 1; do
  for variant in on off; do
    args="--config $PWD/bench/peers/ours-bench.toml"
    [ $variant = off ] && args="$args --set sessions.hibernate_after_ms=0"
    PID=$(PEER_CPUS=1 OURS_ARGS="$args" /tmp/pp/start-ours.sh 18600)
    for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:18600/mcp && break; sleep 0.1; done
    sleep 1
    SETTLE=25 BENCH_CPUS=0 LABEL="ours-hibernate-$variant-settle25|rep$rep" BENCH_JSON=/tmp/hp/mem/mem25.jsonl /tmp/pp/mem-probe.sh http://127.0.0.1:18600/mcp $PID 2>&1 | tail -1
    kill $PID; for i in $(seq 50); do kill -0 $PID 2>/dev/null || break; sleep 0.1; done
  done
done
