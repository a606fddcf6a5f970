//! The SSE response body of one connection: initial frames (priming or replay), then live
//! frames from the stream actor's bounded queue (a stream kept as data has none: its body ends
//! after its initial frames).
//!
//! Connection accounting cannot drift: whoever creates a body for a stream has counted the
//! connection with its session, and the body's [`ConnectionOwner`] reports the end when the
//! body is dropped (the client went away, the response finished, or the body was never
//! sent), with `do_send`, which never drops a message while its receiver lives (or, a kept
//! stream's body that returned every frame, in its busy session's queue of ends). It reports
//! to the session directly, not through the stream actor, so a stream that stopped first
//! (replaced, evicted, retention over) cannot leave its session counting a connection that
//! is gone. A stream its session keeps as data ([`super::dormant`]) has no actor: its
//! bodies report to the session alone, once, with the stream's id: a body that returned
//! every frame queues its end in the session's [`DormantEnds`] while the session is busy
//! (read at its next request, or at the timer tick its switch to queueing armed), else
//! sends a message, as a cut one always does.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix::Recipient;
use actix_web::body::{BodySize, MessageBody};
use bytes::Bytes;

use super::links::{Detached, DormantEnds, SessionLink, StreamReport};
use super::queue::QueueRx;
use crate::proto::ids::StreamId;
use crate::proto::stream::Frames;

/// Initial frames up to this size are joined into one write.
const JOIN_MAX_BYTES: usize = 16 << 10;

/// Where a body reports its end: its stream (to pick the retention) and its session (to
/// count the connection off).
pub(crate) struct ConnectionOwner {
    pub(crate) stream: StreamOwner,
    pub(crate) session: SessionLink,
    pub(crate) conn: u64,
}

/// Who holds a body's stream.
pub(crate) enum StreamOwner {
    /// Its actor, told directly.
    Actor(Recipient<Detached>),
    /// Its session, which keeps it as data: told with the stream's id (and passes it on if
    /// the stream woke meanwhile), through `ends` when the body returned every frame and the
    /// session reads them there, else by a message.
    Session {
        /// The stream.
        stream: StreamId,
        /// Where a drained body's end is queued.
        ends: Arc<DormantEnds>,
    },
}

/// A streaming `text/event-stream` body bound to one stream connection.
pub struct SseBody {
    /// The first frame to write (the joined priming event and answer of most replies: no
    /// queue is made for them).
    first: Option<Bytes>,
    /// The other initial frames.
    initial: VecDeque<Bytes>,
    live: Option<QueueRx>,
    owner: Option<ConnectionOwner>,
    finished: bool,
}

impl std::fmt::Debug for SseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseBody")
            .field("initial", &(usize::from(self.first.is_some()) + self.initial.len()))
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl SseBody {
    /// A body that writes `initial`, then whatever arrives on `live` until its sender is
    /// dropped (`live = None`: end after `initial`). With an `owner`, the caller has already
    /// counted this connection with the session; the body counts it off when dropped.
    pub(crate) fn new(
        initial: Frames,
        live: Option<QueueRx>,
        owner: Option<ConnectionOwner>,
    ) -> SseBody {
        // Small initial sets (priming + an immediate answer) go out as one chunk; a large
        // replay stays as the window's own frames (shared, not copied per connection).
        let total: usize = initial.iter().map(Bytes::len).sum();
        let (first, initial) = if initial.len() > 1 && total <= JOIN_MAX_BYTES {
            let mut joined = Vec::with_capacity(total);
            for f in &initial {
                joined.extend_from_slice(f);
            }
            (Some(Bytes::from(joined)), VecDeque::new())
        } else if initial.len() == 1 {
            (initial.into_iter().next(), VecDeque::new())
        } else {
            (None, initial.into_vec().into())
        };
        SseBody { first, initial, live, owner, finished: false }
    }

    /// A body with fixed frames and no stream behind it.
    #[must_use]
    pub fn fixed(frames: Vec<Bytes>) -> SseBody {
        SseBody::new(Frames::from_vec(frames), None, None)
    }
}

impl MessageBody for SseBody {
    type Error = Infallible;

    fn size(&self) -> BodySize {
        BodySize::Stream
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Infallible>>> {
        let this = self.get_mut();
        if let Some(f) = this.first.take().or_else(|| this.initial.pop_front()) {
            return Poll::Ready(Some(Ok(f)));
        }
        let Some(rx) = this.live.as_mut() else {
            this.finished = true;
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(f)) => Poll::Ready(Some(Ok(f))),
            Poll::Ready(None) => {
                this.finished = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for SseBody {
    fn drop(&mut self) {
        if let Some(o) = self.owner.take() {
            // One message each per connection, so the unbounded `do_send` stays bounded.
            let (conn, drained) = (o.conn, self.finished);
            match o.stream {
                StreamOwner::Actor(stream) => {
                    stream.do_send(Detached { conn, drained });
                    o.session.do_send(StreamReport::ConnectionEnded);
                }
                StreamOwner::Session { stream, ends } => {
                    if !(drained && ends.push(stream, conn)) {
                        o.session.do_send(StreamReport::DormantDetached { stream, conn, drained });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use actix::prelude::{Actor, Addr, AsyncContext, Context, Handler, Message, MessageResult};

    use super::*;
    use crate::actor::budget::MemoryBudget;
    use crate::actor::durable::StreamLedger;
    use crate::actor::stream::{KeepaliveRunning, Stop, StreamActor};
    use crate::proto::event_id::CursorKey;
    use crate::proto::ids::{Generation, StreamId, Tick};
    use crate::proto::replay::WindowLimits;
    use crate::proto::stream::{CloseReason, StreamCore, StreamKind, StreamSettings};

    /// Stands in for a session: counts the connections reported ended, the streams gone and
    /// the kept streams' ends told by message.
    #[derive(Default, Clone, Copy)]
    struct Session {
        ended: usize,
        gone: usize,
        /// Kept streams' ends told by message: (drained, cut).
        kept_ends: (usize, usize),
    }

    impl Actor for Session {
        type Context = Context<Self>;
    }

    impl Handler<StreamReport> for Session {
        type Result = ();
        fn handle(&mut self, r: StreamReport, _: &mut Context<Self>) {
            match r {
                StreamReport::ConnectionEnded => self.ended += 1,
                StreamReport::Gone(_) => self.gone += 1,
                StreamReport::DormantDetached { drained: true, .. } => self.kept_ends.0 += 1,
                StreamReport::DormantDetached { drained: false, .. } => self.kept_ends.1 += 1,
                _ => {}
            }
        }
    }

    /// What the stand-in session has counted so far.
    #[derive(Message)]
    #[rtype(result = "Session")]
    struct Counts;

    impl Handler<Counts> for Session {
        type Result = MessageResult<Counts>;
        fn handle(&mut self, _: Counts, _: &mut Context<Self>) -> Self::Result {
            MessageResult(*self)
        }
    }

    /// The body of a kept stream's connection `conn`, reporting to `session` and `ends`.
    fn kept_body(session: &Addr<Session>, ends: &Arc<DormantEnds>, conn: u64) -> SseBody {
        let owner = ConnectionOwner {
            stream: StreamOwner::Session { stream: StreamId(7), ends: Arc::clone(ends) },
            session: Arc::new(session.clone().recipient()),
            conn,
        };
        SseBody::new(
            smallvec::smallvec![
                Bytes::from_static(b"id: a\n\n"),
                Bytes::from_static(b"data: {}\n\n")
            ],
            None,
            Some(owner),
        )
    }

    /// Reads `body` to its end (its frames: one, the priming event and the answer joined).
    async fn read_to_end(mut body: SseBody) -> SseBody {
        let mut frames = 0;
        while let Some(Ok(_)) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_next(cx)).await {
            frames += 1;
        }
        assert_eq!(frames, 1, "priming event and answer in one write");
        body
    }

    #[actix_web::test]
    async fn a_kept_streams_body_queues_its_end_only_while_its_session_reads_the_queue() {
        let session = Session::create(|_| Session::default());
        let ends = Arc::new(DormantEnds::default());
        let mut heard = Vec::new();
        // Not queueing (a session that is not busy): a drained body sends its end.
        drop(read_to_end(kept_body(&session, &ends, 1)).await);
        ends.take_into(&mut heard);
        assert!(heard.is_empty());
        assert_eq!(session.send(Counts).await.unwrap().kept_ends, (1, 0), "told by message");
        // Queueing: queued, no message.
        ends.queue(true, &mut heard);
        drop(read_to_end(kept_body(&session, &ends, 2)).await);
        ends.take_into(&mut heard);
        assert_eq!(heard, vec![(StreamId(7), 2)]);
        assert_eq!(session.send(Counts).await.unwrap().kept_ends, (1, 0), "no message for it");
        // Dropped before its end (the client went away): a message even while queueing.
        drop(kept_body(&session, &ends, 3));
        ends.take_into(&mut heard);
        assert!(heard.is_empty(), "a cut body is not queued as drained: {heard:?}");
        assert_eq!(session.send(Counts).await.unwrap().kept_ends, (1, 1), "the cut, told at once");
        // Switched off: what was queued comes with the switch, later ends by message.
        let late = read_to_end(kept_body(&session, &ends, 4)).await;
        drop(read_to_end(kept_body(&session, &ends, 5)).await);
        ends.queue(false, &mut heard);
        assert_eq!(heard, vec![(StreamId(7), 5)], "queued before the switch");
        drop(late);
        assert_eq!(
            session.send(Counts).await.unwrap().kept_ends,
            (2, 1),
            "ended after it: a message"
        );
    }

    /// A real GET stream reporting to `session`; its address and its first connection's body.
    fn stream(session: &Addr<Session>) -> (Addr<StreamActor>, SseBody) {
        start(Arc::new(session.clone().recipient()), StreamKind::Get, None)
    }

    fn start(
        link: SessionLink,
        kind: StreamKind,
        final_json: Option<&[u8]>,
    ) -> (Addr<StreamActor>, SseBody) {
        let timing = crate::proto::stream::StreamTiming {
            keepalive_ms: 60_000,
            retention_after_delivery_ms: 60_000,
            retention_undelivered_ms: 60_000,
        };
        let settings = StreamSettings {
            window: WindowLimits { max_events: 8, max_bytes: 1 << 16 },
            prime: true,
            retry_ms: Some(100),
            hold_until_committed: false,
            mode: crate::proto::rollout::StreamMode::Resumable,
            timing,
        };
        let core = StreamCore::new(
            StreamId(1),
            Generation(1),
            kind,
            Arc::new(CursorKey::new(b"k").signer("s", None)),
            settings,
        );
        let env = super::super::stream::test_env(timing);
        let ctx = Context::new();
        let addr = ctx.address();
        let share = MemoryBudget::new(1 << 20);
        let ledger = StreamLedger::new("0".repeat(32).into(), StreamId(1), None, Tick(0));
        let generation = Arc::new(super::super::generations::Gen::new(
            super::super::generations::GenSettings::for_tests(),
            Arc::default(),
        ))
        .enter(super::super::generations::Counted::Stream);
        let links = super::super::stream::StreamLinks {
            session: link,
            env,
            caller_budget: share,
            span: tracing::Span::none(),
        };
        let (body, _) = StreamActor::start_in(ctx, core, final_json, links, ledger, generation);
        (addr, body)
    }

    /// actix gives every sender one message past a full mailbox and each body has a sender
    /// of its own, so this holds whether the body used `try_send` or `do_send`; it pins the
    /// behaviour (one detach per body, delivered with the mailbox full).
    #[actix_web::test]
    async fn a_dropped_body_reaches_its_stream_even_when_the_stream_mailbox_is_full() {
        tokio::time::pause();
        let session = Session::create(|_| Session::default());
        // Answered at once: closed from the start, its final frame handed to this body.
        let kind = StreamKind::Post { request: crate::proto::ids::JsonRpcId::Number(1) };
        let (stream, body) = start(
            Arc::new(session.clone().recipient()),
            kind,
            Some(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
        );
        let emit =
            || crate::actor::stream::Emit { json: bytes::Bytes::from_static(b"{}"), last: false };
        let mut queued = 0;
        while stream.try_send(emit()).is_ok() {
            queued += 1;
            assert!(queued < 10_000, "the mailbox never filled");
        }
        drop(body);
        // Only the body's detach can start the stream's retention (60 s, the frame was not
        // read): then the stream reports itself gone.
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(
            session.send(Counts).await.unwrap().gone,
            1,
            "the stream got the detach despite its full mailbox"
        );
    }

    #[actix_web::test]
    async fn a_dropped_body_reaches_its_session_even_when_the_session_mailbox_is_full() {
        let session = Session::create(|ctx| {
            ctx.set_mailbox_capacity(1);
            Session::default()
        });
        // Every stream and body of a session reports through this one link: fill the
        // mailbox through it until it refuses (nothing runs until this task yields).
        let link: SessionLink = Arc::new(session.clone().recipient());
        let (_stream, body) = start(Arc::clone(&link), StreamKind::Get, None);
        let mut queued = 0;
        while link.try_send(StreamReport::ConnectionStarted).is_ok() {
            queued += 1;
            assert!(queued < 100, "the mailbox never filled");
        }
        drop(body);
        assert_eq!(
            session.send(Counts).await.unwrap().ended,
            1,
            "the session counted the connection off"
        );
    }

    #[actix_web::test]
    async fn the_keep_alive_timer_runs_only_while_a_connection_is_attached() {
        let session = Session::create(|_| Session::default());
        let (stream, body) = stream(&session);
        assert!(stream.send(KeepaliveRunning).await.unwrap(), "a GET stream with its connection");
        drop(body);
        assert!(
            !stream.send(KeepaliveRunning).await.unwrap(),
            "its connection ended: the timer stopped with it"
        );
    }

    #[actix_web::test]
    async fn a_body_reports_to_its_session_although_its_stream_has_stopped() {
        let session = Session::create(|_| Session::default());
        let (stream, body) = stream(&session);
        stream.send(Stop(CloseReason::Replaced)).await.unwrap();
        assert!(
            stream.send(Stop(CloseReason::Replaced)).await.is_err(),
            "the stream actor has stopped"
        );
        drop(body);
        assert_eq!(session.send(Counts).await.unwrap().ended, 1);
    }
}
