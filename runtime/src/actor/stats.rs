//! Process-wide counters and gauges, kept as plain atomics by the actors and read as one
//! [`StatsSnapshot`] (for `mcp-host --stats-every-ms`, and the metrics endpoint to come).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use serde::Serialize;

use crate::proto::error::Rejection;
use crate::proto::stream::StreamStats;

/// Counters shared by every actor of a supervisor.
#[derive(Debug)]
pub struct RuntimeStats {
    requests: AtomicU64,
    connections: AtomicI64,
    streams_live: AtomicI64,
    refused: [AtomicU64; Rejection::CAUSES.len()],
    client_requests_timed_out: AtomicU64,
    requests_ended_by_gap: AtomicU64,
    streams_evicted: AtomicU64,
    sessions_revived: AtomicU64,
    sessions_parked: AtomicU64,
    sessions_evicted_from_ledger: AtomicU64,
    events: AtomicU64,
    resumes: AtomicU64,
    gaps: AtomicU64,
    budget_trimmed: AtomicU64,
}

impl Default for RuntimeStats {
    fn default() -> RuntimeStats {
        RuntimeStats {
            requests: AtomicU64::new(0),
            connections: AtomicI64::new(0),
            streams_live: AtomicI64::new(0),
            refused: std::array::from_fn(|_| AtomicU64::new(0)),
            client_requests_timed_out: AtomicU64::new(0),
            requests_ended_by_gap: AtomicU64::new(0),
            streams_evicted: AtomicU64::new(0),
            sessions_revived: AtomicU64::new(0),
            sessions_parked: AtomicU64::new(0),
            sessions_evicted_from_ledger: AtomicU64::new(0),
            events: AtomicU64::new(0),
            resumes: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            budget_trimmed: AtomicU64::new(0),
        }
    }
}

fn add(c: &AtomicU64, n: u64) {
    if n > 0 {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

impl RuntimeStats {
    /// An HTTP request reached the endpoint.
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// A TCP connection opened; the guard counts it closed when dropped (the host keeps it in
    /// the connection's data, which actix drops with the connection).
    #[must_use]
    pub fn connection(self: &Arc<Self>) -> ConnectionGuard {
        self.connections.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(Arc::clone(self))
    }

    pub(crate) fn stream_started(&self) {
        self.streams_live.fetch_add(1, Ordering::Relaxed);
    }

    /// A stream actor stopped: its gauge drops and its counters are added.
    pub(crate) fn stream_stopped(&self, s: &StreamStats) {
        self.streams_live.fetch_sub(1, Ordering::Relaxed);
        add(&self.events, s.events);
        add(&self.resumes, s.resumes);
        add(&self.gaps, s.gaps);
    }

    pub(crate) fn budget_trimmed(&self, n: usize) {
        add(&self.budget_trimmed, n as u64);
    }

    /// A request was refused (counted once, at the HTTP mapping point).
    pub fn refused(&self, r: &Rejection) {
        if let Some(i) = Rejection::CAUSES.iter().position(|c| *c == r.cause()) {
            add(&self.refused[i], 1);
        }
    }

    pub(crate) fn client_requests_timed_out(&self, n: usize) {
        add(&self.client_requests_timed_out, n as u64);
    }

    pub(crate) fn request_ended_by_gap(&self) {
        add(&self.requests_ended_by_gap, 1);
    }

    pub(crate) fn streams_evicted(&self, n: usize) {
        add(&self.streams_evicted, n as u64);
    }

    /// A session was rebuilt from the ledger (after a restart, or from parking).
    pub(crate) fn session_revived(&self) {
        add(&self.sessions_revived, 1);
    }

    /// `n` sessions were evicted from a full ledger.
    pub(crate) fn sessions_evicted_from_ledger(&self, n: u64) {
        add(&self.sessions_evicted_from_ledger, n);
    }

    /// A session was parked (its state left in the ledger only).
    pub(crate) fn session_parked(&self) {
        add(&self.sessions_parked, 1);
    }

    /// Stream actors alive now.
    #[must_use]
    pub fn streams_live(&self) -> i64 {
        self.streams_live.load(Ordering::Relaxed)
    }

    /// Refusals of one cause so far.
    #[must_use]
    pub fn refusals(&self, cause: &str) -> u64 {
        Rejection::CAUSES.iter().position(|c| *c == cause).map_or(0, |i| self.refused[i].load(Ordering::Relaxed))
    }
}

/// Counts one open TCP connection; see [`RuntimeStats::connection`].
#[derive(Debug)]
pub struct ConnectionGuard(Arc<RuntimeStats>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A point-in-time copy of the supervisor's figures.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// HTTP requests that reached the endpoint.
    pub requests: u64,
    /// TCP connections open (when the host counts them).
    pub connections: i64,
    /// Live sessions (including reservations being set up).
    pub sessions: usize,
    /// Stream actors alive (open, and closed but retained).
    pub streams: i64,
    /// Bytes charged to the stream memory budget.
    pub stream_memory_bytes: usize,
    /// Refusals by cause (only causes seen).
    pub refused: BTreeMap<&'static str, u64>,
    /// Server-to-client requests given up at their deadline.
    pub client_requests_timed_out: u64,
    /// Requests ended because a resume found their events lost.
    pub requests_ended_by_gap: u64,
    /// Closed streams evicted by `max_retained_streams` / `max_retained_bytes`.
    pub streams_evicted: u64,
    /// Sessions rebuilt from the ledger (after a restart, or from parking).
    pub sessions_revived: u64,
    /// Sessions parked (idle for `sessions.park_after_secs`).
    pub sessions_parked: u64,
    /// Parked (or recorded, not live) sessions evicted because the ledger held
    /// `ledger.max_sessions`.
    pub sessions_evicted_from_ledger: u64,
    /// The ledger writer's counters.
    pub ledger: crate::ledger::WriterSnapshot,
    /// Events appended by streams that have stopped.
    pub events: u64,
    /// Resumes served by streams that have stopped.
    pub resumes: u64,
    /// Resumes that found a gap, on streams that have stopped.
    pub gaps: u64,
    /// Events trimmed from windows to respect the stream memory budget.
    pub budget_trimmed: u64,
}

impl RuntimeStats {
    /// Copy every figure; `sessions`, `stream_memory_bytes` and `ledger` come from their owners.
    #[must_use]
    pub fn snapshot(&self, sessions: usize, stream_memory_bytes: usize, ledger: crate::ledger::WriterSnapshot) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            requests: get(&self.requests),
            connections: self.connections.load(Ordering::Relaxed),
            sessions,
            streams: self.streams_live(),
            stream_memory_bytes,
            refused: Rejection::CAUSES.iter().zip(&self.refused).filter(|(_, n)| get(n) > 0).map(|(c, n)| (*c, get(n))).collect(),
            client_requests_timed_out: get(&self.client_requests_timed_out),
            requests_ended_by_gap: get(&self.requests_ended_by_gap),
            streams_evicted: get(&self.streams_evicted),
            sessions_revived: get(&self.sessions_revived),
            sessions_parked: get(&self.sessions_parked),
            sessions_evicted_from_ledger: get(&self.sessions_evicted_from_ledger),
            ledger,
            events: get(&self.events),
            resumes: get(&self.resumes),
            gaps: get(&self.gaps),
            budget_trimmed: get(&self.budget_trimmed),
        }
    }
}
