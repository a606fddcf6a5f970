//! One HTTP exchange: a request's headers (session, version, token), a POST and what came
//! back ([`Posted`]), the chunks of a response body (and a stream's end read after its
//! answer, so its connection serves the next request), and the outcome a response body
//! carries for a request.

use std::time::Duration;

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

/// A session as a request names it: its id and the protocol version it negotiated.
pub(super) type Session = (String, ProtocolVersion);

/// The error of a request its session no longer knows (404).
pub(super) fn session_not_found() -> ClientError {
    ClientError::Http(404, "session not found".into())
}

/// How long a stream's end is waited for after its answer, aside.
const END_WAIT: Duration = Duration::from_secs(1);

/// Bytes read past the answer at most, aside.
const END_MAX_BYTES: usize = 64 << 10;

/// Read what follows a stream's answer (the server ends the stream after it), within
/// [`END_MAX_BYTES`]: at once what has arrived (the end most often came with the answer),
/// the rest on a task of its own within [`END_WAIT`]. A response read to its end gives its
/// connection back to the client's pool; one dropped before its end is closed, and the next
/// request pays for a new connection (host and client: several times an echo's CPU).
/// Only for a body whose end was not read yet: awc's must not be polled past it.
pub(super) fn read_to_end_aside(mut resp: awc::ClientResponse) {
    use futures_core::Stream as _;
    use std::task::{Context, Poll, Waker};
    let mut read = 0usize;
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match std::pin::Pin::new(&mut resp).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                read += chunk.len();
                if read > END_MAX_BYTES {
                    return;
                }
            }
            Poll::Ready(_) => return,
            Poll::Pending => break,
        }
    }
    actix_rt::spawn(async move {
        let end = async {
            while let Some(Ok(chunk)) = next_chunk(&mut resp).await {
                read += chunk.len();
                if read > END_MAX_BYTES {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(END_WAIT, end).await;
    });
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
            r = r.insert_header(("Authorization", format!("Bearer {}", t.get())));
        }
        r
    }

    pub(super) async fn post(&self, body: Bytes, session: &Session) -> Result<Posted, ClientError> {
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

    /// POST a message that is answered 202 (a notification, an answer to a server request)
    /// in `session`: a 404 is [`session_not_found`], any other answer the transport error
    /// `refused`.
    pub(super) async fn post_accepted(
        &self,
        body: Bytes,
        session: &Session,
        refused: &str,
    ) -> Result<(), ClientError> {
        match self.post(body, session).await? {
            Posted::Accepted => Ok(()),
            Posted::Gone => Err(session_not_found()),
            _ => Err(ClientError::Transport(refused.to_owned())),
        }
    }

    pub(super) fn session(&self) -> Session {
        let i = self.inner.borrow();
        (i.session_id.clone(), i.version)
    }

    /// The outcome in a JSON response body to `id`: its result; a JSON-RPC error is final,
    /// but "drained" (`-32010`), whose outcome is unknown, and "unavailable" (`-32006`: nothing
    /// ran), which is waited out and sent again. So is a body that is not JSON at
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
            Err(e) => Err(busy_or_final(e)),
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

/// How long to wait before sending again a request answered "unavailable" (`-32006`) inside
/// a response: nothing of it ran, as after a 503 without `Retry-After`.
pub(super) const UNAVAILABLE_RETRY_MS: u64 = 1_000;

/// A JSON-RPC error answer as a failure: `-32006` (the server could not take the request now,
/// e.g. receipts it cannot read: that call did not run) is waited out and an idempotent
/// request sent again, as after a 503 ([`Failure::Busy`]); any other is the answer.
pub(super) fn busy_or_final(e: ClientError) -> Failure {
    match e {
        ClientError::Rpc(ErrorObject { code: crate::proto::jsonrpc::code::OVERLOADED, .. }) => {
            // Up to half a second more, so the clients a fault refused together come back
            // spread out.
            let jitter = u64::from(u16::from_le_bytes(crate::rng::bytes::<2>())) % 500;
            Failure::Busy(e, UNAVAILABLE_RETRY_MS + jitter)
        }
        e => Failure::Final(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unavailable_answer_is_sent_again_and_other_errors_are_the_answer() {
        let id = JsonRpcId::Number(7);
        let body = |code: i64| {
            format!(r#"{{"jsonrpc":"2.0","id":7,"error":{{"code":{code},"message":"m"}}}}"#)
        };
        let answer = |code| {
            McpClient::<crate::client::journal::MemoryJournal>::answer_of(
                &id,
                body(code).as_bytes(),
            )
        };
        assert!(matches!(
            answer(-32006),
            Err(Failure::Busy(_, ms)) if (UNAVAILABLE_RETRY_MS..UNAVAILABLE_RETRY_MS + 500).contains(&ms)
        ));
        assert!(matches!(answer(-32010), Err(Failure::Unknown(_))));
        assert!(matches!(answer(-32603), Err(Failure::Final(_))));
        assert!(matches!(answer(-32602), Err(Failure::Final(_))));
    }
}
