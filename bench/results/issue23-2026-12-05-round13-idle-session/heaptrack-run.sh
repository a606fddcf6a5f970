#!/bin/bash
# What made heaptrack-*.txt (run as is from /tmp/ht; BIN: a glibc build, the global allocator in
# bins/host/src/main.rs commented out; the wrk script is the peers harness's lua/mcp.lua in /tmp/pp).
# SIGKILL after SETTLE s: what heaptrack then reports as leaked is what was live.
# heaptrack_print -f OUT.zst --print-flamegraph F --flamegraph-cost-type leaked; python3 heaptrack-agg.py F 5 30
# heaptrack a glibc build of the host through N initialize, then SIGKILL
N=${N:-10000}; BIN=${BIN:-/tmp/ht/host-glibc}; OUTF=${OUTF:-/tmp/ht/g}
cd /tmp/ht && rm -rf w stop && mkdir w && cd w
heaptrack -o $OUTF $BIN --port 21500 --workers 1 --config /work/main/bench/peers/ours-bench.toml > /tmp/ht/host.log 2>&1 &
HP=$!
trap 'kill $HP 2>/dev/null' EXIT
for i in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:21500/mcp && break; sleep 0.2; done
source /tmp/pp/lib.sh
cd /tmp/pp && MCP_BODY="$MCP_INIT_BODY" MCP_SIDS="" MCP_PV="" MCP_STOP_AFTER=$N MCP_POOL=1 MCP_STOP_FILE=/tmp/ht/stop timeout 60 wrk -t1 -c32 -d30s --timeout 10s -s lua/mcp.lua http://127.0.0.1:21500/mcp > /tmp/ht/wrk.txt 2>&1 &
WP=$!
while [ ! -e /tmp/ht/stop ] && kill -0 $WP 2>/dev/null; do sleep 0.1; done
kill -INT $WP; wait $WP
sleep ${SETTLE:-3}
P=$(pgrep -f "^$BIN --port 21500" | head -1); grep VmRSS /proc/$P/status 2>/dev/null
kill -KILL $P; wait $HP
tail -1 /tmp/ht/wrk.txt | cut -c1-80
