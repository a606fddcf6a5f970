#!/usr/bin/env python3
"""Simulated cache misses per legacy `tools/call` echo over many sessions: what a call's
working set costs, as a figure that nearly repeats from run to run (wall-clock A/Bs of a 5 %
change drown in this machine's noise; the instruction counts of `instructions.py` see no
cache).

Each build runs under valgrind's cachegrind with its cache simulation: a first level of
48 KiB (12-way, 64-byte lines) and a last level of 2 MiB (16-way), this machine's L1d and L2
per core. SESSIONS sessions (default 64, the side by side's a64) each send on a keep-alive
connection of their own, in turn, SSE replies (Accept: both); the retention after delivery is
set long, so each session keeps its `sessions.max_retained_streams` answered streams (64) as
under load, by count. N1 then (in a second run) N2 calls in all; (X(N2) - X(N1)) / (N2 - N1)
for X in instructions, first-level data misses and last-level data misses (reads and writes)
is one call's, start-up and the first N1 calls cancelled out. N1 should be past
SESSIONS x 64, so every session's retention is full before the difference starts. Nearly
deterministic, not exactly: work driven by time rather than by calls (the ledger writer's
linger, sweeps, a session's record every sixteenth of its idle TTL) grows with the run's
length under valgrind.

Usage:
  python3 bench/cache_misses.py NAME=PATH [NAME=PATH ...] [--sessions 64] [--n1 6000] [--n2 14000] [--json-out FILE]
      [--keep-dir DIR]   (keep each profile as DIR/NAME-N.out: `cg_annotate --sort=DLmr,DLmw FILE`
                          names the functions that miss)
  (a PATH may carry host flags after a comma: a=target/release/mcp-host,--set,sessions.max_retained_streams=1)
Needs valgrind. Talks to 127.0.0.1 only; stops every host it starts.
"""

import argparse
import http.client
import json
import os
import tempfile

from hostproc import echo_sse, initialize, spawn_host, stop

CACHES = ["--D1=49152,12,64", "--LL=2097152,16,64"]


def run(cmd, sessions, n, keep=None):
    """Cachegrind's totals (a dict by event name) for a host that served `n` echo calls over
    `sessions` sessions in turn (its profile kept at `keep`)."""
    if keep:
        out = os.path.abspath(keep)
    else:
        fd, out = tempfile.mkstemp(prefix="cachegrind-", suffix=".out")
        os.close(fd)
    workdir = tempfile.TemporaryDirectory(prefix="mcp-cache-misses-")
    procs = []
    conns = []
    try:
        argv = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", *CACHES,
                f"--cachegrind-out-file={out}", os.path.abspath(cmd[0]), *cmd[1:],
                "--port", "0", "--workers", "1", "--packs", "echo",
                "--set", "sessions.retention_after_delivery_ms=3600000"]
        host, url = spawn_host(argv, workdir.name, deadline_s=120, procs=procs)
        h, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        sids = []
        for _ in range(sessions):
            conns.append(http.client.HTTPConnection(h, int(port), timeout=120))
            sids.append(initialize(conns[-1], "cache-misses"))
        for i in range(n):
            s = i % sessions
            echo_sse(conns[s], sids[s], i + 1)
        for c in conns:
            c.close()
        conns.clear()
        stop(host, timeout_s=120)
        if host.returncode != 0:
            raise RuntimeError(f"the host exited with {host.returncode}")
        return read_totals(out)
    finally:
        for c in conns:
            c.close()
        for p in procs:
            stop(p, timeout_s=5)
        if not keep:
            os.remove(out)
        workdir.cleanup()


def read_totals(out):
    """The `summary:` line of a cachegrind file, by the names its `events:` line gives."""
    names = totals = None
    with open(out) as f:
        for line in f:
            if line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith("summary:"):
                totals = [int(x) for x in line.split()[1:]]
    if not names or not totals:
        raise RuntimeError(f"{out}: no events or summary line")
    return dict(zip(names, totals))


def per_call(cmd, sessions, n1, n2, keep=lambda n: None):
    """Instructions, first-level and last-level data misses of one call."""
    t2, t1 = run(cmd, sessions, n2, keep(n2)), run(cmd, sessions, n1, keep(n1))
    d = {k: (t2[k] - t1[k]) / (n2 - n1) for k in t2}
    return {"instructions": d["Ir"], "d1_misses": d["D1mr"] + d["D1mw"], "ll_misses": d["DLmr"] + d["DLmw"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="NAME=PATH[,host flags]")
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--n1", type=int, default=6000)
    ap.add_argument("--n2", type=int, default=14000)
    ap.add_argument("--json-out")
    ap.add_argument("--keep-dir")
    a = ap.parse_args()
    if a.sessions < 1 or a.n2 <= a.n1 or a.n1 < 1:
        raise SystemExit("need --sessions >= 1 and 0 < --n1 < --n2")
    if any("=" not in b for b in a.builds):
        raise SystemExit("each build is NAME=PATH[,host flags]")
    if a.n1 < a.sessions * 64:
        print(f"note: --n1 {a.n1} is under {a.sessions} x 64: the sessions' kept streams are still filling as the difference starts", flush=True)
    if a.keep_dir:
        os.makedirs(a.keep_dir, exist_ok=True)
    rows = []
    for b in a.builds:
        name, spec = b.split("=", 1)
        keep = (lambda n, name=name: os.path.join(a.keep_dir, f"{name}-{n}.out")) if a.keep_dir else (lambda n: None)
        r = per_call(spec.split(","), a.sessions, a.n1, a.n2, keep)
        rows.append({"build": name, "path": spec, **{k: round(v, 1) for k, v in r.items()}})
        print(f"{name:12s} {r['instructions']:10,.0f} instructions  {r['d1_misses']:8,.1f} D1 misses  {r['ll_misses']:8,.1f} LL misses a call", flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"sessions": a.sessions, "n1": a.n1, "n2": a.n2, "caches": CACHES, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
