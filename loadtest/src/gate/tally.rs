//! One phase's figures ([`Phase`]), counted by the virtual clients.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use mcp_runtime::client_http::ClientStats;
use serde_json::{Value, json};

use crate::run::Eras;

use super::spec::*;

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// What one phase measured.
pub(crate) struct Phase {
    pub(crate) name: String,
    pub(crate) seconds: f64,
    pub(crate) events: u64,
    pub(crate) sessions: u64,
    pub(crate) streams: u64,
    pub(crate) calls_ok: u64,
    /// Calls the server refused because the proxy made them illegal (401/403).
    pub(crate) refused: u64,
    pub(crate) lost: u64,
    pub(crate) cross_stream: u64,
    pub(crate) duplicate_dispatches: u64,
    pub(crate) not_found: u64,
    pub(crate) recovered_after_404: u64,
    pub(crate) resumes: u64,
    pub(crate) budget_waits: u64,
    pub(crate) reissued: u64,
    pub(crate) refused_events: u64,
    pub(crate) duplicate_events_dropped: u64,
    pub(crate) sessions_closed: u64,
    pub(crate) sessions_not_closed: u64,
    pub(crate) close_refused: u64,
    pub(crate) connect_failures: u64,
    /// Virtual clients whose task panicked (a client defect: what it would have counted is
    /// unknown).
    pub(crate) clients_panicked: u64,
    pub(crate) latency_us: Histogram<u64>,
    pub(crate) resume_ms: Histogram<u64>,
    pub(crate) resume_unwaited_ms: Histogram<u64>,
    pub(crate) proxy: BTreeMap<&'static str, u64>,
    pub(crate) reconnect_peak_session: u64,
    pub(crate) reconnect_peak_all: u64,
    /// Ledger calls answered "outcome unknown" (interrupted by a kill).
    pub(crate) outcome_unknown: u64,
    /// Kills of the host (`crash`), and how long each restart took.
    pub(crate) crash: bool,
    pub(crate) kills: u64,
    pub(crate) restart_ms: Histogram<u64>,
    /// Graceful restarts of the host (`sigterm`), and those that did not exit 0.
    pub(crate) sigterm: bool,
    pub(crate) restarts: u64,
    pub(crate) unclean_exits: u64,
    /// Flag changes through the admin API (`rollout`).
    pub(crate) rollout: bool,
    pub(crate) flips: u64,
    /// Nodes killed and started again (`node-loss`), nodes paused past their lease that
    /// exited and were started again (`partition`), and paused nodes that did not exit 3.
    pub(crate) node_loss: bool,
    pub(crate) nodes_lost: u64,
    pub(crate) partition: bool,
    pub(crate) partitions: u64,
    pub(crate) partition_unexpected: u64,
    /// The host's own metrics before and after the phase (a host the gate spawned).
    pub(crate) host_before: BTreeMap<String, f64>,
    pub(crate) host_after: BTreeMap<String, f64>,
    pub(crate) errors: Vec<String>,
    /// Which era the phase's clients speak.
    pub(crate) eras: Eras,
    /// Calls of 2026-07-28 clients answered with their own result.
    pub(crate) modern_calls: u64,
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
    pub(crate) fn new(name: &str) -> Phase {
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
            clients_panicked: 0,
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
            node_loss: false,
            nodes_lost: 0,
            partition: false,
            partitions: 0,
            partition_unexpected: 0,
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
    pub(crate) fn host_delta(&self, name: &str) -> f64 {
        crate::admin::total(&self.host_after, name) - crate::admin::total(&self.host_before, name)
    }

    /// The phase's own restarts or flips are not all done yet.
    pub(crate) fn owes_faults(&self) -> bool {
        (self.crash && self.kills < KILLS_PER_PHASE)
            || (self.sigterm && self.restarts < RESTARTS_PER_PHASE)
            || (self.rollout && self.flips < FLIPS_PER_PHASE)
            || (self.node_loss && self.nodes_lost < NODE_LOSSES_PER_PHASE)
            || (self.partition && self.partitions < PARTITIONS_PER_PHASE)
    }

    pub(crate) fn add_client_stats(&mut self, s: &ClientStats) {
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

    pub(crate) fn count(&self, name: &str) -> u64 {
        self.proxy.get(name).copied().unwrap_or(0)
    }

    pub(crate) fn to_json(&self) -> Value {
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
            "nodes_lost": self.nodes_lost, "partitions": self.partitions, "partition_unexpected": self.partition_unexpected,
            "host_metrics": {"before": self.host_before, "after": self.host_after},
            "eras": format!("{:?}", self.eras).to_lowercase(), "modern_calls": self.modern_calls,
        });
        // Set apart: the object above is at `json!`'s recursion limit.
        v["clients_panicked"] = json!(self.clients_panicked);
        v["handles"] = json!({
            "baskets": self.baskets, "items_lost": self.items_lost, "items_doubled": self.items_doubled,
            "checkouts": self.checkouts, "checkout_order_mismatches": self.order_mismatches,
            "tasks_done": self.tasks_done, "tasks_interrupted": self.tasks_interrupted,
        });
        v
    }
}
