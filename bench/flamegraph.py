#!/usr/bin/env python3
"""Flame graphs of the host under load (issue 23): `perf record` (cpu-clock, DWARF call
graphs) of one host while wrk drives one kind of request, folded by inferno into an SVG, with
the top functions by self time printed beside it, and the host CPU a request (its CPU time over
the measured wrk run, perf on for most of it, over that run's requests) split three ways by the
samples: the kernel (under a system call's or an interrupt's entry: loopback TCP mostly), the
project's own code (under a function of `mcp_runtime` or `mcp_host`, what it calls included),
and the rest of user space (actix-web, tokio, the allocator: what raw actix-web runs too). In
a build with fat LTO (`bench/pgo.py`'s) our code is inlined into actix-web's frames, so its
second and third figures are not comparable with a release build's.

`--raw-bin PATH` profiles the side-by-side harness's raw actix-web peer (`actix-peer`, which
takes its port as its argument) in place of the host, under the same load: what ours costs
beyond the HTTP round trip is the difference.

Usage:
  python3 bench/flamegraph.py --host-bin target/release/mcp-host --kind legacy-sse \
      --svg bench/profiles/legacy-sse.svg [--seconds 5] [--top 40] [--host-arg=--config --host-arg=FILE]
  python3 bench/flamegraph.py --raw-bin /tmp/pp/rust/target/release/actix-peer --kind legacy-json --svg FILE
Needs perf (linux-perf), wrk and inferno (`cargo install inferno`). Loopback only.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from hostproc import MODERN_META, calls_summary, spawn_host, spawn_peer, stop
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


def cpu_seconds(pid):
    """User plus system CPU time of process `pid` so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# A frame of the project's own code (not one whose generic parameters merely name it, as
# actix's service stack names our server's closures).
OURS = re.compile(r"^\s*<?(mcp_runtime|mcp_host)::")


def split(folded):
    """Shares of the samples in `folded` (inferno's text): kernel, ours, other user space;
    None without samples."""
    kernel = ours = total = 0
    for line in folded.decode(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        n = int(n)
        total += n
        if "entry_SYSCALL" in stack or ";asm_" in stack or "ret_from_fork" in stack:
            kernel += n
        elif any(OURS.match(f) for f in stack.split(";")):
            ours += n
    if not total:
        return None
    return kernel / total, ours / total, (total - kernel - ours) / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host-bin", default="target/release/mcp-host")
    ap.add_argument("--raw-bin", help="profile this raw actix-web peer binary instead of the host")
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
    # SIGTERM ends the script through its `finally`, as Ctrl-C does (a raw peer, wrk and perf
    # have no parent watch of their own).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.kind == "initialize" and not a.raw_bin and not any(x.startswith("--config") for x in a.host_arg):
        # New sessions at full speed from one address pass the default session caps in a
        # second; the side-by-side run's settings raise only those (the ledger stays SQLite).
        a.host_arg += ["--config", os.path.join(HERE, "peers", "ours-bench.toml")]
    work = tempfile.mkdtemp(prefix="mcp-profile-")
    procs = []
    try:
        if a.raw_bin:
            host, url = spawn_peer(os.path.abspath(a.raw_bin), a.host_cpu, procs)
        else:
            # The default log level (info), as a user runs it.
            host, url = spawn_host(
                ["taskset", "-c", a.host_cpu, os.path.abspath(a.host_bin), "--port", "0", "--workers", "1",
                 "--packs", "echo", *a.host_arg], work, procs=procs)
        env = {**os.environ, **load(a.kind, url, a.sessions), "POOL": "10000"}
        wrk = ["taskset", "-c", a.load_cpu, "wrk", "-t1", "-c64", "--timeout", "10s",
               "-s", os.path.join(HERE, "lua", "calls.lua"), url]
        subprocess.run(wrk[:5] + ["-d1s"] + wrk[5:], env=env, stdout=subprocess.DEVNULL, check=True)
        # The host's CPU over the measured run (perf on for most of it) over its requests.
        cpu0 = cpu_seconds(host.pid)
        run = subprocess.Popen(wrk[:5] + [f"-d{a.seconds + 2}s"] + wrk[5:], env=env, stdout=subprocess.PIPE, text=True)
        procs.append(run)
        time.sleep(1)
        data = os.path.join(work, "perf.data")
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "1999", "--call-graph", "dwarf,32768",
                        "-o", data, "-p", str(host.pid), "--", "sleep", str(a.seconds)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out, _ = run.communicate(timeout=60)
        cpu = cpu_seconds(host.pid) - cpu0
        stats = calls_summary(out) or {}
        # perf script's text (hundreds of MB) goes straight into the folder, never into memory.
        script = subprocess.Popen(["perf", "script", "-i", data], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(script)
        folded = subprocess.run(["inferno-collapse-perf"], stdin=script.stdout, check=True, capture_output=True,
                                timeout=600).stdout
        script.stdout.close()
        if script.wait(timeout=60) != 0:
            raise SystemExit("perf script failed")
        who = os.path.basename(a.raw_bin) if a.raw_bin else "mcp-host"
        title = f"{who} {a.kind}: wrk c64, {stats.get('requests', '?')} requests in {a.seconds + 2} s"
        svg = subprocess.run(["inferno-flamegraph", "--title", title, "--width", "1600", "--minwidth", "0.5"], input=folded,
                             check=True, capture_output=True).stdout
        os.makedirs(os.path.dirname(os.path.abspath(a.svg)), exist_ok=True)
        with open(a.svg, "wb") as f:
            f.write(svg)
        report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio",
                                 "--percent-limit", "0.5", "-g", "none"], check=True, capture_output=True, text=True).stdout
        rows = [l for l in report.splitlines() if l.strip() and not l.startswith("#")]
        print(f"{title}; {a.svg}")
        shares = split(folded)
        if stats.get("requests") and shares:
            per_request_us = cpu / stats["requests"] * 1e6
            k, o, u = shares
            print(f"host CPU a request {per_request_us:.2f} us: kernel {k * per_request_us:.2f}, "
                  f"ours {o * per_request_us:.2f}, other user space {u * per_request_us:.2f}")
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
