//! The resilient client's HTTP driver (legacy era), on `awc`.
//!
//! Everything a message goes through is decided by the sans-IO core in [`crate::client`]:
//! every SSE event passes [`Acceptor::accept_stream_event`]; reconnects are paced by
//! [`Backoff`] and one shared [`ReconnectBudget`]. This module only moves bytes:
//! - POST each message with `Accept: application/json, text/event-stream`; handle both.
//! - A stream that ends before its response is resumed by GET + `Last-Event-ID` (the newest
//!   accepted cursor, so a resumed stream that drops early re-sends the previous id), after
//!   at least the server's `retry`.
//! - A JSON-RPC error response is terminal; so are 400/410 answers to a resume.
//! - 404 on a request that carried a session id: exactly one new handshake (concurrent 404s
//!   share it); the old request is re-issued only when it is idempotent, else reported lost.
//! - Cancel with `notifications/cancelled`; DELETE on close (405 is not a deletion receipt).
//!
//! Single-threaded (awc is `!Send`): use it inside an actix/tokio local runtime.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use serde_json::{Value, json};

use crate::client::accept::{Acceptance, Acceptor, Binding, IncomingEvent, StreamKey};
use crate::client::budget::{Backoff, ReconnectBudget};
use crate::client::journal::{Journal, MemoryJournal};
use crate::proto::ids::{JsonRpcId, Tick};
use crate::proto::jsonrpc::{ErrorObject, Incoming, Message, encode_error, encode_notification, encode_request, encode_result, parse_body};
use crate::proto::version::ProtocolVersion;
use crate::sse::Decoder;

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The MCP endpoint URL.
    pub url: String,
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
}

impl ClientConfig {
    /// Defaults for `url`.
    #[must_use]
    pub fn new(url: &str) -> ClientConfig {
        ClientConfig {
            url: url.to_owned(),
            token: None,
            protocol_version: ProtocolVersion::LATEST,
            capabilities: json!({}),
            backoff: Backoff { default_ms: 1_000, max_ms: 30_000 },
            budget_burst: 20,
            budget_per_second: 10.0,
            max_resume_attempts: 8,
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
    /// Connection-level failure.
    #[error("transport: {0}")]
    Transport(String),
}

/// Counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClientStats {
    /// `initialize` handshakes completed.
    pub handshakes: u64,
    /// GET resumes sent.
    pub resumes: u64,
    /// Resumes refused by the reconnect budget (the client waited).
    pub budget_waits: u64,
    /// Requests re-issued after a new handshake.
    pub reissued: u64,
}

struct Inner<J: Journal> {
    acceptor: Acceptor<J>,
    session_id: String,
    version: ProtocolVersion,
    generation: u32,
    budget: ReconnectBudget,
    next_id: i64,
    stats: ClientStats,
    notifications: Vec<Value>,
    jitter_state: u64,
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
    origin: tokio::time::Instant,
    handler: Option<ServerRequestHandler>,
}

enum Posted {
    Accepted,
    Json(Value),
    Sse(awc::ClientResponse),
    Gone,
}

async fn next_chunk<S: Stream<Item = Result<Bytes, awc::error::PayloadError>> + Unpin>(s: &mut S) -> Option<Result<Bytes, String>> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await.map(|r| r.map_err(|e| e.to_string()))
}

impl<J: Journal> McpClient<J> {
    /// Connect: `initialize` + `notifications/initialized`.
    ///
    /// # Errors
    /// The handshake failed.
    pub async fn connect(cfg: ClientConfig, journal: J) -> Result<McpClient<J>, ClientError> {
        let http = awc::Client::builder().disable_timeout().finish();
        let origin = tokio::time::Instant::now();
        let (session_id, version) = Self::handshake_with(&http, &cfg).await?;
        let binding = Binding { session_generation: 1, session_id: session_id.as_str().into(), protocol_version: version, principal: cfg.token.as_deref().map(Into::into) };
        let inner = Inner {
            acceptor: Acceptor::new(binding, journal),
            session_id,
            version,
            generation: 1,
            budget: ReconnectBudget::new(cfg.budget_burst, cfg.budget_per_second, Tick(0)),
            next_id: 1,
            stats: ClientStats { handshakes: 1, ..ClientStats::default() },
            notifications: Vec::new(),
            jitter_state: 0x9E37_79B9_7F4A_7C15,
        };
        Ok(McpClient { http, cfg, inner: Rc::new(RefCell::new(inner)), handshake: Rc::new(tokio::sync::Mutex::new(())), origin, handler: None })
    }

    fn now(&self) -> Tick {
        Tick(self.origin.elapsed().as_millis() as u64)
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
        self.inner.borrow().stats
    }

    /// The current session id.
    #[must_use]
    pub fn session_id(&self) -> String {
        self.inner.borrow().session_id.clone()
    }

    /// Notifications received so far (accepted and dispatched), drained.
    pub fn take_notifications(&self) -> Vec<Value> {
        std::mem::take(&mut self.inner.borrow_mut().notifications)
    }

    fn builder(http: &awc::Client, cfg: &ClientConfig, method: awc::http::Method, session: Option<(&str, ProtocolVersion)>) -> awc::ClientRequest {
        let mut r = http.request(method, &cfg.url).insert_header(("Accept", "application/json, text/event-stream"));
        if let Some((sid, v)) = session {
            r = r.insert_header(("Mcp-Session-Id", sid)).insert_header(("MCP-Protocol-Version", v.as_str()));
        }
        if let Some(t) = &cfg.token {
            r = r.insert_header(("Authorization", format!("Bearer {t}")));
        }
        r
    }

    async fn handshake_with(http: &awc::Client, cfg: &ClientConfig) -> Result<(String, ProtocolVersion), ClientError> {
        let body = encode_request(
            &JsonRpcId::Number(0),
            "initialize",
            Some(&json!({"protocolVersion": cfg.protocol_version.as_str(), "capabilities": cfg.capabilities, "clientInfo": {"name": "mcp-runtime-client", "version": env!("CARGO_PKG_VERSION")}})),
        );
        let mut resp = Self::builder(http, cfg, awc::http::Method::POST, None)
            .insert_header(("Content-Type", "application/json"))
            .send_body(body)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let sid = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let result = Self::read_single(&mut resp).await?;
        let version = result.get("protocolVersion").and_then(Value::as_str).and_then(ProtocolVersion::parse).ok_or_else(|| ClientError::Transport("server offered an unsupported protocol version".into()))?;
        let sid = sid.ok_or_else(|| ClientError::Transport("no MCP-Session-Id in the initialize response".into()))?;
        let note = encode_notification::<Value>("notifications/initialized", None);
        let r = Self::builder(http, cfg, awc::http::Method::POST, Some((&sid, version)))
            .insert_header(("Content-Type", "application/json"))
            .send_body(note)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        if r.status().as_u16() != 202 {
            return Err(ClientError::Http(r.status().as_u16(), "notifications/initialized not accepted".into()));
        }
        Ok((sid, version))
    }

    /// Read a JSON or single-event SSE response carrying one result (used for `initialize`).
    async fn read_single(resp: &mut awc::ClientResponse) -> Result<Value, ClientError> {
        let status = resp.status().as_u16();
        let sse = resp.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
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
            Ok(Incoming::Single(Message::ErrorResponse { error, .. })) => Err(ClientError::Rpc(error)),
            _ => Err(ClientError::Transport("malformed response".into())),
        }
    }

    /// A new session after a 404, unless another call already made one since `seen_generation`.
    async fn rehandshake(&self, seen_generation: u32) -> Result<Vec<JsonRpcId>, ClientError> {
        let _guard = self.handshake.lock().await;
        if self.inner.borrow().generation != seen_generation {
            return Ok(Vec::new());
        }
        let (sid, version) = Self::handshake_with(&self.http, &self.cfg).await?;
        let mut inner = self.inner.borrow_mut();
        inner.generation += 1;
        inner.session_id = sid.clone();
        inner.version = version;
        inner.stats.handshakes += 1;
        let binding = Binding { session_generation: inner.generation, session_id: sid.as_str().into(), protocol_version: version, principal: self.cfg.token.as_deref().map(Into::into) };
        Ok(inner.acceptor.rebind(binding))
    }

    async fn post(&self, body: Bytes, session: (String, ProtocolVersion)) -> Result<Posted, ClientError> {
        let mut resp = Self::builder(&self.http, &self.cfg, awc::http::Method::POST, Some((&session.0, session.1)))
            .insert_header(("Content-Type", "application/json"))
            .send_body(body)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let sse = resp.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        match status {
            202 => Ok(Posted::Accepted),
            404 => Ok(Posted::Gone),
            200 if sse => Ok(Posted::Sse(resp)),
            200 => {
                let body = resp.body().limit(64 << 20).await.map_err(|e| ClientError::Transport(e.to_string()))?;
                serde_json::from_slice(&body).map(Posted::Json).map_err(|e| ClientError::Transport(e.to_string()))
            }
            s => {
                let body = resp.body().await.unwrap_or_default();
                Err(ClientError::Http(s, String::from_utf8_lossy(&body).into_owned()))
            }
        }
    }

    /// Send a notification.
    ///
    /// # Errors
    /// HTTP or transport failure.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), ClientError> {
        let session = self.session();
        match self.post(encode_notification(method, params.as_ref()), session).await? {
            Posted::Accepted => Ok(()),
            Posted::Gone => Err(ClientError::Http(404, "session not found".into())),
            _ => Err(ClientError::Transport("unexpected reply to a notification".into())),
        }
    }

    /// Cancel a request (the only way: a disconnect is not a cancellation).
    ///
    /// # Errors
    /// HTTP or transport failure.
    pub async fn cancel(&self, id: &JsonRpcId, reason: &str) -> Result<(), ClientError> {
        self.notify("notifications/cancelled", Some(json!({"requestId": id, "reason": reason}))).await
    }

    fn session(&self) -> (String, ProtocolVersion) {
        let i = self.inner.borrow();
        (i.session_id.clone(), i.version)
    }

    /// Send a request and wait for its response, resuming its stream as needed. `idempotent`
    /// requests are re-issued in a new session after a 404; others are reported lost.
    ///
    /// # Errors
    /// [`ClientError`]; a JSON-RPC error response is [`ClientError::Rpc`] (terminal).
    pub async fn request(&self, method: &str, params: Option<Value>, idempotent: bool) -> Result<Value, ClientError> {
        let mut reissued = false;
        loop {
            let (id, generation, session) = {
                let mut i = self.inner.borrow_mut();
                i.next_id += 1;
                (JsonRpcId::Number(i.next_id), i.generation, (i.session_id.clone(), i.version))
            };
            let body = encode_request(&id, method, params.as_ref());
            let outcome = match self.post(body, session).await? {
                Posted::Json(v) => return Self::result_of(&id, v),
                Posted::Accepted => return Err(ClientError::Transport("request answered with 202".into())),
                Posted::Gone => None,
                Posted::Sse(resp) => {
                    let key = self.inner.borrow_mut().acceptor.open_post_stream(std::slice::from_ref(&id)).map_err(|e| ClientError::Transport(e.to_string()))?;
                    let r = self.follow(&key, &id, resp).await;
                    self.inner.borrow_mut().acceptor.close_stream(&key);
                    match r {
                        Err(ClientError::Http(404, _)) => None,
                        other => Some(other),
                    }
                }
            };
            if let Some(r) = outcome {
                return r;
            }
            // The session is gone (404): one shared new handshake; never move this request
            // into the new session silently.
            self.rehandshake(generation).await?;
            if !idempotent || reissued {
                return Err(ClientError::Lost(id.to_string(), "the session ended (404); request not idempotent".into()));
            }
            reissued = true;
            self.inner.borrow_mut().stats.reissued += 1;
        }
    }

    fn result_of(id: &JsonRpcId, v: Value) -> Result<Value, ClientError> {
        match parse_body(v.to_string().as_bytes()) {
            Ok(Incoming::Single(Message::Response { id: rid, result })) if rid == *id => Ok(result),
            Ok(Incoming::Single(Message::ErrorResponse { error, .. })) => Err(ClientError::Rpc(error)),
            _ => Err(ClientError::Transport(format!("unexpected JSON reply: {v}"))),
        }
    }

    /// Read `resp` (the request's stream), resuming by GET + `Last-Event-ID` until the
    /// response arrives.
    async fn follow(&self, key: &StreamKey, id: &JsonRpcId, mut resp: awc::ClientResponse) -> Result<Value, ClientError> {
        let mut retry_hint = None;
        // Backoff grows only while resumes fail to reach a healthy server; a 200 resets it.
        let mut failures = 0u32;
        // Resumes in a row that brought no new event: bounds a server that answers 200 and
        // closes without progress (which would otherwise loop forever).
        let mut no_progress = 0u32;
        let mut last_cursor: Option<String> = None;
        loop {
            if let Some(v) = self.read_events(key, id, &mut resp, &mut retry_hint).await? {
                return v;
            }
            // The stream ended (or broke) before the response: resume.
            let cursor = self.inner.borrow().acceptor.resume_cursor(key);
            let Some(cursor) = cursor else {
                return Err(ClientError::Lost(id.to_string(), "stream ended before any event id: cannot resume".into()));
            };
            if last_cursor.as_deref() == Some(cursor.as_str()) {
                no_progress += 1;
            } else {
                no_progress = 0;
                last_cursor = Some(cursor.clone());
            }
            loop {
                if no_progress >= self.cfg.max_resume_attempts || failures >= self.cfg.max_resume_attempts {
                    return Err(ClientError::Lost(id.to_string(), format!("gave up resuming ({no_progress} resumes without progress, {failures} failed)")));
                }
                let delay = self.cfg.backoff.delay_ms(retry_hint, failures, self.jitter());
                tokio::time::sleep(Duration::from_millis(delay)).await;
                self.wait_for_budget().await;
                self.inner.borrow_mut().stats.resumes += 1;
                let session = self.session();
                let sent = Self::builder(&self.http, &self.cfg, awc::http::Method::GET, Some((&session.0, session.1)))
                    .insert_header(("Accept", "text/event-stream"))
                    .insert_header(("Last-Event-ID", cursor.as_str()))
                    .send()
                    .await;
                match sent {
                    Ok(r) if r.status().as_u16() == 200 => {
                        failures = 0;
                        resp = r;
                        break;
                    }
                    Ok(r) if r.status().as_u16() == 404 => return Err(ClientError::Http(404, "session not found".into())),
                    // 400 (cursor refused) and 410 (events lost) are final answers; 429 is not.
                    Ok(mut r) if r.status().is_client_error() && r.status().as_u16() != 429 => {
                        let body = r.body().await.unwrap_or_default();
                        return Err(ClientError::Lost(id.to_string(), format!("resume refused: HTTP {} {}", r.status().as_u16(), String::from_utf8_lossy(&body))));
                    }
                    // 5xx, 429, network: back off and try again.
                    Ok(_) | Err(_) => failures += 1,
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
                if let Some(eid) = dec.last_event_id.as_deref().filter(|_| events.is_empty() && dec.last_event_id != before) {
                    let _ = inner.acceptor.accept_stream_event(IncomingEvent { stream: key, binding: &binding, id: Some(eid), data: "" });
                }
                let mut handed_out = None;
                for e in events {
                    let Ok(Acceptance::Dispatched { completed, seq }) =
                        inner.acceptor.accept_stream_event(IncomingEvent { stream: key, binding: &binding, id: e.id.as_deref(), data: &e.data })
                    else {
                        continue;
                    };
                    handed_out = Some(seq);
                    let msg: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
                    if completed.as_ref() == Some(id) {
                        answer = Some(Self::result_of(id, msg));
                    } else if msg.get("method").is_some() && msg.get("id").is_some() {
                        to_answer.push(msg);
                    } else {
                        inner.notifications.push(msg);
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
            (None, _) => Err(ErrorObject::new(crate::proto::jsonrpc::code::METHOD_NOT_FOUND, "client has no handler for this request")),
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

    /// End the session with DELETE. Returns whether the server confirmed the deletion
    /// (`405` means it does not allow clients to end sessions: not a receipt).
    ///
    /// # Errors
    /// Transport failure.
    pub async fn close(self) -> Result<bool, ClientError> {
        let session = self.session();
        let r = Self::builder(&self.http, &self.cfg, awc::http::Method::DELETE, Some((&session.0, session.1))).send().await.map_err(|e| ClientError::Transport(e.to_string()))?;
        Ok(r.status().is_success())
    }
}
