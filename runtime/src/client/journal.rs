//! Inbox receipts and the dispatch outbox, recorded together.
//!
//! A receipt says "this event was accepted"; a dispatch says "this message must reach the
//! agent". Recording both in one step means a crash can never leave a message dispatched
//! without its receipt (re-dispatched after restart) or a receipt without its dispatch (lost).

use std::collections::{BTreeMap, HashSet, VecDeque};

use crate::proto::ids::JsonRpcId;

/// A stream as the client knows it: the session epoch it was opened in and a local number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    /// Client-side session epoch (incremented on every new handshake).
    pub session_generation: u32,
    /// Local stream number, never reused.
    pub stream: u64,
}

/// Which event a receipt is for: the server's id, or a local number for events without one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventRef {
    /// The SSE `id`.
    Id(String),
    /// An event without an id (cannot be replayed, so cannot be duplicated by a resume).
    Unnamed(u64),
}

/// The deduplication key of an accepted event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReceiptKey {
    /// The stream.
    pub stream: StreamKey,
    /// The event.
    pub event: EventRef,
    /// SHA-256 of the event data.
    pub digest: [u8; 32],
}

/// A message waiting for the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Position in the outbox (strictly increasing).
    pub seq: u64,
    /// The stream it came from.
    pub stream: StreamKey,
    /// The JSON-RPC message text.
    pub json: String,
}

/// Why the journal could not record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("journal error: {0}")]
pub struct JournalError(pub String);

/// The outcome of [`Journal::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The receipt was already there; nothing changed.
    Duplicate,
    /// Recorded; `dispatch` is the outbox position when a dispatch was enqueued.
    New {
        /// Outbox position of the dispatch.
        dispatch: Option<u64>,
    },
}

/// Durable (or not) storage of receipts, dispatches and per-stream cursors.
pub trait Journal {
    /// Record the receipt, the stream's new cursor, the request the message answered (no
    /// longer outstanding) and, if given, enqueue the dispatch, all in one step; a duplicate
    /// receipt changes nothing.
    ///
    /// # Errors
    /// Storage failure; nothing was recorded.
    fn record(
        &mut self,
        receipt: &ReceiptKey,
        cursor: Option<&str>,
        dispatch: Option<&str>,
        answered: Option<&JsonRpcId>,
    ) -> Result<Recorded, JournalError>;

    /// Remember a new stream and the requests whose responses it will carry.
    ///
    /// # Errors
    /// Storage failure.
    fn register_stream(
        &mut self,
        stream: &StreamKey,
        outstanding: &[JsonRpcId],
    ) -> Result<(), JournalError>;

    /// Forget a finished stream: its cursor, outstanding requests and receipts.
    fn forget_stream(&mut self, stream: &StreamKey);

    /// Every remembered stream with its unanswered requests (to restore after a restart).
    fn streams(&self) -> Vec<(StreamKey, Vec<JsonRpcId>)>;

    /// Whether this receipt was recorded (and is still remembered).
    fn contains(&self, receipt: &ReceiptKey) -> bool;

    /// Dispatches not yet acknowledged, oldest first.
    fn pending(&self) -> Vec<OutboxEntry>;

    /// The agent has handled every dispatch up to and including `seq`.
    fn ack(&mut self, seq: u64);

    /// The last recorded cursor of a stream (for resuming after a restart).
    fn cursor(&self, stream: &StreamKey) -> Option<String>;
}

/// In-memory journal (tests, and clients that need no restart safety). Receipts are kept in
/// a bounded FIFO set: duplicates older than `max_receipts` events are no longer recognised.
#[derive(Debug)]
pub struct MemoryJournal {
    receipts: HashSet<ReceiptKey>,
    order: VecDeque<ReceiptKey>,
    max_receipts: usize,
    outbox: VecDeque<OutboxEntry>,
    next_seq: u64,
    cursors: std::collections::HashMap<StreamKey, String>,
    streams: BTreeMap<StreamKey, Vec<JsonRpcId>>,
}

impl MemoryJournal {
    /// A journal remembering at most `max_receipts` receipts.
    #[must_use]
    pub fn new(max_receipts: usize) -> MemoryJournal {
        MemoryJournal {
            receipts: HashSet::new(),
            order: VecDeque::new(),
            max_receipts: max_receipts.max(1),
            outbox: VecDeque::new(),
            next_seq: 1,
            cursors: std::collections::HashMap::new(),
            streams: BTreeMap::new(),
        }
    }
}

impl Journal for MemoryJournal {
    fn record(
        &mut self,
        receipt: &ReceiptKey,
        cursor: Option<&str>,
        dispatch: Option<&str>,
        answered: Option<&JsonRpcId>,
    ) -> Result<Recorded, JournalError> {
        if self.receipts.contains(receipt) {
            return Ok(Recorded::Duplicate);
        }
        if let (Some(id), Some(out)) = (answered, self.streams.get_mut(&receipt.stream)) {
            out.retain(|o| o != id);
        }
        self.receipts.insert(receipt.clone());
        self.order.push_back(receipt.clone());
        while self.order.len() > self.max_receipts {
            if let Some(old) = self.order.pop_front() {
                self.receipts.remove(&old);
            }
        }
        if let Some(c) = cursor {
            self.cursors.insert(receipt.stream.clone(), c.to_owned());
        }
        let mut seq = None;
        if let Some(json) = dispatch {
            self.outbox.push_back(OutboxEntry {
                seq: self.next_seq,
                stream: receipt.stream.clone(),
                json: json.to_owned(),
            });
            seq = Some(self.next_seq);
            self.next_seq += 1;
        }
        Ok(Recorded::New { dispatch: seq })
    }

    fn contains(&self, receipt: &ReceiptKey) -> bool {
        self.receipts.contains(receipt)
    }

    fn pending(&self) -> Vec<OutboxEntry> {
        self.outbox.iter().cloned().collect()
    }

    fn ack(&mut self, seq: u64) {
        while self.outbox.front().is_some_and(|d| d.seq <= seq) {
            self.outbox.pop_front();
        }
    }

    fn cursor(&self, stream: &StreamKey) -> Option<String> {
        self.cursors.get(stream).cloned()
    }

    fn register_stream(
        &mut self,
        stream: &StreamKey,
        outstanding: &[JsonRpcId],
    ) -> Result<(), JournalError> {
        self.streams.insert(stream.clone(), outstanding.to_vec());
        Ok(())
    }

    fn forget_stream(&mut self, stream: &StreamKey) {
        self.streams.remove(stream);
        self.cursors.remove(stream);
        self.receipts.retain(|r| r.stream != *stream);
        self.order.retain(|r| r.stream != *stream);
    }

    fn streams(&self) -> Vec<(StreamKey, Vec<JsonRpcId>)> {
        self.streams.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}
