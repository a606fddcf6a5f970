//! The gate's virtual clients: their calls, their checks, their sessions.

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;
use std::time::Duration;

use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{ClientConfig, ClientError, Closed, Era, McpClient};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::proxy::Scenario;

use super::spec::*;
use super::tally::*;

/// One call kind of the gate mix.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Echo,
    Ledger,
    Progress,
}

pub(crate) fn call_params(kind: Kind, nonce: &str) -> Value {
    match kind {
        Kind::Echo => json!({"name": "echo", "arguments": {"text": nonce}}),
        Kind::Ledger => json!({"name": "ledger_append", "arguments": {"key": nonce}}),
        Kind::Progress => {
            json!({"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": nonce}})
        }
    }
}

/// The scenarios that reach a 2026-07-28 request (the `modern` phase applies those selected).
pub(crate) const MODERN_FAULTS: [Scenario; 6] = [
    Scenario::Cut,
    Scenario::Storm,
    Scenario::OriginRewrite,
    Scenario::OldToken,
    Scenario::Crash,
    Scenario::Sigterm,
];

pub(crate) fn client_config(spec: &GateSpec, url: &str, era: Era) -> ClientConfig {
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
pub(crate) async fn virtual_client(
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
