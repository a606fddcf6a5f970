"""What the bench scripts share: starting an mcp-host and reading its URL within a deadline,
starting a side-by-side peer binary, stopping a process, a process's RSS, the summary
`lua/calls.lua` prints, the `_meta` of a 2026-07-28 request, and a session-era handshake and SSE
echo call on a kept-alive connection."""

import json
import os
import signal
import socket
import subprocess
import threading
import time

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}


def spawn_host(argv, cwd, log="info", deadline_s=60, procs=None):
    """Start `argv` (an mcp-host command line, `--port 0` included) in `cwd`; return the
    process and the URL it prints first, within `deadline_s` (else it is killed and this
    raises). The rest of its stdout is read and dropped, so it never blocks on a full pipe.
    Appended to `procs` (if given) before waiting, so the caller's cleanup stops it on any
    exit path."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=cwd,
                         env={**os.environ, "MCP_HOST_LOG": log, "MCP_HOST_EXIT_WITH_PARENT": "1"})
    if procs is not None:
        procs.append(p)
    first = []
    threading.Thread(target=lambda: (first.append(p.stdout.readline()), p.stdout.read()), daemon=True).start()
    deadline = time.monotonic() + deadline_s
    while not first and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.01)
    if not first or not first[0]:
        if p.poll() is None:
            p.kill()
            p.wait()
        raise SystemExit(f"{os.path.basename(argv[0])} did not print its URL within {deadline_s} s")
    return p, first[0].split()[-1]


def free_port():
    """A loopback port free at the time of asking (another process may take it before use)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_peer(binary, cpu, procs, deadline_s=30):
    """Start a side-by-side peer binary that takes its port as its one argument (raw
    actix-web's `actix-peer`) on a free loopback port, pinned to `cpu`; return the process and
    its URL once it accepts connections (else it is stopped and this raises). Appended to
    `procs` before waiting, so the caller's cleanup stops it on any exit path."""
    port = free_port()
    p = subprocess.Popen(["taskset", "-c", str(cpu), binary, str(port)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    procs.append(p)
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if p.poll() is not None:
                raise SystemExit(f"{os.path.basename(binary)} exited {p.returncode} before it listened")
            if time.monotonic() > deadline:
                stop(p)
                raise SystemExit(f"{os.path.basename(binary)} did not listen within {deadline_s} s")
            time.sleep(0.05)


def stop(p, timeout_s=15, sig=signal.SIGTERM):
    """Send `sig` to `p` if it runs (SIGTERM: a host drains and exits), SIGKILL it past
    `timeout_s` seconds, and reap it. `p` may be None."""
    if p is not None and p.poll() is None:
        p.send_signal(sig)
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def rss_kib(pid):
    """The resident set of process `pid` (KiB), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def initialize(conn, client, version="2025-11-25"):
    """A session-era `initialize` as `client` on `conn` (an `http.client` connection, kept
    alive); returns the session id, raises unless answered 200 with one."""
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": client, "version": "1"}}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    conn.request("POST", "/mcp", json.dumps(body), {"Content-Type": "application/json", "Accept": "application/json"})
    r = conn.getresponse()
    r.read()
    sid = r.getheader("mcp-session-id")
    if r.status != 200 or not sid:
        raise RuntimeError(f"initialize: status {r.status}, session id {sid!r}")
    return sid


def echo_sse(conn, sid, request_id, version="2025-11-25"):
    """`tools/call echo` with id `request_id` in session `sid` on `conn`, accepting SSE (the
    reply is a stream its session keeps for a late resume); raises unless it answered."""
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hello"}}}
    conn.request("POST", "/mcp", json.dumps(body), {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                                                   "Mcp-Session-Id": sid, "MCP-Protocol-Version": version})
    r = conn.getresponse()
    text = r.read()
    if r.status != 200 or b'"result"' not in text:
        raise RuntimeError(f"call {request_id}: status {r.status}: {text[:200]!r}")


def calls_summary(text):
    """The `CALLSJSON {...}` line `lua/calls.lua` prints at wrk's end, parsed; None without one."""
    line = next((l for l in text.splitlines() if l.startswith("CALLSJSON ")), None)
    return json.loads(line[len("CALLSJSON "):]) if line else None
