//! The legacy handshake: `initialize` + `notifications/initialized` (the one
//! [`McpClient::connect`](super::McpClient::connect) makes), and the one new handshake that
//! concurrent 404s share.

use std::time::Duration;

use serde_json::{Value, json};

use super::retry::status_error;
use super::state::McpClient;
use super::types::{ClientConfig, ClientError, is_sse};
use super::wire::next_chunk;
use crate::client::accept::Binding;
use crate::client::journal::Journal;
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{Incoming, Message, encode_notification, encode_request, parse_body};
use crate::proto::version::ProtocolVersion;
use crate::sse::Decoder;

impl<J: Journal> McpClient<J> {
    pub(super) async fn handshake_with(
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
        let sse = is_sse(resp.headers());
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
    ///
    /// [`ClientStats::recovered_after_404`]: super::ClientStats::recovered_after_404
    pub(super) async fn rehandshake(
        &self,
        seen_generation: u32,
        after_404: bool,
    ) -> Result<(), ClientError> {
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
            principal: self.cfg.token.as_ref().map(|t| std::sync::Arc::clone(t.principal())),
        };
        // Unanswered requests of the old session are the callers' to report or re-issue.
        let _ = inner.acceptor.rebind(binding);
        Ok(())
    }
}
