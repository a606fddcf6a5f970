#!/usr/bin/env bash
# bench.sh URL [SERVER_PID]
#
# Generic MCP Streamable HTTP load probe (works against any server exposing an MCP endpoint with an
# `echo` tool taking {"text": string}). Uses wrk (Debian package) + lua/mcp.lua. Loopback only.
#
# Measurements (one line each, prefixed with the measurement name):
#   a1   tools/call echo, CONC_CALL connections, DURATION s, all on ONE session
#        (no Mcp-Session-Id when the server is stateless)
#   a64  tools/call echo, CONC_CALL connections, requests round-robin over 64 sessions
#        (skipped for stateless servers)
#   l1   tools/call echo, ONE connection, DURATION s, on one session: unloaded per-request latency
#   m    2026-07-28 tools/call echo, CONC_CALL connections, DURATION s: no session, `_meta` in the
#        body, mirrored headers, Accept: application/json (skipped when the server does not echo it)
#   b    initialize (each creates a new session on a stateful server), CONC_INIT connections, DURATION s
#
# With SERVER_PID, each line also reports server CPU seconds (user+sys, whole process tree) per 10k
# requests and the server's RSS after the run. Every line also reports the load generator's CPU and
# "other" CPU on the machine (busy time not accounted to server or wrk = noise from other jobs).
# other_cpu is /proc/stat (tick-sampled) minus exact per-process times: good to ~±0.5 CPU-s on
# saturated runs (a1/a64/b), meaningless (often negative) on the ping-pong l1 run.
#
# Environment (defaults): DURATION=10 WARMUP=2 CONC_CALL=64 CONC_INIT=32 ONLY=a1,a64,l1,m,b
#   BENCH_CPUS=<cpu list>  pin wrk with taskset (e.g. 0); unset = unpinned
#   BENCH_JSON=<file>      append one JSON object per measurement
#   LABEL=<text>           free-form tag copied into the JSON (peer name, rep, ...)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"

URL="${1:?usage: bench.sh URL [SERVER_PID]}"
PID="${2:-}"
DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-2}"
CONC_CALL="${CONC_CALL:-64}"
CONC_INIT="${CONC_INIT:-32}"
ONLY="${ONLY:-a1,a64,l1,m,b}"
LABEL="${LABEL:-}"
command -v wrk >/dev/null || { echo "bench.sh: wrk not found (apt-get install wrk)" >&2; exit 1; }
case "$URL" in http://127.*|http://localhost*|http://\[::1\]*) ;; *) echo "bench.sh: loopback URLs only" >&2; exit 1 ;; esac

PIN=()
[ -n "${BENCH_CPUS:-}" ] && PIN=(taskset -c "$BENCH_CPUS")

# run_wrk NAME CONC DURATION BODY SIDS PV -> prints summary line (+ JSON to BENCH_JSON)
run_wrk() {
  local name="$1" conc="$2" dur="$3" body="$4" sids="$5" pv="$6"
  local out tf s0 s1 b0 b1 wu ws
  out="$(mktemp)"; tf="$(mktemp)"
  s0="$([ -n "$PID" ] && tree_cpu_ticks "$PID" || echo 0)"; b0="$(sys_busy_ticks)"
  TIMEFORMAT='%U %S'
  { time MCP_BODY="$body" MCP_SIDS="$sids" MCP_PV="$pv" \
      "${PIN[@]}" wrk -t1 -c"$conc" -d"${dur}s" --timeout 10s -s "$HERE/lua/mcp.lua" "$URL" \
      >"$out" 2>&1; } 2>"$tf" || true
  s1="$([ -n "$PID" ] && tree_cpu_ticks "$PID" || echo 0)"; b1="$(sys_busy_ticks)"
  read -r wu ws <"$tf" || true
  local rss hwm
  rss="$([ -n "$PID" ] && tree_rss_kib "$PID" || echo 0)"
  hwm="$([ -n "$PID" ] && tree_hwm_kib "$PID" || echo 0)"
  python3 - "$name" "$conc" "$out" "$s0" "$s1" "$b0" "$b1" "${wu:-0}" "${ws:-0}" "$CLK_TCK" \
    "$rss" "$hwm" "$URL" "$LABEL" "${BENCH_JSON:-}" "${sids//[^,]/}" <<'PY'
import json, sys
(name, conc, out, s0, s1, b0, b1, wu, ws, tck, rss, hwm, url, label, jpath, commas) = sys.argv[1:]
tck = float(tck)
txt = open(out).read()
line = next((l for l in txt.splitlines() if l.startswith("WRKJSON ")), None)
if line is None:
    print(f"{name:4s} FAILED: {txt.strip()[-400:]}")
    sys.exit(0)
w = json.loads(line[8:])
dur = w["duration_us"] / 1e6
reqs = w["requests"]
errs = w["err_connect"] + w["err_read"] + w["err_write"] + w["err_status"] + w["err_timeout"]
srv = (int(s1) - int(s0)) / tck
wrk_cpu = float(wu) + float(ws)
busy = (int(b1) - int(b0)) / tck
other = busy - wrk_cpu - srv if int(s1) else None
r = {
    "label": label, "measure": name, "url": url, "conc": int(conc), "duration_s": round(dur, 2),
    "requests": reqs, "rps": round(reqs / dur, 1) if dur else 0, "errors": errs,
    "err_status": w["err_status"], "p50_ms": w["p50_us"] / 1000, "p90_ms": w["p90_us"] / 1000,
    "p99_ms": w["p99_us"] / 1000, "max_ms": w["max_us"] / 1000,
    "sessions": (len(commas) + 1) if name == "a64" else None,
    "srv_cpu_s": round(srv, 2) if int(s1) else None,
    "srv_cpu_s_per_10k": round(srv / reqs * 1e4, 3) if int(s1) and reqs else None,
    "wrk_cpu_s": round(wrk_cpu, 2), "machine_busy_cpu_s": round(busy, 2),
    "other_cpu_s": round(other, 2) if other is not None else None,
    "srv_rss_mib_after": round(int(rss) / 1024, 1) if int(rss) else None,
    "srv_hwm_mib": round(int(hwm) / 1024, 1) if int(hwm) else None,
    "loadavg1_after": float(open("/proc/loadavg").read().split()[0]),
}
s = (f"{name:4s} rps={r['rps']:.0f} p50={r['p50_ms']:.2f}ms p99={r['p99_ms']:.2f}ms "
     f"reqs={reqs} errors={errs} c={conc} dur={dur:.1f}s")
if r["srv_cpu_s"] is not None:
    s += (f" srv_cpu/10k={r['srv_cpu_s_per_10k']}s srv_rss={r['srv_rss_mib_after']}MiB"
          f" other_cpu={r['other_cpu_s']}s")
s += f" wrk_cpu={r['wrk_cpu_s']}s"
print(s)
if jpath:
    with open(jpath, "a") as f:
        f.write(json.dumps(r) + "\n")
PY
  rm -f "$out" "$tf"
}

mcp_init "$URL" || { echo "bench.sh: initialize failed against $URL" >&2; exit 1; }
SID1="$MCP_SID"; PV="$MCP_PV"
echo "# url=$URL negotiated=$PV session=${SID1:-<none: stateless>} label=${LABEL}" >&2
resp="$(mcp_call "$URL" "$SID1" "$PV")"
case "$resp" in
  *'hello perf anchor'*) ;;
  *) echo "bench.sh: tools/call echo sanity check failed: $resp" >&2; exit 1 ;;
esac

if [[ ",$ONLY," == *",a1,"* ]]; then
  [ "$WARMUP" -gt 0 ] && MCP_BODY="$MCP_CALL_BODY" MCP_SIDS="$SID1" MCP_PV="$PV" \
    "${PIN[@]}" wrk -t1 -c"$CONC_CALL" -d"${WARMUP}s" -s "$HERE/lua/mcp.lua" "$URL" >/dev/null 2>&1 || true
  run_wrk a1 "$CONC_CALL" "$DURATION" "$MCP_CALL_BODY" "$SID1" "$PV"
fi

if [[ ",$ONLY," == *",a64,"* ]]; then
  if [ -n "$SID1" ]; then
    SIDS="$SID1"
    for _ in $(seq 2 64); do
      mcp_init "$URL"
      SIDS="$SIDS,$MCP_SID"
    done
    run_wrk a64 "$CONC_CALL" "$DURATION" "$MCP_CALL_BODY" "$SIDS" "$PV"
  else
    echo "a64  skipped (stateless server: no sessions)"
  fi
fi

if [[ ",$ONLY," == *",l1,"* ]]; then
  run_wrk l1 1 "$DURATION" "$MCP_CALL_BODY" "$SID1" "$PV"
fi

MODERN_BODY='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello perf anchor"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"perf-bench","version":"0"}}}}'
MODERN_HEADERS='Mcp-Method:tools/call;Mcp-Name:echo'
if [[ ",$ONLY," == *",m,"* ]]; then
  resp="$(curl -sS -m 10 -X POST "$URL" -H 'Content-Type: application/json' -H 'Accept: application/json' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: echo' -d "$MODERN_BODY" || true)"
  case "$resp" in
    *'hello perf anchor'*)
      [ "$WARMUP" -gt 0 ] && MCP_ACCEPT=application/json MCP_HEADERS="$MODERN_HEADERS" MCP_BODY="$MODERN_BODY" \
        MCP_SIDS="" MCP_PV=2026-07-28 "${PIN[@]}" wrk -t1 -c"$CONC_CALL" -d"${WARMUP}s" -s "$HERE/lua/mcp.lua" "$URL" >/dev/null 2>&1 || true
      (export MCP_ACCEPT=application/json MCP_HEADERS="$MODERN_HEADERS"
       run_wrk m "$CONC_CALL" "$DURATION" "$MODERN_BODY" "" 2026-07-28) ;;
    *) echo "m    skipped (no 2026-07-28 echo: ${resp:0:120})" ;;
  esac
fi

if [[ ",$ONLY," == *",b,"* ]]; then
  run_wrk b "$CONC_INIT" "$DURATION" "$MCP_INIT_BODY" "" ""
fi
