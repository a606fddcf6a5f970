//! The messages a session handles: POSTs, GET streams, resumes, DELETE, the ends a rollback
//! or a shutdown asks for, its streams' reports, its tools' questions.

use actix::prelude::*;
use tokio::sync::oneshot;

use super::dispatch::Carried;
use crate::actor::dormant::StreamHandle;
use crate::actor::lifecycle::Phase;
use crate::actor::stream::{Attach, StreamActor, StreamReport};
use crate::ledger::codec::RecordState;
use crate::pipeline::{GetStream, ServerRequest};
use crate::proto::admission::ReplyMode;
use crate::proto::error::{Overload, Rejection};
use crate::proto::jsonrpc::{ErrorObject, Incoming, Message, code, encode_error, encode_request};
use crate::proto::rollout::{StreamMode, StreamPurpose};
use crate::proto::stream::CloseReason;

use super::messages::{
    Delete, EndOlderRequests, EndedElsewhere, OpenGet, Post, PostOutcome, Relay, Relayed, Resume,
    Shutdown,
};
use super::{ClientRequestRoute, SessionActor};

impl Handler<Post> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Post, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let now = self.sup.now();
        self.turn = Some(now);
        self.request_came(now);
        self.core.touch(now);
        let r = self.core.check_active().and_then(|()| match msg.incoming {
            Incoming::Single(m) => {
                let carried = Carried { charge: msg.charge, lists: msg.lists };
                self.on_message(m, msg.reply_mode, carried, ctx)
            }
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
                    let carried = Carried { charge, lists: msg.lists.clone() };
                    match self.on_message(m, ReplyMode::Json, carried, ctx) {
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
        self.turn = None;
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
            let (sid, replaced) = self.core.open_get_stream(StreamHandle::Live(sctx.address()));
            if let Some(old) = replaced {
                self.stop_handle(old.handle, CloseReason::Replaced);
            }
            self.start_get_stream(sctx, sid)
        });
        let _ = msg.reply.send(r);
        self.arm(ctx);
    }
}

impl Handler<Resume> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Resume, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        let now = self.sup.now();
        self.hear_dormant_ends(now);
        self.core.touch(now);
        self.arm(ctx);
        if let Err(e) = self.core.check_active() {
            let _ = msg.reply.send(Err(e));
            return;
        }
        if self.core.stream(msg.event.stream).is_none() && self.ledger.ledger.shared {
            // Not here: another host sharing the ledger may serve it, or it is gone.
            self.resume_elsewhere(msg, ctx);
            return;
        }
        self.attach(msg);
    }
}

impl SessionActor {
    /// Attach a resume to its stream, which this session holds.
    pub(super) fn attach(&mut self, msg: Resume) {
        // A stream kept as data wakes for it.
        let Some(stream) = self.wake(msg.event.stream) else {
            tracing::debug!(stream = %msg.event.stream, "resume of a stream no longer retained");
            let _ = msg.reply.send(Err(Rejection::EventsLost));
            return;
        };
        // The stream checks the cursor's generation against its own.
        match stream.try_send(Attach {
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
            self.record_end(RecordState::Deleted, true);
            // Gone from the registry before the client hears "deleted".
            self.guard.take();
            ctx.stop();
        }
        let _ = msg.reply.send(r);
    }
}

impl Handler<EndedElsewhere> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: EndedElsewhere, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        if self.core.request_delete().is_ok() {
            tracing::debug!("session ended by another host");
            // Its streams here are forgotten too; the others were told already.
            self.record_end(RecordState::Deleted, false);
            self.guard.take();
            ctx.stop();
        }
    }
}

impl Handler<Relay> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Relay, ctx: &mut Context<Self>) {
        let _span = self.span.clone().entered();
        // Never relayed again: every host heard it once.
        match msg.relayed {
            Relayed::Answer(id, answer) => {
                self.answered_here(&id, answer);
            }
            Relayed::Cancel(id) => {
                self.cancel_here(&id, ctx, false);
                self.arm(ctx);
            }
            // Recorded by the host that answered it: applied here, not written again.
            Relayed::Level(level) => self.core.heard_log_level(level),
            Relayed::MaybeMissed => self.recheck_answers(ctx),
        }
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
        // its true last use; one still in use counts as used now (its bodies' queued ends
        // heard first).
        let now = self.sup.now();
        self.hear_dormant_ends(now);
        let used = if self.core.in_flight_len() > 0 || self.core.attached_connections() > 0 {
            now
        } else {
            self.core.last_activity()
        };
        if self.core.check_active().is_ok() {
            self.ledger.writer.submit(self.record_ops_at(
                RecordState::Active,
                used,
                crate::actor::durable::Residence::Leaving,
            ));
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
            StreamReport::DormantDetached { stream, conn, drained } => {
                self.dormant_detached(stream, conn, drained, now);
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
        let Some(target) =
            msg.stream.or_else(|| self.core.get_stream().and_then(|(_, h)| h.live().cloned()))
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
                match self.note_question(&id, self.core.client_request_timeout_ms()) {
                    None => self.ask(&id, json, &target),
                    // Asked once who asks is committed, so that the host an answer reaches
                    // finds it: to refuse it once this one died, to keep it for this one
                    // otherwise. Asked anyway if the commit wait gave up: that answer is
                    // relayed, neither refused nor kept.
                    Some(noted) => {
                        let writer = std::sync::Arc::clone(&self.ledger.writer);
                        let noted = async move { writer.wait_committed(noted).await };
                        ctx.spawn(noted.into_actor(self).map(move |_, act, _| {
                            act.ask(&id, json, &target);
                        }));
                    }
                }
            }
            Err((route, why)) => {
                let _ =
                    route.reply.send(Err(ErrorObject::new(code::INTERNAL_ERROR, why.message())));
            }
        }
        self.arm(ctx);
    }
}

impl Handler<GetStream> for SessionActor {
    type Result = MessageResult<GetStream>;

    fn handle(&mut self, _: GetStream, _: &mut Context<Self>) -> Self::Result {
        let _span = self.span.clone().entered();
        MessageResult(self.core.get_stream().and_then(|(_, h)| h.live().cloned()))
    }
}
