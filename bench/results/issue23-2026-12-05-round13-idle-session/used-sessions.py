#!/usr/bin/env python3
"""RSS per idle session that was used: N sessions each make initialize, notifications/initialized
and one tools/call echo answered as JSON (no stream kept for a resume), then stay idle. Starts
BIN (pinned to CPU 1, a temporary work dir), prints RSS idle, right after, and SETTLE s later
(the sessions hibernate after 1 s by default), then stops the host. Loopback only.
  python3 used-sessions.py BIN [N=10000] [SETTLE=25]"""
import http.client, json, os, shutil, signal, subprocess, sys, tempfile, time

BIN = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
SETTLE = float(sys.argv[3]) if len(sys.argv) > 3 else 25
PORT = 21530
CFG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../peers/ours-bench.toml")


def rss_kib(pid, field="VmRSS:"):
    """VmRSS (or another field of /proc/PID/status, such as RssAnon:), KiB."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field))


def post(conn, body, sid=None):
    """POST body (a JSON-RPC error counts as a failure); the session id header."""
    h = {"Content-Type": "application/json", "Accept": "application/json",
         "MCP-Protocol-Version": "2025-11-25"}
    if sid:
        h["Mcp-Session-Id"] = sid
    conn.request("POST", "/mcp", json.dumps(body), h)
    r = conn.getresponse()
    data = r.read()
    if r.status >= 300 or (data and "error" in json.loads(data)):
        raise SystemExit(f"status {r.status}: {data[:200]!r}")
    return r.getheader("Mcp-Session-Id")


# A TERM or HUP (a `timeout`, a closed terminal) unwinds like Ctrl-C: the host is stopped.
for sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda *_: sys.exit(1))
work = tempfile.mkdtemp(prefix="used-sessions-")
host = None
try:
    # Loopback only, whatever the environment's MCP_HOST_* variables say; the host exits if
    # this script dies without stopping it (SIGKILL).
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_HOST_")}
    env["MCP_HOST_EXIT_WITH_PARENT"] = "1"
    host = subprocess.Popen(["taskset", "-c", "1", BIN, "--bind", "127.0.0.1", "--port", str(PORT),
                             "--workers", "1", "--no-admin", "--config", CFG], cwd=work, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        if host.poll() is not None:
            raise SystemExit(f"the host exited with {host.returncode} (port {PORT} taken?)")
        if time.monotonic() > deadline:
            raise SystemExit("the host did not answer within 10 s")
        try:
            c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=1)
            try:
                c.request("GET", "/mcp")
                c.getresponse().read()
            finally:
                c.close()
            break
        except OSError:
            time.sleep(0.1)
    time.sleep(1)
    if host.poll() is not None:
        raise SystemExit(f"the host exited with {host.returncode}: another answered on {PORT}")
    idle, idle_anon = rss_kib(host.pid), rss_kib(host.pid, "RssAnon:")
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=10)
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "used-sessions", "version": "0"}}}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}}}
    for _ in range(N):
        sid = post(conn, init)
        post(conn, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        post(conn, call, sid)
    conn.close()
    right_after = rss_kib(host.pid)
    time.sleep(SETTLE)
    after, after_anon = rss_kib(host.pid), rss_kib(host.pid, "RssAnon:")
    # Anonymous memory alone too: the binary's pages a run touches move the total by up to a
    # MiB between builds.
    print(f"used sessions={N} idle={idle/1024:.1f}MiB right_after={right_after/1024:.1f}MiB "
          f"after_{SETTLE:g}s={after/1024:.1f}MiB per_session={(after-idle)/N:.2f}KiB "
          f"anon_per_session={(after_anon-idle_anon)/N:.2f}KiB")
finally:
    # A second TERM or HUP must not cut the stop short.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    if host is not None:
        host.terminate()
        try:
            host.wait(timeout=20)
        except subprocess.TimeoutExpired:
            host.kill()
            host.wait()
    shutil.rmtree(work, ignore_errors=True)
