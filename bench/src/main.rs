//! `mcp-bench`: side-by-side macro benchmark of `tools/call` echo on one MCP session at a
//! given concurrency, against a raw actix-web JSON echo measured in the same run.
//!
//! Both servers run with one worker, pinned to one core (`--server-cpu`, via `taskset`); the
//! driver should run on another core. Each of `--concurrency` keep-alive HTTP/1.1 connections
//! sends requests back to back. Reported per target: requests/s, p50/p99/max latency, server
//! CPU time per request (from /proc/<pid>/stat), and errors.
//!
//! Usage: mcp-bench [--concurrency 64] [--seconds 10] [--warmup 2] [--server-cpu 0]
//!                  [--host-bin PATH] [--raw-bin PATH] [--baseline-host-bin PATH]
//!                  [--memory-ledger] [--modern] [--auth] [--json-out FILE]
//!
//! `--modern` also measures `--host-bin` serving 2026-07-28 stateless `tools/call`s (no
//! session: `_meta` and mirrored headers on every request), after its legacy runs.
//!
//! `--auth` measures `--host-bin`'s JSON calls of both eras three ways, each on a fresh host:
//! without authentication, with a static bearer token, and with an OAuth JWT access token
//! (ES256) from a real authorization server (`scripts/oidc`, started here; the token is
//! validated on its first request and found in the cache by digest after).
//!
//! `--memory-ledger` measures `--host-bin` on a memory ledger right before each of its runs
//! on the default SQLite ledger.
//!
//! `--baseline-host-bin` measures a second mcp-host build (say, the previous release) in the
//! same run, each reply mode on the baseline right before the same mode on `--host-bin`.
//!
//! Each mcp-host runs on its default SQLite ledger in a fresh temporary working directory,
//! removed after the host stops (the raw echo has no ledger).
// A load driver measures wall time; nothing here is pausable or sans-IO.
#![allow(clippy::disallowed_types)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use hdrhistogram::Histogram;
use mcp_devtools::{HostProcess, TempDir, cpu_ticks, peak_rss_kib};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    concurrency: usize,
    seconds: u64,
    warmup: u64,
    server_cpu: Option<String>,
    host_bin: String,
    raw_bin: String,
    /// Another mcp-host build measured in the same run (e.g. the previous release).
    baseline_host_bin: Option<String>,
    /// Also measure `host_bin` on a memory ledger (`--ledger memory`), right before it runs
    /// on its default SQLite ledger.
    memory_ledger: bool,
    /// Also measure modern (2026-07-28) stateless calls on `host_bin`, after its legacy runs.
    modern: bool,
    /// Also measure JSON calls without authentication, with a static token and with an OAuth
    /// JWT.
    auth: bool,
    json_out: Option<String>,
}

fn parse_args() -> Args {
    let dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.to_path_buf()))
        .unwrap_or_default();
    let mut a = Args {
        concurrency: 64,
        seconds: 10,
        warmup: 2,
        server_cpu: Some("0".into()),
        host_bin: dir.join("mcp-host").display().to_string(),
        raw_bin: dir.join("raw-echo").display().to_string(),
        baseline_host_bin: None,
        memory_ledger: false,
        modern: false,
        auth: false,
        json_out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--concurrency" => a.concurrency = val().parse().expect("number"),
            "--seconds" => a.seconds = val().parse().expect("number"),
            "--warmup" => a.warmup = val().parse().expect("number"),
            "--server-cpu" => {
                let v = val();
                a.server_cpu = (v != "none").then_some(v);
            }
            "--host-bin" => a.host_bin = val(),
            "--raw-bin" => a.raw_bin = val(),
            "--baseline-host-bin" => a.baseline_host_bin = Some(val()),
            "--memory-ledger" => a.memory_ledger = true,
            "--modern" => a.modern = true,
            "--auth" => a.auth = true,
            "--json-out" => a.json_out = Some(val()),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

/// Start a server under test (killed on drop), pinned with `taskset -c CPU` when given, in
/// `cwd` when given (the program path is made absolute first, so it still names the same file).
fn start(bin: &str, args: &[&str], cpu: Option<&str>, cwd: Option<&Path>) -> HostProcess {
    let bin = match cwd {
        Some(_) if bin.contains('/') => {
            std::path::absolute(bin).unwrap_or_else(|e| panic!("{bin}: {e}")).display().to_string()
        }
        _ => bin.to_owned(),
    };
    let mut cmd = match cpu {
        Some(c) => {
            let mut t = Command::new("taskset");
            t.args(["-c", c, &bin]);
            t
        }
        None => Command::new(&bin),
    };
    cmd.args(args).stderr(Stdio::null());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    HostProcess::spawn(cmd, mcp_devtools::DEFAULT_START_WAIT).unwrap_or_else(|e| panic!("{e}"))
}

/// An mcp-host under test and the temporary directory of its ledger. Fields drop in
/// declaration order: the process is killed and reaped before the directory is removed.
struct Host {
    process: HostProcess,
    _ledger: TempDir,
}

/// Start an mcp-host build on its default ledger (SQLite, `mcp-host.db` in the working
/// directory) with a fresh temporary directory as its working directory: no `--ledger-path`,
/// so a `--baseline-host-bin` from before the ledger (which has no such flag) starts the same
/// way, and no run leaves a ledger behind or shares one with another.
fn start_host(bin: &str, cpu: Option<&str>, extra: &[&str]) -> Host {
    let dir = TempDir::new("bench");
    let args: Vec<&str> = ["--port", "0", "--workers", "1", "--packs", "echo"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let process = start(bin, &args, cpu, Some(dir.path()));
    Host { process, _ledger: dir }
}

struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    async fn open(addr: &str) -> Conn {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Conn { stream, buf: BytesMut::with_capacity(16 * 1024) }
    }

    async fn fill(&mut self) -> bool {
        matches!(self.stream.read_buf(&mut self.buf).await, Ok(n) if n > 0)
    }

    /// Send a request, read the whole response; returns (status, body).
    async fn round_trip(&mut self, head: &[u8], body: &[u8]) -> Option<(u16, Vec<u8>)> {
        let mut req = Vec::with_capacity(head.len() + body.len() + 32);
        req.extend_from_slice(head);
        req.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        req.extend_from_slice(body);
        self.stream.write_all(&req).await.ok()?;
        let header_end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            if !self.fill().await {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..header_end]).to_ascii_lowercase();
        self.buf.advance(header_end + 4);
        let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
        let mut out = Vec::new();
        if let Some(len) = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            while self.buf.len() < len {
                if !self.fill().await {
                    return None;
                }
            }
            out.extend_from_slice(&self.buf[..len]);
            self.buf.advance(len);
        } else {
            // chunked
            loop {
                let line_end = loop {
                    if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                        break p;
                    }
                    if !self.fill().await {
                        return None;
                    }
                };
                let size = usize::from_str_radix(
                    String::from_utf8_lossy(&self.buf[..line_end]).trim(),
                    16,
                )
                .ok()?;
                self.buf.advance(line_end + 2);
                while self.buf.len() < size + 2 {
                    if !self.fill().await {
                        return None;
                    }
                }
                out.extend_from_slice(&self.buf[..size]);
                self.buf.advance(size + 2);
                if size == 0 {
                    break;
                }
            }
        }
        Some((status, out))
    }
}

#[derive(Clone, Copy)]
enum Target {
    Raw,
    /// A legacy (2025-11-25) session's `tools/call`.
    Mcp {
        sse: bool,
    },
    /// A modern (2026-07-28) stateless `tools/call`: no session, `_meta` and mirrored headers.
    Modern {
        sse: bool,
    },
}

struct Outcome {
    name: String,
    requests: u64,
    errors: u64,
    seconds: f64,
    hist: Histogram<u64>,
    cpu_us_per_req: f64,
    peak_rss_kib: u64,
}

fn host_port(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("http url");
    let (hp, path) = rest.split_once('/').unwrap_or((rest, ""));
    (hp.to_owned(), format!("/{path}"))
}

async fn initialize(addr: &str, path: &str, auth: &str) -> String {
    let mut c = Conn::open(addr).await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json\r\nConnection: close\r\n{auth}"
    );
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcp-bench","version":"1"}}}).to_string();
    let mut req = head.into_bytes();
    req.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    req.extend_from_slice(body.as_bytes());
    c.stream.write_all(&req).await.expect("write");
    let mut all = Vec::new();
    c.stream.read_to_end(&mut all).await.expect("read");
    let text = String::from_utf8_lossy(&all).to_string();
    let sid = text
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("mcp-session-id:")
                .then(|| l.split_once(':').map(|(_, v)| v.trim().to_owned()))
                .flatten()
        })
        .expect("session id in initialize response");
    let mut c = Conn::open(addr).await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n{auth}"
    );
    let (status, _) = c
        .round_trip(head.as_bytes(), br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await
        .expect("initialized");
    assert_eq!(status, 202);
    sid
}

async fn run(target: Target, url: &str, pid: u32, a: &Args) -> Outcome {
    run_as(target, url, pid, a, None).await
}

/// [`run`] with `token` as every request's bearer token.
async fn run_as(target: Target, url: &str, pid: u32, a: &Args, token: Option<&str>) -> Outcome {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let (addr, path) = host_port(url);
    let head = match target {
        Target::Raw => {
            format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n")
        }
        Target::Mcp { sse } => {
            let sid = initialize(&addr, &path, &auth).await;
            let accept =
                if sse { "application/json, text/event-stream" } else { "application/json" };
            format!(
                "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: {accept}\r\nMcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n{auth}"
            )
        }
        Target::Modern { sse } => {
            let accept =
                if sse { "application/json, text/event-stream" } else { "application/json" };
            format!(
                "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: {accept}\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n{auth}"
            )
        }
    };
    let modern = matches!(target, Target::Modern { .. });
    let head = Arc::new(head.into_bytes());
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for conn_no in 0..a.concurrency {
        let (head, measuring, stop, errors, addr) = (
            Arc::clone(&head),
            Arc::clone(&measuring),
            Arc::clone(&stop),
            Arc::clone(&errors),
            addr.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
            let mut c = Conn::open(&addr).await;
            let mut n: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = (conn_no as u64) * 1_000_000_000 + n;
                let body = if modern {
                    format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"bench {id}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"mcp-bench","version":"1"}}}}}}}}"#
                    )
                } else {
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"bench {id}"}}}}}}"#)
                };
                let t0 = Instant::now();
                let ok = match c.round_trip(&head, body.as_bytes()).await {
                    Some((200, resp)) => resp.windows(6).any(|w| w == b"bench ") && resp.windows(8).any(|w| w == b"\"result\""),
                    Some(_) => false,
                    None => {
                        c = Conn::open(&addr).await;
                        false
                    }
                };
                if measuring.load(Ordering::Relaxed) {
                    if ok {
                        let _ = hist.record(t0.elapsed().as_micros().max(1) as u64);
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            hist
        }));
    }
    tokio::time::sleep(Duration::from_secs(a.warmup)).await;
    let cpu0 = cpu_ticks(pid).unwrap_or(0);
    let t0 = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(a.seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let seconds = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_ticks(pid).unwrap_or(0);
    stop.store(true, Ordering::Relaxed);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    for t in tasks {
        if let Ok(h) = t.await {
            hist.add(&h).expect("same bounds");
        }
    }
    let requests = hist.len();
    let cpu_us = (cpu1.saturating_sub(cpu0)) as f64 * 10_000.0;
    let name = match target {
        Target::Raw => "raw actix-web JSON echo",
        Target::Mcp { sse: true } => "mcp-host tools/call echo (SSE)",
        Target::Mcp { sse: false } => "mcp-host tools/call echo (JSON)",
        // An echo sends nothing before its result, so it is answered with one JSON body even
        // when the client accepts SSE (see docs/protocol.md, the 2026-07-28 era).
        Target::Modern { sse: true } => "mcp-host modern tools/call echo (accepts SSE)",
        Target::Modern { sse: false } => "mcp-host modern tools/call echo (JSON)",
    };
    Outcome {
        name: name.to_owned(),
        requests,
        errors: errors.load(Ordering::Relaxed),
        seconds,
        hist,
        cpu_us_per_req: if requests > 0 { cpu_us / requests as f64 } else { 0.0 },
        peak_rss_kib: peak_rss_kib(pid).unwrap_or(0),
    }
}

/// `--auth`: JSON calls of both eras on fresh hosts without authentication, with a static
/// token, and with an OAuth JWT from the test authorization server.
fn measure_auth(
    rt: &tokio::runtime::Runtime,
    a: &Args,
    cpu: Option<&str>,
    outcomes: &mut Vec<Outcome>,
) {
    const STATIC: &str = "mcp-bench-static-token";
    const RESOURCE: &str = "http://127.0.0.1/mcp-bench";
    let provider = mcp_devtools::OidcProvider::start().unwrap_or_else(|e| panic!("{e}"));
    let jwt = provider.token("jwt-es256", RESOURCE, "mcp").unwrap_or_else(|e| panic!("{e}"));
    let issuer = format!("--oauth-issuer={}", provider.issuer());
    let resource = format!("--oauth-resource={RESOURCE}");
    let protected =
        ["--set", "security.bearer_tokens.mcp-bench-static-token=bench", &issuer, &resource];
    let runs: [(&str, &[&str], Option<&str>); 3] = [
        ("no auth", &[], None),
        ("static token", &protected, Some(STATIC)),
        ("OAuth JWT (cached)", &protected, Some(&jwt)),
    ];
    for target in [Target::Mcp { sse: false }, Target::Modern { sse: false }] {
        for (label, extra, token) in &runs {
            let host = start_host(&a.host_bin, cpu, extra);
            let mut o =
                rt.block_on(run_as(target, host.process.url(), host.process.pid(), a, *token));
            o.name = format!("{} ({label})", o.name);
            outcomes.push(o);
        }
    }
}

fn main() {
    let a = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let cpu = a.server_cpu.as_deref();
    let mut outcomes = Vec::new();
    {
        let raw = start(&a.raw_bin, &[], cpu, None);
        outcomes.push(rt.block_on(run(Target::Raw, raw.url(), raw.pid(), &a)));
    }
    // With a baseline build, each reply mode is measured on it right before this build.
    // With --memory-ledger, this build on a memory ledger runs right before it on SQLite.
    let memory: &[&str] = &["--ledger", "memory"];
    let builds: Vec<(&str, &str, &[&str])> = a
        .baseline_host_bin
        .as_deref()
        .map(|b| ("baseline ", b, &[][..]))
        .into_iter()
        .chain(a.memory_ledger.then_some(("memory ledger ", a.host_bin.as_str(), memory)))
        .chain([("", a.host_bin.as_str(), &[][..])])
        .collect();
    for sse in [true, false] {
        for (label, bin, extra) in &builds {
            let host = start_host(bin, cpu, extra);
            let mut o =
                rt.block_on(run(Target::Mcp { sse }, host.process.url(), host.process.pid(), &a));
            o.name = format!("{label}{}", o.name);
            outcomes.push(o);
        }
        // The modern era on this build (a baseline before it may not speak it).
        if a.modern {
            let host = start_host(&a.host_bin, cpu, &[]);
            outcomes.push(rt.block_on(run(
                Target::Modern { sse },
                host.process.url(),
                host.process.pid(),
                &a,
            )));
        }
    }
    if a.auth {
        measure_auth(&rt, &a, cpu, &mut outcomes);
    }
    println!(
        "concurrency {} on one session, {} s measured after {} s warm-up, server pinned to cpu {:?}",
        a.concurrency, a.seconds, a.warmup, a.server_cpu
    );
    println!(
        "| target | req/s | p50 µs | p99 µs | max µs | server CPU µs/req | server peak RSS MiB | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for o in &outcomes {
        let rps = o.requests as f64 / o.seconds;
        let (p50, p99, max) =
            (o.hist.value_at_quantile(0.50), o.hist.value_at_quantile(0.99), o.hist.max());
        let rss_mib = o.peak_rss_kib as f64 / 1024.0;
        println!(
            "| {} | {:.0} | {} | {} | {} | {:.1} | {:.1} | {} |",
            o.name, rps, p50, p99, max, o.cpu_us_per_req, rss_mib, o.errors
        );
        rows.push(json!({"target": o.name, "requests": o.requests, "req_per_s": rps, "p50_us": p50, "p99_us": p99, "max_us": max,
            "server_cpu_us_per_req": o.cpu_us_per_req, "server_peak_rss_mib": rss_mib, "errors": o.errors}));
    }
    let raw_rps = outcomes[0].requests as f64 / outcomes[0].seconds;
    for o in &outcomes[1..] {
        println!(
            "{}: {:.2}x the raw throughput",
            o.name,
            (o.requests as f64 / o.seconds) / raw_rps
        );
    }
    if let Some(path) = &a.json_out {
        let doc = json!({"concurrency": a.concurrency, "seconds": a.seconds, "results": rows});
        std::fs::write(path, serde_json::to_vec_pretty(&doc).expect("json")).expect("write json");
    }
}
