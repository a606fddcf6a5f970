#!/usr/bin/env python3
"""summarize.py RESULTS_DIR [BASELINE=actix] — medians of the repeated runs as markdown tables.

Reads RESULTS_DIR/bench.jsonl (bench.sh) and RESULTS_DIR/mem.jsonl (mem-probe.sh). Rows are
labelled "peer|repN"; every cell is the median over reps, with the min..max spread of throughput
and the ratio to BASELINE's median (throughput: peer/baseline; latency: peer/baseline).
"""

import json
import os
import statistics as st
import sys
from collections import defaultdict

d = sys.argv[1]
base = sys.argv[2] if len(sys.argv) > 2 else "actix"


def load(name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return []
    return [json.loads(l) for l in open(p) if l.strip()]


def med(xs):
    xs = [x for x in xs if x is not None]
    return st.median(xs) if xs else None


def fmt(x, nd=1):
    if x is None:
        return "–"
    if isinstance(x, float) and abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:,.{nd}f}"


bench = defaultdict(list)
order = []
for r in load("bench.jsonl"):
    peer = r["label"].split("|")[0]
    if peer not in order:
        order.append(peer)
    bench[(peer, r["measure"])].append(r)

if bench:
    print(f"### Throughput / latency (median of reps; ratio vs `{base}` median)\n")
    for m, title in (("a1", "a1: tools/call echo, c=64, one session"),
                     ("a64", "a64: tools/call echo, c=64, 64 sessions"),
                     ("l1", "l1: tools/call echo, c=1 (unloaded latency), one session"),
                     ("m", "m: 2026-07-28 tools/call echo (JSON, no session), c=64"),
                     ("b", "b: initialize = new session, c=32")):
        b = bench.get((base, m), [])
        b_rps, b_p50, b_p99 = med([x["rps"] for x in b]), med([x["p50_ms"] for x in b]), med([x["p99_ms"] for x in b])
        b_cpu = med([x["srv_cpu_s_per_10k"] for x in b])
        print(f"**{title}**\n")
        print("| peer | n | req/s (median) | min..max | × base | p50 ms | p99 ms | p99 × base | srv CPU µs/req | CPU × base | srv RSS after MiB | errors | other-CPU s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for peer in order:
            rs = bench.get((peer, m), [])
            if not rs:
                continue
            rps = med([x["rps"] for x in rs]); p50 = med([x["p50_ms"] for x in rs]); p99 = med([x["p99_ms"] for x in rs])
            lo, hi = min(x["rps"] for x in rs), max(x["rps"] for x in rs)
            ratio = f"{rps / b_rps:.3f}" if b_rps else "–"
            lr = f"{p99 / b_p99:.1f}" if b_p99 else "–"
            cpu = med([x["srv_cpu_s_per_10k"] for x in rs])
            cr = f"{cpu / b_cpu:.2f}" if cpu and b_cpu else "–"
            print(f"| {peer} | {len(rs)} | {fmt(rps, 0)} | {fmt(lo, 0)}..{fmt(hi, 0)} | {ratio} | {fmt(p50, 2)} | {fmt(p99, 2)} | {lr} | "
                  f"{fmt(cpu * 100 if cpu else None, 1)} | {cr} | {fmt(med([x['srv_rss_mib_after'] for x in rs]))} | "
                  f"{sum(x['errors'] for x in rs)} | {fmt(med([x['other_cpu_s'] for x in rs]), 2)} |")
        print()

mem = defaultdict(list)
morder = []
for r in load("mem.jsonl"):
    peer = r["label"].split("|")[0]
    if peer not in morder:
        morder.append(peer)
    mem[peer].append(r)
if mem:
    print("### Memory (median of reps)\n")
    print("| peer | n | RSS idle MiB | RSS after 10k sessions MiB | KiB/session | 10k-init wall s | SSE streams open | RSS with +1000 SSE MiB | KiB/stream (incl. its session) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for peer in morder:
        rs = mem[peer]
        print(f"| {peer} | {len(rs)} | {fmt(med([x['rss_idle_mib'] for x in rs]))} | {fmt(med([x['rss_after_sessions_mib'] for x in rs]))} | "
              f"{fmt(med([x['kib_per_session'] for x in rs]))} | {fmt(med([x['init_wall_s'] for x in rs]), 2)} | "
              f"{fmt(med([x['sse_streams_open'] for x in rs]), 0)} | {fmt(med([x['rss_with_sse_mib'] for x in rs]))} | "
              f"{fmt(med([x['kib_per_sse_stream'] for x in rs]))} |")
    print()

allb = load("bench.jsonl")
if allb:
    oc = [x["other_cpu_s"] for x in allb if x.get("other_cpu_s") is not None]
    la = [x["loadavg1_after"] for x in allb if x.get("loadavg1_after") is not None]
    print(f"Noise: other-CPU (busy CPU-s not from server or wrk, per ~{allb[0]['duration_s']:.0f}s run): "
          f"median {st.median(oc):.2f}, max {max(oc):.2f}; loadavg1 after runs: median {st.median(la):.2f}, max {max(la):.2f}")
