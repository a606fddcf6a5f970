#!/usr/bin/env bash
# run-all.sh — interleaved side-by-side run of every peer: REPS rounds; in each round every peer
# variant is started fresh, benched (bench.sh: a1, a64, b) and stopped, in a rotated order; then
# REPS rounds of the memory probe (mem-probe.sh) on fresh stateful servers. Loopback only, every
# load run bounded (DURATION s; the 10k-session creation is bounded by -d300s).
#
# Env: REPS=3 DURATION=10 PHASES="bench mem" OUT=results/<utc-stamp>
#      PEERS="actix rmcp:stateful rmcp:stateless ts:stateful ts:stateless py:stateful py:stateless"
#      MEM_PEERS="actix rmcp:stateful ts:stateful py:stateful"
#      SERVER_CPUS=1 BENCH_CPUS=0   (taskset pinning; set both empty for an unpinned run)
#      EXTRA_PEER="name|start-command-printing-PID|URL"  add your own server to the rotation
#      (e.g. EXTRA_PEER="ours|/path/start-ours.sh 21300|http://127.0.0.1:21300/mcp");
#      EXTRA_PEER2 … EXTRA_PEER4 add more (another build, another ledger, another allocator)
# Writes $OUT/bench.jsonl, $OUT/mem.jsonl, $OUT/run.log; summarize with summarize.py $OUT.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/lib.sh"
REPS="${REPS:-3}"
PHASES="${PHASES:-bench mem}"
PEERS="${PEERS:-actix rmcp:stateful rmcp:stateless ts:stateful ts:stateless py:stateful py:stateless}"
MEM_PEERS="${MEM_PEERS:-actix rmcp:stateful ts:stateful py:stateful}"
export SERVER_CPUS="${SERVER_CPUS-1}" BENCH_CPUS="${BENCH_CPUS-0}"
export DURATION="${DURATION:-10}"
OUT="${OUT:-$HERE/results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
# Keep ports below the ephemeral range (ip_local_port_range, 32768+ here): the memory probe opens
# thousands of client sockets, and a client socket holding the port makes the next bind fail.
BASE_PORT="${BASE_PORT:-21200}"

log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$LOG" >&2; }

# start_peer NAME:MODE PORT -> prints PID and URL
start_peer() {
  local spec="$1" port="$2" name mode
  name="${spec%%:*}"; mode="${spec#*:}"; [ "$mode" = "$spec" ] && mode=""
  if [[ "$name" == EXTRA* ]]; then
    local var="EXTRA_PEER${name#EXTRA}"
    IFS='|' read -r _ cmd url <<<"${!var}"
    echo "$(PEER_CPUS="$SERVER_CPUS" bash -c "$cmd") $url"
    return
  fi
  echo "$(PEER_CPUS="$SERVER_CPUS" "$HERE/start-$name.sh" "$port" $mode) http://127.0.0.1:$port/mcp"
}

stop_pid() {
  local pid="$1" i st
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 1 50); do
    st="$(ps -o stat= -p "$pid" 2>/dev/null || true)"
    [ -z "$st" ] || [[ "$st" == Z* ]] && return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

# The server of the current rep is stopped on every exit (Ctrl-C or a kill mid-rep included):
# the peers are started with nohup and would outlive this script.
pid=""
trap '[ -n "${pid:-}" ] && stop_pid "$pid"' EXIT
trap 'exit 130' INT TERM

peer_label() {
  local s="$1" var
  if [[ "$s" == EXTRA* ]]; then var="EXTRA_PEER${s#EXTRA}"; s="${!var%%|*}"; fi
  echo "$s"
}
EXTRAS=""
for k in "" 2 3 4; do v="EXTRA_PEER$k"; [ -n "${!v:-}" ] && EXTRAS="$EXTRAS EXTRA$k"; done

ALL="$PEERS$EXTRAS"
read -r -a LIST <<<"$ALL"
read -r -a MLIST <<<"$MEM_PEERS$EXTRAS"
log "run-all: reps=$REPS duration=${DURATION}s server_cpus=${SERVER_CPUS:-any} bench_cpus=${BENCH_CPUS:-any} out=$OUT"
log "peers: ${LIST[*]}"

if [[ " $PHASES " == *" bench "* ]]; then
  for rep in $(seq 1 "$REPS"); do
    n=${#LIST[@]}
    for k in $(seq 0 $((n - 1))); do
      idx=$(( (k + rep - 1) % n )); spec="${LIST[$idx]}"; port=$((BASE_PORT + idx))
      read -r pid url <<<"$(start_peer "$spec" "$port")"
      if [ -z "${pid:-}" ] || ! wait_ready "$url" 30; then log "FAILED to start $spec"; [ -n "${pid:-}" ] && stop_pid "$pid"; continue; fi
      sleep 1
      label="$(peer_label "$spec")"
      log "rep $rep $label pid=$pid load=$(cut -d' ' -f1-3 /proc/loadavg)"
      LABEL="$label|rep$rep" BENCH_JSON="$OUT/bench.jsonl" "$HERE/bench.sh" "$url" "$pid" 2>&1 | tee -a "$LOG"
      stop_pid "$pid"
    done
  done
fi

if [[ " $PHASES " == *" mem "* ]]; then
  for rep in $(seq 1 "$REPS"); do
    n=${#MLIST[@]}
    for k in $(seq 0 $((n - 1))); do
      idx=$(( (k + rep - 1) % n )); spec="${MLIST[$idx]}"; port=$((BASE_PORT + 50 + idx))
      read -r pid url <<<"$(start_peer "$spec" "$port")"
      if [ -z "${pid:-}" ] || ! wait_ready "$url" 30; then log "FAILED to start $spec"; [ -n "${pid:-}" ] && stop_pid "$pid"; continue; fi
      sleep 2
      label="$(peer_label "$spec")"
      log "mem rep $rep $label pid=$pid load=$(cut -d' ' -f1-3 /proc/loadavg)"
      gcsig=""; [[ "$spec" == ts* ]] && gcsig=USR2
      MEM_GC_SIGNAL="$gcsig" LABEL="$label|rep$rep" BENCH_JSON="$OUT/mem.jsonl" "$HERE/mem-probe.sh" "$url" "$pid" 2>&1 | tee -a "$LOG"
      stop_pid "$pid"
    done
  done
fi
log "done: $OUT"
echo "$OUT"
