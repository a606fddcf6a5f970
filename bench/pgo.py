#!/usr/bin/env python3
"""A profile-guided build of mcp-host for a deploy (issue 23), optional: the `dist` profile (fat
LTO, one codegen unit) built once with LLVM's instrumentation, run under a training load, and
built again with the profile it wrote, so the compiler lays out and inlines the hot paths as
they run. The code is the same whatever the profile.

Training, each run on a fresh host (one worker, the default log level, as the side-by-side run
starts it) in a temporary directory, stopped with SIGTERM so that it writes its profile as it
exits: wrk with 64 connections for `--seconds` each on `tools/call echo` in a 2025-11-25 session
answered as SSE (one session, then 64), the same answered as JSON, a 2026-07-28 stateless call,
and `initialize`; then `mcp-load run --era mixed` for twice as long with cut SSE responses (so
resumes, GET streams and the other tools of its mix run too). These are the kinds the side by
side measures: a deploy whose traffic is another mix trains on its own for the best layout.
Every host's profile must be there and not empty.

Usage (from the project root):
  python3 bench/pgo.py --out /tmp/mcp-host-pgo [--seconds 4] [--work DIR] [--keep]
Needs x86_64 or another target rustc builds for, wrk, llvm-profdata (`rustup component add
llvm-tools`) and a release build of mcp-load (`cargo build --release -p mcp-load`: an
instrumented one would write a profile of its own client code). The two builds use their own
target directories under the work directory, about 2.7 GB together; each is a full build, its
fat-LTO link about 2 GB of memory (on this 2-core machine 9 min 12 s and 6 min 33 s, then
8 min 02 s and 5 min 17 s; a whole run 12 to 16 minutes, 11 min 41 s on 2026-12-07). A work directory pgo.py makes is removed at the end unless --keep or a
failure (then its path is printed); one given with --work is never removed. Loopback only; the
hosts, wrk, mcp-load and cargo (its whole process group) are stopped on any exit of pgo.py but
SIGKILL.
"""

import argparse
import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from flamegraph import load
from hostproc import calls_summary, spawn_host, stop

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# What mcp-load's default mix calls (`mcp-load run --help`).
MIXED_PACKS = "conformance,echo,ledger"


def host_triple():
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return next(l.split(": ", 1)[1] for l in out.splitlines() if l.startswith("host: "))


def llvm_profdata(triple):
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True, check=True).stdout.strip()
    tool = os.path.join(sysroot, "lib", "rustlib", triple, "bin", "llvm-profdata")
    if not os.access(tool, os.X_OK):
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: {tool} missing (rustup component add llvm-tools)")
    return tool


def build(target_dir, rustflag, triple, log, cwd=ROOT, package="mcp-host", profile="dist", env=None):
    """`cargo build` of `package` (in the workspace at `cwd`) with `profile` for `triple`, its
    code built with `rustflag`, into `target_dir`; `env` adds to the environment (a profile's
    settings). Returns the binary's path. Shared with `peers/pgo-actix.py`."""
    # With --target, the flag reaches the host's code only, not the build scripts and proc
    # macros the build runs (instrumented, each of them wrote a profile of its own). Passed
    # encoded (one flag, so a path may hold spaces); RUSTFLAGS would lose to it anyway.
    env = {**os.environ, **(env or {}), "CARGO_ENCODED_RUSTFLAGS": rustflag}
    for k in ("RUSTFLAGS", "LLVM_PROFILE_FILE"):
        env.pop(k, None)
    with open(log, "w") as f:
        # Its own process group: on any exit of the caller, cargo and every rustc it runs stop.
        p = subprocess.Popen(["cargo", "build", "--profile", profile, "-p", package, "--target", triple,
                              "--target-dir", target_dir], cwd=cwd, env=env, stdout=f,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = p.wait()
        except BaseException:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()
            raise
    if code != 0:
        raise SystemExit(f"{os.path.basename(sys.argv[0])}: the build failed (its output: {log})")
    return os.path.join(target_dir, triple, profile, package)


@contextlib.contextmanager
def training_host(host_bin, args, what, work, procs):
    """A fresh host for one training run (one worker, its own directory under `work`), as its
    URL; stopped with SIGTERM after the run, so that it drains and writes its profile."""
    d = tempfile.mkdtemp(prefix="pgo-host-", dir=work)
    host, url = spawn_host([host_bin, "--port", "0", "--workers", "1", *args], d, procs=procs)
    try:
        yield url
    finally:
        stop(host, timeout_s=30)
    if host.returncode != 0:
        raise SystemExit(f"pgo.py: the host of {what} exited {host.returncode}")


def mixed_run(host_bin, load_bin, seconds, work, procs):
    """`mcp-load run --era mixed` against a host started and stopped here (the one `run
    --spawn-host` starts is killed, and writes no profile)."""
    with training_host(host_bin, ["--packs", MIXED_PACKS], "the mixed run", work, procs) as url:
        r = subprocess.run([load_bin, "run", "--url", url, "--era", "mixed", "--clients", "32",
                            "--seconds", str(seconds), "--cut-rate", "0.05", "--no-progress", "--fail-on-error"],
                           capture_output=True, text=True, timeout=seconds + 120)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            raise SystemExit("pgo.py: the mixed training run failed")
        summary = next((l for l in r.stdout.splitlines() if l.startswith("calls ok")), "?")
        print(f"  mcp-load run --era mixed: {summary}", flush=True)


def wrk_run(host_bin, kind, sessions, seconds, work, procs):
    args = ["--packs", "echo"]
    if kind == "initialize":
        # The side-by-side run's caps: a storm of new sessions from one address.
        args += ["--config", os.path.join(HERE, "peers", "ours-bench.toml")]
    with training_host(host_bin, args, kind, work, procs) as url:
        training_load("pgo.py", url, kind, sessions, seconds)


def training_load(script, url, kind, sessions, seconds):
    """wrk with 64 connections for `seconds` on `kind`'s body (flamegraph.py's) at `url`; fails
    the script on any error (shared with peers/pgo-actix.py)."""
    env = {**os.environ, **load(kind, url, sessions), "POOL": "10000"}
    out = subprocess.run(["wrk", "-t1", "-c64", f"-d{seconds}s", "--timeout", "10s",
                          "-s", os.path.join(HERE, "lua", "calls.lua"), url],
                         env=env, capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    stats = calls_summary(out) or {}
    errors = sum(v for k, v in stats.items() if k.startswith("err_"))
    if not stats.get("requests") or errors:
        raise SystemExit(f"{script}: training run {kind} ({sessions} sessions) failed: {stats}")
    print(f"  {kind}, {sessions} session(s): {stats['requests']} requests", flush=True)


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

    def train(gen, procs, work):
        runs = (("legacy-sse", 1), ("legacy-sse", 64), ("legacy-json", 1), ("modern-json", 1), ("initialize", 1))
        for kind, sessions in runs:
            wrk_run(gen, kind, sessions, a.seconds, work, procs)
        mixed_run(gen, a.load_bin, a.seconds * 2, work, procs)
        return len(runs) + 1

    profile_guided("pgo.py", a.out, a.work, a.keep, "mcp-pgo-", {}, train)


def profile_guided(script, out, work, keep, prefix, build_kw, train):
    """What pgo.py and peers/pgo-actix.py share: an instrumented build (`build(**build_kw)`),
    `train(binary, procs, work)` (it runs the binary, each process it starts appended to
    `procs`, its own files under `work`; it returns how many processes wrote a profile), the
    profiles checked (that many, none empty, nothing else) and merged, and the profile-guided
    build copied to `out`. `work` (None: a new temporary directory named from `prefix`,
    removed at the end unless `keep` or a failure) holds builds, logs and profiles. SIGTERM
    ends it through its `finally`, as Ctrl-C does: every process in `procs` and the builds'
    cargo stop."""
    triple = host_triple()
    profdata = llvm_profdata(triple)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    made = work is None
    work = os.path.abspath(work or tempfile.mkdtemp(prefix=prefix))
    os.makedirs(work, exist_ok=True)
    prof = os.path.join(work, "profiles")
    shutil.rmtree(prof, ignore_errors=True)
    os.makedirs(prof)
    procs = []
    done = False
    try:
        print(f"{script}: the instrumented build", flush=True)
        gen = build(os.path.join(work, "gen"), f"-Cprofile-generate={prof}", triple, os.path.join(work, "gen.log"),
                    **build_kw)
        # One file per process: each writes its own as it exits.
        os.environ["LLVM_PROFILE_FILE"] = os.path.join(prof, "run-%p.profraw")
        print(f"{script}: training", flush=True)
        expected = train(gen, procs, work)
        raws = glob.glob(os.path.join(prof, "run-*.profraw"))
        empty = [r for r in raws if os.path.getsize(r) == 0]
        others = set(glob.glob(os.path.join(prof, "*"))) - set(raws)
        if len(raws) != expected or empty or others:
            raise SystemExit(f"{script}: {len(raws)} processes' profiles written, {expected} expected, {len(empty)} "
                             f"of them empty (a process that did not exit cleanly), {len(others)} other files")
        merged = os.path.join(work, "merged.profdata")
        subprocess.run([profdata, "merge", "-o", merged, *raws], check=True)
        print(f"{script}: the profile-guided build", flush=True)
        use = build(os.path.join(work, "use"), f"-Cprofile-use={merged}", triple, os.path.join(work, "use.log"),
                    **build_kw)
        shutil.copy2(use, out)
        print(f"{script}: {out}")
        done = True
    finally:
        for p in reversed(procs):
            stop(p, timeout_s=10)
        if made and done and not keep:
            shutil.rmtree(work, ignore_errors=True)
        elif not done:
            print(f"{script}: stopped; its builds, logs and profiles are in {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
