#!/usr/bin/env bash
# CORS in a real browser (Debian's Chromium, headless) and on the wire (curl), against
# mcp-host started with `allow_localhost_origins = false` and one `--allowed-origin`.
#
# curl checks the raw headers: the preflight from the allowed origin (204 and each CORS header),
# CORS headers on a success, on an error and on DELETE, 403 for a disallowed origin (preflight
# too), and, on a second host with bearer tokens, that the preflight is answered before
# authentication and that the 401 carries the CORS headers. Then Chromium loads
# scripts/browser/page.html from the allowed origin (a whole session by fetch(), every POST
# preflighted, Mcp-Session-Id read from the exposed header) and from a disallowed origin (fetch
# must fail with a TypeError). Pages and results go through scripts/browser/server.py.
#
# Everything talks to 127.0.0.1 only. Installs chromium (apt) if /usr/bin/chromium is missing.
# Stops mcp-host, the page server and every Chromium process (its whole session, and its
# crashpad handlers, found by an environment marker) on success and on failure. Each mcp-host
# has a fresh SQLite ledger of its own in the log directory, removed at exit.
# Usage: scripts/browser.sh [path/to/mcp-host]
set -euo pipefail
cd "$(dirname "$0")/.."
HOST_BIN=${1:-target/debug/mcp-host}
CHROMIUM=/usr/bin/chromium
if [ ! -x "$CHROMIUM" ] || ! command -v curl >/dev/null 2>&1; then
  echo "browser: installing chromium and curl" >&2
  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium curl >/dev/null
fi

log=$(mktemp -d)
results=$log/results
. scripts/lib.sh
# Chromium's crashpad handlers leave its session (they setsid), so they are found by this
# marker in their environment. (Chromium's zygote children overwrite their environment with
# their process title, so the marker alone would not find those; the session does.)
browser_mark="MCP_BROWSER_RUN=$$.$RANDOM$RANDOM"
cleanup() {
  stop_started
  with_env "$browser_mark"
  if [ "${#FOUND[@]}" -gt 0 ]; then
    KW_WATCH=("${FOUND[@]}")
    kill_wait "${FOUND[@]}"
  fi
  rm -rf "$log"/profile-* "$log"/home-*
  return 0
}
trap cleanup EXIT

passed=0; failed=0
pass() { echo "browser: $1 ok"; passed=$((passed + 1)); }
fail() { echo "browser: $1 FAILED"; failed=$((failed + 1)); }

# --- processes: page server (two origins), mcp-host (CORS), mcp-host (CORS + bearer auth) ---
bg_start "$log/page.out" python3 -u scripts/browser/server.py "$results"
wait_listening "$log/page.out" "$BG_PID" page_line \
  || { echo "browser: page server did not start" >&2; cat "$log/page.out.err" >&2; exit 1; }
read -r _ _ _ allowed refused < "$log/page.out"
page_port=${allowed##*:}

printf '[security]\nallow_localhost_origins = false\n' > "$log/cors.toml"
new_ledger "$log/ledger-cors"
bg_start "$log/host.out" "$HOST_BIN" --config "$log/cors.toml" --port 0 --allowed-origin "$allowed" "${HOST_ARGS[@]}"
wait_listening "$log/host.out" "$BG_PID" url \
  || { echo "browser: mcp-host did not start" >&2; cat "$log/host.out.err" >&2; exit 1; }

token=browser-test-token
printf '[security.bearer_tokens]\n"%s" = "browser"\n' "$token" > "$log/auth.toml"
new_ledger "$log/ledger-auth"
bg_start "$log/auth.out" "$HOST_BIN" --config "$log/auth.toml" --port 0 "${HOST_ARGS[@]}"
wait_listening "$log/auth.out" "$BG_PID" auth_url \
  || { echo "browser: mcp-host (auth) did not start" >&2; cat "$log/auth.out.err" >&2; exit 1; }
echo "browser: mcp-host at $url (allowed origin $allowed; refused $refused), with auth at $auth_url"

# --- raw headers ---
ALLOW_METHODS='GET, POST, DELETE'
ALLOW_HEADERS='Content-Type, Accept, Authorization, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name'
EXPOSE_HEADERS='Mcp-Session-Id, WWW-Authenticate, Retry-After'
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"browser","version":"1"}}}'
n=0
errs=()
# req URL CURL_ARGS...: one request; its status goes to $code, its headers to $hdr.
req() {
  local u=$1; shift
  n=$((n + 1)); hdr=$log/curl.$n.headers
  errs=()
  code=$(curl -sS --max-time 10 -o "$log/curl.$n.body" -D "$hdr" -w '%{http_code}' "$@" "$u" 2>>"$log/curl.err" || true)
}
# value NAME: every value of header NAME in $hdr, comma-joined (names are case-insensitive).
value() {
  awk -v name="$1" 'BEGIN { name = tolower(name) }
    { sub(/\r$/, "") }
    index($0, ":") { k = tolower(substr($0, 1, index($0, ":") - 1)); v = substr($0, index($0, ":") + 1)
      sub(/^[ \t]+/, "", v); if (k == name) { out = out (out == "" ? "" : ", ") v } }
    END { printf "%s", out }' "$hdr"
}
want_status() { [ "$code" = "$1" ] || errs+=("status $code, want $1"); }
want() { # NAME VALUE: exact value
  local v; v=$(value "$1")
  [ "$v" = "$2" ] || errs+=("$1: '${v:-<absent>}', want '$2'")
}
want_present() { [ -n "$(value "$1")" ] || errs+=("$1: absent"); }
want_absent() { local v; v=$(value "$1"); [ -z "$v" ] || errs+=("$1: '$v', want it absent"); }
want_vary_origin() {
  local v; v=$(value Vary)
  [[ ",${v// /}," == *,[Oo]rigin,* ]] || errs+=("Vary: '${v:-<absent>}', want it to name Origin")
}
verdict() { # LABEL
  if [ "${#errs[@]}" -eq 0 ]; then pass "$1"; else
    fail "$1"; local e; for e in "${errs[@]}"; do echo "browser:   $e"; done
    sed 's/^/browser:   < /' "$hdr"
  fi
}
cors_headers() { # the headers every response to an allowed origin carries
  want Access-Control-Allow-Origin "$allowed"
  want Access-Control-Expose-Headers "$EXPOSE_HEADERS"
  want_vary_origin
}
preflight() { # URL ORIGIN
  req "$1" -X OPTIONS -H "Origin: $2" -H 'Access-Control-Request-Method: POST' \
    -H 'Access-Control-Request-Headers: content-type,mcp-protocol-version,mcp-session-id'
}

preflight "$url" "$allowed"
want_status 204
want Access-Control-Allow-Origin "$allowed"
want Access-Control-Allow-Methods "$ALLOW_METHODS"
want Access-Control-Allow-Headers "$ALLOW_HEADERS"
want Access-Control-Max-Age 600
want_vary_origin
verdict "preflight from the allowed origin (204, each CORS header)"

preflight "$url" "$refused"
want_status 403
want_absent Access-Control-Allow-Origin
verdict "preflight from a disallowed origin refused (403)"

preflight "$url" "http://localhost:$page_port"
want_status 403
want_absent Access-Control-Allow-Origin
verdict "preflight from localhost refused with allow_localhost_origins = false (403)"

req "$url" -H "Origin: $allowed" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' --data "$INIT"
want_status 200
cors_headers
want_present Mcp-Session-Id
verdict "initialize from the allowed origin carries the CORS headers"
sid=$(value Mcp-Session-Id)

req "$url" -X DELETE -H "Origin: $allowed" -H "Mcp-Session-Id: $sid"
want_status 204
cors_headers
verdict "DELETE from the allowed origin carries the CORS headers"

req "$url" -H "Origin: $allowed" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' --data '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
want_status 400
cors_headers
verdict "error (400, no session) to the allowed origin carries the CORS headers"

req "$url" -H "Origin: $refused" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' --data "$INIT"
want_status 403
want_absent Access-Control-Allow-Origin
verdict "initialize from a disallowed origin refused (403)"

preflight "$auth_url" "$allowed"
want_status 204
want Access-Control-Allow-Origin "$allowed"
want Access-Control-Allow-Headers "$ALLOW_HEADERS"
verdict "preflight answered before authentication (no token: 204)"

req "$auth_url" -H "Origin: $allowed" -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' --data "$INIT"
want_status 401
cors_headers
want_present WWW-Authenticate
verdict "401 to the allowed origin carries the CORS headers and WWW-Authenticate"

# --- the browser ---
# page ORIGIN LABEL MODE: loads the page in a fresh headless Chromium, waits (bounded) for its
# result, stops Chromium, and judges the result.
page() {
  local origin=$1 label=$2 mode=$3 i profile=$log/profile-$2 chromium_pid
  mkdir -p "$profile" "$log/home-$label"
  bg_start_group "$log/chromium-$label" env "$browser_mark" HOME="$log/home-$label" \
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1' --user-data-dir="$profile" "$origin/page.html?mcp=$url&label=$label&mode=$mode"
  chromium_pid=$BG_PID
  for ((i = 0; i < 300; i++)); do   # 30 s
    [ -s "$results/$label.json" ] && break
    alive "$chromium_pid" || break
    sleep 0.1
  done
  stop_group "$chromium_pid"
  if [ ! -s "$results/$label.json" ]; then
    echo "browser:   no result from the page within 30 s; Chromium's log (less D-Bus noise) ends:"
    grep -v dbus "$log/chromium-$label.err" | tail -n 20 | sed 's/^/browser:   | /'
    return 1
  fi
  python3 - "$results/$label.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
for s in r["steps"]:
    print(f"browser:   {s['name']}: {'ok' if s['ok'] else 'FAILED'} ({s['detail']})")
if r.get("error"):
    print(f"browser:   page error: {r['error']}")
sys.exit(0 if r["ok"] else 1)
EOF
}

if page "$allowed" allowed session; then
  pass "cross-origin session from an allowed origin"
else
  fail "cross-origin session from an allowed origin"
fi
if page "$refused" refused refused; then
  pass "disallowed origin refused"
else
  fail "disallowed origin refused"
fi

echo "browser: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
