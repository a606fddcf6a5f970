//! One actor per legacy session: drives a [`SessionCore`], runs requests as futures in its
//! own context (so completion and cancellation are serialized with everything else the
//! session does), and routes server-to-client requests and their answers.
//!
//! Time: one timer at a time, armed at the earliest of the core's
//! [`SessionCore::poll_timeout`] (idle expiry, or the earliest client-request deadline), the
//! retention ends of the streams it keeps as data (`actor::dormant`) and, while it is busy
//! and their bodies queue their ends, when it stops reading that queue (`streams.rs`), and
//! re-armed after every handled message when an earlier wake-up is wanted.
//!
//! This file holds the actor's state, its creation and its timer; the jobs are apart:
//! `messages.rs` (what the HTTP shell sends it), `handlers.rs` (how it handles each message),
//! `dispatch.rs` (requests, notifications, cancellation, responses), `streams.rs` (its
//! streams), `persist.rs` (its ledger record), `sleep.rs` (hibernation: kept as data while
//! it has nothing to do).

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::budget::{Charge, MemoryBudget};
use super::dormant::StreamHandle;
use super::durable::{LedgerCtx, SessionMeta};
use super::env::SessionEnv;
use super::generations::{GenCount, Generations};
use super::lifecycle::Phase;
use super::registry::{Inbox, InboxTicket, Registered, RegistryGuard};
use super::stream::{Drain as DrainStream, Emit, SessionLink, Stop as StopStream, StreamActor};
use crate::ledger::codec::{Handshake, RecordState};
use crate::pipeline::SessionLinks;
use crate::proto::deadlines::Deadlines;
use crate::proto::error::{Overload, Rejection};
use crate::proto::event_id::CursorSigner;
use crate::proto::ids::{SessionId, StreamId, Tick};
use crate::proto::jsonrpc::{ErrorObject, code, encode_notification};
use crate::proto::mcp::{LogLevel, method};
use crate::proto::session::{SessionCore, SessionLimits};
use crate::proto::stream::CloseReason;
use crate::proto::version::ProtocolVersion;

mod dispatch;
mod elsewhere;
mod handlers;
mod messages;
mod persist;
mod sleep;
mod streams;

use sleep::KeptHandshake;
pub(crate) use sleep::SleepingSession;

pub(crate) use messages::{
    Delete, EndedElsewhere, JsonReply, OpenGet, Post, PostOutcome, Relay, Relayed, Resume,
};
pub(crate) use messages::{EndOlderRequests, Shutdown};

/// Shell data of an in-flight request.
#[derive(Debug)]
pub(crate) struct RequestTask {
    spawn: Option<SpawnHandle>,
    cancel: CancellationToken,
    json: Option<oneshot::Sender<JsonReply>>,
    /// Counted in flight in the generation it was admitted under.
    generation: GenCount,
    /// Its parsed body's share of the request memory budget, given back when it ends.
    _charge: Option<crate::stats::RequestCharge>,
}

/// Shell data of a server-to-client request: where its answer goes and the stream it was
/// sent on (where a timeout's `notifications/cancelled` goes).
#[derive(Debug)]
pub(crate) struct ClientRequestRoute {
    reply: oneshot::Sender<Result<Value, ErrorObject>>,
    stream: Addr<StreamActor>,
}

/// The session actor.
pub struct SessionActor {
    core: SessionCore<RequestTask, StreamHandle, ClientRequestRoute>,
    /// The retention ends of the streams it keeps as data (`StreamHandle::Dormant`) whose
    /// connection has ended: its timer wakes for the earliest.
    dormant_until: Deadlines<(Tick, StreamId)>,
    /// Its kept streams' first connections' bodies: whether they queue their ends (busy) and
    /// when it stops reading that queue.
    bodies: streams::DormantBodies,
    principal: Option<Arc<str>>,
    /// Whose handles its tools see ([`crate::actor::registry::QuotaKey::owner`]).
    owner: Option<Arc<str>>,
    /// Its names in the ledger (the HMAC of its id under the current key, then under each
    /// previous one): handles its tools create record the first, and without authentication
    /// a list shows those recorded under any of them.
    names: Arc<[Arc<str>]>,
    signer: Arc<CursorSigner>,
    /// Its streams' settings that do not come from their generation.
    streams: SessionStreams,
    /// Where new streams find the current generation.
    gens: Arc<Generations>,
    /// Counted live in the generation it was opened (or revived) under (`None` once handed
    /// to its hibernating form).
    generation_count: Option<GenCount>,
    client_caps: Arc<Value>,
    sup: Arc<dyn SessionEnv>,
    /// Deregisters the session when dropped: taken explicitly before a DELETE or expiry is
    /// acknowledged, and dropped with the actor on every other exit path.
    guard: Option<RegistryGuard<SessionHandle>>,
    /// The one armed timer and the tick it is armed for.
    timer: Option<(Tick, SpawnHandle)>,
    /// The time of the message it is handling (one clock read a request, see [`Self::now`]).
    turn: Option<Tick>,
    /// Why the session ended, for JSON replies still owed.
    ended_by: Rejection,
    /// Where its streams report: a strong recipient of itself (the session stops only by
    /// `ctx.stop()`, never waiting for its addresses to drop; the cycle ends with the actor).
    link: SessionLink,
    /// Where its requests' questions and notifications go (the requests' [`Outbound`]s).
    links: Arc<SessionLinks>,
    /// The caller's share of the stream memory budget, charged by this session's streams.
    caller_budget: Arc<MemoryBudget>,
    /// The kept handshake, charged to the budgets for the session's life (`None` once handed
    /// to its hibernating form).
    handshake_charge: Option<Charge>,
    /// What its ledger record holds besides the core's state.
    meta: SessionMeta,
    /// Its handshake as its record states it (its capabilities also parsed, `client_caps`).
    handshake: KeptHandshake,
    ledger: Arc<LedgerCtx>,
    /// Told when the first record of this life is committed (`None` after).
    on_recorded: Option<tokio::sync::oneshot::Sender<()>>,
    /// Its tracing span: a prefix of its id's HMAC (never the id) and its generation.
    span: tracing::Span,
}

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if self.core.poll_timeout().is_some_and(|t| t <= self.sup.now()) {
            // Woken past a deadline (its expiry or parking): that comes before any request
            // already in its mailbox.
            self.on_timeout(ctx);
        } else {
            self.arm(ctx);
        }
        if self.sup.phase() != Phase::Serving {
            // Created or revived as a drain began, after the supervisor told every registered
            // session to stop: it stops too (its first record is on its way, so its id stays
            // valid for the next process).
            ctx.notify(Shutdown { _place: None });
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.guard.take();
        let (requests, streams) = self.core.terminate();
        for (_, r) in requests {
            r.handle.cancel.cancel();
            if let Some(tx) = r.handle.json {
                // The client is still waiting on its POST: say why no response comes.
                let _ = tx.send(Err(self.ended_by.clone()));
            }
        }
        let draining = self.ended_by == Rejection::Overloaded(Overload::Draining);
        self.dormant_until.clear();
        for s in streams {
            // Control messages: they must arrive, or the stream would outlive its session.
            // (A stream kept as data is closed with no writer: it stops as it is dropped, as
            // its actor would on either message.)
            let StreamHandle::Live(s) = s.handle else { continue };
            if draining {
                s.do_send(DrainStream);
            } else {
                s.do_send(StopStream(CloseReason::SessionEnded));
            }
        }
    }
}

/// What a session is created with.
pub(crate) struct SessionSeed {
    pub(crate) id: SessionId,
    pub(crate) principal: Option<Arc<str>>,
    /// Whose state handles its tools see (the caller that created or revived it).
    pub(crate) owner: Option<Arc<str>>,
    pub(crate) version: ProtocolVersion,
    /// Counted live in the generation it is opened (or revived) under.
    pub(crate) generation: GenCount,
    pub(crate) handshake: Handshake,
    /// Estimated bytes of the handshake the session keeps.
    pub(crate) kept_bytes: usize,
    /// The caller's share of the stream memory budget.
    pub(crate) caller_budget: Arc<MemoryBudget>,
    /// Its id's HMAC (its name in the ledger).
    pub(crate) hmac: Arc<str>,
    /// The `Origin` of its `initialize`.
    pub(crate) origin: Option<String>,
    /// Rebuilt from the ledger (after a restart or parking) rather than created.
    pub(crate) restore: Option<Restore>,
    /// Told when its first record is committed.
    pub(crate) recorded: Option<tokio::sync::oneshot::Sender<()>>,
}

/// What a session's life starts with, awake or kept as data ([`SessionSeed::begin`]).
struct Begun {
    core: SessionCore<RequestTask, StreamHandle, ClientRequestRoute>,
    /// Its names under previous keys (empty, without an allocation, unless a key was
    /// rotated); its current one is `meta.hmac`.
    previous_names: Box<[Arc<str>]>,
    meta: SessionMeta,
    /// The kept handshake's charge to the memory budgets.
    handshake: Charge,
}

impl SessionSeed {
    /// Its life's start at `now`, with `limits`: its core (in the life its restore says, with
    /// the log level it recorded), its names in the ledger, what its record holds besides its
    /// core's state, and its kept handshake charged to `sup`'s budget and its caller's share.
    fn begin(&self, sup: &dyn SessionEnv, limits: SessionLimits, now: Tick) -> Begun {
        let restore = self.restore.as_ref();
        let settings = self.generation.generation().settings.id;
        let incarnation = restore.map_or(0, |r| r.incarnation);
        let mut core = SessionCore::incarnate(self.version, settings, limits, now, incarnation);
        if let Some(level) = restore.and_then(|r| r.log_level) {
            core.set_log_level(level);
        }
        let meta = SessionMeta {
            hmac: Arc::clone(&self.hmac),
            principal: self.principal.clone(),
            owner: self.owner.clone(),
            origin: self.origin.clone(),
            created_ms: restore.map_or(now.0, |r| r.created_ms),
            ordered_name: self.id.minted_at().is_some(),
        };
        let mut handshake = sup.stream_env().budget.charge(Some(&self.caller_budget));
        handshake.set(self.kept_bytes);
        let previous_names = sup.stream_env().ledger.previous_session_hmacs(&self.id).into();
        Begun { core, previous_names, meta, handshake }
    }
}

/// What a session's streams take from the session rather than from their generation.
pub(crate) struct SessionStreams {
    /// Its version primes streams (>= 2025-11-25).
    primes: bool,
    hold_until_committed: bool,
    /// Its place in the rollout share (stable: from its id's HMAC).
    place: f64,
}

impl SessionStreams {
    /// Those of session `meta` at `version`, under `sup`'s settings.
    fn new(sup: &dyn SessionEnv, version: ProtocolVersion, meta: &SessionMeta) -> SessionStreams {
        SessionStreams {
            primes: version.primes_streams(),
            hold_until_committed: sup.config().ledger.durability == crate::ledger::Durability::Sync,
            place: crate::proto::rollout::share_place(&meta.hmac, meta.ordered_name),
        }
    }
}

/// What the ledger held for a session being revived.
pub(crate) struct Restore {
    /// Its new incarnation (one more than recorded).
    pub(crate) incarnation: u32,
    pub(crate) created_ms: u64,
    pub(crate) log_level: Option<LogLevel>,
    /// Its streams' records and events.
    pub(crate) streams: Vec<(crate::ledger::codec::StreamRecord, Vec<(u64, Bytes)>)>,
    /// Its durable copy is complete: it was last written by this process, or by one that
    /// stopped cleanly. Otherwise its last batch may be missing, and an open GET stream,
    /// which has no request to answer with the "restarted" error, is not restored (its
    /// resume gets 410; the client opens a new one).
    pub(crate) complete: bool,
}

/// What a request needs to reach a session without messaging it: its address, owner and
/// cursor signer. Every request's look-up clones it: one count, not a clone of each part (an
/// actix address's clone takes two allocations and its sender's bookkeeping).
#[derive(Debug, Clone)]
pub struct SessionHandle(Arc<SessionHandleParts>);

impl SessionHandle {
    pub(crate) fn new(parts: SessionHandleParts) -> SessionHandle {
        SessionHandle(Arc::new(parts))
    }
}

impl std::ops::Deref for SessionHandle {
    type Target = SessionHandleParts;

    fn deref(&self) -> &SessionHandleParts {
        &self.0
    }
}

/// The parts of a [`SessionHandle`].
#[derive(Debug)]
pub struct SessionHandleParts {
    /// The session actor.
    pub addr: Addr<SessionActor>,
    /// Requests' messages waiting in the session's mailbox.
    pub inbox: Arc<Inbox>,
    /// The owning principal (authentication on).
    pub principal: Option<Arc<str>>,
    /// Verifies cursors for this session and owner.
    pub signer: Arc<CursorSigner>,
    /// The caller's share of the stream memory budget.
    pub caller_budget: Arc<MemoryBudget>,
}

impl SessionHandle {
    /// Hand a request's message to the session, with the place in its [`Inbox`] taken when
    /// the session was found ([`Registry::enter`]): that place is the bound, so the message
    /// is queued past actix's own capacity (`do_send`). Every request shares the one address
    /// its handle holds, and actix parks an address that sends into a mailbox at its capacity
    /// (which counts every sender's messages, the stream ends the session hears included):
    /// `try_send` on it would refuse the next requests for one parked by another.
    ///
    /// # Errors
    /// [`Rejection::SessionNotFound`] when the session has stopped. A session that stops
    /// after this check drops the message unhandled, as one that stops with it queued does:
    /// its request is answered by the drop of its reply's sender.
    pub fn deliver<M>(
        &self,
        ticket: InboxTicket,
        message: impl FnOnce(InboxTicket) -> M,
    ) -> Result<(), Rejection>
    where
        M: actix::Message + Send + 'static,
        M::Result: Send,
        SessionActor: Handler<M>,
    {
        if !self.addr.connected() {
            tracing::debug!(target: "mcp_runtime::revive", "not found: the session stopped as the request reached it");
            return Err(Rejection::SessionNotFound);
        }
        self.addr.do_send(message(ticket));
        Ok(())
    }
}

impl Registered for SessionHandle {
    type Asleep = SleepingSession;

    fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    fn wake(
        asleep: Box<SleepingSession>,
    ) -> Result<(SessionHandle, crate::actor::registry::Starter), Box<SleepingSession>> {
        sleep::wake(asleep)
    }

    fn guard_of(asleep: &mut SleepingSession) -> &mut RegistryGuard<SessionHandle> {
        asleep.guard_mut()
    }

    fn belongs_to(slot: Result<&SessionHandle, &SleepingSession>, caller: Option<&str>) -> bool {
        let owner = match slot {
            Ok(h) => h.principal.as_deref(),
            Err(s) => s.principal(),
        };
        owner == caller
    }
}

impl SessionActor {
    pub(crate) fn new(
        seed: SessionSeed,
        signer: Arc<CursorSigner>,
        sup: Arc<dyn SessionEnv>,
        guard: RegistryGuard<SessionHandle>,
        addr: &Addr<SessionActor>,
    ) -> SessionActor {
        let limits = session_limits(&*sup, &seed.generation);
        let Begun { core, previous_names, meta, handshake } = seed.begin(&*sup, limits, sup.now());
        let names = session_names(&meta.hmac, &previous_names);
        let span = session_span(&meta.hmac, &seed.generation);
        let streams = SessionStreams::new(&*sup, seed.version, &meta);
        let ledger = Arc::clone(&sup.stream_env().ledger);
        let Handshake { requested_version, capabilities, client_info } = seed.handshake;
        let handshake_text =
            KeptHandshake::new(requested_version.as_deref(), &capabilities, &client_info);
        let mut actor = SessionActor {
            core,
            dormant_until: Deadlines::default(),
            bodies: streams::DormantBodies::default(),
            principal: seed.principal,
            owner: seed.owner,
            names,
            signer,
            streams,
            gens: Arc::clone(sup.generations()),
            generation_count: Some(seed.generation),
            client_caps: Arc::new(capabilities),
            sup,
            guard: Some(guard),
            timer: None,
            turn: None,
            ended_by: Rejection::SessionNotFound,
            link: Arc::new(addr.clone().recipient()),
            links: session_links(addr),
            caller_budget: seed.caller_budget,
            handshake_charge: Some(handshake),
            meta,
            handshake: handshake_text,
            ledger,
            on_recorded: seed.recorded,
            span,
        };
        if let Some(r) = seed.restore {
            let first_seq = crate::proto::ids::Seq(u64::from(actor.core.incarnation()) << 32);
            actor.restore_streams(r.streams, r.complete, first_seq);
        }
        actor
    }

    /// The time: the handled message's when one set it ([`Self::turn`]), else the clock's.
    /// A turn is short next to every deadline it feeds; a long one (a large batch, a slow
    /// tool's first poll) only delays what it arms by its own length.
    pub(super) fn now(&self) -> Tick {
        self.turn.unwrap_or_else(|| self.sup.now())
    }

    /// Arm the timer for the next deadline (the core's, a kept stream's retention end, or the
    /// check that switches its bodies' queueing of their ends off), unless one is armed at or
    /// before it.
    pub(super) fn arm(&mut self, ctx: &mut Context<Self>) {
        self.record_if_due();
        let kept = self.dormant_until.first().map(|(t, _)| *t);
        let Some(at) =
            [self.core.poll_timeout(), kept, self.bodies.check].into_iter().flatten().min()
        else {
            return;
        };
        if self.timer.as_ref().is_some_and(|(t, _)| *t <= at) {
            return;
        }
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let delay = Duration::from_millis(at.0.saturating_sub(self.now().0));
        let h = ctx.run_later(delay, |act, ctx| {
            act.timer = None;
            act.on_timeout(ctx);
        });
        self.timer = Some((at, h));
    }

    pub(super) fn on_timeout(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let now = self.sup.now();
        if self.bodies.check_due(now) {
            self.switch_queueing(false, now);
        }
        self.end_dormant_retentions();
        let due = self.core.handle_timeout(now);
        self.sup.stats().client_requests_timed_out(due.timed_out.len());
        let secs = self.sup.config().sessions.client_request_timeout_secs;
        for (id, req) in due.timed_out {
            tracing::debug!(method = %req.method, "client request timed out");
            let msg = format!("the client did not answer {} within {secs} s", req.method);
            let _ = req.handle.reply.send(Err(ErrorObject::new(code::REQUEST_TIMEOUT, msg)));
            // Tell the client too; best effort (the stream may be busy or gone).
            let cancelled = encode_notification(
                method::CANCELLED,
                Some(&json!({"requestId": id.to_value(), "reason": "timed out"})),
            );
            let _ = req.handle.stream.try_send(Emit { json: cancelled, last: false });
        }
        if due.expired {
            tracing::debug!("session expired");
            self.record_end(RecordState::Expired, true);
            self.guard.take();
            ctx.stop();
            return;
        }
        if due.park && self.park() {
            ctx.stop();
            return;
        }
        if due.hibernate && self.hibernate(ctx) {
            return;
        }
        self.arm(ctx);
    }
}

/// A session's bounds: the host's settings, and its generation's.
fn session_limits(sup: &dyn SessionEnv, generation: &GenCount) -> SessionLimits {
    let cfg = sup.config();
    let shared = sup.stream_env().ledger.ledger.shared;
    SessionLimits {
        idle_ttl_ms: cfg.idle_ttl_ms(),
        max_in_flight: generation.generation().settings.max_in_flight,
        max_retained_streams: cfg.sessions.max_retained_streams,
        max_retained_bytes: cfg.sessions.max_retained_bytes,
        client_request_timeout_ms: cfg.sessions.client_request_timeout_secs.saturating_mul(1000),
        park_after_ms: cfg.sessions.park_after_secs.saturating_mul(1000),
        idle_ends_in_ledger: shared,
        // Not on a shared ledger: another host may serve the session meanwhile, and what
        // this one kept of it would be stale.
        hibernate_after_ms: match cfg.sessions.hibernate_after_ms {
            0 => u64::MAX,
            _ if shared => u64::MAX,
            ms => ms,
        },
    }
}

/// Its tracing span: the tail of its id's HMAC (never the id; the head may be a time many
/// sessions share) and its generation.
fn session_span(hmac: &str, generation: &GenCount) -> tracing::Span {
    let tail = crate::proto::ids::session_hmac_tail(hmac);
    tracing::info_span!("session", hmac = %tail, generation = generation.generation().settings.id.0)
}

/// Its names in the ledger, as its actor holds them: `hmac` (its id's under the current key),
/// then `previous` (its id's under each previous key).
fn session_names(hmac: &Arc<str>, previous: &[Arc<str>]) -> Arc<[Arc<str>]> {
    std::iter::once(hmac).chain(previous).cloned().collect()
}

/// Where its requests' questions and notifications go.
fn session_links(addr: &Addr<SessionActor>) -> Arc<SessionLinks> {
    Arc::new(SessionLinks { ask: addr.clone().recipient(), get_stream: addr.clone().recipient() })
}
