//! The supervisor: one per process. Owns the generation, the session registry, the limits,
//! the quotas, the stream memory budget, the counters and the lifecycle phase, and creates
//! sessions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, AsyncContext};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use serde_json::Value;

use super::budget::MemoryBudget;
use super::durable::LedgerCtx;
use super::generations::{GenOrigin, GenSettings, Generations};
use super::registry::{Inbox, QuotaKey, Registry, SlotLimits};
use super::session::SessionHandle;
use super::session::{Restore, SessionActor, SessionSeed};
use super::stream::StreamEnv;
use crate::config::RuntimeConfig;
use crate::ledger::Ledger;
use crate::ledger::codec::{self, Handshake, Record, RecordState};
use crate::proto::admission::AdmitPolicy;
use crate::proto::bucket::TokenBucket;
use crate::proto::error::{Overload, Quota, Rejection};
use crate::proto::event_id::CursorKey;
use crate::proto::ids::{Generation, SessionId, Tick};
use crate::proto::mcp::InitializeRequest;
use crate::proto::version::ProtocolVersion;
use crate::stats::{RuntimeStats, StatsSnapshot};
use crate::stores::receipts::Receipts;
use crate::tools::Catalog;

pub(crate) use super::env::{Settle, ToolDoor};
pub use super::lifecycle::{Lifecycle, Phase};

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
        RateLimiter {
            table: Mutex::new(RateTable::default()),
            burst,
            per_second: f64::from(per_second),
            max_entries,
        }
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
                return Err(Rejection::QuotaExceeded {
                    cause: Quota::SessionRate,
                    retry_after_s: 1,
                });
            }
        }
        let bucket = buckets
            .entry(key.clone())
            .or_insert_with(|| TokenBucket::new(self.burst, self.per_second, now));
        if bucket.try_take(now) {
            return Ok(());
        }
        let wait_ms = bucket.ready_at(now).0.saturating_sub(now.0);
        Err(Rejection::QuotaExceeded {
            cause: Quota::SessionRate,
            retry_after_s: wait_ms.div_ceil(1000).max(1) as u32,
        })
    }
}

/// Process-wide owner of sessions.
pub struct Supervisor {
    /// Seal 2026-07-28 `requestState` values (derived from the ledger's key once): the
    /// current key first (it seals), then the previous keys' (they still open).
    state_keys: Vec<[u8; 32]>,
    /// 2026-07-28 results encoded once (the fixed ones whole, the tails of the others).
    modern_results: crate::proto::modern::ModernResults,
    /// Tasks (the 2026-07-28 tasks extension), recorded in the ledger.
    tasks: Arc<crate::stores::tasks::Tasks>,
    cfg: Arc<RuntimeConfig>,
    admit: AdmitPolicy,
    catalog: Arc<Catalog>,
    registry: Arc<Registry<SessionHandle>>,
    rate: RateLimiter,
    key: CursorKey,
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
    /// must not read the record they are about to overwrite. Held for one insert or lookup.
    /// Counted: a session may settle twice before the first writes are in.
    settling: Arc<Mutex<SettlingMap>>,
    /// Idempotency receipts of write-tool calls.
    receipts: Arc<Receipts>,
    /// State handles (also attached to the catalog, for the tools).
    handles: Arc<crate::stores::handles::Handles>,
}

/// Copy a session's streams recorded under `old` (a previous key's HMAC) to `new`: records,
/// logs and index. The session's own record is written under `new` by its first record after
/// the revive, after these (the writer keeps order); until then a revive finds it under `old`
/// again. Nothing under `old` is deleted: it expires on its own, so no crash in between can
/// lose the session.
fn migration_ops(
    new: &str,
    record: &codec::SessionRecord,
    streams: &[(codec::StreamRecord, Vec<(u64, bytes::Bytes)>)],
    cx: &LedgerCtx,
) -> Vec<crate::ledger::Op> {
    use crate::ledger::Op;
    let expires_ms = record.last_used_ms.saturating_add(cx.stream_ttl_ms);
    let mut ops = Vec::new();
    for (s, events) in streams {
        ops.push(Op::Put {
            key: codec::stream_key(new, s.stream),
            value: bytes::Bytes::from(codec::encode(&Record::Stream(s.clone()))),
            expires_ms,
        });
        let log: Arc<str> = codec::events_key(new, s.stream).into();
        for (seq, frame) in events {
            ops.push(Op::Append {
                log: Arc::clone(&log),
                seq: *seq,
                frame: frame.clone(),
                max_len: s.max_events.max(1),
                expires_ms,
            });
        }
        ops.push(Op::IndexAdd {
            index: codec::streams_index(new),
            member: s.stream.to_string(),
            score: s.stream,
            expires_ms,
        });
    }
    ops
}

/// A session record and its streams (records and events), as a revive reads them.
type SessionFound = (codec::SessionRecord, Vec<(codec::StreamRecord, Vec<(u64, bytes::Bytes)>)>);

/// The active session recorded under `hmac` for `principal`, with its (at most `most`)
/// streams.
fn read_session(
    store: &dyn crate::ledger::Store,
    hmac: &str,
    principal: Option<&Arc<str>>,
    most: usize,
    now: u64,
) -> Result<Option<SessionFound>, crate::ledger::StoreError> {
    let Some(bytes) = store.get(&codec::session_key(hmac), now)? else { return Ok(None) };
    let Record::Session(record) = codec::decode(&bytes)? else { return Ok(None) };
    if record.state != RecordState::Active
        || record.principal.as_deref() != principal.map(|p| &**p)
        || record.session_hmac != hmac
    {
        return Ok(None);
    }
    let mut streams = Vec::new();
    for (member, _) in store.index_lowest(&codec::streams_index(hmac), most, now)? {
        let Ok(sid) = member.parse::<u64>() else { continue };
        let Some(bytes) = store.get(&codec::stream_key(hmac, sid), now)? else { continue };
        let Record::Stream(s) = codec::decode(&bytes)? else { continue };
        let events = store.read_log(&codec::events_key(hmac, sid), now)?;
        streams.push((s, events));
    }
    Ok(Some((record, streams)))
}

/// One revive at a time per shard of session HMACs.
#[derive(Debug)]
struct ReviveLocks(Vec<tokio::sync::Mutex<()>>);

impl ReviveLocks {
    fn shard(&self, hmac: &str) -> usize {
        // The HMAC is uniform: its first two hex digits pick the shard evenly.
        hmac.get(..2).and_then(|h| usize::from_str_radix(h, 16).ok()).unwrap_or(0) % self.0.len()
    }

    fn of(&self, hmac: &str) -> &tokio::sync::Mutex<()> {
        &self.0[self.shard(hmac)]
    }
}

/// The ledger's session cap, kept on the writer's thread after each sweep: sessions whose
/// last recorded use is older than the idle TTL leave the LRU index (their records expired);
/// past `max` recorded sessions, the least recently used ones that are not live here (parked,
/// or left by an earlier process) are evicted: their record says `evicted` (their id answers
/// 404, a revive never reads them back) and their streams are deleted. Owns nothing that
/// owns the writer.
struct LedgerCap {
    max: usize,
    idle_ttl_ms: u64,
    registry: Arc<Registry<SessionHandle>>,
    revive_locks: Arc<ReviveLocks>,
    settling: Arc<Mutex<SettlingMap>>,
    stats: Arc<RuntimeStats>,
}

/// Most sessions one housekeeping run evicts (in one transaction); more are evicted by the
/// next run, right after the next batch.
const EVICT_PER_RUN: usize = 1_000;

impl LedgerCap {
    /// Returns whether more are to be evicted.
    fn run(&self, store: &dyn crate::ledger::Store, now: u64) -> bool {
        match self.evict(store, now) {
            Ok(more) => more,
            Err(e) => {
                tracing::warn!(error = %e, "ledger: session cap housekeeping failed");
                false
            }
        }
    }

    fn evict(
        &self,
        store: &dyn crate::ledger::Store,
        now: u64,
    ) -> Result<bool, crate::ledger::StoreError> {
        use crate::ledger::Op;
        store.apply(&[Op::IndexTrim {
            index: codec::SESSIONS_LRU.into(),
            below: now.saturating_sub(self.idle_ttl_ms),
        }])?;
        let recorded = store.index_len(codec::SESSIONS_LRU, now)?;
        let Some(excess) = recorded.checked_sub(self.max).filter(|n| *n > 0) else {
            return Ok(false);
        };
        let want = excess.min(EVICT_PER_RUN);
        // Live sessions (and those settling) are skipped: read past as many as there can be.
        let window = want + self.registry.len() + self.settling.lock().len() + 64;
        let mut ops = Vec::new();
        let mut evicted = 0;
        // Shards whose revive lock is held until the evictions are committed: no revive reads
        // a record in between.
        let mut held = std::collections::HashMap::new();
        for (hmac, _) in store.index_lowest(codec::SESSIONS_LRU, window, now)? {
            if evicted == want {
                break;
            }
            // A revive in progress holds its shard's lock from its read to its start; a
            // session parking or ending has writes on their way: skip both.
            let shard = self.revive_locks.shard(&hmac);
            if let std::collections::hash_map::Entry::Vacant(e) = held.entry(shard) {
                let Ok(g) = self.revive_locks.0[shard].try_lock() else { continue };
                e.insert(g);
            }
            if self.registry.is_live_hmac(&hmac) || self.settling.lock().contains_key(hmac.as_str())
            {
                continue;
            }
            ops.push(Op::IndexRemove { index: codec::SESSIONS_LRU.into(), member: hmac.clone() });
            if let Some(bytes) = store.get(&codec::session_key(&hmac), now)?
                && let Ok(Record::Session(mut r)) = codec::decode(&bytes)
                && r.state == RecordState::Active
            {
                r.state = RecordState::Evicted;
                // A tombstone for one TTL: the id stays 404 and is never revived.
                ops.push(Op::Put {
                    key: codec::session_key(&hmac),
                    value: bytes::Bytes::from(codec::encode(&Record::Session(r))),
                    expires_ms: now.saturating_add(self.idle_ttl_ms),
                });
                for (sid, _) in store.index_lowest(&codec::streams_index(&hmac), usize::MAX, now)? {
                    if let Ok(sid) = sid.parse::<u64>() {
                        super::durable::forget_stream_ops(
                            &hmac,
                            crate::proto::ids::StreamId(sid),
                            &mut ops,
                        );
                    }
                }
                ops.push(Op::DropIndex { index: codec::streams_index(&hmac) });
                evicted += 1;
            }
        }
        store.apply(&ops)?;
        drop(held);
        if evicted > 0 {
            self.stats.sessions_evicted_from_ledger(evicted as u64);
            tracing::info!(
                evicted,
                recorded,
                max = self.max,
                "ledger full: least recently used parked sessions evicted"
            );
        }
        Ok(excess > want && evicted == want)
    }
}

/// Session HMAC -> why its last writes are on their way, and how many batches of them.
type SettlingMap = HashMap<Arc<str>, (Settle, usize)>;

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
            ledger: ledger_cx,
            clock,
        });
        let q = &cfg.quotas;
        let registry = Arc::new(Registry::with_quiet(Arc::clone(&stream_env.stats.quiet)));
        let settling: Arc<Mutex<SettlingMap>> = Arc::default();
        let revive_locks =
            Arc::new(ReviveLocks((0..16).map(|_| tokio::sync::Mutex::new(())).collect()));
        let cap = LedgerCap {
            max: cfg.ledger.max_sessions,
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
        Arc::new(Supervisor {
            state_keys: stream_env.ledger.ledger.derive_rotated("mcp-host requestState v1"),
            modern_results,
            tasks,
            key: cursor_key,
            admit: cfg.admit_policy(),
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
            cfg: Arc::new(cfg),
        })
    }

    /// 2026-07-28 results encoded once.
    #[must_use]
    pub fn modern_results(&self) -> &crate::proto::modern::ModernResults {
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

    /// Whether the ledger outlives the process (SQLite).
    #[must_use]
    pub fn ledger_durable(&self) -> bool {
        self.stream_env.ledger.ledger.durable
    }

    /// Refuse new durable work (503 naming the ledger) while the ledger cannot take it: its
    /// store refuses commits, or more than `ledger.queue_max_bytes` wait for its writer.
    ///
    /// # Errors
    /// [`Overload::LedgerFailing`], [`Overload::LedgerBacklog`].
    pub fn ledger_accepts(&self) -> Result<(), Rejection> {
        match self.stream_env.ledger.writer.refusal() {
            None => Ok(()),
            Some(crate::ledger::LedgerState::Failing) => {
                Err(Rejection::Overloaded(Overload::LedgerFailing))
            }
            Some(_) => Err(Rejection::Overloaded(Overload::LedgerBacklog)),
        }
    }

    /// Whether the process is ready for new work: serving, and its ledger can commit
    /// (`GET /readyz`).
    #[must_use]
    pub fn ready(&self) -> bool {
        self.phase() == Phase::Serving && !self.stream_env.ledger.writer.is_failing()
    }

    /// The door of a request of `method` with `params` of a caller (`owner`), in either era,
    /// before anything runs: for a `tools/call`, its idempotency key and what its stream is
    /// for; refused when it needs a new durable record the ledger cannot take now (a keyed
    /// call's receipt, a tool that keeps state handles), or when a keyed call's caller keeps
    /// as many receipts as it may (429; 503 when every caller together does). A keyed call
    /// gets its place among its caller's receipts ([`ToolDoor::place`]).
    ///
    /// # Errors
    /// As [`Supervisor::ledger_accepts`]; the receipt bounds' refusals.
    pub(crate) fn admit_tool_call(
        &self,
        method: &str,
        params: Option<&Value>,
        owner: &crate::ledger::Caller,
    ) -> Result<ToolDoor, Rejection> {
        let class = match params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .and_then(|n| self.catalog.tool(n))
        {
            Some(tool) if method == "tools/call" => {
                crate::proto::route::classify_call(&tool.spec().traits(), params)
            }
            _ => crate::proto::route::CallClass::read_only(),
        };
        if class.needs_ledger {
            self.ledger_accepts()?;
        }
        let place = if class.keyed() { Some(self.receipts.admit(owner)?) } else { None };
        Ok(ToolDoor { call: class.key, purpose: class.purpose, place })
    }

    /// The door of a stream that will be recorded (resumable or shadow) for `purpose`: on a
    /// durable ledger it needs the ledger when it is a write's, the standalone GET stream
    /// (`standalone`: recorded for its whole life), or when every event waits for its commit
    /// before it goes out (`sync`). A read's POST stream does not: it is usually answered in
    /// its first write, and its events past the writer's queue bound leave a hole a resume
    /// reports, as ever.
    ///
    /// # Errors
    /// As [`Supervisor::ledger_accepts`].
    pub(crate) fn admit_recorded_stream(
        &self,
        purpose: crate::proto::rollout::StreamPurpose,
        standalone: bool,
    ) -> Result<(), Rejection> {
        let write = matches!(purpose, crate::proto::rollout::StreamPurpose::Write { .. });
        if self.ledger_durable()
            && (write
                || standalone
                || self.cfg.ledger.durability == crate::ledger::Durability::Sync)
        {
            self.ledger_accepts()?;
        }
        Ok(())
    }

    /// A session whose id was never handed out (its first record was not committed in time):
    /// it stops. Its record, if it lands later, names a session nobody knows; it expires.
    pub(crate) fn abandon_unrecorded(&self, id: &SessionId) {
        if let Some(h) = self.registry.handle(id) {
            // Control message: it must arrive (its inbox may be full).
            h.addr.do_send(super::session::Shutdown);
        }
    }

    /// The ledger's writer (its counters and histograms).
    #[must_use]
    pub fn ledger_writer(&self) -> &Arc<crate::ledger::Writer> {
        &self.stream_env.ledger.writer
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
        self.lifecycle.borrow().phase
    }

    /// The published lifecycle, to watch.
    #[must_use]
    pub fn lifecycle(&self) -> tokio::sync::watch::Receiver<Lifecycle> {
        self.lifecycle.subscribe()
    }

    fn publish(&self, change: impl FnOnce(&mut Lifecycle)) {
        let now = self.now().0;
        self.lifecycle.send_modify(|l| {
            let before = *l;
            change(l);
            if *l != before {
                l.since_ms = now;
                tracing::info!(phase = ?l.phase, generation = l.generation.0, "lifecycle");
            }
        });
    }

    /// The generations.
    #[must_use]
    pub fn generations(&self) -> &Arc<Generations> {
        &self.gens
    }

    /// Start a new generation with `flags` (a reload or `PUT /admin/flags`; `origin`
    /// [`GenOrigin::Rollback`] for a rollback): streams opened from now on follow it, older
    /// ones keep theirs.
    pub fn reload(&self, origin: GenOrigin, change: impl FnOnce(&mut GenSettings)) -> Generation {
        let g = self.gens.advance(origin, self.now().0, change);
        let id = g.settings.id;
        self.stream_env.ledger.ledger.record_generation(id.0);
        tracing::info!(generation = id.0, origin = ?origin, flags = ?g.settings.flags, "new generation");
        self.publish(|l| l.generation = id);
        id
    }

    /// Roll back: a new generation whose new streams are not resumable. Streams of older
    /// generations stay resumable until their retention ends; their requests finish, within
    /// `shutdown.grace_secs`: then the ones still running are ended with the "drained" error
    /// (`-32010`). Must run on an actix or tokio runtime (the deadline is a task).
    pub fn rollback(self: &Arc<Self>) -> Generation {
        let g = self.reload(GenOrigin::Rollback, |s| {
            s.flags = s.flags.map(crate::proto::rollout::RolloutFlags::rolled_back)
        });
        let grace = Duration::from_secs(self.cfg.shutdown.grace_secs);
        let sup = Arc::downgrade(self);
        actix_rt::spawn(async move {
            let deadline = tokio::time::Instant::now() + grace;
            loop {
                let Some(s) = sup.upgrade() else { return };
                let left = s.gens.in_flight_older_than(g);
                if left == 0 {
                    return;
                }
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(
                        generation = g.0,
                        requests = left,
                        "rollback drain: grace period over; the older generations' requests still running are ended (-32010)"
                    );
                    for h in s.registry.all() {
                        // Control message: it must arrive.
                        h.addr.do_send(super::session::EndOlderRequests { before: g });
                    }
                    s.gens.end_stateless_requests(Some(g));
                    return;
                }
                drop(s);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        g
    }

    /// Ask the host to stop gracefully (`POST /admin/drain`), as SIGTERM does.
    pub fn request_stop(&self) {
        self.stop_requested.notify_one();
    }

    /// Resolves when [`Supervisor::request_stop`] was called.
    pub async fn stop_requested(&self) {
        self.stop_requested.notified().await;
    }

    /// Now, as the cores see it: milliseconds since the epoch, monotonic while running.
    #[must_use]
    pub fn now(&self) -> Tick {
        self.stream_env.clock.now()
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
    pub fn lookup(
        &self,
        id: &SessionId,
        principal: Option<&Arc<str>>,
    ) -> Result<(SessionHandle, super::registry::InboxTicket), Rejection> {
        let (h, ticket) = self.registry.enter(id).ok_or(Rejection::SessionNotFound)??;
        if h.principal.as_deref() != principal.map(|p| &**p) {
            return Err(Rejection::SessionNotFound);
        }
        Ok((h, ticket))
    }

    /// Create a session for an `initialize` request of `key`. Must run on an actix arbiter.
    ///
    /// # Errors
    /// [`Rejection::Overloaded`] when stopping, when the stream memory budget is full or at
    /// `max_sessions`; [`Rejection::QuotaExceeded`] past the caller's session quota, rate or
    /// memory share. `kept_bytes` (the handshake's estimated size) is charged to the budgets
    /// for the session's life.
    pub fn create_session(
        self: &Arc<Self>,
        key: QuotaKey,
        principal: Option<Arc<str>>,
        init: &InitializeRequest,
        kept_bytes: usize,
        origin: Option<&str>,
    ) -> Result<(SessionId, ProtocolVersion, Option<tokio::sync::oneshot::Receiver<()>>), Rejection>
    {
        if self.phase() != Phase::Serving {
            return Err(Rejection::Overloaded(Overload::Draining));
        }
        let durable = self.stream_env.ledger.ledger.durable;
        if durable {
            // Its id is handed out only once its record is committed.
            self.ledger_accepts()?;
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
        let generation = self.gens.enter_current(super::generations::Counted::Session);
        let raw = format!(
            "{}.{}",
            generation.generation().settings.id.0,
            URL_SAFE_NO_PAD.encode(crate::rng::bytes::<24>())
        );
        let id = SessionId::parse(&raw).expect("base64url and digits are visible ASCII");
        let handshake = Handshake {
            requested_version: init.requested_version.clone(),
            capabilities: init.capabilities.clone(),
            client_info: init.client_info.clone(),
        };
        let (recorded, on_recorded) = tokio::sync::oneshot::channel();
        let mut seed = self.seed(
            id.clone(),
            principal,
            version,
            generation,
            handshake,
            kept_bytes,
            reservation.caller_budget(),
            origin.map(str::to_owned),
            None,
        );
        // Only a durable ledger's record is waited for.
        seed.recorded = durable.then_some(recorded);
        self.start_session(seed, reservation);
        Ok((id, version, durable.then_some(on_recorded)))
    }

    #[allow(clippy::too_many_arguments)]
    fn seed(
        &self,
        id: SessionId,
        principal: Option<Arc<str>>,
        version: ProtocolVersion,
        generation: super::generations::GenCount,
        handshake: Handshake,
        kept_bytes: usize,
        caller_budget: &Arc<MemoryBudget>,
        origin: Option<String>,
        restore: Option<Restore>,
    ) -> SessionSeed {
        let signer = Arc::new(self.key.signer(id.as_str(), principal.as_deref()));
        let hmac = self.stream_env.ledger.session_hmac(&id);
        SessionSeed {
            id,
            principal,
            owner: None,
            version,
            generation,
            signer,
            handshake,
            kept_bytes,
            caller_budget: Arc::clone(caller_budget),
            hmac,
            origin,
            restore,
            recorded: None,
        }
    }

    fn start_session(
        self: &Arc<Self>,
        mut seed: SessionSeed,
        reservation: super::registry::Reservation<SessionHandle>,
    ) {
        let sup = Arc::clone(self);
        seed.owner = reservation.owner();
        SessionActor::create(move |ctx| {
            // Before the address is published: a full default mailbox (16) would refuse
            // the session's first requests.
            ctx.set_mailbox_capacity(sup.config().sessions.mailbox);
            let inbox = Inbox::new(sup.config().sessions.mailbox);
            let handle = SessionHandle {
                addr: ctx.address(),
                inbox,
                principal: seed.principal.clone(),
                signer: Arc::clone(&seed.signer),
                caller_budget: Arc::clone(&seed.caller_budget),
            };
            let guard = reservation.insert(seed.id.clone(), handle, Arc::clone(&seed.hmac));
            SessionActor::new(seed, sup, guard, &ctx.address())
        });
    }

    /// Bring a session recorded in the ledger back to life (after a restart, or from
    /// parking) so that `id`'s next request finds it. Does nothing when it is live already
    /// or the ledger holds no active session of this caller under this id (the request then
    /// gets 404). Must run on an actix arbiter.
    ///
    /// # Errors
    /// The quotas and limits of [`Supervisor::create_session`] (a revived session counts like
    /// a new one); [`Rejection::Internal`] when the ledger cannot be read.
    pub async fn revive(
        self: &Arc<Self>,
        id: &SessionId,
        principal: Option<&Arc<str>>,
        key: QuotaKey,
    ) -> Result<(), Rejection> {
        let cx = &self.stream_env.ledger;
        let hmac = cx.session_hmac(id);
        // The HMAC is uniform: its first two hex digits pick the shard evenly.
        let _one_at_a_time = self.revive_locks.of(&hmac).lock().await;
        if self.registry.contains(id) {
            return Ok(());
        }
        // Read under the lock: a park or end that began while this revive waited counts.
        let settling = self.settling.lock().get(&hmac).map(|(why, _)| *why);
        match settling {
            // It just ended here; its end is on the way to the ledger.
            Some(Settle::Ended) => return Ok(()),
            // It just parked: read its record once its last writes are in (rare: only in the
            // milliseconds after a park; the wait holds this shard's lock, not a thread). A
            // ledger that cannot commit refuses the revive (it needs a record too) rather than
            // keep this shard waiting.
            Some(Settle::Parked) => {
                if cx.ledger.durable {
                    self.ledger_accepts()?;
                }
                cx.writer.wait_committed(cx.writer.barrier()).await.map_err(Rejection::from)?;
            }
            None => {}
        }
        // Read on a reader thread: a slow disk stalls this revive, never the worker.
        let (found, complete) =
            self.read_for_revive(id, &hmac, principal.cloned()).await.map_err(|e| {
                tracing::error!(error = %e, "cannot read a session from the ledger");
                match e {
                    crate::ledger::ReadError::Busy => Rejection::Overloaded(Overload::LedgerReads),
                    crate::ledger::ReadError::Store(_) => Rejection::Internal,
                }
            })?;
        let Some((record, streams)) = found else {
            return Ok(());
        };
        // Read first: a session that does not exist is 404 also while stopping.
        if self.phase() != Phase::Serving {
            return Err(Rejection::Overloaded(Overload::Draining));
        }
        if cx.ledger.durable {
            // Its new life is recorded before it is served.
            self.ledger_accepts()?;
        }
        let Some(version) = ProtocolVersion::parse(&record.protocol_version) else { return Ok(()) };
        let limits = SlotLimits {
            max: self.cfg.sessions.max_sessions,
            max_per_key: self.cfg.quotas.sessions_per_principal,
            memory_per_key: self.cfg.stream_memory_share(),
        };
        let reservation = self.registry.reserve(key, limits)?;
        // Measured as at creation, without today's bounds (the session was admitted under its own).
        let unbounded = crate::proto::limits::HandshakeLimits {
            max_values: usize::MAX,
            max_depth: usize::MAX,
            max_string_bytes: usize::MAX,
        };
        let kept_bytes = crate::proto::limits::check_handshake(
            &record.handshake.capabilities,
            &Value::Null,
            &unbounded,
        )
        .unwrap_or(0);
        let restore = Restore {
            complete,
            incarnation: record.incarnation.saturating_add(1),
            created_ms: record.created_ms,
            log_level: record.log_level.as_deref().and_then(crate::proto::mcp::LogLevel::parse),
            streams,
        };
        if cx.ledger.durable {
            // This life's incarnation is committed before the session can be found: a crash
            // after it cannot make the next revive number streams and events this life may
            // hand out. (Under this shard's revive lock: a second request for it waits.)
            let mut life = record.clone();
            (life.incarnation, life.run, life.session_hmac) =
                (restore.incarnation, cx.ledger.run, hmac.to_string());
            // The request reviving it is a use: its idle TTL starts again (the recorded last
            // use may lag behind, by up to half a TTL when the last batch of a crash was lost).
            let now = self.now().0;
            (life.last_used_ms, life.expires_ms) = (
                life.last_used_ms.max(now),
                now.saturating_add(cx.idle_ttl_ms).max(life.expires_ms),
            );
            let expires_ms = life.expires_ms;
            let put = crate::ledger::Op::Put {
                key: codec::session_key(&hmac),
                value: bytes::Bytes::from(codec::encode(&Record::Session(life))),
                expires_ms,
            };
            // Not committed in time (or given up on as the process stops): not revived; the
            // record, if it lands later, only numbers the next life higher.
            cx.writer.submit_and_wait(vec![put]).await.map_err(Rejection::from)?;
        }
        let generation = self.gens.enter_restored(
            Generation(record.generation),
            self.now().0,
            super::generations::Counted::Session,
        );
        let seed = self.seed(
            id.clone(),
            principal.cloned(),
            version,
            generation,
            record.handshake,
            kept_bytes,
            reservation.caller_budget(),
            record.origin,
            Some(restore),
        );
        self.stream_env.stats.session_revived();
        self.start_session(seed, reservation);
        Ok(())
    }

    /// The active session recorded under `hmac` for `principal`, with its streams, and whether
    /// the run that last wrote it is complete; read on a reader thread. A session recorded
    /// before a key rotation, and never since (a record under the current key, even a
    /// tombstone, is the truth), is found under its previous HMAC and its streams' copy to
    /// the current one is queued (the session's own record follows with its first write).
    async fn read_for_revive(
        &self,
        id: &SessionId,
        hmac: &Arc<str>,
        principal: Option<Arc<str>>,
    ) -> Result<(Option<SessionFound>, bool), crate::ledger::ReadError> {
        let cx = Arc::clone(&self.stream_env.ledger);
        let previous = cx.previous_session_hmacs(id);
        let (now, most, this_run) = (
            self.now().0,
            self.cfg.sessions.max_retained_streams + self.cfg.sessions.max_in_flight + 1,
            cx.ledger.run,
        );
        let hmac = Arc::clone(hmac);
        let migrate = Arc::clone(&cx);
        cx.ledger
            .reads
            .run(move |store| {
                let mut found = read_session(store, &hmac, principal.as_ref(), most, now)?;
                if found.is_none()
                    && !previous.is_empty()
                    && store.get(&codec::session_key(&hmac), now)?.is_none()
                {
                    for old in &previous {
                        if let Some(f) = read_session(store, old, principal.as_ref(), most, now)? {
                            migrate.writer.submit(migration_ops(&hmac, &f.0, &f.1, &migrate));
                            found = Some(f);
                            break;
                        }
                    }
                }
                let complete = found.as_ref().is_some_and(|(r, _)| {
                    crate::ledger::Ledger::run_complete_in(store, this_run, r.run, now)
                });
                Ok((found, complete))
            })
            .await
    }

    /// Announce a session's last writes of this life (it ended, or parks): until `ops` are
    /// committed a revive does not read the record they replace.
    pub(crate) fn settle(&self, hmac: &Arc<str>, why: Settle, ops: Vec<crate::ledger::Op>) {
        self.settling
            .lock()
            .entry(Arc::clone(hmac))
            .and_modify(|(w, n)| (*w, *n) = (why, *n + 1))
            .or_insert((why, 1));
        let (settling, hmac) = (Arc::clone(&self.settling), Arc::clone(hmac));
        self.stream_env.ledger.writer.submit_then(
            ops,
            Box::new(move || {
                let mut s = settling.lock();
                if let Some((_, n)) = s.get_mut(&hmac) {
                    *n -= 1;
                    if *n == 0 {
                        s.remove(&hmac);
                    }
                }
            }),
        );
    }

    /// `starting` -> `serving`: requests are admitted (call once the listeners are up).
    pub fn start_serving(&self) {
        self.publish(|l| {
            if l.phase == Phase::Starting {
                l.phase = Phase::Serving;
            }
        });
    }

    /// Every session has stopped (the host saw the registry empty after
    /// [`Supervisor::shutdown`]): `stopped`; the ledger's last writes follow.
    pub fn mark_stopped(&self) {
        self.publish(|l| l.phase = Phase::Stopped);
    }

    /// Stop admitting new requests (503 with `Retry-After`); in-flight ones go on, and so
    /// does what finishes them (answers to server-to-client requests, cancellations, resumes).
    pub fn begin_drain(&self) {
        self.publish(|l| {
            if l.phase == Phase::Serving || l.phase == Phase::Starting {
                l.phase = Phase::Draining;
            }
        });
    }

    /// Whether no session, no stream and no request is left.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.session_count() == 0 && self.stats().streams_live() <= 0 && self.in_flight() <= 0
    }

    /// Wait until `done` holds or `deadline` passes; returns whether it holds. Woken when
    /// the last session, stream or request (of a generation) ends, not by polling.
    pub async fn wait_until(
        &self,
        deadline: tokio::time::Instant,
        done: impl Fn(&Supervisor) -> bool,
    ) -> bool {
        let quiet = &self.stream_env.stats.quiet;
        loop {
            // Registered before the check: a change between the check and the wait still
            // wakes it.
            let changed = quiet.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return done(self);
            }
        }
    }

    /// Requests in flight, over every generation.
    #[must_use]
    pub fn in_flight(&self) -> i64 {
        self.gens.in_flight_total()
    }

    /// Stop admitting and stop every live session: each stream's connection ends with a
    /// `retry` hint once its events are committed (its client resumes after the restart),
    /// requests still running are cancelled here and answered after the restart with the
    /// "server restarted" error, and the sessions deregister, their records left active.
    /// 2026-07-28 requests still running are answered "drained" (`-32010`) at once.
    /// Returns how many sessions were told to stop.
    pub fn shutdown(&self) -> usize {
        self.begin_drain();
        // 2026-07-28 requests have no "after the restart": they are answered "drained" now.
        self.gens.end_stateless_requests(None);
        let all = self.registry.all();
        for h in &all {
            // Control message: it must arrive.
            h.addr.do_send(super::session::Shutdown);
        }
        all.len()
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
}

/// The 2026-07-28 results of `catalog` that never change, and the tails of the others, with
/// the configured cache hints (`cacheScope` private when callers authenticate: a shared cache
/// must not answer one principal with another's copy).
fn modern_results(cfg: &RuntimeConfig, catalog: &Catalog) -> crate::proto::modern::ModernResults {
    use crate::proto::modern::{self, CacheHints, ModernResults, ResultTails};
    let public = cfg.security.bearer_tokens.is_empty();
    let list = CacheHints { ttl_ms: cfg.modern.list_ttl_ms, public };
    let read = CacheHints { ttl_ms: cfg.modern.read_ttl_ms, public };
    let tails = ResultTails::new(catalog.server_info(), list, read);
    let mut fixed = vec![(
        "server/discover",
        modern::discover_result(catalog.modern_capabilities(), catalog.instructions()),
    )];
    for m in ["tools/list", "prompts/list", "resources/list", "resources/templates/list"] {
        if let Some(Ok(v)) = catalog.list(m, None) {
            fixed.push((m, v));
        }
    }
    ModernResults::new(tails, fixed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the clock paused, time moves only when every task waits: a wait that returns
    /// before its deadline was woken by what it waited for.
    #[tokio::test(start_paused = true)]
    async fn a_stop_waiting_for_the_last_request_or_stream_is_woken_when_it_ends() {
        let catalog = Catalog::builder().build(crate::tools::ServerInfo::new("t", "1")).unwrap();
        let sup = Supervisor::new(RuntimeConfig::default(), catalog);
        let request = sup.generations().enter_current(super::super::generations::Counted::InFlight);
        sup.stats().stream_started();
        let start = tokio::time::Instant::now();
        let deadline = start + Duration::from_secs(3600);
        let stats = Arc::clone(sup.stats());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(request);
            tokio::time::sleep(Duration::from_secs(1)).await;
            stats.stream_stopped(&crate::proto::stream::StreamStats::default());
        });
        assert!(sup.wait_until(deadline, |s| s.in_flight() <= 0).await);
        assert_eq!(start.elapsed(), Duration::from_secs(1), "woken when the request ended");
        assert!(sup.wait_until(deadline, Supervisor::is_idle).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2), "woken when the stream stopped");
        let never = sup.generations().enter_current(super::super::generations::Counted::InFlight);
        assert!(!sup.wait_until(start + Duration::from_secs(10), |s| s.in_flight() <= 0).await);
        assert_eq!(start.elapsed(), Duration::from_secs(10), "otherwise at its deadline");
        drop(never);
    }

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
        assert!(
            r.take(&heavy, Tick(0)).is_err(),
            "the flood did not reset the heavy caller's bucket"
        );
        assert!(
            r.take(&QuotaKey::Principal("late".into()), Tick(2_000)).is_ok(),
            "refilled buckets are forgotten"
        );
    }

    #[test]
    fn a_full_rate_table_is_swept_at_most_once_per_interval() {
        // A token a millisecond: every bucket is full again 1 ms after its use.
        let r = RateLimiter::new(1, 1000, 16);
        let key = |i: u32| QuotaKey::Address(std::net::IpAddr::from(i.to_be_bytes()));
        (0..16).for_each(|i| r.take(&key(i), Tick(0)).unwrap());
        assert!(
            r.take(&key(100), Tick(10)).is_ok(),
            "the first newcomer sweeps the refilled buckets out"
        );
        (101..116).for_each(|i| r.take(&key(i), Tick(10)).unwrap());
        assert!(
            r.take(&key(200), Tick(50)).is_err(),
            "40 ms after a sweep: no scan, the newcomer waits"
        );
        assert_eq!(r.table.lock().buckets.len(), 16);
        assert!(
            r.take(&key(201), Tick(10 + RATE_SWEEP_EVERY_MS)).is_ok(),
            "an interval later the table is swept again"
        );
    }
}
