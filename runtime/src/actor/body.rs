//! The SSE response body of one connection: initial frames (priming or replay), then live
//! frames from the stream actor's bounded queue. When it is dropped (the client went away, or
//! the response finished) it tells its stream actor, so a detach is noticed at once.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use actix::Addr;
use actix_web::body::{BodySize, MessageBody};
use bytes::Bytes;
use tokio::sync::mpsc;

use super::stream::{Detached, StreamActor};

/// A streaming `text/event-stream` body bound to one stream connection.
pub struct SseBody {
    initial: VecDeque<Bytes>,
    live: Option<mpsc::Receiver<Bytes>>,
    owner: Option<(Addr<StreamActor>, u64)>,
    finished: bool,
}

impl std::fmt::Debug for SseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseBody").field("initial", &self.initial.len()).field("finished", &self.finished).finish_non_exhaustive()
    }
}

impl SseBody {
    /// A body that writes `initial`, then whatever arrives on `live` until its sender is
    /// dropped (`live = None`: end after `initial`).
    pub(crate) fn new(initial: Vec<Bytes>, live: Option<mpsc::Receiver<Bytes>>, owner: Option<(Addr<StreamActor>, u64)>) -> SseBody {
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
        if let Some((addr, conn)) = self.owner.take() {
            // If the mailbox is full the stream notices on its next write (queue closed).
            let _ = addr.try_send(Detached { conn, drained: self.finished });
        }
    }
}
