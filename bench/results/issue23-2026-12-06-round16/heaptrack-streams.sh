#!/bin/bash
# What made heaptrack-*.txt (round 16): heaptrack a glibc build of the host (BIN: the global
# allocator in bins/host/src/main.rs commented out) while N standalone GET streams, each on
# its own session, are open (the harness's sse-hold.py in /tmp/pp), then SIGKILL: what
# heaptrack reports as leaked is what was live. Run at N=1000 and N=300, then
#   heaptrack_print -f OUT.zst --print-flamegraph OUT.folded --flamegraph-cost-type leaked
#   python3 heaptrack-diff.py N1000.folded N300.folded 1000 300 6 40
# (the difference of the two runs over 700 streams: what one more stream holds, without the
# fixed costs and actix-http's pooled request heads, which move between runs).
N=${N:-1000}; BIN=${BIN:-/tmp/host-glibc}; OUTF=${OUTF:-/tmp/ht/s}
cd /tmp/ht && rm -rf w && mkdir w && cd w
heaptrack -o $OUTF $BIN --port 21500 --workers 1 --config /work/main/bench/peers/ours-bench.toml > /tmp/ht/host.log 2>&1 &
HP=$!
HOLD=""
trap 'kill $HOLD 2>/dev/null; kill $HP 2>/dev/null; pkill -KILL -f "^$BIN --port 21500"' EXIT
for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:21500/mcp && break; sleep 0.2; done
python3 /tmp/pp/sse-hold.py http://127.0.0.1:21500/mcp $N 60 > /tmp/ht/hold.txt 2>&1 &
HOLD=$!
for i in $(seq 600); do grep -q '^OPEN' /tmp/ht/hold.txt && break; sleep 0.1; done
cat /tmp/ht/hold.txt
sleep ${SETTLE:-3}
P=$(pgrep -f "^$BIN --port 21500" | head -1); grep VmRSS /proc/$P/status 2>/dev/null
kill -KILL $P; wait $HP
kill $HOLD; wait $HOLD 2>/dev/null
