//! One HTTP exchange: a request's headers (session, version, token), a POST and what came
//! back ([`Posted`]), the chunks of a response body, and the outcome a response body carries
//! for a request.

use bytes::Bytes;
use futures_core::Stream;
use serde_json::Value;

use super::retry::status_error;
use super::state::McpClient;
use super::types::{ClientConfig, ClientError, Failure, Posted, is_sse};
use crate::client::journal::Journal;
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{ErrorObject, Incoming, Message, parse_body};
use crate::proto::version::ProtocolVersion;

pub(super) async fn next_chunk<
    S: Stream<Item = Result<Bytes, awc::error::PayloadError>> + Unpin,
>(
    s: &mut S,
) -> Option<Result<Bytes, String>> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx))
        .await
        .map(|r| r.map_err(|e| e.to_string()))
}

impl<J: Journal> McpClient<J> {
    pub(super) fn builder(
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

    pub(super) async fn post(
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
        let sse = is_sse(resp.headers());
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

    pub(super) fn session(&self) -> (String, ProtocolVersion) {
        let i = self.inner.borrow();
        (i.session_id.clone(), i.version)
    }

    /// The outcome in a JSON response body to `id`: its result; a JSON-RPC error is final,
    /// but "drained" (`-32010`), whose outcome is unknown. So is a body that is not JSON at
    /// all: empty or cut short, the connection closed before its end (a kill between a
    /// response's head and its body; the HTTP client reads such an end as a clean one).
    pub(super) fn answer_of(id: &JsonRpcId, body: &[u8]) -> Result<Value, Failure> {
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
    pub(super) fn result_of(id: &JsonRpcId, body: &[u8]) -> Result<Value, ClientError> {
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
}
