//! The driver's types: its settings ([`ClientConfig`], [`Era`]), its errors ([`ClientError`]),
//! its counters and measurements ([`ClientStats`], [`ResumeSample`]), how a close ended
//! ([`Closed`]), the handler of server-to-client requests, and the outcomes one attempt of a
//! request ([`Failure`]) and one POST ([`Posted`]) can have.

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::client::accept::AcceptStats;
use crate::client::budget::Backoff;
use crate::proto::jsonrpc::ErrorObject;
use crate::proto::version::ProtocolVersion;

/// Which protocol era a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Era {
    /// `initialize` and a session (2025-03-26 to 2025-11-25): resumable streams, re-issue
    /// after a 404.
    #[default]
    Legacy,
    /// 2026-07-28: `server/discover`, then every request on its own (`_meta`, mirrored
    /// headers); a dropped response stream loses its request, which is re-issued under a new
    /// id when idempotent; `input_required` results are answered by the
    /// [`ServerRequestHandler`] and retried.
    Modern,
    /// `server/discover` first; a server that does not answer it as a 2026-07-28 server (an
    /// unrecognised refusal) gets `initialize` (SPEC.md §3.9).
    Auto,
}

/// The bearer token a client sends. It may be replaced while the client runs (a token source
/// refreshing an OAuth access token before it expires); its `principal` names whose token it
/// is and stays the same across replacements. `Debug` never shows the token.
#[derive(Clone)]
pub struct BearerToken {
    current: std::sync::Arc<parking_lot::RwLock<std::sync::Arc<str>>>,
    principal: std::sync::Arc<str>,
}

impl BearerToken {
    /// A token that never changes (its principal is the token itself).
    #[must_use]
    pub fn fixed(token: &str) -> BearerToken {
        BearerToken::refreshed(token, token)
    }

    /// A token that a source replaces ([`BearerToken::set`]), of `principal`.
    #[must_use]
    pub fn refreshed(token: &str, principal: &str) -> BearerToken {
        BearerToken {
            current: std::sync::Arc::new(parking_lot::RwLock::new(token.into())),
            principal: principal.into(),
        }
    }

    /// The token to send now.
    #[must_use]
    pub fn get(&self) -> std::sync::Arc<str> {
        std::sync::Arc::clone(&self.current.read())
    }

    /// Replace it (every clone sees the new one).
    pub fn set(&self, token: &str) {
        *self.current.write() = token.into();
    }

    /// Whose token it is.
    #[must_use]
    pub fn principal(&self) -> &std::sync::Arc<str> {
        &self.principal
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(…)")
    }
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The MCP endpoint URL.
    pub url: String,
    /// Which era to speak.
    pub era: Era,
    /// Bearer token, if the server wants one.
    pub token: Option<BearerToken>,
    /// Version to ask for in `initialize`.
    pub protocol_version: ProtocolVersion,
    /// Capabilities to declare.
    pub capabilities: Value,
    /// Reconnect pacing.
    pub backoff: Backoff,
    /// Reconnect budget: burst.
    pub budget_burst: u32,
    /// Reconnect budget: refill per second.
    pub budget_per_second: f64,
    /// Most resume attempts for one stream before it is reported lost.
    pub max_resume_attempts: u32,
    /// How long (ms) after its first failure an idempotent request is still re-issued (after a
    /// 404, an unresumable stream or a failed POST); also how long a failed new handshake is
    /// retried and a DELETE whose answer was lost is sent again. Every re-issue waits its
    /// backoff and draws on the reconnect budget, so the window bounds time, the budget rate.
    pub reissue_window_ms: u64,
}

impl ClientConfig {
    /// Defaults for `url`.
    #[must_use]
    pub fn new(url: &str) -> ClientConfig {
        ClientConfig {
            url: url.to_owned(),
            era: Era::Legacy,
            token: None,
            protocol_version: ProtocolVersion::LATEST,
            capabilities: json!({}),
            backoff: Backoff { default_ms: 1_000, max_ms: 30_000 },
            budget_burst: 20,
            budget_per_second: 10.0,
            max_resume_attempts: 8,
            reissue_window_ms: 30_000,
        }
    }
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a JSON-RPC error (terminal).
    #[error("server error {}: {}", .0.code, .0.message)]
    Rpc(ErrorObject),
    /// The request's fate is unknown: its session ended, or its stream could not be
    /// resumed. It was not re-issued (not idempotent).
    #[error("request {0} was lost: {1}")]
    Lost(String, String),
    /// An HTTP status the client does not handle.
    #[error("HTTP {0}: {1}")]
    Http(u16, String),
    /// 429 or 503: the server refused for now (the request was not processed), with its
    /// `Retry-After` in ms if it sent one. Idempotent requests and handshakes are retried
    /// after it; this is what is left when they were retried too often.
    #[error("HTTP {status} (retry after {retry_after_ms:?} ms): {body}")]
    Unavailable {
        /// 429 or 503.
        status: u16,
        /// `Retry-After` (seconds in the header), in ms.
        retry_after_ms: Option<u64>,
        /// The response body.
        body: String,
    },
    /// Connection-level failure.
    #[error("transport: {0}")]
    Transport(String),
    /// The caller cancelled the request; the server was told with `notifications/cancelled`.
    #[error("cancelled")]
    Cancelled,
}

/// Counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    /// `initialize` handshakes completed.
    pub handshakes: u64,
    /// SSE response streams opened by POSTs.
    pub streams: u64,
    /// GET resumes sent.
    pub resumes: u64,
    /// Resumes refused by the reconnect budget (the client waited).
    pub budget_waits: u64,
    /// Idempotent requests re-issued (after a 404, an unresumable stream or a failed POST).
    pub reissued: u64,
    /// 404 answers to requests that carried a session id, and calls whose stream was not
    /// resumed because another call replaced its session meanwhile (after a 404 of its own).
    pub not_found: u64,
    /// 404s after which the client sent a new `initialize` (without the dead id) that reached
    /// the server, or found a newer session already made by a concurrent call.
    pub recovered_after_404: u64,
    /// Requests reported lost ([`ClientError::Lost`]).
    pub lost: u64,
    /// The acceptance point's counters (events accepted, duplicates and foreign events dropped).
    pub accept: AcceptStats,
    /// Messages received on 2026-07-28 responses (notifications and answers; these streams
    /// carry no event ids and bypass the acceptance point).
    pub modern_messages: u64,
    /// `input_required` rounds answered (2026-07-28).
    pub input_rounds: u64,
}

impl ClientStats {
    /// Every message that reached the client: events of legacy streams (accepted or not) and
    /// messages of 2026-07-28 responses.
    #[must_use]
    pub fn events(&self) -> u64 {
        self.accept.events() + self.modern_messages
    }
}

/// How [`McpClient::close`] ended.
///
/// [`McpClient::close`]: super::McpClient::close
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The server confirmed the DELETE.
    Ended,
    /// A 2026-07-28 client has no session: nothing to end.
    Stateless,
    /// The session no longer exists (404, or it had already answered 404). A DELETE whose
    /// answer was lost and that is sent again ends here.
    AlreadyGone,
    /// 405: the server does not let clients end sessions (not a deletion receipt).
    NotAllowed,
    /// Any other status: the session may still exist.
    Refused(u16),
}

impl Closed {
    /// What a DELETE's status says about the session.
    #[must_use]
    pub fn from_status(status: u16) -> Closed {
        match status {
            200..=299 => Closed::Ended,
            404 => Closed::AlreadyGone,
            405 => Closed::NotAllowed,
            s => Closed::Refused(s),
        }
    }

    /// Whether the session is known to be over.
    #[must_use]
    pub fn is_over(self) -> bool {
        matches!(self, Closed::Ended | Closed::AlreadyGone | Closed::Stateless)
    }
}

/// One resume, measured from the moment a stream broke to the first event accepted from a
/// resumed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeSample {
    /// Disconnect to first replayed event.
    pub total: Duration,
    /// The part of `total` spent waiting on purpose (`retry`, backoff, `Retry-After`, budget).
    pub waited: Duration,
}

/// Answers server-to-client requests (`sampling/createMessage`, `elicitation/create`,
/// `roots/list`, ...). Declare the matching capabilities in [`ClientConfig::capabilities`].
pub type ServerRequestHandler = Rc<dyn Fn(&str, &Value) -> Result<Value, ErrorObject>>;

/// Why one attempt of a request failed, and what may follow.
pub(super) enum Failure {
    /// 404: the session (of this generation) is gone.
    Gone(u32),
    /// The outcome is unknown (stream unresumable, POST connection failed).
    Unknown(ClientError),
    /// 429/503: not processed; may be retried after the delay (ms).
    Busy(ClientError, u64),
    /// A final answer.
    Final(ClientError),
}

pub(super) enum Posted {
    Accepted,
    Json(Bytes),
    Sse(awc::ClientResponse),
    Gone,
}

/// Whether a reply with these headers is an SSE stream.
pub(super) fn is_sse(headers: &awc::http::header::HeaderMap) -> bool {
    headers.get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_405_to_delete_is_not_a_deletion_receipt() {
        assert!(Closed::from_status(204).is_over());
        assert!(
            Closed::from_status(404).is_over(),
            "already gone (e.g. a DELETE sent again after its answer was lost)"
        );
        assert_eq!(Closed::from_status(405), Closed::NotAllowed);
        assert!(!Closed::from_status(405).is_over());
        assert!(!Closed::from_status(403).is_over());
        assert!(!Closed::from_status(500).is_over());
    }
}
