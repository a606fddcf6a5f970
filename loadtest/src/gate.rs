//! `mcp-load gate`: the release gate. Runs a fault-free baseline phase, one phase per fault
//! scenario (that fault alone) and a mixed phase (every fault at once), each through a fresh
//! fault proxy, with virtual clients calling three idempotent tools whose results can be
//! checked end to end:
//! - `echo` with a unique nonce (the result must be that nonce),
//! - `ledger_append` with a unique idempotency key (the result must be that key; the server's
//!   `ledger_stats` must show every key applied once),
//! - `test_tool_with_progress` with a unique progress token (the result is the token; every
//!   progress notification must carry it, each step once).
//!
//! A result or notification that belongs to another call is a cross-stream acceptance; a
//! progress step seen twice, or a ledger key applied twice, is a duplicate dispatch; a call
//! that ends without its result (other than a refusal the proxy provoked) is a lost response.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::rc::Rc;
use std::time::Duration;

use hdrhistogram::Histogram;
use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{ClientConfig, ClientError, ClientStats, Closed, Era, McpClient};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::proxy::{FaultPlan, Scenario};
use crate::run::{Eras, SpawnedHost};
use parking_lot::Mutex;
use std::sync::Arc;

/// Settings of a gate run.
#[derive(Debug, Clone)]
pub(crate) struct GateSpec {
    pub(crate) url: String,
    pub(crate) token: Option<String>,
    pub(crate) other_token: Option<String>,
    pub(crate) clients: usize,
    /// A phase ends after this many events (or `phase_seconds`).
    pub(crate) events_per_phase: u64,
    pub(crate) phase_seconds: u64,
    /// The run fails unless its phases together saw this many events.
    pub(crate) min_events: u64,
    pub(crate) scenarios: Vec<Scenario>,
    /// Rate of a scenario in its own phase, and of each scenario in the mixed phase.
    pub(crate) rate: f64,
    pub(crate) mixed_rate: f64,
    pub(crate) seed: u64,
    /// Calls per session before a virtual client ends it and starts another.
    pub(crate) calls_per_session: u64,
    pub(crate) progress: bool,
    /// The host the gate spawned (the `crash` scenario kills and restarts it).
    pub(crate) host: Option<Arc<Mutex<SpawnedHost>>>,
}

/// The text of the receipts' answer to a retry of a call a kill interrupted.
pub(crate) const OUTCOME_UNKNOWN: &str = "may or may not have taken effect";
/// When the `crash` scenario kills the host: after a pause drawn from this range (ms).
const KILL_PAUSE_MS: (u64, u64) = (3_000, 6_000);
/// A `crash` phase does not end on its event count before this many kills.
const KILLS_PER_PHASE: u64 = 3;
/// When the `sigterm` scenario stops the host: after a pause drawn from this range (ms).
const TERM_PAUSE_MS: (u64, u64) = (2_000, 4_000);
/// A `sigterm` phase does not end on its event count before this many graceful restarts.
const RESTARTS_PER_PHASE: u64 = 2;
/// How long the `rollout` scenario keeps each flag setting (ms).
const FLIP_EVERY_MS: u64 = 1_200;
/// The `rollout` scenario's cycle: `(resumable, share)` settings, then a rollback.
const ROLLOUT_CYCLE: [(&str, f64); 4] = [("off", 1.0), ("shadow", 1.0), ("on", 0.5), ("on", 1.0)];
/// A `rollout` phase does not end on its event count before one whole cycle and its rollback.
const FLIPS_PER_PHASE: u64 = ROLLOUT_CYCLE.len() as u64 + 1;

/// Reconnect budget the virtual clients run with (the client defaults).
const BUDGET_BURST: u32 = 20;
const BUDGET_PER_SECOND: f64 = 10.0;
/// Recovery gate from the design: resume p99 under 5 s.
const RESUME_P99_LIMIT_MS: u64 = 5_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// What one phase measured.
pub(crate) struct Phase {
    name: String,
    seconds: f64,
    events: u64,
    sessions: u64,
    streams: u64,
    pub(crate) calls_ok: u64,
    /// Calls the server refused because the proxy made them illegal (401/403).
    refused: u64,
    pub(crate) lost: u64,
    cross_stream: u64,
    duplicate_dispatches: u64,
    not_found: u64,
    recovered_after_404: u64,
    resumes: u64,
    budget_waits: u64,
    reissued: u64,
    refused_events: u64,
    duplicate_events_dropped: u64,
    sessions_closed: u64,
    sessions_not_closed: u64,
    close_refused: u64,
    connect_failures: u64,
    pub(crate) latency_us: Histogram<u64>,
    resume_ms: Histogram<u64>,
    resume_unwaited_ms: Histogram<u64>,
    proxy: BTreeMap<&'static str, u64>,
    reconnect_peak_session: u64,
    reconnect_peak_all: u64,
    /// Ledger calls answered "outcome unknown" (interrupted by a kill).
    pub(crate) outcome_unknown: u64,
    /// Kills of the host (`crash`), and how long each restart took.
    crash: bool,
    kills: u64,
    restart_ms: Histogram<u64>,
    /// Graceful restarts of the host (`sigterm`), and those that did not exit 0.
    sigterm: bool,
    restarts: u64,
    unclean_exits: u64,
    /// Flag changes through the admin API (`rollout`).
    rollout: bool,
    flips: u64,
    /// The host's own metrics before and after the phase (a host the gate spawned).
    host_before: BTreeMap<String, f64>,
    host_after: BTreeMap<String, f64>,
    errors: Vec<String>,
    /// Which era the phase's clients speak.
    pub(crate) eras: Eras,
    /// Calls of 2026-07-28 clients answered with their own result.
    modern_calls: u64,
    /// The `handles` phase: baskets made and checked, items a client was told were added and
    /// that are missing, items found more than once, checkouts, a retried checkout answered
    /// with another order, tasks run to their result, tasks a kill interrupted.
    pub(crate) baskets: u64,
    pub(crate) items_lost: u64,
    pub(crate) items_doubled: u64,
    pub(crate) checkouts: u64,
    pub(crate) order_mismatches: u64,
    pub(crate) tasks_done: u64,
    pub(crate) tasks_interrupted: u64,
}

impl Phase {
    fn new(name: &str) -> Phase {
        Phase {
            name: name.to_owned(),
            seconds: 0.0,
            events: 0,
            sessions: 0,
            streams: 0,
            calls_ok: 0,
            refused: 0,
            lost: 0,
            cross_stream: 0,
            duplicate_dispatches: 0,
            not_found: 0,
            recovered_after_404: 0,
            resumes: 0,
            budget_waits: 0,
            reissued: 0,
            refused_events: 0,
            duplicate_events_dropped: 0,
            sessions_closed: 0,
            sessions_not_closed: 0,
            close_refused: 0,
            connect_failures: 0,
            latency_us: histogram(),
            resume_ms: histogram(),
            resume_unwaited_ms: histogram(),
            proxy: BTreeMap::new(),
            reconnect_peak_session: 0,
            reconnect_peak_all: 0,
            outcome_unknown: 0,
            crash: false,
            kills: 0,
            restart_ms: histogram(),
            sigterm: false,
            restarts: 0,
            unclean_exits: 0,
            rollout: false,
            flips: 0,
            host_before: BTreeMap::new(),
            host_after: BTreeMap::new(),
            errors: Vec::new(),
            eras: Eras::Legacy,
            modern_calls: 0,
            baskets: 0,
            items_lost: 0,
            items_doubled: 0,
            checkouts: 0,
            order_mismatches: 0,
            tasks_done: 0,
            tasks_interrupted: 0,
        }
    }

    /// How much a host metric (summed over its labels) moved during the phase.
    fn host_delta(&self, name: &str) -> f64 {
        crate::admin::total(&self.host_after, name) - crate::admin::total(&self.host_before, name)
    }

    /// The phase's own restarts or flips are not all done yet.
    pub(crate) fn owes_faults(&self) -> bool {
        (self.crash && self.kills < KILLS_PER_PHASE)
            || (self.sigterm && self.restarts < RESTARTS_PER_PHASE)
            || (self.rollout && self.flips < FLIPS_PER_PHASE)
    }

    fn add_client_stats(&mut self, s: &ClientStats) {
        let a = s.accept;
        self.events += s.events();
        self.sessions += s.handshakes;
        self.streams += s.streams;
        self.not_found += s.not_found;
        self.recovered_after_404 += s.recovered_after_404;
        self.resumes += s.resumes;
        self.budget_waits += s.budget_waits;
        self.reissued += s.reissued;
        self.refused_events += a.uncorrelated + a.misrouted;
        self.duplicate_events_dropped += a.duplicates;
    }

    /// Keep an error sample: up to three of each kind (the text before its first digit).
    pub(crate) fn note_error(&mut self, e: String) {
        let kind =
            |s: &str| s.split(|c: char| c.is_ascii_digit()).next().unwrap_or_default().to_owned();
        let k = kind(&e);
        if self.errors.len() < 30 && self.errors.iter().filter(|x| kind(x) == k).count() < 3 {
            self.errors.push(e);
        }
    }

    fn count(&self, name: &str) -> u64 {
        self.proxy.get(name).copied().unwrap_or(0)
    }

    fn to_json(&self) -> Value {
        let q = |h: &Histogram<u64>| json!({"count": h.len(), "p50": h.value_at_quantile(0.5), "p90": h.value_at_quantile(0.9), "p99": h.value_at_quantile(0.99), "max": h.max()});
        let mut v = json!({
            "name": self.name, "seconds": self.seconds, "events": self.events, "sessions": self.sessions, "streams": self.streams,
            "calls_ok": self.calls_ok, "calls_refused": self.refused, "lost_responses": self.lost,
            "cross_stream_acceptances": self.cross_stream, "duplicate_dispatches": self.duplicate_dispatches,
            "not_found": self.not_found, "recovered_after_404": self.recovered_after_404,
            "resumes": self.resumes, "budget_waits": self.budget_waits, "reissued": self.reissued,
            "events_refused": self.refused_events, "duplicate_events_dropped": self.duplicate_events_dropped,
            "sessions_closed": self.sessions_closed, "sessions_not_closed": self.sessions_not_closed, "close_refused": self.close_refused, "connect_failures": self.connect_failures,
            "calls_per_s": self.calls_ok as f64 / self.seconds.max(1e-9),
            "latency_us": q(&self.latency_us), "resume_ms": q(&self.resume_ms), "resume_without_wait_ms": q(&self.resume_unwaited_ms),
            "reconnects_peak_per_session_1s": self.reconnect_peak_session, "reconnects_peak_all_1s": self.reconnect_peak_all,
            "proxy": self.proxy, "error_samples": self.errors,
            "outcome_unknown": self.outcome_unknown, "kills": self.kills, "restart_ms": q(&self.restart_ms),
            "graceful_restarts": self.restarts, "unclean_exits": self.unclean_exits, "flag_flips": self.flips,
            "host_metrics": {"before": self.host_before, "after": self.host_after},
            "eras": format!("{:?}", self.eras).to_lowercase(), "modern_calls": self.modern_calls,
        });
        v["handles"] = json!({
            "baskets": self.baskets, "items_lost": self.items_lost, "items_doubled": self.items_doubled,
            "checkouts": self.checkouts, "checkout_order_mismatches": self.order_mismatches,
            "tasks_done": self.tasks_done, "tasks_interrupted": self.tasks_interrupted,
        });
        v
    }
}

/// One call kind of the gate mix.
#[derive(Clone, Copy)]
enum Kind {
    Echo,
    Ledger,
    Progress,
}

fn call_params(kind: Kind, nonce: &str) -> Value {
    match kind {
        Kind::Echo => json!({"name": "echo", "arguments": {"text": nonce}}),
        Kind::Ledger => json!({"name": "ledger_append", "arguments": {"key": nonce}}),
        Kind::Progress => {
            json!({"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": nonce}})
        }
    }
}

/// The scenarios that reach a 2026-07-28 request (the `modern` phase applies those selected).
const MODERN_FAULTS: [Scenario; 6] = [
    Scenario::Cut,
    Scenario::Storm,
    Scenario::OriginRewrite,
    Scenario::OldToken,
    Scenario::Crash,
    Scenario::Sigterm,
];

fn client_config(spec: &GateSpec, url: &str, era: Era) -> ClientConfig {
    let mut cfg = ClientConfig::new(url);
    cfg.era = era;
    cfg.token.clone_from(&spec.token);
    cfg.budget_burst = BUDGET_BURST;
    cfg.budget_per_second = BUDGET_PER_SECOND;
    cfg
}

pub(crate) async fn connect(
    spec: &GateSpec,
    url: &str,
    phase: &RefCell<Phase>,
    era: Era,
) -> Option<McpClient> {
    // A handshake can be refused on purpose (a rewritten Origin): try again, a bounded number
    // of times.
    for _ in 0..50 {
        match McpClient::connect(client_config(spec, url, era), MemoryJournal::new(4096)).await {
            Ok(c) => return Some(c),
            Err(e) => {
                let mut p = phase.borrow_mut();
                p.connect_failures += 1;
                p.note_error(format!("connect: {e}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// One virtual client for one phase.
async fn virtual_client(
    spec: Rc<GateSpec>,
    url: Rc<str>,
    n: usize,
    phase_no: usize,
    phase: Rc<RefCell<Phase>>,
    live_events: Rc<Cell<u64>>,
    deadline: Instant,
) {
    let mut k = 0u64;
    let era = phase.borrow().eras.of(n);
    let done = |events: &Cell<u64>| {
        (events.get() >= spec.events_per_phase && !phase.borrow().owes_faults())
            || Instant::now() >= deadline
    };
    while !done(&live_events) {
        let Some(client) = connect(&spec, &url, &phase, era).await else { return };
        let mut seen_events = 0;
        for _ in 0..spec.calls_per_session {
            if done(&live_events) {
                break;
            }
            k += 1;
            let kind = match k % 10 {
                0..=5 => Kind::Echo,
                6..=8 => Kind::Ledger,
                _ => Kind::Progress,
            };
            let nonce = format!("g{}-p{phase_no}-c{n}-{k}", spec.seed);
            let t0 = Instant::now();
            let result = client.request("tools/call", Some(call_params(kind, &nonce)), true).await;
            let us = t0.elapsed().as_micros().max(1) as u64;
            let notes = client.take_notifications_with_ids();
            let samples = client.take_resume_samples();
            let stats = client.stats();
            let events = stats.events();
            live_events.set(live_events.get() + events - seen_events);
            seen_events = events;
            let mut p = phase.borrow_mut();
            match result {
                Ok(v) => {
                    let text = v["content"][0]["text"].as_str().unwrap_or_default();
                    if matches!(kind, Kind::Ledger)
                        && v["isError"] == true
                        && text.contains(OUTCOME_UNKNOWN)
                    {
                        // A kill fell between the write and its recorded outcome: the receipt
                        // says so rather than apply it again (the ledger's duplicate count
                        // proves it was not).
                        p.outcome_unknown += 1;
                    } else if text == nonce {
                        p.calls_ok += 1;
                        if era == Era::Modern {
                            p.modern_calls += 1;
                        }
                        let _ = p.latency_us.record(us);
                    } else {
                        p.cross_stream += 1;
                        p.note_error(format!("call {nonce} answered with {text:?}"));
                    }
                }
                Err(ClientError::Http(401 | 403, _)) => p.refused += 1,
                Err(e) => {
                    p.lost += 1;
                    p.note_error(format!("call {nonce}: {e}"));
                }
            }
            // A progress step may legitimately repeat when the call was re-issued (the tool ran
            // again, new events); the same *event* dispatched twice never may.
            let mut seen = HashSet::new();
            for (event_id, note) in
                notes.iter().filter(|(_, n)| n["method"] == "notifications/progress")
            {
                if note["params"]["progressToken"].as_str() != Some(nonce.as_str()) {
                    p.cross_stream += 1;
                } else if event_id.as_ref().is_some_and(|id| !seen.insert(id.clone())) {
                    p.duplicate_dispatches += 1;
                }
            }
            for s in samples {
                let _ = p.resume_ms.record(s.total.as_millis().max(1) as u64);
                let _ = p
                    .resume_unwaited_ms
                    .record(s.total.saturating_sub(s.waited).as_millis().max(1) as u64);
            }
        }
        end_session(client, &phase).await;
    }
}

/// A virtual client is done with `client`: its counters go to the phase, and its session (if
/// it has one) is ended.
pub(crate) async fn end_session(client: McpClient, phase: &RefCell<Phase>) {
    let stats = client.stats();
    let closed = client.close().await;
    let mut p = phase.borrow_mut();
    p.add_client_stats(&stats);
    if matches!(closed, Ok(Closed::Stateless)) {
        // 2026-07-28: no session to end.
    } else if closed.as_ref().is_ok_and(|c| c.is_over()) {
        p.sessions_closed += 1;
    } else if matches!(closed, Ok(Closed::Refused(401 | 403))) {
        // The proxy made this DELETE illegal (Origin or token): counted with the refusals.
        p.close_refused += 1;
    } else {
        p.sessions_not_closed += 1;
        p.note_error(format!("close: {closed:?}"));
    }
}

async fn run_phase(
    spec: &Rc<GateSpec>,
    phase_no: usize,
    name: &str,
    rates: BTreeMap<Scenario, f64>,
    eras: Eras,
) -> Result<Phase, String> {
    let (upstream, path) = crate::proxy::split_url(&spec.url)?;
    let crash = rates.contains_key(&Scenario::Crash);
    let sigterm = rates.contains_key(&Scenario::Sigterm);
    let rollout = rates.contains_key(&Scenario::Rollout);
    // Only the read-only calls of the mix may be served as another principal (see FaultPlan).
    let read_only = vec!["echo".to_owned(), "test_tool_with_progress".to_owned()];
    let plan = FaultPlan {
        rates,
        seed: spec.seed.wrapping_add(phase_no as u64),
        other_token: spec.other_token.clone(),
        limit: None,
        token_rewrite_modern_tools: read_only,
    };
    let (addr, proxy) =
        crate::proxy::start(upstream, plan).await.map_err(|e| format!("proxy: {e}"))?;
    let url: Rc<str> = format!("http://{addr}{path}").into();
    let phase = Rc::new(RefCell::new(Phase::new(name)));
    let before = host_metrics(spec).await;
    {
        let mut p = phase.borrow_mut();
        (p.crash, p.sigterm, p.rollout) = (crash, sigterm, rollout);
        p.host_before = before;
        p.eras = eras;
    }
    let live = Rc::new(Cell::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs(spec.phase_seconds);
    let bar = spec.progress.then(|| {
        let b = indicatif::ProgressBar::new(spec.events_per_phase);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix:>18} {bar:40} {pos}/{len} events {elapsed}",
            )
            .expect("valid template"),
        );
        b.set_prefix(name.to_owned());
        b
    });
    let stop = Rc::new(Cell::new(false));
    let seed = spec.seed.wrapping_add(phase_no as u64);
    // The host-level scenarios of the phase (several in the mixed phase) run as tasks that
    // take turns on the host; `crash` and `sigterm` together share one task, so the host
    // restarts one way or the other at the crash cadence, not at both cadences at once.
    let mut killers = Vec::new();
    if crash || sigterm || rollout {
        let Some(host) = &spec.host else { return Err(format!("phase {name} needs --spawn-host")) };
        let stops: Vec<Stop> = [(crash, Stop::Kill), (sigterm, Stop::Term)]
            .into_iter()
            .filter_map(|(on, how)| on.then_some(how))
            .collect();
        if !stops.is_empty() {
            killers.push(actix_rt::spawn(kill_now_and_then(
                Arc::clone(host),
                seed,
                Rc::clone(&stop),
                Rc::clone(&phase),
                stops,
            )));
        }
        if rollout {
            killers.push(actix_rt::spawn(flip_now_and_then(
                Arc::clone(host),
                Rc::clone(&stop),
                Rc::clone(&phase),
            )));
        }
    }
    let handles = name == Scenario::Handles.name();
    let tasks: Vec<_> = (0..spec.clients)
        .map(|n| {
            let (spec, url, phase, live) =
                (Rc::clone(spec), Rc::clone(&url), Rc::clone(&phase), Rc::clone(&live));
            if handles {
                actix_rt::spawn(crate::baskets::basket_client(
                    spec, url, n, phase_no, phase, live, deadline,
                ))
            } else {
                actix_rt::spawn(virtual_client(spec, url, n, phase_no, phase, live, deadline))
            }
        })
        .collect();
    if let Some(b) = &bar {
        while !tasks.iter().all(actix_rt::task::JoinHandle::is_finished) {
            b.set_position(live.get().min(spec.events_per_phase));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        b.finish_and_clear();
    }
    for t in tasks {
        let _ = t.await;
    }
    stop.set(true);
    for k in killers {
        k.await.map_err(|e| format!("{name} task: {e}"))??;
    }
    let after = host_metrics(spec).await;
    let mut p = Rc::try_unwrap(phase).map_err(|_| "phase still shared")?.into_inner();
    p.host_after = after;
    p.seconds = start.elapsed().as_secs_f64();
    p.proxy = proxy.counts();
    for (name, n) in [
        ("crash.kills", p.kills),
        ("sigterm.restarts", p.restarts),
        ("rollout.flips", p.flips),
        ("handles.baskets", p.baskets),
    ] {
        if n > 0 {
            p.proxy.insert(name, n);
        }
    }
    (p.reconnect_peak_session, p.reconnect_peak_all) = proxy.reconnect_peaks();
    Ok(p)
}

/// How the `crash` and `sigterm` scenarios stop the host.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGKILL.
    Kill,
    /// SIGTERM (the graceful drain), waiting for the exit.
    Term,
}

/// The `crash` and `sigterm` scenarios: until `stop`, stop the host after a random pause, each
/// of `stops` in turn, and start it again on the same ledger and port (on a blocking
/// thread: the clients keep running). The pauses are the crash scenario's when it is among
/// `stops`.
async fn kill_now_and_then(
    host: Arc<Mutex<SpawnedHost>>,
    seed: u64,
    stop: Rc<Cell<bool>>,
    phase: Rc<RefCell<Phase>>,
    stops: Vec<Stop>,
) -> Result<(), String> {
    let mut x = seed | 1;
    let (low, high) = if stops.contains(&Stop::Kill) { KILL_PAUSE_MS } else { TERM_PAUSE_MS };
    let mut round = 0usize;
    loop {
        let pause_draw = crate::proxy::next_random(&mut x);
        let pause = low + pause_draw % (high - low);
        let how = stops[round % stops.len()];
        round += 1;
        let until = Instant::now() + Duration::from_millis(pause);
        while Instant::now() < until {
            if stop.get() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let h = Arc::clone(&host);
        let t0 = Instant::now();
        let exit = tokio::task::spawn_blocking(move || match how {
            Stop::Kill => h.lock().kill_and_restart().map(|()| None),
            Stop::Term => h.lock().terminate_and_restart().map(Some),
        })
        .await
        .map_err(|e| format!("restart: {e}"))??;
        let mut p = phase.borrow_mut();
        let _ = p.restart_ms.record(t0.elapsed().as_millis().max(1) as u64);
        match exit {
            None => p.kills += 1,
            Some(code) => {
                p.restarts += 1;
                if code != Some(0) {
                    p.unclean_exits += 1;
                    p.note_error(format!("graceful stop exited with {code:?}"));
                }
            }
        }
    }
}

/// The `rollout` scenario: until `stop` (and at least one whole cycle), set the host's flags
/// through its admin API to each setting of [`ROLLOUT_CYCLE`] in turn, then roll back, each
/// kept [`FLIP_EVERY_MS`]. At the end the defaults are set again for the phases after it.
async fn flip_now_and_then(
    host: Arc<Mutex<SpawnedHost>>,
    stop: Rc<Cell<bool>>,
    phase: Rc<RefCell<Phase>>,
) -> Result<(), String> {
    // Asked for each change, and used with the host held: a restart (crash, sigterm in the
    // mixed phase) moves the admin API to a new port, and waits until the change is made.
    let with_admin = |h: &Arc<Mutex<SpawnedHost>>,
                      f: &dyn Fn(&crate::admin::Admin) -> Result<(), String>| {
        let host = h.lock();
        f(&host.admin().ok_or("the spawned host has no admin API")?)
    };
    let mut step = 0usize;
    while !stop.get() || phase.borrow().flips < FLIPS_PER_PHASE {
        let h = Arc::clone(&host);
        let i = step % (ROLLOUT_CYCLE.len() + 1);
        tokio::task::spawn_blocking(move || {
            with_admin(&h, &|a| match ROLLOUT_CYCLE.get(i) {
                Some((resumable, share)) => {
                    a.set_flags(&json!({"resumable": resumable, "share": share}))
                }
                None => a.rollback(),
            })
        })
        .await
        .map_err(|e| e.to_string())??;
        phase.borrow_mut().flips += 1;
        step += 1;
        let until = Instant::now() + Duration::from_millis(FLIP_EVERY_MS);
        while Instant::now() < until && !(stop.get() && phase.borrow().flips >= FLIPS_PER_PHASE) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let h = Arc::clone(&host);
    tokio::task::spawn_blocking(move || {
        with_admin(&h, &|a| {
            a.set_flags(&json!({"resumable": "on", "share": 1.0, "write_tools": "all"}))
        })
    })
    .await
    .map_err(|e| e.to_string())?
}

/// The spawned host's metrics now (empty without one, or when the scrape fails).
async fn host_metrics(spec: &GateSpec) -> BTreeMap<String, f64> {
    let Some(host) = spec.host.clone() else { return BTreeMap::new() };
    tokio::task::spawn_blocking(move || host.lock().admin().and_then(|a| a.scrape().ok()))
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Scenarios that act on resumes: their phase also cuts streams, or nothing would resume.
fn carried_by_cuts(s: Scenario) -> bool {
    matches!(
        s,
        Scenario::ForeignCursor | Scenario::Storm | Scenario::ReplayAfterAck | Scenario::Rollout
    )
}

/// The counter that shows a scenario really fired in its phase.
fn evidence(s: Scenario) -> &'static [&'static str] {
    match s {
        Scenario::Cut => &["cut"],
        Scenario::LostPriming => &["lost_priming"],
        Scenario::CrossedIds => &["crossed_ids"],
        Scenario::ReplayAfterAck => &["replay_after_ack.stream", "replay_after_ack.resume"],
        Scenario::ForeignCursor => &["foreign_cursor.rejected"],
        Scenario::ExpiryRace => &["expiry_race"],
        Scenario::LostDelete => &["lost_delete"],
        Scenario::OldToken => &["old_token.rejected"],
        Scenario::MissingVersion => &["missing_version.served"],
        Scenario::OriginRewrite => &["origin.rejected"],
        Scenario::Storm => &["storm.refusals"],
        Scenario::Crash => &["crash.kills"],
        Scenario::Sigterm => &["sigterm.restarts"],
        Scenario::Rollout => &["rollout.flips"],
        Scenario::Modern => &["modern.requests"],
        Scenario::Handles => &["handles.baskets"],
    }
}

struct Gate {
    name: String,
    value: String,
    threshold: String,
    pass: bool,
    /// Not applicable: the scenarios that exercise it were not selected.
    skipped: bool,
}

impl Gate {
    fn new(
        name: impl Into<String>,
        value: impl Into<String>,
        threshold: impl Into<String>,
        pass: bool,
    ) -> Gate {
        Gate {
            name: name.into(),
            value: value.into(),
            threshold: threshold.into(),
            pass,
            skipped: false,
        }
    }
}

fn rate_gate(name: &str, good: u64, total: u64) -> Gate {
    let value = if total == 0 {
        "n/a (none sent)".into()
    } else {
        format!("{:.2} % ({good}/{total})", 100.0 * good as f64 / total as f64)
    };
    Gate::new(name, value, "100 %", total > 0 && good == total)
}

/// A rate gate that applies only when one of `needs` was selected.
fn rate_gate_if(spec: &GateSpec, needs: &[Scenario], name: &str, good: u64, total: u64) -> Gate {
    if needs.iter().any(|s| spec.scenarios.contains(s)) {
        return rate_gate(name, good, total);
    }
    Gate {
        name: name.into(),
        value: "not exercised".into(),
        threshold: "100 %".into(),
        pass: true,
        skipped: true,
    }
}

fn zero_gate(name: &str, v: u64) -> Gate {
    Gate::new(name, v.to_string(), "0", v == 0)
}

fn evaluate(spec: &GateSpec, phases: &[Phase], ledger: &Value) -> Vec<Gate> {
    let sum = |f: &dyn Fn(&Phase) -> u64| phases.iter().map(f).sum::<u64>();
    let count = |name: &str| sum(&|p| p.count(name));
    let events = sum(&|p| p.events);
    let mut gates = vec![Gate::new(
        "events",
        events.to_string(),
        format!(">= {}", spec.min_events),
        events >= spec.min_events,
    )];
    for s in &spec.scenarios {
        let fired: u64 = phases
            .iter()
            .filter(|p| p.name == s.name())
            .map(|p| evidence(*s).iter().map(|e| p.count(e)).sum::<u64>())
            .sum();
        gates.push(Gate::new(
            format!("scenario {} fired", s.name()),
            fired.to_string(),
            "> 0",
            fired > 0,
        ));
    }
    gates.push(zero_gate("cross-stream acceptances", sum(&|p| p.cross_stream)));
    // A key applied twice in one caller's namespace, or under two callers (one call served as
    // two principals: the gate's keys are unique per call).
    let dup_server =
        ledger["duplicates"].as_u64().map(|d| d + ledger["cross_principal"].as_u64().unwrap_or(0));
    gates.push(Gate::new(
        "duplicate dispatches (client + server ledger)",
        format!(
            "{} + {}",
            sum(&|p| p.duplicate_dispatches),
            dup_server.map_or("?".into(), |d| d.to_string())
        ),
        "0",
        sum(&|p| p.duplicate_dispatches) == 0 && dup_server == Some(0),
    ));
    gates.push(zero_gate("lost responses", sum(&|p| p.lost)));
    let explained = count("origin.rejected") + count("old_token.rejected");
    let refused = sum(&|p| p.refused + p.close_refused);
    gates.push(Gate::new(
        "refused calls and DELETEs explained by injected faults",
        format!("{refused} refused, {explained} injected refusals"),
        "refused <= injected",
        refused <= explained,
    ));
    gates.push(rate_gate_if(
        spec,
        &[Scenario::ExpiryRace, Scenario::OldToken],
        "404 -> new handshake",
        sum(&|p| p.recovered_after_404),
        sum(&|p| p.not_found),
    ));
    gates.push(zero_gate(
        "requests reusing a session after its 404",
        count("session.reused_after_404"),
    ));
    if spec.scenarios.contains(&Scenario::Crash) {
        // Only kills in that phase: sessions must survive them.
        let crash = || phases.iter().filter(|p| p.name == Scenario::Crash.name());
        gates.push(zero_gate(
            "404s in the crash phase (sessions survive a kill)",
            crash().map(|p| p.not_found).sum(),
        ));
        let kills = crash().map(|p| p.kills).min().unwrap_or(0);
        gates.push(Gate::new(
            "kills in the crash phase",
            kills.to_string(),
            format!(">= {KILLS_PER_PHASE}"),
            kills >= KILLS_PER_PHASE,
        ));
    }
    if spec.scenarios.contains(&Scenario::Sigterm) {
        let term = || phases.iter().filter(|p| p.name == Scenario::Sigterm.name());
        gates.push(zero_gate(
            "404s in the sigterm phase (sessions survive a graceful restart)",
            term().map(|p| p.not_found).sum(),
        ));
        let restarts = term().map(|p| p.restarts).min().unwrap_or(0);
        gates.push(Gate::new(
            "graceful restarts in the sigterm phase",
            restarts.to_string(),
            format!(">= {RESTARTS_PER_PHASE}"),
            restarts >= RESTARTS_PER_PHASE,
        ));
        gates.push(zero_gate("graceful stops that did not exit 0", sum(&|p| p.unclean_exits)));
    }
    if spec.scenarios.contains(&Scenario::Rollout) {
        let roll = || phases.iter().filter(|p| p.name == Scenario::Rollout.name());
        let flips = roll().map(|p| p.flips).min().unwrap_or(0);
        gates.push(Gate::new(
            "flag changes in the rollout phase (off, shadow, on 50 %, on, rollback)",
            flips.to_string(),
            format!(">= {FLIPS_PER_PHASE}"),
            flips >= FLIPS_PER_PHASE,
        ));
        let verified: f64 = roll().map(|p| p.host_delta("mcp_shadow_streams_verified_total")).sum();
        gates.push(Gate::new(
            "shadow streams verified by the host in the rollout phase",
            verified.to_string(),
            "> 0",
            verified > 0.0,
        ));
    }
    if spec.host.is_some() {
        let mismatches: f64 =
            phases.iter().map(|p| p.host_delta("mcp_shadow_mismatches_total")).sum();
        gates.push(Gate::new(
            "shadow ledger mismatches (host metrics)",
            mismatches.to_string(),
            "0",
            mismatches == 0.0,
        ));
    }
    gates.push(zero_gate(
        "outcome-unknown answers in phases without a kill",
        sum(&|p| if p.kills == 0 { p.outcome_unknown } else { 0 }),
    ));
    gates.push(rate_gate_if(
        spec,
        &[Scenario::OriginRewrite],
        "illegal Origin rejected",
        count("origin.rejected"),
        count("origin.rejected") + count("origin.accepted"),
    ));
    gates.push(rate_gate_if(
        spec,
        &[Scenario::OldToken],
        "other principal's token rejected (sessions)",
        count("old_token.rejected"),
        count("old_token.rejected") + count("old_token.accepted"),
    ));
    if spec.scenarios.contains(&Scenario::Modern) && spec.scenarios.contains(&Scenario::OldToken) {
        let (served, not) =
            (count("old_token.served_as_other"), count("old_token.modern_not_served"));
        gates.push(rate_gate(
            "2026-07-28 request with another principal's token served as that principal",
            served,
            served + not,
        ));
    }
    if spec.scenarios.contains(&Scenario::Handles) {
        gates.push(zero_gate(
            "basket items lost (a client was told an item was added; it is missing)",
            sum(&|p| p.items_lost),
        ));
        gates.push(zero_gate("basket items applied twice", sum(&|p| p.items_doubled)));
        let server = ledger["baskets"]["double_checkouts"].as_u64();
        gates.push(Gate::new(
            "double checkouts (client: a retried checkout gave another order; server: basket_stats)",
            format!("{} + {}", sum(&|p| p.order_mismatches), server.map_or("?".into(), |d| d.to_string())),
            "0",
            sum(&|p| p.order_mismatches) == 0 && server == Some(0),
        ));
        let checkouts = sum(&|p| p.checkouts);
        gates.push(Gate::new(
            "baskets checked out in the handles phase",
            checkouts.to_string(),
            "> 0",
            checkouts > 0,
        ));
        let tasks = sum(&|p| p.tasks_done);
        gates.push(Gate::new(
            "tasks run to their result in the handles phase",
            tasks.to_string(),
            "> 0",
            tasks > 0,
        ));
    }
    if spec.scenarios.contains(&Scenario::Modern) {
        let calls = sum(&|p| p.modern_calls);
        gates.push(Gate::new(
            "calls by 2026-07-28 clients answered with their own result",
            calls.to_string(),
            "> 0",
            calls > 0,
        ));
    }
    gates.push(rate_gate_if(
        spec,
        &[Scenario::ForeignCursor],
        "forged/foreign Last-Event-ID rejected",
        count("foreign_cursor.rejected"),
        count("foreign_cursor.rejected") + count("foreign_cursor.accepted"),
    ));
    gates.push(rate_gate_if(
        spec,
        &[Scenario::MissingVersion],
        "missing version header served",
        count("missing_version.served"),
        count("missing_version.served") + count("missing_version.refused"),
    ));
    let mut resume = histogram();
    for p in phases {
        resume.add(&p.resume_ms).expect("same bounds");
    }
    gates.push(Gate::new(
        "resume latency p99 (with retry wait)",
        format!("{} ms", resume.value_at_quantile(0.99)),
        format!("< {RESUME_P99_LIMIT_MS} ms"),
        resume.value_at_quantile(0.99) < RESUME_P99_LIMIT_MS,
    ));
    let early = count("resume.too_early");
    gates.push(Gate::new(
        "resumes sooner than the server's retry / Retry-After",
        format!("{early} of {} checked", early + count("resume.waited_enough")),
        "0",
        early == 0,
    ));
    let peak = phases.iter().map(|p| p.reconnect_peak_session).max().unwrap_or(0);
    let allowed = u64::from(BUDGET_BURST) + BUDGET_PER_SECOND as u64;
    gates.push(Gate::new(
        "reconnects per session in any 1 s",
        peak.to_string(),
        format!("<= {allowed} (budget)"),
        peak <= allowed,
    ));
    gates.push(rate_gate(
        "sessions ended on close (DELETEs not refused on purpose)",
        sum(&|p| p.sessions_closed),
        sum(&|p| p.sessions_closed + p.sessions_not_closed),
    ));
    gates
}

async fn ledger_stats(spec: &GateSpec) -> Value {
    stats_of(spec, "ledger_stats").await
}

/// The `structuredContent` of a stats tool of the server.
async fn stats_of(spec: &GateSpec, tool: &str) -> Value {
    let Ok(c) =
        McpClient::connect(client_config(spec, &spec.url, Era::Legacy), MemoryJournal::new(64))
            .await
    else {
        return Value::Null;
    };
    let v = c.request("tools/call", Some(json!({"name": tool, "arguments": {}})), true).await;
    let _ = c.close().await;
    v.map(|r| r["structuredContent"].clone()).unwrap_or(Value::Null)
}

/// The phases of a run: a baseline, one per selected scenario (those acting on resumes also
/// cut streams; `modern` adds every selected fault that reaches a stateless request, at the
/// mixed rate, and its clients speak 2026-07-28), and, with more than one scenario, a mixed
/// phase with every scenario at the mixed rate (alternating eras when `modern` is selected).
fn plan(spec: &GateSpec) -> Vec<(String, BTreeMap<Scenario, f64>, Eras)> {
    let mut plan: Vec<(String, BTreeMap<Scenario, f64>, Eras)> =
        vec![("baseline".into(), BTreeMap::new(), Eras::Legacy)];
    let modern = spec.scenarios.contains(&Scenario::Modern);
    for s in &spec.scenarios {
        let mut rates = BTreeMap::from([(*s, spec.rate)]);
        if carried_by_cuts(*s) {
            rates.entry(Scenario::Cut).or_insert(spec.rate);
        }
        let mut eras = Eras::Legacy;
        if *s == Scenario::Handles {
            // Baskets across cut streams and, when selected, kills of the host, in both eras.
            rates.entry(Scenario::Cut).or_insert(spec.mixed_rate);
            if spec.scenarios.contains(&Scenario::Crash) {
                rates.insert(Scenario::Crash, spec.rate);
            }
            eras = Eras::Alternate;
        }
        if *s == Scenario::Modern {
            // Every selected fault that reaches a stateless request, at the mixed rate (several
            // at once), and at least cuts: re-issues are what this era's clients recover by.
            rates.extend(
                MODERN_FAULTS
                    .iter()
                    .filter(|f| spec.scenarios.contains(f))
                    .map(|f| (*f, spec.mixed_rate)),
            );
            rates.entry(Scenario::Cut).or_insert(spec.mixed_rate);
            eras = Eras::Modern;
        }
        plan.push((s.name().into(), rates, eras));
    }
    if spec.scenarios.len() > 1 {
        let eras = if modern { Eras::Alternate } else { Eras::Legacy };
        plan.push((
            "mixed".into(),
            spec.scenarios.iter().map(|s| (*s, spec.mixed_rate)).collect(),
            eras,
        ));
    }
    plan
}

/// Run every phase; returns the report and whether every gate passed.
pub(crate) async fn run(spec: GateSpec) -> Result<(Value, bool), String> {
    let spec = Rc::new(spec);
    let mut phases = Vec::new();
    let plan = plan(&spec);
    let started = Instant::now();
    for (i, (name, rates, eras)) in plan.into_iter().enumerate() {
        let p = run_phase(&spec, i, &name, rates, eras).await?;
        if !spec.progress {
            eprintln!(
                "phase {name}: {} events, {} calls ok in {:.1} s",
                p.events, p.calls_ok, p.seconds
            );
        }
        phases.push(p);
    }
    let mut ledger = ledger_stats(&spec).await;
    if spec.scenarios.contains(&Scenario::Handles) {
        ledger["baskets"] = stats_of(&spec, "basket_stats").await;
    }
    let gates = evaluate(&spec, &phases, &ledger);
    let pass = gates.iter().all(|g| g.pass);
    let mut all = histogram();
    for p in &phases {
        all.add(&p.latency_us).expect("same bounds");
    }
    let calls: u64 = phases.iter().map(|p| p.calls_ok).sum();
    let seconds = started.elapsed().as_secs_f64();
    let report = json!({
        "pass": pass,
        "url": spec.url, "clients": spec.clients, "seconds": seconds, "seed": spec.seed,
        "events": phases.iter().map(|p| p.events).sum::<u64>(),
        "sessions": phases.iter().map(|p| p.sessions).sum::<u64>(),
        "streams": phases.iter().map(|p| p.streams).sum::<u64>(),
        "calls_ok": calls, "calls_per_s": calls as f64 / seconds,
        "latency_us": {"p50": all.value_at_quantile(0.5), "p90": all.value_at_quantile(0.9), "p99": all.value_at_quantile(0.99), "max": all.max()},
        "reconnect_budget": {"burst": BUDGET_BURST, "per_second": BUDGET_PER_SECOND},
        "ledger": ledger,
        "gates": gates.iter().map(|g| json!({"gate": g.name, "value": g.value, "threshold": g.threshold, "pass": g.pass, "skipped": g.skipped})).collect::<Vec<_>>(),
        "phases": phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
    });
    Ok((report, pass))
}

/// The report as terminal tables.
pub(crate) fn render(r: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| phase | events | sessions | streams | calls ok | calls/s | p50 µs | p99 µs | resumes | resume p50/p99/max ms | same, without waits | lost | cross | dup |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|");
    for p in r["phases"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {}/{}/{} | {}/{}/{} | {} | {} | {} |",
            p["name"].as_str().unwrap_or_default(),
            p["events"],
            p["sessions"],
            p["streams"],
            p["calls_ok"],
            p["calls_per_s"].as_f64().unwrap_or(0.0),
            p["latency_us"]["p50"],
            p["latency_us"]["p99"],
            p["resumes"],
            p["resume_ms"]["p50"],
            p["resume_ms"]["p99"],
            p["resume_ms"]["max"],
            p["resume_without_wait_ms"]["p50"],
            p["resume_without_wait_ms"]["p99"],
            p["resume_without_wait_ms"]["max"],
            p["lost_responses"],
            p["cross_stream_acceptances"],
            p["duplicate_dispatches"],
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "| gate | value | threshold | result |");
    let _ = writeln!(out, "|---|---|---|---|");
    for g in r["gates"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            g["gate"].as_str().unwrap_or_default(),
            g["value"].as_str().unwrap_or_default(),
            g["threshold"].as_str().unwrap_or_default(),
            match (g["skipped"] == true, g["pass"] == true) {
                (true, _) => "skipped",
                (false, true) => "pass",
                (false, false) => "FAIL",
            }
        );
    }
    let _ = writeln!(
        out,
        "\n{} events, {} sessions, {} streams, {} calls ok ({:.0}/s) in {:.1} s; latency µs p50 {} p90 {} p99 {} max {}; gate {}",
        r["events"],
        r["sessions"],
        r["streams"],
        r["calls_ok"],
        r["calls_per_s"].as_f64().unwrap_or(0.0),
        r["seconds"].as_f64().unwrap_or(0.0),
        r["latency_us"]["p50"],
        r["latency_us"]["p90"],
        r["latency_us"]["p99"],
        r["latency_us"]["max"],
        if r["pass"] == true { "PASSED" } else { "FAILED" }
    );
    for p in r["phases"].as_array().into_iter().flatten() {
        for e in p["error_samples"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  {}: {}",
                p["name"].as_str().unwrap_or_default(),
                e.as_str().unwrap_or_default()
            );
        }
    }
    out
}

/// An SVG chart: call latency and resume latency by percentile, one line per phase.
pub(crate) fn svg(r: &Value) -> String {
    const W: f64 = 900.0;
    const H: f64 = 300.0;
    const COLORS: [&str; 7] =
        ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"];
    let panels = [("Call latency (µs)", "latency_us"), ("Resume latency (ms)", "resume_ms")];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n",
        H * 2.0 + 40.0
    );
    let phases: Vec<&Value> =
        r["phases"].as_array().map(|a| a.iter().collect()).unwrap_or_default();
    for (pi, (title, key)) in panels.iter().enumerate() {
        let top = pi as f64 * (H + 20.0) + 20.0;
        let _ = writeln!(
            out,
            "<text x=\"60\" y=\"{}\" font-size=\"13\">{title}: p50, p90, p99, max per phase (log scale)</text>",
            top - 5.0
        );
        let max =
            phases.iter().filter_map(|p| p[key]["max"].as_u64()).max().unwrap_or(1).max(10) as f64;
        let y = |v: f64| top + H - 20.0 - (v.max(1.0).log10() / max.log10()) * (H - 40.0);
        let stats = ["p50", "p90", "p99", "max"];
        let x = |i: usize| 80.0 + i as f64 * (W - 260.0) / (stats.len() - 1) as f64;
        for (i, s) in stats.iter().enumerate() {
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{s}</text>",
                x(i),
                top + H - 5.0
            );
        }
        for d in 0..=(max.log10().ceil() as u32) {
            let v = 10f64.powi(d as i32);
            let _ = writeln!(
                out,
                "<line x1=\"70\" x2=\"{}\" y1=\"{1}\" y2=\"{1}\" stroke=\"#ddd\"/><text x=\"65\" y=\"{1}\" text-anchor=\"end\">{v}</text>",
                W - 170.0,
                y(v)
            );
        }
        for (n, p) in phases.iter().enumerate() {
            if p[key]["count"].as_u64().unwrap_or(0) == 0 {
                continue;
            }
            let color = COLORS[n % COLORS.len()];
            let dash = if n >= COLORS.len() { " stroke-dasharray=\"5,3\"" } else { "" };
            let points: Vec<String> = stats
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{:.1},{:.1}", x(i), y(p[key][*s].as_f64().unwrap_or(1.0))))
                .collect();
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{color}\"{dash} stroke-width=\"1.5\" points=\"{}\"/>",
                points.join(" ")
            );
            let _ = writeln!(
                out,
                "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{}</text>",
                W - 160.0,
                top + 12.0 * n as f64 + 10.0,
                p["name"].as_str().unwrap_or_default()
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(scenarios: Vec<Scenario>) -> GateSpec {
        GateSpec {
            url: String::new(),
            token: None,
            other_token: None,
            clients: 1,
            events_per_phase: 10,
            phase_seconds: 1,
            min_events: 10,
            scenarios,
            rate: 0.2,
            mixed_rate: 0.05,
            seed: 1,
            calls_per_session: 10,
            progress: false,
            host: None,
        }
    }

    fn clean_phase(name: &str) -> Phase {
        let mut p = Phase::new(name);
        p.events = 10;
        p.sessions_closed = 1;
        p.proxy.insert("cut", 3);
        let _ = p.resume_ms.record(1_000);
        let _ = p.latency_us.record(500);
        p
    }

    fn failing(gates: &[Gate]) -> Vec<&str> {
        gates.iter().filter(|g| !g.pass).map(|g| g.name.as_str()).collect()
    }

    #[test]
    fn a_crash_phase_must_kill_keep_its_sessions_and_answer_outcome_unknown_only_after_a_kill() {
        let s = spec(vec![Scenario::Crash]);
        let ledger = json!({"duplicates": 0});
        let crash = |kills: u64, unknown: u64, not_found: u64| {
            let mut p = clean_phase("crash");
            p.proxy.clear();
            if kills > 0 {
                p.proxy.insert("crash.kills", kills);
            }
            (p.kills, p.outcome_unknown, p.not_found) = (kills, unknown, not_found);
            p
        };
        assert!(
            failing(&evaluate(&s, &[crash(3, 2, 0)], &ledger)).is_empty(),
            "outcome unknown after a kill is honest"
        );
        assert_eq!(
            failing(&evaluate(&s, &[crash(0, 0, 0)], &ledger)),
            vec!["scenario crash fired", "kills in the crash phase"]
        );
        assert_eq!(
            failing(&evaluate(&s, &[crash(2, 0, 0)], &ledger)),
            vec!["kills in the crash phase"],
            "fewer kills than the phase promises"
        );
        assert_eq!(
            failing(&evaluate(&s, &[crash(3, 0, 1)], &ledger)),
            vec!["404s in the crash phase (sessions survive a kill)"]
        );
        let mut baseline = clean_phase("baseline");
        baseline.outcome_unknown = 1;
        assert_eq!(
            failing(&evaluate(&s, &[baseline, crash(3, 0, 0)], &ledger)),
            vec!["outcome-unknown answers in phases without a kill"]
        );
    }

    #[test]
    fn a_clean_run_passes_and_each_defect_fails_its_gate() {
        let s = spec(vec![Scenario::Cut]);
        let ledger = json!({"duplicates": 0});
        assert!(failing(&evaluate(&s, &[clean_phase("cut")], &ledger)).is_empty());

        let mut p = clean_phase("cut");
        p.cross_stream = 1;
        assert_eq!(failing(&evaluate(&s, &[p], &ledger)), vec!["cross-stream acceptances"]);
        let mut p = clean_phase("cut");
        p.lost = 1;
        assert_eq!(failing(&evaluate(&s, &[p], &ledger)), vec!["lost responses"]);
        assert_eq!(
            failing(&evaluate(&s, &[clean_phase("cut")], &json!({"duplicates": 1}))),
            vec!["duplicate dispatches (client + server ledger)"]
        );
        assert_eq!(
            failing(&evaluate(&s, &[clean_phase("cut")], &Value::Null)),
            vec!["duplicate dispatches (client + server ledger)"],
            "no ledger figure is not a pass"
        );
        let mut p = clean_phase("cut");
        let _ = p.resume_ms.record_n(6_000, 10);
        assert_eq!(
            failing(&evaluate(&s, &[p], &ledger)),
            vec!["resume latency p99 (with retry wait)"]
        );
        let mut p = clean_phase("cut");
        p.proxy.clear();
        assert_eq!(
            failing(&evaluate(&s, &[p], &ledger)),
            vec!["scenario cut fired"],
            "a scenario that never fired is not a pass"
        );
    }

    #[test]
    fn the_modern_phase_runs_2026_clients_with_the_faults_that_reach_them_and_mixed_alternates_eras()
     {
        let phases = plan(&spec(vec![
            Scenario::CrossedIds,
            Scenario::Storm,
            Scenario::OldToken,
            Scenario::Modern,
        ]));
        let names: Vec<&str> = phases.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["baseline", "crossed-ids", "storm", "old-token", "modern", "mixed"]);
        let (_, rates, eras) = &phases[4];
        assert_eq!(*eras, Eras::Modern);
        let faults: Vec<Scenario> = rates.keys().copied().collect();
        assert_eq!(
            faults,
            [Scenario::Cut, Scenario::OldToken, Scenario::Storm, Scenario::Modern],
            "not crossed-ids: a stateless stream has no ids to check"
        );
        assert_eq!(phases[5].2, Eras::Alternate);
        assert_eq!((Eras::Alternate.of(0), Eras::Alternate.of(1)), (Era::Legacy, Era::Modern));
        assert!(phases[..4].iter().all(|(_, _, e)| *e == Eras::Legacy));
        let legacy_only = plan(&spec(vec![Scenario::Cut, Scenario::Storm]));
        assert!(
            legacy_only.iter().all(|(_, _, e)| *e == Eras::Legacy),
            "without `modern` every client keeps a session"
        );
        assert!(
            Eras::parse("modern").is_ok()
                && Eras::parse("mixed").is_ok()
                && Eras::parse("new").is_err()
        );
    }

    #[test]
    fn the_handles_phase_alternates_eras_with_cuts_and_the_selected_kills() {
        let with_crash = plan(&spec(vec![Scenario::Crash, Scenario::Handles]));
        let (_, rates, eras) = with_crash.iter().find(|(n, _, _)| n == "handles").unwrap();
        assert_eq!(*eras, Eras::Alternate);
        assert_eq!(
            rates.keys().copied().collect::<Vec<_>>(),
            [Scenario::Cut, Scenario::Crash, Scenario::Handles]
        );
        let alone = plan(&spec(vec![Scenario::Handles]));
        assert_eq!(
            alone[1].1.keys().copied().collect::<Vec<_>>(),
            [Scenario::Cut, Scenario::Handles],
            "no kills unless crash is selected"
        );
        // A handles phase with a lost item or a double checkout fails its gates.
        let s = spec(vec![Scenario::Handles]);
        let mut p = clean_phase("handles");
        (p.baskets, p.checkouts, p.tasks_done) = (3, 3, 1);
        let ok = json!({"duplicates": 0, "baskets": {"double_checkouts": 0}});
        assert!(
            failing(&evaluate(&s, &[p], &ok))
                .iter()
                .all(|g| !g.contains("basket") && !g.contains("checkout"))
        );
        let mut lost = clean_phase("handles");
        (lost.baskets, lost.checkouts, lost.tasks_done, lost.items_lost) = (3, 3, 1, 1);
        assert!(
            failing(&evaluate(&s, &[lost], &ok)).contains(
                &"basket items lost (a client was told an item was added; it is missing)"
            )
        );
        let mut fine = clean_phase("handles");
        (fine.baskets, fine.checkouts, fine.tasks_done) = (3, 3, 1);
        let double = json!({"duplicates": 0, "baskets": {"double_checkouts": 1}});
        assert!(
            failing(&evaluate(&s, &[fine], &double))
                .iter()
                .any(|g| g.starts_with("double checkouts"))
        );
    }

    #[test]
    fn rejection_rates_apply_only_to_selected_scenarios() {
        let ledger = json!({"duplicates": 0});
        let gates = evaluate(&spec(vec![Scenario::Cut]), &[clean_phase("cut")], &ledger);
        assert!(
            gates.iter().find(|g| g.name == "illegal Origin rejected").is_some_and(|g| g.skipped)
        );
        let mut p = clean_phase("origin-rewrite");
        p.proxy.insert("origin.rejected", 9);
        p.proxy.insert("origin.accepted", 1);
        let gates = evaluate(&spec(vec![Scenario::OriginRewrite]), &[p], &ledger);
        assert_eq!(failing(&gates), vec!["illegal Origin rejected"]);
    }

    #[test]
    fn report_renders_as_tables_and_svg() {
        let s = spec(vec![Scenario::Cut]);
        let phases = [clean_phase("baseline"), clean_phase("cut")];
        let gates = evaluate(&s, &phases, &json!({"duplicates": 0}));
        let report = json!({
            "pass": true, "events": 20, "phases": phases.iter().map(Phase::to_json).collect::<Vec<_>>(),
            "gates": gates.iter().map(|g| json!({"gate": g.name, "value": g.value, "threshold": g.threshold, "pass": g.pass, "skipped": g.skipped})).collect::<Vec<_>>(),
        });
        let table = render(&report);
        assert!(
            table.contains("| cut | 10 |") && table.contains("| lost responses | 0 | 0 | pass |"),
            "{table}"
        );
        let svg = svg(&report);
        assert_eq!(svg.matches("<polyline").count(), 2 * 2, "two panels, two phases with samples");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
