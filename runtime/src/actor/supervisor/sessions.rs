//! Sessions as the supervisor makes them: lookup, creation with its handshake record, the
//! session actor's start, the revive of a recorded session, and the settling of a session's
//! last writes.

use std::sync::Arc;

use parking_lot::Mutex;

use actix::{Actor, AsyncContext};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::actor::budget::MemoryBudget;
use crate::actor::durable;
use crate::actor::env::Settle;
use crate::actor::lifecycle::Phase;
use crate::actor::registry::{Inbox, QuotaKey, SlotLimits};
use crate::actor::session::SessionHandle;
use crate::actor::session::{
    Restore, SessionActor, SessionHandleParts, SessionSeed, SleepingSession,
};
use crate::ledger::codec::{self, Handshake, Record};
use crate::ledger::{Named, Op};
use crate::proto::error::{Overload, Quota, Rejection};
use crate::proto::ids::{Generation, SessionId};
use crate::proto::jsonrpc::Incoming;
use crate::proto::mcp::InitializeRequest;
use crate::proto::version::ProtocolVersion;

use super::Supervisor;
use super::quotas::{self, RATE_WINDOW_MS};
use super::revive::{SessionFound, migration_ops, read_session};

impl Supervisor {
    /// A session whose id was never handed out (its first record was not committed in time):
    /// it stops. Its record, if it lands later, names a session nobody knows; it expires.
    pub(crate) fn abandon_unrecorded(&self, id: &SessionId) {
        // Most often still kept as data (a new session is, until its first request): it is
        // taken out and stopped as data, without waking it (its first record is queued
        // already; the stop adds its LRU row). The ledger is slow or failing then, for every
        // handshake at once.
        if let Some(asleep) = self.registry.take_asleep(id) {
            asleep.shut_down();
            return;
        }
        if let Some((h, place)) = self.registry.enter_control(id) {
            // Control message: it must arrive (its inbox may be full).
            h.addr.do_send(crate::actor::session::Shutdown { _place: Some(place) });
        }
    }

    /// Live sessions.
    #[must_use]
    pub fn session_count(&self) -> usize {
        self.registry.len()
    }

    /// Of the live sessions, those hibernating (kept as data, no actor).
    #[must_use]
    pub fn sessions_hibernating(&self) -> usize {
        self.registry.sleeping()
    }

    /// Sessions kept as data (new ones from their handshake on, idle ones as they hibernate)
    /// and woken since the start.
    #[must_use]
    pub fn sessions_hibernated_and_woken(&self) -> (u64, u64) {
        self.registry.hibernations_and_wakes()
    }

    /// Start the task that wakes hibernating sessions at their deadlines (expiry, parking),
    /// where their actors then end or park them, unless it runs: on the System's arbiter (it
    /// outlives every worker), as long as the supervisor lives. Called on an actix arbiter.
    pub(crate) fn start_sleep_sweeper(&self) {
        use std::sync::atomic::Ordering;
        /// Longest sleep of the sweeper: a deadline is met within this (a session hibernated
        /// meanwhile may have an earlier one than the sweeper knew).
        const ROUND_MS: u64 = 1_000;
        /// Most sessions woken per round: a burst of deadlines does not hold the arbiter.
        const WAKE_PER_ROUND: usize = 256;
        /// Clears the running flag however the task ends (its arbiter stopping included).
        struct Running(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        // Read first: called at every hibernation and every handshake, it runs nearly always.
        if self.sleep_sweeper.load(Ordering::Acquire)
            || self.sleep_sweeper.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Some(me) = self.me.get().cloned() else { return };
        let running = Running(Arc::clone(&self.sleep_sweeper));
        let sweep = async move {
            let _running = running;
            loop {
                let Some(sup) = me.upgrade() else { return };
                let now = sup.now();
                let woken = sup.registry.wake_due(now, WAKE_PER_ROUND);
                let next = sup.registry.next_wake().map_or(ROUND_MS, |t| t.0.saturating_sub(now.0));
                drop(sup);
                if woken == WAKE_PER_ROUND {
                    tokio::task::yield_now().await;
                } else {
                    let ms = next.clamp(1, ROUND_MS);
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
            }
        };
        // Refused only while the System stops: the dropped task clears the flag.
        let _ = actix_rt::System::current().arbiter().spawn(sweep);
    }

    /// Find a session for a caller. Another caller's session is reported as not found.
    ///
    /// # Errors
    /// [`Rejection::SessionNotFound`].
    pub fn lookup(
        &self,
        id: &SessionId,
        principal: Option<&Arc<str>>,
    ) -> Result<(SessionHandle, crate::actor::registry::InboxTicket), Rejection> {
        let found = self.registry.enter(id, principal.map(|p| &**p));
        let (h, ticket) = found.ok_or(Rejection::SessionNotFound)??;
        Ok((h, ticket))
    }

    /// A POST of `caller`'s carrying no request (notifications, answers: `incoming`) to a
    /// hibernating session: taken without waking it when it may be
    /// ([`SleepingSession::try_take_use`]). `false`: it goes the usual way (a lookup, which wakes
    /// the session).
    pub(crate) fn try_take_by_sleeping(
        &self,
        id: &SessionId,
        caller: Option<&Arc<str>>,
        incoming: &Incoming,
    ) -> bool {
        let (now, ttl) = (self.now(), self.cfg.idle_ttl_ms());
        let batch = matches!(incoming, Incoming::Batch(_));
        self.registry
            .try_take_asleep(id, caller.map(|p| &**p), now, |s| s.try_take_use(now, ttl, batch))
    }

    /// A DELETE of `caller`'s hibernating session: ended as data, without waking it, as its
    /// actor would end it (its end recorded and announced; gone from the table before the
    /// answer). Counted as settling before it leaves the table, so a request that misses it
    /// does not revive it from its record meanwhile. `false`: it goes the usual way (a lookup,
    /// which wakes the session).
    pub(crate) fn try_end_sleeping(&self, id: &SessionId, caller: Option<&Arc<str>>) -> bool {
        let now = self.now();
        let begins = |s: &SleepingSession| self.settling_begins(s.hmac(), Settle::Ended);
        let Some(asleep) = self.registry.try_take_out_asleep(id, caller.map(|p| &**p), now, begins)
        else {
            return false;
        };
        self.settling_writes(asleep.hmac(), asleep.deleted_ops(self, now));
        let hmac = crate::proto::ids::session_hmac_tail(asleep.hmac());
        tracing::debug!(hmac, "a hibernating session was deleted");
        // Dropped once its end is handed over: the drop frees its slot, which a drain waits
        // for.
        drop(asleep);
        true
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
        init: InitializeRequest,
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
        // Across hosts (a shared ledger), after this host's own checks: a session they refuse
        // is not counted. A refusal here drops the reservation; one of the rate takes back
        // the place the caller's session count gave.
        let owner = self.stream_env.ledger.ledger.shared.then(|| reservation.owner()).flatten();
        if let Some(owner) = &owner {
            let q = &self.cfg.quotas;
            let index = codec::caller_sessions_index(owner);
            let max = q.sessions_per_principal;
            self.admit_across_hosts(&self.caller_sessions, owner, index, max, Quota::Sessions)?;
            let rate =
                usize::try_from(q.session_rate_per_sec.max(q.session_burst)).unwrap_or(usize::MAX);
            let index = codec::caller_rate_index(owner);
            let rated =
                self.admit_across_hosts(&self.caller_rate, owner, index, rate, Quota::SessionRate);
            if let Err(refused) = rated {
                self.caller_sessions.lock().unadmit(owner);
                return Err(refused);
            }
            // Counted in the rate's window on every host, committed before the session's
            // record (the writer keeps order), so before its id goes out.
            let index = codec::caller_rate_index(owner);
            let now = self.now().0;
            let member = URL_SAFE_NO_PAD.encode(crate::rng::bytes::<12>());
            self.stream_env.ledger.writer.submit(vec![
                Op::IndexTrim { index: index.clone(), below: now },
                Op::IndexAdd {
                    index: index.clone(),
                    member,
                    score: now + RATE_WINDOW_MS,
                    expires_ms: now + 2 * RATE_WINDOW_MS,
                },
                Op::Expire { name: index, of: Named::Index, expires_ms: now + 2 * RATE_WINDOW_MS },
            ]);
        }
        let version = ProtocolVersion::negotiate(init.requested_version.as_deref());
        let generation = self.gens.enter_current(crate::actor::generations::Counted::Session);
        let (made_by, random) =
            (u64::from(generation.generation().settings.id.0), crate::rng::bytes());
        let at = self.cfg.ledger.ordered_session_ids().then(|| self.now().0);
        let id = SessionId::mint(made_by, at, &random);
        let handshake = Handshake {
            requested_version: init.requested_version,
            capabilities: init.capabilities,
            client_info: init.client_info,
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

    /// A caller's sessions across the hosts of a shared ledger, at most `max`: those its
    /// `index` in the ledger counts (scored in the future), read again in the background once
    /// stale (see [`super::quotas`]); past it, refused for `cause`.
    fn admit_across_hosts<T: quotas::AcrossHosts>(
        &self,
        counts: &Arc<Mutex<T>>,
        owner: &Arc<str>,
        index: String,
        max: usize,
        cause: Quota,
    ) -> Result<(), Rejection> {
        let now = self.now().0;
        let admit = counts.lock().admit(owner, max, now);
        if admit.read {
            let (counts, cx, owner) =
                (Arc::clone(counts), Arc::clone(&self.stream_env.ledger), Arc::clone(owner));
            actix_rt::spawn(async move {
                // Once what this host queued (the entry of the handshake that began the read
                // included) is committed; a writer that gives up leaves the read to count what
                // is there.
                let _ = cx.writer.wait_committed(cx.writer.barrier()).await;
                let read =
                    cx.ledger.reads.run(move |store| store.index_count_from(&index, now, now));
                let found = read.await.map_err(|e| {
                    tracing::warn!(error = %e, "cannot count a caller's sessions on the shared ledger");
                });
                counts.lock().read_done(&owner, found.ok());
            });
        }
        if admit.ok {
            Ok(())
        } else {
            let retry_after_s = match cause {
                Quota::Sessions => Overload::Sessions.retry_after_s(),
                _ => 1,
            };
            Err(Rejection::QuotaExceeded { cause, retry_after_s })
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn seed(
        &self,
        id: SessionId,
        principal: Option<Arc<str>>,
        version: ProtocolVersion,
        generation: crate::actor::generations::GenCount,
        handshake: Handshake,
        kept_bytes: usize,
        caller_budget: &Arc<MemoryBudget>,
        origin: Option<String>,
        restore: Option<Restore>,
    ) -> SessionSeed {
        let hmac = self.stream_env.ledger.session_hmac(&id);
        SessionSeed {
            id,
            principal,
            owner: None,
            version,
            generation,
            handshake,
            kept_bytes,
            caller_budget: Arc::clone(caller_budget),
            hmac,
            origin,
            restore,
            recorded: None,
        }
    }

    /// Start a session: a new one is kept as data until its first request when sessions
    /// hibernate ([`SleepingSession::born`]); a revived one, or any when they do not, gets its
    /// actor now.
    pub(super) fn start_session(
        self: &Arc<Self>,
        mut seed: SessionSeed,
        reservation: crate::actor::registry::Reservation<SessionHandle>,
    ) {
        seed.owner = reservation.owner();
        if let Some(limits) = SleepingSession::born_limits(&seed, &**self) {
            SleepingSession::born(seed, limits, Arc::clone(self) as _, reservation);
            return;
        }
        let sup = Arc::clone(self);
        let signer = self.key.session_signer(&seed.id, seed.principal.as_deref());
        SessionActor::create(move |ctx| {
            // actix's own capacity, as the session's inbox (which is the bound: requests and
            // relays take a place there, then `do_send`, which this capacity never refuses).
            ctx.set_mailbox_capacity(sup.config().sessions.mailbox);
            let inbox = Inbox::new(sup.config().sessions.mailbox);
            let handle = SessionHandle::new(SessionHandleParts {
                addr: ctx.address(),
                inbox,
                principal: seed.principal.clone(),
                signer: Arc::clone(&signer),
                caller_budget: Arc::clone(&seed.caller_budget),
            });
            let guard = reservation.insert(seed.id.clone(), handle, Arc::clone(&seed.hmac));
            SessionActor::new(seed, signer, sup, guard, &ctx.address())
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
            Some(Settle::Ended) => {
                tracing::debug!(target: "mcp_runtime::revive", hmac = crate::proto::ids::session_hmac_tail(&hmac), "not revived: it just ended here");
                return Ok(());
            }
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
            // Counted by the revive's read (the record's own number raised by one at least).
            incarnation: record.incarnation,
            created_ms: record.created_ms,
            log_level: record.log_level.as_deref().and_then(crate::proto::mcp::LogLevel::parse),
            streams,
        };
        // Its names: the current one, and the one a previous key gave it (found under it).
        let names: Vec<&str> = std::iter::once(&*hmac)
            .chain(Some(record.session_hmac.as_str()).filter(|h| *h != &*hmac))
            .collect();
        if cx.ledger.durable {
            // This life (its run, its use) is committed before the session can be found, so
            // a ledger that cannot commit refuses the revive; its number was counted already.
            // (Under this shard's revive lock: a second request for it here waits.)
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
            // Another host serving it may have recorded a later use: the later wins.
            let (key, value) = (
                codec::session_key(&hmac),
                bytes::Bytes::from(codec::encode(&Record::Session(life))),
            );
            let put = if cx.ledger.shared {
                crate::ledger::Op::PutLater { key, value, expires_ms }
            } else {
                crate::ledger::Op::Put { key, value, expires_ms }
            };
            // Back in memory: out of the cap's index on a ledger of its own, under its name
            // and the one a previous key gave it, in its new life's batch.
            let ops: Vec<_> = std::iter::once(put)
                .chain(names.iter().filter_map(|h| durable::lru_leave(cx, h)))
                .collect();
            if let Err(e) = cx.writer.submit_and_wait(ops).await {
                // Not revived (not committed in time, or given up on as the process stops).
                // The batch may still commit: its rows come back after it (the writer keeps
                // order), so the session, out of memory, stays counted and evictable.
                let back: Vec<_> = names
                    .iter()
                    .filter_map(|h| durable::lru_enter(cx, h, record.last_used_ms))
                    .collect();
                if !back.is_empty() {
                    cx.writer.submit(back);
                }
                return Err(Rejection::from(e));
            }
        } else {
            let leave: Vec<_> = names.iter().filter_map(|h| durable::lru_leave(cx, h)).collect();
            if !leave.is_empty() {
                cx.writer.submit(leave);
            }
        }
        let generation = self.gens.enter_restored(
            Generation(record.generation),
            self.now().0,
            crate::actor::generations::Counted::Session,
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
        self.recheck_end(hmac);
        Ok(())
    }

    /// The active session recorded under `hmac` for `principal`, with its streams, and whether
    /// the run that last wrote it is complete; read on a reader thread. A session recorded
    /// before a key rotation, and never since (a record under the current key, even a
    /// tombstone, is the truth), is found under its previous HMAC and its streams' copy to
    /// the current one is queued (the session's own record follows with its first write).
    pub(super) async fn read_for_revive(
        &self,
        id: &SessionId,
        hmac: &Arc<str>,
        principal: Option<Arc<str>>,
    ) -> Result<(Option<SessionFound>, bool), crate::ledger::ReadError> {
        let cx = Arc::clone(&self.stream_env.ledger);
        let previous = cx.previous_session_hmacs(id);
        let shared = cx.ledger.shared;
        let (now, most, this_run, ttl, stream_ttl) = (
            self.now().0,
            self.cfg.sessions.max_retained_streams + self.cfg.sessions.max_in_flight + 1,
            cx.ledger.run,
            cx.idle_ttl_ms,
            cx.stream_ttl_ms,
        );
        let claim_ms = cx.ledger.hold_ms(crate::actor::follow::CLAIM_MS);
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
                let Some((record, streams)) = found.as_mut() else { return Ok((None, complete)) };
                if !shared {
                    // One process: the next life is numbered after the recorded one (its
                    // record is committed before the session can be found), and every stream
                    // recorded is this ledger's to restore.
                    record.incarnation = record.incarnation.saturating_add(1);
                    return Ok((found, complete));
                }
                // Another live host's streams stay its own (it still appends to them); a gone
                // host's are taken over.
                let mut others: Vec<u64> = streams
                    .iter()
                    .map(|(s, _)| s.run)
                    .filter(|r| *r != 0 && *r != this_run)
                    .collect();
                others.sort_unstable();
                others.dedup();
                let mut alive = Vec::new();
                for run in others {
                    if store.run_alive(run, &codec::session_key(&hmac))? {
                        alive.push(run);
                    }
                }
                streams.retain(|(s, _)| !alive.contains(&s.run));
                // A gone host's stream still open is claimed: one host takes it over (and
                // answers its unfinished request), the others follow that one.
                let at = crate::actor::follow::LookUp {
                    this_run,
                    now_ms: now,
                    stream_ttl_ms: stream_ttl,
                    idle_ttl_ms: ttl,
                    claim_ms,
                };
                let mut kept = Vec::with_capacity(streams.len());
                for (mut s, events) in std::mem::take(streams) {
                    let orphan = s.run != this_run && s.close_reason.is_none() && !s.shadow;
                    if !orphan || crate::actor::follow::claim(store, &mut s, &at)? {
                        kept.push((s, events));
                    }
                }
                *streams = kept;
                // This life's number, counted: two hosts reviving it at once never share one
                // (its stream ids and event numbers start there).
                let life = store.incr(
                    &codec::incarnation_key(&hmac),
                    u64::from(record.incarnation),
                    now.saturating_add(ttl.saturating_mul(2)),
                    now,
                )?;
                record.incarnation = u32::try_from(life).unwrap_or(u32::MAX);
                Ok((found, complete))
            })
            .await
    }

    /// Announce a session's last writes of this life (it ended, or parks): until `ops` are
    /// committed a revive does not read the record they replace.
    pub(crate) fn settle(&self, hmac: &Arc<str>, why: Settle, ops: Vec<crate::ledger::Op>) {
        self.settling_begins(hmac, why);
        self.settling_writes(hmac, ops);
    }

    /// `hmac`'s last writes are about to go (see [`Self::settle`]): counted until
    /// [`Self::settling_writes`] hands them over and they commit.
    fn settling_begins(&self, hmac: &Arc<str>, why: Settle) {
        self.settling
            .lock()
            .entry(Arc::clone(hmac))
            .and_modify(|(w, n)| (*w, *n) = (why, *n + 1))
            .or_insert((why, 1));
    }

    /// Hand over the writes [`Self::settling_begins`] counted; uncounted once committed.
    fn settling_writes(&self, hmac: &Arc<str>, ops: Vec<crate::ledger::Op>) {
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
}
