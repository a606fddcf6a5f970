//! `mcp-load`: drives MCP servers with the resilient client.
//!
//! - `probe`: one client against any MCP URL (connect, list tools, call a tool, optionally
//!   require that the call completed through a resumed stream, DELETE).
//! - `run`: load from many virtual clients with a latency report, optionally through the
//!   fault-injecting proxy.
//! - `gate`: the release gate — every fault scenario, alone and mixed, with a pass/fail table.
//! - `soak`: abusive and unlucky traffic against a host it starts, then silence; the host
//!   must return to 0 sessions and streams and to its idle memory.

mod admin;
mod baskets;
#[cfg(test)]
mod cli_tests;
mod gate;
mod http1;
mod proxy;
mod run;
#[cfg(test)]
mod scenario_tests;
mod soak;
mod token;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{BearerToken, ClientConfig, McpClient};
use serde_json::{Value, json};

#[derive(Parser)]
#[command(name = "mcp-load", version, about = "Drive MCP servers with the resilient client")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Connect to URL, list tools, call one, check the result; exit 1 on any failure.
    Probe {
        /// MCP endpoint URL.
        #[arg(long)]
        url: String,
        /// Tool to call.
        #[arg(long)]
        tool: String,
        /// Tool arguments (JSON object).
        #[arg(long, default_value = "{}")]
        args: String,
        /// The first text content must equal this.
        #[arg(long)]
        expect_text: Option<String>,
        /// The call must have completed through at least one GET + Last-Event-ID resume.
        #[arg(long)]
        expect_resume: bool,
    },
    /// Load from many virtual clients (one session each) calling a tool mix; prints a report.
    Run {
        /// MCP endpoint URL.
        #[arg(long, required_unless_present = "spawn_host", conflicts_with = "spawn_host")]
        url: Option<String>,
        /// Start this mcp-host binary on a free port, on a fresh SQLite ledger in a temporary
        /// directory (removed after it stops), and load it.
        #[arg(long)]
        spawn_host: Option<String>,
        /// Virtual clients (sessions), each with one call in flight.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        clients: u32,
        /// Duration in seconds (1..=3600).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        /// Total calls per second across all clients (default: as fast as they complete).
        #[arg(long)]
        rate: Option<f64>,
        /// Mix entry `tool[:weight][:args-json]`, repeatable; `{nonce}` in the args becomes a
        /// unique string per call. Default: mostly `echo`, the write tool `ledger_append` with
        /// a fresh idempotency key, `test_simple_text` and the 100 ms `test_tool_with_progress`
        /// (mcp-host with `--packs conformance,echo,ledger`, as `--spawn-host` starts it).
        /// Whether a call may be re-issued comes from the tool's annotations.
        #[arg(long = "call")]
        calls: Vec<String>,
        #[command(flatten)]
        json_out: JsonOut,
        /// No progress bar.
        #[arg(long)]
        no_progress: bool,
        /// Exit non-zero if any call failed (not only when none succeeded).
        #[arg(long)]
        fail_on_error: bool,
        /// Fault: share of SSE responses (0..=1) cut at a random point after their first event
        /// with an id (the client must resume and lose nothing). Same as `--fault cut=RATE`.
        #[arg(long, default_value_t = 0.0)]
        cut_rate: f64,
        /// Fault `scenario=rate` through the proxy, repeatable (scenarios: see `mcp-load gate --help`).
        #[arg(long = "fault")]
        faults: Vec<String>,
        #[command(flatten)]
        seed: ProxySeed,
        /// Which era the clients speak: `legacy` (a session each), `modern` (2026-07-28:
        /// discover, then stateless requests) or `mixed` (every other client modern).
        #[arg(long, default_value = "legacy")]
        era: String,
        /// Another node serving the same ledger as --url (repeatable): the clients go through
        /// the proxy, which sends each request to the next node (round robin, no affinity).
        #[arg(long = "also-url", conflicts_with = "spawn_host")]
        also_urls: Vec<String>,
    },
    /// The release gate: a baseline phase, one phase per fault scenario and a mixed phase,
    /// each through the fault proxy; prints the gate table, exits 1 if any gate fails.
    ///
    /// Scenarios: cut, lost-priming, crossed-ids, replay-after-ack, foreign-cursor,
    /// expiry-race, lost-delete, old-token, missing-version, origin-rewrite, storm, crash (the
    /// host is SIGKILLed and restarted on its ledger and port), sigterm (the host is stopped
    /// gracefully and restarted), rollout (the flags go off -> shadow -> on -> rollback through
    /// the admin API while streams are cut); crash, sigterm and rollout with `--spawn-host`
    /// only; modern (its phase's clients speak 2026-07-28, with every selected fault that
    /// reaches a stateless request: cut, storm, origin-rewrite, old-token, crash, sigterm; and
    /// the mixed phase then alternates legacy and 2026-07-28 clients). The server
    /// must serve the tools `echo`, `ledger_append`, `ledger_stats` and
    /// `test_tool_with_progress` (mcp-host: `--packs conformance,echo,ledger`).
    Gate {
        /// MCP endpoint URL (loopback only: the fault proxy fronts it).
        #[arg(long, required_unless_present = "spawn_host", conflicts_with = "spawn_host")]
        url: Option<String>,
        /// Start this mcp-host binary and gate it: two bearer tokens (for `old-token`) and a
        /// 10 s idle-session TTL (and a 1 s `Retry-After` while draining), so the sessions `old-token` makes clients abandon (each 404
        /// leaves one behind) are reclaimed during the run. Its SQLite ledger is fresh, in a
        /// temporary directory removed after it stops.
        #[arg(long)]
        spawn_host: Option<String>,
        /// With --spawn-host: start this many hosts on one shared Redis ledger (--ledger),
        /// each request sent to the next (round robin, no affinity); `node-loss` and
        /// `partition` need 2 or more (`all` leaves them out with one).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
        nodes: u32,
        /// With --spawn-host: the Redis ledger the hosts share (`redis://host:port/db`; needed
        /// with --nodes 2 or more). Each run writes under a key prefix of its own.
        #[arg(long)]
        ledger: Option<String>,
        /// Bearer token of the clients (with --url).
        #[arg(long)]
        token: Option<String>,
        /// A valid token of another principal (with --url; needed by `old-token`).
        #[arg(long)]
        other_token: Option<String>,
        /// A command whose output is the clients' bearer token (an OAuth access token, say:
        /// `curl … /token | jq -r .access_token`), run at start and every
        /// --token-refresh-secs; instead of --token (and of the spawned host's static token).
        #[arg(long, conflicts_with = "token")]
        token_cmd: Option<String>,
        /// The same for `old-token`'s token of another principal.
        #[arg(long, conflicts_with = "other_token")]
        other_token_cmd: Option<String>,
        /// How often the token commands run again (s).
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        token_refresh_secs: u64,
        /// An argument for the spawned hosts (repeatable), e.g.
        /// `--host-arg=--oauth-issuer=http://127.0.0.1:9000`.
        #[arg(long = "host-arg", allow_hyphen_values = true)]
        host_args: Vec<String>,
        /// Virtual clients.
        #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        clients: u32,
        /// A phase ends after this many SSE events reached the clients...
        #[arg(long, default_value_t = 100_000)]
        events_per_phase: u64,
        /// ...or after this many seconds.
        #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=3600))]
        phase_seconds: u64,
        /// The run fails unless all phases together saw this many events.
        #[arg(long, default_value_t = 100_000)]
        min_events: u64,
        /// Scenarios to run (comma-separated, or `all`).
        #[arg(long, default_value = "all")]
        scenarios: String,
        /// Rate of a scenario in its own phase.
        #[arg(long, default_value_t = 0.2)]
        rate: f64,
        /// Rate of each scenario in the mixed phase.
        #[arg(long, default_value_t = 0.05)]
        mixed_rate: f64,
        /// Calls per session before a virtual client ends it and opens another.
        #[arg(long, default_value_t = 100)]
        calls_per_session: u64,
        /// The resume-latency gate: resume p99 (with the retry wait) must stay under this (ms).
        /// The release gate keeps the design's 5 s; the test command's short multi-node runs,
        /// whose few resumes are mostly in the mixed phase on a shared 2-core machine, give
        /// more room (a latency limit is a benchmark's, not a test's).
        #[arg(long, default_value_t = gate::spec::RESUME_P99_LIMIT_MS)]
        resume_p99_limit_ms: u64,
        #[command(flatten)]
        seed: ProxySeed,
        #[command(flatten)]
        json_out: JsonOut,
        /// Also write an SVG chart of the latency distributions here.
        #[arg(long)]
        svg_out: Option<String>,
        /// No progress bars.
        #[arg(long)]
        no_progress: bool,
    },
    /// Soak: mixed abusive and unlucky traffic (session churn, abandoned streams, replaced
    /// GET streams, unanswered elicitations, payloads at and over every size limit, resumes
    /// into gaps, slow bodies, stalled readers, one caller hogging the 2026-07-28 places,
    /// calls pinning large arguments), then silence until the host's TTLs pass, with the host's RSS and stats
    /// sampled every 250 ms. Exits 1 if any gate fails: sessions, streams and request memory
    /// back to 0, final RSS <= 2 × idle RSS, no answer but the expected ones (each deliberate
    /// probe's documented refusal included), host refusals = provoked ones by cause, every
    /// probe and traffic kind run.
    Soak {
        /// The mcp-host binary to start (on a free port, packs conformance,echo,soak, a
        /// stats line every 250 ms, the TTLs below, a fresh SQLite ledger in a temporary
        /// directory removed after it stops).
        #[arg(long)]
        spawn_host: String,
        /// Virtual clients.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1000))]
        clients: u32,
        /// Seconds of traffic (1..=3600).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3600))]
        seconds: u64,
        /// Total requests per second across all clients (0: unlimited). Keep it at or above
        /// a request per second per client, or paced clients may outlive their sessions' TTL.
        #[arg(long, default_value_t = 400.0)]
        rate: f64,
        /// Host: idle session TTL (s).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=3600))]
        session_ttl_secs: u64,
        /// Host: deadline of server-to-client requests (s).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3600))]
        client_request_timeout_secs: u64,
        /// Host: replay window per stream, in events (small, so resumes find gaps).
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
        replay_max_events: u64,
        /// Host: resumable time of a delivered closed stream (ms).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        retention_after_delivery_ms: u64,
        /// Host: resumable time of an undelivered closed stream (ms).
        #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        retention_undelivered_ms: u64,
        /// Host: `sse.keepalive_ms`, how often an idle stream gets a comment line. A stream
        /// whose client dropped it is found gone only when a write fails: the second write
        /// after the drop (the host's default is 15000).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
        keepalive_ms: u64,
        /// Silence at least this long before the final figures (default: 3 × TTL + the
        /// longest retention + 2 × keep-alive + 2 s; at most 600). Silence ends anyway at
        /// 2 × this + 10 s.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=600))]
        settle_seconds: Option<u64>,
        /// Rounds of traffic and silence on the same host (does memory keep growing from
        /// round to round, or plateau?). Sessions and streams must return to 0 in each.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
        rounds: u64,
        /// Traffic kinds (comma-separated, or `all`): session-churn, abandoned-stream,
        /// replaced-get, unanswered-elicitation, large-payloads, resume-into-gap, slow-body,
        /// stalled-reader, modern-slot-hog, pinned-arguments.
        #[arg(long, default_value = "all")]
        kinds: String,
        /// Seed of the clients' choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Also write the report (with every sample) as JSON here.
        #[arg(long)]
        json_out: Option<String>,
        /// Also write an SVG chart of RSS and sessions over time here.
        #[arg(long)]
        svg_out: Option<String>,
        /// No progress line.
        #[arg(long)]
        no_progress: bool,
    },
}

// The flags several subcommands share, each written once (loadtest/src/cli_tests.rs parses
// them). Flags spelled alike whose meaning, help, default or range differ stay in their
// subcommands: `--url`, `--spawn-host`, `--clients`, `--seconds`, `--rate`, `soak --seed`
// (the clients' choices), `soak --json-out`, `--svg-out` (another chart each) and
// `--no-progress` (its help names a bar, bars or a line).

/// `--seed` of `run` and `gate`.
#[derive(clap::Args)]
struct ProxySeed {
    /// Seed of the fault proxy's decisions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// `--json-out` of `run` and `gate`.
#[derive(clap::Args)]
struct JsonOut {
    /// Also write the report as JSON here.
    #[arg(long)]
    json_out: Option<String>,
}

/// Start the host for a soak, run it, print and write the report.
fn soak_command(
    bin: &str,
    spec: soak::SoakSpec,
    json_out: Option<String>,
    svg_out: Option<String>,
) -> ExitCode {
    // The host's ledger and config, removed with the directory after the host is stopped.
    let dir = mcp_devtools::TempDir::new("load-soak");
    let config = dir.path().join("soak.toml");
    if let Err(e) = std::fs::write(&config, spec.config_toml()) {
        eprintln!("mcp-load: cannot write {}: {e}", config.display());
        return ExitCode::from(2);
    }
    let args = spec.host_args(&config);
    // Where the host keeps its ledger (the directory's, as `SpawnedHost` starts it).
    let ledger = dir.path().join("mcp-host.db");
    let outcome = match run::SpawnedHost::start(
        bin,
        dir,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    ) {
        Ok(mut host) => {
            let r = actix_rt::System::new().block_on(soak::run(
                &spec,
                &mut host.process,
                Some(&ledger),
            ));
            drop(host);
            r
        }
        Err(e) => {
            eprintln!("mcp-load: {e}");
            return ExitCode::from(2);
        }
    };
    match outcome {
        Ok(report) => {
            print!("{}", soak::render(&report));
            let writes = [
                json_out.map(|p| (p, serde_json::to_vec_pretty(&report).unwrap_or_default())),
                svg_out.map(|p| (p, soak::svg(&report).into_bytes())),
            ];
            for (path, bytes) in writes.into_iter().flatten() {
                if let Err(e) = std::fs::write(&path, bytes) {
                    eprintln!("mcp-load: cannot write {path}: {e}");
                    return ExitCode::from(2);
                }
            }
            if report["pass"] == true { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("mcp-load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Tokens of the host `gate --spawn-host` starts: the clients use the first; `old-token`
/// sends the second, which belongs to another principal.
const GATE_TOKENS: [&str; 2] = ["mcp-load-gate-alice", "mcp-load-gate-bob"];

struct GateArgs {
    url: Option<String>,
    spawn_host: Option<String>,
    host_args: Vec<String>,
    /// The token commands (clients', other principal's) and how often they run.
    token_cmds: (Option<String>, Option<String>, Duration),
    nodes: u32,
    ledger: Option<String>,
    json_out: Option<String>,
    svg_out: Option<String>,
}

/// The arguments of the gate's hosts on the shared Redis ledger `url`: a key prefix of this
/// run's own, a short lease (a `partition` pauses a node past it), and parking before the
/// gate's 10 s idle TTL (a shared ledger needs it).
fn shared_ledger_args(url: &str) -> Vec<String> {
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    [
        "--ledger".to_owned(),
        url.to_owned(),
        "--set".to_owned(),
        "ledger.redis_shared=true".to_owned(),
        "--set".to_owned(),
        format!("ledger.redis_prefix=\"gate-{}-{run}:\"", std::process::id()),
        "--set".to_owned(),
        format!("ledger.redis_lease_ms={}", gate::spec::NODE_LEASE_MS),
        "--set".to_owned(),
        "sessions.park_after_secs=5".to_owned(),
    ]
    .to_vec()
}

fn gate_command(args: GateArgs, mut spec: gate::GateSpec) -> ExitCode {
    if !args.host_args.is_empty() && args.spawn_host.is_none() {
        eprintln!("mcp-load: --host-arg is for the hosts --spawn-host starts");
        return ExitCode::from(2);
    }
    if args.nodes > 1 && (args.spawn_host.is_none() || args.ledger.is_none()) {
        eprintln!(
            "mcp-load: --nodes 2 or more needs --spawn-host and --ledger redis://… (the hosts share one Redis ledger)"
        );
        return ExitCode::from(2);
    }
    if let Some(s) = spec.scenarios.iter().find(|s| s.needs_nodes()).filter(|_| args.nodes < 2) {
        eprintln!(
            "mcp-load: scenario {} needs --nodes 2 or more; leave it out with --scenarios",
            s.name()
        );
        return ExitCode::from(2);
    }
    let host = match args.spawn_host.as_deref() {
        Some(bin) => {
            // The host's ledger and config: owned with the host by the SpawnedHost, so they
            // outlive a restart of the process and are removed after its last stop.
            let dir = mcp_devtools::TempDir::new("load-gate");
            let path = dir.path().join("gate.toml");
            // A drain's 503 says come back in 1 s: with restarts every 2-4 s and a 10 s idle
            // TTL, the default 5 s would let a client's session idle out between two drains.
            let toml = format!(
                "[security.bearer_tokens]\n\"{}\" = \"alice\"\n\"{}\" = \"bob\"\n[shutdown]\nretry_after_secs = 1\n",
                GATE_TOKENS[0], GATE_TOKENS[1]
            );
            if let Err(e) = std::fs::write(&path, toml) {
                eprintln!("mcp-load: cannot write {}: {e}", path.display());
                return ExitCode::from(2);
            }
            let mut extra: Vec<String> =
                ["--config", &path.to_string_lossy(), "--session-ttl-secs"]
                    .iter()
                    .map(|a| (*a).to_owned())
                    .chain([gate::spec::GATE_SESSION_TTL_SECS.to_string()])
                    .collect();
            if let Some(url) = &args.ledger {
                extra.extend(shared_ledger_args(url));
            }
            extra.extend(args.host_args.iter().cloned());
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            // The first node creates the key file the others read.
            let dir = std::sync::Arc::new(dir);
            let mut nodes = Vec::new();
            for _ in 0..args.nodes {
                match run::spawn_host_in(bin, std::sync::Arc::clone(&dir), &extra) {
                    Ok(h) => nodes.push(std::sync::Arc::new(parking_lot::Mutex::new(h))),
                    Err(e) => {
                        eprintln!("mcp-load: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            spec.token = Some(BearerToken::fixed(GATE_TOKENS[0]));
            spec.other_token = Some(BearerToken::fixed(GATE_TOKENS[1]));
            nodes
        }
        None => Vec::new(),
    };
    spec.url = host.first().map(|h| h.lock().url().to_owned()).or(args.url).unwrap_or_default();
    // Shared with the crash scenario, which restarts the first (same URL); dropped last, below.
    spec.host = host.first().cloned();
    spec.nodes.clone_from(&host);
    if let Some(s) =
        spec.scenarios.iter().find(|s| s.needs_spawned_host()).filter(|_| host.is_empty())
    {
        eprintln!(
            "mcp-load: scenario {} needs --spawn-host (the gate restarts the host or drives its admin API); leave it out with --scenarios",
            s.name()
        );
        return ExitCode::from(2);
    }
    // Tokens from commands, refreshed while the gate runs (the refresher stops when dropped).
    let (token_cmd, other_cmd, every) = args.token_cmds;
    let mut refreshed = Vec::new();
    for (cmd, slot, principal) in [
        (token_cmd, &mut spec.token, "token-cmd"),
        (other_cmd, &mut spec.other_token, "other-token-cmd"),
    ] {
        let Some(cmd) = cmd else { continue };
        match token::fetch(&cmd) {
            Ok(t) => {
                let t = BearerToken::refreshed(&t, principal);
                refreshed.push((t.clone(), cmd));
                *slot = Some(t);
            }
            Err(e) => {
                eprintln!("mcp-load: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let _refresher = (!refreshed.is_empty()).then(|| token::Refresher::start(refreshed, every));
    if spec.scenarios.contains(&proxy::Scenario::OldToken) && spec.other_token.is_none() {
        eprintln!(
            "mcp-load: scenario old-token needs --other-token (or --spawn-host); leave it out with --scenarios"
        );
        return ExitCode::from(2);
    }
    let outcome = actix_rt::System::new().block_on(gate::run(spec));
    drop(host);
    match outcome {
        Ok((report, pass)) => {
            print!("{}", gate::render(&report));
            let writes = [
                args.json_out.map(|p| (p, serde_json::to_vec_pretty(&report).unwrap_or_default())),
                args.svg_out.map(|p| (p, gate::svg(&report).into_bytes())),
            ];
            for (path, bytes) in writes.into_iter().flatten() {
                if let Err(e) = std::fs::write(&path, bytes) {
                    eprintln!("mcp-load: cannot write {path}: {e}");
                    return ExitCode::from(2);
                }
            }
            if pass { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("mcp-load: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn probe(
    url: &str,
    tool: &str,
    args: Value,
    expect_text: Option<&str>,
    expect_resume: bool,
) -> Result<Value, String> {
    let client = McpClient::connect(ClientConfig::new(url), MemoryJournal::new(4096))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let tools =
        client.request("tools/list", None, true).await.map_err(|e| format!("tools/list: {e}"))?;
    let listed = tools["tools"].as_array().is_some_and(|ts| ts.iter().any(|t| t["name"] == tool));
    if !listed {
        return Err(format!("tool {tool:?} is not listed"));
    }
    let result = client
        .request("tools/call", Some(json!({"name": tool, "arguments": args})), false)
        .await
        .map_err(|e| format!("tools/call: {e}"))?;
    let text = result["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    if let Some(want) = expect_text.filter(|w| *w != text) {
        return Err(format!("expected text {want:?}, got {text:?}"));
    }
    let stats = client.stats();
    if expect_resume && stats.resumes == 0 {
        return Err("the call completed without a resume".into());
    }
    let notifications = client.take_notifications().len();
    let deleted = client.close().await.map_err(|e| format!("DELETE: {e}"))?;
    Ok(
        json!({"text": text, "resumes": stats.resumes, "handshakes": stats.handshakes, "notifications": notifications, "closed": format!("{deleted:?}")}),
    )
}

fn run_command(
    url: Option<String>,
    spawn_host: Option<String>,
    spec: run::RunSpec,
    json_out: Option<String>,
    fail_on_error: bool,
) -> ExitCode {
    let host = match spawn_host
        .as_deref()
        .map(|b| run::spawn_host(b, mcp_devtools::TempDir::new("load-run"), &[]))
    {
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            eprintln!("mcp-load: {e}");
            return ExitCode::from(2);
        }
        None => None,
    };
    let url = host.as_ref().map(|h| h.url().to_owned()).or(url).unwrap_or_default();
    match actix_rt::System::new().block_on(run::run(run::RunSpec { url, ..spec })) {
        Ok(report) => {
            run::print_table(&report);
            let written = json_out.map(|p| {
                std::fs::write(&p, serde_json::to_vec_pretty(&report).unwrap_or_default())
                    .map_err(|e| format!("cannot write {p}: {e}"))
            });
            if let Some(Err(e)) = written {
                eprintln!("mcp-load: {e}");
                return ExitCode::from(2);
            }
            let failed = report["calls_failed"].as_u64().unwrap_or(0);
            if report["calls_ok"].as_u64() == Some(0) || (fail_on_error && failed > 0) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("mcp-load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Parse `scenario=rate` entries.
fn parse_faults(
    specs: &[String],
) -> Result<std::collections::BTreeMap<proxy::Scenario, f64>, String> {
    specs
        .iter()
        .map(|s| {
            let (name, rate) = s.split_once('=').ok_or_else(|| format!("fault {s:?}: expected scenario=rate"))?;
            let scenario = proxy::Scenario::parse(name).filter(|s| !s.needs_spawned_host()).ok_or_else(|| format!("unknown fault scenario {name:?} (crash, rollout and sigterm are gate scenarios)"))?;
            let rate: f64 = rate.parse().map_err(|_| format!("fault {s:?}: bad rate"))?;
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("fault {s:?}: rate must be between 0 and 1"));
            }
            Ok((scenario, rate))
        })
        .collect()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            url,
            spawn_host,
            clients,
            seconds,
            rate,
            calls,
            json_out: JsonOut { json_out },
            no_progress,
            fail_on_error,
            cut_rate,
            faults,
            seed: ProxySeed { seed },
            era,
            also_urls,
        } => {
            let eras = match run::Eras::parse(&era) {
                Ok(e) => e,
                Err(e) => {
                    eprintln!("mcp-load: {e}");
                    return ExitCode::from(2);
                }
            };
            let calls = if calls.is_empty() {
                vec![
                    "echo:8:{\"text\":\"load\"}".to_owned(),
                    "ledger_append:2:{\"key\":\"{nonce}\"}".to_owned(),
                    "test_simple_text:1".to_owned(),
                    "test_tool_with_progress:1".to_owned(),
                ]
            } else {
                calls
            };
            let mix = match run::parse_mix(&calls) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("mcp-load: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut specs = faults;
            if cut_rate != 0.0 {
                specs.push(format!("cut={cut_rate}"));
            }
            let faults = match parse_faults(&specs) {
                // Several nodes need the proxy's round robin, with no fault.
                Ok(rates) if rates.is_empty() && also_urls.is_empty() => None,
                Ok(rates) => Some(proxy::FaultPlan {
                    rates,
                    seed,
                    other_token: None,
                    limit: None,
                    token_rewrite_modern_tools: Vec::new(),
                    session_ttl: None,
                }),
                Err(e) => {
                    eprintln!("mcp-load: {e}");
                    return ExitCode::from(2);
                }
            };
            let spec = run::RunSpec {
                url: String::new(),
                clients: clients as usize,
                duration: Duration::from_secs(seconds),
                rate,
                mix,
                progress: !no_progress,
                faults,
                eras,
                also_urls,
            };
            run_command(url, spawn_host, spec, json_out, fail_on_error)
        }
        Command::Gate {
            url,
            spawn_host,
            nodes,
            ledger,
            token,
            other_token,
            token_cmd,
            other_token_cmd,
            token_refresh_secs,
            host_args,
            clients,
            events_per_phase,
            phase_seconds,
            min_events,
            scenarios,
            rate,
            mixed_rate,
            calls_per_session,
            resume_p99_limit_ms,
            seed: ProxySeed { seed },
            json_out: JsonOut { json_out },
            svg_out,
            no_progress,
        } => {
            let scenarios: Result<Vec<proxy::Scenario>, String> = if scenarios == "all" {
                // The node scenarios only with several nodes.
                Ok(proxy::Scenario::ALL
                    .into_iter()
                    .filter(|s| nodes > 1 || !s.needs_nodes())
                    .collect())
            } else {
                scenarios
                    .split(',')
                    .map(|s| {
                        proxy::Scenario::parse(s.trim())
                            .ok_or_else(|| format!("unknown scenario {s:?}"))
                    })
                    .collect()
            };
            let scenarios = match scenarios {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("mcp-load: {e}");
                    return ExitCode::from(2);
                }
            };
            if !(0.0..=1.0).contains(&rate)
                || !(0.0..=1.0).contains(&mixed_rate)
                || calls_per_session == 0
            {
                eprintln!("mcp-load: rates must be between 0 and 1, --calls-per-session above 0");
                return ExitCode::from(2);
            }
            let spec = gate::GateSpec {
                url: String::new(),
                token: token.as_deref().map(BearerToken::fixed),
                other_token: other_token.as_deref().map(BearerToken::fixed),
                clients: clients as usize,
                events_per_phase,
                phase_seconds,
                min_events,
                scenarios,
                rate,
                mixed_rate,
                seed,
                calls_per_session,
                resume_p99_limit_ms,
                progress: !no_progress,
                host: None,
                nodes: Vec::new(),
            };
            gate_command(
                GateArgs {
                    url,
                    spawn_host,
                    host_args,
                    token_cmds: (
                        token_cmd,
                        other_token_cmd,
                        Duration::from_secs(token_refresh_secs),
                    ),
                    nodes,
                    ledger,
                    json_out,
                    svg_out,
                },
                spec,
            )
        }
        Command::Soak {
            spawn_host,
            clients,
            seconds,
            rate,
            session_ttl_secs,
            client_request_timeout_secs,
            replay_max_events,
            retention_after_delivery_ms,
            retention_undelivered_ms,
            keepalive_ms,
            settle_seconds,
            rounds,
            kinds,
            seed,
            json_out,
            svg_out,
            no_progress,
        } => {
            if !rate.is_finite() || rate < 0.0 {
                eprintln!("mcp-load: --rate must be a number >= 0");
                return ExitCode::from(2);
            }
            let kinds: Result<Vec<soak::Kind>, String> = if kinds == "all" {
                Ok(soak::Kind::ALL.to_vec())
            } else {
                kinds
                    .split(',')
                    .map(|k| {
                        soak::Kind::parse(k.trim())
                            .ok_or_else(|| format!("unknown traffic kind {k:?}"))
                    })
                    .collect()
            };
            let kinds = match kinds {
                Ok(k) if !k.is_empty() => k,
                Ok(_) => {
                    eprintln!("mcp-load: --kinds is empty");
                    return ExitCode::from(2);
                }
                Err(e) => {
                    eprintln!("mcp-load: {e}");
                    return ExitCode::from(2);
                }
            };
            let spec = soak::SoakSpec {
                clients: clients as usize,
                seconds,
                rate: (rate > 0.0).then_some(rate),
                session_ttl_secs,
                client_request_timeout_secs,
                replay_max_events: replay_max_events as usize,
                retention_after_delivery_ms,
                retention_undelivered_ms,
                keepalive_ms,
                rounds,
                kinds,
                settle_seconds,
                seed,
                progress: !no_progress,
            };
            soak_command(&spawn_host, spec, json_out, svg_out)
        }
        Command::Probe { url, tool, args, expect_text, expect_resume } => {
            let args: Value = match serde_json::from_str(&args) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    eprintln!("mcp-load: --args must be a JSON object");
                    return ExitCode::from(2);
                }
            };
            match actix_rt::System::new().block_on(probe(
                &url,
                &tool,
                args,
                expect_text.as_deref(),
                expect_resume,
            )) {
                Ok(summary) => {
                    println!("probe ok: {summary}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("probe failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
