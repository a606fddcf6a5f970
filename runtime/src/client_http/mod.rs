//! The resilient client's HTTP driver (both eras), on `awc`. The 2026-07-28 side is in
//! [`modern`](self) (`ClientConfig::era`); what follows is the legacy side.
//!
//! Everything a message goes through is decided by the sans-IO core in [`crate::client`]:
//! every SSE event passes [`Acceptor::accept_stream_event`]; reconnects are paced by
//! [`Backoff`] and one shared [`ReconnectBudget`]. This module only moves bytes:
//! - POST each message with `Accept: application/json, text/event-stream`; handle both.
//! - A stream that ends before its response is resumed by GET + `Last-Event-ID` (the newest
//!   accepted cursor, so a resumed stream that drops early re-sends the previous id), after
//!   at least the server's `retry`.
//! - A JSON-RPC error response is terminal (but `-32009`, "the server restarted while the
//!   request ran": its outcome is unknown, handled like a failed POST below); so are 4xx
//!   answers to a resume (but 429: like 503 it is retried, no sooner than its `Retry-After`).
//! - 404 on a request that carried a session id: exactly one new handshake (concurrent 404s
//!   share it); the old request is re-issued only when it is idempotent, else reported lost.
//!   The same holds for a stream that cannot be resumed (no cursor, cursor refused, events
//!   gone) and for a POST whose connection failed: idempotent requests are re-issued (after a
//!   pause that doubles from 50 ms, for as long as the request has been failing for less than
//!   [`ClientConfig::reissue_window_ms`]), others reported lost — never silently repeated.
//!   A time bound, not a count: back-to-back faults (a restart, then a cut, then a 404) each
//!   take a re-issue, and what must hold is that a server back within the window is reached.
//! - Request ids start at a random offset per client, so a response from another client's
//!   stream (a crossed or replayed event) can never correlate with one of ours.
//! - Cancel with `notifications/cancelled`; DELETE on close (405 is not a deletion receipt;
//!   a DELETE whose answer was lost is sent again, and 404 then confirms the end).
//!
//! Single-threaded (awc is `!Send`): use it inside an actix/tokio local runtime.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use serde_json::{Value, json};

use crate::client::accept::{AcceptStats, Acceptance, Acceptor, Binding, IncomingEvent, StreamKey};
use crate::client::budget::{Backoff, ReconnectBudget};
use crate::client::journal::{Journal, MemoryJournal};
use crate::proto::ids::{JsonRpcId, Tick};
use crate::proto::jsonrpc::{
    ErrorObject, Incoming, Message, encode_error, encode_notification, encode_request,
    encode_result, parse_body,
};
use crate::proto::version::ProtocolVersion;
use crate::sse::Decoder;

pub use modern::{MAX_ROUNDS, TaskCall};

mod modern;

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

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The MCP endpoint URL.
    pub url: String,
    /// Which era to speak.
    pub era: Era,
    /// Bearer token, if the server wants one.
    pub token: Option<String>,
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
    /// 404 answers to requests that carried a session id.
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

struct Inner<J: Journal> {
    acceptor: Acceptor<J>,
    session_id: String,
    version: ProtocolVersion,
    generation: u32,
    budget: ReconnectBudget,
    next_id: i64,
    stats: ClientStats,
    /// Accepted notifications with the id of the event that carried them.
    notifications: Vec<(Option<String>, Value)>,
    jitter_state: u64,
    /// The session answered 404: the next request starts a new one first, and nothing is
    /// sent with the dead id again.
    session_dead: bool,
    resume_samples: Vec<ResumeSample>,
    /// The server speaks 2026-07-28 (discovered): requests go the stateless way.
    modern: Option<modern::ModernState>,
}

/// Why one attempt of a request failed, and what may follow.
enum Failure {
    /// 404: the session (of this generation) is gone.
    Gone(u32),
    /// The outcome is unknown (stream unresumable, POST connection failed).
    Unknown(ClientError),
    /// 429/503: not processed; may be retried after the delay (ms).
    Busy(ClientError, u64),
    /// A final answer.
    Final(ClientError),
}

/// The re-issue policy of one request, shared by both eras: an outcome-unknown failure of an
/// idempotent request is re-issued (after a pause that doubles from [`REISSUE_BASE_MS`]) for
/// as long as the request has been failing for less than
/// [`ClientConfig::reissue_window_ms`]; a refusal (429/503) is waited out likewise; anything
/// else, and any failure of a request that is not idempotent, ends it.
#[derive(Default)]
struct Reissue {
    count: u32,
    /// When the request first failed.
    since: Option<tokio::time::Instant>,
}

impl Reissue {
    /// The request failed (now, if it had not before): its window starts.
    fn failed(&mut self) {
        self.since.get_or_insert_with(tokio::time::Instant::now);
    }

    /// After `failure`: `Ok` to send the request again (the pause and the reconnect budget
    /// already waited), else the error that ends it.
    async fn after<J: Journal>(
        &mut self,
        c: &McpClient<J>,
        failure: Failure,
        idempotent: bool,
        method: &str,
    ) -> Result<(), ClientError> {
        let first_failure = *self.since.get_or_insert_with(tokio::time::Instant::now);
        let why = match failure {
            Failure::Final(e) => return Err(e),
            Failure::Gone(_) => "the session ended (404)".to_owned(),
            Failure::Unknown(e) => {
                // The server may be restarting (connection refused, -32009, -32010): give it time.
                if idempotent && !c.window_over(first_failure) {
                    tokio::time::sleep(Duration::from_millis(c.cfg.backoff.delay_ms(
                        Some(REISSUE_BASE_MS),
                        self.count,
                        c.jitter(),
                    )))
                    .await;
                }
                e.to_string()
            }
            Failure::Busy(e, delay) => {
                if !idempotent || c.window_over(first_failure) {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(delay)).await;
                e.to_string()
            }
        };
        if !idempotent || c.window_over(first_failure) {
            c.inner.borrow_mut().stats.lost += 1;
            let how = if idempotent {
                format!(
                    "still failing {} ms after its first failure ({} re-issues)",
                    first_failure.elapsed().as_millis(),
                    self.count
                )
            } else {
                "not idempotent".to_owned()
            };
            return Err(ClientError::Lost(method.to_owned(), format!("{why}; {how}")));
        }
        self.count += 1;
        c.inner.borrow_mut().stats.reissued += 1;
        // Re-issues draw on the same budget as reconnects: a fault cannot become a storm.
        c.wait_for_budget().await;
        Ok(())
    }
}

/// `Retry-After` in ms (delta-seconds form, capped at 5 minutes).
fn retry_after_ms_of(headers: &awc::http::header::HeaderMap) -> Option<u64> {
    headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| s.min(300) * 1000)
}

/// First pause before re-issuing a request whose outcome is unknown (doubling, with jitter,
/// up to the backoff's maximum), so a restarting server is given time rather than the whole
/// re-issue allowance spent in a few milliseconds.
const REISSUE_BASE_MS: u64 = 50;

/// The error for a non-success status: [`ClientError::Unavailable`] for 429/503.
fn status_error(status: u16, headers: &awc::http::header::HeaderMap, body: String) -> ClientError {
    if status == 429 || status == 503 {
        ClientError::Unavailable { status, retry_after_ms: retry_after_ms_of(headers), body }
    } else {
        ClientError::Http(status, body)
    }
}

fn random_u64() -> u64 {
    u64::from_le_bytes(crate::rng::bytes::<8>())
}

/// Answers server-to-client requests (`sampling/createMessage`, `elicitation/create`,
/// `roots/list`, ...). Declare the matching capabilities in [`ClientConfig::capabilities`].
pub type ServerRequestHandler = Rc<dyn Fn(&str, &Value) -> Result<Value, ErrorObject>>;

/// A resilient MCP client over Streamable HTTP (legacy era).
pub struct McpClient<J: Journal = MemoryJournal> {
    http: awc::Client,
    cfg: ClientConfig,
    inner: Rc<RefCell<Inner<J>>>,
    /// Serializes handshakes so concurrent 404s cause exactly one.
    handshake: Rc<tokio::sync::Mutex<()>>,
    clock: crate::clock::Clock,
    handler: Option<ServerRequestHandler>,
}

enum Posted {
    Accepted,
    Json(Bytes),
    Sse(awc::ClientResponse),
    Gone,
}

async fn next_chunk<S: Stream<Item = Result<Bytes, awc::error::PayloadError>> + Unpin>(
    s: &mut S,
) -> Option<Result<Bytes, String>> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx))
        .await
        .map(|r| r.map_err(|e| e.to_string()))
}

impl<J: Journal> McpClient<J> {
    /// Connect: `initialize` + `notifications/initialized`.
    ///
    /// # Errors
    /// The handshake failed.
    pub async fn connect(cfg: ClientConfig, journal: J) -> Result<McpClient<J>, ClientError> {
        let http = awc::Client::builder().disable_timeout().finish();
        let clock = crate::clock::Clock::start();
        let modern = match cfg.era {
            Era::Legacy => None,
            Era::Modern | Era::Auto => match Self::discover_with(&http, &cfg).await? {
                Ok(state) => Some(state),
                Err(_) if cfg.era == Era::Auto => None,
                Err(status) => {
                    return Err(ClientError::Http(
                        status,
                        "server/discover: the server does not speak 2026-07-28".into(),
                    ));
                }
            },
        };
        let (session_id, version) = match modern {
            Some(_) => (String::new(), ProtocolVersion::LATEST),
            None => Self::handshake_with(&http, &cfg).await?,
        };
        let binding = Binding {
            session_generation: 1,
            session_id: session_id.as_str().into(),
            protocol_version: version,
            principal: cfg.token.as_deref().map(Into::into),
        };
        let inner = Inner {
            acceptor: Acceptor::new(binding, journal),
            session_id,
            version,
            generation: 1,
            budget: ReconnectBudget::new(cfg.budget_burst, cfg.budget_per_second, Tick(0)),
            // A random start in [2^32, 2^50): unique per client, exact in every JSON number.
            next_id: (1 << 32) + (random_u64() >> 14) as i64,
            stats: ClientStats { handshakes: 1, ..ClientStats::default() },
            modern,
            notifications: Vec::new(),
            jitter_state: random_u64() | 1,
            resume_samples: Vec::new(),
            session_dead: false,
        };
        Ok(McpClient {
            http,
            cfg,
            inner: Rc::new(RefCell::new(inner)),
            handshake: Rc::new(tokio::sync::Mutex::new(())),
            clock,
            handler: None,
        })
    }

    fn now(&self) -> Tick {
        self.clock.now()
    }

    /// Answer server-to-client requests with `handler` (without one, `ping` gets `{}` and
    /// everything else a JSON-RPC "method not found", so the server's tool never waits).
    #[must_use]
    pub fn with_handler(mut self, handler: ServerRequestHandler) -> McpClient<J> {
        self.handler = Some(handler);
        self
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> ClientStats {
        let i = self.inner.borrow();
        ClientStats { accept: i.acceptor.stats(), ..i.stats }
    }

    /// Resume measurements so far, drained.
    pub fn take_resume_samples(&self) -> Vec<ResumeSample> {
        std::mem::take(&mut self.inner.borrow_mut().resume_samples)
    }

    /// Whether this client speaks 2026-07-28 with its server (discovered).
    #[must_use]
    pub fn is_modern(&self) -> bool {
        self.inner.borrow().modern.is_some()
    }

    /// The current session id (empty in the 2026-07-28 era: there is none).
    #[must_use]
    pub fn session_id(&self) -> String {
        self.inner.borrow().session_id.clone()
    }

    /// Notifications received so far (accepted and dispatched), drained.
    pub fn take_notifications(&self) -> Vec<Value> {
        self.take_notifications_with_ids().into_iter().map(|(_, m)| m).collect()
    }

    /// Notifications received so far, each with the id of the SSE event that carried it
    /// (`None` when that event had no `id` line of its own).
    pub fn take_notifications_with_ids(&self) -> Vec<(Option<String>, Value)> {
        std::mem::take(&mut self.inner.borrow_mut().notifications)
    }

    fn builder(
        http: &awc::Client,
        cfg: &ClientConfig,
        method: awc::http::Method,
        session: Option<(&str, ProtocolVersion)>,
    ) -> awc::ClientRequest {
        let mut r = http
            .request(method, &cfg.url)
            .insert_header(("Accept", "application/json, text/event-stream"));
        if let Some((sid, v)) = session {
            r = r
                .insert_header(("Mcp-Session-Id", sid))
                .insert_header(("MCP-Protocol-Version", v.as_str()));
        }
        if let Some(t) = &cfg.token {
            r = r.insert_header(("Authorization", format!("Bearer {t}")));
        }
        r
    }

    async fn handshake_with(
        http: &awc::Client,
        cfg: &ClientConfig,
    ) -> Result<(String, ProtocolVersion), ClientError> {
        let body = encode_request(
            &JsonRpcId::Number(0),
            "initialize",
            Some(
                &json!({"protocolVersion": cfg.protocol_version.as_str(), "capabilities": cfg.capabilities, "clientInfo": {"name": "mcp-runtime-client", "version": env!("CARGO_PKG_VERSION")}}),
            ),
        );
        let mut resp = Self::builder(http, cfg, awc::http::Method::POST, None)
            .insert_header(("Content-Type", "application/json"))
            .send_body(body)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let sid =
            resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let headers = resp.headers().clone();
        let result = Self::read_single(&mut resp).await.map_err(|e| match e {
            ClientError::Http(s, body) => status_error(s, &headers, body),
            other => other,
        })?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .and_then(ProtocolVersion::parse)
            .ok_or_else(|| {
                ClientError::Transport("server offered an unsupported protocol version".into())
            })?;
        let sid = sid.ok_or_else(|| {
            ClientError::Transport("no MCP-Session-Id in the initialize response".into())
        })?;
        let note = encode_notification::<Value>("notifications/initialized", None);
        let r = Self::builder(http, cfg, awc::http::Method::POST, Some((&sid, version)))
            .insert_header(("Content-Type", "application/json"))
            .send_body(note)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let status = r.status().as_u16();
        if status != 202 {
            // Do not leave a half-open session behind (best effort), but never send an id the
            // server just called unknown again.
            if status != 404 {
                let _ = Self::builder(http, cfg, awc::http::Method::DELETE, Some((&sid, version)))
                    .send()
                    .await;
            }
            return Err(status_error(
                status,
                r.headers(),
                "notifications/initialized not accepted".into(),
            ));
        }
        Ok((sid, version))
    }

    /// Read a JSON or single-event SSE response carrying one result (used for `initialize`).
    async fn read_single(resp: &mut awc::ClientResponse) -> Result<Value, ClientError> {
        let status = resp.status().as_u16();
        let sse = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let mut buf = Vec::new();
        let mut dec = Decoder::new();
        while let Some(chunk) = next_chunk(resp).await {
            let chunk = chunk.map_err(ClientError::Transport)?;
            if sse {
                if let Some(e) = dec.feed(&chunk).into_iter().next() {
                    buf = e.data.into_bytes();
                    break;
                }
            } else {
                buf.extend_from_slice(&chunk);
            }
        }
        if status != 200 {
            return Err(ClientError::Http(status, String::from_utf8_lossy(&buf).into_owned()));
        }
        match parse_body(&buf) {
            Ok(Incoming::Single(Message::Response { result, .. })) => Ok(result),
            Ok(Incoming::Single(Message::ErrorResponse { error, .. })) => {
                Err(ClientError::Rpc(error))
            }
            _ => Err(ClientError::Transport("malformed response".into())),
        }
    }

    /// A new session after a 404, unless another call already made one since `seen_generation`.
    /// Handshakes that fail for a transient reason are retried (paced by the reconnect
    /// budget); 401/403 are final. On failure the old session stays marked dead.
    /// `after_404` counts this in [`ClientStats::recovered_after_404`] once an `initialize`
    /// without the old id has been sent, or a newer session already exists.
    async fn rehandshake(&self, seen_generation: u32, after_404: bool) -> Result<(), ClientError> {
        let _guard = self.handshake.lock().await;
        if self.inner.borrow().generation != seen_generation {
            if after_404 {
                self.inner.borrow_mut().stats.recovered_after_404 += 1;
            }
            return Ok(());
        }
        let mut attempt = 0;
        let mut counted = !after_404;
        let started = tokio::time::Instant::now();
        let (sid, version) = loop {
            let sent = Self::handshake_with(&self.http, &self.cfg).await;
            // A refused or failed handshake still went out without the dead id.
            if !counted && !matches!(&sent, Err(ClientError::Transport(_))) {
                counted = true;
                self.inner.borrow_mut().stats.recovered_after_404 += 1;
            }
            match sent {
                Ok(ok) => break ok,
                Err(e @ (ClientError::Http(401 | 403, _) | ClientError::Rpc(_))) => return Err(e),
                Err(e) if self.window_over(started) => return Err(e),
                Err(e) => {
                    let delay = match e {
                        ClientError::Unavailable { retry_after_ms: Some(ms), .. } => {
                            self.cfg.backoff.delay_after_refusal_ms(None, ms, self.jitter())
                        }
                        _ => self.cfg.backoff.delay_ms(Some(50), attempt, self.jitter()),
                    };
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    self.wait_for_budget().await;
                }
            }
        };
        let mut inner = self.inner.borrow_mut();
        inner.generation += 1;
        inner.session_id = sid.clone();
        inner.version = version;
        inner.session_dead = false;
        inner.stats.handshakes += 1;
        let binding = Binding {
            session_generation: inner.generation,
            session_id: sid.as_str().into(),
            protocol_version: version,
            principal: self.cfg.token.as_deref().map(Into::into),
        };
        // Unanswered requests of the old session are the callers' to report or re-issue.
        let _ = inner.acceptor.rebind(binding);
        Ok(())
    }

    async fn post(
        &self,
        body: Bytes,
        session: (String, ProtocolVersion),
    ) -> Result<Posted, ClientError> {
        let mut resp = Self::builder(
            &self.http,
            &self.cfg,
            awc::http::Method::POST,
            Some((&session.0, session.1)),
        )
        .insert_header(("Content-Type", "application/json"))
        .send_body(body)
        .await
        .map_err(|e| ClientError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let sse = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        match status {
            202 => Ok(Posted::Accepted),
            404 => Ok(Posted::Gone),
            200 if sse => Ok(Posted::Sse(resp)),
            200 => resp
                .body()
                .limit(64 << 20)
                .await
                .map(Posted::Json)
                .map_err(|e| ClientError::Transport(e.to_string())),
            s => {
                let body = resp.body().await.unwrap_or_default();
                Err(status_error(s, resp.headers(), String::from_utf8_lossy(&body).into_owned()))
            }
        }
    }

    /// Send a notification.
    ///
    /// # Errors
    /// HTTP or transport failure.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), ClientError> {
        if self.is_modern() {
            return self.notify_modern(method, params).await;
        }
        let session = self.session();
        match self.post(encode_notification(method, params.as_ref()), session).await? {
            Posted::Accepted => Ok(()),
            Posted::Gone => Err(ClientError::Http(404, "session not found".into())),
            _ => Err(ClientError::Transport("unexpected reply to a notification".into())),
        }
    }

    /// Cancel a request by id (the only way in a session: a disconnect is not a
    /// cancellation). For calls made with [`Self::request`], use
    /// [`Self::request_cancellable`]. In the 2026-07-28 era this sends nothing: there, closing a
    /// request's response stream is its cancellation, which `request_cancellable` does.
    ///
    /// # Errors
    /// HTTP or transport failure.
    pub async fn cancel(&self, id: &JsonRpcId, reason: &str) -> Result<(), ClientError> {
        if self.is_modern() {
            return Ok(());
        }
        self.notify("notifications/cancelled", Some(json!({"requestId": id, "reason": reason})))
            .await
    }

    fn session(&self) -> (String, ProtocolVersion) {
        let i = self.inner.borrow();
        (i.session_id.clone(), i.version)
    }

    /// Send a request and wait for its response, resuming its stream as needed. `idempotent`
    /// requests are re-issued when their outcome is unknown (404, unresumable stream, failed
    /// POST); others are reported lost. A `params._meta.progressToken` is registered with the
    /// acceptance point, so progress is accepted only on this request's stream.
    ///
    /// # Errors
    /// [`ClientError`]; a JSON-RPC error response is [`ClientError::Rpc`] (terminal).
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
        idempotent: bool,
    ) -> Result<Value, ClientError> {
        self.request_cancellable(
            method,
            params,
            idempotent,
            &tokio_util::sync::CancellationToken::new(),
        )
        .await
    }

    /// [`Self::request`] that `cancel` can stop: the request in flight is cancelled with
    /// `notifications/cancelled` (sent before its stream is dropped — a disconnect is never
    /// the cancellation), and this returns [`ClientError::Cancelled`].
    ///
    /// # Errors
    /// As [`Self::request`], plus [`ClientError::Cancelled`].
    pub async fn request_cancellable(
        &self,
        method: &str,
        params: Option<Value>,
        idempotent: bool,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Value, ClientError> {
        if self.is_modern() {
            return self.request_modern(method, params, idempotent, cancel).await;
        }
        let mut retry = Reissue::default();
        loop {
            let (dead, generation) = {
                let i = self.inner.borrow();
                (i.session_dead, i.generation)
            };
            if dead {
                // An earlier 404 whose new handshake failed: start the session first.
                self.rehandshake(generation, false).await?;
            }
            if cancel.is_cancelled() {
                return Err(ClientError::Cancelled);
            }
            let failure = match self.attempt(method, params.as_ref(), cancel).await {
                Ok(v) => return Ok(v),
                Err(f) => f,
            };
            // The re-issue window starts at the first failure, before any new handshake.
            retry.failed();
            if let Failure::Gone(generation) = failure {
                {
                    let mut i = self.inner.borrow_mut();
                    i.stats.not_found += 1;
                    if i.generation == generation {
                        i.session_dead = true;
                    }
                }
                // One shared new handshake; never move this request into the new session
                // silently.
                self.rehandshake(generation, true).await?;
            }
            retry.after(self, failure, idempotent, method).await?;
        }
    }

    /// One attempt: POST the request under a fresh id and follow its stream.
    async fn attempt(
        &self,
        method: &str,
        params: Option<&Value>,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Value, Failure> {
        let (id, generation, session) = {
            let mut i = self.inner.borrow_mut();
            i.next_id += 1;
            (JsonRpcId::Number(i.next_id), i.generation, (i.session_id.clone(), i.version))
        };
        let body = encode_request(&id, method, params);
        let posted = match self.post(body, session).await {
            Ok(p) => p,
            Err(e @ ClientError::Transport(_)) => return Err(Failure::Unknown(e)),
            Err(e @ ClientError::Unavailable { retry_after_ms, .. }) => {
                let delay = retry_after_ms.map_or_else(
                    || self.cfg.backoff.delay_ms(None, 0, self.jitter()),
                    |ms| self.cfg.backoff.delay_after_refusal_ms(None, ms, self.jitter()),
                );
                return Err(Failure::Busy(e, delay));
            }
            Err(e) => return Err(Failure::Final(e)),
        };
        match posted {
            Posted::Json(body) => Self::answer_of(&id, &body),
            Posted::Accepted => {
                Err(Failure::Final(ClientError::Transport("request answered with 202".into())))
            }
            Posted::Gone => Err(Failure::Gone(generation)),
            Posted::Sse(resp) => {
                let key = {
                    let mut i = self.inner.borrow_mut();
                    i.stats.streams += 1;
                    let key = i
                        .acceptor
                        .open_post_stream(std::slice::from_ref(&id))
                        .map_err(|e| Failure::Final(ClientError::Transport(e.to_string())))?;
                    if let Some(token) = params.and_then(crate::proto::jsonrpc::progress_token) {
                        i.acceptor.expect_progress(&key, token);
                    }
                    key
                };
                let follow = self.follow(&key, &id, resp);
                tokio::pin!(follow);
                let r = tokio::select! {
                    r = &mut follow => r,
                    () = cancel.cancelled() => {
                        // Tell the server first; the stream is dropped on return.
                        let _ = self.cancel(&id, "cancelled by the caller").await;
                        self.inner.borrow_mut().acceptor.close_stream(&key);
                        return Err(Failure::Final(ClientError::Cancelled));
                    }
                };
                self.inner.borrow_mut().acceptor.close_stream(&key);
                match r {
                    // The server restarted while the request ran: its outcome is unknown, and
                    // an idempotent request may be re-issued.
                    Ok(Err(
                        e @ ClientError::Rpc(ErrorObject {
                            code: crate::proto::jsonrpc::code::SERVER_RESTARTED,
                            ..
                        }),
                    )) => Err(Failure::Unknown(e)),
                    Ok(v) => v.map_err(Failure::Final),
                    Err(ClientError::Http(404, _)) => Err(Failure::Gone(generation)),
                    Err(e @ (ClientError::Lost(..) | ClientError::Transport(_))) => {
                        Err(Failure::Unknown(e))
                    }
                    Err(e) => Err(Failure::Final(e)),
                }
            }
        }
    }

    /// The outcome in a JSON response body to `id`: its result; a JSON-RPC error is final,
    /// but "drained" (`-32010`), whose outcome is unknown. So is a body that is not JSON at
    /// all: empty or cut short, the connection closed before its end (a kill between a
    /// response's head and its body; the HTTP client reads such an end as a clean one).
    fn answer_of(id: &JsonRpcId, body: &[u8]) -> Result<Value, Failure> {
        if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
            return Err(Failure::Unknown(ClientError::Transport(format!(
                "the reply ended before its answer ({} bytes)",
                body.len()
            ))));
        }
        match Self::result_of(id, body) {
            Ok(v) => Ok(v),
            Err(
                e @ ClientError::Rpc(ErrorObject {
                    code: crate::proto::jsonrpc::code::DRAINED, ..
                }),
            ) => Err(Failure::Unknown(e)),
            Err(e) => Err(Failure::Final(e)),
        }
    }

    /// The outcome carried by a response body to request `id`.
    fn result_of(id: &JsonRpcId, body: &[u8]) -> Result<Value, ClientError> {
        match parse_body(body) {
            Ok(Incoming::Single(Message::Response { id: rid, result })) if rid == *id => Ok(result),
            Ok(Incoming::Single(Message::ErrorResponse { error, .. })) => {
                Err(ClientError::Rpc(error))
            }
            _ => Err(ClientError::Transport(format!(
                "unexpected reply: {}",
                String::from_utf8_lossy(body)
            ))),
        }
    }

    /// Read `resp` (the request's stream), resuming by GET + `Last-Event-ID` until the
    /// response arrives. The outer error means the stream could not be followed; the inner
    /// result is the response (a JSON-RPC error is `Err(Rpc)` inside `Ok`).
    async fn follow(
        &self,
        key: &StreamKey,
        id: &JsonRpcId,
        mut resp: awc::ClientResponse,
    ) -> Result<Result<Value, ClientError>, ClientError> {
        let mut retry_hint = None;
        // Backoff grows only while resumes fail to reach a healthy server; a 200 resets it.
        let mut failures = 0u32;
        // Resumes in a row that brought no new event: bounds a server that answers 200 and
        // closes without progress (which would otherwise loop forever).
        let mut no_progress = 0u32;
        let mut last_cursor: Option<String> = None;
        // Resume measurement: when the stream broke, and how long we waited on purpose since.
        let mut broke_at: Option<tokio::time::Instant> = None;
        let mut waited = Duration::ZERO;
        loop {
            let mut first_accept = None;
            let answer =
                self.read_events(key, id, &mut resp, &mut retry_hint, &mut first_accept).await?;
            if let (Some(t0), Some(t1)) = (broke_at, first_accept) {
                self.inner
                    .borrow_mut()
                    .resume_samples
                    .push(ResumeSample { total: t1 - t0, waited });
                broke_at = None;
                waited = Duration::ZERO;
            }
            if let Some(v) = answer {
                return Ok(v);
            }
            // The stream ended (or broke) before the response: resume.
            broke_at.get_or_insert_with(tokio::time::Instant::now);
            let cursor = self.inner.borrow().acceptor.resume_cursor(key);
            let Some(cursor) = cursor else {
                return Err(ClientError::Lost(
                    id.to_string(),
                    "stream ended before any event id: cannot resume".into(),
                ));
            };
            if last_cursor.as_deref() == Some(cursor.as_str()) {
                no_progress += 1;
            } else {
                no_progress = 0;
                last_cursor = Some(cursor.clone());
            }
            let mut retry_after_ms = 0;
            loop {
                if no_progress >= self.cfg.max_resume_attempts
                    || failures >= self.cfg.max_resume_attempts
                {
                    return Err(ClientError::Lost(
                        id.to_string(),
                        format!(
                            "gave up resuming ({no_progress} resumes without progress, {failures} failed)"
                        ),
                    ));
                }
                let delay = if retry_after_ms > 0 {
                    self.cfg.backoff.delay_after_refusal_ms(
                        retry_hint,
                        retry_after_ms,
                        self.jitter(),
                    )
                } else {
                    self.cfg.backoff.delay_ms(retry_hint, failures, self.jitter())
                };
                let paused = tokio::time::Instant::now();
                tokio::time::sleep(Duration::from_millis(delay)).await;
                self.wait_for_budget().await;
                waited += paused.elapsed();
                self.inner.borrow_mut().stats.resumes += 1;
                let session = self.session();
                let sent = Self::builder(
                    &self.http,
                    &self.cfg,
                    awc::http::Method::GET,
                    Some((&session.0, session.1)),
                )
                .insert_header(("Accept", "text/event-stream"))
                .insert_header(("Last-Event-ID", cursor.as_str()))
                .send()
                .await;
                let status = sent.as_ref().map_or(0, |r| r.status().as_u16());
                match sent {
                    Ok(r) if status == 200 => {
                        failures = 0;
                        resp = r;
                        break;
                    }
                    Ok(_) if status == 404 => {
                        return Err(ClientError::Http(404, "session not found".into()));
                    }
                    // 429 and 503 are retried, never sooner than their Retry-After.
                    Ok(r) if status == 429 || status == 503 => {
                        retry_after_ms = retry_after_ms_of(r.headers()).unwrap_or(0);
                        failures += 1;
                    }
                    // 400 (cursor refused), 410 (events gone), 403...: final answers.
                    Ok(mut r) if r.status().is_client_error() => {
                        let body = r.body().await.unwrap_or_default();
                        return Err(ClientError::Lost(
                            id.to_string(),
                            format!(
                                "resume refused: HTTP {status} {}",
                                String::from_utf8_lossy(&body)
                            ),
                        ));
                    }
                    // Other 5xx, network: back off and try again.
                    Ok(_) | Err(_) => {
                        retry_after_ms = 0;
                        failures += 1;
                    }
                }
            }
        }
    }

    /// Feed the stream's events to the acceptor. `Some` when the response arrived.
    async fn read_events(
        &self,
        key: &StreamKey,
        id: &JsonRpcId,
        resp: &mut awc::ClientResponse,
        retry_hint: &mut Option<u64>,
        first_accept: &mut Option<tokio::time::Instant>,
    ) -> Result<Option<Result<Value, ClientError>>, ClientError> {
        let mut dec = Decoder::new();
        while let Some(chunk) = next_chunk(resp).await {
            let Ok(chunk) = chunk else { break };
            let mut answer = None;
            let mut to_answer = Vec::new();
            // Priming and other empty-data events update the cursor without dispatch; the
            // decoder drops them, so feed their ids through the acceptor explicitly.
            let before = dec.last_event_id.clone();
            let events = dec.feed(&chunk);
            if dec.retry_ms.is_some() {
                *retry_hint = dec.retry_ms;
            }
            {
                let mut inner = self.inner.borrow_mut();
                let binding = inner.acceptor.binding().clone();
                if let Some(eid) = dec
                    .last_event_id
                    .as_deref()
                    .filter(|_| events.is_empty() && dec.last_event_id != before)
                    && inner
                        .acceptor
                        .accept_stream_event(IncomingEvent {
                            stream: key,
                            binding: &binding,
                            id: Some(eid),
                            data: "",
                        })
                        .is_ok()
                {
                    first_accept.get_or_insert_with(tokio::time::Instant::now);
                }
                let mut handed_out = None;
                for e in events {
                    let Ok(Acceptance::Dispatched { completed, seq }) =
                        inner.acceptor.accept_stream_event(IncomingEvent {
                            stream: key,
                            binding: &binding,
                            id: e.id.as_deref(),
                            data: &e.data,
                        })
                    else {
                        continue;
                    };
                    first_accept.get_or_insert_with(tokio::time::Instant::now);
                    handed_out = Some(seq);
                    if completed.as_ref() == Some(id) {
                        answer = Some(Self::result_of(id, e.data.as_bytes()));
                        continue;
                    }
                    let msg: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
                    if msg.get("method").is_some() && msg.get("id").is_some() {
                        to_answer.push(msg);
                    } else {
                        // The id this event carried itself: one inherited from an earlier event
                        // (WHATWG keeps the last id) does not name this event.
                        inner.notifications.push((e.own_id.then(|| e.id.clone()).flatten(), msg));
                    }
                }
                // Everything accepted above was handed out (or is being answered) already.
                if let Some(seq) = handed_out {
                    inner.acceptor.journal_mut().ack(seq);
                }
            }
            for req in to_answer {
                self.answer_server_request(&req).await?;
            }
            if let Some(a) = answer {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }

    /// Answer a server-to-client request through the handler (see [`Self::with_handler`]).
    async fn answer_server_request(&self, req: &Value) -> Result<(), ClientError> {
        let Some(rid) = req.get("id").and_then(JsonRpcId::from_value) else { return Ok(()) };
        let method = req["method"].as_str().unwrap_or_default();
        let answer = match (&self.handler, method) {
            (Some(h), _) => h(method, req.get("params").unwrap_or(&Value::Null)),
            (None, "ping") => Ok(json!({})),
            (None, _) => Err(ErrorObject::new(
                crate::proto::jsonrpc::code::METHOD_NOT_FOUND,
                "client has no handler for this request",
            )),
        };
        let body = match answer {
            Ok(result) => encode_result(&rid, &result),
            Err(e) => encode_error(Some(&rid), &e),
        };
        match self.post(body, self.session()).await? {
            Posted::Accepted => Ok(()),
            _ => Err(ClientError::Transport("server did not accept our response".into())),
        }
    }

    fn jitter(&self) -> f64 {
        // xorshift64*: pacing jitter needs no cryptographic quality.
        let mut i = self.inner.borrow_mut();
        let mut x = i.jitter_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        i.jitter_state = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Whether [`ClientConfig::reissue_window_ms`] has passed since `since`.
    fn window_over(&self, since: tokio::time::Instant) -> bool {
        since.elapsed() >= Duration::from_millis(self.cfg.reissue_window_ms)
    }

    async fn wait_for_budget(&self) {
        loop {
            let now = self.now();
            let ready = {
                let mut i = self.inner.borrow_mut();
                if i.budget.try_take(now) {
                    return;
                }
                i.stats.budget_waits += 1;
                i.budget.ready_at(now)
            };
            tokio::time::sleep(Duration::from_millis(ready.0.saturating_sub(now.0).max(1))).await;
        }
    }

    /// End the session with DELETE (sent again when its answer is lost, within
    /// [`ClientConfig::reissue_window_ms`]).
    ///
    /// # Errors
    /// Transport failure on every attempt.
    pub async fn close(self) -> Result<Closed, ClientError> {
        if self.is_modern() {
            return Ok(Closed::Stateless);
        }
        if self.inner.borrow().session_dead {
            return Ok(Closed::AlreadyGone);
        }
        let session = self.session();
        let mut attempt: u32 = 0;
        let started = tokio::time::Instant::now();
        loop {
            match Self::builder(
                &self.http,
                &self.cfg,
                awc::http::Method::DELETE,
                Some((&session.0, session.1)),
            )
            .send()
            .await
            {
                // Busy or draining (a restart): as the server says, then again.
                Ok(r) if matches!(r.status().as_u16(), 429 | 503) && !self.window_over(started) => {
                    attempt += 1;
                    let after_ms = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map_or(1_000, |s| s.saturating_mul(1000).min(30_000));
                    tokio::time::sleep(Duration::from_millis(after_ms)).await;
                }
                Ok(r) => return Ok(Closed::from_status(r.status().as_u16())),
                Err(_) if !self.window_over(started) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt.min(20))))
                        .await;
                }
                Err(e) => return Err(ClientError::Transport(e.to_string())),
            }
        }
    }
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
