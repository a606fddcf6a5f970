//! What a stream and its connections' bodies tell their owners (a body its stream: the
//! connection ended; a body and a stream their session), and what a running request sends its
//! stream. Apart from the actors, so that a body knows its stream only as the recipient of
//! one message (or, kept as data, its session's queue of ends), and the request pipeline
//! names no session.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    /// every frame; if not, the stream is recorded now). Sent when the body was cut, or when
    /// its session does not read [`DormantEnds`] (not busy).
    DormantDetached {
        /// The stream.
        stream: StreamId,
        /// The connection.
        conn: u64,
        /// It returned every frame and ended normally.
        drained: bool,
    },
}

/// The connections of a session's kept streams (`actor::dormant`) that ended after returning
/// every frame, queued by their bodies while the session is busy and read at its next request
/// (or its timer tick): a busy session's next request comes before long, and a message per
/// response (a mailbox entry, a wake, a turn of its context) cost about a twentieth of a
/// legacy SSE echo's CPU. While the session is not busy ([`DormantEnds::queue`] off), a body
/// tells its end by message, as a cut one always does. Bounded by the bodies the session has
/// open (each pushes once).
#[derive(Debug, Default)]
pub(crate) struct DormantEnds {
    ends: parking_lot::Mutex<Vec<(StreamId, u64)>>,
    /// The session reads `ends`; off, bodies send their ends. Switched under the lock (read
    /// first without it: a body of a session that is not busy takes no lock).
    on: AtomicBool,
}

impl DormantEnds {
    /// Connection `conn` of stream `stream` returned every frame and ended: queued, or
    /// `false` when the session does not read its queue now (the body sends it instead).
    pub(crate) fn push(&self, stream: StreamId, conn: u64) -> bool {
        if !self.on.load(Ordering::Acquire) {
            return false;
        }
        let mut ends = self.ends.lock();
        // Switched off since: the session took what was queued then, and reads no more.
        let on = self.on.load(Ordering::Relaxed);
        if on {
            ends.push((stream, conn));
        }
        on
    }

    /// Move what is queued into `into` (cleared first); both buffers keep their capacity.
    pub(crate) fn take_into(&self, into: &mut Vec<(StreamId, u64)>) {
        into.clear();
        std::mem::swap(&mut *self.ends.lock(), into);
    }

    /// Turn queueing on or off; what was queued until now is moved into `into` (an end
    /// pushed before the switch is read there, one after it is queued or sent as switched).
    /// Off, the queue keeps no buffer.
    pub(crate) fn queue(&self, on: bool, into: &mut Vec<(StreamId, u64)>) {
        into.clear();
        let mut ends = self.ends.lock();
        self.on.store(on, Ordering::Release);
        std::mem::swap(&mut *ends, into);
        if !on {
            // Nothing is queued while off: a burst's buffer is not kept.
            *ends = Vec::new();
        }
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
