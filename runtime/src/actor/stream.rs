//! One actor per SSE stream: drives a [`StreamCore`] and the attached connection's queue.

use std::sync::Arc;
use std::time::Duration;

use actix::WeakAddr;
use actix::prelude::*;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::body::SseBody;
use super::session::{SessionActor, StreamEvent};
use crate::config::RuntimeConfig;
use crate::proto::error::Rejection;
use crate::proto::ids::Seq;
use crate::proto::stream::{Attachment, CloseReason, Delivery, StreamCore, StreamState};
use crate::sse::COMMENT_KEEPALIVE;

struct Writer {
    conn: u64,
    tx: mpsc::Sender<Bytes>,
}

/// The actor.
pub struct StreamActor {
    core: StreamCore,
    writer: Option<Writer>,
    session: WeakAddr<SessionActor>,
    cfg: Arc<RuntimeConfig>,
    last_write: Instant,
    retention: Option<SpawnHandle>,
    /// Runs only once a live connection has been attached.
    keepalive: Option<SpawnHandle>,
}

impl Actor for StreamActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(64);
        if self.writer.is_some() {
            self.ensure_keepalive(ctx);
        }
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
pub(crate) struct Shutdown(pub(crate) CloseReason);

/// SEP-1699: end the current connection, keep the stream.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PollClose;

impl StreamActor {
    /// Start a stream in `ctx` (created earlier so its address could be handed out) with its
    /// first connection attached; returns that connection's body.
    ///
    /// `final_json`, when the request was already answered, is appended right after the
    /// priming event: the connection then carries both in one write and ends.
    pub(crate) fn start_in(
        ctx: Context<StreamActor>,
        mut core: StreamCore,
        final_json: Option<&[u8]>,
        session: WeakAddr<SessionActor>,
        cfg: Arc<RuntimeConfig>,
    ) -> SseBody {
        let addr = ctx.address();
        let mut att = core.attach_new();
        let conn = att.conn;
        let (writer, live) = match final_json {
            Some(json) => {
                if let Delivery::Write { frame, .. } = core.push_final(json) {
                    att.initial.push(frame);
                }
                // The final frame is being written: `Detached` picks the retention.
                (None, None)
            }
            None => {
                let (tx, rx) = mpsc::channel(cfg.write_queue_frames);
                (Some(Writer { conn, tx }), Some(rx))
            }
        };
        ctx.run(StreamActor { core, writer, session, cfg, last_write: Instant::now(), retention: None, keepalive: None });
        SseBody::new(att.initial, live, Some((addr, conn)))
    }

    fn ensure_keepalive(&mut self, ctx: &mut Context<Self>) {
        if self.keepalive.is_none() {
            let every = Duration::from_millis(self.cfg.keepalive_ms);
            self.keepalive = Some(ctx.run_interval(every, |act, _| act.keepalive()));
        }
    }

    fn tell_session(&self, ev: StreamEvent) {
        if let Some(s) = self.session.upgrade() {
            // Control message, one per state change of this stream.
            s.do_send(ev);
        }
    }

    fn body_for(&mut self, att: Attachment, ctx: &mut Context<Self>) -> SseBody {
        // A new connection supersedes the old one: dropping its sender ends it.
        self.writer = None;
        self.tell_session(StreamEvent::Attached);
        if att.end_after_initial {
            return SseBody::new(att.initial, None, Some((ctx.address(), att.conn)));
        }
        let (tx, rx) = mpsc::channel(self.cfg.write_queue_frames);
        self.writer = Some(Writer { conn: att.conn, tx });
        self.last_write = Instant::now();
        self.ensure_keepalive(ctx);
        SseBody::new(att.initial, Some(rx), Some((ctx.address(), att.conn)))
    }

    fn deliver(&mut self, d: Delivery, ctx: &mut Context<Self>) {
        if let Delivery::Write { conn, frame, end } = d {
            self.write(conn, frame, end);
        }
        // Also when the frame was only buffered (no connection): a stream that closed while
        // detached must start its retention and tell the session, or it would never leave.
        if matches!(self.core.state(), StreamState::Closed(_)) {
            self.on_closed(ctx);
        }
    }

    fn write(&mut self, conn: u64, frame: Bytes, end: bool) {
        let Some(w) = self.writer.as_ref().filter(|w| w.conn == conn) else {
            self.core.detach(conn);
            return;
        };
        match w.tx.try_send(frame) {
            Ok(()) => {
                self.last_write = Instant::now();
                if end {
                    // Dropping the sender ends the response once the queue drains.
                    self.writer = None;
                }
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Slow reader: detach it rather than buffer without bound or block the
                // session. Nothing is lost: the window holds the frame; the client resumes.
                tracing::debug!(stream = %self.core.id(), "slow SSE reader detached");
                self.writer = None;
                self.core.detach(conn);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.writer = None;
                self.core.detach(conn);
            }
        }
    }

    fn on_closed(&mut self, ctx: &mut Context<Self>) {
        if self.retention.is_some() {
            return;
        }
        self.tell_session(StreamEvent::Closed(self.core.id()));
        if self.writer.is_none() && self.core.connection().is_none() {
            self.retain_for(self.cfg.retention_undelivered_ms, ctx);
        }
        // Otherwise the final frame is being written; `Detached` picks the retention.
    }

    fn retain_for(&mut self, ms: u64, ctx: &mut Context<Self>) {
        if let Some(h) = self.retention.take() {
            ctx.cancel_future(h);
        }
        self.retention = Some(ctx.run_later(Duration::from_millis(ms), |act, ctx| {
            act.tell_session(StreamEvent::Gone(act.core.id()));
            ctx.stop();
        }));
    }

    fn keepalive(&mut self) {
        let Some(w) = &self.writer else { return };
        if self.last_write.elapsed() >= Duration::from_millis(self.cfg.keepalive_ms) {
            match w.tx.try_send(Bytes::from_static(COMMENT_KEEPALIVE)) {
                Ok(()) => self.last_write = Instant::now(),
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    let conn = w.conn;
                    self.writer = None;
                    self.core.detach(conn);
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
        self.deliver(d, ctx);
    }
}

impl Handler<Attach> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Attach, ctx: &mut Context<Self>) {
        let r = self.core.attach_resume(msg.after).map(|att| self.body_for(att, ctx));
        if matches!(self.core.state(), StreamState::Closed(_)) {
            self.on_closed(ctx);
        }
        let _ = msg.reply.send(r);
    }
}

impl Handler<Detached> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Detached, ctx: &mut Context<Self>) {
        self.tell_session(StreamEvent::DetachedConn);
        if self.writer.as_ref().is_some_and(|w| w.conn == msg.conn) {
            self.writer = None;
        }
        let was_current = self.core.connection() == Some(msg.conn);
        self.core.detach(msg.conn);
        if was_current && matches!(self.core.state(), StreamState::Closed(_)) {
            let ms = if msg.drained { self.cfg.retention_after_delivery_ms } else { self.cfg.retention_undelivered_ms };
            self.retain_for(ms, ctx);
        }
    }
}

impl Handler<Close> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Close, ctx: &mut Context<Self>) {
        self.core.close(msg.0);
        self.writer = None;
        if self.retention.is_none() {
            // Nothing is owed on a cancelled stream: keep it only briefly for late resumes.
            self.tell_session(StreamEvent::Closed(self.core.id()));
            self.retain_for(self.cfg.retention_after_delivery_ms, ctx);
        }
    }
}

impl Handler<Shutdown> for StreamActor {
    type Result = ();

    fn handle(&mut self, msg: Shutdown, ctx: &mut Context<Self>) {
        self.core.close(msg.0);
        self.writer = None;
        ctx.stop();
    }
}

impl Handler<PollClose> for StreamActor {
    type Result = ();

    fn handle(&mut self, _: PollClose, _: &mut Context<Self>) {
        if let Some((conn, retry)) = self.core.close_for_polling()
            && let Some(w) = self.writer.take().filter(|w| w.conn == conn)
                && let Some(f) = retry {
                    let _ = w.tx.try_send(f);
                }
    }
}
