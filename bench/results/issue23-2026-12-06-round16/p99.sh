#!/bin/bash
# VARIANTS="name=BIN[:ENV=VAL] ..." REPS=N KIND=legacy|modern: p50/p99/req/s per rep, host on CPU1, wrk CPU0
set -u
LUA=/tmp/pp/lua/mcp.lua; HOST=""; WORK=""
cleanup() { [ -n "$HOST" ] && { kill $HOST 2>/dev/null; wait $HOST 2>/dev/null; }; [ -n "$WORK" ] && rm -rf "$WORK"; HOST=""; WORK=""; }
trap cleanup EXIT
for rep in $(seq ${REPS:-3}); do for v in $VARIANTS; do
  name=${v%%=*}; rest=${v#*=}; bin=${rest%%:*}; envs=""; [[ $rest == *:* ]] && envs=${rest#*:}
  port=$((22000 + RANDOM % 1000)); WORK=$(mktemp -d)
  (cd $WORK && exec env $envs taskset -c 1 $bin --port $port --workers 1 >/dev/null 2>&1) & HOST=$!
  for _ in $(seq 100); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.1; done
  if [ "${KIND:-legacy}" = modern ]; then
    export MCP_BODY='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"b","version":"1"}}}}' MCP_SIDS="" MCP_PV=2026-07-28 MCP_ACCEPT="application/json" MCP_HEADERS="Mcp-Method: tools/call;Mcp-Name: echo"
  else
    sid=$(curl -s -D - -o /dev/null -X POST http://127.0.0.1:$port/mcp -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}' | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{print $2}')
    export MCP_BODY='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}' MCP_SIDS="$sid" MCP_PV=2025-11-25 MCP_ACCEPT="application/json, text/event-stream" MCP_HEADERS=""
  fi
  taskset -c 0 wrk -t1 -c64 -d2s -s $LUA http://127.0.0.1:$port/mcp >/dev/null
  out=$(taskset -c 0 wrk -t1 -c64 -d${SECS:-8}s -s $LUA http://127.0.0.1:$port/mcp | sed -n 's/^WRKJSON //p')
  cleanup
  echo "$out" | python3 -c "import json,sys; d=json.load(sys.stdin); print('$name rep$rep req/s %.0f p50 %d p90 %d p99 %d' % (d['requests']/d['duration_us']*1e6, d['p50_us'], d['p90_us'], d['p99_us']))"
done; done
