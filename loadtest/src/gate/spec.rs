//! What a gate run is given ([`GateSpec`]) and its fixed numbers.

use crate::proxy::Scenario;
use crate::run::SpawnedHost;
use parking_lot::Mutex;
use std::sync::Arc;

/// Settings of a gate run.
#[derive(Debug, Clone)]
pub(crate) struct GateSpec {
    pub(crate) url: String,
    pub(crate) token: Option<mcp_runtime::client_http::BearerToken>,
    pub(crate) other_token: Option<mcp_runtime::client_http::BearerToken>,
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
    /// The resume-latency gate (ms; `--resume-p99-limit-ms`).
    pub(crate) resume_p99_limit_ms: u64,
    pub(crate) progress: bool,
    /// The host the gate spawned (the `crash` scenario kills and restarts it): the first of
    /// `nodes`.
    pub(crate) host: Option<Arc<Mutex<SpawnedHost>>>,
    /// Every host the gate spawned (`--nodes`: several on one shared Redis ledger, behind the
    /// proxy's round robin; `node-loss` and `partition` act on them in turn).
    pub(crate) nodes: Vec<Arc<Mutex<SpawnedHost>>>,
}

/// The idle session TTL of the hosts the gate spawns (`--session-ttl-secs`): short, so the
/// sessions `old-token` makes clients abandon expire within a phase.
pub(crate) const GATE_SESSION_TTL_SECS: u64 = 10;

/// The text of the receipts' answer to a retry of a call a kill interrupted.
pub(crate) const OUTCOME_UNKNOWN: &str = "may or may not have taken effect";
/// When the `crash` scenario kills the host: after a pause drawn from this range (ms).
pub(crate) const KILL_PAUSE_MS: (u64, u64) = (3_000, 6_000);
/// A `crash` phase does not end on its event count before this many kills.
pub(crate) const KILLS_PER_PHASE: u64 = 3;
/// When the `sigterm` scenario stops the host: after a pause drawn from this range (ms).
pub(crate) const TERM_PAUSE_MS: (u64, u64) = (2_000, 4_000);
/// A `sigterm` phase does not end on its event count before this many graceful restarts.
pub(crate) const RESTARTS_PER_PHASE: u64 = 2;
/// How long the `rollout` scenario keeps each flag setting (ms).
pub(crate) const FLIP_EVERY_MS: u64 = 1_200;
/// The `rollout` scenario's cycle: `(resumable, share)` settings, then a rollback.
pub(crate) const ROLLOUT_CYCLE: [(&str, f64); 4] =
    [("off", 1.0), ("shadow", 1.0), ("on", 0.5), ("on", 1.0)];
/// A `rollout` phase does not end on its event count before one whole cycle and its rollback.
pub(crate) const FLIPS_PER_PHASE: u64 = ROLLOUT_CYCLE.len() as u64 + 1;

/// When the `node-loss` scenario kills a node: after a pause drawn from this range (ms).
pub(crate) const NODE_LOSS_PAUSE_MS: (u64, u64) = (3_000, 6_000);
/// How long a lost node stays down before it is started again (ms).
pub(crate) const NODE_DOWN_MS: u64 = 1_000;
/// A `node-loss` phase does not end on its event count before this many node losses.
pub(crate) const NODE_LOSSES_PER_PHASE: u64 = 3;
/// The lease of the gate's nodes on their shared ledger (`ledger.redis_lease_ms`): a
/// `partition` pauses a node past it.
pub(crate) const NODE_LEASE_MS: u64 = 1_500;
/// When the `partition` scenario pauses a node: after a pause drawn from this range (ms).
pub(crate) const PARTITION_PAUSE_MS: (u64, u64) = (4_000, 7_000);
/// A `partition` phase does not end on its event count before this many partitions.
pub(crate) const PARTITIONS_PER_PHASE: u64 = 2;

/// Reconnect budget the virtual clients run with (the client defaults).
pub(crate) const BUDGET_BURST: u32 = 20;
pub(crate) const BUDGET_PER_SECOND: f64 = 10.0;
/// Recovery gate from the design: resume p99 under 5 s.
pub(crate) const RESUME_P99_LIMIT_MS: u64 = 5_000;
