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

pub(crate) mod client;
pub(crate) mod faults;
pub(crate) mod report;
pub(crate) mod spec;
pub(crate) mod tally;
#[cfg(test)]
mod tests;
pub(crate) mod verdict;

pub(crate) use report::{render, svg};
pub(crate) use spec::GateSpec;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{Era, McpClient};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::proxy::{FaultPlan, Scenario};
use crate::run::Eras;
use std::sync::Arc;

use client::*;
use faults::*;
use spec::*;
use tally::*;
use verdict::*;

pub(crate) async fn run_phase(
    spec: &Rc<GateSpec>,
    phase_no: usize,
    name: &str,
    rates: BTreeMap<Scenario, f64>,
    eras: Eras,
) -> Result<Phase, String> {
    let (upstream, path) = crate::proxy::split_url(&spec.url)?;
    // Every node behind one balancer (the first is `spec.url`'s).
    let mut upstreams = vec![upstream];
    for n in spec.nodes.iter().skip(1) {
        let url = n.lock().url().to_owned();
        upstreams.push(crate::proxy::split_url(&url)?.0);
    }
    let crash = rates.contains_key(&Scenario::Crash);
    let sigterm = rates.contains_key(&Scenario::Sigterm);
    let rollout = rates.contains_key(&Scenario::Rollout);
    let node_loss = rates.contains_key(&Scenario::NodeLoss);
    let partition = rates.contains_key(&Scenario::Partition);
    // Only the read-only calls of the mix may be served as another principal (see FaultPlan).
    let read_only = vec!["echo".to_owned(), "test_tool_with_progress".to_owned()];
    let plan = FaultPlan {
        rates,
        seed: spec.seed.wrapping_add(phase_no as u64),
        other_token: spec.other_token.clone(),
        limit: None,
        token_rewrite_modern_tools: read_only,
        session_ttl: spec
            .host
            .is_some()
            .then(|| std::time::Duration::from_secs(spec::GATE_SESSION_TTL_SECS)),
    };
    let (addr, proxy) =
        crate::proxy::start(upstreams, plan).await.map_err(|e| format!("proxy: {e}"))?;
    let url: Rc<str> = format!("http://{addr}{path}").into();
    let phase = Rc::new(RefCell::new(Phase::new(name)));
    let before = host_metrics(spec).await;
    {
        let mut p = phase.borrow_mut();
        (p.crash, p.sigterm, p.rollout) = (crash, sigterm, rollout);
        (p.node_loss, p.partition) = (node_loss, partition);
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
    // On several nodes the faults of one phase take turns so that one node always serves (a
    // balancer with no node to send to is not what the gate measures).
    let outages = Outages::new(spec.nodes.len());
    for (on, how) in [(node_loss, NodeFault::Loss), (partition, NodeFault::Partition)] {
        if !on {
            continue;
        }
        if spec.nodes.len() < 2 {
            return Err(format!("phase {name} needs --nodes 2 or more"));
        }
        killers.push(actix_rt::spawn(nodes_now_and_then(
            spec.nodes.clone(),
            seed,
            Rc::clone(&stop),
            Rc::clone(&phase),
            how,
            outages.clone(),
        )));
    }
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
                outages.clone(),
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
    let mut panicked = 0;
    for t in tasks {
        if t.await.is_err_and(|e| e.is_panic()) {
            panicked += 1;
        }
    }
    stop.set(true);
    for k in killers {
        k.await.map_err(|e| format!("{name} task: {e}"))??;
    }
    let after = host_metrics(spec).await;
    let mut p = Rc::try_unwrap(phase).map_err(|_| "phase still shared")?.into_inner();
    p.host_after = after;
    p.clients_panicked = panicked;
    p.seconds = start.elapsed().as_secs_f64();
    p.proxy = proxy.counts();
    for (name, n) in [
        ("crash.kills", p.kills),
        ("sigterm.restarts", p.restarts),
        ("rollout.flips", p.flips),
        ("handles.baskets", p.baskets),
        ("node_loss.nodes", p.nodes_lost),
        ("partition.nodes", p.partitions),
    ] {
        if n > 0 {
            p.proxy.insert(name, n);
        }
    }
    (p.reconnect_peak_session, p.reconnect_peak_all) = proxy.reconnect_peaks();
    Ok(p)
}

/// The spawned host's metrics now (empty without one, or when the scrape fails).
pub(crate) async fn host_metrics(spec: &GateSpec) -> BTreeMap<String, f64> {
    let Some(host) = spec.host.clone() else { return BTreeMap::new() };
    tokio::task::spawn_blocking(move || host.lock().admin().and_then(|a| a.scrape().ok()))
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

pub(crate) async fn ledger_stats(spec: &GateSpec) -> Value {
    stats_of(spec, "ledger_stats").await
}

/// The `structuredContent` of a stats tool of the server.
pub(crate) async fn stats_of(spec: &GateSpec, tool: &str) -> Value {
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
pub(crate) fn plan(spec: &GateSpec) -> Vec<(String, BTreeMap<Scenario, f64>, Eras)> {
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
    if spec.nodes.len() > 1 {
        // Each node counts what it applied and what its journal held when it started: the
        // first one, started again, reads every node's lines (one shared journal), so a key
        // applied on two nodes counts as a duplicate.
        let first = Arc::clone(&spec.nodes[0]);
        tokio::task::spawn_blocking(move || first.lock().terminate_and_restart())
            .await
            .map_err(|e| format!("restart of the first node: {e}"))??;
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
