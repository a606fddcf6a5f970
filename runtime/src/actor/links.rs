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
    /// A connection's body was dropped before it returned every frame, of a stream its
    /// session keeps as data (no actor): the connection was cut, so the stream is recorded
    /// now and its retention starts. (A body that returned every frame is queued in
    /// [`DormantEnds`] instead: no message.)
    DormantCut {
        /// The stream.
        stream: StreamId,
        /// The connection.
        conn: u64,
    },
}

/// The connections of a session's kept streams (`actor::dormant`) that ended after returning
/// every frame, queued by their bodies and read by the session at its next message or timer
/// tick. A message to the session per response (a mailbox entry, a wake, a turn of its
/// context) cost about a twentieth of a legacy SSE echo's CPU; a body pushes here under an
/// uncontended lock. Bounded by the bodies the session has open (each pushes once).
#[derive(Debug, Default)]
pub(crate) struct DormantEnds(parking_lot::Mutex<Vec<(StreamId, u64)>>);

impl DormantEnds {
    /// Connection `conn` of stream `stream` returned every frame and ended.
    pub(crate) fn push(&self, stream: StreamId, conn: u64) {
        self.0.lock().push((stream, conn));
    }

    /// Move what is queued into `into` (cleared first); both buffers keep their capacity.
    pub(crate) fn take_into(&self, into: &mut Vec<(StreamId, u64)>) {
        into.clear();
        std::mem::swap(&mut *self.0.lock(), into);
    }
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
