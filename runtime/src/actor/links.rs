//! What a stream and its connections' bodies tell their owners (a body its stream: the
//! connection ended; a body and a stream their session), and what a running request sends its
//! stream. Apart from the actors, so that a body knows its stream only as the recipient of
//! one message, and the request pipeline names no session.

use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;

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
    /// A connection's body was dropped, of a stream its session keeps as data (no actor):
    /// the connection ended, and the stream's retention starts (`drained`: the body returned
    /// every frame).
    DormantDetached {
        /// The stream.
        stream: StreamId,
        /// The connection.
        conn: u64,
        /// It returned every frame and ended normally.
        drained: bool,
    },
}

/// A connection's body was dropped; `drained` = it returned every frame and ended normally.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Detached {
    pub(crate) conn: u64,
    pub(crate) drained: bool,
}

/// Append a message to a stream; `last` marks the final response (closes the stream).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Emit {
    pub(crate) json: Bytes,
    pub(crate) last: bool,
}

/// SEP-1699: end the current connection, keep the stream.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct PollClose;
