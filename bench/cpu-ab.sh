#!/usr/bin/env bash
# CPU per tools/call echo of several builds of the host, alternated (an A/B of a change; the
# side-by-side harness, bench/peers, is what compares with other servers). Each rep starts a
# fresh host (one worker, CPU 1, its own temporary ledger), warms up 2 s, then wrk (c=64,
# CPU 0, the peers harness's lua/mcp.lua) drives `echo` for 8 s; the host's user and system
# CPU (/proc/PID/stat, clock ticks) over those 8 s divided by the requests served.
# KIND=legacy-sse (default: SSE replies, SESSIONS sessions the calls go round, default 1; 64 is
# the side by side's a64) or modern-json (2026-07-28, no session, JSON replies). Loopback only;
# stops every host it starts.
#   BUILDS="before=PATH after=PATH" KIND=modern-json REPS=4 OUT=DIR LUA=/tmp/pp/lua/mcp.lua bash bench/cpu-ab.sh
#   BUILDS="before=PATH after=PATH" SESSIONS=64 OUT=DIR bash bench/cpu-ab.sh
set -euo pipefail
: "${BUILDS:?BUILDS=\"name=path ...\"}" "${OUT:?OUT=dir}"
REPS="${REPS:-4}"; LUA="${LUA:-/tmp/pp/lua/mcp.lua}"; KIND="${KIND:-legacy-sse}"; SESSIONS="${SESSIONS:-1}"
case "$KIND" in legacy-sse|modern-json) ;; *) echo "KIND must be legacy-sse or modern-json, not $KIND" >&2; exit 2 ;; esac
if ! [[ $SESSIONS =~ ^[1-9][0-9]*$ ]]; then echo "SESSIONS must be a positive number, not $SESSIONS" >&2; exit 2; fi
if [ "$KIND" = modern-json ] && [ "$SESSIONS" != 1 ]; then echo "SESSIONS is for KIND=legacy-sse (2026-07-28 requests have no session)" >&2; exit 2; fi
mkdir -p "$OUT"
# Medians over this run's reps only.
if [ -e "$OUT/cpu.txt" ]; then echo "$OUT/cpu.txt exists: give a new OUT" >&2; exit 2; fi
# Which binaries were measured (their names are the caller's; the checksums are not).
for b in $BUILDS; do echo "${b%%=*} ${b#*=} $(sha256sum "${b#*=}" | cut -c1-16) KIND=$KIND SESSIONS=$SESSIONS"; done >> "$OUT/builds.txt"
HOST=""; WORK=""
cleanup() { if [ -n "$HOST" ]; then kill "$HOST" 2>/dev/null; wait "$HOST" 2>/dev/null || true; fi; if [ -n "$WORK" ]; then rm -rf "$WORK"; fi; HOST=""; WORK=""; }
# `one` runs in this shell (never in a pipe's subshell), so a failure anywhere in it, or an
# interrupt, stops the host it started.
trap cleanup EXIT
trap 'exit 130' INT TERM
one() { # name path -> one line
  local name=$1 bin=$2 port=$((20000 + RANDOM % 1000)) sid u0 s0 u1 s1 n out
  WORK=$(mktemp -d)
  (cd "$WORK" && exec taskset -c 1 "$bin" --port "$port" --workers 1 >/dev/null 2>&1) &
  HOST=$!
  local up=""
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && { up=1; break; }; sleep 0.1; done
  if [ -z "$up" ]; then echo "$name ($bin) did not answer on port $port within 10 s" >&2; exit 1; fi
  if [ "$KIND" = modern-json ]; then
    export MCP_BODY='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"b","version":"1"}}}}' \
      MCP_SIDS="" MCP_PV=2026-07-28 MCP_ACCEPT="application/json" MCP_HEADERS="Mcp-Method: tools/call;Mcp-Name: echo"
  else
    local sids="" i
    for i in $(seq "$SESSIONS"); do
      sid=$(curl -s -D - -o /dev/null -X POST "http://127.0.0.1:$port/mcp" -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' \
        -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}' \
        | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{print $2}')
      if [ -z "$sid" ]; then echo "$name: initialize $i gave no session id" >&2; exit 1; fi
      sids="${sids:+$sids,}$sid"
    done
    export MCP_BODY='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}' \
      MCP_SIDS="$sids" MCP_PV=2025-11-25 MCP_ACCEPT="application/json, text/event-stream"
  fi
  taskset -c 0 wrk -t1 -c64 -d2s -s "$LUA" "http://127.0.0.1:$port/mcp" >/dev/null
  read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$HOST/stat")
  out=$(taskset -c 0 wrk -t1 -c64 -d8s -s "$LUA" "http://127.0.0.1:$port/mcp")
  read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$HOST/stat")
  n=$(echo "$out" | awk '/requests in/{print $1}')
  cleanup
  python3 -c "n=$n; tk=$(getconf CLK_TCK); print(f'$name req/s {n/8:.0f} user_us {($u1-$u0)/tk/n*1e6:.2f} sys_us {($s1-$s0)/tk/n*1e6:.2f} total_us {($u1-$u0+$s1-$s0)/tk/n*1e6:.2f}')"
}
for r in $(seq "$REPS"); do
  for b in $BUILDS; do one "${b%%=*}" "${b#*=}" >> "$OUT/cpu.txt"; tail -n 1 "$OUT/cpu.txt"; done
done
python3 - "$OUT/cpu.txt" <<'PY' | tee "$OUT/summary.txt"
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    rows[f[0]].append({k: float(v) for k, v in zip(f[1::2], f[2::2])})
for name, rs in rows.items():
    med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    print(f"{name}: {len(rs)} reps, medians: {med['req/s']:,.0f} req/s, user {med['user_us']:.2f} us, sys {med['sys_us']:.2f} us, total {med['total_us']:.2f} us a call")
PY
