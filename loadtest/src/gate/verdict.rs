//! The gates: each figure against its threshold.

use serde_json::Value;

use crate::proxy::Scenario;

use super::spec::*;
use super::tally::*;

/// Scenarios that act on resumes: their phase also cuts streams, or nothing would resume.
pub(crate) fn carried_by_cuts(s: Scenario) -> bool {
    matches!(
        s,
        Scenario::ForeignCursor | Scenario::Storm | Scenario::ReplayAfterAck | Scenario::Rollout
    )
}

/// The counter that shows a scenario really fired in its phase.
pub(crate) fn evidence(s: Scenario) -> &'static [&'static str] {
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
        Scenario::NodeLoss => &["node_loss.nodes"],
        Scenario::Partition => &["partition.nodes"],
    }
}

pub(crate) struct Gate {
    pub(crate) name: String,
    pub(crate) value: String,
    pub(crate) threshold: String,
    pub(crate) pass: bool,
    /// Not applicable: the scenarios that exercise it were not selected.
    pub(crate) skipped: bool,
}

impl Gate {
    pub(crate) fn new(
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

pub(crate) fn rate_gate(name: &str, good: u64, total: u64) -> Gate {
    let value = if total == 0 {
        "n/a (none sent)".into()
    } else {
        format!("{:.2} % ({good}/{total})", 100.0 * good as f64 / total as f64)
    };
    Gate::new(name, value, "100 %", total > 0 && good == total)
}

/// A rate gate that applies only when one of `needs` was selected.
pub(crate) fn rate_gate_if(
    spec: &GateSpec,
    needs: &[Scenario],
    name: &str,
    good: u64,
    total: u64,
) -> Gate {
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

pub(crate) fn zero_gate(name: &str, v: u64) -> Gate {
    Gate::new(name, v.to_string(), "0", v == 0)
}

pub(crate) fn evaluate(spec: &GateSpec, phases: &[Phase], ledger: &Value) -> Vec<Gate> {
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
    gates.push(zero_gate("virtual clients that panicked", sum(&|p| p.clients_panicked)));
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
    for (s, owed, what) in [
        (Scenario::NodeLoss, NODE_LOSSES_PER_PHASE, "nodes killed and started again"),
        (Scenario::Partition, PARTITIONS_PER_PHASE, "nodes paused past their lease"),
    ] {
        if !spec.scenarios.contains(&s) {
            continue;
        }
        let of = || phases.iter().filter(|p| p.name == s.name());
        // Counted by the proxy: every 404 to a request of a session, but a DELETE sent again
        // (its first answer lost with a node) and a session left unanswered for about the idle
        // TTL (a request stuck on a paused node was never recorded as a use): they expired.
        gates.push(zero_gate(
            &format!(
                "404s in the {} phase (another node serves every session; expiries after the idle TTL apart)",
                s.name()
            ),
            of().map(|p| p.count(crate::proxy::NOT_FOUND_UNEXPLAINED)).sum(),
        ));
        let done = of().map(|p| p.nodes_lost + p.partitions).min().unwrap_or(0);
        gates.push(Gate::new(
            format!("{what} in the {} phase", s.name()),
            done.to_string(),
            format!(">= {owed}"),
            done >= owed,
        ));
    }
    if spec.scenarios.contains(&Scenario::ExpiryRace) {
        gates.push(zero_gate(
            "expiry-race DELETEs no host answered within 30 s",
            count(crate::proxy::EXPIRY_RACE_UNANSWERED),
        ));
    }
    if spec.scenarios.contains(&Scenario::Partition) {
        gates.push(zero_gate(
            "paused nodes that did not exit 3 once continued",
            sum(&|p| p.partition_unexpected),
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
        sum(&|p| {
            if p.kills == 0 && p.nodes_lost == 0 && p.partitions == 0 {
                p.outcome_unknown
            } else {
                0
            }
        }),
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
    // A resume the proxy left alone that is refused as not this session's: the client sent a
    // cursor it was not given on that stream, or the host refused one it issued. An idempotent
    // call recovers by running again, so only this count shows it.
    gates.push(zero_gate(
        "resumes refused (400) whose cursor the proxy left alone",
        count("resume.refused_unexplained"),
    ));
    let mut resume = histogram();
    for p in phases {
        resume.add(&p.resume_ms).expect("same bounds");
    }
    gates.push(Gate::new(
        "resume latency p99 (with retry wait)",
        format!("{} ms", resume.value_at_quantile(0.99)),
        format!("< {} ms", spec.resume_p99_limit_ms),
        resume.value_at_quantile(0.99) < spec.resume_p99_limit_ms,
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
