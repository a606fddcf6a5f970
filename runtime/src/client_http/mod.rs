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
//! Single-threaded (awc is `!Send`): use it inside an actix System or a tokio `LocalSet` (the
//! end of a stream that came after its answer is read on a local task of its own).
//!
//! [`Backoff`]: crate::client::budget::Backoff

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::client::accept::{Acceptor, Binding};
use crate::client::budget::ReconnectBudget;
use crate::client::journal::Journal;
use crate::proto::ids::{JsonRpcId, Tick};
use crate::proto::jsonrpc::{ErrorObject, encode_notification, encode_request};
use crate::proto::version::ProtocolVersion;

pub use state::McpClient;
pub use stateless::{MAX_ROUNDS, TaskCall};
pub use types::{
    BearerToken, ClientConfig, ClientError, ClientStats, Closed, Era, ResumeSample,
    ServerRequestHandler,
};

use retry::Reissue;
use state::Inner;
use types::{Failure, Posted};

mod handshake;
mod retry;
mod state;
mod stateless;
mod stream;
mod types;
mod wire;

fn random_u64() -> u64 {
    u64::from_le_bytes(crate::rng::bytes::<8>())
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
            principal: cfg.token.as_ref().map(|t| std::sync::Arc::clone(t.principal())),
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

    /// Send a notification.
    ///
    /// # Errors
    /// HTTP or transport failure.
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), ClientError> {
        if self.is_modern() {
            return self.notify_modern(method, params).await;
        }
        self.notify_in(&self.session(), method, params.as_ref()).await
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
        self.cancel_in(&self.session(), id, reason).await
    }

    /// Cancel `id` in `session`, the one that runs it.
    async fn cancel_in(
        &self,
        session: &wire::Session,
        id: &JsonRpcId,
        reason: &str,
    ) -> Result<(), ClientError> {
        let params = json!({"requestId": id, "reason": reason});
        self.notify_in(session, "notifications/cancelled", Some(&params)).await
    }

    /// Send a notification in `session`.
    async fn notify_in(
        &self,
        session: &wire::Session,
        method: &str,
        params: Option<&Value>,
    ) -> Result<(), ClientError> {
        let body = encode_notification(method, params);
        self.post_accepted(body, session, "unexpected reply to a notification").await
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
        let posted = match self.post(body, &session).await {
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
                    // Another call replaced the session while this POST was on its way: its
                    // stream is not taken in under the new session's binding.
                    if i.generation != generation {
                        return Err(Failure::Gone(generation));
                    }
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
                let follow = self.follow(&key, &id, resp, &session);
                tokio::pin!(follow);
                let r = tokio::select! {
                    r = &mut follow => r,
                    () = cancel.cancelled() => {
                        // Tell the server first (the session that runs it); the stream is
                        // dropped on return.
                        let _ = self.cancel_in(&session, &id, "cancelled by the caller").await;
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
                    Ok(v) => v.map_err(wire::busy_or_final),
                    Err(ClientError::Http(404, _)) => Err(Failure::Gone(generation)),
                    Err(e @ (ClientError::Lost(..) | ClientError::Transport(_))) => {
                        Err(Failure::Unknown(e))
                    }
                    Err(e) => Err(Failure::Final(e)),
                }
            }
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
