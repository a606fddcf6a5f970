#!/usr/bin/env python3
"""Every source path a doc names exists.

The docs (README.md, ARCHITECTURE.md, docs/*.md) name files and folders of the tree in
backticks (`runtime/src/http/metrics.rs`, `actor/session/`). A path that no longer exists
misleads the reader; this check fails on one. A backticked word is a path when it ends in
`.rs`, `.py`, `.sh` or `/` and has no spaces, wildcards or placeholders. It is looked up from
the repository root, then under `runtime/src/`, `bins/host/`, `loadtest/src/` (the docs name
runtime files from `runtime/src`, as ARCHITECTURE.md's table does).

Exit status 0 when every named path exists, 1 otherwise (each missing one printed with its
file and line). `--self-test` checks the extraction.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASES = ["", "runtime/src/", "runtime/", "bins/host/", "bins/host/src/", "loadtest/src/", "bench/"]
TICKED = re.compile(r"`([^`\s]+)`")
PATHLIKE = re.compile(r"^[A-Za-z0-9_./-]+(\.rs|\.py|\.sh|/)$")


def named_paths(text):
    """(line number, path) of every backticked path in `text`."""
    for n, line in enumerate(text.splitlines(), 1):
        for m in TICKED.finditer(line):
            word = m.group(1).rstrip(",.;:")
            # Absolute paths, paths outside the repository (`../shared/…`) and build output
            # (`target/…`, absent from a clean clone) are not checked.
            if PATHLIKE.match(word) and "<" not in word and not word.startswith(("/", "..", "http", "target")):
                yield n, word


def exists(path):
    return any(os.path.exists(os.path.join(ROOT, base, path)) for base in BASES)


def docs():
    names = ["README.md", "ARCHITECTURE.md"]
    names += sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")))
    return [n for n in names if n.endswith(".md")]


def self_test():
    text = "see `runtime/src/http/metrics.rs` and `actor/session/`, not `a b.rs` or `x`\n"
    text += "`--set`, `foo.toml`, `<dir>/x.rs`, `../shared/p/x.py`, `target/`, `stores/receipts.rs`.\n"
    got = list(named_paths(text))
    assert got == [(1, "runtime/src/http/metrics.rs"), (1, "actor/session/"), (2, "stores/receipts.rs")], got
    assert exists("runtime/src/lib.rs") and exists("stores/receipts.rs")
    assert not exists("actor/no_such_file.rs")
    print("check-doc-paths: self-test passed")
    return 0


def main():
    if "--self-test" in sys.argv:
        return self_test()
    missing = []
    for doc in docs():
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            for n, path in named_paths(f.read()):
                if not exists(path):
                    missing.append(f"{doc}:{n}: `{path}` does not exist")
    for m in missing:
        print(m, file=sys.stderr)
    if missing:
        print(f"check-doc-paths: {len(missing)} path(s) named in the docs do not exist", file=sys.stderr)
        return 1
    print(f"check-doc-paths: every path the docs name exists ({len(docs())} pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
