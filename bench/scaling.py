#!/usr/bin/env python3
"""How the host's echo throughput and p99 change with the number of sessions and of open idle
SSE streams, with 1 and with 2 HTTP workers (issue 23 item 6), drawn as an SVG chart.

- **Sessions**: wrk, 64 connections, legacy `tools/call echo` (SSE) round robin over S
  sessions, S = 1, 16, 64, 256, 1024.
- **Open streams**: K idle GET SSE streams held open (each on its own session, by this
  script's own asyncio client), K = 0, 100, 1000, 10000, while wrk sends the same echo on one
  other session; also the host's RSS.

With `--workers 1` the host is pinned to CPU 1 and wrk to CPU 0 (as bench/peers does); with
`--workers 2` nothing is pinned: on a 2-core machine the host's two workers and wrk then share
both cores, so the load generator takes CPU the server would otherwise have. Hosts run at the
default log level (`info`).

Usage:
  python3 bench/scaling.py --host-bin target/release/mcp-host --workers 1 --workers 2 \
      --json-out bench/results/scaling-DATE.json --svg bench/results/scaling-DATE.svg [--seconds 5]
Needs wrk. Loopback only; stops every process it starts.
"""

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

from hostproc import calls_summary, rss_kib, spawn_host, stop
from nodes import hostport, initialize

HERE = os.path.dirname(os.path.abspath(__file__))
BOTH = "application/json, text/event-stream"
ECHO = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"text": "hello perf anchor"}}}, separators=(",", ":"))
SESSIONS = [1, 16, 64, 256, 1024]
STREAMS = [0, 100, 1000, 10000]


def wrk(url, sids, seconds, pin):
    env = {**os.environ, "BODY": ECHO, "SIDS": ",".join(sids), "HEADERS": f"Accept: {BOTH}|MCP-Protocol-Version: 2025-11-25"}
    cmd = (["taskset", "-c", "0"] if pin else []) + ["wrk", "-t1", "-c64", f"-d{seconds}s", "--timeout", "10s",
                                                    "-s", os.path.join(HERE, "lua", "calls.lua"), url]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 60).stdout
    r = calls_summary(out)
    if r is None:
        raise SystemExit(f"wrk failed: {out[-400:]}")
    errors = sum(r[k] for k in ("err_connect", "err_read", "err_write", "err_status", "err_timeout"))
    return {"rps": round(r["requests"] / (r["duration_us"] / 1e6)), "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000, "errors": errors}


HOLDER = r'''
import asyncio, json, sys
host, port = sys.argv[1], int(sys.argv[2])
INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "scaling", "version": "1"}}}).encode()
DONE = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
def req(method, headers, body=b""):
    h = {"Host": f"{host}:{port}", **headers}
    if body:
        h["Content-Type"] = "application/json"; h["Content-Length"] = str(len(body))
    return (f"{method} /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode() + body
async def response(r):
    head = (await r.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1]); hd = {}
    for l in head[1:]:
        if ":" in l:
            k, v = l.split(":", 1); hd[k.strip().lower()] = v.strip()
    if "content-length" in hd:
        await r.readexactly(int(hd["content-length"]))
    elif hd.get("transfer-encoding") == "chunked" and hd.get("content-type", "").startswith("application/json"):
        while True:
            n = int((await r.readline()).strip(), 16); await r.readexactly(n + 2)
            if n == 0: break
    return status, hd
held = []
async def one(sem):
    # Every step of a stream's setup within one deadline.
    async with sem:
        await asyncio.wait_for(setup(), 60)
async def setup():
        r, w = await asyncio.open_connection(host, port)
        w.write(req("POST", {"Accept": "application/json"}, INIT)); st, hd = await response(r)
        sid = hd["mcp-session-id"]
        w.write(req("POST", {"Accept": "application/json", "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}, DONE)); await response(r)
        w.write(req("GET", {"Accept": "text/event-stream", "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}))
        st, hd = await asyncio.wait_for(response(r), 30)
        if st != 200: raise RuntimeError(f"GET {st}")
        held.append(w)
        async def drain():
            try:
                while await r.read(4096): pass
            except Exception: pass
        asyncio.get_running_loop().create_task(drain())
async def main():
    sem = asyncio.Semaphore(128)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line: return
        target = int(line)
        await asyncio.gather(*(one(sem) for _ in range(target - len(held))))
        print(f"OPEN {len(held)}", flush=True)
asyncio.run(main())
'''


def run_config(a, workers, work):
    pin = workers == 1
    procs = []
    rows = {"sessions": [], "streams": []}
    try:
        cmd = (["taskset", "-c", "1"] if pin else []) + [
            os.path.abspath(a.host_bin), "--port", "0", "--workers", str(workers), "--packs", "echo",
            "--config", os.path.join(HERE, "peers", "ours-bench.toml")]
        host, url = spawn_host(cmd, work, procs=procs)
        sids = [initialize(url) for _ in range(max(SESSIONS))]
        wrk(url, sids[:1], 1, pin)  # warm-up
        for s in SESSIONS:
            r = {"sessions": s, **wrk(url, sids[:s], a.seconds, pin)}
            # Right after the run: the closed streams its sessions retain are still held.
            r["rss_mib"] = round(rss_kib(host.pid) / 1024, 1)
            rows["sessions"].append(r)
            print(f"workers {workers}: {s:5d} sessions: {r}", flush=True)
        h, port = hostport(url)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, h, str(port)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        procs.append(holder)
        for k in STREAMS:
            if k:
                holder.stdin.write(f"{k}\n")
                holder.stdin.flush()
                # Each stream's setup has its own 60 s deadline; this bounds the whole batch.
                ready, _, _ = select.select([holder.stdout], [], [], 600)
                line = holder.stdout.readline() if ready else ""
                if not line.startswith("OPEN"):
                    raise SystemExit(f"stream holder failed: {line!r}")
            time.sleep(1)
            r = {"streams": k, "rss_mib": round(rss_kib(host.pid) / 1024, 1), **wrk(url, sids[:1], a.seconds, pin)}
            rows["streams"].append(r)
            print(f"workers {workers}: {k:5d} open streams: {r}", flush=True)
    finally:
        for p in reversed(procs):
            stop(p)
    return rows


def svg_chart(results, path):
    """Two panels (sessions, open streams), req/s (solid) and p99 (dashed) per worker count."""
    w, h, pad = 520, 300, 60
    colours = {1: "#1f77b4", 2: "#d62728"}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{h + 40}" font-family="sans-serif" font-size="12">',
           f'<rect width="{2 * w}" height="{h + 40}" fill="white"/>']
    for panel, (key, xs, title) in enumerate((("sessions", SESSIONS, "sessions (wrk c=64, legacy SSE echo)"),
                                               ("streams", STREAMS, "open idle SSE streams (echo on one more session)"))):
        x0 = panel * w
        pos = {x: x0 + pad + i * (w - 2 * pad) / (len(xs) - 1) for i, x in enumerate(xs)}
        rps_max = max(r["rps"] for res in results.values() for r in res[key]) * 1.1
        p99_max = max(r["p99_ms"] for res in results.values() for r in res[key]) * 1.1
        y = lambda v, m: h - pad + 20 - v / m * (h - 2 * pad)
        out.append(f'<text x="{x0 + w / 2}" y="18" text-anchor="middle" font-weight="bold">{title}</text>')
        out.append(f'<line x1="{x0 + pad}" y1="{h - pad + 20}" x2="{x0 + w - pad}" y2="{h - pad + 20}" stroke="black"/>')
        out.append(f'<line x1="{x0 + pad}" y1="{pad - 20}" x2="{x0 + pad}" y2="{h - pad + 20}" stroke="black"/>')
        out.append(f'<line x1="{x0 + w - pad}" y1="{pad - 20}" x2="{x0 + w - pad}" y2="{h - pad + 20}" stroke="black"/>')
        for x in xs:
            out.append(f'<text x="{pos[x]}" y="{h - pad + 36}" text-anchor="middle">{x:,}</text>')
        for f in (0, 0.5, 1):
            out.append(f'<text x="{x0 + pad - 4}" y="{y(rps_max * f, rps_max) + 4}" text-anchor="end">{rps_max * f / 1000:.0f}k</text>')
            out.append(f'<text x="{x0 + w - pad + 4}" y="{y(p99_max * f, p99_max) + 4}">{p99_max * f:.1f}</text>')
        out.append(f'<text x="{x0 + 12}" y="{h / 2}" transform="rotate(-90 {x0 + 12} {h / 2})" text-anchor="middle">req/s (solid)</text>')
        out.append(f'<text x="{x0 + w - 10}" y="{h / 2}" transform="rotate(90 {x0 + w - 10} {h / 2})" text-anchor="middle">p99 ms (dashed)</text>')
        for workers, res in results.items():
            c = colours.get(workers, "black")
            pts = " ".join(f"{pos[r[key]]:.1f},{y(r['rps'], rps_max):.1f}" for r in res[key])
            out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2"/>')
            pts = " ".join(f"{pos[r[key]]:.1f},{y(r['p99_ms'], p99_max):.1f}" for r in res[key])
            out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="2" stroke-dasharray="5,4"/>')
    for i, workers in enumerate(results):
        label = "1 worker, pinned (wrk on the other core)" if workers == 1 else f"{workers} workers, unpinned (sharing both cores with wrk)"
        out.append(f'<text x="{pad + i * 420}" y="{h + 30}" fill="{colours.get(workers, "black")}">■ {label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host-bin", default="target/release/mcp-host")
    ap.add_argument("--workers", type=int, action="append")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--json-out")
    ap.add_argument("--svg")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("scaling.py: wrk not found")
    results = {}
    for workers in a.workers or [1, 2]:
        work = tempfile.mkdtemp(prefix="mcp-scaling-")
        try:
            results[workers] = run_config(a, workers, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"seconds": a.seconds, "results": {str(k): v for k, v in results.items()}}, f, indent=2)
    if a.svg:
        svg_chart(results, a.svg)


if __name__ == "__main__":
    main()
