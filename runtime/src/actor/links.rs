//! What a stream and its connections' bodies tell their owners: a body its stream (the
//! connection ended) and its session, a stream its session. Apart from both actors, so that a
//! body knows its stream only as the recipient of one message.

use std::sync::Arc;

use actix::prelude::*;

use crate::proto::ids::StreamId;

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

/// A connection's body was dropped; `drained` = it returned every frame and ended normally.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Detached {
    pub(crate) conn: u64,
    pub(crate) drained: bool,
}
