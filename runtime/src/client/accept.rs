//! The one acceptance point for server-to-client SSE events.
//!
//! [`Acceptor::accept_stream_event`] is the only way a message reaches the agent. In order it
//! checks: the connection belongs to the current session, protocol version and caller; the
//! stream is known; empty-data events (priming) only move the cursor; the data is a JSON-RPC
//! message; a response answers a request outstanding **on that stream**; a progress
//! notification on a request's stream carries a progress token registered for that stream
//! (see [`Acceptor::expect_progress`]); and the event is not a duplicate, by `(session generation, stream, event id, digest)`. Then it records the inbox
//! receipt, the cursor and the dispatch in one journal step. A duplicate never moves the
//! cursor, so a cursor never moves backwards.

use std::collections::{HashMap, HashSet};

use std::sync::Arc;

use sha2::{Digest, Sha256};

pub use super::journal::{EventRef, ReceiptKey, StreamKey};
use super::journal::{Journal, JournalError, Recorded};
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{Incoming, Message, parse_body};
use crate::proto::version::ProtocolVersion;

/// Who a connection speaks for: session, negotiated version and caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Client-side session epoch.
    pub session_generation: u32,
    /// The `MCP-Session-Id` in use.
    pub session_id: Arc<str>,
    /// The negotiated version (sent as `MCP-Protocol-Version`).
    pub protocol_version: ProtocolVersion,
    /// The caller identity the connection authenticated as.
    pub principal: Option<Arc<str>>,
}

/// One event as read from a connection of `stream`, opened under `binding`.
#[derive(Debug, Clone, Copy)]
pub struct IncomingEvent<'a> {
    /// The stream the connection belongs to.
    pub stream: &'a StreamKey,
    /// The binding the connection was opened with.
    pub binding: &'a Binding,
    /// The SSE `id`, if the event had one.
    pub id: Option<&'a str>,
    /// The SSE data (empty for priming events).
    pub data: &'a str,
}

/// What happened to an accepted event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acceptance {
    /// Empty data: the cursor moved; nothing to dispatch.
    CursorOnly,
    /// Recorded and queued for the agent.
    Dispatched {
        /// Outbox position.
        seq: u64,
        /// The stream's request that this response completed, if it was one.
        completed: Option<JsonRpcId>,
    },
}

/// Why an event was refused. Refused events are never dispatched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The connection belongs to an earlier session (or another caller or version).
    #[error("event from a connection of another session, version or caller")]
    WrongBinding,
    /// The stream is not known to this client.
    #[error("event on an unknown stream")]
    UnknownStream,
    /// Already accepted (a replay): dropped, cursor unchanged.
    #[error("duplicate event")]
    Duplicate,
    /// A response that answers no request outstanding on this stream.
    #[error("response {0} does not belong to this stream")]
    Uncorrelated(String),
    /// Not a JSON-RPC message (or a batch).
    #[error("malformed message")]
    Malformed,
    /// The journal failed; nothing was recorded.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

#[derive(Debug)]
struct StreamEntry {
    binding: Binding,
    /// Requests whose responses may arrive on this stream.
    outstanding: HashSet<JsonRpcId>,
    /// Progress tokens (as JSON text) this stream may report on; `None` = any (standalone GET
    /// streams, and streams restored after a restart, whose tokens were not journaled).
    progress_tokens: Option<HashSet<String>>,
    cursor: Option<String>,
}

/// Counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AcceptStats {
    /// Messages dispatched.
    pub dispatched: u64,
    /// Empty-data events (cursor only).
    pub cursor_only: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
    /// Responses refused for correlation.
    pub uncorrelated: u64,
    /// Events refused for binding or unknown stream.
    pub misrouted: u64,
}

impl AcceptStats {
    /// Every event that reached the acceptance point, accepted or refused.
    #[must_use]
    pub fn events(&self) -> u64 {
        self.dispatched + self.cursor_only + self.duplicates + self.uncorrelated + self.misrouted
    }
}

/// The client's stream table and acceptance point.
#[derive(Debug)]
pub struct Acceptor<J: Journal> {
    current: Binding,
    streams: HashMap<StreamKey, StreamEntry>,
    next_stream: u64,
    next_unnamed: u64,
    journal: J,
    stats: AcceptStats,
}

impl<J: Journal> Acceptor<J> {
    /// An acceptor for the session in `binding`, recording into `journal`.
    ///
    /// Streams the journal remembers from the same session generation are restored with their
    /// cursors and unanswered requests (a restarted client resumes them and neither loses nor
    /// re-dispatches); streams of other generations are forgotten. New stream numbers start
    /// after the highest remembered one.
    pub fn new(binding: Binding, mut journal: J) -> Acceptor<J> {
        let mut streams = HashMap::new();
        let mut next_stream = 1;
        for (key, outstanding) in journal.streams() {
            next_stream = next_stream.max(key.stream + 1);
            if key.session_generation == binding.session_generation {
                let cursor = journal.cursor(&key);
                streams.insert(
                    key,
                    StreamEntry {
                        binding: binding.clone(),
                        outstanding: outstanding.into_iter().collect(),
                        progress_tokens: None,
                        cursor,
                    },
                );
            } else {
                journal.forget_stream(&key);
            }
        }
        Acceptor {
            current: binding,
            streams,
            next_stream,
            next_unnamed: 1,
            journal,
            stats: AcceptStats::default(),
        }
    }

    /// Streams currently known (restored or opened).
    #[must_use]
    pub fn stream_keys(&self) -> Vec<StreamKey> {
        let mut keys: Vec<StreamKey> = self.streams.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// The current binding.
    #[must_use]
    pub fn binding(&self) -> &Binding {
        &self.current
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> AcceptStats {
        self.stats
    }

    /// The journal (to read the outbox and acknowledge dispatches).
    pub fn journal_mut(&mut self) -> &mut J {
        &mut self.journal
    }

    fn open(&mut self, outstanding: &[JsonRpcId]) -> Result<StreamKey, JournalError> {
        let key = StreamKey {
            session_generation: self.current.session_generation,
            stream: self.next_stream,
        };
        self.journal.register_stream(&key, outstanding)?;
        self.next_stream += 1;
        let progress_tokens = (!outstanding.is_empty()).then(HashSet::new);
        self.streams.insert(
            key.clone(),
            StreamEntry {
                binding: self.current.clone(),
                outstanding: outstanding.iter().cloned().collect(),
                progress_tokens,
                cursor: None,
            },
        );
        Ok(key)
    }

    /// Register the response stream of a POST carrying `requests`.
    ///
    /// # Errors
    /// The journal could not record the stream.
    pub fn open_post_stream(&mut self, requests: &[JsonRpcId]) -> Result<StreamKey, JournalError> {
        self.open(requests)
    }

    /// Allow `notifications/progress` with `token` on `stream` (the request sent on it asked
    /// for progress with that token). Progress with any other token on a request's stream is
    /// refused as uncorrelated.
    pub fn expect_progress(&mut self, stream: &StreamKey, token: &serde_json::Value) {
        if let Some(tokens) = self.streams.get_mut(stream).and_then(|e| e.progress_tokens.as_mut())
        {
            tokens.insert(token.to_string());
        }
    }

    /// Register a standalone GET stream (it never carries responses unless resuming a POST
    /// stream, which keeps that stream's key).
    ///
    /// # Errors
    /// The journal could not record the stream.
    pub fn open_get_stream(&mut self) -> Result<StreamKey, JournalError> {
        self.open(&[])
    }

    /// The `Last-Event-ID` to resume `stream` with: the newest accepted cursor (journal first,
    /// so it survives a restart). `None` when no id was ever seen: the stream cannot resume.
    #[must_use]
    pub fn resume_cursor(&self, stream: &StreamKey) -> Option<String> {
        self.streams
            .get(stream)
            .and_then(|s| s.cursor.clone())
            .or_else(|| self.journal.cursor(stream))
    }

    /// Requests still unanswered on `stream`.
    #[must_use]
    pub fn outstanding(&self, stream: &StreamKey) -> Vec<JsonRpcId> {
        self.streams
            .get(stream)
            .map(|s| s.outstanding.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forget a finished stream (and its receipts: a late replay on it is refused as an
    /// unknown stream).
    pub fn close_stream(&mut self, stream: &StreamKey) {
        self.streams.remove(stream);
        self.journal.forget_stream(stream);
    }

    /// A new session replaced the old one (after a 404). Every stream of the old session is
    /// dropped; their unanswered requests are returned so the caller can report them lost or
    /// re-issue the idempotent ones — they are never moved into the new session silently.
    pub fn rebind(&mut self, binding: Binding) -> Vec<JsonRpcId> {
        self.current = binding;
        let old: Vec<(StreamKey, StreamEntry)> = self.streams.drain().collect();
        let mut lost = Vec::new();
        for (key, entry) in old {
            self.journal.forget_stream(&key);
            lost.extend(entry.outstanding);
        }
        lost.sort();
        lost
    }

    /// The acceptance point. See the module documentation for the checks, in order.
    ///
    /// # Errors
    /// A [`Refusal`]; the event was not dispatched and the cursor did not move.
    pub fn accept_stream_event(&mut self, ev: IncomingEvent<'_>) -> Result<Acceptance, Refusal> {
        if *ev.binding != self.current
            || ev.stream.session_generation != self.current.session_generation
        {
            self.stats.misrouted += 1;
            return Err(Refusal::WrongBinding);
        }
        let Some(entry) = self.streams.get(ev.stream) else {
            self.stats.misrouted += 1;
            return Err(Refusal::UnknownStream);
        };
        if entry.binding != self.current {
            self.stats.misrouted += 1;
            return Err(Refusal::WrongBinding);
        }
        let digest: [u8; 32] = Sha256::digest(ev.data.as_bytes()).into();
        let event = match ev.id {
            Some(id) => EventRef::Id(id.to_owned()),
            None => {
                self.next_unnamed += 1;
                EventRef::Unnamed(self.next_unnamed)
            }
        };
        let receipt = ReceiptKey { stream: ev.stream.clone(), event, digest };
        if ev.data.is_empty() {
            // Priming: the cursor moves, nothing is dispatched.
            if self.journal.record(&receipt, ev.id, None, None)? == Recorded::Duplicate {
                self.stats.duplicates += 1;
                return Err(Refusal::Duplicate);
            }
            if let (Some(id), Some(e)) = (ev.id, self.streams.get_mut(ev.stream)) {
                e.cursor = Some(id.to_owned());
            }
            self.stats.cursor_only += 1;
            return Ok(Acceptance::CursorOnly);
        }
        let message = match parse_body(ev.data.as_bytes()) {
            Ok(Incoming::Single(m)) => m,
            _ => return Err(Refusal::Malformed),
        };
        let response_id = match &message {
            Message::Response { id, .. } => Some(id.clone()),
            Message::ErrorResponse { id: Some(id), .. } => Some(id.clone()),
            Message::ErrorResponse { id: None, .. }
            | Message::Request { .. }
            | Message::Notification { .. } => None,
        };
        if let Some(id) = response_id.as_ref().filter(|id| !entry.outstanding.contains(*id)) {
            // Either a replay of a response already accepted here, or a foreign one.
            if self.journal.contains(&receipt) {
                self.stats.duplicates += 1;
                return Err(Refusal::Duplicate);
            }
            self.stats.uncorrelated += 1;
            return Err(Refusal::Uncorrelated(id.to_string()));
        }
        if let (Message::Notification { method, params, .. }, Some(tokens)) =
            (&message, &entry.progress_tokens)
            && method == "notifications/progress"
        {
            let token = params
                .as_ref()
                .and_then(|p| p.get("progressToken"))
                .map(ToString::to_string)
                .unwrap_or_default();
            if !tokens.contains(&token) {
                self.stats.uncorrelated += 1;
                return Err(Refusal::Uncorrelated(format!("progress {token}")));
            }
        }
        let Recorded::New { dispatch: Some(seq) } =
            self.journal.record(&receipt, ev.id, Some(ev.data), response_id.as_ref())?
        else {
            self.stats.duplicates += 1;
            return Err(Refusal::Duplicate);
        };
        let entry = self.streams.get_mut(ev.stream).expect("checked above");
        if let Some(id) = ev.id {
            entry.cursor = Some(id.to_owned());
        }
        if let Some(id) = &response_id {
            entry.outstanding.remove(id);
        }
        self.stats.dispatched += 1;
        Ok(Acceptance::Dispatched { seq, completed: response_id })
    }
}

#[cfg(test)]
mod tests;
