//! The actor of an SSE stream: drives a [`StreamCore`], the attached connection's bounded
//! write queue, the stream's retention after it closed, and its share of the server-wide
//! memory budget. Reports to its session through a [`SessionLink`] (it never names the
//! session's type). A stream answered in its first write has none until a resume arrives
//! (`super::dormant`); this module also holds what both forms share.
//!
//! Time: one timer at a time, armed at the core's [`StreamCore::poll_timeout`] (its
//! retention's end once closed with no connection attached, or the attached connection's
//! keep-alive) and re-armed after every message when the core wants an earlier wake-up; the
//! core decides what is due ([`StreamCore::handle_timeout`]). It ends with the actor.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::body::{ConnectionOwner, SseBody, StreamOwner};
use super::budget::{Charge, MemoryBudget};
use super::durable::{LedgerCtx, StreamLedger};
use super::generations::GenCount;
pub(crate) use super::links::{Detached, Emit, PollClose, SessionLink, StreamReport};
use super::queue::{QueueTx, Refused, write_queue};
use crate::ledger::Durability;
use crate::proto::error::Rejection;
use crate::proto::ids::{Seq, Tick};
use crate::proto::rollout::{StreamMode, verify_shadow};
use crate::proto::stream::{
    Attachment, CloseReason, Delivery, StreamCore, StreamState, StreamStats, StreamTiming,
};
use crate::sse::COMMENT_KEEPALIVE;
use crate::stats::{RuntimeStats, STATE_CLOSED, STATE_DETACHED, STATE_OPEN};

/// What every stream of a supervisor shares: connection and retention settings, the memory
/// budget and the counters.
#[derive(Debug)]
pub(crate) struct StreamEnv {
    /// Keep-alive and retention times, for the streams' settings.
    pub(crate) timing: StreamTiming,
    pub(crate) write_queue_frames: usize,
    pub(crate) budget: Arc<MemoryBudget>,
    pub(crate) stats: Arc<RuntimeStats>,
    pub(crate) ledger: Arc<LedgerCtx>,
    pub(crate) clock: crate::clock::Clock,
    /// Places for the streams this host follows for another (`actor::follow`).
    pub(crate) followers: Arc<tokio::sync::Semaphore>,
    /// What wakes them when their streams get events.
    pub(crate) watch: Arc<super::watch::Watch>,
}

/// What every stream shares, for tests: a memory ledger, a 1 MiB budget, fresh counters.
#[cfg(test)]
pub(crate) fn test_env(timing: StreamTiming) -> Arc<StreamEnv> {
    let ledger = Arc::new(LedgerCtx::new(
        crate::ledger::Ledger::memory(&crate::config::RuntimeConfig::default()),
        60_000,
        60_000,
    ));
    Arc::new(StreamEnv {
        timing,
        write_queue_frames: 4,
        budget: MemoryBudget::new(1 << 20),
        stats: Arc::new(RuntimeStats::default()),
        watch: super::watch::Watch::new(Arc::clone(ledger.writer.store())),
        ledger,
        clock: crate::clock::Clock::start(),
        followers: Arc::new(tokio::sync::Semaphore::new(1)),
    })
}

/// What a stream is started with from its session: where it reports, what every stream
/// shares, and its caller's share of the memory budget.
pub(crate) struct StreamLinks {
    pub(crate) session: SessionLink,
    pub(crate) env: Arc<StreamEnv>,
    pub(crate) caller_budget: Arc<MemoryBudget>,
    /// The session's span (the stream's is its child).
    pub(crate) span: tracing::Span,
}

struct Writer {
    conn: u64,
    tx: QueueTx,
}

/// The actor.
pub(crate) struct StreamActor {
    core: StreamCore,
    writer: Option<Writer>,
    session: SessionLink,
    env: Arc<StreamEnv>,
    charge: Charge,
    closed_reported: bool,
    /// The one armed timer (at the core's `poll_timeout`: retention end or keep-alive) and
    /// the tick it is armed for.
    timer: Option<(Tick, SpawnHandle)>,
    ledger: StreamLedger,
    /// Counted live in the generation it was opened under.
    _generation: GenCount,
    /// A stream that is not resumable is ending (its shadow verification may be running).
    ending: bool,
    /// The state the metrics count it in (an index of `STREAM_STATES`).
    state_shown: Option<usize>,
    /// Counted live (started, mode) before its actor started: a stream its session kept as
    /// data until a resume woke it.
    counted: bool,
    /// Its tracing span (stream, generation, mode; a child of its session's), or at levels
    /// coarser than `debug` its session's ([`stream_span`]).
    span: tracing::Span,
}

/// A stream actor's mailbox bound (a tool's notifications past it wait for room).
pub(crate) const STREAM_MAILBOX: usize = 64;

impl Actor for StreamActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(STREAM_MAILBOX);
        if !self.counted {
            count_started(&self.env.stats, &self.core);
        }
        self.core.wrote(self.env.clock.now());
        self.arm(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        // The budget charge is released when the actor is dropped, right after this.
        count_stopped(&self.env.stats, &self.core, self.state_shown.take());
    }
}

/// Attach a resuming connection after `after`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Attach {
    pub(crate) after: Seq,
    /// The generation the cursor names (it must be the stream's).
    pub(crate) generation: crate::proto::ids::Generation,
    pub(crate) reply: oneshot::Sender<Result<SseBody, Rejection>>,
}

/// Close without a further event (cancellation).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Close(pub(crate) CloseReason);

/// Close and stop at once (replaced GET stream, evicted from retention, session end).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop(pub(crate) CloseReason);

/// The process is stopping: end the connection with a `retry` hint once everything this
/// stream submitted to the ledger is committed (its client resumes after the restart), then
/// stop. Its ledger copy stays as it is.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Drain;

/// What a stream its session keeps as data (`super::dormant`) is made of, handed whole to
/// its actor when it wakes.
pub(crate) struct Parts {
    pub(super) core: StreamCore,
    pub(super) ledger: StreamLedger,
    pub(super) generation: GenCount,
    pub(super) charge: Charge,
    pub(super) env: Arc<StreamEnv>,
}

/// A stream begins to count live: started, and in its mode.
pub(super) fn count_started(stats: &RuntimeStats, core: &StreamCore) {
    count_started_as(stats, core.mode());
}

/// A stream in `mode` starts counting live.
pub(super) fn count_started_as(stats: &RuntimeStats, mode: StreamMode) {
    stats.stream_started();
    stats.stream_mode(mode, 1);
}

/// A stream stops counting live, from the state `shown`.
pub(super) fn count_stopped(stats: &RuntimeStats, core: &StreamCore, shown: Option<usize>) {
    count_stopped_as(stats, &core.stats(), core.mode(), shown);
}

/// A stream with `counters`, in `mode`, stops counting live from the state `shown`.
pub(super) fn count_stopped_as(
    stats: &RuntimeStats,
    counters: &StreamStats,
    mode: StreamMode,
    shown: Option<usize>,
) {
    stats.stream_stopped(counters);
    stats.stream_mode(mode, -1);
    stats.stream_state(shown, None);
}

/// Charge the window's size to the budget and the caller's share; over either, keep only the
/// newest event.
pub(super) fn charge_window(charge: &mut Charge, core: &mut StreamCore, stats: &RuntimeStats) {
    if charge.set(core.retained_bytes()) {
        let trimmed = core.trim_for_budget();
        if trimmed > 0 {
            tracing::debug!(stream = %core.id(), trimmed, "stream memory budget full: window trimmed to its newest event");
            stats.budget_trimmed(trimmed);
            charge.set(core.retained_bytes());
        }
    }
}

/// Hand what the core wants recorded to the ledger writer. With durability `sync`, new events
/// return the commit to wait for and the newest of them (held until then).
pub(super) fn submit_changes(
    ledger: &mut StreamLedger,
    core: &mut StreamCore,
    env: &StreamEnv,
    now: Tick,
) -> Option<(oneshot::Receiver<()>, Seq)> {
    let cx: &LedgerCtx = &env.ledger;
    let (ops, newest) = ledger.ops(core, cx, now);
    if ops.is_empty() {
        return None;
    }
    match newest {
        Some(upto) if cx.writer.durability() == Durability::Sync => {
            Some((cx.writer.submit_acked(ops), upto))
        }
        Some(_) => {
            let _ = cx.writer.submit_events(ops);
            None
        }
        None => {
            cx.writer.submit(ops);
            None
        }
    }
}

/// Remove a stream's copy from the ledger, if it ever had one.
pub(super) fn forget_copy(ledger: &StreamLedger, core: &StreamCore, env: &StreamEnv) {
    if core.recorded() {
        let mut ops = Vec::new();
        super::durable::forget_stream_ops(ledger.hmac(), core.id(), &mut ops);
        env.ledger.writer.submit(ops);
    }
}

/// A stream's span: its own (stream, generation, mode) under its session's at `debug`; at
/// coarser levels its session's span itself, so its log lines still name the session. An
/// enabled span per stream cost about a tenth of an SSE echo's CPU at the default `info`
/// (measured with `bench/peers`, issue 23): one was made for every SSE reply (now for every
/// stream actor).
fn stream_span(session: &tracing::Span, core: &StreamCore) -> tracing::Span {
    let span = tracing::debug_span!(parent: session, "stream", stream = core.id().0, generation = core.generation().0, mode = core.mode().as_str());
    if span.is_disabled() { session.clone() } else { span }
}

impl StreamActor {
    /// Start a stream in `ctx` (created earlier so its address could be handed out) with its
    /// first connection attached; returns that connection's body. The caller (the session)
    /// counts that connection itself.
    ///
    /// `final_json`, when the request was already answered, is appended right after the
    /// priming event: the connection then carries both in one write and ends. The stream is
    /// then closed from the start, and the bytes its window holds are returned for the
    /// session to count (no `Closed` report follows).
    pub(crate) fn start_in(
        mut ctx: Context<StreamActor>,
        mut core: StreamCore,
        final_json: Option<&[u8]>,
        links: StreamLinks,
        ledger: StreamLedger,
        generation: GenCount,
    ) -> (SseBody, Option<usize>) {
        let StreamLinks { session, env, caller_budget, span } = links;
        let caller_budget = &caller_budget;
        let span = stream_span(&span, &core);
        let addr = ctx.address();
        let mut att = core.attach_new();
        let conn = att.conn;
        let mut ended = false;
        if let Some(json) = final_json {
            env.stats.events_appended(1);
            if let Delivery::Write { frame, .. } = core.push_final(json) {
                att.initial.push(frame);
                ended = true;
            }
        }
        let (writer, live) = if ended {
            // The final frame is being written: `Detached` picks the retention.
            (None, None)
        } else {
            // Live events, or (durability `sync`) the final one once it is committed.
            let (tx, rx) = write_queue(env.write_queue_frames);
            (Some(Writer { conn, tx }), Some(rx))
        };
        let owner = ConnectionOwner {
            stream: StreamOwner::Actor(addr.recipient()),
            session: Arc::clone(&session),
            conn,
        };
        let charge = env.budget.charge(Some(caller_budget));
        let mut actor =
            StreamActor::with_core(core, writer, session, env, charge, ledger, generation, span);
        actor.closed_reported = final_json.is_some();
        actor.update_charge();
        actor.flush_ledger(&mut ctx);
        // A stream that is not resumable is not retained: it reports `Gone` once done.
        let closed_with = final_json
            .filter(|_| actor.core.mode() == StreamMode::Resumable)
            .map(|_| actor.core.retained_bytes());
        ctx.run(actor);
        (SseBody::new(att.initial, live, Some(owner)), closed_with)
    }

    /// Start a stream rebuilt from the ledger, with no connection. Returns its address and,
    /// when it is closed, the bytes its window holds (for its session's retention bounds).
    pub(crate) fn start_restored(
        core: StreamCore,
        links: StreamLinks,
        ledger: StreamLedger,
        generation: GenCount,
    ) -> (Addr<StreamActor>, Option<usize>) {
        let StreamLinks { session, env, caller_budget, span } = links;
        let caller_budget = &caller_budget;
        let span = stream_span(&span, &core);
        let mut ctx = Context::<StreamActor>::new();
        let addr = ctx.address();
        let charge = env.budget.charge(Some(caller_budget));
        let mut actor =
            StreamActor::with_core(core, None, session, env, charge, ledger, generation, span);
        let closed = matches!(actor.core.state(), StreamState::Closed(_));
        // Its session learns the bytes from the return value, not from a report.
        actor.closed_reported = closed;
        actor.update_charge();
        actor.flush_ledger(&mut ctx);
        let bytes = closed.then(|| actor.core.retained_bytes());
        ctx.run(actor);
        (addr, bytes)
    }

    /// Start, in `ctx`, a closed stream its session kept as data until now (a resume woke
    /// it): already counted live and closed, its bytes known to its session, its retention
    /// running on from where it was.
    pub(crate) fn start_woken(
        ctx: Context<StreamActor>,
        kept: Parts,
        session: SessionLink,
        span: &tracing::Span,
    ) {
        let Parts { core, ledger, generation, charge, env } = kept;
        let span = stream_span(span, &core);
        let mut actor =
            StreamActor::with_core(core, None, session, env, charge, ledger, generation, span);
        actor.counted = true;
        actor.closed_reported = true;
        actor.state_shown = Some(STATE_CLOSED);
        ctx.run(actor);
    }

    #[allow(clippy::too_many_arguments)]
    fn with_core(
        core: StreamCore,
        writer: Option<Writer>,
        session: SessionLink,
        env: Arc<StreamEnv>,
        charge: Charge,
        ledger: StreamLedger,
        generation: GenCount,
        span: tracing::Span,
    ) -> StreamActor {
        StreamActor {
            charge,
            core,
            writer,
            session,
            env,
            closed_reported: false,
            timer: None,
            ledger,
            _generation: generation,
            ending: false,
            state_shown: None,
            counted: false,
            span,
        }
    }

    /// Hand what the core wants recorded to the ledger writer. With durability `sync` the
    /// held events are released when their batch is committed.
    fn flush_ledger(&mut self, ctx: &mut Context<Self>) {
        if let Some((committed, upto)) =
            submit_changes(&mut self.ledger, &mut self.core, &self.env, self.env.clock.now())
        {
            ctx.spawn(
                actix::fut::wrap_future::<_, Self>(committed)
                    .map(move |_, act, ctx| act.on_committed(upto, ctx)),
            );
        }
    }

    /// Its life is over: remove its copy from the ledger, if it ever had one.
    fn forget(&mut self) {
        forget_copy(&self.ledger, &self.core, &self.env);
    }

    fn on_committed(&mut self, upto: Seq, ctx: &mut Context<Self>) {
        for d in self.core.committed(upto) {
            self.deliver(d, ctx);
        }
        self.arm(ctx);
    }

    fn report(&self, r: StreamReport) {
        // Control message, at most one per state change of this stream.
        self.session.do_send(r);
    }

    /// Charge the window's size to the budget and the caller's share; over either, keep only
    /// the newest event.
    fn update_charge(&mut self) {
        charge_window(&mut self.charge, &mut self.core, &self.env.stats);
    }

    /// The only place the writer changes (the core's keep-alive deadline follows the attached
    /// connection itself).
    fn set_writer(&mut self, w: Option<Writer>, _ctx: &mut Context<Self>) {
        self.writer = w;
    }

    fn body_for(&mut self, att: Attachment, ctx: &mut Context<Self>) -> SseBody {
        self.report(StreamReport::ConnectionStarted);
        let owner = ConnectionOwner {
            stream: StreamOwner::Actor(ctx.address().recipient()),
            session: Arc::clone(&self.session),
            conn: att.conn,
        };
        // A new connection supersedes the old one: dropping its sender ends it.
        if att.end_after_initial {
            self.set_writer(None, ctx);
            return SseBody::new(att.initial, None, Some(owner));
        }
        let (tx, rx) = write_queue(self.env.write_queue_frames);
        self.set_writer(Some(Writer { conn: att.conn, tx }), ctx);
        self.core.wrote(self.env.clock.now());
        SseBody::new(att.initial, Some(rx), Some(owner))
    }

    fn deliver(&mut self, d: Delivery, ctx: &mut Context<Self>) {
        if let Delivery::Write { conn, frame, end } = d {
            self.write(conn, frame, end, ctx);
        }
        // Also when the frame was only buffered (no connection): a stream that closed while
        // detached must tell the session.
        if matches!(self.core.state(), StreamState::Closed(_)) {
            self.report_closed();
        }
    }

    fn write(&mut self, conn: u64, frame: Bytes, end: bool, ctx: &mut Context<Self>) {
        let Some(w) = self.writer.as_ref().filter(|w| w.conn == conn) else {
            self.core.detach(conn, false);
            return;
        };
        match w.tx.try_send(frame) {
            Ok(()) => {
                self.core.wrote(self.env.clock.now());
                if end {
                    // Dropping the sender ends the response once the queue drains.
                    self.set_writer(None, ctx);
                }
            }
            Err(Refused::Full) => {
                // Slow reader: detach it rather than buffer without bound or block the
                // session. Nothing is lost: the window holds the frame; the client resumes.
                tracing::debug!(stream = %self.core.id(), "slow SSE reader detached");
                self.env.stats.slow_reader();
                self.set_writer(None, ctx);
                self.core.detach(conn, false);
            }
            Err(Refused::Closed) => {
                self.set_writer(None, ctx);
                self.core.detach(conn, false);
            }
        }
    }

    fn report_closed(&mut self) {
        if !self.closed_reported && self.core.mode() == StreamMode::Resumable {
            self.closed_reported = true;
            self.report(StreamReport::Closed {
                stream: self.core.id(),
                bytes: self.core.retained_bytes(),
            });
        }
    }

    /// After every message: the metrics' state, the end of a stream nobody can resume, and
    /// the one timer armed at the core's next deadline (re-armed when the core wants an
    /// earlier one; one that fires early finds nothing due and re-arms).
    fn arm(&mut self, ctx: &mut Context<Self>) {
        let state = match self.core.state() {
            StreamState::Closed(_) => STATE_CLOSED,
            _ if self.core.connection().is_some() => STATE_OPEN,
            _ => STATE_DETACHED,
        };
        if self.state_shown != Some(state) {
            self.env.stats.stream_state(self.state_shown.replace(state), Some(state));
        }
        if self.core.mode() != StreamMode::Resumable && self.core.retention().is_some() {
            // Nobody can resume it: done once closed with no connection (a shadow stream
            // after its verification).
            if !self.ending {
                self.ending = true;
                self.end_unresumable(ctx);
            }
            return;
        }
        let now = self.env.clock.now();
        let Some(at) = self.core.poll_timeout(now) else { return };
        if self.timer.as_ref().is_some_and(|(t, _)| *t <= at) {
            return;
        }
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let h = ctx.run_later(Duration::from_millis(at.0.saturating_sub(now.0)), |act, ctx| {
            act.timer = None;
            act.on_timeout(ctx);
        });
        self.timer = Some((at, h));
    }

    fn on_timeout(&mut self, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let now = self.env.clock.now();
        let due = self.core.handle_timeout(now);
        if due.retention_over {
            self.report(StreamReport::Gone(self.core.id()));
            self.forget();
            ctx.stop();
            return;
        }
        if due.keepalive {
            self.keepalive(now);
        }
        self.arm(ctx);
    }

    /// End a stream that is not resumable: a shadow stream first reads its ledger copy back
    /// (once everything it submitted is committed) and compares it with what it sent.
    fn end_unresumable(&mut self, ctx: &mut Context<Self>) {
        let done = |act: &mut StreamActor, ctx: &mut Context<Self>| {
            act.report(StreamReport::Gone(act.core.id()));
            act.forget();
            ctx.stop();
        };
        let Some(sent) = self.core.shadow_sent().cloned() else { return done(self, ctx) };
        let started = Instant::now();
        // Read back on a reader thread once committed (never on this arbiter); a ledger that
        // cannot commit within the commit wait leaves it unverified (counted unreadable).
        let env = Arc::clone(&self.env);
        let (log, now) = (
            crate::ledger::codec::events_key(self.ledger.hmac(), self.core.id().0),
            self.env.clock.now().0,
        );
        let read_back = async move {
            let committed = env.ledger.writer.wait_committed(env.ledger.writer.barrier()).await;
            let latency = started.elapsed();
            let copy = match committed {
                Ok(()) => env.ledger.ledger.reads.run(move |store| store.read_log(&log, now)).await,
                Err(e) => Err(crate::ledger::ReadError::Store(crate::ledger::StoreError::Backend(
                    e.to_string(),
                ))),
            };
            (copy, latency)
        };
        ctx.spawn(actix::fut::wrap_future::<_, Self>(read_back).map(move |(copy, latency), act, ctx| {
            match copy {
                Ok(copy) => {
                    let r = verify_shadow(&sent, &copy, act.core.signer(), act.core.generation(), act.core.id());
                    if r.mismatches() > 0 {
                        tracing::warn!(stream = %act.core.id(), generation = act.core.generation().0, report = ?r, "shadow ledger copy does not match what was sent");
                    }
                    act.env.stats.shadow_verified(&r, latency);
                }
                Err(e) => {
                    tracing::warn!(stream = %act.core.id(), error = %e, "shadow ledger copy cannot be read back");
                    act.env.stats.shadow_unreadable();
                }
            }
            done(act, ctx);
        }));
    }

    /// A keep-alive comment to the quiet connection. A full queue is tried again a keep-alive
    /// later (a slow reader's own writes detach it); a closed one detaches.
    fn keepalive(&mut self, now: Tick) {
        let sent = self
            .writer
            .as_ref()
            .map(|w| (w.conn, w.tx.try_send(Bytes::from_static(COMMENT_KEEPALIVE))));
        if let Some((conn, Err(Refused::Closed))) = sent {
            self.writer = None;
            self.core.detach(conn, false);
        }
        // Written, or not writable now: the next one is due a keep-alive later.
        self.core.wrote(now);
    }
}

impl Handler<Emit> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Emit, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let d = if msg.last { self.core.push_final(&msg.json) } else { self.core.push(&msg.json) };
        self.env.stats.events_appended(1);
        self.update_charge();
        self.flush_ledger(ctx);
        self.deliver(d, ctx);
        self.arm(ctx);
    }
}

impl Handler<Attach> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Attach, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if msg.generation != self.core.generation() {
            tracing::debug!(target: "mcp_runtime::cursor", cursor_generation = msg.generation.0, "resume refused: the cursor names another generation of this stream");
            let _ = msg.reply.send(Err(Rejection::CursorRejected));
            return;
        }
        let was_closed = matches!(self.core.state(), StreamState::Closed(_));
        let gaps = self.core.stats().gaps;
        let r = self.core.attach_resume(msg.after).map(|att| self.body_for(att, ctx));
        if matches!(r, Err(Rejection::CursorRejected)) {
            tracing::debug!(target: "mcp_runtime::cursor", after = msg.after.0, newest = self.core.newest().0, mode = self.core.mode().as_str(), "resume refused: a cursor ahead of the stream, or of a stream never given one");
        }
        if r.is_ok() || self.core.stats().gaps > gaps {
            self.env.stats.resume(self.core.stats().gaps > gaps);
        }
        self.update_charge();
        if !was_closed && self.core.state() == StreamState::Closed(CloseReason::EventsLost) {
            // Before the reply: the client cannot retry the request id before its session
            // has freed it.
            self.report(StreamReport::EventsLost(self.core.id()));
        }
        if matches!(self.core.state(), StreamState::Closed(_)) {
            self.report_closed();
        }
        self.flush_ledger(ctx);
        self.arm(ctx);
        let _ = msg.reply.send(r);
    }
}

impl Handler<Detached> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Detached, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if self.writer.as_ref().is_some_and(|w| w.conn == msg.conn) {
            self.set_writer(None, ctx);
        }
        self.core.detach(msg.conn, msg.drained);
        // A stream answered in its first write is recorded now if that write did not arrive.
        self.flush_ledger(ctx);
        if self.core.settled() {
            self.ledger.never_recorded();
        }
        self.arm(ctx);
    }
}

/// Whether the keep-alive timer is running (tests).
#[cfg(test)]
#[derive(Message)]
#[rtype(result = "bool")]
pub(crate) struct KeepaliveRunning;

#[cfg(test)]
impl Handler<KeepaliveRunning> for StreamActor {
    type Result = bool;

    fn handle(&mut self, _: KeepaliveRunning, _: &mut Context<Self>) -> bool {
        let _span = self.span.clone().entered();
        self.core.keepalive_deadline().is_some()
    }
}

impl Handler<Close> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Close, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.core.close(msg.0);
        self.set_writer(None, ctx);
        self.report_closed();
        self.flush_ledger(ctx);
        self.arm(ctx);
    }
}

impl Handler<Stop> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Stop, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        self.core.close(msg.0);
        self.set_writer(None, ctx);
        if self.core.shadow_sent().is_some() && !self.ending {
            if msg.0 == CloseReason::Replaced {
                // A replaced shadow GET stream: its copy is still there; verified, then gone.
                self.ending = true;
                self.end_unresumable(ctx);
                return;
            }
            // Its session ended or parked: its copy goes (or stays) with the session's.
            self.env.stats.shadow_unverified();
        }
        // Evicted or replaced: its life is over. (A stop because its session ends, stops
        // or parks leaves its copy to the session.)
        if matches!(msg.0, CloseReason::Evicted | CloseReason::Replaced) {
            self.forget();
        }
        ctx.stop();
    }
}

impl Handler<Drain> for StreamActor {
    type Result = ();

    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        // Nothing more is appended; a running request's stream stays open in the ledger (the
        // next process answers it with the "server restarted" error).
        self.core.close(CloseReason::SessionEnded);
        let Some(w) = self.writer.take() else {
            ctx.stop();
            return;
        };
        if let Some((_, h)) = self.timer.take() {
            ctx.cancel_future(h);
        }
        let retry =
            (self.core.mode() == StreamMode::Resumable).then(|| self.core.retry_ms()).flatten();
        // Its events committed first (a resume after the restart finds them), at most the
        // commit wait once the ledger fails: the connection ends all the same.
        let env = Arc::clone(&self.env);
        let committed =
            async move { env.ledger.writer.wait_committed(env.ledger.writer.barrier()).await };
        ctx.spawn(actix::fut::wrap_future::<_, Self>(committed).map(move |_, _act, ctx| {
            if let Some(ms) = retry {
                let _ = w.tx.try_send(crate::sse::retry_frame(ms));
            }
            // Dropping the sender ends the response once its queue drains.
            drop(w);
            ctx.stop();
        }));
    }
}

impl Handler<PollClose> for StreamActor {
    type Result = ();

    fn handle(&mut self, _: PollClose, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if let Some((conn, retry)) = self.core.close_for_polling() {
            if let Some(w) = self.writer.take().filter(|w| w.conn == conn)
                && let Some(f) = retry
            {
                let _ = w.tx.try_send(f);
            }
            self.set_writer(None, ctx);
        }
        self.arm(ctx);
    }
}
