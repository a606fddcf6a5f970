#!/usr/bin/env python3
"""Per-rep ratios to raw actix-web (or another base), from a run-all.sh folder's bench.jsonl.

Each rep runs its peers one after another, so a peer's figure over raw actix-web's in the same
rep compares two servers on the machine as it was for that rep; the median of those ratios is
the second figure README's side-by-side table gives beside the ratio of the medians
(summarize.py's).

Usage: python3 bench/peers/paired.py RUN_FOLDER [--base PEER] [PEER ...]
  (default base: actix, raw actix-web's release build; default peers: every one but the base.
  `--base actix-pgo ours-pgo`: the profile-guided builds, pgo-actix.py's and bench/pgo.py's)
Writes the table to stdout (README's runs keep it as RUN_FOLDER/paired-ratios.txt).
"""

import argparse
import collections
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="a run-all.sh output folder (its bench.jsonl)")
    ap.add_argument("peers", nargs="*", help="the peers to compare (default: every one but the base)")
    ap.add_argument("--base", default="actix", help="the peer each ratio is to (default: actix)")
    a = ap.parse_intermixed_args()
    base = a.base
    runs = collections.defaultdict(dict)  # (measure, rep) -> peer -> row
    with open(f"{a.folder}/bench.jsonl") as f:
        for line in f:
            row = json.loads(line)
            peer, rep = row["label"].split("|")
            runs[(row["measure"], rep)][peer] = row
    known = {p for r in runs.values() for p in r}
    missing = [p for p in [base, *a.peers] if p not in known]
    if missing:
        sys.exit(f"paired.py: not in {a.folder}/bench.jsonl: {', '.join(missing)} (there: {', '.join(sorted(known))})")
    measures = sorted({m for m, _ in runs}, key=["a1", "a64", "l1", "m", "b"].index)
    peers = a.peers or sorted(known - {base})
    print(f"# per-rep ratios to {base} in the same rep (the rep's peers run one after another), "
          "then their median; bench/peers/paired.py")
    for m in measures:
        reps = sorted((r for mm, r in runs if mm == m), key=lambda r: int(r.removeprefix("rep")))
        for p in peers:
            pairs = [runs[(m, r)] for r in reps if p in runs[(m, r)] and base in runs[(m, r)]]
            if not pairs:
                continue
            rps = [x[p]["rps"] / x[base]["rps"] for x in pairs]
            cpu = [x[p]["srv_cpu_s_per_10k"] / x[base]["srv_cpu_s_per_10k"] for x in pairs]
            p99 = [x[p]["p99_ms"] / x[base]["p99_ms"] for x in pairs]
            print(
                f"{m:4} {p:14} req/s x {base} {' '.join(f'{v:.2f}' for v in rps)} median {statistics.median(rps):.2f}"
                f" | CPU x {base} median {statistics.median(cpu):.2f}"
                f" | p99 x {base} median {statistics.median(p99):.2f}"
            )


if __name__ == "__main__":
    main()
