#!/usr/bin/env python3
"""RSS of one answered stream a session keeps for a late resume (a settled SSE reply, held
until its retention after delivery ends or `sessions.max_retained_streams` evicts it).

Each build starts with one worker and the `echo` pack, the retention after delivery set to an
hour (so count alone bounds what is kept); SESSIONS sessions each make one echo call (every
session awake, each keeping one stream), then RSS is read 2 s later; then each makes CALLS - 1
more (in turns), and RSS is read 2 s after again. The difference over SESSIONS x (CALLS - 1)
is one kept stream's (CALLS at most the 64 a session keeps by default, so none is evicted).
Runs each build twice, alternated.

Usage:
  python3 bench/kept_memory.py NAME=PATH[,host flags] [...] [--sessions 200] [--calls 64]
  (a build with --set,sessions.max_retained_streams=1 keeps one stream a session: its figure
  is the reference of nothing kept)
Talks to 127.0.0.1 only; stops every host it starts.
"""

import argparse
import http.client
import os
import tempfile
import time

from hostproc import echo_sse, initialize, rss_kib, spawn_host, stop


def bytes_per_kept_stream(argv, sessions, calls):
    """(RSS after - RSS before) / kept streams added, for one fresh host."""
    workdir = tempfile.TemporaryDirectory(prefix="mcp-kept-memory-")
    procs = []
    c = None
    try:
        host, url = spawn_host([os.path.abspath(argv[0]), *argv[1:], "--port", "0", "--workers", "1", "--packs", "echo",
                                "--set", "sessions.retention_after_delivery_ms=3600000"], workdir.name, procs=procs)
        h, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        c = http.client.HTTPConnection(h, int(port), timeout=30)
        sids = [initialize(c, "kept-memory") for _ in range(sessions)]
        for sid in sids:
            echo_sse(c, sid, 1)
        time.sleep(2)
        before = rss_kib(host.pid)
        for i in range(2, calls + 1):
            for sid in sids:
                echo_sse(c, sid, i)
        time.sleep(2)
        after = rss_kib(host.pid)
        return (after - before) * 1024 / (sessions * (calls - 1))
    finally:
        if c is not None:
            c.close()
        for p in procs:
            stop(p)
        workdir.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="NAME=PATH[,host flags]")
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--calls", type=int, default=64)
    a = ap.parse_args()
    if a.sessions < 1 or not 2 <= a.calls <= 64:
        raise SystemExit("need --sessions >= 1 and 2 <= --calls <= 64 (a session keeps 64 by default)")
    if any("=" not in b for b in a.builds):
        raise SystemExit("each build is NAME=PATH[,host flags]")
    for rep in range(2):
        for b in a.builds:
            name, spec = b.split("=", 1)
            v = bytes_per_kept_stream(spec.split(","), a.sessions, a.calls)
            print(f"{name:12s} rep {rep + 1}: {v:6.0f} bytes of RSS a kept stream ({a.sessions} sessions x {a.calls - 1} calls)", flush=True)


if __name__ == "__main__":
    main()
