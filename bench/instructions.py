#!/usr/bin/env python3
"""Server instructions per request, counted by valgrind's callgrind: a figure that does not
depend on what else the machine is doing (wall-clock benchmarks on a shared 2-core machine
vary by tens of percent from run to run; instruction counts repeat).

Each build is started under callgrind with one worker and the `echo` pack; one session sends
N1, then (in a second run) N2 sequential `tools/call echo` requests on one keep-alive
connection; (I(N2) - I(N1)) / (N2 - N1) is the cost of one request, start-up and shutdown
cancelled out. Reply modes: SSE (Accept: both) and JSON (Accept: application/json).

Usage:
  python3 bench/instructions.py NAME=PATH [NAME=PATH ...] [--n1 1000] [--n2 4000] [--json-out FILE]
      [--keep-dir DIR]   (keep each callgrind profile as DIR/NAME-MODE-N.out, for callgrind_annotate)
  (a PATH may carry host flags after a comma: new=target/release/mcp-host,--config,x.toml)
Needs valgrind. Talks to 127.0.0.1 only; stops every host it starts.
"""

import argparse
import http.client
import json
import os
import signal
import subprocess
import tempfile


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "instructions", "version": "1"}}


def count(cmd, n, sse, keep=None, modern=False):
    """Instructions of the host process that served `n` echo calls (its profile kept at `keep`)."""
    if keep:
        out = keep
    else:
        fd, out = tempfile.mkstemp(prefix="callgrind-", suffix=".out")
        os.close(fd)
    # The host runs in a directory of its own, removed afterwards: builds with a ledger keep
    # their default `mcp-host.db` there (the SQLite default is what is measured).
    workdir = tempfile.TemporaryDirectory(prefix="mcp-instructions-")
    cmd = [os.path.abspath(cmd[0]), *cmd[1:]]
    host = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={os.path.abspath(out)}", *cmd, "--port", "0", "--workers", "1", "--packs", "echo"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=workdir.name,
        env={**os.environ, "MCP_HOST_LOG": "warn", "MCP_HOST_EXIT_WITH_PARENT": "1"})
    try:
        url = host.stdout.readline().split()[-1]
        hostport = url.split("//")[1].split("/")[0]
        h, port = hostport.rsplit(":", 1)
        c = http.client.HTTPConnection(h, int(port), timeout=120)
        accept = "application/json, text/event-stream" if sse else "application/json"
        if modern:
            headers = {"Content-Type": "application/json", "Accept": accept, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
            params = {"name": "echo", "arguments": {"text": "hello"}, "_meta": MODERN_META}
            return serve(c, host, out, n, headers, params)
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "instructions", "version": "1"}}}
        c.request("POST", "/mcp", json.dumps(init), {"Content-Type": "application/json", "Accept": "application/json"})
        r = c.getresponse()
        r.read()
        sid = r.getheader("mcp-session-id")
        headers = {"Content-Type": "application/json", "Accept": accept, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        return serve(c, host, out, n, headers, {"name": "echo", "arguments": {"text": "hello"}})
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        if not keep:
            os.remove(out)
        workdir.cleanup()


def serve(c, host, out, n, headers, params):
    """Send `n` echo calls, stop the host, return its instruction total."""
    for i in range(n):
        body = {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": params}
        c.request("POST", "/mcp", json.dumps(body), headers)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError(f"request {i}: status {r.status}")
    c.close()
    host.send_signal(signal.SIGTERM)
    host.wait(timeout=120)
    total = None
    with open(out) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    if total is None:
        raise RuntimeError("callgrind wrote no total")
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="NAME=PATH[,host flags]")
    ap.add_argument("--n1", type=int, default=1000)
    ap.add_argument("--n2", type=int, default=4000)
    ap.add_argument("--json-out")
    ap.add_argument("--keep-dir")
    ap.add_argument("--modern", action="store_true", help="also count 2026-07-28 stateless calls (no session) on each build")
    a = ap.parse_args()
    rows = []
    eras = (False, True) if a.modern else (False,)
    for sse in (True, False):
        for b, modern in ((b, m) for b in a.builds for m in eras):
            name, spec = b.split("=", 1)
            cmd = spec.split(",")
            mode = ("modern " if modern else "") + ("SSE" if sse else "JSON")
            keep = (lambda n: os.path.join(a.keep_dir, f"{name}-{mode.replace(' ', '-')}-{n}.out")) if a.keep_dir else (lambda n: None)
            per = (count(cmd, a.n2, sse, keep(a.n2), modern) - count(cmd, a.n1, sse, keep(a.n1), modern)) / (a.n2 - a.n1)
            rows.append({"build": name, "mode": mode, "instructions_per_request": round(per)})
            print(f"| {name} | {mode} | {per:,.0f} |", flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"n1": a.n1, "n2": a.n2, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
