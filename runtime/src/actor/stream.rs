//! One actor per SSE stream: drives a [`StreamCore`], the attached connection's bounded
//! write queue, the stream's retention after it closed, and its share of the server-wide
//! memory budget. Reports to its session through a [`SessionLink`] (it never names the
//! session's type).
//!
//! Timers: a keep-alive interval runs only while a connection is attached, and a retention
//! timer only while the core says a retention applies (closed, no connection attached); the
//! actor re-reads it after every message. Both end with the actor.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::body::{ConnectionOwner, SseBody};
use super::budget::{Charge, MemoryBudget};
use super::durable::{LedgerCtx, StreamLedger};
use super::stats::RuntimeStats;
use crate::ledger::Durability;
use crate::proto::error::Rejection;
use crate::proto::ids::{Seq, StreamId};
use crate::proto::stream::{Attachment, CloseReason, Delivery, Retention, StreamCore, StreamState};
use crate::sse::COMMENT_KEEPALIVE;

/// What every stream of a supervisor shares: connection and retention settings, the memory
/// budget and the counters.
#[derive(Debug)]
pub(crate) struct StreamEnv {
    pub(crate) keepalive: Duration,
    pub(crate) write_queue_frames: usize,
    pub(crate) retention_after_delivery: Duration,
    pub(crate) retention_undelivered: Duration,
    pub(crate) budget: Arc<MemoryBudget>,
    pub(crate) stats: Arc<RuntimeStats>,
    pub(crate) ledger: Arc<LedgerCtx>,
    pub(crate) clock: crate::clock::Clock,
}

/// Where a session's streams and their connection bodies report: made once per session and
/// shared (a `Recipient` clone allocates; an `Arc` clone does not, and this is on every SSE
/// response's path).
pub(crate) type SessionLink = Arc<Recipient<StreamReport>>;

/// Reports of a stream (and of its connections' bodies) to its session.
#[derive(Message, Debug, Clone, Copy, PartialEq, Eq)]
#[rtype(result = "()")]
pub(crate) enum StreamReport {
    /// A resuming connection attached (the first connection is counted by the session).
    ConnectionStarted,
    /// A connection's body was dropped (sent by the body itself).
    ConnectionEnded,
    /// The stream produced its last event; its window holds `bytes`.
    Closed {
        /// The stream.
        stream: StreamId,
        /// Bytes its window holds.
        bytes: usize,
    },
    /// A resume found the events after its cursor lost; the stream answered its request
    /// with an "events lost" error and closed: the request must end.
    EventsLost(StreamId),
    /// The stream's retention ended; it stopped.
    Gone(StreamId),
}

struct Writer {
    conn: u64,
    tx: mpsc::Sender<Bytes>,
}

/// The actor.
pub struct StreamActor {
    core: StreamCore,
    writer: Option<Writer>,
    session: SessionLink,
    env: Arc<StreamEnv>,
    charge: Charge,
    last_write: Instant,
    closed_reported: bool,
    /// The armed retention timer and the retention it is armed for.
    retention: Option<(Retention, SpawnHandle)>,
    keepalive: Option<SpawnHandle>,
    ledger: StreamLedger,
}

impl Actor for StreamActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(64);
        self.env.stats.stream_started();
        if self.writer.is_some() {
            self.start_keepalive(ctx);
        }
        self.sync_retention(ctx);
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        // The budget charge is released when the actor is dropped, right after this.
        self.env.stats.stream_stopped(&self.core.stats());
    }
}

/// Append a message; `last` marks the final response (closes the stream).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Emit {
    pub(crate) json: Bytes,
    pub(crate) last: bool,
}

/// Attach a resuming connection after `after`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Attach {
    pub(crate) after: Seq,
    pub(crate) reply: oneshot::Sender<Result<SseBody, Rejection>>,
}

/// A connection's body was dropped; `drained` = it returned every frame and ended normally.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Detached {
    pub(crate) conn: u64,
    pub(crate) drained: bool,
}

/// Close without a further event (cancellation).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Close(pub(crate) CloseReason);

/// Close and stop at once (replaced GET stream, evicted from retention, session end).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Stop(pub(crate) CloseReason);

/// SEP-1699: end the current connection, keep the stream.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PollClose;

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
        session: SessionLink,
        env: Arc<StreamEnv>,
        caller_budget: &Arc<MemoryBudget>,
        ledger: StreamLedger,
    ) -> (SseBody, Option<usize>) {
        let addr = ctx.address();
        let mut att = core.attach_new();
        let conn = att.conn;
        let mut ended = false;
        if let Some(json) = final_json
            && let Delivery::Write { frame, .. } = core.push_final(json)
        {
            att.initial.push(frame);
            ended = true;
        }
        let (writer, live) = if ended {
            // The final frame is being written: `Detached` picks the retention.
            (None, None)
        } else {
            // Live events, or (durability `sync`) the final one once it is committed.
            let (tx, rx) = mpsc::channel(env.write_queue_frames);
            (Some(Writer { conn, tx }), Some(rx))
        };
        let owner = ConnectionOwner { stream: addr, session: Arc::clone(&session), conn };
        let mut actor = StreamActor::with_core(core, writer, session, env, caller_budget, ledger);
        actor.closed_reported = final_json.is_some();
        actor.update_charge();
        actor.flush_ledger(&mut ctx);
        let closed_with = final_json.map(|_| actor.core.retained_bytes());
        ctx.run(actor);
        (SseBody::new(att.initial, live, Some(owner)), closed_with)
    }

    /// Start a stream rebuilt from the ledger, with no connection. Returns its address and,
    /// when it is closed, the bytes its window holds (for its session's retention bounds).
    pub(crate) fn start_restored(core: StreamCore, session: SessionLink, env: Arc<StreamEnv>, caller_budget: &Arc<MemoryBudget>, ledger: StreamLedger) -> (Addr<StreamActor>, Option<usize>) {
        let mut ctx = Context::<StreamActor>::new();
        let addr = ctx.address();
        let mut actor = StreamActor::with_core(core, None, session, env, caller_budget, ledger);
        let closed = matches!(actor.core.state(), StreamState::Closed(_));
        // Its session learns the bytes from the return value, not from a report.
        actor.closed_reported = closed;
        actor.update_charge();
        actor.flush_ledger(&mut ctx);
        let bytes = closed.then(|| actor.core.retained_bytes());
        ctx.run(actor);
        (addr, bytes)
    }

    fn with_core(core: StreamCore, writer: Option<Writer>, session: SessionLink, env: Arc<StreamEnv>, caller_budget: &Arc<MemoryBudget>, ledger: StreamLedger) -> StreamActor {
        StreamActor {
            charge: env.budget.charge(Some(caller_budget)),
            core,
            writer,
            session,
            env,
            last_write: Instant::now(),
            closed_reported: false,
            retention: None,
            keepalive: None,
            ledger,
        }
    }

    /// Hand what the core wants recorded to the ledger writer. With durability `sync` the
    /// held events are released when their batch is committed.
    fn flush_ledger(&mut self, ctx: &mut Context<Self>) {
        let cx: &LedgerCtx = &self.env.ledger;
        let (ops, newest) = self.ledger.ops(&mut self.core, cx, self.env.clock.now());
        if ops.is_empty() {
            return;
        }
        match newest {
            Some(upto) if cx.writer.durability() == Durability::Sync => {
                let committed = cx.writer.submit_acked(ops);
                ctx.spawn(actix::fut::wrap_future::<_, Self>(committed).map(move |_, act, ctx| act.on_committed(upto, ctx)));
            }
            Some(_) => {
                let _ = cx.writer.submit_events(ops);
            }
            None => cx.writer.submit(ops),
        }
    }

    /// Its life is over: remove its copy from the ledger, if it ever had one.
    fn forget(&mut self) {
        if self.core.recorded() {
            let mut ops = Vec::new();
            super::durable::forget_stream_ops(self.ledger.hmac(), self.core.id(), &mut ops);
            self.env.ledger.writer.submit(ops);
        }
    }

    fn on_committed(&mut self, upto: Seq, ctx: &mut Context<Self>) {
        for d in self.core.committed(upto) {
            self.deliver(d, ctx);
        }
        self.sync_retention(ctx);
    }

    fn report(&self, r: StreamReport) {
        // Control message, at most one per state change of this stream.
        self.session.do_send(r);
    }

    /// Charge the window's size to the budget and the caller's share; over either, keep only
    /// the newest event.
    fn update_charge(&mut self) {
        if self.charge.set(self.core.retained_bytes()) {
            let trimmed = self.core.trim_for_budget();
            if trimmed > 0 {
                tracing::debug!(stream = %self.core.id(), trimmed, "stream memory budget full: window trimmed to its newest event");
                self.env.stats.budget_trimmed(trimmed);
                self.charge.set(self.core.retained_bytes());
            }
        }
    }

    fn start_keepalive(&mut self, ctx: &mut Context<Self>) {
        if self.keepalive.is_none() {
            self.keepalive = Some(ctx.run_interval(self.env.keepalive, |act, ctx| act.keepalive(ctx)));
        }
    }

    /// The only place the writer changes: the keep-alive runs exactly while there is one.
    fn set_writer(&mut self, w: Option<Writer>, ctx: &mut Context<Self>) {
        self.writer = w;
        if self.writer.is_some() {
            self.start_keepalive(ctx);
        } else if let Some(h) = self.keepalive.take() {
            ctx.cancel_future(h);
        }
    }

    fn body_for(&mut self, att: Attachment, ctx: &mut Context<Self>) -> SseBody {
        self.report(StreamReport::ConnectionStarted);
        let owner = ConnectionOwner { stream: ctx.address(), session: Arc::clone(&self.session), conn: att.conn };
        // A new connection supersedes the old one: dropping its sender ends it.
        if att.end_after_initial {
            self.set_writer(None, ctx);
            return SseBody::new(att.initial, None, Some(owner));
        }
        let (tx, rx) = mpsc::channel(self.env.write_queue_frames);
        self.set_writer(Some(Writer { conn: att.conn, tx }), ctx);
        self.last_write = Instant::now();
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
                self.last_write = Instant::now();
                if end {
                    // Dropping the sender ends the response once the queue drains.
                    self.set_writer(None, ctx);
                }
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Slow reader: detach it rather than buffer without bound or block the
                // session. Nothing is lost: the window holds the frame; the client resumes.
                tracing::debug!(stream = %self.core.id(), "slow SSE reader detached");
                self.set_writer(None, ctx);
                self.core.detach(conn, false);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.set_writer(None, ctx);
                self.core.detach(conn, false);
            }
        }
    }

    fn report_closed(&mut self) {
        if !self.closed_reported {
            self.closed_reported = true;
            self.report(StreamReport::Closed { stream: self.core.id(), bytes: self.core.retained_bytes() });
        }
    }

    /// Arm, re-arm or cancel the retention timer to match the core (called after every
    /// message). An attach cancels it (a stream never ends under its connection); the next
    /// detach starts a full retention again.
    fn sync_retention(&mut self, ctx: &mut Context<Self>) {
        let want = self.core.retention();
        if want == self.retention.as_ref().map(|(r, _)| *r) {
            return;
        }
        if let Some((_, h)) = self.retention.take() {
            ctx.cancel_future(h);
        }
        if let Some(r) = want {
            let d = match r {
                Retention::Delivered => self.env.retention_after_delivery,
                Retention::Undelivered => self.env.retention_undelivered,
            };
            let h = ctx.run_later(d, |act, ctx| {
                act.report(StreamReport::Gone(act.core.id()));
                act.forget();
                ctx.stop();
            });
            self.retention = Some((r, h));
        }
    }

    fn keepalive(&mut self, ctx: &mut Context<Self>) {
        let Some(w) = &self.writer else { return };
        if self.last_write.elapsed() >= self.env.keepalive {
            match w.tx.try_send(Bytes::from_static(COMMENT_KEEPALIVE)) {
                Ok(()) => self.last_write = Instant::now(),
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    let conn = w.conn;
                    self.set_writer(None, ctx);
                    self.core.detach(conn, false);
                }
                Err(mpsc::error::TrySendError::Full(_)) => {}
            }
        }
    }
}

impl Handler<Emit> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Emit, ctx: &mut Context<Self>) {
        let d = if msg.last { self.core.push_final(&msg.json) } else { self.core.push(&msg.json) };
        self.update_charge();
        self.flush_ledger(ctx);
        self.deliver(d, ctx);
        self.sync_retention(ctx);
    }
}

impl Handler<Attach> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Attach, ctx: &mut Context<Self>) {
        let was_closed = matches!(self.core.state(), StreamState::Closed(_));
        let r = self.core.attach_resume(msg.after).map(|att| self.body_for(att, ctx));
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
        self.sync_retention(ctx);
        let _ = msg.reply.send(r);
    }
}

impl Handler<Detached> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Detached, ctx: &mut Context<Self>) {
        if self.writer.as_ref().is_some_and(|w| w.conn == msg.conn) {
            self.set_writer(None, ctx);
        }
        self.core.detach(msg.conn, msg.drained);
        // A stream answered in its first write is recorded now if that write did not arrive.
        self.flush_ledger(ctx);
        self.sync_retention(ctx);
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
        self.keepalive.is_some()
    }
}

impl Handler<Close> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Close, ctx: &mut Context<Self>) {
        self.core.close(msg.0);
        self.set_writer(None, ctx);
        self.report_closed();
        self.flush_ledger(ctx);
        self.sync_retention(ctx);
    }
}

impl Handler<Stop> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Stop, ctx: &mut Context<Self>) {
        self.core.close(msg.0);
        self.set_writer(None, ctx);
        // Evicted or replaced: its life is over. (A stop because its session ends, stops
        // or parks leaves its copy to the session.)
        if matches!(msg.0, CloseReason::Evicted | CloseReason::Replaced) {
            self.forget();
        }
        ctx.stop();
    }
}

impl Handler<PollClose> for StreamActor {
    type Result = ();

    fn handle(&mut self, _: PollClose, ctx: &mut Context<Self>) {
        if let Some((conn, retry)) = self.core.close_for_polling() {
            if let Some(w) = self.writer.take().filter(|w| w.conn == conn)
                && let Some(f) = retry
            {
                let _ = w.tx.try_send(f);
            }
            self.set_writer(None, ctx);
        }
        self.sync_retention(ctx);
    }
}
