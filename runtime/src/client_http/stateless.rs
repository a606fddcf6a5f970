//! The 2026-07-28 side of the client driver: `server/discover`, then each request on its own.
//! The rules are [`crate::client::stateless`]'s; this moves the bytes.
//!
//! - Every request carries `_meta` (version, capabilities, identity) and the mirrored
//!   headers; `tools/call` mirrors the arguments the tool annotates (learnt from the
//!   `tools/list` results this client sees; a `-32020` about an `Mcp-Param-*` header makes it
//!   read `tools/list` again and send once more).
//! - The answer is one JSON body or an SSE stream of data-only events (notifications, then the
//!   answer). A stream that ends before its answer lost the request: an idempotent one is
//!   re-issued under a new id within [`ClientConfig::reissue_window_ms`], as is one answered
//!   "drained" (`-32010`); others are reported lost. Nothing is resumed: these streams carry no
//!   event ids.
//! - An `input_required` result is answered by the [`ServerRequestHandler`] (the same one that
//!   answers a legacy server's requests) and the request is sent again with the answers and
//!   the server's `requestState`, at most [`MAX_ROUNDS`] times.
//! - Cancelling a request closes its response stream: that is the cancellation in this era.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::retry::{Reissue, status_error};
use super::state::{McpClient, ModernState};
use super::types::{ClientConfig, ClientError, Failure, is_sse};
use super::wire::{next_chunk, read_to_end_aside};
use crate::client::journal::Journal;
use crate::client::stateless::{self as rules, Discovered, Round};
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{ErrorObject, code, encode_notification, encode_request};
use crate::sse::Decoder;

/// Most `input_required` rounds one request may take (a server that keeps asking is an error).
pub const MAX_ROUNDS: u32 = 32;

/// What [`McpClient::call_tool_as_task`] gave.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskCall {
    /// The result, at once.
    Done(Value),
    /// A task: fetch its result with [`McpClient::task_result`].
    Task {
        /// Its id.
        task_id: String,
        /// The poll interval the server asked for (ms).
        poll_ms: u64,
    },
}

fn client_info() -> Value {
    json!({"name": "mcp-runtime-client", "version": env!("CARGO_PKG_VERSION")})
}

fn modern_post(
    http: &awc::Client,
    cfg: &ClientConfig,
    headers: &[(String, String)],
) -> awc::ClientRequest {
    let mut r = http
        .post(&cfg.url)
        .insert_header(("Accept", "application/json, text/event-stream"))
        .insert_header(("Content-Type", "application/json"));
    for (k, v) in headers {
        r = r.insert_header((k.as_str(), v.as_str()));
    }
    if let Some(t) = &cfg.token {
        r = r.insert_header(("Authorization", format!("Bearer {}", t.get())));
    }
    r
}

/// The whole body of a response (bounded).
async fn body_of(resp: &mut awc::ClientResponse) -> Result<Bytes, ClientError> {
    resp.body().limit(64 << 20).await.map_err(|e| ClientError::Transport(e.to_string()))
}

impl<J: Journal> McpClient<J> {
    /// `server/discover`: the state for a 2026-07-28 server, or the status of a server that
    /// does not answer it as one (an unrecognised refusal: the caller may fall back to
    /// `initialize`).
    ///
    /// # Errors
    /// A transport failure, 401/403, 429/503, or a recognised modern refusal.
    pub(super) async fn discover_with(
        http: &awc::Client,
        cfg: &ClientConfig,
    ) -> Result<Result<ModernState, u16>, ClientError> {
        let params = rules::request_params(None, &cfg.capabilities, &client_info());
        let headers = rules::request_headers("server/discover", &params, &[]);
        let body = encode_request(&JsonRpcId::Number(0), "server/discover", Some(&params));
        let mut resp = modern_post(http, cfg, &headers)
            .send_body(body)
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let sse = is_sse(resp.headers());
        let bytes = if sse {
            Self::read_single_event(&mut resp).await?
        } else {
            body_of(&mut resp).await?
        };
        match status {
            401 | 403 | 429 | 503 => {
                return Err(status_error(
                    status,
                    resp.headers(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                ));
            }
            _ => {}
        }
        if sse {
            read_to_end_aside(resp);
        }
        match rules::discovered(status, &bytes) {
            Discovered::Modern(capabilities) => {
                Ok(Ok(ModernState { capabilities, tool_headers: HashMap::new() }))
            }
            Discovered::ModernRefusal(why) => {
                Err(ClientError::Http(status, format!("server/discover refused: {why}")))
            }
            Discovered::NotModern => Ok(Err(status)),
        }
    }

    /// The first event's data of an SSE body.
    async fn read_single_event(resp: &mut awc::ClientResponse) -> Result<Bytes, ClientError> {
        let mut dec = Decoder::new();
        while let Some(chunk) = next_chunk(resp).await {
            if let Some(e) = dec.feed(&chunk.map_err(ClientError::Transport)?).into_iter().next() {
                return Ok(Bytes::from(e.data));
            }
        }
        Err(ClientError::Transport("the stream ended before its answer".into()))
    }

    /// The server's capabilities, as `server/discover` gave them (`None` for a legacy session).
    #[must_use]
    pub fn server_capabilities(&self) -> Option<Value> {
        self.inner.borrow().modern.as_ref().map(|m| m.capabilities.clone())
    }

    /// A request in the 2026-07-28 era: see the module docs.
    pub(super) async fn request_modern(
        &self,
        method: &str,
        params: Option<Value>,
        idempotent: bool,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Value, ClientError> {
        self.request_modern_as(method, params, idempotent, cancel, &self.cfg.capabilities).await
    }

    /// [`Self::request_modern`] declaring `capabilities` (the configured ones, or those and an
    /// extension this request needs).
    async fn request_modern_as(
        &self,
        method: &str,
        params: Option<Value>,
        idempotent: bool,
        cancel: &tokio_util::sync::CancellationToken,
        capabilities: &Value,
    ) -> Result<Value, ClientError> {
        let mut current = rules::request_params(params.as_ref(), capabilities, &client_info());
        let mut retry = Reissue::default();
        let mut rounds = 0;
        let mut relisted = false;
        loop {
            if cancel.is_cancelled() {
                return Err(ClientError::Cancelled);
            }
            let failure = match self.attempt_modern(method, &current, cancel).await {
                Ok(result) => match rules::round_of(result) {
                    Round::Complete(v) => {
                        if method == "tools/list" {
                            self.learn_tools(&v);
                        }
                        return Ok(v);
                    }
                    Round::InputRequired { requests, state } => {
                        rounds += 1;
                        if rounds > MAX_ROUNDS {
                            return Err(ClientError::Transport(format!(
                                "{method}: the server still asked after {MAX_ROUNDS} rounds"
                            )));
                        }
                        self.inner.borrow_mut().stats.input_rounds += 1;
                        current =
                            rules::next_round(&current, self.answer_inputs(&requests)?, state);
                        continue;
                    }
                },
                Err(Failure::Final(ClientError::Rpc(e)))
                    if !relisted && rules::is_param_header_mismatch(e.code, &e.message) =>
                {
                    // The tool's annotations may have changed: read them again, send once more.
                    relisted = true;
                    Box::pin(self.request_modern("tools/list", None, true, cancel)).await?;
                    continue;
                }
                Err(f) => f,
            };
            retry.after(self, failure, idempotent, method).await?;
        }
    }

    /// The configured capabilities with the tasks extension declared.
    fn with_tasks(&self) -> Result<Value, ClientError> {
        if !self.is_modern() {
            return Err(ClientError::Transport(
                "tasks are a 2026-07-28 extension: connect with Era::Modern or Era::Auto".into(),
            ));
        }
        let mut caps = self.cfg.capabilities.clone();
        if !caps.is_object() {
            caps = json!({});
        }
        caps["extensions"][crate::proto::task::EXTENSION] = json!({});
        Ok(caps)
    }

    /// Call tool `name` declaring the tasks extension (2026-07-28): the server may answer with a
    /// task instead of the result. `idempotent` as for [`Self::request`].
    ///
    /// # Errors
    /// As [`Self::request`]; a legacy session has no tasks.
    pub async fn call_tool_as_task(
        &self,
        name: &str,
        arguments: Value,
        idempotent: bool,
    ) -> Result<TaskCall, ClientError> {
        let caps = self.with_tasks()?;
        let params = json!({"name": name, "arguments": arguments});
        let r = self
            .request_modern_as(
                "tools/call",
                Some(params),
                idempotent,
                &tokio_util::sync::CancellationToken::new(),
                &caps,
            )
            .await?;
        if r.get("resultType").and_then(Value::as_str) == Some("task") {
            let task_id = r
                .get("taskId")
                .and_then(Value::as_str)
                .ok_or_else(|| ClientError::Transport(format!("a task without a taskId: {r}")))?
                .to_owned();
            let poll_ms = r.get("pollIntervalMs").and_then(Value::as_u64).unwrap_or(1000);
            return Ok(TaskCall::Task { task_id, poll_ms });
        }
        Ok(TaskCall::Done(r))
    }

    async fn task_method(
        &self,
        method: &str,
        task_id: &str,
        extra: Value,
    ) -> Result<Value, ClientError> {
        let caps = self.with_tasks()?;
        let mut params = json!({"taskId": task_id});
        if let (Some(p), Value::Object(e)) = (params.as_object_mut(), extra) {
            p.extend(e);
        }
        // Reading, answering an answered question again, and cancelling are all safe to repeat.
        self.request_modern_as(
            method,
            Some(params),
            true,
            &tokio_util::sync::CancellationToken::new(),
            &caps,
        )
        .await
    }

    /// The task's state (`tasks/get`).
    ///
    /// # Errors
    /// [`ClientError::Rpc`] `-32602` for an unknown (or another caller's) task; as
    /// [`Self::request`].
    pub async fn task_get(&self, task_id: &str) -> Result<Value, ClientError> {
        self.task_method("tasks/get", task_id, json!({})).await
    }

    /// Cancel the task (`tasks/cancel`; an ended task is left as it is).
    ///
    /// # Errors
    /// As [`Self::task_get`].
    pub async fn task_cancel(&self, task_id: &str) -> Result<(), ClientError> {
        self.task_method("tasks/cancel", task_id, json!({})).await.map(|_| ())
    }

    /// Wait for the task's result: poll `tasks/get` at the interval the server asks for
    /// (clamped to 10 ms – 30 s), answering its questions with the [`ServerRequestHandler`]
    /// (`tasks/update`), for at most `max_wait`.
    ///
    /// # Errors
    /// [`ClientError::Rpc`] with the task's error when it `failed`; [`ClientError::Cancelled`]
    /// when it was cancelled; [`ClientError::Lost`] when it is still running after
    /// `max_wait`; as [`Self::task_get`].
    pub async fn task_result(
        &self,
        task_id: &str,
        max_wait: std::time::Duration,
    ) -> Result<Value, ClientError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let state = self.task_get(task_id).await?;
            match state.get("status").and_then(Value::as_str).unwrap_or_default() {
                "completed" => return Ok(state.get("result").cloned().unwrap_or(Value::Null)),
                "failed" => {
                    let e = state
                        .get("error")
                        .cloned()
                        .and_then(|e| serde_json::from_value::<ErrorObject>(e).ok())
                        .unwrap_or_else(|| {
                            ErrorObject::new(code::INTERNAL_ERROR, "the task failed")
                        });
                    return Err(ClientError::Rpc(e));
                }
                "cancelled" => return Err(ClientError::Cancelled),
                "input_required" => {
                    let asked = state
                        .get("inputRequests")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    let answers = self.answer_inputs(&asked)?;
                    self.inner.borrow_mut().stats.input_rounds += 1;
                    self.task_method("tasks/update", task_id, json!({"inputResponses": answers}))
                        .await?;
                    // A task that keeps asking is bounded by the same deadline (checked
                    // below) as one that keeps working.
                    if tokio::time::Instant::now() < deadline {
                        continue;
                    }
                }
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::Lost(
                    task_id.to_owned(),
                    format!("the task was still running after {} ms", max_wait.as_millis()),
                ));
            }
            let poll = state
                .get("pollIntervalMs")
                .and_then(Value::as_u64)
                .unwrap_or(1000)
                .clamp(10, 30_000);
            tokio::time::sleep(
                std::time::Duration::from_millis(poll)
                    .min(deadline.saturating_duration_since(tokio::time::Instant::now())),
            )
            .await;
        }
    }

    /// Remember the mirrored parameters of the tools in a `tools/list` page (merged: a later
    /// page does not forget an earlier one's; a listed tool without any is forgotten).
    fn learn_tools(&self, list: &Value) {
        let mut i = self.inner.borrow_mut();
        if let Some(m) = i.modern.as_mut() {
            for name in list
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| t.get("name")?.as_str())
            {
                m.tool_headers.remove(name);
            }
            m.tool_headers.extend(rules::header_params_of_tools(list));
        }
    }

    /// This round's answers, from the handler (without one, every question is refused).
    fn answer_inputs(
        &self,
        requests: &Map<String, Value>,
    ) -> Result<Map<String, Value>, ClientError> {
        let mut answers = Map::new();
        for (key, q) in requests {
            let method = q.get("method").and_then(Value::as_str).unwrap_or_default();
            let params = q.get("params").unwrap_or(&Value::Null);
            let answer = match &self.handler {
                Some(h) => h(method, params),
                None => Err(ErrorObject::new(
                    code::METHOD_NOT_FOUND,
                    "client has no handler for this request",
                )),
            };
            answers.insert(key.clone(), answer.map_err(ClientError::Rpc)?);
        }
        Ok(answers)
    }

    /// One attempt: POST `params` under a fresh id and read the answer.
    async fn attempt_modern(
        &self,
        method: &str,
        params: &Value,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Value, Failure> {
        let (id, headers) = {
            let mut i = self.inner.borrow_mut();
            i.next_id += 1;
            let mirrored = params
                .get("name")
                .and_then(Value::as_str)
                .zip(i.modern.as_ref())
                .and_then(|(n, m)| m.tool_headers.get(n))
                .map_or(&[][..], Vec::as_slice);
            (JsonRpcId::Number(i.next_id), rules::request_headers(method, params, mirrored))
        };
        let body = encode_request(&id, method, Some(params));
        let sent = modern_post(&self.http, &self.cfg, &headers).send_body(body);
        let mut resp = tokio::select! {
            r = sent => r.map_err(|e| Failure::Unknown(ClientError::Transport(e.to_string())))?,
            () = cancel.cancelled() => return Err(Failure::Final(ClientError::Cancelled)),
        };
        let status = resp.status().as_u16();
        let sse = is_sse(resp.headers());
        if status == 200 && sse {
            self.inner.borrow_mut().stats.streams += 1;
            // Dropping the stream on cancel is the cancellation; after its answer (a result
            // or an error), its end is read so that its connection serves the next request.
            let answer = tokio::select! {
                r = self.read_modern_stream(&id, &mut resp) => r,
                () = cancel.cancelled() => return Err(Failure::Final(ClientError::Cancelled)),
            };
            // A stream that ended (or broke) first is not read again: awc's body must not be
            // polled past its end.
            let Some(answer) = answer else {
                return Err(Failure::Unknown(ClientError::Lost(
                    id.to_string(),
                    "the response stream ended before its answer".into(),
                )));
            };
            read_to_end_aside(resp);
            return answer;
        }
        let bytes = body_of(&mut resp).await.map_err(Failure::Unknown)?;
        match status {
            200 => {
                self.inner.borrow_mut().stats.modern_messages += 1;
                Self::answer_of(&id, &bytes)
            }
            429 | 503 => {
                let e = status_error(
                    status,
                    resp.headers(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                );
                let delay = match &e {
                    ClientError::Unavailable { retry_after_ms: Some(ms), .. } => {
                        self.cfg.backoff.delay_after_refusal_ms(None, *ms, self.jitter())
                    }
                    _ => self.cfg.backoff.delay_ms(None, 0, self.jitter()),
                };
                Err(Failure::Busy(e, delay))
            }
            // A protocol refusal (400 -32020, -32021, 404 -32601, ...) is the answer; a
            // transport one (403 Origin, 401, 406, ... with -32000) is an HTTP error.
            _ => match serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("error").cloned())
                .and_then(|e| serde_json::from_value::<ErrorObject>(e).ok())
            {
                Some(e) if e.code != code::TRANSPORT => Err(Failure::Final(ClientError::Rpc(e))),
                _ => Err(Failure::Final(status_error(
                    status,
                    resp.headers(),
                    String::from_utf8_lossy(&bytes).into_owned(),
                ))),
            },
        }
    }

    /// Read an SSE answer: notifications (kept for [`Self::take_notifications`]) until the
    /// answer to `id`. `None`: the stream ended or broke first (the request was lost), and
    /// its body is over.
    async fn read_modern_stream(
        &self,
        id: &JsonRpcId,
        resp: &mut awc::ClientResponse,
    ) -> Option<Result<Value, Failure>> {
        let mut dec = Decoder::new();
        while let Some(chunk) = next_chunk(resp).await {
            let Ok(chunk) = chunk else { break };
            for e in dec.feed(&chunk) {
                let msg: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
                let mut i = self.inner.borrow_mut();
                i.stats.modern_messages += 1;
                if msg.get("method").is_some() {
                    // A server sends no requests in this era; a notification of this request.
                    i.notifications.push((None, msg));
                } else if msg.get("id").and_then(JsonRpcId::from_value).as_ref() == Some(id) {
                    drop(i);
                    return Some(Self::answer_of(id, e.data.as_bytes()));
                }
            }
        }
        None
    }

    /// A notification in the 2026-07-28 era (the server accepts and drops it: the protocol
    /// defines none a client sends over HTTP).
    pub(super) async fn notify_modern(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<(), ClientError> {
        let params = rules::request_params(params.as_ref(), &self.cfg.capabilities, &client_info());
        let headers = rules::request_headers(method, &params, &[]);
        let mut resp = modern_post(&self.http, &self.cfg, &headers)
            .send_body(encode_notification(method, Some(&params)))
            .await
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        match resp.status().as_u16() {
            202 => Ok(()),
            s => {
                let body = body_of(&mut resp).await?;
                Err(status_error(s, resp.headers(), String::from_utf8_lossy(&body).into_owned()))
            }
        }
    }
}
