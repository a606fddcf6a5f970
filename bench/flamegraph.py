#!/usr/bin/env python3
"""Flame graphs of the host under load (issue 23): `perf record` (cpu-clock, DWARF call
graphs) of one host while wrk drives one kind of request, folded by inferno into an SVG, with
the top functions by self time printed beside it.

Kinds: `legacy-sse` (`tools/call echo` on one 2025-11-25 session, answered as SSE),
`legacy-json` (the same, Accept: application/json), `modern-json` (2026-07-28 stateless
`tools/call echo`, JSON), `initialize` (each request a new session on the default SQLite
ledger). The host runs with one worker on CPU 1 (`--host-cpu`) at the default log level
(`info`), wrk with 64 connections on CPU 0, in a temporary directory (its own ledger), started
and stopped here.

Usage:
  python3 bench/flamegraph.py --host-bin target/release/mcp-host --kind legacy-sse \
      --svg bench/profiles/legacy-sse.svg [--seconds 5] [--top 40] [--host-arg=--config --host-arg=FILE]
Needs perf (linux-perf), wrk and inferno (`cargo install inferno`). Loopback only.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from hostproc import MODERN_META, calls_summary, spawn_host, stop
from nodes import initialize

HERE = os.path.dirname(os.path.abspath(__file__))
BOTH = "application/json, text/event-stream"


def load(kind, url, sessions=1):
    """wrk's environment for `kind`: BODY, HEADERS, SIDS (`sessions` of them for the legacy
    kinds: wrk's connections take them in turn)."""
    call = {"name": "echo", "arguments": {"text": "hello perf anchor"}}
    if kind == "initialize":
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench-profile", "version": "1"}}
        return {"BODY": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, separators=(",", ":")),
                "HEADERS": f"Accept: {BOTH}", "SIDS": ""}
    if kind == "modern-json":
        return {"BODY": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**call, "_meta": MODERN_META}}, separators=(",", ":")),
                "HEADERS": "Accept: application/json|MCP-Protocol-Version: 2026-07-28|Mcp-Method: tools/call|Mcp-Name: echo", "SIDS": ""}
    accept = BOTH if kind == "legacy-sse" else "application/json"
    return {"BODY": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}, separators=(",", ":")),
            "HEADERS": f"Accept: {accept}|MCP-Protocol-Version: 2025-11-25",
            "SIDS": ",".join(initialize(url) for _ in range(sessions))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host-bin", default="target/release/mcp-host")
    ap.add_argument("--kind", required=True, choices=["legacy-sse", "legacy-json", "modern-json", "initialize"])
    ap.add_argument("--svg", required=True)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--sessions", type=int, default=1, help="legacy kinds: sessions the calls share (64: the side-by-side a64)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--host-cpu", default="1")
    ap.add_argument("--load-cpu", default="0")
    ap.add_argument("--host-arg", action="append", default=[])
    ap.add_argument("--folded", help="also keep the folded stacks (inferno-collapse-perf) in this file")
    a = ap.parse_args()
    for tool in ("perf", "wrk", "inferno-collapse-perf", "inferno-flamegraph"):
        if not shutil.which(tool):
            raise SystemExit(f"flamegraph.py: {tool} not found")
    if a.kind == "initialize" and not any(x.startswith("--config") for x in a.host_arg):
        # New sessions at full speed from one address pass the default session caps in a
        # second; the side-by-side run's settings raise only those (the ledger stays SQLite).
        a.host_arg += ["--config", os.path.join(HERE, "peers", "ours-bench.toml")]
    work = tempfile.mkdtemp(prefix="mcp-profile-")
    procs = []
    try:
        # The default log level (info), as a user runs it.
        host, url = spawn_host(
            ["taskset", "-c", a.host_cpu, os.path.abspath(a.host_bin), "--port", "0", "--workers", "1",
             "--packs", "echo", *a.host_arg], work, procs=procs)
        env = {**os.environ, **load(a.kind, url, a.sessions), "POOL": "10000"}
        wrk = ["taskset", "-c", a.load_cpu, "wrk", "-t1", "-c64", "--timeout", "10s",
               "-s", os.path.join(HERE, "lua", "calls.lua"), url]
        subprocess.run(wrk[:5] + ["-d1s"] + wrk[5:], env=env, stdout=subprocess.DEVNULL, check=True)
        run = subprocess.Popen(wrk[:5] + [f"-d{a.seconds + 2}s"] + wrk[5:], env=env, stdout=subprocess.PIPE, text=True)
        procs.append(run)
        time.sleep(1)
        data = os.path.join(work, "perf.data")
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "1999", "--call-graph", "dwarf,32768",
                        "-o", data, "-p", str(host.pid), "--", "sleep", str(a.seconds)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out, _ = run.communicate(timeout=60)
        stats = calls_summary(out) or {}
        # perf script's text (hundreds of MB) goes straight into the folder, never into memory.
        script = subprocess.Popen(["perf", "script", "-i", data], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(script)
        folded = subprocess.run(["inferno-collapse-perf"], stdin=script.stdout, check=True, capture_output=True,
                                timeout=600).stdout
        script.stdout.close()
        if script.wait(timeout=60) != 0:
            raise SystemExit("perf script failed")
        title = f"mcp-host {a.kind}: wrk c64, {stats.get('requests', '?')} requests in {a.seconds + 2} s"
        svg = subprocess.run(["inferno-flamegraph", "--title", title, "--width", "1600", "--minwidth", "0.5"], input=folded,
                             check=True, capture_output=True).stdout
        os.makedirs(os.path.dirname(os.path.abspath(a.svg)), exist_ok=True)
        with open(a.svg, "wb") as f:
            f.write(svg)
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio",
                                 "--percent-limit", "0.5", "-g", "none"], check=True, capture_output=True, text=True).stdout
        rows = [l for l in report.splitlines() if l.strip() and not l.startswith("#")]
        print(f"{title}; {a.svg}")
        for l in rows[:a.top]:
            print(" ".join(l.split()).rstrip(" -"))
        if a.folded:
            with open(a.folded, "wb") as f:
                f.write(folded)
    finally:
        for p in reversed(procs):
            stop(p, timeout_s=10, sig=signal.SIGTERM if p is procs[0] else signal.SIGINT)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
