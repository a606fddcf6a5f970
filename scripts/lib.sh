# shellcheck shell=bash
# Process bookkeeping shared by the test scripts. Source it; it defines functions and exports
# MCP_HOST_EXIT_WITH_PARENT.
#
# Contract: every background process a script starts goes through `bg_start` (or `bg_start_group`
# for a program that forks helpers, such as Chromium), in the script's own shell, never inside
# `$(...)`: a command substitution is a subshell, and a PID recorded there is lost. Every
# mcp-host gets its own SQLite ledger directory from `new_ledger` (same rule). The script
# installs `trap stop_started EXIT` once; it stops everything and removes those directories
# on success and on failure. Every wait here is bounded. The process scans read /proc with bash
# builtins only, so they never see a process of their own.

# Every mcp-host a script starts exits by itself when the script's shell dies, even by SIGKILL
# (when no EXIT trap runs).
export MCP_HOST_EXIT_WITH_PARENT=1

BG_PIDS=()    # direct children started by bg_start, stopped by stop_started
BG_GROUPS=()  # session ids (= process group ids) started by bg_start_group
OWN_DIRS=()   # directories made by own_dir, own_tmp_dir and new_ledger, removed by stop_started

# own_dir DIR: makes DIR, which must not exist yet, and has stop_started remove it with its
# content once every process started here is stopped. Call it in the script's own shell.
own_dir() {
  mkdir -- "$1" || return 1
  OWN_DIRS+=("$1")
}

# own_tmp_dir VAR: as own_dir, for a new directory under TMPDIR (mktemp -d); its path in VAR.
own_tmp_dir() {
  local d
  d=$(mktemp -d) || return 1
  OWN_DIRS+=("$d")
  printf -v "$1" '%s' "$d"
}

# new_ledger DIR: own_dir DIR for the SQLite ledger of one mcp-host (mcp-host.db, its -wal
# and -shm, its key file mcp-host.db.key and its admin token file), and sets HOST_ARGS to
# `--ledger-path DIR/mcp-host.db --admin-port 0` for that host's command line. One fresh DIR
# per host: no two hosts, and no two runs, share a ledger, none is left in the working
# directory, and each host's admin API takes a free port.
new_ledger() {
  own_dir "$1" || return 1
  # shellcheck disable=SC2034  # read by the sourcing script
  HOST_ARGS=(--ledger-path "$1/mcp-host.db" --admin-port 0)
}

# bg_start OUT CMD...: starts CMD in the background, stdout to OUT, stderr to OUT.err.
# Sets BG_PID.
bg_start() {
  local out=$1; shift
  "$@" > "$out" 2> "$out.err" &
  BG_PID=$!
  BG_PIDS+=("$BG_PID")
}

# bg_start_group OUT CMD...: as bg_start, but CMD leads a new session (setsid), so it and every
# helper it forks can be stopped as one group. OUT "-" keeps this shell's stdout and stderr.
# Sets BG_PID (= its session and group id).
bg_start_group() {
  local out=$1; shift
  # A background job of a non-interactive shell is not a group leader, so setsid does not fork:
  # $! is the session leader.
  if [ "$out" = - ]; then
    setsid "$@" &
  else
    setsid "$@" > "$out" 2> "$out.err" &
  fi
  BG_PID=$!
  BG_PIDS+=("$BG_PID")
  BG_GROUPS+=("$BG_PID")
}

# alive PID: true while PID exists and is not a zombie.
alive() {
  local line rest
  { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 1
  rest=${line##*) }
  [[ ${rest%% *} != [ZX] ]]
}

# wait_listening OUT PID VAR [TRIES]: waits (TRIES x 0.1 s, default 100) for a line
# "... listening on URL" in OUT and stores URL in VAR. Fails early if PID exits.
wait_listening() {
  local out=$1 pid=$2 var=$3 tries=${4:-100} i line=
  for ((i = 0; i < tries; i++)); do
    line=$(grep -m1 'listening on' "$out" 2>/dev/null || true)
    [ -n "$line" ] && break
    alive "$pid" || break
    sleep 0.1
  done
  printf -v "$var" '%s' "${line##* }"
  [ -n "$line" ]
}

# in_session SID: sets FOUND to the live processes of session SID.
in_session() {
  local d line rest f
  FOUND=()
  for d in /proc/[0-9]*; do
    { read -r line < "$d/stat"; } 2>/dev/null || continue
    rest=${line##*) }
    read -r -a f <<< "$rest"   # f[0]=state f[1]=ppid f[2]=pgrp f[3]=session
    [[ ${f[0]} == [ZX] ]] && continue
    [ "${f[3]}" = "$1" ] && FOUND+=("${d#/proc/}")
  done
  return 0
}

# with_env KEY=VALUE: sets FOUND to the live processes whose environment holds exactly that
# entry, except this shell ($$ and $BASHPID).
with_env() {
  local d pid kv
  FOUND=()
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] || [ "$pid" = "$BASHPID" ] && continue
    {
      while IFS= read -r -d '' kv; do
        if [ "$kv" = "$1" ]; then
          alive "$pid" && FOUND+=("$pid")
          break
        fi
      done < "$d/environ"
    } 2>/dev/null || true   # gone, or not ours to read
  done
  return 0
}

# cmdline PID: prints PID's command line (one line, cut to 300 characters).
cmdline() {
  local args=()
  { mapfile -d '' -t args < "/proc/$1/cmdline"; } 2>/dev/null || true
  local s="${args[*]}"
  printf '%s\n' "${s:0:300}"
}

# kill_wait TARGET...: sends TERM to each target ("PID" or "-PGID"), waits up to 5 s for the
# processes listed in the array KW_WATCH to go, then sends KILL to the targets and to KW_WATCH.
kill_wait() {
  local t p i left
  for t in "$@"; do kill -TERM -- "$t" 2>/dev/null || true; done
  for ((i = 0; i < 50; i++)); do
    left=0
    for p in "${KW_WATCH[@]}"; do alive "$p" && left=1; done
    [ "$left" -eq 0 ] && return 0
    sleep 0.1
  done
  for t in "$@"; do kill -KILL -- "$t" 2>/dev/null || true; done
  for p in "${KW_WATCH[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  return 0
}

# stop_group SID: stops every process of session SID (TERM, bounded wait, KILL).
stop_group() {
  in_session "$1"
  [ "${#FOUND[@]}" -eq 0 ] && return 0
  KW_WATCH=("${FOUND[@]}")
  kill_wait "-$1"
  in_session "$1"
  if [ "${#FOUND[@]}" -gt 0 ]; then
    KW_WATCH=("${FOUND[@]}")
    kill_wait "${FOUND[@]}"
  fi
  return 0
}

# stop_started: the EXIT trap. Stops every group and process started by bg_start*, and reaps
# them; then removes the directories of own_dir (the ledgers: no host is left to write them).
# Safe to call more than once.
stop_started() {
  local g p
  for g in "${BG_GROUPS[@]}"; do stop_group "$g"; done
  if [ "${#BG_PIDS[@]}" -gt 0 ]; then
    KW_WATCH=("${BG_PIDS[@]}")
    kill_wait "${BG_PIDS[@]}"
    for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  fi
  if [ "${#OWN_DIRS[@]}" -gt 0 ]; then
    rm -rf -- "${OWN_DIRS[@]}"
  fi
  BG_PIDS=(); BG_GROUPS=(); OWN_DIRS=()
  return 0
}
