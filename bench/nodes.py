#!/usr/bin/env python3
"""One node on SQLite, one node on Redis, 2 and 3 nodes on one Redis, in one run (issue 21
item 9): echo calls per second and their latency (2025-11-25 with SSE, 2025-11-25 with JSON,
2026-07-28 stateless JSON), and resume latency.

What it starts (all on 127.0.0.1, stopped on every exit path): its own redis-server (a free
port, a temporary directory, nothing persisted), then for each configuration its hosts
(`--workers 1`, packs conformance, echo, ledger; every node of a configuration shares one key
file and one Redis key prefix, `ledger.redis_shared = true` from 2 nodes on).

- **Calls per second** (wrk, `bench/lua/calls.lua`): `--connections` connections in all, split
  evenly over the nodes (one wrk per node, run at the same time). Legacy calls go round robin
  over `--sessions` sessions, each made on another node than the one its calls go to, so every
  node serves sessions it did not make (no affinity; the first call of each revives it).
  Reported: the sum of the calls per second, the slowest node's p50 and p99 (conservative:
  wrk's histograms are not merged), errors.
- **Resume latency** (`mcp-load run`, the resilient client): the 100 ms
  `test_tool_with_progress` with 30 % of its streams cut after an event; with several nodes
  the client goes through mcp-load's proxy, which sends each request, resumes included, to the
  next node. Reported: disconnect to first replayed event, p50 / p99 / max (ms), including the
  `retry` wait the server asks for (1 s by default: a client must not resume sooner).

Pinning (`--pin`, default on with 2 or more CPUs): the hosts and Redis on CPU 0, the load on
CPU 1. On a 2-core machine the 2 and 3 node figures therefore measure what sharing one ledger
costs (Redis round trips, revives, the bus) on the same core, not scale-out: more nodes share
the core that one node had to itself.

Usage:
  python3 bench/nodes.py [--host-bin target/release/mcp-host] [--load-bin target/release/mcp-load]
      [--seconds 10] [--connections 64] [--sessions 64] [--json-out FILE]
"""

import argparse
import http.client
import json
import os
import shutil
import subprocess
import tempfile

from hostproc import MODERN_META, calls_summary, spawn_host, stop
from redis_commands import free_port, start_redis, wait_for_redis

HERE = os.path.dirname(os.path.abspath(__file__))
LEGACY = "2025-11-25"
MODERN = "2026-07-28"


def pinned(cpu, argv, pin):
    return (["taskset", "-c", str(cpu)] + argv) if pin else argv


def start_host(a, work, args, procs):
    """One mcp-host on a free port; its URL once it listens (within 30 s)."""
    _, url = spawn_host(
        pinned(0, [os.path.abspath(a.host_bin), "--port", "0", "--admin-port", "0", "--workers", "1",
                   "--packs", "conformance,echo,ledger",
                   "--ledger-path", os.path.join(work, "mcp-host.db")] + args, a.pin),
        work, log="warn", deadline_s=30, procs=procs)
    return url


def hostport(url):
    h, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    return h, int(port)


def initialize(url):
    c = http.client.HTTPConnection(*hostport(url), timeout=30)
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "bench-nodes", "version": "1"}}}
    c.request("POST", "/mcp", json.dumps(body), {"Content-Type": "application/json", "Accept": "application/json"})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        raise SystemExit(f"initialize on {url}: HTTP {r.status}")
    sid = r.getheader("mcp-session-id")
    c.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
              {"Content-Type": "application/json", "Accept": "application/json",
               "Mcp-Session-Id": sid, "MCP-Protocol-Version": LEGACY})
    c.getresponse().read()
    return sid


def wrk_all(a, urls, mode, sids_by_node):
    """One wrk per node at once; the per-node summaries."""
    echo = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "bench"}}}
    if mode == "modern-json":
        echo["params"]["_meta"] = MODERN_META
        headers = f"Accept: application/json|MCP-Protocol-Version: {MODERN}|Mcp-Method: tools/call|Mcp-Name: echo"
    elif mode == "legacy-json":
        headers = f"Accept: application/json|MCP-Protocol-Version: {LEGACY}"
    else:
        headers = f"Accept: application/json, text/event-stream|MCP-Protocol-Version: {LEGACY}"
    per_node = max(1, a.connections // len(urls))
    runs = []
    for i, url in enumerate(urls):
        sids = "" if mode == "modern-json" else ",".join(sids_by_node[i])
        # Compact: calls.lua rewrites the first `"id":N` of the body.
        env = {**os.environ, "BODY": json.dumps(echo, separators=(",", ":")), "SIDS": sids, "HEADERS": headers}
        runs.append(subprocess.Popen(
            pinned(1, ["wrk", "-t1", f"-c{per_node}", f"-d{a.seconds}s", "--timeout", "10s",
                       "-s", os.path.join(HERE, "lua", "calls.lua"), url], a.pin),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    out = []
    try:
        for p in runs:
            text, _ = p.communicate(timeout=a.seconds + 60)
            summary = calls_summary(text)
            if summary is None:
                raise SystemExit(f"wrk failed: {text[-400:]}")
            out.append(summary)
    finally:
        for p in runs:
            stop(p)
    return out


def summarize(runs):
    rps = sum(r["requests"] / (r["duration_us"] / 1e6) for r in runs)
    errors = sum(r[k] for r in runs for k in ("err_connect", "err_read", "err_write", "err_status", "err_timeout"))
    # Per node, then the slowest node's (conservative: wrk's histograms are not merged).
    return {"calls_per_s": round(rps), "slowest_p50_ms": round(max(r["p50_us"] for r in runs) / 1000, 2),
            "slowest_p99_ms": round(max(r["p99_us"] for r in runs) / 1000, 2), "errors": errors,
            "requests": sum(r["requests"] for r in runs)}


def resumes(a, urls):
    argv = [os.path.abspath(a.load_bin), "run", "--url", urls[0], "--clients", "16",
            "--seconds", str(a.seconds), "--call", "test_tool_with_progress", "--cut-rate", "0.3",
            "--no-progress"]
    for u in urls[1:]:
        argv += ["--also-url", u]
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        r = subprocess.run(pinned(1, argv + ["--json-out", f.name], a.pin),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=a.seconds + 120)
        if r.returncode != 0:
            raise SystemExit(f"mcp-load run failed: {r.stderr[-400:]}")
        with open(f.name) as out:
            report = json.load(out)
    q = report.get("resume_ms") or {}
    return {"calls_ok": report["calls_ok"], "calls_failed": report["calls_failed"],
            "resumes": report["resumes"], "resume_p50_ms": q.get("p50"), "resume_p99_ms": q.get("p99"),
            "resume_max_ms": q.get("max")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host-bin", default="target/release/mcp-host")
    ap.add_argument("--load-bin", default="target/release/mcp-load")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--no-pin", dest="pin", action="store_false", default=(os.cpu_count() or 1) >= 2)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    for tool in ("redis-server", "wrk") + (("taskset",) if a.pin else ()):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is not installed (apt-get install {'redis-server' if tool == 'redis-server' else tool})")
    top = tempfile.TemporaryDirectory(prefix="mcp-bench-nodes-")
    rport = free_port()
    procs = []
    redis = start_redis(top.name, rport, ["taskset", "-c", "0"] if a.pin else [])
    results = []
    try:
        wait_for_redis(rport)
        for backend, nodes in (("sqlite", 1), ("redis", 1), ("redis", 2), ("redis", 3)):
            work = os.path.join(top.name, f"{backend}-{nodes}")
            os.mkdir(work)
            args = []
            if backend == "redis":
                args = ["--ledger", f"redis://127.0.0.1:{rport}/0", "--set", f'ledger.redis_prefix="bench-{nodes}:"']
                if nodes > 1:
                    args += ["--set", "ledger.redis_shared=true"]
            urls = [start_host(a, work, args, procs) for _ in range(nodes)]
            # Each node's calls use sessions another node made.
            sids_by_node = [[initialize(urls[(i + 1) % nodes]) for _ in range(max(1, a.sessions // nodes))]
                            for i in range(nodes)]
            row = {"backend": backend, "nodes": nodes}
            for mode in ("legacy-sse", "legacy-json", "modern-json"):
                row[mode] = summarize(wrk_all(a, urls, mode, sids_by_node))
            row["resume"] = resumes(a, urls)
            results.append(row)
            print(json.dumps(row), flush=True)
            for p in procs:
                stop(p)
            procs.clear()
        print()
        print("| ledger | nodes | legacy SSE calls/s (slowest p99 ms) | legacy JSON calls/s (slowest p99 ms) | 2026-07-28 JSON calls/s (slowest p99 ms) | resume p50 / p99 / max ms (resumes) |")
        print("|---|---:|---:|---:|---:|---|")
        for r in results:
            cell = lambda m: f"{r[m]['calls_per_s']} ({r[m]['slowest_p99_ms']})" + (f", {r[m]['errors']} errors" if r[m]["errors"] else "")
            q = r["resume"]
            print(f"| {r['backend']} | {r['nodes']} | {cell('legacy-sse')} | {cell('legacy-json')} | {cell('modern-json')} | "
                  f"{q['resume_p50_ms']} / {q['resume_p99_ms']} / {q['resume_max_ms']} ({q['resumes']}) |")
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump({"seconds": a.seconds, "connections": a.connections, "sessions": a.sessions,
                           "pinned": a.pin, "results": results}, f, indent=1)
    finally:
        for p in procs + [redis]:
            stop(p)
        top.cleanup()


if __name__ == "__main__":
    main()
