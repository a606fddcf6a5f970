#!/bin/bash
# Builds: /tmp/host-noshrink = 54d958d; /tmp/host-shrink = 54d958d + the ledger page-cache release at the trim (Store::release_memory). Host pinned to CPU 1, wrk to CPU 0; lines in order noshrink, shrink, noshrink, shrink.
# A/B of the ledger's page-cache release at the trim: mem-probe (10,000 initialize, RSS 25 s later)
set -u
cd /work/main
PORT=18700; PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null' EXIT
# BUILDS: the /tmp/host-<name> builds to alternate; OUT: the mem-probe JSON lines. The A/B ran
# with the defaults; the final tree's rows with BUILDS=final OUT=/tmp/memab/mem-final.jsonl.
BUILDS="${BUILDS:-noshrink shrink}"; OUT="${OUT:-/tmp/memab/mem.jsonl}"
for rep in 1 2; do
  for b in $BUILDS; do
    PID=$(PEER_CPUS=1 OURS_BIN=/tmp/host-$b OURS_ARGS="--config $PWD/bench/peers/ours-bench.toml" /tmp/pp/start-ours.sh "$PORT")
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/mcp" && break; sleep 0.1; done
    sleep 1
    SETTLE=25 BENCH_CPUS=0 LABEL="$b|rep$rep" BENCH_JSON="$OUT" \
      /tmp/pp/mem-probe.sh "http://127.0.0.1:$PORT/mcp" "$PID" 2>&1 | tail -1
    kill "$PID"; for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    PID=
  done
done
