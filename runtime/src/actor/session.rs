//! One actor per legacy session: drives a [`SessionCore`], runs requests as futures in its
//! own context (so completion and cancellation are serialized with everything else the
//! session does), and routes server-to-client requests and their answers.
//!
//! Time: one timer at a time, armed at the core's [`SessionCore::poll_timeout`] (idle expiry,
//! or the earliest client-request deadline) and re-armed after every handled message when
//! the core wants an earlier wake-up.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::body::SseBody;
use super::budget::{Charge, MemoryBudget};
use super::durable::{self, LedgerCtx, SessionMeta, StreamLedger};
use super::env::{SessionEnv, Settle};
use super::generations::{Counted, GenCount, Generations};
use super::lifecycle::Phase;
use super::registry::{Inbox, InboxTicket, Registered, RegistryGuard};
use super::stream::{
    Attach, Close, Drain as DrainStream, Emit, SessionLink, Stop as StopStream, StreamActor,
    StreamLinks, StreamReport,
};
use crate::ledger::codec::{Handshake, RecordState};
use crate::pipeline::{self, Caller, First, GetStream, Outbound, ServerRequest, SessionLinks};
use crate::proto::admission::ReplyMode;
use crate::proto::error::{Overload, Rejection};
use crate::proto::event_id::{CursorSigner, EventId};
use crate::proto::ids::{Generation, JsonRpcId, SessionId, StreamId, Tick};
use crate::proto::jsonrpc::{
    ErrorObject, Incoming, Message, code, encode_error, encode_notification, encode_request,
    encode_result,
};
use crate::proto::mcp::{LogLevel, method};
use crate::proto::replay::WindowLimits;
use crate::proto::rollout::{StreamMode, StreamPurpose};
use crate::proto::route::{Era, Route};
use crate::proto::session::{ClientRequestRefused, SessionCore, SessionLimits};
use crate::proto::stream::{CloseReason, RestoredStream, StreamCore, StreamKind, StreamSettings};
use crate::proto::version::ProtocolVersion;
use crate::tools::Dispatch;

/// The answer to a request sent as JSON: its encoded response, or why there is none (the
/// session ended). A dropped sender means the request was cancelled (no response is owed).
pub type JsonReply = Result<Bytes, Rejection>;

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
    core: SessionCore<RequestTask, Addr<StreamActor>, ClientRequestRoute>,
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
    /// Counted live in the generation it was opened (or revived) under.
    _generation: GenCount,
    client_caps: Arc<Value>,
    sup: Arc<dyn SessionEnv>,
    /// Deregisters the session when dropped: taken explicitly before a DELETE or expiry is
    /// acknowledged, and dropped with the actor on every other exit path.
    guard: Option<RegistryGuard<SessionHandle>>,
    /// The one armed timer and the tick it is armed for.
    timer: Option<(Tick, SpawnHandle)>,
    /// Why the session ended, for JSON replies still owed.
    ended_by: Rejection,
    /// Where its streams report: a strong recipient of itself (the session stops only by
    /// `ctx.stop()`, never waiting for its addresses to drop; the cycle ends with the actor).
    link: SessionLink,
    /// Where its requests' questions and notifications go (the requests' [`Outbound`]s).
    links: Arc<SessionLinks>,
    /// The caller's share of the stream memory budget, charged by this session's streams.
    caller_budget: Arc<MemoryBudget>,
    /// The kept handshake, charged to the budgets for the session's life.
    _handshake: Charge,
    /// What its ledger record holds besides the core's state.
    meta: SessionMeta,
    /// `clientInfo` and the requested version, for the record.
    client_info: Value,
    requested_version: Option<String>,
    ledger: Arc<LedgerCtx>,
    /// Told when the first record of this life is committed (`None` after).
    on_recorded: Option<tokio::sync::oneshot::Sender<()>>,
    /// Its tracing span: a prefix of its id's HMAC (never the id) and its generation.
    span: tracing::Span,
}

/// What a POST produced.
#[derive(Debug)]
pub enum PostOutcome {
    /// Notification(s) or response(s) only: 202.
    Accepted,
    /// A JSON reply; the sender is dropped if the request is cancelled.
    Json(oneshot::Receiver<JsonReply>),
    /// An SSE reply.
    Sse(SseBody),
    /// A 2025-03-26 batch: one JSON reply per request, in order.
    Batch(Vec<oneshot::Receiver<JsonReply>>),
}

/// POSTed message(s) for this session.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Post {
    /// The message(s).
    pub incoming: Incoming,
    /// Reply format for requests.
    pub reply_mode: ReplyMode,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<Result<PostOutcome, Rejection>>,
    /// Its place in the session's inbox, given back when the message is dropped.
    pub ticket: InboxTicket,
    /// The request memory its parsed body holds (`None` without a request): moved to the
    /// request (a batch's split evenly between its requests), given back when the session
    /// has answered it; a refused one's at once.
    pub charge: Option<crate::stats::RequestCharge>,
}

/// Open a new standalone GET stream (replacing any previous one).
#[derive(Message)]
#[rtype(result = "()")]
pub struct OpenGet {
    /// Where the body goes.
    pub reply: oneshot::Sender<Result<SseBody, Rejection>>,
    /// Its place in the session's inbox, given back when the message is dropped.
    pub ticket: InboxTicket,
}

/// Resume the stream named by a verified cursor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resume {
    /// The verified cursor.
    pub event: EventId,
    /// Where the body goes.
    pub reply: oneshot::Sender<Result<SseBody, Rejection>>,
    /// Its place in the session's inbox, given back when the message is dropped.
    pub ticket: InboxTicket,
}

/// End the session (HTTP DELETE).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Delete {
    /// Acknowledgement.
    pub reply: oneshot::Sender<Result<(), Rejection>>,
    /// Its place in the session's inbox, given back when the message is dropped.
    pub ticket: InboxTicket,
}

/// A rollback's drain is over: end the requests admitted under a generation older than
/// `before` with the "drained" error (`-32010`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct EndOlderRequests {
    pub(crate) before: Generation,
}

/// Stop the session (process shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.arm(ctx);
        if self.sup.phase() != Phase::Serving {
            // Created or revived as a drain began, after the supervisor told every registered
            // session to stop: it stops too (its first record is on its way, so its id stays
            // valid for the next process).
            ctx.notify(Shutdown);
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
        for s in streams {
            // Control messages: they must arrive, or the stream would outlive its session.
            if draining {
                s.handle.do_send(DrainStream);
            } else {
                s.handle.do_send(StopStream(CloseReason::SessionEnded));
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
    pub(crate) signer: Arc<CursorSigner>,
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

/// What a session's streams take from the session rather than from their generation.
pub(crate) struct SessionStreams {
    /// Its version primes streams (>= 2025-11-25).
    primes: bool,
    hold_until_committed: bool,
    /// Its place in the rollout share (stable: from its id's HMAC).
    place: f64,
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
/// cursor signer.
#[derive(Debug, Clone)]
pub struct SessionHandle {
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
    /// the session was found ([`Registry::enter`]).
    ///
    /// # Errors
    /// [`Rejection::Overloaded`] (`503`, mailbox) when the mailbox is full;
    /// [`Rejection::SessionNotFound`] when the session has stopped.
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
        self.addr.try_send(message(ticket)).map_err(|e| match e {
            SendError::Full(_) => Rejection::Overloaded(Overload::Mailbox),
            SendError::Closed(_) => Rejection::SessionNotFound,
        })
    }
}

impl Registered for SessionHandle {
    fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }
}

impl SessionActor {
    pub(crate) fn new(
        seed: SessionSeed,
        sup: Arc<dyn SessionEnv>,
        guard: RegistryGuard<SessionHandle>,
        addr: &Addr<SessionActor>,
    ) -> SessionActor {
        let cfg = sup.config();
        let limits = SessionLimits {
            idle_ttl_ms: cfg.idle_ttl_ms(),
            max_in_flight: seed.generation.generation().settings.max_in_flight,
            max_retained_streams: cfg.sessions.max_retained_streams,
            max_retained_bytes: cfg.sessions.max_retained_bytes,
            client_request_timeout_ms: cfg
                .sessions
                .client_request_timeout_secs
                .saturating_mul(1000),
            park_after_ms: cfg.sessions.park_after_secs.saturating_mul(1000),
        };
        let streams = SessionStreams {
            primes: seed.version.primes_streams(),
            hold_until_committed: cfg.ledger.durability == crate::ledger::Durability::Sync,
            place: crate::proto::rollout::share_place(&seed.hmac),
        };
        let mut handshake = sup.stream_env().budget.charge(Some(&seed.caller_budget));
        handshake.set(seed.kept_bytes);
        let now = sup.now();
        let incarnation = seed.restore.as_ref().map_or(0, |r| r.incarnation);
        let names = std::iter::once(Arc::clone(&seed.hmac))
            .chain(sup.stream_env().ledger.previous_session_hmacs(&seed.id))
            .collect();
        let mut core = SessionCore::incarnate(
            seed.id,
            seed.version,
            seed.generation.generation().settings.id,
            limits,
            now,
            incarnation,
        );
        if let Some(level) = seed.restore.as_ref().and_then(|r| r.log_level) {
            core.set_log_level(level);
        }
        let span = tracing::info_span!("session", hmac = %&seed.hmac[..seed.hmac.len().min(12)], generation = seed.generation.generation().settings.id.0);
        let meta = SessionMeta {
            hmac: seed.hmac,
            principal: seed.principal.clone(),
            origin: seed.origin,
            created_ms: seed.restore.as_ref().map_or(now.0, |r| r.created_ms),
        };
        let ledger = Arc::clone(&sup.stream_env().ledger);
        let Handshake { requested_version, capabilities, client_info } = seed.handshake;
        let mut actor = SessionActor {
            core,
            principal: seed.principal,
            owner: seed.owner,
            names,
            signer: seed.signer,
            streams,
            gens: Arc::clone(sup.generations()),
            _generation: seed.generation,
            client_caps: Arc::new(capabilities),
            sup,
            guard: Some(guard),
            timer: None,
            ended_by: Rejection::SessionNotFound,
            link: Arc::new(addr.clone().recipient()),
            links: Arc::new(SessionLinks {
                ask: addr.clone().recipient(),
                get_stream: addr.clone().recipient(),
            }),
            caller_budget: seed.caller_budget,
            _handshake: handshake,
            meta,
            client_info,
            requested_version,
            ledger,
            on_recorded: seed.recorded,
            span,
        };
        if let Some(r) = seed.restore {
            actor.restore_streams(r.streams, r.complete);
        }
        actor
    }

    /// Rebuild the streams the ledger held (each as a stream actor with no connection).
    fn restore_streams(
        &mut self,
        streams: Vec<(crate::ledger::codec::StreamRecord, Vec<(u64, Bytes)>)>,
        complete: bool,
    ) {
        use crate::ledger::codec::StreamKindRecord;
        use crate::proto::ids::Seq;
        let first_seq = Seq(u64::from(self.core.incarnation()) << 32);
        for (record, events) in streams {
            let sid = StreamId(record.stream);
            if record.shadow {
                // Its client never got a cursor: nothing to resume.
                self.forget_streams([sid]);
                continue;
            }
            let closed = record.close_reason.as_deref().map(durable::reason_from);
            let (kind, request) = match record.kind {
                StreamKindRecord::Get if closed.is_none() && !complete => {
                    self.forget_streams([sid]);
                    continue;
                }
                StreamKindRecord::Get => (StreamKind::Get, None),
                StreamKindRecord::Post => {
                    match record.request_id.as_ref().and_then(JsonRpcId::from_value) {
                        Some(id) => (StreamKind::Post { request: id.clone() }, Some(id)),
                        // Not a record this release wrote: nothing to resume it with.
                        None => {
                            self.forget_streams([sid]);
                            continue;
                        }
                    }
                }
            };
            let restored = RestoredStream {
                events: events.into_iter().map(|(q, f)| (Seq(q), f)).collect(),
                newest: Seq(record.last_sent),
                acked: Seq(record.last_acked),
                closed,
                first_seq,
            };
            // Its rules are its record's (the generation it was opened under may be an
            // earlier process's).
            let settings = StreamSettings {
                window: WindowLimits { max_events: record.max_events, max_bytes: record.max_bytes },
                prime: false,
                retry_ms: record.retry_ms,
                hold_until_committed: self.streams.hold_until_committed,
                mode: StreamMode::Resumable,
                timing: self.sup.stream_env().timing,
            };
            let generation = self.gens.enter_restored(
                Generation(record.generation),
                self.sup.now().0,
                Counted::Stream,
            );
            let core = StreamCore::restore(
                sid,
                generation.generation().settings.id,
                kind,
                (*self.signer).clone(),
                settings,
                restored,
            );
            let ledger = StreamLedger::restored(Arc::clone(&self.meta.hmac), sid, &record);
            let (addr, closed) =
                StreamActor::start_restored(core, self.stream_links(), ledger, generation);
            let evicted = self.core.restore_stream(sid, request, closed, addr);
            self.evict(evicted);
        }
    }

    fn record_ops_at(&self, state: RecordState, last_used: Tick) -> Vec<crate::ledger::Op> {
        self.meta.record_ops(
            &self.ledger,
            durable::SessionNow {
                version: self.core.version().as_str(),
                generation: self.core.generation().0,
                state,
                log_level: self.core.log_level().map(LogLevel::as_str),
                incarnation: self.core.incarnation(),
                last_used,
                handshake: Handshake {
                    requested_version: self.requested_version.clone(),
                    capabilities: (*self.client_caps).clone(),
                    client_info: self.client_info.clone(),
                },
                streams: self.core.stream_ids(),
            },
        )
    }

    /// The session ended for good (DELETE, expiry): its record says so until it expires (its
    /// id stays 404 across restarts), its streams are forgotten. Written before the registry
    /// lets go of it, so a revive that follows reads the end. A stop for any other reason
    /// (process shutdown, parking) leaves its record active.
    fn record_end(&mut self, state: RecordState) {
        let mut ops = self.record_ops_at(state, self.sup.now());
        for sid in self.core.stream_ids() {
            durable::forget_stream_ops(&self.meta.hmac, sid, &mut ops);
        }
        ops.push(crate::ledger::Op::DropIndex {
            index: crate::ledger::codec::streams_index(&self.meta.hmac),
        });
        self.sup.settle(&self.meta.hmac, Settle::Ended, ops);
    }

    /// Park: record the session as it is and deregister it, unless a request holds a place
    /// in its inbox (then it stays, and that request's activity moves the deadline).
    fn park(&mut self) -> bool {
        let Some(guard) = self.guard.take() else { return false };
        let ops = self.record_ops_at(RecordState::Active, self.core.last_activity());
        // Announced before it leaves the registry: a revive waits for these writes. When the
        // session stays after all, they were an ordinary record write.
        self.sup.settle(&self.meta.hmac, Settle::Parked, ops);
        match guard.park() {
            Ok(()) => {
                tracing::debug!("session parked");
                self.sup.stats().session_parked();
                true
            }
            Err(guard) => {
                self.guard = Some(guard);
                false
            }
        }
    }

    /// Write the record when the core says it is due.
    fn record_if_due(&mut self) {
        if let Some(used) = self.core.poll_ledger(self.sup.now()) {
            let ops = self.record_ops_at(RecordState::Active, used);
            match self.on_recorded.take() {
                // The first record of this life: its `initialize` (or revive) waits for it.
                Some(tx) => self.ledger.writer.submit_then(
                    ops,
                    Box::new(move || {
                        let _ = tx.send(());
                    }),
                ),
                None => self.ledger.writer.submit(ops),
            }
        }
    }

    /// Forget streams in the ledger (retention over, evicted, replaced).
    fn forget_streams(&self, sids: impl IntoIterator<Item = StreamId>) {
        let mut ops = Vec::new();
        for sid in sids {
            durable::forget_stream_ops(&self.meta.hmac, sid, &mut ops);
        }
        self.ledger.writer.submit(ops);
    }

    /// Arm the timer for the core's next deadline, unless one is armed at or before it.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        self.record_if_due();
        let Some(at) = self.core.poll_timeout() else { return };
        if self.timer.as_ref().is_some_and(|(t, _)| *t <= at) {
            return;
        }
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let delay = Duration::from_millis(at.0.saturating_sub(self.sup.now().0));
        let h = ctx.run_later(delay, |act, ctx| {
            act.timer = None;
            act.on_timeout(ctx);
        });
        self.timer = Some((at, h));
    }

    fn on_timeout(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let due = self.core.handle_timeout(self.sup.now());
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
            self.record_end(RecordState::Expired);
            self.guard.take();
            ctx.stop();
            return;
        }
        if due.park && self.park() {
            ctx.stop();
            return;
        }
        self.arm(ctx);
    }

    /// Start the stream registered under `sid` in `sctx`; `final_json` when its request is
    /// already answered (the stream is then closed from the start). Counts the stream's first
    /// connection.
    fn stream_links(&self) -> StreamLinks {
        StreamLinks {
            session: Arc::clone(&self.link),
            env: Arc::clone(self.sup.stream_env()),
            caller_budget: Arc::clone(&self.caller_budget),
            span: self.span.clone(),
        }
    }

    /// How a new stream for `purpose` would be served under the current generation
    /// (resumable and shadow streams are recorded in the ledger; plain ones are not).
    fn stream_mode(&self, purpose: StreamPurpose) -> StreamMode {
        self.gens
            .current()
            .settings
            .flags
            .map_or(StreamMode::Resumable, |f| f.mode(self.streams.place, purpose))
    }

    /// The current generation and the settings a new stream for `purpose` gets from it.
    fn new_stream_settings(&self, purpose: StreamPurpose) -> (GenCount, StreamSettings) {
        let g = self.gens.enter_current(Counted::Stream);
        let s = &g.generation().settings;
        let mode = s.flags.map_or(StreamMode::Resumable, |f| f.mode(self.streams.place, purpose));
        let settings = StreamSettings {
            window: s.window,
            prime: s.prime_streams && self.streams.primes,
            retry_ms: Some(s.retry_ms),
            hold_until_committed: self.streams.hold_until_committed,
            mode,
            timing: self.sup.stream_env().timing,
        };
        (g, settings)
    }

    fn start_stream(
        &mut self,
        sctx: Context<StreamActor>,
        sid: StreamId,
        kind: StreamKind,
        final_json: Option<Bytes>,
        request: Option<(String, Option<Value>)>,
        purpose: StreamPurpose,
    ) -> SseBody {
        let (generation, settings) = self.new_stream_settings(purpose);
        let core = StreamCore::new(
            sid,
            generation.generation().settings.id,
            kind,
            (*self.signer).clone(),
            settings,
        );
        let now = self.sup.now();
        self.core.connection_delta(now, true);
        let ledger = StreamLedger::new(Arc::clone(&self.meta.hmac), sid, request, now);
        let (body, closed_with) = StreamActor::start_in(
            sctx,
            core,
            final_json.as_deref(),
            self.stream_links(),
            ledger,
            generation,
        );
        if let Some(bytes) = closed_with {
            let evicted = self.core.stream_closed(sid, bytes);
            self.evict(evicted);
        }
        body
    }

    fn evict(&mut self, evicted: Vec<crate::proto::session::StreamEntry<Addr<StreamActor>>>) {
        if !evicted.is_empty() {
            tracing::debug!(n = evicted.len(), "closed streams evicted by the retention bounds");
            self.sup.stats().streams_evicted(evicted.len());
        }
        // Each stream forgets its own copy when it stops (it knows whether it has one).
        for e in evicted {
            e.handle.do_send(StopStream(CloseReason::Evicted));
        }
    }

    fn on_message(
        &mut self,
        m: Message,
        mode: ReplyMode,
        charge: Option<crate::stats::RequestCharge>,
        ctx: &mut Context<Self>,
    ) -> Result<PostOutcome, Rejection> {
        match m {
            // Admitted before a drain began and queued here since: the phase is read now.
            Message::Request { .. } if self.sup.phase() != Phase::Serving => {
                Err(Rejection::Overloaded(Overload::Draining))
            }
            Message::Request { id, method, params, .. } => {
                self.start_request(id, method, params, mode, charge, ctx)
            }
            Message::Notification { method, params, .. } => {
                self.on_notification(&method, params.as_ref(), ctx);
                Ok(PostOutcome::Accepted)
            }
            Message::Response { id, result } => {
                if let Some(p) = self.core.answer_client_request(&id) {
                    let _ = p.handle.reply.send(Ok(result));
                }
                Ok(PostOutcome::Accepted)
            }
            Message::ErrorResponse { id, error } => {
                if let Some(p) = id.and_then(|id| self.core.answer_client_request(&id)) {
                    let _ = p.handle.reply.send(Err(error));
                }
                Ok(PostOutcome::Accepted)
            }
        }
    }

    fn on_notification(&mut self, method: &str, params: Option<&Value>, ctx: &mut Context<Self>) {
        if method == method::CANCELLED {
            let id = params.and_then(|p| p.get("requestId")).and_then(JsonRpcId::from_value);
            if let Some(id) = id {
                self.cancel(&id, ctx);
            }
        }
        // notifications/initialized, roots/list_changed and unknown notifications need no
        // action from this server.
    }

    fn cancel(&mut self, id: &JsonRpcId, ctx: &mut Context<Self>) {
        let Some(task) = self.core.end_request(id, self.sup.now()) else { return };
        task.handle.cancel.cancel();
        if let Some(h) = task.handle.spawn {
            ctx.cancel_future(h);
        }
        if let Some(s) = task.stream.and_then(|sid| self.core.stream(sid)) {
            s.handle.do_send(Close(CloseReason::Cancelled));
        }
    }

    fn start_request(
        &mut self,
        id: JsonRpcId,
        method: String,
        params: Option<Value>,
        mode: ReplyMode,
        charge: Option<crate::stats::RequestCharge>,
        ctx: &mut Context<Self>,
    ) -> Result<PostOutcome, Rejection> {
        // A tool call's idempotency key and what its stream is for; the refusals before
        // anything runs (the ledger cannot take the durable record it needs, a receipt bound).
        let door = self.sup.admit_tool_call(&method, params.as_ref(), &self.owner)?;
        let purpose = door.purpose;
        if mode == ReplyMode::Sse && self.stream_mode(purpose) != StreamMode::Plain {
            self.sup.admit_recorded_stream(purpose, false)?;
        }
        let cancel = CancellationToken::new();
        let generation = self.gens.enter_current(Counted::InFlight);
        self.core.begin_request(
            &id,
            RequestTask {
                spawn: None,
                cancel: cancel.clone(),
                json: None,
                generation,
                _charge: charge,
            },
        )?;
        // The stream's address exists before the stream starts, so the handler can be run
        // first and an immediate answer can share the priming event's write.
        let (stream, json_reply) = match mode {
            ReplyMode::Sse => {
                let sctx = Context::<StreamActor>::new();
                let addr = sctx.address();
                let sid = self.core.open_post_stream(&id, addr.clone());
                (Some((sctx, sid, addr)), None)
            }
            ReplyMode::Json => {
                let (tx, rx) = oneshot::channel();
                if let Some(f) = self.core.in_flight_mut(&id) {
                    f.handle.json = Some(tx);
                }
                (None, Some(rx))
            }
        };
        let stream_addr = stream.as_ref().map(|(_, _, a)| a.clone());
        let dispatch = match Route::of(Era::Session, &method) {
            Route::Ping => Dispatch::Ready(Ok(json!({}))),
            Route::SetLevel => Dispatch::Ready(self.set_level(params.as_ref())),
            r @ (Route::Subscribe | Route::Unsubscribe) => {
                Dispatch::Ready(self.subscription(r, params.as_ref()))
            }
            Route::Reinitialize => Dispatch::Ready(Err(ErrorObject::new(
                code::INVALID_REQUEST,
                "session already initialized",
            ))),
            _ => {
                let out = Arc::new(Outbound::Session {
                    session: Arc::clone(&self.links),
                    stream: stream_addr,
                    origin: id.clone(),
                });
                let caller = Caller {
                    principal: self.principal.clone(),
                    owner: self.owner.clone(),
                    capabilities: Arc::clone(&self.client_caps),
                    log_level: self.core.log_level(),
                    logs: true,
                    session: Some(Arc::clone(&self.names)),
                };
                pipeline::dispatch(
                    self.sup.catalog(),
                    self.sup.receipts(),
                    &id,
                    &method,
                    params.as_ref(),
                    door,
                    caller,
                    cancel,
                    out,
                )
            }
        };
        // For the span of a request that waits (a known method's name, else "other": the
        // name is the client's).
        let request_method = crate::proto::mcp::method::span_name(&method);
        // Kept by the stream for its record's digest, computed only if it is ever recorded.
        let request = stream.is_some().then_some((method, params));
        let done = match pipeline::first_poll(dispatch) {
            First::Answered(r) => Some(r),
            First::Waits(fut) => {
                // It runs on in this context.
                let rid = id.clone();
                let fut = tracing::Instrument::instrument(
                    fut,
                    tracing::info_span!(parent: &self.span, "request", method = request_method),
                );
                let h = ctx.spawn(fut.into_actor(self).map(move |r, act, ctx| {
                    act.complete(&rid, r);
                    act.arm(ctx);
                }));
                if let Some(f) = self.core.in_flight_mut(&id) {
                    f.handle.spawn = Some(h);
                }
                None
            }
        };
        match (stream, json_reply) {
            (Some((sctx, sid, _)), _) => {
                let final_json =
                    done.and_then(|r| self.take_response(&id, r).map(|(bytes, _, _)| bytes));
                Ok(PostOutcome::Sse(self.start_stream(
                    sctx,
                    sid,
                    StreamKind::Post { request: id },
                    final_json,
                    request,
                    purpose,
                )))
            }
            (None, Some(rx)) => {
                if let Some(r) = done {
                    self.complete(&id, r);
                }
                Ok(PostOutcome::Json(rx))
            }
            (None, None) => Err(Rejection::Internal),
        }
    }

    fn set_level(&mut self, params: Option<&Value>) -> Result<Value, ErrorObject> {
        let level = params
            .and_then(|p| p.get("level"))
            .and_then(Value::as_str)
            .and_then(LogLevel::parse)
            .ok_or_else(|| ErrorObject::new(code::INVALID_PARAMS, "level must be one of debug, info, notice, warning, error, critical, alert, emergency"))?;
        self.core.set_log_level(level);
        Ok(json!({}))
    }

    /// `resources/subscribe` and `resources/unsubscribe`. Only known resources can be
    /// subscribed to. Nothing is recorded: a session is not told of updates yet (only
    /// 2026-07-28 `subscriptions/listen` streams are; docs/protocol.md).
    fn subscription(&self, route: Route, params: Option<&Value>) -> Result<Value, ErrorObject> {
        let uri = params.and_then(|p| p.get("uri")).and_then(Value::as_str).ok_or_else(|| {
            ErrorObject::new(code::INVALID_PARAMS, "missing string parameter \"uri\"")
        })?;
        if route == Route::Subscribe && !self.sup.catalog().has_resource(uri) {
            return Err(crate::tools::resource_not_found(uri));
        }
        Ok(json!({}))
    }

    /// A request finished: forget it and encode its response. `None` when it was cancelled
    /// (nothing is sent then). Also returns the task, for its reply route.
    fn take_response(
        &mut self,
        id: &JsonRpcId,
        r: Result<Value, ErrorObject>,
    ) -> Option<(Bytes, RequestTask, Option<StreamId>)> {
        let task = self.core.end_request(id, self.sup.now())?;
        let bytes = match r {
            Ok(v) => encode_result(id, &v),
            Err(e) => encode_error(Some(id), &e),
        };
        Some((bytes, task.handle, task.stream))
    }

    /// A spawned request finished: send its response on its own stream (or JSON reply),
    /// unless it was cancelled.
    fn complete(&mut self, id: &JsonRpcId, r: Result<Value, ErrorObject>) {
        let Some((bytes, task, stream)) = self.take_response(id, r) else { return };
        if let Some(tx) = task.json {
            let _ = tx.send(Ok(bytes));
        } else if let Some(s) = stream.and_then(|sid| self.core.stream(sid)) {
            // Within the stream's mailbox bound; a busy stream gets it as soon as it has room:
            // awaited on a task of its own (it outlives this session if the session stops),
            // the request counted in flight until the stream has it (a drain waits for it).
            match s.handle.try_send(Emit { json: bytes, last: true }) {
                Ok(()) | Err(SendError::Closed(_)) => {}
                Err(SendError::Full(m)) => {
                    let (addr, in_flight) = (s.handle.clone(), task.generation);
                    actix_rt::spawn(async move {
                        let _ = addr.send(m).await;
                        drop(in_flight);
                    });
                }
            }
        }
    }
}

impl Handler<Post> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Post, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.core.touch(self.sup.now());
        let r = self.core.check_active().and_then(|()| match msg.incoming {
            Incoming::Single(m) => self.on_message(m, msg.reply_mode, msg.charge, ctx),
            Incoming::Batch(items) => {
                if !self.core.version().allows_batches() {
                    return Err(Rejection::InvalidMessage {
                        reason: format!(
                            "JSON-RPC batches are not allowed in protocol {}",
                            self.core.version().as_str()
                        ),
                        id: None,
                    });
                }
                let mut replies = Vec::new();
                // The charge is split between the requests (what notifications and responses
                // hold is gone once they are handled).
                let requests = items.iter().filter(|m| m.is_request()).count();
                let mut charges =
                    msg.charge.map(|c| c.split(requests)).unwrap_or_default().into_iter();
                for m in items {
                    let is_request = m.is_request();
                    let id =
                        if let Message::Request { id, .. } = &m { Some(id.clone()) } else { None };
                    let charge = if is_request { charges.next() } else { None };
                    match self.on_message(m, ReplyMode::Json, charge, ctx) {
                        Ok(PostOutcome::Json(rx)) => replies.push(rx),
                        Ok(_) => {}
                        Err(rej) if is_request => {
                            // Answer this request in the batch with its own error.
                            let (tx, rx) = oneshot::channel();
                            let _ = tx.send(Ok(encode_error(id.as_ref(), &rej.to_error_object())));
                            replies.push(rx);
                        }
                        Err(_) => {}
                    }
                }
                Ok(if replies.is_empty() {
                    PostOutcome::Accepted
                } else {
                    PostOutcome::Batch(replies)
                })
            }
        });
        let _ = msg.reply.send(r);
        self.arm(ctx);
    }
}

impl Handler<OpenGet> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: OpenGet, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.core.touch(self.sup.now());
        let serving = if self.sup.phase() == Phase::Serving {
            Ok(())
        } else {
            Err(Rejection::Overloaded(Overload::Draining))
        };
        // A recorded GET stream needs the ledger for its whole life.
        let recorded = if self.stream_mode(StreamPurpose::ReadOnly) == StreamMode::Plain {
            Ok(())
        } else {
            self.sup.admit_recorded_stream(StreamPurpose::ReadOnly, true)
        };
        let r = self.core.check_active().and(serving).and(recorded).map(|()| {
            let sctx = Context::<StreamActor>::new();
            let (sid, replaced) = self.core.open_get_stream(sctx.address());
            if let Some(old) = replaced {
                old.handle.do_send(StopStream(CloseReason::Replaced));
            }
            self.start_stream(sctx, sid, StreamKind::Get, None, None, StreamPurpose::ReadOnly)
        });
        let _ = msg.reply.send(r);
        self.arm(ctx);
    }
}

impl Handler<Resume> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Resume, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.core.touch(self.sup.now());
        self.arm(ctx);
        if let Err(e) = self.core.check_active() {
            let _ = msg.reply.send(Err(e));
            return;
        }
        let Some(entry) = self.core.stream(msg.event.stream) else {
            tracing::debug!(stream = %msg.event.stream, "resume of a stream no longer retained");
            let _ = msg.reply.send(Err(Rejection::EventsLost));
            return;
        };
        // The stream checks the cursor's generation against its own.
        match entry.handle.try_send(Attach {
            after: msg.event.seq,
            generation: msg.event.generation,
            reply: msg.reply,
        }) {
            Ok(()) => {}
            Err(SendError::Full(m)) => {
                let _ = m.reply.send(Err(Rejection::Overloaded(Overload::Mailbox)));
            }
            // Its retention just ended and the `Gone` report is still on its way.
            Err(SendError::Closed(m)) => {
                tracing::debug!(stream = %msg.event.stream, "resume of a stream whose retention just ended");
                let _ = m.reply.send(Err(Rejection::EventsLost));
            }
        }
    }
}

impl Handler<Delete> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Delete, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let r = self.core.request_delete();
        if r.is_ok() {
            self.record_end(RecordState::Deleted);
            // Gone from the registry before the client hears "deleted".
            self.guard.take();
            ctx.stop();
        }
        let _ = msg.reply.send(r);
    }
}

impl Handler<EndOlderRequests> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: EndOlderRequests, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let old =
            self.core.in_flight_where(|t| t.generation.generation().settings.id.0 < msg.before.0);
        for id in old {
            let error = ErrorObject::new(
                code::DRAINED,
                "The server rolled back and this request did not finish within the drain's grace period; it was stopped and its outcome is unknown. Re-issue it if running it again is safe.",
            );
            // Its tool stops first; then the error is its answer.
            if let Some(f) = self.core.in_flight_mut(&id) {
                f.handle.cancel.cancel();
                if let Some(h) = f.handle.spawn.take() {
                    ctx.cancel_future(h);
                }
            }
            self.complete(&id, Err(error));
        }
        self.arm(ctx);
    }
}

impl Handler<Shutdown> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        // Its record as of now (the periodic one may lag): the next process revives it with
        // its true last use; one still in use counts as used now.
        let now = self.sup.now();
        let used = if self.core.in_flight_len() > 0 || self.core.attached_connections() > 0 {
            now
        } else {
            self.core.last_activity()
        };
        if self.core.check_active().is_ok() {
            self.ledger.writer.submit(self.record_ops_at(RecordState::Active, used));
        }
        self.ended_by = Rejection::Overloaded(Overload::Draining);
        ctx.stop();
    }
}

impl Handler<StreamReport> for SessionActor {
    type Result = ();

    fn handle(&mut self, r: StreamReport, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let now = self.sup.now();
        match r {
            StreamReport::ConnectionStarted => self.core.connection_delta(now, true),
            StreamReport::ConnectionEnded => self.core.connection_delta(now, false),
            StreamReport::Closed { stream, bytes } => {
                let evicted = self.core.stream_closed(stream, bytes);
                self.evict(evicted);
            }
            StreamReport::EventsLost(sid) => {
                if let Some(task) = self.core.events_lost(sid, now) {
                    tracing::debug!(stream = %sid, "request ended: its events were lost");
                    self.sup.stats().request_ended_by_gap();
                    task.handle.cancel.cancel();
                    if let Some(h) = task.handle.spawn {
                        ctx.cancel_future(h);
                    }
                }
            }
            StreamReport::Gone(sid) => {
                tracing::debug!(stream = %sid, "stream retention ended");
                // (The stream forgot its own copy as its retention ended.)
                self.core.remove_stream(sid);
            }
        }
        self.arm(ctx);
    }
}

impl Handler<ServerRequest> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: ServerRequest, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let Some(target) = msg.stream.or_else(|| self.core.get_stream().map(|(_, a)| a.clone()))
        else {
            let _ = msg.reply.send(Err(ErrorObject::new(
                code::INTERNAL_ERROR,
                "no stream to carry a server-to-client request: accept text/event-stream or open a GET stream",
            )));
            return;
        };
        let route = ClientRequestRoute { reply: msg.reply, stream: target.clone() };
        match self.core.begin_client_request(&msg.origin, &msg.method, self.sup.now(), route) {
            Ok(id) => {
                let json = encode_request(&id, &msg.method, Some(&msg.params));
                if target.try_send(Emit { json, last: false }).is_err()
                    && let Some(p) = self.core.answer_client_request(&id)
                {
                    let _ = p.handle.reply.send(Err(ErrorObject::new(
                        code::INTERNAL_ERROR,
                        "the request's stream is busy or gone",
                    )));
                }
            }
            Err((route, why)) => {
                let text = match why {
                    ClientRequestRefused::OriginEnded => {
                        "the originating request is no longer running"
                    }
                    ClientRequestRefused::TooMany => {
                        "too many server-to-client requests are waiting in this session"
                    }
                };
                let _ = route.reply.send(Err(ErrorObject::new(code::INTERNAL_ERROR, text)));
            }
        }
        self.arm(ctx);
    }
}

impl Handler<GetStream> for SessionActor {
    type Result = MessageResult<GetStream>;

    fn handle(&mut self, _: GetStream, _: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        MessageResult(self.core.get_stream().map(|(_, s)| s.clone()))
    }
}
