#!/usr/bin/env python3
"""Redis commands per MCP call on the Redis ledger: a figure that does not depend on the
machine (issue 21 item 9: at most 3 round trips for a stateless call, none for a read-only
call without a key).

Starts its own redis-server (a free loopback port, a temporary directory, nothing persisted)
and one mcp-host on it (`--ledger redis://…`, one worker, the `echo` and `ledger` packs), then
for each kind of call sends N of them one after the other and reads `INFO commandstats` before
and after: commands per call by command name. Redis counts the commands a script runs with the
others (`INFO commandstats` does not tell them apart); the round trips are the host's own
count (`mcp_ledger_round_trips_total` on its admin `/metrics`: each batch, read or count on a
pooled connection). The host's own background traffic (the lease's renewal every 1.7 s,
sweeps) is measured in an idle window of the same length and taken off both.

Usage:
  python3 bench/redis_commands.py [--host-bin target/release/mcp-host] [--n 500] [--shared] [--json-out FILE]
Talks to 127.0.0.1 only; stops every process it starts.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

from hostproc import MODERN_META, free_port, stop  # noqa: E402



def redis_cmd(port, *args):
    """One command over a raw RESP connection; the reply as text (bulk) or int."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        out = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
        s.sendall(out.encode())
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            if buf.startswith(b"$"):
                n = int(buf[1:buf.index(b"\r\n")])
                if n < 0 or len(buf) >= buf.index(b"\r\n") + 2 + n + 2:
                    break
            elif buf.endswith(b"\r\n"):
                break
        if buf.startswith(b"$"):
            head = buf.index(b"\r\n")
            return buf[head + 2:head + 2 + int(buf[1:head])].decode()
        return buf.decode().strip()


def start_redis(directory, port, prefix=()):
    """A redis-server on 127.0.0.1:`port` keeping nothing (its log in `directory`), started
    under `prefix` (e.g. taskset)."""
    return subprocess.Popen(
        list(prefix) + ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                        "--appendonly", "no", "--dir", directory,
                        "--logfile", os.path.join(directory, "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for_redis(port):
    """Until the server on `port` answers PING (at most 10 s)."""
    for _ in range(500):
        try:
            if redis_cmd(port, "PING") == "+PONG":
                return
        except OSError:
            pass
        time.sleep(0.02)
    raise SystemExit("redis-server did not answer within 10 s")


def commandstats(port):
    """{command: calls} from INFO commandstats."""
    text = redis_cmd(port, "INFO", "commandstats")
    stats = {}
    for line in text.splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            fields = dict(kv.split("=") for kv in rest.split(","))
            stats[name] = int(fields["calls"])
    return stats


def delta(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def post(c, body, headers):
    c.request("POST", "/mcp", json.dumps(body), {"Content-Type": "application/json", **headers})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit(f"{body.get('method')}: HTTP {r.status}: {data[:300]!r}")
    return r, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host-bin", default="target/release/mcp-host")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--json-out")
    ap.add_argument("--shared", action="store_true",
                    help="the host on a shared ledger (ledger.redis_shared = true): what a call costs when several hosts share it")
    a = ap.parse_args()
    if not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    work = tempfile.TemporaryDirectory(prefix="mcp-redis-commands-")
    rport = free_port()
    redis = start_redis(work.name, rport)
    host = None
    try:
        wait_for_redis(rport)
        host = subprocess.Popen(
            [os.path.abspath(a.host_bin), "--port", "0", "--admin-port", "0", "--workers", "1",
             "--packs", "echo,ledger", "--ledger", f"redis://127.0.0.1:{rport}/0",
             "--ledger-path", os.path.join(work.name, "mcp-host.db")]
            + (["--set", "ledger.redis_shared=true"] if a.shared else []),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=work.name,
            env={**os.environ, "MCP_HOST_LOG": "warn", "MCP_HOST_EXIT_WITH_PARENT": "1"})
        url = host.stdout.readline().split()[-1]
        h, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        # "mcp-host admin on http://ADDR/admin/status (token: FILE)": the host's own count of
        # its round trips (mcp_ledger_round_trips_total) is read from /metrics there.
        admin_line = host.stdout.readline().split()
        admin_addr = admin_line[3].split("//")[1].split("/")[0]
        token_file = admin_line[-1].rstrip(")")
        with open(token_file if os.path.isabs(token_file) else os.path.join(work.name, token_file)) as f:
            token = f.read().strip()

        def round_trips():
            ah, ap = admin_addr.rsplit(":", 1)
            m = http.client.HTTPConnection(ah, int(ap), timeout=10)
            m.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
            text = m.getresponse().read().decode()
            m.close()
            for line in text.splitlines():
                if line.startswith("mcp_ledger_round_trips_total "):
                    return float(line.split()[1])
            raise SystemExit("the host's /metrics has no mcp_ledger_round_trips_total")
        c = http.client.HTTPConnection(h, int(port), timeout=60)
        legacy = {"Accept": "application/json", "MCP-Protocol-Version": "2025-11-25"}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "rc", "version": "1"}}}
        r, _ = post(c, init, {"Accept": "application/json"})
        sid = r.getheader("mcp-session-id")
        kinds = {
            "legacy echo, JSON (read-only, no key)": lambda i: post(c, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}, {**legacy, "Mcp-Session-Id": sid}),
            "legacy echo, SSE (read-only, no key)": lambda i: post(c, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}, {**legacy, "Accept": "application/json, text/event-stream", "Mcp-Session-Id": sid}),
            "2026-07-28 echo, JSON (read-only, no key)": lambda i: post(c, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": MODERN_META}}, {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}),
            "2026-07-28 ledger_append with a new key, JSON (a keyed write)": lambda i: post(c, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "ledger_append", "arguments": {"key": f"k-{i}"}, "_meta": MODERN_META}}, {"Accept": "application/json", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "ledger_append"}),
            "legacy initialize (a new session)": lambda i: post(c, init, {"Accept": "application/json"}),
        }
        results = {}
        for name, call in kinds.items():
            before, trips_before, t0 = commandstats(rport), round_trips(), time.monotonic()
            for i in range(a.n):
                call(1000 + i)
            took = time.monotonic() - t0
            after, trips_after = commandstats(rport), round_trips()
            # The background traffic of as long a window, taken off.
            time.sleep(min(took, 10.0))
            idle, trips_idle = delta(after, commandstats(rport)), round_trips() - trips_after
            scale = took / max(min(took, 10.0), 1e-9)
            d = delta(before, after)
            per_call = {k: round((v - idle.get(k, 0) * scale) / a.n, 3) for k, v in d.items()}
            per_call = {k: v for k, v in per_call.items() if abs(v) >= 0.005 and k != "info"}
            trips = round((trips_after - trips_before - trips_idle * scale) / a.n, 3)
            results[name] = {"commands_per_call": per_call, "round_trips_per_call": trips, "seconds": round(took, 2)}
            print(f"{name}: {trips} round trips; {json.dumps(per_call, sort_keys=True)}")
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump({"n": a.n, "shared": a.shared, "results": results, "note": "commands Redis ran per call, background (lease, sweep) taken off; commands run inside a script are listed as well"}, f, indent=1)
    finally:
        for p in (host, redis):
            stop(p)
        work.cleanup()


if __name__ == "__main__":
    main()
