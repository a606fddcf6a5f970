#!/usr/bin/env python3
"""Per-rep ratios to raw actix-web, from a run-all.sh folder's bench.jsonl.

Each rep runs its peers one after another, so a peer's figure over raw actix-web's in the same
rep compares two servers on the machine as it was for that rep; the median of those ratios is
the second figure README's side-by-side table gives beside the ratio of the medians
(summarize.py's).

Usage: python3 bench/peers/paired.py RUN_FOLDER [PEER ...]   (default peers: every one but actix)
Writes the table to stdout (README's runs keep it as RUN_FOLDER/paired-ratios.txt).
"""

import collections
import json
import statistics
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    folder, wanted = sys.argv[1], sys.argv[2:]
    runs = collections.defaultdict(dict)  # (measure, rep) -> peer -> row
    with open(f"{folder}/bench.jsonl") as f:
        for line in f:
            row = json.loads(line)
            peer, rep = row["label"].split("|")
            runs[(row["measure"], rep)][peer] = row
    measures = sorted({m for m, _ in runs}, key=["a1", "a64", "l1", "m", "b"].index)
    peers = wanted or sorted({p for r in runs.values() for p in r} - {"actix"})
    print("# per-rep ratios to raw actix-web in the same rep (the rep's peers run one after another), then their median; bench/peers/paired.py")
    for m in measures:
        reps = sorted((r for mm, r in runs if mm == m), key=lambda r: int(r.removeprefix("rep")))
        for p in peers:
            pairs = [runs[(m, r)] for r in reps if p in runs[(m, r)] and "actix" in runs[(m, r)]]
            if not pairs:
                continue
            rps = [x[p]["rps"] / x["actix"]["rps"] for x in pairs]
            cpu = [x[p]["srv_cpu_s_per_10k"] / x["actix"]["srv_cpu_s_per_10k"] for x in pairs]
            p99 = [x[p]["p99_ms"] / x["actix"]["p99_ms"] for x in pairs]
            print(
                f"{m:4} {p:14} req/s x raw {' '.join(f'{v:.2f}' for v in rps)} median {statistics.median(rps):.2f}"
                f" | CPU x raw median {statistics.median(cpu):.2f} | p99 x raw median {statistics.median(p99):.2f}"
            )


if __name__ == "__main__":
    main()
