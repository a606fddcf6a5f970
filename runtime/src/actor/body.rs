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
