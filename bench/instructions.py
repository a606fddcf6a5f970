#!/usr/bin/env python3
"""Server instructions per request, counted by valgrind's callgrind: a figure that does not
depend on what else the machine is doing (wall-clock benchmarks on a shared 2-core machine
vary by tens of percent from run to run; instruction counts repeat).

Each build is started under callgrind with one worker, the `echo` pack and the default log
level (`info`: what a level costs is part of what a user runs); one session sends
N1, then (in a second run) N2 sequential `tools/call echo` requests on one keep-alive
connection; (I(N2) - I(N1)) / (N2 - N1) is the cost of one request, start-up and shutdown
cancelled out. `initialize` is counted up to a dump of the profile taken after the last
handshake (`callgrind_control -d`), before the host is stopped: each session it made costs the
stop a write of its own (its row in the ledger's LRU index), which is the stop's work, not the
handshake's, and would not cancel out. Reply modes: SSE (Accept: both) and JSON (Accept: application/json). The same
difference of the profiles' call counts gives the allocations of one request (calls to malloc
and its kin, glibc's or jemalloc's, on every thread); `--check` looks at instructions only.

Usage:
  python3 bench/instructions.py NAME=PATH [NAME=PATH ...] [--n1 1000] [--n2 4000] [--json-out FILE]
      [--modern] [--initialize]
      [--keep-dir DIR]   (keep each callgrind profile as DIR/NAME-MODE-N.out, for callgrind_annotate)
      [--alloc-callers N] (the N functions that call the allocator most a request, by the same
                          difference; inlined functions count as their caller)
  python3 bench/instructions.py --check bench/baseline.json new=target/release/mcp-host
      (the regression guard of the test command: each mode of the baseline measured with its n1
      and n2; exit status 1 when one grew more than its tolerance, 10 %)
  (a PATH may carry host flags after a comma: new=target/release/mcp-host,--config,x.toml)
Needs valgrind. Talks to 127.0.0.1 only; stops every host it starts.
"""

import argparse
import collections
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile

from hostproc import MODERN_META, spawn_host


# Each mode: (era, Accept, request). "initialize" sends handshakes (each a new session on the
# build's default SQLite ledger, recorded before its id goes out); the others `tools/call echo`.
MODES = {
    "legacy SSE": ("legacy", "application/json, text/event-stream", "call"),
    "legacy JSON": ("legacy", "application/json", "call"),
    "modern SSE": ("modern", "application/json, text/event-stream", "call"),
    "modern JSON": ("modern", "application/json", "call"),
    "initialize": ("legacy", "application/json, text/event-stream", "initialize"),
}
# What counts as an allocation: glibc's entry points (SQLite's, and every Rust one in a build
# on glibc) and jemalloc's prefixed ones (the host's Rust allocations).
ALLOC_FUNCTIONS = re.compile(r"^(malloc|calloc|realloc|posix_memalign|aligned_alloc|_rjem_(malloc|mallocx|calloc|realloc|rallocx|posix_memalign|aligned_alloc))$")
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "instructions", "version": "1"}}


def count(cmd, n, mode, keep=None):
    """Instructions of the host process that served `n` requests of `mode` (its profile kept at `keep`)."""
    era, accept, request = MODES[mode]
    if keep:
        out = keep
    else:
        fd, out = tempfile.mkstemp(prefix="callgrind-", suffix=".out")
        os.close(fd)
    # The host runs in a directory of its own, removed afterwards: builds with a ledger keep
    # their default `mcp-host.db` there (the SQLite default is what is measured).
    workdir = tempfile.TemporaryDirectory(prefix="mcp-instructions-")
    cmd = [os.path.abspath(cmd[0]), *cmd[1:]]
    procs = []
    try:
        # Under valgrind a start takes seconds; two minutes is past any healthy one.
        host, url = spawn_host(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={os.path.abspath(out)}", *cmd, "--port", "0", "--workers", "1", "--packs", "echo"],
            workdir.name, deadline_s=120, procs=procs)
        hostport = url.split("//")[1].split("/")[0]
        h, port = hostport.rsplit(":", 1)
        c = http.client.HTTPConnection(h, int(port), timeout=120)
        if request == "initialize":
            headers = {"Content-Type": "application/json", "Accept": accept}
            return serve(c, host, out, n, headers, "initialize", lambda i: INIT, dump_before_stop=True)
        if era == "modern":
            headers = {"Content-Type": "application/json", "Accept": accept, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
            params = {"name": "echo", "arguments": {"text": "hello"}, "_meta": MODERN_META}
            return serve(c, host, out, n, headers, "tools/call", lambda i: params)
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT}
        c.request("POST", "/mcp", json.dumps(init), {"Content-Type": "application/json", "Accept": "application/json"})
        r = c.getresponse()
        r.read()
        sid = r.getheader("mcp-session-id")
        headers = {"Content-Type": "application/json", "Accept": accept, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        params = {"name": "echo", "arguments": {"text": "hello"}}
        return serve(c, host, out, n, headers, "tools/call", lambda i: params)
    finally:
        for host in procs:
            if host.poll() is None:
                host.kill()
                host.wait()
        if not keep:
            for f in (out, out + ".1"):
                if os.path.exists(f):
                    os.remove(f)
        workdir.cleanup()


def serve(c, host, out, n, headers, method, params, alloc_functions=ALLOC_FUNCTIONS, dump_before_stop=False):
    """Send `n` requests of `method`, stop the host (SIGTERM), return its instruction total
    and its calls to `alloc_functions` ([`read_profile`]); with `dump_before_stop`, those of
    a dump taken once the last request was answered, before the stop (callgrind writes it to
    `out`.1 and the rest to `out` as the host exits)."""
    for i in range(n):
        body = {"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params(i)}
        c.request("POST", "/mcp", json.dumps(body), headers)
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError(f"request {i}: status {r.status}")
    c.close()
    if dump_before_stop:
        # It returns once the dump is written ("OK."). A handshake is answered only once its
        # record is committed, so the dump holds every one of them whole.
        subprocess.run(["callgrind_control", "-d", str(host.pid)], check=True, capture_output=True, timeout=120)
    host.send_signal(signal.SIGTERM)
    host.wait(timeout=120)
    return read_profile(out + ".1" if dump_before_stop else out, alloc_functions)


def read_profile(out, alloc_functions):
    """A callgrind profile's instruction total, its calls to the functions `alloc_functions`
    matches, and those calls by calling function (a Counter; functions inlined into their
    caller count as it)."""
    total = None
    allocs = 0
    callers = collections.Counter()
    names = {}  # functions and callees share one table of compressed names
    caller = callee = None

    def named(text):
        ref, _, name = text.strip().partition(" ")
        if name:
            names[ref] = name
        return names.get(ref, ref)

    with open(out, errors="replace") as f:
        for line in f:
            # Calls to an allocation function, from the profile's call records: `fn=(id) name`
            # names the function whose costs follow, `cfn=(id) name` a callee (later only
            # `(id)`), the `calls=N` line after it counts them.
            if line.startswith("fn="):
                caller = named(line[3:])
            elif line.startswith("cfn="):
                callee = named(line[4:])
            elif line.startswith("calls=") and callee is not None:
                if alloc_functions.match(callee.split(" ")[0].split("'")[0]):
                    n = int(line[6:].split()[0])
                    allocs += n
                    callers[caller] += n
                callee = None
            elif line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    if total is None:
        raise RuntimeError("callgrind wrote no total")
    return total, allocs, callers


def per_request(cmd, mode, n1, n2, keep_dir=None, name="build"):
    """Instructions and allocations (calls to malloc and its kin, glibc's or jemalloc's, every
    thread) of one request."""
    keep = (lambda n: os.path.join(keep_dir, f"{name}-{mode.replace(' ', '-')}-{n}.out")) if keep_dir else (lambda n: None)
    (i2, a2, c2), (i1, a1, c1) = count(cmd, n2, mode, keep(n2)), count(cmd, n1, mode, keep(n1))
    n = n2 - n1
    callers = {k: (c2[k] - c1.get(k, 0)) / n for k in c2}
    return (i2 - i1) / n, (a2 - a1) / n, callers


def verdict(measured, baseline, tol):
    """"FAIL" past the tolerance over the baseline, "low" well under it (lower the baseline
    deliberately), else "ok"."""
    ratio = measured / baseline
    return "FAIL" if ratio > 1 + tol else ("low" if ratio < 1 - tol else "ok")


def self_test():
    """The verdict can fail: a figure 11 % over a 10 % tolerance does, 9 % does not."""
    assert verdict(111_000, 100_000, 0.10) == "FAIL"
    assert verdict(109_000, 100_000, 0.10) == "ok"
    assert verdict(100_000, 100_000, 0.10) == "ok"
    assert verdict(89_000, 100_000, 0.10) == "low"
    print("instructions.py: self-test passed")


def check(a):
    """--check: one build against the committed baseline; exit status 1 past its tolerance."""
    base = json.load(open(a.check))
    tol = base.get("tolerance", 0.10)
    if len(a.builds) != 1:
        raise SystemExit("--check takes exactly one NAME=PATH")
    name, spec = a.builds[0].split("=", 1)
    failed = []
    rows = []
    for mode, want in base["instructions_per_request"].items():
        got, _, _ = per_request(spec.split(","), mode, base["n1"], base["n2"], a.keep_dir, name)
        v = verdict(got, want, tol)
        if v == "FAIL":
            failed.append(mode)
        rows.append({"mode": mode, "baseline": want, "measured": round(got), "ratio": round(got / want, 4)})
        note = "  (well below the baseline: lower it deliberately, with the reason in the commit)" if v == "low" else ""
        print(f"{'FAIL' if v == 'FAIL' else 'ok':4s} {mode:12s} {got:10,.0f} instructions/request, baseline {want:,} ({got / want - 1:+.1%}, limit +{tol:.0%}){note}", flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"baseline": a.check, "rows": rows}, f, indent=2)
    if failed:
        raise SystemExit(f"instructions per request grew more than {tol:.0%} over {a.check}: {', '.join(failed)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="*", help="NAME=PATH[,host flags]")
    ap.add_argument("--n1", type=int, default=1000)
    ap.add_argument("--n2", type=int, default=4000)
    ap.add_argument("--json-out")
    ap.add_argument("--keep-dir")
    ap.add_argument("--modern", action="store_true", help="also count 2026-07-28 stateless calls (no session) on each build")
    ap.add_argument("--initialize", action="store_true", help="also count initialize (a new session each)")
    ap.add_argument("--alloc-callers", type=int, default=0, metavar="N",
                    help="also print (and keep in --json-out) the N functions that call the allocator most a request")
    ap.add_argument("--check", metavar="BASELINE", help="measure the one build in the modes of BASELINE (JSON) and fail past its tolerance")
    ap.add_argument("--self-test", action="store_true", help="check the verdict rule only (no valgrind)")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.builds:
        ap.error("name at least one build: NAME=PATH")
    if a.keep_dir:
        # callgrind cannot write into a missing directory, and the host then exits at once.
        os.makedirs(a.keep_dir, exist_ok=True)
    if a.check:
        return check(a)
    modes = ["legacy SSE", "legacy JSON"] + (["modern SSE", "modern JSON"] if a.modern else []) + (["initialize"] if a.initialize else [])
    rows = []
    for mode in modes:
        for b in a.builds:
            name, spec = b.split("=", 1)
            per, allocs, callers = per_request(spec.split(","), mode, a.n1, a.n2, a.keep_dir, name)
            row = {"build": name, "mode": mode, "instructions_per_request": round(per),
                   "allocations_per_request": round(allocs, 1)}
            print(f"| {name} | {mode} | {per:,.0f} | {allocs:.1f} allocations |", flush=True)
            if a.alloc_callers:
                top = sorted(((v, k) for k, v in callers.items() if v >= 0.05), reverse=True)[:a.alloc_callers]
                row["allocations_by_caller"] = {k: round(v, 2) for v, k in top}
                for v, k in top:
                    print(f"    {v:5.2f}  {k[:150]}", flush=True)
            rows.append(row)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"n1": a.n1, "n2": a.n2, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
