#!/usr/bin/env python3
"""Instructions and allocations of one request to the side-by-side harness's raw actix-web
echo (`bench/peers`' actix-peer), counted as bench/instructions.py counts ours: the same
2026-07-28 `tools/call echo` body and headers, N1 then N2 requests on one keep-alive
connection under callgrind, the difference divided by N2 - N1. What ours does beyond the
HTTP round trip is ours minus this.

Usage:
  python3 bench/raw_instructions.py /tmp/pp/rust/target/release/actix-peer [--n1 300] [--n2 1300]
      [--alloc-callers N] [--json-out FILE]
(build it with /tmp/pp/build.sh, or `cargo build --release -p actix-peer` in /tmp/pp/rust).
Allocations are calls to Rust's allocator entry points (the peer uses the system allocator).
Talks to 127.0.0.1 only; stops the server it starts.
"""

import argparse
import http.client
import json
import os
import re
import subprocess
import tempfile
import time

from hostproc import MODERN_META, free_port
from instructions import serve

RUST_ALLOC = re.compile(r"^(__rustc::)?__rust_(alloc|alloc_zeroed|realloc)$")
HEADERS = {"Content-Type": "application/json", "Accept": "application/json", "MCP-Protocol-Version": "2026-07-28",
           "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
PARAMS = {"name": "echo", "arguments": {"text": "hello"}, "_meta": MODERN_META}


def count(peer, n, out):
    port = free_port()
    p = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", peer, str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                c.connect()
                break
            except OSError:
                if time.monotonic() > deadline or p.poll() is not None:
                    raise RuntimeError("the peer did not start under valgrind")
                time.sleep(0.2)
        return serve(c, p, out, n, HEADERS, "tools/call", lambda i: PARAMS, RUST_ALLOC)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("peer")
    ap.add_argument("--n1", type=int, default=300)
    ap.add_argument("--n2", type=int, default=1300)
    ap.add_argument("--alloc-callers", type=int, default=0, metavar="N")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="raw-instructions-") as d:
        (i1, a1, c1) = count(a.peer, a.n1, os.path.join(d, "n1.out"))
        (i2, a2, c2) = count(a.peer, a.n2, os.path.join(d, "n2.out"))
    n = a.n2 - a.n1
    if a2 - a1 <= 0:
        raise SystemExit("no allocator calls counted: this toolchain names Rust's allocator differently")
    row = {"mode": "2026-07-28 JSON echo", "instructions_per_request": round((i2 - i1) / n),
           "allocations_per_request": round((a2 - a1) / n, 1)}
    print(f"| raw actix-web | {row['mode']} | {(i2 - i1) / n:,.0f} | {(a2 - a1) / n:.1f} allocations |")
    if a.alloc_callers:
        per = ((c2[k] - c1.get(k, 0)) / n for k in c2)
        top = sorted(((v, k) for v, k in zip(per, c2) if v >= 0.05), reverse=True)[:a.alloc_callers]
        row["allocations_by_caller"] = {k: round(v, 2) for v, k in top}
        for v, k in top:
            print(f"    {v:5.2f}  {k[:150]}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"n1": a.n1, "n2": a.n2, "peer": a.peer, "rows": [row]}, f, indent=2)


if __name__ == "__main__":
    main()
