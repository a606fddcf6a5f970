#!/usr/bin/env bash
# Runs the official MCP conformance suite (both pinned releases; the legacy era with 0.1.16
# --suite all and 0.2.0-alpha.12 --requirements 2025-11-25, the modern era with 0.2.0-alpha.12
# --requirements 2026-07-28) against one freshly started mcp-host (on a fresh SQLite ledger in this run's log directory, removed at exit).
# Usage: scripts/conformance.sh [path/to/mcp-host]
# Needs Node >= 22: the pinned npm package `node` provides it (see CONFORMANCE.md G1).
set -euo pipefail
cd "$(dirname "$0")/.."
HOST_BIN=${1:-target/debug/mcp-host}
dir=scripts/conformance
if ! command -v npm >/dev/null 2>&1; then
  echo "conformance: installing nodejs and npm" >&2
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
node_bin="$dir/node_modules/.bin/node"
"$node_bin" --version >/dev/null

log=$(mktemp -d)
. scripts/lib.sh
trap stop_started EXIT
new_ledger "$log/ledger"
bg_start "$log/host.out" "$HOST_BIN" --port 0 "${HOST_ARGS[@]}"
wait_listening "$log/host.out" "$BG_PID" url \
  || { echo "conformance: mcp-host did not start" >&2; cat "$log/host.out.err" >&2; exit 1; }
echo "conformance: mcp-host at $url"

status=0
run() {
  local name=$1; shift
  echo "=== conformance $name: $*"
  local out=$log/$name-$2.txt
  if ! timeout 600 "$node_bin" "$dir/node_modules/$name/dist/index.js" server --url "$url" "$@" > "$out" 2>&1; then
    echo "conformance: $name $* exited non-zero" >&2
    status=1
  fi
  grep -E '^[✓✗] |^Total:' "$out" || true
}
run conformance-stable --suite all
run conformance-next --requirements 2025-11-25
# The modern era: the suite scores exactly the required scenarios (its exit status); it also
# runs and reports the unscored ones (the tasks-* extension scenarios, the pending SEP-2243
# header ones), which must pass too (checked below).
run conformance-next --requirements 2026-07-28
# The tasks extension's scenarios are in no requirement set: each is also run on its own
# (without --spec-version, which would skip an extension's scenario), and each must end with
# 0 failed and 0 warnings.
for scenario in tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal tasks-mrtr-input \
    tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications tasks-required-task-error tasks-mrtr-composition; do
  out=$log/$scenario.txt
  echo "=== conformance conformance-next: --scenario $scenario"
  if ! timeout 120 "$node_bin" "$dir/node_modules/conformance-next/dist/index.js" server --url "$url" --scenario "$scenario" > "$out" 2>&1; then
    echo "conformance: $scenario exited non-zero" >&2
    status=1
  fi
  line=$(grep -E '^Passed: [0-9]+/[0-9]+, [0-9]+ failed, [0-9]+ warnings' "$out" || true)
  passed=$(sed -nE 's/^Passed: ([0-9]+)\/.*/\1/p' <<<"$line")
  bad=$(sed -nE 's/^Passed: [0-9]+\/[0-9]+, ([0-9]+) failed, ([0-9]+) warnings.*/\1 \2/p' <<<"$line")
  if [ -z "$line" ] || [ "$bad" != "0 0" ]; then
    echo "conformance: $scenario did not pass cleanly (failed, warnings: ${bad:-none}); its output follows" >&2
    cat "$out" >&2
    status=1
  fi
  echo "Total: ${passed:-0} passed, ${bad%% *} failed ($scenario)"
done

# 0.1.16 must give server-sse-polling 3 passed (not warnings).
if ! grep -q '^✓ server-sse-polling: 3 passed, 0 failed' "$log/conformance-stable-all.txt"; then
  echo "conformance: server-sse-polling did not give 3 passed on 0.1.16" >&2
  status=1
fi
# Scored 2026-07-28 scenarios: every line before the "Not scored" list whose name is not in it.
unscored=$(sed -n '/^Not scored for/,$p' "$log/conformance-next-2026-07-28.txt" | sed -nE 's/^  [✓✗] ([^ ]+) .*/\1/p')
scored=$(sed '/^Not scored for/,$d' "$log/conformance-next-2026-07-28.txt" | grep -E '^[✓✗] ' | grep -vwF -f <(echo "${unscored:-none}") || true)
echo "conformance 2026-07-28: $(grep -c '^✓' <<<"$scored") scored scenarios passed, $(grep -c '^✗' <<<"$scored") failed"
if grep -q '^✗' <<<"$scored" || [ -z "$scored" ]; then
  echo "conformance: a required 2026-07-28 scenario failed" >&2
  status=1
fi
# Every run, the unscored 2026-07-28 scenarios included, has 0 failed.
for f in conformance-stable-all conformance-next-2025-11-25 conformance-next-2026-07-28; do
  if ! grep -qE '^Total: [0-9]+ passed, 0 failed' "$log/$f.txt"; then
    echo "conformance: $f had failures; full output follows" >&2
    cat "$log/$f.txt" >&2
    status=1
  fi
done
exit $status
