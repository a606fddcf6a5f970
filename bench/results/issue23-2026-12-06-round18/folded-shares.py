#!/usr/bin/env python3
"""Shares of a host's perf samples, from the folded stacks `bench/flamegraph.py --folded F`
writes (not committed: hundreds of MB): by thread, then, within one thread, the inclusive
share of each function named (a sample counts once for a function however deep it recurs).

Usage: folded-shares.py FOLDED THREAD_PREFIX 'pattern' ['pattern' ...]
  (a pattern is a substring of a frame's name; the first frame matching counts)
"""
import collections
import sys


def main():
    path, thread, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
    threads = collections.Counter()
    hits = collections.Counter()
    total = 0
    for line in open(path):
        stack, n = line.rsplit(" ", 1)
        n = int(n)
        frames = stack.split(";")
        threads[frames[0]] += n
        if not frames[0].startswith(thread):
            continue
        total += n
        for p in patterns:
            if any(p in f for f in frames[1:]):
                hits[p] += n
    every = sum(threads.values())
    print(f"{path}: {every} samples (weighted)")
    for t, n in threads.most_common():
        print(f"  thread {t}: {100 * n / every:.2f} %")
    print(f"within threads named {thread}*: inclusive share of each pattern")
    for p in patterns:
        print(f"  {100 * hits[p] / total:6.2f} %  {p}")


if __name__ == "__main__":
    main()
