//! The supervisor: one per process. Owns the generation, the session registry, the limits,
//! the quotas, the stream memory budget, the counters and the lifecycle phase, and creates
//! sessions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, AsyncContext};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::{Mutex, RwLock};

use super::budget::MemoryBudget;
use super::registry::{Inbox, QuotaKey, Registry, SessionHandle, SlotLimits};
use super::session::{SessionActor, SessionSeed};
use super::stats::{RuntimeStats, StatsSnapshot};
use super::stream::StreamEnv;
use crate::config::RuntimeConfig;
use crate::proto::admission::AdmitPolicy;
use crate::proto::bucket::TokenBucket;
use crate::proto::error::{Overload, Quota, Rejection};
use crate::proto::event_id::CursorKey;
use crate::proto::ids::{Generation, SessionId, Tick};
use crate::proto::mcp::InitializeRequest;
use crate::proto::version::ProtocolVersion;
use crate::tools::Catalog;

/// Lifecycle phase of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Admitting new sessions of this generation.
    Serving(Generation),
    /// Stopping: no new sessions (503); existing ones finish or are being stopped.
    Draining(Generation),
}

/// Session-creation rate per caller: one token bucket per [`QuotaKey`], at most
/// `max_entries` of them. A full bucket equals a new one, so when the map is full a newcomer
/// sweeps the full buckets out — at most once every [`RATE_SWEEP_EVERY_MS`], so a flood of
/// distinct callers cannot make every handshake scan the whole map under the lock — and is
/// refused (429) while it stays full: such a flood can slow new sessions down, never reset
/// anyone's throttling or grow the map. A refused handshake has used its token (attempts
/// are what is rated).
#[derive(Debug)]
struct RateLimiter {
    table: Mutex<RateTable>,
    burst: u32,
    per_second: f64,
    max_entries: usize,
}

#[derive(Debug, Default)]
struct RateTable {
    buckets: HashMap<QuotaKey, TokenBucket>,
    /// When the full buckets were last swept out (`None`: never).
    swept_at: Option<Tick>,
}

/// Least time between two sweeps of a full rate table.
const RATE_SWEEP_EVERY_MS: u64 = 100;

impl RateLimiter {
    fn new(burst: u32, per_second: u32, max_entries: usize) -> RateLimiter {
        RateLimiter { table: Mutex::new(RateTable::default()), burst, per_second: f64::from(per_second), max_entries }
    }

    /// Take a token for `key` at `now`; the refusal carries `Retry-After` (whole seconds,
    /// at least 1).
    fn take(&self, key: &QuotaKey, now: Tick) -> Result<(), Rejection> {
        let mut table = self.table.lock();
        let RateTable { buckets, swept_at } = &mut *table;
        if buckets.len() >= self.max_entries && !buckets.contains_key(key) {
            if swept_at.is_none_or(|t| now.0.saturating_sub(t.0) >= RATE_SWEEP_EVERY_MS) {
                buckets.retain(|_, b| !b.is_full_at(now));
                *swept_at = Some(now);
            }
            if buckets.len() >= self.max_entries {
                return Err(Rejection::QuotaExceeded { cause: Quota::SessionRate, retry_after_s: 1 });
            }
        }
        let bucket = buckets.entry(key.clone()).or_insert_with(|| TokenBucket::new(self.burst, self.per_second, now));
        if bucket.try_take(now) {
            return Ok(());
        }
        let wait_ms = bucket.ready_at(now).0.saturating_sub(now.0);
        Err(Rejection::QuotaExceeded { cause: Quota::SessionRate, retry_after_s: wait_ms.div_ceil(1000).max(1) as u32 })
    }
}

/// Process-wide owner of sessions.
pub struct Supervisor {
    cfg: Arc<RuntimeConfig>,
    admit: AdmitPolicy,
    catalog: Arc<Catalog>,
    registry: Arc<Registry>,
    rate: RateLimiter,
    key: CursorKey,
    clock: crate::clock::Clock,
    generation: Generation,
    stream_env: Arc<StreamEnv>,
    /// Read on every `initialize`, written twice per process life; never held across await.
    phase: RwLock<Phase>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").field("phase", &*self.phase.read()).field("sessions", &self.registry.len()).finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Start serving generation `cfg.sessions.generation`. `cfg` should have passed
    /// [`RuntimeConfig::validate`].
    #[must_use]
    pub fn new(cfg: RuntimeConfig, catalog: Catalog) -> Arc<Supervisor> {
        let secret = cfg.cursor_secret().unwrap_or_else(|| crate::rng::bytes::<32>().to_vec());
        let generation = Generation(cfg.sessions.generation);
        let stream_env = Arc::new(StreamEnv {
            keepalive: Duration::from_millis(cfg.sse.keepalive_ms),
            write_queue_frames: cfg.sse.write_queue_frames,
            retention_after_delivery: Duration::from_millis(cfg.sessions.retention_after_delivery_ms),
            retention_undelivered: Duration::from_millis(cfg.sessions.retention_undelivered_ms),
            budget: MemoryBudget::new(cfg.limits.stream_memory_bytes),
            stats: Arc::new(RuntimeStats::default()),
        });
        let q = &cfg.quotas;
        Arc::new(Supervisor {
            key: CursorKey::new(&secret),
            admit: cfg.admit_policy(),
            rate: RateLimiter::new(q.session_burst, q.session_rate_per_sec, cfg.sessions.max_sessions.max(1024)),
            catalog: Arc::new(catalog),
            registry: Arc::new(Registry::default()),
            clock: crate::clock::Clock::start(),
            generation,
            stream_env,
            phase: RwLock::new(Phase::Serving(generation)),
            cfg: Arc::new(cfg),
        })
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

    /// The catalog.
    #[must_use]
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
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
        self.stream_env.stats.snapshot(self.registry.len(), self.stream_env.budget.used())
    }

    /// Whether the stream memory budget is used up (requests that would open a stream are
    /// then refused).
    #[must_use]
    pub fn stream_memory_full(&self) -> bool {
        self.stream_env.budget.is_full()
    }

    /// Current phase.
    #[must_use]
    pub fn phase(&self) -> Phase {
        *self.phase.read()
    }

    /// Milliseconds since the supervisor started (the core's clock).
    #[must_use]
    pub fn now(&self) -> Tick {
        self.clock.now()
    }

    /// Live sessions.
    #[must_use]
    pub fn session_count(&self) -> usize {
        self.registry.len()
    }

    /// Find a session for a caller. Another caller's session is reported as not found.
    ///
    /// # Errors
    /// [`Rejection::SessionNotFound`].
    pub fn lookup(&self, id: &SessionId, principal: Option<&Arc<str>>) -> Result<SessionHandle, Rejection> {
        let h = self.registry.get(id).ok_or(Rejection::SessionNotFound)?;
        if h.principal.as_deref() != principal.map(|p| &**p) {
            return Err(Rejection::SessionNotFound);
        }
        Ok(h)
    }

    /// Create a session for an `initialize` request of `key`. Must run on an actix arbiter.
    ///
    /// # Errors
    /// [`Rejection::Overloaded`] when stopping, when the stream memory budget is full or at
    /// `max_sessions`; [`Rejection::QuotaExceeded`] past the caller's session quota, rate or
    /// memory share. `kept_bytes` (the handshake's estimated size) is charged to the budgets
    /// for the session's life.
    pub fn create_session(self: &Arc<Self>, key: QuotaKey, principal: Option<Arc<str>>, init: &InitializeRequest, kept_bytes: usize) -> Result<(SessionId, ProtocolVersion), Rejection> {
        if !matches!(self.phase(), Phase::Serving(_)) {
            return Err(Rejection::Overloaded(Overload::Draining));
        }
        if self.stream_memory_full() {
            return Err(Rejection::Overloaded(Overload::StreamMemory));
        }
        self.rate.take(&key, self.now())?;
        let limits = SlotLimits {
            max: self.cfg.sessions.max_sessions,
            max_per_key: self.cfg.quotas.sessions_per_principal,
            memory_per_key: self.cfg.stream_memory_share(),
        };
        let reservation = self.registry.reserve(key, limits)?;
        let version = ProtocolVersion::negotiate(init.requested_version.as_deref());
        let raw = format!("{}.{}", self.generation.0, URL_SAFE_NO_PAD.encode(crate::rng::bytes::<24>()));
        let id = SessionId::parse(&raw).expect("base64url and digits are visible ASCII");
        let signer = Arc::new(self.key.signer(id.as_str(), principal.as_deref()));
        let sup = Arc::clone(self);
        let caller_budget = Arc::clone(reservation.caller_budget());
        let seed = SessionSeed { id: id.clone(), principal, version, generation: self.generation, signer, client_caps: init.capabilities.clone(), kept_bytes, caller_budget };
        SessionActor::create(move |ctx| {
            // Before the address is published: a full default mailbox (16) would refuse
            // the session's first requests.
            ctx.set_mailbox_capacity(sup.config().sessions.mailbox);
            let inbox = Inbox::new(sup.config().sessions.mailbox);
            let handle = SessionHandle { addr: ctx.address(), inbox, principal: seed.principal.clone(), signer: Arc::clone(&seed.signer), caller_budget: Arc::clone(&seed.caller_budget) };
            let guard = reservation.insert(seed.id.clone(), handle);
            SessionActor::new(seed, sup, guard, Arc::new(ctx.address().recipient()))
        });
        Ok((id, version))
    }

    /// Stop admitting sessions (`initialize` gets 503 with `Retry-After`); existing ones go
    /// on. Call before the HTTP server's graceful stop.
    pub fn begin_drain(&self) {
        *self.phase.write() = Phase::Draining(self.generation);
    }

    /// Stop admitting sessions and stop every live one (their streams end, their requests are
    /// cancelled, they deregister). Returns how many were told to stop.
    pub fn shutdown(&self) -> usize {
        self.begin_drain();
        let all = self.registry.all();
        for h in &all {
            // Control message: it must arrive.
            h.addr.do_send(super::session::Shutdown);
        }
        all.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_rate_is_per_caller_with_retry_after() {
        let r = RateLimiter::new(2, 1, 1024);
        let a = QuotaKey::Principal("a".into());
        let b = QuotaKey::Principal("b".into());
        assert!(r.take(&a, Tick(0)).is_ok() && r.take(&a, Tick(0)).is_ok());
        let refused = r.take(&a, Tick(0)).unwrap_err();
        assert_eq!((refused.status(), refused.retry_after_s()), (429, Some(1)));
        assert!(r.take(&b, Tick(0)).is_ok(), "another caller is not throttled");
        assert!(r.take(&a, Tick(1000)).is_ok(), "one more a second");
    }

    #[test]
    fn rate_map_stays_bounded_under_a_flood_of_callers_and_throttled_ones_stay_throttled() {
        let r = RateLimiter::new(1, 1, 16);
        let heavy = QuotaKey::Principal("heavy".into());
        r.take(&heavy, Tick(0)).unwrap();
        let mut refused = 0;
        for i in 0..1000u32 {
            let k = QuotaKey::Address(std::net::IpAddr::from(i.to_be_bytes()));
            if r.take(&k, Tick(0)).is_err() {
                refused += 1;
            }
            assert!(r.table.lock().buckets.len() <= 16);
        }
        assert_eq!(refused, 1000 - 15, "newcomers beyond the table wait for buckets to refill");
        assert!(r.take(&heavy, Tick(0)).is_err(), "the flood did not reset the heavy caller's bucket");
        assert!(r.take(&QuotaKey::Principal("late".into()), Tick(2_000)).is_ok(), "refilled buckets are forgotten");
    }

    #[test]
    fn a_full_rate_table_is_swept_at_most_once_per_interval() {
        // A token a millisecond: every bucket is full again 1 ms after its use.
        let r = RateLimiter::new(1, 1000, 16);
        let key = |i: u32| QuotaKey::Address(std::net::IpAddr::from(i.to_be_bytes()));
        (0..16).for_each(|i| r.take(&key(i), Tick(0)).unwrap());
        assert!(r.take(&key(100), Tick(10)).is_ok(), "the first newcomer sweeps the refilled buckets out");
        (101..116).for_each(|i| r.take(&key(i), Tick(10)).unwrap());
        assert!(r.take(&key(200), Tick(50)).is_err(), "40 ms after a sweep: no scan, the newcomer waits");
        assert_eq!(r.table.lock().buckets.len(), 16);
        assert!(r.take(&key(201), Tick(10 + RATE_SWEEP_EVERY_MS)).is_ok(), "an interval later the table is swept again");
    }
}
