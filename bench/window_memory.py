#!/usr/bin/env python3
"""Memory of the replay window on its own (issue 23, item 5): RSS of N open SSE streams that
each hold K events in their window, against the same N streams holding none.

Each stream is a `tools/call soak_flood {count: K, bytes: B, hold_ms: H}` on a session of its
own (2025-11-25, Accept: text/event-stream): the tool sends K log messages of a B-byte pad on
its stream, then holds it open for H ms before it answers. The client reads every event as it
comes (the window holds them for a resume, not because the socket is full), and the host's
RSS is read while every stream is held: 0.5, 2 and 3.5 s after the last stream filled; the
last reading is the figure (the host gives freed memory back to the system within a second or
two of its footprint settling, `bins/host/src/trim.rs`). Per count, a fresh host (one worker)
in a temporary directory (its own SQLite ledger, default settings: `sse.replay_max_events`
1,024, `sse.replay_max_bytes` 1 MiB, one caller's stream memory 512 MiB; the bench's session
caps raised, `bench/peers/ours-bench.toml`).

Reported per K: RSS with the N streams held, the growth over K = 0 per stream and per event
the window holds (K, or fewer when a bound evicts: at most 1,024 events and 1 MiB of frames),
and the bytes of one event's frame as sent (so the overhead per event beside its own bytes).

Usage: python3 bench/window_memory.py [--host-bin target/release/mcp-host] [--streams 100]
           [--counts 0,16,128,1024] [--bytes 100] [--hold-ms 10000] [--json-out FILE]
Loopback only; every host and connection it starts is stopped, on success and on failure.
"""

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
from urllib.parse import urlsplit

from hostproc import rss_kib, spawn_host, stop

HERE = os.path.dirname(os.path.abspath(__file__))
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "window-memory", "version": "1"}}
STEP_TIMEOUT = 30.0
# The host's default window (`sse.replay_max_events`, `sse.replay_max_bytes`): the events a
# stream holds at most, and their frames' bytes (the newest is kept whatever its size).
MAX_EVENTS, MAX_BYTES = 1024, 1 << 20
# One caller's share of the stream memory (`quotas.stream_memory_per_principal`, half of
# `limits.stream_memory_bytes`): every stream here is the same caller's, and past it the host
# trims windows; the bench stays under half of it.
CALLER_SHARE = 512 << 20
# When RSS is read, in seconds after the last stream filled.
READINGS = (0.5, 2.0, 3.5)


def request(host, port, headers, body):
    body = json.dumps(body, separators=(",", ":")).encode()
    h = {"Host": f"{host}:{port}", "Accept": "application/json, text/event-stream",
         "Content-Type": "application/json", "Content-Length": str(len(body)), **headers}
    return ("POST /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n").encode() + body


async def head(r):
    raw = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), STEP_TIMEOUT)
    lines = raw.decode("latin-1").split("\r\n")
    hdrs = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    return int(lines[0].split()[1]), hdrs


async def body(r, hdrs):
    """A whole response body (chunked or Content-Length)."""
    if "chunked" not in hdrs.get("transfer-encoding", "").lower():
        if "content-length" not in hdrs:
            raise RuntimeError(f"a response neither chunked nor of a known length: {hdrs}")
        return await asyncio.wait_for(r.readexactly(int(hdrs["content-length"])), STEP_TIMEOUT)
    return b"".join([c async for c in chunks(r)])


async def chunks(r):
    """The chunks of a chunked body as they come (the SSE stream's frames)."""
    while True:
        size = int((await asyncio.wait_for(r.readline(), STEP_TIMEOUT)).strip(), 16)
        chunk = await asyncio.wait_for(r.readexactly(size + 2), STEP_TIMEOUT)
        if size == 0:
            return
        yield chunk[:-2]


async def one_stream(host, port, count, pad, hold_ms, held, frames):
    """A session, then its flood call: returns once its answer came. `held` is set once every
    log event of the call was read (the stream then only waits for the answer)."""
    r, w = await asyncio.open_connection(host, port)
    try:
        w.write(request(host, port, {}, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}))
        status, hdrs = await head(r)
        await body(r, hdrs)
        if status != 200 or "mcp-session-id" not in hdrs:
            raise RuntimeError(f"initialize: {status}")
        sid = {"Mcp-Session-Id": hdrs["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        w.write(request(host, port, sid, {"jsonrpc": "2.0", "method": "notifications/initialized"}))
        status, hdrs = await head(r)
        await body(r, hdrs)
        if status != 202:
            raise RuntimeError(f"notifications/initialized: {status}")
        args = {"count": count, "bytes": pad, "hold_ms": hold_ms}
        w.write(request(host, port, sid, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                          "params": {"name": "soak_flood", "arguments": args}}))
        status, hdrs = await head(r)
        if status != 200 or not hdrs.get("content-type", "").startswith("text/event-stream"):
            raise RuntimeError(f"tools/call: {status} {hdrs.get('content-type')}")
        text, logs = b"", 0
        if count == 0:
            held.release()
        async for c in chunks(r):
            text += c
            while b"\n\n" in text:
                frame, text = text.split(b"\n\n", 1)
                if b'"notifications/message"' in frame:
                    logs += 1
                    frames.append(len(frame) + 2)
                    if logs == count:
                        held.release()
                elif b'"error"' in frame and b'"id":2' in frame:
                    raise RuntimeError(f"the call was answered with an error: {frame[:300]!r}")
                elif b'"result"' in frame:
                    if b'"isError":true' in frame:
                        raise RuntimeError(f"the tool refused: {frame[:300]!r}")
                    if logs != count:
                        raise RuntimeError(f"answered after {logs} of {count} log events: {frame[:300]!r}")
                    return
        raise RuntimeError("the stream ended without its answer")
    finally:
        w.close()


async def measure(host_pid, url, n, count, pad, hold_ms):
    u = urlsplit(url)
    held = asyncio.Semaphore(0)
    frames = []
    failed = []

    async def guarded():
        try:
            await one_stream(u.hostname, u.port, count, pad, hold_ms, held, frames)
        except Exception as e:  # noqa: BLE001 (reported below, with the count)
            failed.append(repr(e))
            held.release()

    tasks = [asyncio.create_task(guarded()) for _ in range(n)]
    try:
        started = time.monotonic()
        # Every stream's hold starts after `started` and lasts `hold_ms`: RSS is read until
        # 3.5 s after the last stream filled, a second before the first can let go.
        fill_s = hold_ms / 1000 - READINGS[-1] - 1
        for _ in range(n):
            left = fill_s - (time.monotonic() - started)
            try:
                await asyncio.wait_for(held.acquire(), max(left, 0.001))
            except asyncio.TimeoutError:
                raise SystemExit(f"window_memory.py: {n} streams of {count} events did not fill within {fill_s:.1f} s, too close to the hold ({hold_ms} ms): fewer --streams") from None
            if failed:
                raise SystemExit(f"window_memory.py: a stream of {count} events failed: {failed[0]}")
        ready_s = time.monotonic() - started
        readings, waited = [], 0.0
        for at in READINGS:
            await asyncio.sleep(at - waited)
            waited = at
            readings.append(rss_kib(host_pid))
        await asyncio.wait_for(asyncio.gather(*tasks), STEP_TIMEOUT + hold_ms / 1000)
        if failed:
            raise SystemExit(f"window_memory.py: a stream of {count} events failed: {failed[0]}")
        return readings, (sum(frames) / len(frames) if frames else 0), ready_s
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host-bin", default="target/release/mcp-host")
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--counts", default="0,16,128,1024")
    ap.add_argument("--bytes", type=int, default=100, help="the pad of each log message (the tool's bytes)")
    ap.add_argument("--hold-ms", type=int, default=10000, help="how long each stream is held (soak_flood allows 10,000 at most)")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    counts = [int(c) for c in a.counts.split(",")]
    if counts[0] != 0:
        counts = [0] + counts
    # soak_flood's own bounds (bins/host/src/packs/soak.rs): past them it refuses the call.
    if max(counts) > 10_000 or not 0 <= a.bytes <= 65_536 or not 0 <= a.hold_ms <= 10_000:
        raise SystemExit("window_memory.py: soak_flood takes at most 10,000 events, 65,536-byte pads and a 10,000 ms hold")
    if a.hold_ms < (READINGS[-1] + 2) * 1000:
        raise SystemExit(f"window_memory.py: --hold-ms must leave room for the readings ({READINGS[-1]} s) and the fill")
    # What the windows may hold at most (a frame is its pad and under 200 bytes more).
    most = a.streams * min(max(counts) * (a.bytes + 200), MAX_BYTES)
    if most > CALLER_SHARE // 2:
        raise SystemExit(f"window_memory.py: {a.streams} streams may hold {most >> 20} MiB, over half a caller's stream memory: fewer --streams")
    rows = []
    for count in counts:
        work = tempfile.mkdtemp(prefix="mcp-window-")
        procs = []
        try:
            host, url = spawn_host([os.path.abspath(a.host_bin), "--port", "0", "--workers", "1", "--packs", "echo,soak",
                                    "--config", os.path.join(HERE, "peers", "ours-bench.toml")], work, procs=procs)
            readings, frame, ready_s = asyncio.run(measure(host.pid, url, a.streams, count, a.bytes, a.hold_ms))
            rows.append({"events": count, "rss_kib": readings[-1], "rss_kib_readings": readings,
                         "readings_s": list(READINGS), "filled_in_s": round(ready_s, 2),
                         "frame_bytes": round(frame, 1)})
        finally:
            for p in procs:
                stop(p, timeout_s=20)
            shutil.rmtree(work, ignore_errors=True)
    base = rows[0]["rss_kib"]
    print(f"{a.streams} streams, log events of a {a.bytes}-byte pad, RSS while held ({READINGS[-1]} s after the last filled):")
    print("| events sent a stream | held (window bounds) | RSS KiB | over 0 events, KiB a stream | bytes a held event | its frame | overhead |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        grow = (r["rss_kib"] - base) / a.streams
        r["kib_per_stream_over_empty"] = round(grow, 2)
        if r["events"]:
            frame = r["frame_bytes"]
            held = max(1, min(r["events"], MAX_EVENTS, int(MAX_BYTES // frame)))
            per = grow * 1024 / held
            r.update(held=held, bytes_per_held_event=round(per, 1), overhead_per_event=round(per - frame, 1))
            print(f"| {r['events']:,} | {held:,} | {r['rss_kib']:,} | {grow:.1f} | {per:.0f} | {frame:.0f} | {per - frame:.0f} |")
        else:
            print(f"| 0 | 0 | {r['rss_kib']:,} | – | – | – | – |")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"streams": a.streams, "pad_bytes": a.bytes, "hold_ms": a.hold_ms, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
