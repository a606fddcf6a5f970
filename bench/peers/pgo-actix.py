#!/usr/bin/env python3
"""Raw actix-web built as `bench/pgo.py` builds mcp-host (issue 23): fat LTO, one codegen unit,
guided by a profile of a training load. With it the side by side compares a profile-guided
build of ours with the same kind of build of the baseline, not with raw's plain release build
(which would credit ours with a gain raw gets too).

The peer is the harness's own (`actix-peer` in a built copy of shared/peers, e.g. /tmp/pp after
README's build command); its sources are not changed, only built again in target directories of
their own under --work. Training, each run on a fresh peer pinned to CPU 1 (one worker, as the
side by side runs it), stopped with SIGTERM so that it writes its profile as it exits: wrk with
64 connections for `--seconds` each on the bodies the side by side sends raw
(`tools/call echo`, then `initialize`). On this 2-core machine a whole run took 2 min 10 s.

Usage (from the project root):
  python3 bench/peers/pgo-actix.py --peers /tmp/pp --out /tmp/pp/actix-peer-pgo [--seconds 4] [--work DIR]
  then, added to run-all.sh's command (ours' profile-guided build as EXTRA_PEER2):
  EXTRA_PEER3="actix-pgo|PEER_NAME=actix-pgo PEER_BIN=/tmp/pp/actix-peer-pgo /tmp/pp/start-bin.sh 21400|http://127.0.0.1:21400/mcp"
Needs cargo, wrk, taskset and llvm-profdata (`rustup component add llvm-tools`). A work directory it
makes is removed at the end, kept after a failure (its path is printed: the builds' logs are
there); one given with --work is never removed. Loopback only; every peer, wrk and cargo (its
whole process group) it starts is stopped on any exit but SIGKILL.
"""

import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hostproc import spawn_peer, stop  # noqa: E402  (bench/, this folder's parent)
from pgo import profile_guided, training_load  # noqa: E402

# Our `dist` profile's settings, given to the peer workspace's release profile.
DIST = {"CARGO_PROFILE_RELEASE_LTO": "fat", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "1"}


def train_run(peer_bin, kind, seconds, procs):
    """One training run of `kind` against a fresh peer on CPU 1 (one worker)."""
    peer, url = spawn_peer(peer_bin, 1, procs)
    try:
        training_load("pgo-actix.py", url, kind, 1, seconds)
    finally:
        stop(peer, timeout_s=30)
    if peer.returncode != 0:
        raise SystemExit(f"pgo-actix.py: the peer of {kind} exited {peer.returncode}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", required=True, help="a built copy of shared/peers (its rust/ workspace)")
    ap.add_argument("--out", required=True, help="where the profile-guided actix-peer is copied")
    ap.add_argument("--seconds", type=int, default=4, help="each training run's length")
    ap.add_argument("--work", help="builds, profiles and logs (default: a new temporary directory)")
    a = ap.parse_args()
    rust_dir = os.path.join(os.path.abspath(a.peers), "rust")
    if not os.path.isfile(os.path.join(rust_dir, "actix-peer", "Cargo.toml")):
        raise SystemExit(f"pgo-actix.py: {rust_dir}/actix-peer missing")
    for tool in ("wrk", "cargo", "taskset"):
        if not shutil.which(tool):
            raise SystemExit(f"pgo-actix.py: {tool} not found")

    def train(gen, procs, _work):
        for kind in ("legacy-json", "initialize"):
            train_run(gen, kind, a.seconds, procs)
        return 2

    profile_guided("pgo-actix.py", a.out, a.work, False, "pgo-actix-",
                   {"cwd": rust_dir, "package": "actix-peer", "profile": "release", "env": DIST}, train)


if __name__ == "__main__":
    main()
