//! Reading a request's SSE stream (legacy era): every event through the acceptance point,
//! server-to-client requests answered on the way, and a stream that ends before its response
//! resumed by GET + `Last-Event-ID`. After the answer, the stream's end is read (on a local
//! task when it has not arrived yet) so that its connection serves the next request.

use std::time::Duration;

use serde_json::{Value, json};

use super::retry::retry_after_ms_of;
use super::state::McpClient;
use super::types::{ClientError, ResumeSample};
use super::wire::{Session, next_chunk, read_to_end_aside, session_not_found};
use crate::client::accept::{Acceptance, IncomingEvent, StreamKey};
use crate::client::journal::Journal;
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{ErrorObject, encode_error, encode_result};
use crate::sse::Decoder;

impl<J: Journal> McpClient<J> {
    /// Read `resp` (the request's stream), resuming by GET + `Last-Event-ID` until the
    /// response arrives. The outer error means the stream could not be followed; the inner
    /// result is the response (a JSON-RPC error is `Err(Rpc)` inside `Ok`).
    ///
    /// Every resume, and every answer to a server request on the stream, goes to `session`,
    /// the one the request was posted in: a cursor is bound to its session, and one sent with
    /// a newer session's id would be refused as forged (400). Once another call replaced the
    /// session (after a 404), the stream is not resumed at all: its events were let go with the
    /// old session, and the call ends as one whose session ended (404).
    pub(super) async fn follow(
        &self,
        key: &StreamKey,
        id: &JsonRpcId,
        mut resp: awc::ClientResponse,
        session: &Session,
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
            let answer = self
                .read_events(key, id, &mut resp, &mut retry_hint, &mut first_accept, session)
                .await?;
            if let (Some(t0), Some(t1)) = (broke_at, first_accept) {
                self.inner
                    .borrow_mut()
                    .resume_samples
                    .push(ResumeSample { total: t1 - t0, waited });
                broke_at = None;
                waited = Duration::ZERO;
            }
            if let Some(v) = answer {
                read_to_end_aside(resp);
                return Ok(v);
            }
            // The stream ended (or broke) before the response: resume.
            broke_at.get_or_insert_with(tokio::time::Instant::now);
            self.check_not_replaced(key)?;
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
                // Checked before the budget is spent on it, and again after its wait.
                self.check_not_replaced(key)?;
                self.wait_for_budget().await;
                waited += paused.elapsed();
                self.check_not_replaced(key)?;
                self.inner.borrow_mut().stats.resumes += 1;
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
                        return Err(session_not_found());
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

    /// A 404 once another call replaced the stream's session (after a 404 of its own): the
    /// new session's binding let the stream and its cursor go.
    fn check_not_replaced(&self, key: &StreamKey) -> Result<(), ClientError> {
        if self.inner.borrow().generation == key.session_generation {
            Ok(())
        } else {
            Err(ClientError::Http(404, "session replaced".into()))
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
        session: &Session,
    ) -> Result<Option<Result<Value, ClientError>>, ClientError> {
        // Priming events (an id, no data) come back in order with the others: each event's
        // own id is all that may move the stream's cursor.
        let mut dec = Decoder::reporting_id_only_events();
        while let Some(chunk) = next_chunk(resp).await {
            let Ok(chunk) = chunk else { break };
            let mut answer = None;
            let mut to_answer = Vec::new();
            let events = dec.feed(&chunk);
            if dec.retry_ms.is_some() {
                *retry_hint = dec.retry_ms;
            }
            {
                let mut inner = self.inner.borrow_mut();
                let binding = inner.acceptor.binding().clone();
                let mut handed_out = None;
                for e in events {
                    // Only the id an event carried itself names it (and may become the
                    // stream's cursor). One inherited from an earlier event (WHATWG keeps the
                    // last id) may be a foreign event's, injected into a stream that sends no
                    // ids: resumed from, it would be refused as not this session's.
                    let own_id = e.id.as_deref().filter(|_| e.own_id);
                    if e.data.is_empty() {
                        // A priming event: it moves the cursor, nothing is dispatched.
                        if inner
                            .acceptor
                            .accept_stream_event(IncomingEvent {
                                stream: key,
                                binding: &binding,
                                id: own_id,
                                data: "",
                            })
                            .is_ok()
                        {
                            first_accept.get_or_insert_with(tokio::time::Instant::now);
                        }
                        continue;
                    }
                    let Ok(Acceptance::Dispatched { completed, seq }) =
                        inner.acceptor.accept_stream_event(IncomingEvent {
                            stream: key,
                            binding: &binding,
                            id: own_id,
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
                        inner.notifications.push((own_id.map(str::to_owned), msg));
                    }
                }
                // Everything accepted above was handed out (or is being answered) already.
                if let Some(seq) = handed_out {
                    inner.acceptor.journal_mut().ack(seq);
                }
            }
            for req in to_answer {
                self.answer_server_request(&req, session).await?;
            }
            if let Some(a) = answer {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }

    /// Answer a server-to-client request through the handler (see [`Self::with_handler`]), in
    /// the `session` that asked.
    async fn answer_server_request(
        &self,
        req: &Value,
        session: &Session,
    ) -> Result<(), ClientError> {
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
        self.post_accepted(body, session, "server did not accept our response").await
    }
}
