#!/usr/bin/env python3
"""A profile-guided build of mcp-host for a deploy (issue 23): the `dist` profile (fat LTO, one
codegen unit) built once with LLVM's instrumentation, run under a training load, and built again
with the profile it wrote, so the compiler lays out and inlines the hot paths as they run.

Training (each on a fresh host in a temporary directory, stopped with SIGTERM so it writes its
profile): wrk with 64 connections for `--seconds` each on `tools/call echo` in a 2025-11-25
session answered as SSE (one session, then 64), the same answered as JSON, a 2026-07-28
stateless call, and `initialize`; then `mcp-load run --era mixed` with cut SSE responses (so
resumes, GET streams and the other tools of its mix run too). The host runs with one worker at
the default log level, as the side-by-side run starts it.

Usage (from the project root):
  python3 bench/pgo.py --out /tmp/mcp-host-pgo [--seconds 4] [--work DIR] [--keep]
Needs wrk, llvm-profdata (`rustup component add llvm-tools`) and a release build of mcp-load
(`cargo build --release -p mcp-load`: its own client code must not train the host's profile).
The two builds use their own target directories under --work (each a full build: 9 min 12 s and
6 min 33 s on this 2-core machine; the whole run about 18 minutes). Loopback only; every process
it starts is stopped on any exit path.

The training is the side-by-side run's request kinds (bench/peers): a deployment whose traffic is
another mix trains on its own for the best layout; the code is the same whatever the profile.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from flamegraph import load
from hostproc import calls_summary, spawn_host, stop

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRIPLE = "x86_64-unknown-linux-gnu"


def llvm_profdata():
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True).stdout.strip()
    tool = os.path.join(sysroot, "lib", "rustlib", TRIPLE, "bin", "llvm-profdata")
    if not os.access(tool, os.X_OK):
        raise SystemExit(f"pgo.py: {tool} missing (rustup component add llvm-tools)")
    return tool


def build(target_dir, rustflags, log):
    # With --target, RUSTFLAGS reach the host's code only, not the build scripts and proc
    # macros the build runs (instrumented, each of them wrote a profile of its own).
    env = {**os.environ, "RUSTFLAGS": rustflags}
    env.pop("LLVM_PROFILE_FILE", None)
    with open(log, "w") as f:
        r = subprocess.run(["cargo", "build", "--profile", "dist", "-p", "mcp-host", "--target", TRIPLE,
                            "--target-dir", target_dir], cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise SystemExit(f"pgo.py: the build failed (its output: {log})")
    return os.path.join(target_dir, TRIPLE, "dist", "mcp-host")


def wrk_run(host_bin, kind, sessions, seconds, work, procs):
    args = ["--port", "0", "--workers", "1", "--packs", "echo"]
    if kind == "initialize":
        # The side-by-side run's caps: a storm of new sessions from one address.
        args += ["--config", os.path.join(HERE, "peers", "ours-bench.toml")]
    d = tempfile.mkdtemp(prefix="pgo-host-", dir=work)
    host, url = spawn_host([host_bin, *args], d, procs=procs)
    try:
        env = {**os.environ, **load(kind, url, sessions), "POOL": "10000"}
        out = subprocess.run(["wrk", "-t1", "-c64", f"-d{seconds}s", "--timeout", "10s",
                              "-s", os.path.join(HERE, "lua", "calls.lua"), url],
                             env=env, capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
        stats = calls_summary(out) or {}
        errors = sum(v for k, v in stats.items() if k.startswith("err_"))
        if not stats.get("requests") or errors:
            raise SystemExit(f"pgo.py: training run {kind} ({sessions} sessions) failed: {stats}")
        print(f"  {kind}, {sessions} session(s): {stats['requests']} requests", flush=True)
    finally:
        # SIGTERM: the host drains and exits, writing its profile.
        stop(host, timeout_s=30)
    if host.returncode != 0:
        raise SystemExit(f"pgo.py: the host of {kind} exited {host.returncode}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where the profile-guided mcp-host is copied")
    ap.add_argument("--seconds", type=int, default=4, help="each training run's length")
    ap.add_argument("--work", help="builds, profiles and logs (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep --work afterwards")
    ap.add_argument("--load-bin", default=os.path.join(ROOT, "target", "release", "mcp-load"))
    a = ap.parse_args()
    for tool in ("wrk", "cargo"):
        if not shutil.which(tool):
            raise SystemExit(f"pgo.py: {tool} not found")
    if not os.access(a.load_bin, os.X_OK):
        raise SystemExit(f"pgo.py: {a.load_bin} missing (cargo build --release -p mcp-load)")
    profdata = llvm_profdata()
    work = os.path.abspath(a.work or tempfile.mkdtemp(prefix="mcp-pgo-"))
    os.makedirs(work, exist_ok=True)
    prof = os.path.join(work, "profiles")
    shutil.rmtree(prof, ignore_errors=True)
    os.makedirs(prof)
    procs = []
    try:
        print("pgo.py: the instrumented build", flush=True)
        gen = build(os.path.join(work, "gen"), f"-Cprofile-generate={prof}", os.path.join(work, "gen.log"))
        # One file per process: each host writes its own as it exits.
        os.environ["LLVM_PROFILE_FILE"] = os.path.join(prof, "host-%p.profraw")
        print("pgo.py: training", flush=True)
        runs = (("legacy-sse", 1), ("legacy-sse", 64), ("legacy-json", 1), ("modern-json", 1), ("initialize", 1))
        for kind, sessions in runs:
            wrk_run(gen, kind, sessions, a.seconds, work, procs)
        mixed = subprocess.run([a.load_bin, "run", "--spawn-host", gen, "--era", "mixed", "--clients", "32",
                                "--seconds", str(a.seconds * 2), "--cut-rate", "0.05", "--no-progress"],
                               capture_output=True, text=True, timeout=a.seconds * 2 + 120)
        if mixed.returncode != 0:
            sys.stderr.write(mixed.stdout + mixed.stderr)
            raise SystemExit("pgo.py: the mixed training run failed")
        print("  mcp-load run --era mixed: done", flush=True)
        raws = glob.glob(os.path.join(prof, "host-*.profraw"))
        others = set(glob.glob(os.path.join(prof, "*"))) - set(raws)
        if len(raws) != len(runs) + 1 or others:
            raise SystemExit(f"pgo.py: {len(raws)} hosts' profiles written, {len(runs) + 1} expected "
                             f"(a host that did not exit cleanly?), and {len(others)} other files")
        merged = os.path.join(work, "merged.profdata")
        subprocess.run([profdata, "merge", "-o", merged, *raws], check=True)
        print("pgo.py: the profile-guided build", flush=True)
        use = build(os.path.join(work, "use"), f"-Cprofile-use={merged}", os.path.join(work, "use.log"))
        shutil.copy2(use, a.out)
        print(f"pgo.py: {a.out}")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
                p.wait()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
