#!/usr/bin/env python3
"""Memory of idle sessions and restart time on a full ledger (mcp-host, SQLite ledger).

1. live:   RSS of N idle live sessions (`--live`, default 10,000; parking off).
2. parked: sessions created in waves of `--wave` and parked (`sessions.park_after_secs = 1`,
           live sessions never above one wave), up to `--parked` (default 100,000). The cost
           of a parked session is the RSS growth from the first parked wave to the last,
           divided by the sessions parked in between (the peak of live sessions, and so the
           allocator's high-water mark, is the same for every wave).
3. restart: SIGKILL that host, start it again on the same ledger: time until it listens, and
           the first request of an old session (revived from the ledger).

Every host runs in a temporary directory removed at the end; every process started is
stopped, on success and on failure. Loopback only; every loop is bounded.

Usage: python3 bench/sessions.py [--host-bin target/release/mcp-host] [--live 10000]
                                 [--parked 100000] [--wave 10000] [--json-out FILE]
"""
import argparse
import http.client
import sqlite3
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from hostproc import rss_kib

INIT = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "sessions-bench", "version": "1"}}})
THREADS = 8


class Host:
    """mcp-host in `workdir` (its ledger there), stdout followed for stats lines."""

    def __init__(self, binary, workdir, config, port=0):
        cmd = [binary, "--port", str(port), "--workers", "1", "--packs", "echo", "--stats-every-ms", "200", "--config", config]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = None
        self.stats = {}
        self.ready = threading.Event()
        threading.Thread(target=self._follow, daemon=True).start()
        if not self.ready.wait(30):
            self.kill()
            raise RuntimeError("mcp-host did not start")
        self.started_s = time.monotonic() - self.t0
        self.addr = self.url.split("//")[1].split("/")[0]

    def _follow(self):
        for line in self.proc.stdout:
            if self.url is None and " listening on " in line:
                self.url = line.split()[-1]
                self.ready.set()
            elif line.startswith("stats "):
                try:
                    self.stats = json.loads(line[6:])
                except ValueError:
                    pass

    def rss_kib(self):
        return rss_kib(self.proc.pid)

    def wait_stats(self, pred, what, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.stats and pred(self.stats):
                return self.stats
            time.sleep(0.1)
        raise RuntimeError(f"never happened: {what} (last stats: {self.stats})")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


def create_sessions(addr, n):
    """Initialize n sessions over keep-alive connections; returns their ids."""
    ids, errors = [], []
    lock = threading.Lock()

    def work(count):
        conn = http.client.HTTPConnection(addr, timeout=30)
        mine = []
        try:
            for _ in range(count):
                conn.request("POST", "/mcp", INIT, {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
                r = conn.getresponse()
                r.read()
                sid = r.getheader("mcp-session-id")
                if r.status != 200 or not sid:
                    raise RuntimeError(f"initialize answered {r.status}")
                mine.append(sid)
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append(str(e))
        finally:
            conn.close()
            with lock:
                ids.extend(mine)

    per = [n // THREADS + (1 if i < n % THREADS else 0) for i in range(THREADS)]
    threads = [threading.Thread(target=work, args=(c,)) for c in per]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} session creations failed: {errors[0]}")
    return ids


def ping(addr, sid):
    conn = http.client.HTTPConnection(addr, timeout=30)
    t0 = time.monotonic()
    conn.request("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
                 {"Content-Type": "application/json", "Accept": "application/json", "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"})
    r = conn.getresponse()
    r.read()
    conn.close()
    return r.status, (time.monotonic() - t0) * 1000


def config(path, park_after_secs, max_sessions):
    with open(path, "w") as f:
        f.write(f"[sessions]\npark_after_secs = {park_after_secs}\nmax_sessions = {max_sessions}\n"
                f"[quotas]\nsessions_per_principal = {max_sessions}\nsession_rate_per_sec = 1000000\nsession_burst = 1000000\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host-bin", default="target/release/mcp-host")
    ap.add_argument("--live", type=int, default=10_000)
    ap.add_argument("--parked", type=int, default=100_000)
    ap.add_argument("--wave", type=int, default=10_000)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    binary = os.path.abspath(a.host_bin)
    out = {"live": a.live, "parked": a.parked, "wave": a.wave}
    hosts = []
    tmp = tempfile.mkdtemp(prefix="mcp-sessions-bench-")
    try:
        # 1. Live idle sessions.
        d1 = os.path.join(tmp, "live")
        os.mkdir(d1)
        config(os.path.join(d1, "c.toml"), 86_400, a.live + 1000)
        h = Host(binary, d1, os.path.join(d1, "c.toml"))
        hosts.append(h)
        time.sleep(1)
        base = h.rss_kib()
        create_sessions(h.addr, a.live)
        h.wait_stats(lambda s: s["sessions"] >= a.live, "live sessions counted")
        time.sleep(1)
        live = h.rss_kib()
        out["live_rss_base_kib"], out["live_rss_kib"] = base, live
        out["live_kib_per_session"] = (live - base) / a.live
        h.kill()
        print(f"{a.live} idle live sessions: RSS {base} -> {live} KiB, {out['live_kib_per_session']:.2f} KiB per session")

        # 2. Parked sessions, in waves.
        d2 = os.path.join(tmp, "parked")
        os.mkdir(d2)
        config(os.path.join(d2, "c.toml"), 1, a.wave * 2 + 1000)
        h = Host(binary, d2, os.path.join(d2, "c.toml"))
        hosts.append(h)
        time.sleep(1)
        out["parked_rss_base_kib"] = h.rss_kib()
        made, first_wave_rss, sample = 0, None, None
        waves = []
        while made < a.parked:
            n = min(a.wave, a.parked - made)
            ids = create_sessions(h.addr, n)
            sample = sample or ids[0]
            made += n
            h.wait_stats(lambda s, m=made: s["sessions"] == 0 and s["sessions_parked"] >= m, f"{made} sessions parked")
            rss = h.rss_kib()
            waves.append({"parked": made, "rss_kib": rss})
            if first_wave_rss is None:
                first_wave_rss = (made, rss)
            print(f"  {made} parked, 0 live: RSS {rss} KiB")
        last = waves[-1]
        per = (last["rss_kib"] - first_wave_rss[1]) / max(1, last["parked"] - first_wave_rss[0])
        out["parked_waves"] = waves
        out["parked_kib_per_session"] = per
        out["ledger_bytes"] = sum(os.path.getsize(os.path.join(d2, f)) for f in os.listdir(d2) if f.startswith("mcp-host.db"))
        db = sqlite3.connect(f"file:{os.path.join(d2, 'mcp-host.db')}?mode=ro", uri=True)
        n, avg = db.execute("SELECT count(*), avg(length(value)) FROM kv WHERE key LIKE 's/%'").fetchone()
        db.close()
        out["session_records"], out["session_record_bytes_avg"] = n, avg
        print(f"{a.parked} parked sessions: {per * 1024:.0f} B of RSS per parked session (waves {first_wave_rss[0]} -> {last['parked']}); ledger {out['ledger_bytes'] / 1048576:.1f} MiB, {n} session records of {avg:.0f} B on average")

        # 3. Restart on that ledger.
        port = h.addr.rsplit(":", 1)[1]
        h.kill()
        h = Host(binary, d2, os.path.join(d2, "c.toml"), port=port)
        hosts.append(h)
        out["restart_listening_ms"] = h.started_s * 1000
        status, ms = ping(h.addr, sample)
        out["revive_first_request_ms"], out["revive_status"] = ms, status
        out["restart_rss_kib"] = h.rss_kib()
        print(f"restart with {a.parked} sessions in the ledger: listening after {h.started_s * 1000:.0f} ms; "
              f"first request of an old session {status} in {ms:.1f} ms; RSS {out['restart_rss_kib']} KiB")
        if status != 200:
            raise RuntimeError(f"the old session answered {status} after the restart")
    finally:
        for h in hosts:
            h.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
