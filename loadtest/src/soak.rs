//! `mcp-load soak`: a bounded run of mixed abusive and unlucky traffic against an
//! `mcp-host` it starts itself (short TTLs, small replay windows, a `stats` line every
//! 250 ms), then silence until the host's TTLs have passed, with the host's RSS (`VmRSS`)
//! and its stats line sampled every [`SAMPLE_EVERY`] throughout.
//!
//! Phases: start, a warm-up (every client runs one iteration of every selected kind at once,
//! then silence until back to 0 and the settle time; the last sample is the idle RSS: that of
//! a host that has served every path at the run's concurrency, its code paged in and its
//! pools sized, not of a fresh process), then
//! `--rounds` rounds (default 1) on the same host of: traffic ([`traffic`]: `--clients`
//! virtual clients for `--seconds`, the `--kinds` selected), then silence until sessions and
//! streams are back to 0 and the settle time has passed, or the silence limit. Several rounds
//! tell a leak (memory that grows round after round) from memory the allocator keeps (a
//! plateau). Then the gates ([`report::evaluate`]): sessions, streams and the request memory
//! budget back to 0, final RSS within 2 × idle, no answer but the expected ones, host
//! refusals equal to the provoked ones cause by cause, every deliberate probe answered as
//! documented, every traffic kind run.
//!
//! Every phase is bounded in time; client tasks still running at the hard deadline are
//! aborted (and fail a gate). The host is stopped by its handle's drop, on every path.

mod payloads;
mod report;
mod traffic;

use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use mcp_devtools::HostProcess;
use serde_json::{Value, json};
use tokio::time::Instant;

use report::{Measured, RoundEnd, evaluate, gates_json, tally_json};
pub(crate) use report::{render, svg};
pub(crate) use traffic::Kind;
use traffic::{Target, Traffic};

/// How often the host is sampled.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// A stats line older than this is stale: its figures are not used.
const STATS_STALE: Duration = Duration::from_secs(2);
/// Longest settle time.
pub(crate) const MAX_SETTLE_SECS: u64 = 600;
/// Extra time client tasks get after the traffic deadline to finish their iteration.
const CLIENT_GRACE: Duration = Duration::from_secs(30);

/// Settings of a soak.
#[derive(Debug, Clone)]
pub(crate) struct SoakSpec {
    pub(crate) clients: usize,
    pub(crate) seconds: u64,
    /// Total requests per second across all clients.
    pub(crate) rate: Option<f64>,
    pub(crate) session_ttl_secs: u64,
    pub(crate) client_request_timeout_secs: u64,
    pub(crate) replay_max_events: usize,
    pub(crate) retention_after_delivery_ms: u64,
    pub(crate) retention_undelivered_ms: u64,
    /// Host `sse.keepalive_ms`: how often an idle stream is written to, which is when a
    /// connection its client dropped is found gone.
    pub(crate) keepalive_ms: u64,
    /// Rounds of traffic and silence on the same host.
    pub(crate) rounds: u64,
    pub(crate) kinds: Vec<Kind>,
    /// Default: [`SoakSpec::default_settle_secs`].
    pub(crate) settle_seconds: Option<u64>,
    pub(crate) seed: u64,
    pub(crate) progress: bool,
}

impl SoakSpec {
    /// 3 × the idle TTL, plus the longest stream retention, plus two keep-alive intervals
    /// (a dropped idle stream is found gone at the second write after it), plus 2 s; at most
    /// [`MAX_SETTLE_SECS`].
    pub(crate) fn default_settle_secs(&self) -> u64 {
        let retention_ms = self.retention_undelivered_ms.max(self.retention_after_delivery_ms);
        (3 * self.session_ttl_secs
            + retention_ms.div_ceil(1000)
            + (2 * self.keepalive_ms).div_ceil(1000)
            + 2)
        .min(MAX_SETTLE_SECS)
    }

    fn settle(&self) -> Duration {
        Duration::from_secs(self.settle_seconds.unwrap_or_else(|| self.default_settle_secs()))
    }

    /// Silence ends by this time at the latest, back to 0 or not.
    fn silence_limit(&self) -> Duration {
        2 * self.settle() + Duration::from_secs(10)
    }

    /// The host's config file (what has no flag). Its body deadline is 2 s: long enough that a
    /// chunked body past 4 MiB (debug builds, a busy machine) reaches the size limit (413)
    /// before it. The host returns freed memory at most every second while its footprint
    /// shrinks, and after a quiet spell at most every second (its default is every 10 s): the
    /// soak compresses hours of TTLs into seconds, and the trim must come within the settle
    /// time too. Its 2026-07-28 places, request memory
    /// budget and receipt bounds are small, so `modern-slot-hog`, `pinned-arguments` and
    /// `receipt-flood` reach them quickly; receipts expire in seconds (and expired records are
    /// swept every second), so the figures move during the run.
    pub(crate) fn config_toml(&self) -> String {
        format!(
            "[server]\ntrim_every_secs = 1\ntcp_user_timeout_secs = 2\n\n[security]\nbody_read_timeout_ms = 2000\n\n[sessions]\nretention_after_delivery_ms = {}\nretention_undelivered_ms = {}\n\n[sse]\nkeepalive_ms = {}\n\n[limits]\nrequest_memory_bytes = {}\n\n[modern]\nmax_in_flight = {}\nmax_in_flight_per_caller = {}\n\n[ledger]\nreceipts_per_caller = {}\nreceipt_bytes_total = {}\nreceipt_retention_secs = {}\nsweep_every_secs = 1\n",
            self.retention_after_delivery_ms,
            self.retention_undelivered_ms,
            self.keepalive_ms,
            payloads::REQUEST_MEMORY_BYTES,
            payloads::MODERN_MAX_IN_FLIGHT,
            payloads::MODERN_PER_CALLER,
            payloads::FLOOD_PER_CALLER,
            payloads::FLOOD_TOTAL_BYTES,
            payloads::FLOOD_RETENTION_SECS
        )
    }

    /// The host's arguments, `config` being the file with [`SoakSpec::config_toml`].
    pub(crate) fn host_args(&self, config: &Path) -> Vec<String> {
        [
            "--port",
            "0",
            "--packs",
            "conformance,echo,soak,ledger",
            "--stats-every-ms",
            &SAMPLE_EVERY.as_millis().to_string(),
            "--session-ttl-secs",
            &self.session_ttl_secs.to_string(),
            "--client-request-timeout-secs",
            &self.client_request_timeout_secs.to_string(),
            "--replay-max-events",
            &self.replay_max_events.to_string(),
            "--config",
            &config.to_string_lossy(),
        ]
        .map(str::to_owned)
        .to_vec()
    }
}

/// Which part of the run a sample belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Traffic,
    Silence,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Traffic => "traffic",
            Phase::Silence => "silence",
        }
    }
}

/// One sample of the host.
#[derive(Debug, Clone)]
struct Sample {
    t_ms: u64,
    /// 0-based.
    round: u64,
    phase: Phase,
    rss_kib: Option<u64>,
    /// Bytes of the ledger's files (the database and its WAL), when known.
    ledger_bytes: Option<u64>,
    /// From a fresh stats line only.
    stats: Option<Value>,
}

impl Sample {
    fn stat(&self, key: &str) -> Option<u64> {
        self.stats.as_ref().and_then(|s| s[key].as_u64())
    }

    /// Bytes of receipts the host keeps.
    fn kept_receipt_bytes(&self) -> Option<u64> {
        self.stats.as_ref().and_then(|s| s["kept"]["receipts"]["bytes"].as_u64())
    }

    fn to_json(&self) -> Value {
        json!({"t_ms": self.t_ms, "round": self.round + 1, "phase": self.phase.name(), "rss_kib": self.rss_kib,
            "sessions": self.stat("sessions"), "streams": self.stat("streams"), "stream_memory_bytes": self.stat("stream_memory_bytes"),
            "request_memory_bytes": self.stat("request_memory_bytes"), "modern_in_flight": self.stat("modern_in_flight"),
            "kept_receipt_bytes": self.kept_receipt_bytes(), "ledger_bytes": self.ledger_bytes})
    }
}

/// Samples the host: RSS from /proc, figures from its latest stats line while fresh.
struct Sampler<'a> {
    host: &'a HostProcess,
    /// The host's SQLite ledger, when the soak knows where it is.
    ledger: Option<&'a Path>,
    start: Instant,
    seq: u64,
    fresh_at: Instant,
    samples: Vec<Sample>,
    round: u64,
}

impl Sampler<'_> {
    /// Sample every tick until sessions and streams are back to 0 and `settle` has passed
    /// since now, or `limit` has.
    async fn silence(
        &mut self,
        tick: &mut tokio::time::Interval,
        bar: Option<&indicatif::ProgressBar>,
        phase: Phase,
        settle: Duration,
        limit: Duration,
    ) {
        let since = Instant::now();
        loop {
            tick.tick().await;
            let s = self.sample(phase);
            show(bar, s);
            let zero = s.stat("sessions") == Some(0) && s.stat("streams") == Some(0);
            let quiet = since.elapsed();
            if (zero && quiet >= settle) || quiet >= limit {
                return;
            }
        }
    }

    fn sample(&mut self, phase: Phase) -> &Sample {
        let now = Instant::now();
        let latest = self.host.latest_stats();
        if let Some(l) = &latest
            && l.seq > self.seq
        {
            self.seq = l.seq;
            self.fresh_at = now;
        }
        let stats = latest
            .filter(|_| self.seq > 0 && now.duration_since(self.fresh_at) <= STATS_STALE)
            .map(|l| l.value);
        let t_ms = now.duration_since(self.start).as_millis() as u64;
        let ledger_bytes = self.ledger.map(|db| {
            let size = |p: std::path::PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
            size(db.to_owned()) + size(db.with_extension("db-wal"))
        });
        self.samples.push(Sample {
            t_ms,
            round: self.round,
            phase,
            rss_kib: mcp_devtools::rss_kib(self.host.pid()),
            ledger_bytes,
            stats,
        });
        self.samples.last().expect("just pushed")
    }
}

/// Host and port of the URL the host printed.
fn target_of(url: &str) -> Result<Target, String> {
    let (addr, path) = crate::proxy::split_url(url)?;
    if !addr.ip().is_loopback() {
        return Err(format!("the host listens on {addr}, not on loopback"));
    }
    Ok(Target { addr, path })
}

fn progress_bar(spec: &SoakSpec) -> Option<indicatif::ProgressBar> {
    spec.progress.then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
                .expect("valid template"),
        );
        b
    })
}

fn show(bar: Option<&indicatif::ProgressBar>, s: &Sample) {
    if let Some(b) = bar {
        let f = |v: Option<u64>| v.map_or_else(|| "?".into(), |v| v.to_string());
        b.set_message(format!(
            "{}: rss {} KiB, sessions {}, streams {}",
            s.phase.name(),
            f(s.rss_kib),
            f(s.stat("sessions")),
            f(s.stat("streams"))
        ));
        b.tick();
    }
}

/// Run the soak against `host` (started with [`SoakSpec::host_args`]); the report, whose
/// `pass` says whether every gate passed.
///
/// # Errors
/// The host's URL is unusable, or the warm-up session failed (nothing was measured).
/// `ledger` is the host's SQLite ledger file, when known (its size is sampled).
pub(crate) async fn run(
    spec: &SoakSpec,
    host: &mut HostProcess,
    ledger: Option<&Path>,
) -> Result<Value, String> {
    let target = target_of(host.url())?;
    let start = Instant::now();
    let bar = progress_bar(spec);
    let mut sampler = Sampler {
        host: &*host,
        ledger,
        start,
        seq: 0,
        fresh_at: start,
        samples: Vec::new(),
        round: 0,
    };
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    // Warm-up: one iteration of every kind, then silence until back to 0 and the settle
    // time, as after a round. The idle figure is the host's after that: a host that has
    // served every path once (its code paged in, its pools and arenas made), not a fresh
    // process, so what the gate compares is memory the traffic left behind.
    let t =
        Rc::new(Traffic::new(target, host.stats_feed(), spec.rate, spec.seed, spec.kinds.clone()));
    let (settle, limit) = (spec.settle(), spec.silence_limit());
    // Every client at once, so the host's pools and buffers reach the run's concurrency.
    t.set_deadline(Instant::now() + Duration::from_secs(60));
    let warm: Vec<_> =
        (0..spec.clients).map(|n| actix_rt::spawn(traffic::warm_up(Rc::clone(&t), n))).collect();
    for w in warm {
        w.await
            .map_err(|e| format!("warm-up client: {e}"))?
            .map_err(|e| format!("{e}; {:?}", t.tally.borrow().samples))?;
    }
    sampler.silence(&mut tick, bar.as_ref(), Phase::Idle, settle, limit).await;
    let idle_rss_kib = sampler.samples.last().and_then(|s| s.rss_kib);

    let max_iterations = spec.seconds.saturating_mul(1000);
    let mut clients_overran = 0;
    let mut rounds = Vec::new();
    let mut round_json = Vec::new();
    for round in 0..spec.rounds {
        sampler.round = round;
        // Traffic.
        let traffic_start = Instant::now();
        let deadline = traffic_start + Duration::from_secs(spec.seconds);
        t.set_deadline(deadline);
        let tasks: Vec<_> = (0..spec.clients)
            .map(|n| actix_rt::spawn(traffic::client(Rc::clone(&t), n, round, max_iterations)))
            .collect();
        let hard_deadline = deadline + CLIENT_GRACE;
        loop {
            tick.tick().await;
            show(bar.as_ref(), sampler.sample(Phase::Traffic));
            if tasks.iter().all(actix_rt::task::JoinHandle::is_finished)
                || Instant::now() >= hard_deadline
            {
                break;
            }
        }
        for task in tasks {
            if !task.is_finished() {
                clients_overran += 1;
                task.abort();
            }
        }
        let traffic_end = Instant::now();
        sampler.silence(&mut tick, bar.as_ref(), Phase::Silence, settle, limit).await;
        let last = sampler.samples.last().cloned().expect("sampled");
        let end = RoundEnd {
            sessions: last.stat("sessions"),
            streams: last.stats.as_ref().and_then(|s| s["streams"].as_i64()),
            request_memory_bytes: last.stat("request_memory_bytes"),
            rss_kib: last.rss_kib,
        };
        let ms = |i: Instant| i.duration_since(start).as_millis() as u64;
        let this: Vec<&Sample> = sampler.samples.iter().filter(|s| s.round == round).collect();
        let (t0, t1) = (ms(traffic_start), ms(traffic_end));
        // From the end of the traffic to the first silent sample at 0.
        let zero_after = |key: &str| {
            this.iter()
                .find(|s| s.phase == Phase::Silence && s.stat(key) == Some(0))
                .map(|s| s.t_ms.saturating_sub(t1))
        };
        let peak = |key: &str| this.iter().filter_map(|s| s.stat(key)).max();
        round_json.push(json!({
            "round": round + 1, "traffic_start_ms": t0, "traffic_end_ms": t1, "end_ms": last.t_ms,
            "peak_rss_kib": this.iter().filter_map(|s| s.rss_kib).max(), "final_rss_kib": end.rss_kib,
            "peak_sessions": peak("sessions"), "final_sessions": end.sessions, "sessions_zero_after_ms": zero_after("sessions"),
            "peak_streams": peak("streams"), "final_streams": end.streams, "streams_zero_after_ms": zero_after("streams"),
            "peak_stream_memory_bytes": peak("stream_memory_bytes"),
            "peak_request_memory_bytes": peak("request_memory_bytes"), "final_request_memory_bytes": end.request_memory_bytes,
            "peak_modern_in_flight": peak("modern_in_flight"),
            "peak_kept_receipt_bytes": this.iter().filter_map(|s| s.kept_receipt_bytes()).max(),
            "peak_ledger_bytes": this.iter().filter_map(|s| s.ledger_bytes).max(), "final_ledger_bytes": last.ledger_bytes,
        }));
        rounds.push(end);
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let samples = std::mem::take(&mut sampler.samples);
    drop(sampler);
    let last = samples.last().cloned().expect("sampled");
    let peak_hwm = mcp_devtools::peak_rss_kib(host.pid());
    let host_running = host.exit_status().is_none();

    let tally = t.tally.borrow().clone();
    let host_stats = last.stats.clone().unwrap_or(Value::Null);
    let host_refused = host_stats["refused"]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0))).collect())
        .unwrap_or_default();
    let host_timed_out = host_stats["client_requests_timed_out"].as_u64();
    let host_ended_by_gap = host_stats["requests_ended_by_gap"].as_u64();
    let peak_kept_receipt_bytes = samples.iter().filter_map(Sample::kept_receipt_bytes).max();
    let m = Measured {
        idle_rss_kib,
        rounds,
        host_refused,
        host_timed_out,
        host_ended_by_gap,
        host_running,
        clients_overran,
        kinds: spec.kinds.clone(),
        tally,
        peak_kept_receipt_bytes,
    };
    let gates = evaluate(&m);
    let pass = gates.iter().all(|g| g.pass);
    let traffic_ms: u64 = round_json
        .iter()
        .map(|r| {
            r["traffic_end_ms"].as_u64().unwrap_or(0) - r["traffic_start_ms"].as_u64().unwrap_or(0)
        })
        .sum();
    let final_round = round_json.last().cloned().unwrap_or(Value::Null);
    Ok(json!({
        "pass": pass,
        "clients": spec.clients, "seconds": spec.seconds, "rounds": spec.rounds, "rate": spec.rate, "seed": spec.seed,
        "kinds": spec.kinds.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "host": {"pid": host.pid(), "session_ttl_secs": spec.session_ttl_secs, "client_request_timeout_secs": spec.client_request_timeout_secs,
            "replay_max_events": spec.replay_max_events, "retention_after_delivery_ms": spec.retention_after_delivery_ms,
            "retention_undelivered_ms": spec.retention_undelivered_ms, "keepalive_ms": spec.keepalive_ms, "settle_seconds": settle.as_secs()},
        "requests_per_s": m.tally.requests as f64 * 1000.0 / (traffic_ms.max(1) as f64),
        "rss_kib": {"idle": m.idle_rss_kib, "peak": samples.iter().filter_map(|s| s.rss_kib).max(), "peak_hwm": peak_hwm,
            "final": m.rounds.last().and_then(|r| r.rss_kib), "limit": m.idle_rss_kib.map(|i| report::RSS_GROWTH_LIMIT * i)},
        "final_round": final_round,
        "round_results": round_json,
        "host_stats": host_stats,
        "refusals": {"host": m.host_refused, "client": m.tally.refused},
        "clients_overran": clients_overran,
        "clients_tally": tally_json(&m.tally),
        "gates": gates_json(&gates),
        "samples": samples.iter().map(Sample::to_json).collect::<Vec<_>>(),
    }))
}

#[cfg(test)]
mod tests;
