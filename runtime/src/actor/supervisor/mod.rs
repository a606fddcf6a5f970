//! The supervisor: one per process, shared behind an `Arc` (not an actor). Owns the
//! generations, the session registry, the limits and quotas, the stream memory budget, the
//! counters, the stores and the lifecycle phase. This file holds its state and construction;
//! the jobs are apart:
//!
//! - `admission.rs`: the tool-call door, recorded streams, whether the ledger takes work;
//! - `sessions.rs`: lookup, creation, the session actor's start, revive, settling;
//! - `lifecycle.rs`: the published phase, reload and rollback, stop request, drain and waits;
//! - `rate.rs`: the per-caller rate of new sessions;
//! - `revive.rs`: what a revive reads, one revive per session at a time, the ledger's cap;
//! - `bus.rs`: what the other hosts sharing the ledger tell (sessions they ended, clients'
//!   answers and cancellations, the catalog's announcements).

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::budget::MemoryBudget;
use super::durable::LedgerCtx;
use super::generations::{GenOrigin, GenSettings, Generations};
use super::registry::Registry;
use super::session::SessionHandle;
use super::stream::StreamEnv;
use crate::config::RuntimeConfig;
use crate::ledger::Ledger;
use crate::proto::admission::AdmitPolicy;
use crate::proto::error::Rejection;
use crate::proto::event_id::CursorKey;
use crate::proto::ids::{Generation, SessionId, Tick};
use crate::stats::{RuntimeStats, StatsSnapshot};
use crate::stores::receipts::Receipts;
use crate::tools::Catalog;

mod admission;
mod bus;
mod lifecycle;
mod quotas;
mod rate;
mod revive;
mod sessions;

pub(crate) use super::env::{Settle, ToolDoor};
pub use super::lifecycle::{Lifecycle, Phase};
use rate::RateLimiter;
use revive::{LedgerCap, ReviveLocks, SettlingMap};

/// Process-wide owner of sessions.
pub struct Supervisor {
    /// Seal 2026-07-28 `requestState` values (derived from the ledger's key once): the
    /// current key first (it seals), then the previous keys' (they still open).
    state_keys: Vec<[u8; 32]>,
    /// 2026-07-28 results encoded once (the fixed ones whole, the tails of the others).
    modern_results: crate::proto::stateless::ModernResults,
    /// Tasks (the 2026-07-28 tasks extension), recorded in the ledger.
    tasks: Arc<crate::stores::tasks::Tasks>,
    cfg: Arc<RuntimeConfig>,
    admit: AdmitPolicy,
    /// The OAuth resource server (`[auth.oauth]`).
    oauth: Option<Arc<crate::auth::OAuth>>,
    catalog: Arc<Catalog>,
    registry: Arc<Registry<SessionHandle>>,
    rate: RateLimiter,
    /// Refused OAuth tokens per client address.
    auth_failures: RateLimiter,
    /// Each caller's sessions across the hosts of a shared ledger.
    caller_sessions: Arc<Mutex<quotas::CallerCounts>>,
    /// Each caller's new sessions in the last second across the hosts of a shared ledger
    /// (`quotas.session_rate_per_sec`; [`quotas`]).
    caller_rate: Arc<Mutex<quotas::CallerRates>>,
    /// Shared with hibernating sessions, which derive their cursor signer from it again as
    /// they wake instead of keeping it.
    key: Arc<CursorKey>,
    /// The generations with something alive, the current one last.
    gens: Arc<Generations>,
    stream_env: Arc<StreamEnv>,
    /// The lifecycle, published: read (without a lock) by the front door on every request
    /// and by the host's shutdown sequence; control travels ahead of data, since a request
    /// already queued for a session sees the new phase when it is handled.
    lifecycle: tokio::sync::watch::Sender<Lifecycle>,
    /// Asked to stop (`POST /admin/drain`): the host runs its shutdown sequence.
    stop_requested: tokio::sync::Notify,
    /// One revive at a time per shard of session HMACs (two requests of one session that
    /// arrive together after a restart make one actor, not two).
    revive_locks: Arc<ReviveLocks>,
    /// Sessions that ended (DELETE, expiry) whose final record is not committed yet: a revive
    /// must not read the record they are about to overwrite. Held for one insert or lookup,
    /// also under a registry shard's lock (a DELETE of a sleeping session counts it before it
    /// leaves the table), so never held while a shard's lock is taken. Counted: a session may
    /// settle twice before the first writes are in.
    settling: Arc<Mutex<SettlingMap>>,
    /// Idempotency receipts of write-tool calls.
    receipts: Arc<Receipts>,
    /// State handles (also attached to the catalog, for the tools).
    handles: Arc<crate::stores::handles::Handles>,
    /// The sweeper that wakes hibernating sessions at their deadlines runs (started by the
    /// first hibernation, on the System's arbiter; cleared when it ends).
    sleep_sweeper: Arc<std::sync::atomic::AtomicBool>,
    /// Itself, for the tasks it starts (they must not keep it alive); set once made.
    me: std::sync::OnceLock<std::sync::Weak<Supervisor>>,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // Hibernating sessions hold nothing of it (a weak link), so it can go: they go too,
        // with nothing left to wake them.
        // (The sweeper holds it weakly: it ends at its next round.)
        self.registry.drop_sleepers();
    }
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("lifecycle", &*self.lifecycle.borrow())
            .field("sessions", &self.registry.len())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor serving at once on a memory ledger (in-process servers and tests;
    /// whatever `cfg.ledger` says). `cfg` should have passed
    /// [`RuntimeConfig::validate`].
    #[must_use]
    pub fn new(cfg: RuntimeConfig, catalog: Catalog) -> Arc<Supervisor> {
        let ledger = Ledger::memory(&cfg);
        let sup = Supervisor::with_ledger(cfg, catalog, ledger);
        sup.start_serving();
        sup
    }

    /// A supervisor on an open ledger ([`Ledger::open`]), in phase `starting` (every request
    /// gets 503) until [`Supervisor::start_serving`]: sessions and streams recorded there by
    /// an earlier process are revived on first use.
    #[must_use]
    pub fn with_ledger(cfg: RuntimeConfig, catalog: Catalog, ledger: Ledger) -> Arc<Supervisor> {
        let now_ms = ledger.clock.now().0;
        // Numbered above every generation an earlier process on this ledger started.
        let generation =
            Generation(cfg.sessions.generation.max(ledger.last_generation().saturating_add(1)));
        ledger.record_generation(generation.0);
        let stats = Arc::new(RuntimeStats::default());
        let gens = Arc::new(Generations::with_quiet(
            GenSettings {
                id: generation,
                ..GenSettings::from_config(&cfg, ledger.key_id(), GenOrigin::Start, now_ms)
            },
            Arc::clone(&stats.quiet),
        ));
        let stream_ttl_ms = cfg.idle_ttl_ms().saturating_add(cfg.sessions.retention_undelivered_ms);
        let cursor_secret = |s: &[u8]| crate::ledger::derive_key(s, "mcp-host cursor v1");
        let previous: Vec<[u8; 32]> = ledger.previous.iter().map(|s| cursor_secret(s)).collect();
        let cursor_key = CursorKey::rotated(
            &cursor_secret(&ledger.secret),
            &previous.iter().map(|k| &k[..]).collect::<Vec<_>>(),
        );
        let clock = ledger.clock;
        let ledger_cx = Arc::new(LedgerCtx::new(ledger, cfg.idle_ttl_ms(), stream_ttl_ms));
        let l = &cfg.ledger;
        let receipt_limits = crate::proto::usage::UsageLimits {
            per_caller_count: l.receipts_per_caller,
            per_caller_bytes: l.receipt_bytes_per_caller,
            total_bytes: l.receipt_bytes_total,
        };
        let receipts = Arc::new(Receipts::new(
            ledger_cx.ledger.clone(),
            l.receipt_retention_secs.saturating_mul(1000),
            l.receipt_max_bytes,
            receipt_limits,
            Arc::clone(&stats),
        ));
        let stream_env = Arc::new(StreamEnv {
            timing: crate::proto::stream::StreamTiming {
                keepalive_ms: cfg.sse.keepalive_ms,
                retention_after_delivery_ms: cfg.sessions.retention_after_delivery_ms,
                retention_undelivered_ms: cfg.sessions.retention_undelivered_ms,
            },
            write_queue_frames: cfg.sse.write_queue_frames,
            budget: MemoryBudget::new(cfg.limits.stream_memory_bytes),
            stats,
            watch: super::watch::Watch::new(Arc::clone(ledger_cx.writer.store())),
            ledger: ledger_cx,
            clock,
            followers: Arc::new(tokio::sync::Semaphore::new(super::follow::FOLLOWERS_MAX)),
        });
        let q = &cfg.quotas;
        let registry = Arc::new(Registry::with_quiet(Arc::clone(&stream_env.stats.quiet)));
        let settling: Arc<Mutex<SettlingMap>> = Arc::default();
        let revive_locks =
            Arc::new(ReviveLocks((0..16).map(|_| tokio::sync::Mutex::new(())).collect()));
        let cap = LedgerCap {
            max: cfg.ledger.max_sessions,
            shared: stream_env.ledger.ledger.shared,
            idle_ttl_ms: cfg.idle_ttl_ms(),
            registry: Arc::clone(&registry),
            revive_locks: Arc::clone(&revive_locks),
            settling: Arc::clone(&settling),
            stats: Arc::clone(&stream_env.stats),
        };
        stream_env.ledger.writer.set_housekeeping(Box::new(move |store, now| cap.run(store, now)));
        let modern_results = modern_results(&cfg, &catalog);
        let handle_limits = crate::proto::usage::UsageLimits {
            per_caller_count: u64::MAX,
            per_caller_bytes: cfg.ledger.handle_bytes_per_caller,
            total_bytes: cfg.ledger.handle_bytes_total,
        };
        let handles = Arc::new(crate::stores::handles::Handles::bounded(
            &stream_env.ledger.ledger,
            handle_limits.per_caller_bytes,
            handle_limits.total_bytes,
        ));
        catalog.attach_handles(Arc::clone(&handles));
        let t = &cfg.tasks;
        let tasks = Arc::new(crate::stores::tasks::Tasks::new(
            &stream_env.ledger.ledger,
            crate::stores::tasks::TaskSettings {
                ttl_ms: t.ttl_secs.saturating_mul(1000),
                poll_ms: t.poll_interval_ms,
                max_per_caller: t.max_per_caller,
                max_kept_per_caller: t.max_kept_per_caller,
                max_result_bytes: t.max_result_bytes,
                bytes_per_caller: t.bytes_per_caller,
                bytes_total: t.bytes_total,
            },
        ));
        let sup = Arc::new(Supervisor {
            me: std::sync::OnceLock::new(),
            state_keys: stream_env.ledger.ledger.derive_rotated("mcp-host requestState v1"),
            modern_results,
            tasks,
            key: Arc::new(cursor_key),
            admit: cfg.admit_policy(),
            oauth: crate::auth::OAuth::from_config(&cfg, clock),
            caller_sessions: Arc::default(),
            caller_rate: Arc::default(),
            auth_failures: RateLimiter::new(
                cfg.auth.oauth.failures_burst,
                cfg.auth.oauth.failures_per_sec,
                cfg.sessions.max_sessions.max(1024),
            )
            .with_cause(crate::proto::error::Quota::AuthFailures),
            rate: RateLimiter::new(
                q.session_burst,
                q.session_rate_per_sec,
                cfg.sessions.max_sessions.max(1024),
            ),
            catalog: Arc::new(catalog),
            registry,
            gens,
            stream_env,
            lifecycle: tokio::sync::watch::Sender::new(Lifecycle {
                phase: Phase::Starting,
                generation,
                since_ms: now_ms,
            }),
            stop_requested: tokio::sync::Notify::new(),
            revive_locks,
            settling,
            receipts,
            handles,
            sleep_sweeper: Arc::default(),
            cfg: Arc::new(cfg),
        });
        sup.me.set(Arc::downgrade(&sup)).expect("set once, here");
        sup.hear_ends();
        sup.tasks.hear();
        sup.relay_changes();
        sup
    }

    /// 2026-07-28 results encoded once.
    #[must_use]
    pub fn modern_results(&self) -> &crate::proto::stateless::ModernResults {
        &self.modern_results
    }

    /// The tasks of this process.
    #[must_use]
    pub fn tasks(&self) -> &Arc<crate::stores::tasks::Tasks> {
        &self.tasks
    }

    /// Configuration.
    #[must_use]
    pub fn config(&self) -> &Arc<RuntimeConfig> {
        &self.cfg
    }

    /// The front door's policy.
    #[must_use]
    pub fn admit_policy(&self) -> &AdmitPolicy {
        &self.admit
    }

    /// Take a token of the client's bucket of refused OAuth tokens before one of its tokens
    /// is checked (`auth.oauth.failures_burst`, refilled at `failures_per_sec`); give it back
    /// ([`Supervisor::auth_refund`]) unless the token is refused.
    ///
    /// # Errors
    /// 429 naming when to come back, when the bucket is empty (or the table of buckets full).
    pub fn auth_charge(&self, key: &crate::actor::QuotaKey) -> Result<(), Rejection> {
        self.auth_failures.take(key, self.now())
    }

    /// Give back what [`Supervisor::auth_charge`] took: the token was not refused.
    pub fn auth_refund(&self, key: &crate::actor::QuotaKey) {
        self.auth_failures.give_back(key);
    }

    /// The OAuth resource server, when `[auth.oauth]` names an authorization server.
    #[must_use]
    pub fn oauth(&self) -> Option<&Arc<crate::auth::OAuth>> {
        self.oauth.as_ref()
    }

    /// The catalog.
    #[must_use]
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub(crate) fn receipts(&self) -> &Arc<Receipts> {
        &self.receipts
    }

    pub(crate) fn stream_env(&self) -> &Arc<StreamEnv> {
        &self.stream_env
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> &Arc<RuntimeStats> {
        &self.stream_env.stats
    }

    /// Every figure at once.
    #[must_use]
    pub fn stats_snapshot(&self) -> StatsSnapshot {
        let mut s = self.stream_env.stats.snapshot(
            self.registry.len(),
            self.stream_env.budget.used(),
            self.stream_env.ledger.writer.snapshot(),
        );
        s.sessions_hibernating = self.registry.sleeping();
        let kept = |(count, bytes): (u64, u64)| crate::stats::Kept { count, bytes };
        s.kept = crate::stats::KeptFigures {
            receipts: kept(self.receipts.kept(&None).1),
            handles: kept(self.handles.kept(None).1),
            tasks: kept(self.tasks.kept(None).1),
        };
        s
    }

    /// Bytes charged to the stream memory budget.
    #[must_use]
    pub fn stream_memory_bytes(&self) -> usize {
        self.stream_env.budget.used()
    }

    /// The key that seals 2026-07-28 `requestState` values, derived from the ledger's key (any
    /// node with the key file continues a multi-round-trip request).
    #[must_use]
    pub fn request_state_key(&self) -> &[u8; 32] {
        &self.state_keys[0]
    }

    /// The keys a `requestState` opens with: [`Supervisor::request_state_key`], then those of
    /// the previous ledger keys (`ledger.previous_key_files`), so a rotation voids none.
    #[must_use]
    pub fn request_state_keys(&self) -> &[[u8; 32]] {
        &self.state_keys
    }

    /// The name the ledger records a session under (its id's HMAC, hex): for operators'
    /// tools and tests that look a session up in the ledger. Not secret-bearing.
    #[must_use]
    pub fn session_hmac(&self, id: &SessionId) -> Arc<str> {
        self.stream_env.ledger.session_hmac(id)
    }

    /// The ledger's writer (its counters and histograms).
    #[must_use]
    pub fn ledger_writer(&self) -> &Arc<crate::ledger::Writer> {
        &self.stream_env.ledger.writer
    }

    /// The ledger's reads (their timings and failures, for `/metrics`).
    #[must_use]
    pub fn ledger_reads(&self) -> &Arc<crate::ledger::Reads> {
        &self.stream_env.ledger.ledger.reads
    }

    /// Whether the stream memory budget is used up (requests that would open a stream are
    /// then refused).
    #[must_use]
    pub fn stream_memory_full(&self) -> bool {
        self.stream_env.budget.is_full()
    }

    /// The generations.
    #[must_use]
    pub fn generations(&self) -> &Arc<Generations> {
        &self.gens
    }

    /// Now, as the cores see it: milliseconds since the epoch, monotonic while running.
    #[must_use]
    pub fn now(&self) -> Tick {
        self.stream_env.clock.now()
    }
}

impl super::env::SessionEnv for Supervisor {
    fn now(&self) -> Tick {
        Supervisor::now(self)
    }
    fn phase(&self) -> Phase {
        Supervisor::phase(self)
    }
    fn config(&self) -> &Arc<RuntimeConfig> {
        Supervisor::config(self)
    }
    fn catalog(&self) -> &Arc<Catalog> {
        Supervisor::catalog(self)
    }
    fn stats(&self) -> &Arc<RuntimeStats> {
        Supervisor::stats(self)
    }
    fn stream_env(&self) -> &Arc<StreamEnv> {
        Supervisor::stream_env(self)
    }
    fn cursor_key(&self) -> &Arc<CursorKey> {
        &self.key
    }
    fn generations(&self) -> &Arc<Generations> {
        Supervisor::generations(self)
    }
    fn receipts(&self) -> &Arc<Receipts> {
        Supervisor::receipts(self)
    }
    fn admit_tool_call(
        &self,
        method: &str,
        params: Option<&Value>,
        owner: &crate::ledger::Caller,
    ) -> Result<ToolDoor, Rejection> {
        Supervisor::admit_tool_call(self, method, params, owner)
    }
    fn admit_recorded_stream(
        &self,
        purpose: crate::proto::rollout::StreamPurpose,
        standalone: bool,
    ) -> Result<(), Rejection> {
        Supervisor::admit_recorded_stream(self, purpose, standalone)
    }
    fn settle(&self, hmac: &Arc<str>, why: Settle, ops: Vec<crate::ledger::Op>) {
        Supervisor::settle(self, hmac, why, ops);
    }
    fn hibernated(&self) {
        self.start_sleep_sweeper();
    }
}

/// The 2026-07-28 results of `catalog` that never change, and the tails of the others, with
/// the configured cache hints (`cacheScope` private when callers authenticate: a shared cache
/// must not answer one principal with another's copy).
fn modern_results(
    cfg: &RuntimeConfig,
    catalog: &Catalog,
) -> crate::proto::stateless::ModernResults {
    use crate::proto::stateless::{self, CacheHints, ModernResults, ResultTails};
    let public = cfg.security.bearer_tokens.is_empty() && !cfg.auth.oauth.enabled();
    let list = CacheHints { ttl_ms: cfg.modern.list_ttl_ms, public };
    let read = CacheHints { ttl_ms: cfg.modern.read_ttl_ms, public };
    let tails = ResultTails::new(catalog.server_info(), list, read);
    let mut fixed = vec![(
        "server/discover",
        stateless::discover_result(catalog.modern_capabilities(), catalog.instructions()),
    )];
    for m in crate::tools::LIST_METHODS {
        if let Some(Ok(v)) = catalog.list(m, None) {
            fixed.push((m, v));
        }
    }
    ModernResults::new(tails, fixed)
}
