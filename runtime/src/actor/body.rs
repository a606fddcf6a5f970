//! The SSE response body of one connection: initial frames (priming or replay), then live
//! frames from the stream actor's bounded queue.
//!
//! Connection accounting cannot drift: whoever creates a body for a stream has counted the
//! connection with its session, and the body's [`ConnectionOwner`] reports the end when the
//! body is dropped (the client went away, the response finished, or the body was never
//! sent), with `do_send`, which never drops a message while its receiver lives. It reports
//! to the session directly, not through the stream actor, so a stream that stopped first
//! (replaced, evicted, retention over) cannot leave its session counting a connection that
//! is gone.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix::{Recipient, WeakRecipient};
use actix_web::body::{BodySize, MessageBody};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::stream::{Detached, StreamReport};

/// Where a body reports its end: its stream (to pick the retention) and its session (to
/// count the connection off).
pub(crate) struct ConnectionOwner {
    pub(crate) stream: Recipient<Detached>,
    pub(crate) session: WeakRecipient<StreamReport>,
    pub(crate) conn: u64,
}

/// A streaming `text/event-stream` body bound to one stream connection.
pub struct SseBody {
    initial: VecDeque<Bytes>,
    live: Option<mpsc::Receiver<Bytes>>,
    owner: Option<ConnectionOwner>,
    finished: bool,
}

impl std::fmt::Debug for SseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseBody").field("initial", &self.initial.len()).field("finished", &self.finished).finish_non_exhaustive()
    }
}

impl SseBody {
    /// A body that writes `initial`, then whatever arrives on `live` until its sender is
    /// dropped (`live = None`: end after `initial`). With an `owner`, the caller has already
    /// counted this connection with the session; the body counts it off when dropped.
    pub(crate) fn new(initial: Vec<Bytes>, live: Option<mpsc::Receiver<Bytes>>, owner: Option<ConnectionOwner>) -> SseBody {
        // Initial frames (priming + an immediate answer, or a replay) go out as one chunk.
        let initial: VecDeque<Bytes> = if initial.len() > 1 {
            let mut joined = bytes::BytesMut::with_capacity(initial.iter().map(Bytes::len).sum());
            for f in &initial {
                joined.extend_from_slice(f);
            }
            VecDeque::from([joined.freeze()])
        } else {
            initial.into()
        };
        SseBody { initial, live, owner, finished: false }
    }

    /// A body with fixed frames and no stream behind it.
    #[must_use]
    pub fn fixed(frames: Vec<Bytes>) -> SseBody {
        SseBody::new(frames, None, None)
    }
}

impl MessageBody for SseBody {
    type Error = Infallible;

    fn size(&self) -> BodySize {
        BodySize::Stream
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Infallible>>> {
        let this = self.get_mut();
        if let Some(f) = this.initial.pop_front() {
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
            o.stream.do_send(Detached { conn: o.conn, drained: self.finished });
            if let Some(session) = o.session.upgrade() {
                session.do_send(StreamReport::ConnectionEnded);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use actix::prelude::{Actor, ActorContext, Context, Handler, Message, MessageResult};

    use super::*;

    /// Counts what it is told; a mailbox of one message.
    #[derive(Default)]
    struct Sink {
        detached: usize,
        ended: usize,
    }

    impl Actor for Sink {
        type Context = Context<Self>;
    }

    impl Handler<Detached> for Sink {
        type Result = ();
        fn handle(&mut self, _: Detached, _: &mut Context<Self>) {
            self.detached += 1;
        }
    }

    impl Handler<StreamReport> for Sink {
        type Result = ();
        fn handle(&mut self, r: StreamReport, _: &mut Context<Self>) {
            if r == StreamReport::ConnectionEnded {
                self.ended += 1;
            }
        }
    }

    #[derive(Message)]
    #[rtype(result = "(usize, usize)")]
    struct Counts;

    impl Handler<Counts> for Sink {
        type Result = MessageResult<Counts>;
        fn handle(&mut self, _: Counts, _: &mut Context<Self>) -> Self::Result {
            MessageResult((self.detached, self.ended))
        }
    }

    #[actix_web::test]
    async fn a_dropped_body_reaches_its_stream_and_session_even_when_their_mailboxes_are_full() {
        let stream = Sink::create(|ctx| {
            ctx.set_mailbox_capacity(1);
            Sink::default()
        });
        let session = Sink::create(|ctx| {
            ctx.set_mailbox_capacity(1);
            Sink::default()
        });
        // Fill both mailboxes (nothing runs until this task yields).
        stream.try_send(Detached { conn: 0, drained: false }).unwrap();
        assert!(stream.try_send(Detached { conn: 0, drained: false }).is_err(), "the stream's mailbox is full");
        session.try_send(StreamReport::ConnectionStarted).unwrap();
        assert!(session.try_send(StreamReport::ConnectionStarted).is_err(), "the session's mailbox is full");
        let owner = ConnectionOwner { stream: stream.clone().recipient(), session: WeakRecipient::from(session.clone()), conn: 1 };
        drop(SseBody::new(vec![], None, Some(owner)));
        assert_eq!(stream.send(Counts).await.unwrap().0, 2, "the body's detach arrived after the queued one");
        assert_eq!(session.send(Counts).await.unwrap().1, 1, "the session counted the connection off");
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Stop;

    impl Handler<Stop> for Sink {
        type Result = ();
        fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    #[actix_web::test]
    async fn a_body_reports_to_its_session_although_its_stream_has_stopped() {
        let session = Sink::create(|_| Sink::default());
        let stream = Sink::create(|_| Sink::default());
        stream.send(Stop).await.unwrap();
        assert!(stream.send(Counts).await.is_err(), "the stream actor has stopped");
        let owner = ConnectionOwner { stream: stream.recipient(), session: WeakRecipient::from(session.clone()), conn: 1 };
        drop(SseBody::new(vec![], None, Some(owner)));
        assert_eq!(session.send(Counts).await.unwrap().1, 1);
    }
}
