//! `mcp-load run`: virtual clients (one session each) calling a weighted tool mix, with
//! latency histograms per tool, optionally through the fault-injecting proxy.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use mcp_devtools::{HostProcess, TempDir};
use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{ClientConfig, ClientError, Era, McpClient};
use serde_json::{Value, json};
use tokio::time::Instant;

/// One entry of the tool mix.
#[derive(Debug, Clone)]
pub(crate) struct MixEntry {
    pub(crate) tool: String,
    pub(crate) args: Value,
    /// The args as written, when they contain `{nonce}` (replaced per call).
    template: Option<String>,
    pub(crate) weight: u32,
    /// From the server's annotations (`readOnlyHint` or `idempotentHint`), see [`annotate`].
    pub(crate) idempotent: bool,
}

impl MixEntry {
    /// The arguments of call `nonce`.
    fn args_for(&self, nonce: &str) -> Value {
        self.template
            .as_ref()
            .and_then(|t| serde_json::from_str(&t.replace("{nonce}", nonce)).ok())
            .unwrap_or_else(|| self.args.clone())
    }
}

/// Mark each entry idempotent as the server's `tools/list` annotations say (read-only or
/// idempotent tools may be re-issued when their outcome is unknown; others are reported
/// lost). A tool the server does not list is an error.
pub(crate) fn annotate(mix: &mut [MixEntry], tools: &Value) -> Result<(), String> {
    for m in mix {
        let t = tools["tools"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["name"] == m.tool.as_str()))
            .ok_or_else(|| format!("the server does not list tool {:?}", m.tool))?;
        let hint = |name: &str| t["annotations"][name] == true;
        m.idempotent = hint("readOnlyHint") || hint("idempotentHint");
    }
    Ok(())
}

/// Parse `tool[:weight][:args-json]` entries, e.g. `echo:8:{"text":"x"}`; `{nonce}` in the
/// args becomes a unique string per call (e.g. an idempotency key).
pub(crate) fn parse_mix(specs: &[String]) -> Result<Vec<MixEntry>, String> {
    specs
        .iter()
        .map(|s| {
            let mut parts = s.splitn(3, ':');
            let tool = parts
                .next()
                .filter(|t| !t.is_empty())
                .ok_or_else(|| format!("empty tool in {s:?}"))?
                .to_owned();
            let weight = parts
                .next()
                .map_or(Ok(1), |w| w.parse::<u32>().map_err(|_| format!("bad weight in {s:?}")))?;
            let args = parts.next().map_or(Ok(json!({})), |a| {
                serde_json::from_str::<Value>(a).map_err(|e| format!("bad args in {s:?}: {e}"))
            })?;
            if !args.is_object() || weight == 0 {
                return Err(format!("args must be a JSON object and weight > 0 in {s:?}"));
            }
            let template =
                s.splitn(3, ':').nth(2).filter(|a| a.contains("{nonce}")).map(str::to_owned);
            Ok(MixEntry { tool, args, template, weight, idempotent: false })
        })
        .collect()
}

/// Which era virtual clients speak (`--era`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Eras {
    /// Every client a session (legacy).
    Legacy,
    /// Every client 2026-07-28.
    Modern,
    /// Even clients legacy, odd ones 2026-07-28 (`mixed`).
    Alternate,
}

impl Eras {
    /// `legacy`, `modern` or `mixed`.
    pub(crate) fn parse(s: &str) -> Result<Eras, String> {
        match s {
            "legacy" => Ok(Eras::Legacy),
            "modern" => Ok(Eras::Modern),
            "mixed" => Ok(Eras::Alternate),
            _ => Err(format!("--era must be legacy, modern or mixed, not {s:?}")),
        }
    }

    /// The era of client `n`.
    pub(crate) fn of(self, n: usize) -> Era {
        match self {
            Eras::Legacy => Era::Legacy,
            Eras::Modern => Era::Modern,
            Eras::Alternate if n % 2 == 1 => Era::Modern,
            Eras::Alternate => Era::Legacy,
        }
    }
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub(crate) struct RunSpec {
    pub(crate) url: String,
    pub(crate) clients: usize,
    pub(crate) duration: Duration,
    pub(crate) rate: Option<f64>,
    pub(crate) mix: Vec<MixEntry>,
    pub(crate) progress: bool,
    /// Route the clients through the fault-injecting proxy.
    pub(crate) faults: Option<crate::proxy::FaultPlan>,
    /// Which era each client speaks.
    pub(crate) eras: Eras,
    /// More nodes serving the same ledger as `url` (same path): the proxy round-robins.
    pub(crate) also_urls: Vec<String>,
}

/// A host that `--spawn-host` started, with the directory it owns: its SQLite ledger
/// (`mcp-host.db`, `-wal`, `-shm`, `.key`, given by `--ledger-path`) and any config file
/// written for it. On drop the process is killed and reaped first (fields drop in declaration
/// order), then the directory is removed. The directory belongs to this value, not to one
/// start of the process: a restart (SIGKILL, then the same ledger and port) starts a new
/// process on the same `dir`.
#[derive(Debug)]
pub(crate) struct SpawnedHost {
    pub(crate) process: HostProcess,
    /// How it was started, for a restart on the same ledger and port.
    bin: String,
    args: Vec<String>,
    /// Held for its drop (after the process's), and for a restart on the same ledger
    /// (shared by nodes on one ledger).
    dir: Arc<TempDir>,
}

impl SpawnedHost {
    /// Start `bin` with `args` and a ledger in `dir` (which may already hold its config files);
    /// stderr inherited.
    pub(crate) fn start(bin: &str, dir: TempDir, args: &[&str]) -> Result<SpawnedHost, String> {
        SpawnedHost::start_in(bin, Arc::new(dir), args)
    }

    /// [`SpawnedHost::start`] in a directory other hosts may share (nodes of one ledger: one
    /// key file, one admin token, one journal).
    pub(crate) fn start_in(
        bin: &str,
        dir: Arc<TempDir>,
        args: &[&str],
    ) -> Result<SpawnedHost, String> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let process = Self::spawn(bin, &dir, &args)?;
        Ok(SpawnedHost { process, bin: bin.to_owned(), args, dir })
    }

    fn spawn(bin: &str, dir: &TempDir, args: &[String]) -> Result<HostProcess, String> {
        let mut cmd = Command::new(bin);
        cmd.args(args).args(dir.host_args()).stderr(Stdio::inherit());
        HostProcess::spawn(cmd, mcp_devtools::DEFAULT_START_WAIT).map_err(|e| e.to_string())
    }

    /// The URL the host serves.
    pub(crate) fn url(&self) -> &str {
        self.process.url()
    }

    /// Its admin API (address and token), once it printed its admin line.
    pub(crate) fn admin(&self) -> Option<crate::admin::Admin> {
        let addr = self
            .process
            .admin_url(Duration::from_secs(5))?
            .trim_start_matches("http://")
            .to_owned();
        let token = std::fs::read_to_string(self.dir.path().join("mcp-host.admin-token"))
            .ok()?
            .trim()
            .to_owned();
        Some(crate::admin::Admin { addr, token })
    }

    /// SIGTERM the host (its graceful drain), wait for it to exit, and start it again on the
    /// same ledger and port (blocks until it listens). Its exit code.
    pub(crate) fn terminate_and_restart(&mut self) -> Result<Option<i32>, String> {
        let exit = self.process.terminate(Duration::from_secs(90)).and_then(|s| s.code());
        self.restart()?;
        Ok(exit)
    }

    /// SIGKILL the host and start it again on the same ledger and port (blocks until it
    /// listens).
    pub(crate) fn kill_and_restart(&mut self) -> Result<(), String> {
        self.process.kill();
        self.restart()
    }

    /// Start the host again on the same ledger and port, after it exited or was killed
    /// (blocks until it listens).
    pub(crate) fn start_again(&mut self) -> Result<(), String> {
        self.restart()
    }

    fn restart(&mut self) -> Result<(), String> {
        let port = self
            .url()
            .trim_start_matches("http://")
            .split('/')
            .next()
            .and_then(|a| a.rsplit(':').next())
            .map(str::to_owned)
            .ok_or("no port in the host's URL")?;
        let mut args = self.args.clone();
        match args.iter().position(|a| a == "--port") {
            Some(i) if i + 1 < args.len() => args[i + 1] = port,
            _ => args.extend(["--port".to_owned(), port]),
        }
        self.process = Self::spawn(&self.bin, &self.dir, &args)?;
        Ok(())
    }
}

/// Start `bin` on a free loopback port with the `conformance`, `echo` and `ledger` packs, plus
/// `extra` arguments, on a fresh ledger in `dir` (killed when the handle drops, then `dir`
/// removed; exits by itself if we die).
pub(crate) fn spawn_host(bin: &str, dir: TempDir, extra: &[&str]) -> Result<SpawnedHost, String> {
    spawn_host_in(bin, Arc::new(dir), extra)
}

/// [`spawn_host`] in a directory other hosts may share.
pub(crate) fn spawn_host_in(
    bin: &str,
    dir: Arc<TempDir>,
    extra: &[&str],
) -> Result<SpawnedHost, String> {
    let args: Vec<&str> = ["--port", "0", "--packs", "conformance,echo,ledger,basket"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    SpawnedHost::start_in(bin, dir, &args)
}

#[derive(Default)]
struct Totals {
    per_tool: BTreeMap<String, Histogram<u64>>,
    errors: BTreeMap<String, u64>,
    resumes: u64,
    /// Disconnect to first replayed event, ms (with the waits the server asked for).
    resume_ms: Option<Histogram<u64>>,
    handshakes: u64,
    /// The first few error messages, verbatim.
    samples: Vec<String>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

fn error_kind(e: &ClientError) -> String {
    match e {
        ClientError::Rpc(o) => format!("rpc {}", o.code),
        ClientError::Lost(..) => "lost".into(),
        ClientError::Http(s, _) | ClientError::Unavailable { status: s, .. } => format!("http {s}"),
        ClientError::Transport(_) => "transport".into(),
        ClientError::Cancelled => "cancelled".into(),
    }
}

/// Run the load and return the JSON report.
pub(crate) async fn run(mut spec: RunSpec) -> Result<Value, String> {
    // Idempotence from the server's annotations, asked directly (not through the faults).
    let probe = McpClient::connect(ClientConfig::new(&spec.url), MemoryJournal::new(64))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let tools =
        probe.request("tools/list", None, true).await.map_err(|e| format!("tools/list: {e}"))?;
    let _ = probe.close().await;
    annotate(&mut spec.mix, &tools)?;
    // Unique per run, so `{nonce}` keys never repeat across runs against the same server.
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut proxy_stats = None;
    if let Some(plan) = spec.faults.clone() {
        let (upstream, path) = crate::proxy::split_url(&spec.url)?;
        let mut upstreams = vec![upstream];
        for url in &spec.also_urls {
            let (also, also_path) = crate::proxy::split_url(url)?;
            if also_path != path {
                return Err(format!("--also-url {url} has another path than --url ({path})"));
            }
            upstreams.push(also);
        }
        let (addr, stats) =
            crate::proxy::start(upstreams, plan).await.map_err(|e| format!("proxy: {e}"))?;
        spec.url = format!("http://{addr}{path}");
        proxy_stats = Some(stats);
    }
    let totals = Rc::new(RefCell::new(Totals::default()));
    let weight_sum: u32 = spec.mix.iter().map(|m| m.weight).sum();
    let start = Instant::now();
    let deadline = start + spec.duration;
    // With a rate, each client waits its share of the interval between calls.
    let per_client_gap =
        spec.rate.map(|r| Duration::from_secs_f64(spec.clients as f64 / r.max(0.001)));
    let bar = if spec.progress {
        let b = indicatif::ProgressBar::new(spec.duration.as_secs());
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} s {msg}")
                .map_err(|e| e.to_string())?,
        );
        Some(b)
    } else {
        None
    };
    let mut tasks = Vec::new();
    for n in 0..spec.clients {
        let (spec, totals) = (spec.clone(), Rc::clone(&totals));
        tasks.push(actix_rt::spawn(async move {
            let mut cfg = ClientConfig::new(&spec.url);
            cfg.era = spec.eras.of(n);
            let client = match McpClient::connect(cfg, MemoryJournal::new(4096)).await {
                Ok(c) => c,
                Err(e) => {
                    *totals
                        .borrow_mut()
                        .errors
                        .entry(format!("connect: {}", error_kind(&e)))
                        .or_default() += 1;
                    return;
                }
            };
            let mut pick = (n as u32).wrapping_mul(2_654_435_761);
            let mut calls = 0u64;
            while Instant::now() < deadline {
                pick = pick.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let mut r = pick % weight_sum;
                let entry = spec
                    .mix
                    .iter()
                    .find(|m| {
                        if r < m.weight {
                            true
                        } else {
                            r -= m.weight;
                            false
                        }
                    })
                    .expect("weights cover the range");
                let t0 = Instant::now();
                calls += 1;
                let args = entry.args_for(&format!("{run_id:x}-{n}-{calls}"));
                let result = client
                    .request(
                        "tools/call",
                        Some(json!({"name": entry.tool, "arguments": args})),
                        entry.idempotent,
                    )
                    .await;
                let us = t0.elapsed().as_micros().max(1) as u64;
                {
                    let mut t = totals.borrow_mut();
                    match result {
                        Ok(v) if v.get("isError") != Some(&Value::Bool(true)) => {
                            let _ = t
                                .per_tool
                                .entry(entry.tool.clone())
                                .or_insert_with(histogram)
                                .record(us);
                        }
                        Ok(_) => {
                            *t.errors.entry(format!("{}: tool error", entry.tool)).or_default() += 1
                        }
                        Err(e) => {
                            *t.errors
                                .entry(format!("{}: {}", entry.tool, error_kind(&e)))
                                .or_default() += 1;
                            if t.samples.len() < 5 {
                                t.samples.push(format!("{}: {e}", entry.tool));
                            }
                        }
                    }
                }
                if let Some(gap) = per_client_gap {
                    let next = t0 + gap;
                    if next > Instant::now() {
                        tokio::time::sleep_until(next).await;
                    }
                }
            }
            let stats = client.stats();
            {
                let mut t = totals.borrow_mut();
                let resumed = t.resume_ms.get_or_insert_with(histogram);
                for s in client.take_resume_samples() {
                    let _ = resumed.record(s.total.as_millis().max(1) as u64);
                }
                t.resumes += stats.resumes;
                t.handshakes += stats.handshakes;
            }
            let _ = client.close().await;
        }));
    }
    if let Some(b) = &bar {
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let done: u64 = totals.borrow().per_tool.values().map(Histogram::len).sum();
            b.set_position(start.elapsed().as_secs().min(spec.duration.as_secs()));
            b.set_message(format!("{done} calls"));
        }
        b.finish_and_clear();
    }
    for t in tasks {
        // A client that panicked (a client defect) is an error of the run, not a silence.
        if t.await.is_err_and(|e| e.is_panic()) {
            *totals.borrow_mut().errors.entry("client panicked".into()).or_default() += 1;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let t = totals.borrow();
    let ok: u64 = t.per_tool.values().map(Histogram::len).sum();
    let failed: u64 = t.errors.values().sum();
    let mut all = histogram();
    let mut tools = serde_json::Map::new();
    for (name, h) in &t.per_tool {
        all.add(h).expect("same bounds");
        tools.insert(name.clone(), json!({"calls": h.len(), "p50_us": h.value_at_quantile(0.5), "p99_us": h.value_at_quantile(0.99), "max_us": h.max()}));
    }
    Ok(json!({
        "url": spec.url, "clients": spec.clients, "seconds": seconds, "era": format!("{:?}", spec.eras).to_lowercase(),
        "calls_ok": ok, "calls_failed": failed, "calls_per_s": ok as f64 / seconds,
        "latency_us": {"p50": all.value_at_quantile(0.5), "p90": all.value_at_quantile(0.9), "p99": all.value_at_quantile(0.99), "max": all.max()},
        "per_tool": tools, "errors": t.errors, "resumes": t.resumes, "handshakes": t.handshakes, "error_samples": t.samples,
        "resume_ms": t.resume_ms.as_ref().filter(|h| !h.is_empty()).map(|h| json!({"samples": h.len(), "p50": h.value_at_quantile(0.5), "p99": h.value_at_quantile(0.99), "max": h.max()})),
        "proxy": proxy_stats.map(|p| json!(p.counts())),
    }))
}

/// Print the report as a table.
pub(crate) fn print_table(r: &Value) {
    println!(
        "calls ok {}  failed {}  {:.0} calls/s over {:.1} s with {} clients",
        r["calls_ok"],
        r["calls_failed"],
        r["calls_per_s"].as_f64().unwrap_or(0.0),
        r["seconds"].as_f64().unwrap_or(0.0),
        r["clients"]
    );
    println!(
        "latency µs: p50 {}  p90 {}  p99 {}  max {}",
        r["latency_us"]["p50"],
        r["latency_us"]["p90"],
        r["latency_us"]["p99"],
        r["latency_us"]["max"]
    );
    println!("| tool | calls | p50 µs | p99 µs | max µs |");
    println!("|---|---:|---:|---:|---:|");
    if let Some(tools) = r["per_tool"].as_object() {
        for (name, t) in tools {
            println!(
                "| {name} | {} | {} | {} | {} |",
                t["calls"], t["p50_us"], t["p99_us"], t["max_us"]
            );
        }
    }
    println!("resumes {}  handshakes {}  errors {}", r["resumes"], r["handshakes"], r["errors"]);
    if !r["resume_ms"].is_null() {
        let q = &r["resume_ms"];
        println!("resume ms: p50 {}  p99 {}  max {}", q["p50"], q["p99"], q["max"]);
    }
    for e in r["error_samples"].as_array().into_iter().flatten() {
        println!("  e.g. {}", e.as_str().unwrap_or_default());
    }
    if !r["proxy"].is_null() {
        println!("fault proxy: {}", r["proxy"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_entries_parse_with_defaults_and_reject_bad_input() {
        let m = parse_mix(&["echo:8:{\"text\":\"x\"}".into(), "test_tool_with_progress".into()])
            .unwrap();
        assert_eq!((m[0].tool.as_str(), m[0].weight), ("echo", 8));
        assert_eq!(m[0].args["text"], "x");
        assert_eq!(m[1].weight, 1);
        assert!(parse_mix(&["echo:0".into()]).is_err());
        assert!(parse_mix(&["echo:1:[1]".into()]).is_err());
        assert!(parse_mix(&[":1".into()]).is_err());
    }

    #[test]
    fn nonce_placeholders_make_each_call_unique() {
        let m = parse_mix(&["ledger_append:2:{\"key\":\"{nonce}\"}".into()]).unwrap();
        assert_eq!(m[0].args_for("a")["key"], "a");
        assert_eq!(m[0].args_for("b")["key"], "b");
    }

    #[test]
    fn idempotence_comes_from_the_servers_annotations() {
        let mut m = parse_mix(&["echo".into(), "ledger_append".into(), "write".into()]).unwrap();
        let tools = json!({"tools": [
            {"name": "echo", "annotations": {"readOnlyHint": true}},
            {"name": "ledger_append", "annotations": {"readOnlyHint": false, "idempotentHint": true}},
            {"name": "write"},
        ]});
        annotate(&mut m, &tools).unwrap();
        assert_eq!(m.iter().map(|e| e.idempotent).collect::<Vec<_>>(), vec![true, true, false]);
        let mut unknown = parse_mix(&["nope".into()]).unwrap();
        assert!(annotate(&mut unknown, &tools).unwrap_err().contains("nope"));
    }
}
