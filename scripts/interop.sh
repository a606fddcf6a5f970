#!/usr/bin/env bash
# Our resilient client (mcp-load probe) against servers: the official TypeScript SDK server
# (stateful, in-memory event store; scripts/conformance/ts-server.mjs) and mcp-host. Each
# probe calls a tool whose stream the server closes early and requires the call to complete
# through GET + Last-Event-ID. Then mcp-load runs (fault-free, with cuts) and a short release
# gate against mcp-host (also with OAuth tokens from the provider of scripts/oidc). Needs
# `npm ci` in scripts/conformance (conformance.sh does it) and in scripts/oidc (test.sh does).
# Usage: scripts/interop.sh [path/to/mcp-host] [path/to/mcp-load]
set -euo pipefail
cd "$(dirname "$0")/.."
HOST_BIN=${1:-target/debug/mcp-host}
LOAD_BIN=${2:-target/debug/mcp-load}
node_bin=scripts/conformance/node_modules/.bin/node
[ -x "$node_bin" ] || (cd scripts/conformance && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
log=$(mktemp -d)
. scripts/lib.sh
trap stop_started EXIT
# `mcp-load --spawn-host` gives each host a fresh SQLite ledger in a directory of its own under
# TMPDIR and removes it; TMPDIR is this script's and removed at exit, so not even an mcp-load
# stopped by `timeout` (no destructors run) leaves a ledger behind.
own_dir "$log/tmp"
export TMPDIR=$log/tmp
passed=0; failed=0
probe() { # label, url, tool, expected text
  if timeout 60 "$LOAD_BIN" probe --url "$2" --tool "$3" --expect-text "$4" --expect-resume; then
    echo "interop: $1 ok"; passed=$((passed + 1))
  else
    echo "interop: $1 FAILED"; failed=$((failed + 1))
  fi
}

# Started here, in this shell (not inside $(...)), so the EXIT trap knows their PIDs.
bg_start "$log/ts.out" "$node_bin" scripts/conformance/ts-server.mjs
wait_listening "$log/ts.out" "$BG_PID" ts_url \
  || { echo "interop: ts-server did not start" >&2; cat "$log/ts.out.err" >&2; exit 1; }
new_ledger "$log/ledger"
bg_start "$log/host.out" "$HOST_BIN" --port 0 --retry-ms 100 "${HOST_ARGS[@]}"
wait_listening "$log/host.out" "$BG_PID" host_url \
  || { echo "interop: mcp-host did not start" >&2; cat "$log/host.out.err" >&2; exit 1; }
probe "TypeScript SDK server, resumed stream" "$ts_url" reconnect reconnected
probe "mcp-host, resumed stream" "$host_url" test_reconnection \
  "Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure."
# A short fault-free load run through the same client: every call must succeed.
if timeout 60 "$LOAD_BIN" run --spawn-host "$HOST_BIN" --clients 8 --seconds 2 --no-progress --fail-on-error > "$log/run.txt" 2>&1; then
  echo "interop: mcp-load run (8 clients, 2 s, no failures) ok"; passed=$((passed + 1))
else
  echo "interop: mcp-load run FAILED"; cat "$log/run.txt"; failed=$((failed + 1))
fi
# The same through the fault proxy: half the SSE responses cut; every call must still
# complete (resumed), none lost.
if timeout 90 "$LOAD_BIN" run --spawn-host "$HOST_BIN" --clients 8 --seconds 4 --no-progress --fail-on-error \
    --cut-rate 0.5 --seed 7 --json-out "$log/cut.json" > "$log/cut.txt" 2>&1 \
    && grep -q '"cut": [1-9]' "$log/cut.json"; then
  echo "interop: mcp-load run with connection cuts (no call lost) ok"; passed=$((passed + 1))
  grep -E '^calls ok|^fault proxy' "$log/cut.txt"
else
  echo "interop: mcp-load run with connection cuts FAILED"; cat "$log/cut.txt"; failed=$((failed + 1))
fi
# The release gate, short (debug build): a baseline phase, each fault scenario alone, then
# all mixed; every gate must pass. The full run (>= 100,000 events per phase) is in docs/testing.md.
if timeout 900 "$LOAD_BIN" gate --spawn-host "$HOST_BIN" --clients 32 --events-per-phase 1500 \
    --phase-seconds 60 --min-events 15000 --seed 7 --no-progress --json-out "$log/gate.json" > "$log/gate.txt" 2>&1; then
  echo "interop: mcp-load gate (short: 18 phases, every fault scenario, crash, sigterm, rollout, the 2026-07-28 phase and the handles phase included) ok"; passed=$((passed + 1))
  grep -E 'events, .* sessions' "$log/gate.txt"
else
  echo "interop: mcp-load gate FAILED"; cat "$log/gate.txt"; failed=$((failed + 1))
fi
# The gate with OAuth: the hosts trust a real authorization server (scripts/oidc, oidc-provider),
# the clients' JWT access tokens come from it by the client credentials grant
# (--token-cmd, fetched again every 20 s), and `old-token` sends another client's token on
# live sessions (refused: 404) and stateless requests (served as that other principal).
oidc_node=scripts/oidc/node_modules/.bin/node
[ -x "$oidc_node" ] || (cd scripts/oidc && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
bg_start "$log/oidc.out" "$oidc_node" scripts/oidc/provider.mjs --port 0
oidc_pid=$BG_PID
wait_listening "$log/oidc.out" "$oidc_pid" issuer \
  || { echo "interop: the OAuth provider did not start" >&2; cat "$log/oidc.out.err" >&2; exit 1; }
resource=http://127.0.0.1/mcp-gate
if timeout 600 "$LOAD_BIN" gate --spawn-host "$HOST_BIN" --scenarios cut,old-token,modern,crash \
    --host-arg="--oauth-issuer=$issuer" --host-arg="--oauth-resource=$resource" \
    --token-cmd "scripts/oidc/token.sh $issuer jwt-es256 $resource 'mcp tools:read'" \
    --other-token-cmd "scripts/oidc/token.sh $issuer jwt-eddsa $resource mcp" --token-refresh-secs 20 \
    --clients 16 --events-per-phase 1000 --phase-seconds 40 --min-events 3000 --seed 5 --no-progress \
    --json-out "$log/gate-oauth.json" > "$log/gate-oauth.txt" 2>&1; then
  echo "interop: mcp-load gate with OAuth access tokens from oidc-provider (short: cut, old-token, modern, crash, mixed) ok"; passed=$((passed + 1))
  grep -E 'events, .* sessions' "$log/gate-oauth.txt"
else
  echo "interop: mcp-load gate with OAuth FAILED"; cat "$log/gate-oauth.txt"; failed=$((failed + 1))
fi
# Its gate is over: the provider stops now (the EXIT trap would stop it too).
KW_WATCH=("$oidc_pid"); kill_wait "$oidc_pid"; wait "$oidc_pid" 2>/dev/null || true
# The gate on two hosts sharing one Redis ledger (its own redis-server on a free port, stopped
# with everything else): requests round robin, no affinity; a node killed, a node paused past
# its lease. The full run is in docs/testing.md.
redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
own_dir "$log/redis"
bg_start "$log/redis.out" redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no --dir "$log/redis"
for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
if timeout 900 "$LOAD_BIN" gate --spawn-host "$HOST_BIN" --nodes 2 --ledger "redis://127.0.0.1:$redis_port/0" \
    --scenarios cut,crash,node-loss,partition,modern,handles --clients 16 --events-per-phase 1500 \
    --phase-seconds 60 --min-events 8000 --seed 11 --resume-p99-limit-ms 10000 --no-progress --json-out "$log/gate2.json" > "$log/gate2.txt" 2>&1; then
  echo "interop: mcp-load gate on 2 nodes sharing one Redis ledger (short: cut, crash, node-loss, partition, modern, handles, mixed) ok"; passed=$((passed + 1))
  grep -E 'events, .* sessions' "$log/gate2.txt"
else
  echo "interop: mcp-load gate on 2 nodes FAILED"; cat "$log/gate2.txt"; failed=$((failed + 1))
fi
# The same on a Redis Cluster of three primaries (each its own redis-server, slots split by
# redis-cli --cluster create): the hosts are given one node's URL and find the others.
cluster_ports=$(python3 -c '
import socket, random
ports = []
while len(ports) < 3:
    p = random.randrange(20000, 50000)
    try:
        for q in (p, p + 10000):
            s = socket.socket(); s.bind(("127.0.0.1", q)); s.close()
    except OSError:
        continue
    if p not in ports: ports.append(p)
print(" ".join(map(str, ports)))')
for p in $cluster_ports; do
  own_dir "$log/cluster-$p"
  bg_start "$log/cluster-$p.out" redis-server --bind 127.0.0.1 --port "$p" --save '' --appendonly no \
    --cluster-enabled yes --cluster-node-timeout 2000 --dir "$log/cluster-$p"
done
for p in $cluster_ports; do
  for _ in $(seq 1 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
first=${cluster_ports%% *}
# shellcheck disable=SC2046 # one argument per node
redis-cli --cluster create $(printf '127.0.0.1:%s ' $cluster_ports) --cluster-replicas 0 --cluster-yes > "$log/cluster.txt" 2>&1 || true
for _ in $(seq 1 100); do redis-cli -p "$first" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break; sleep 0.2; done
if timeout 900 "$LOAD_BIN" gate --spawn-host "$HOST_BIN" --nodes 2 --ledger "redis://127.0.0.1:$first/0" \
    --scenarios cut,crash,node-loss,partition --clients 16 --events-per-phase 1500 \
    --phase-seconds 60 --min-events 6000 --seed 13 --resume-p99-limit-ms 10000 --no-progress --json-out "$log/gate-cluster.json" > "$log/gate-cluster.txt" 2>&1; then
  echo "interop: mcp-load gate on 2 nodes sharing a 3-primary Redis Cluster (short: cut, crash, node-loss, partition, mixed) ok"; passed=$((passed + 1))
  grep -E 'events, .* sessions' "$log/gate-cluster.txt"
else
  echo "interop: mcp-load gate on a Redis Cluster FAILED"; cat "$log/cluster.txt" "$log/gate-cluster.txt"; failed=$((failed + 1))
fi
echo "interop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
