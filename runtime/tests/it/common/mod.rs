//! Test harness: the real endpoint in an in-process actix service (no sockets), a client that
//! speaks the legacy protocol to it, and test tools whose progress the test controls.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::ServiceResponse;
use actix_web::test::{self, TestRequest};
use actix_web::{App, http::StatusCode};
use bytes::Bytes;
use mcp_runtime::actor::Supervisor;
use mcp_runtime::config::RuntimeConfig;
use mcp_runtime::proto::mcp::LogLevel;
use mcp_runtime::proto::task::TaskSupport;
use mcp_runtime::sse::{Decoder, SseEvent};
use mcp_runtime::tools::{
    CallToolResult, Catalog, ListKind, ResourceContents, ResourceSpec, ServerInfo, StaticResource,
    ToolAnnotations, ToolError, ToolSpec, resource_async_fn, tool_fn,
};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

type Call = Rc<dyn Fn(TestRequest) -> Pin<Box<dyn Future<Output = ServiceResponse<BoxBody>>>>>;

/// Permits the `gated` tool waits for (`open`), and permits it adds when it has returned
/// (`finished`), so a test knows the response exists without sleeping.
#[derive(Clone)]
pub struct Gate {
    go: Arc<Semaphore>,
    started: Arc<Semaphore>,
    done: Arc<Semaphore>,
    dropped: Arc<Semaphore>,
    /// Executions of the write tools (`write`, `write_idem`).
    pub writes: Arc<std::sync::atomic::AtomicUsize>,
}

impl Default for Gate {
    fn default() -> Gate {
        let s = || Arc::new(Semaphore::new(0));
        Gate { go: s(), started: s(), done: s(), dropped: s(), writes: Arc::default() }
    }
}

impl Gate {
    /// Executions of the write tools so far.
    pub fn writes(&self) -> usize {
        self.writes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A write tool: counts its execution, then (with `wait: true`) waits for the gate; answers
/// `wrote <n> #<execution>`.
fn write_tool(name: &str, idempotent: bool, gate: &Gate) -> impl mcp_runtime::tools::Tool {
    let spec = ToolSpec::new(name, "Counts an execution, optionally waits for the gate", json!({"type":"object","properties":{"n":{"type":"integer"},"wait":{"type":"boolean"},"pad":{"type":"string"}}}))
        .annotations(ToolAnnotations { read_only_hint: Some(false), idempotent_hint: Some(idempotent), ..Default::default() });
    let g = gate.clone();
    tool_fn(spec, move |a: Value, _| {
        let g = g.clone();
        async move {
            let nth = g.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if a["wait"] == true {
                g.started.add_permits(1);
                g.go.acquire().await.map_err(|e| ToolError::Failed(e.to_string()))?.forget();
            }
            // `pad` (a string) is appended: a result as large as a test needs.
            Ok(CallToolResult::text(format!(
                "wrote {} #{nth}{}",
                a["n"],
                a["pad"].as_str().unwrap_or_default()
            )))
        }
    })
}

impl Gate {
    pub fn open(&self, n: usize) {
        self.go.add_permits(n);
    }

    /// Wait until `n` gated calls are running (waiting for the gate).
    pub async fn started(&self, n: u32) {
        let wait = self.started.acquire_many(n);
        tokio::time::timeout(WAIT, wait).await.expect("gated tool did not start").unwrap().forget();
    }

    /// Wait until `n` gated calls have produced their results.
    pub async fn finished(&self, n: u32) {
        let wait = self.done.acquire_many(n);
        tokio::time::timeout(WAIT, wait)
            .await
            .expect("gated tool did not finish")
            .unwrap()
            .forget();
    }

    /// Wait until `n` `flood_then_wait` calls were dropped by their session (cancelled).
    pub async fn dropped(&self, n: u32) {
        let wait = self.dropped.acquire_many(n);
        tokio::time::timeout(WAIT, wait).await.expect("the tool was not dropped").unwrap().forget();
    }

    /// Whether a `flood_then_wait` call was dropped, without waiting.
    pub fn was_dropped(&self) -> bool {
        self.dropped.available_permits() > 0
    }
}

/// Adds a permit when dropped (a cancelled tool's future is dropped by its session).
struct OnDrop(Arc<Semaphore>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.add_permits(1);
    }
}

/// A tool that logs 'before', waits for the gate, logs 'after' and answers 'done'.
fn gated(spec: ToolSpec, gate: &Gate) -> impl mcp_runtime::tools::Tool {
    let g = gate.clone();
    tool_fn(spec, move |_, cx| {
        let g = g.clone();
        async move {
            cx.log(LogLevel::Info, None, json!("before")).await;
            g.started.add_permits(1);
            g.go.acquire().await.map_err(|e| ToolError::Failed(e.to_string()))?.forget();
            cx.log(LogLevel::Info, None, json!("after")).await;
            // The session completes the call in this same poll, before the test sees it.
            g.done.add_permits(1);
            Ok(CallToolResult::text("done"))
        }
    })
}

/// Tools used by the integration tests.
pub fn catalog(gate: Gate) -> Catalog {
    let obj = json!({"type":"object","properties":{}});
    Catalog::builder()
        .tool(tool_fn(ToolSpec::new("echo", "Echo text", json!({"type":"object","properties":{"text":{"type":"string"}},"required":["text"]})), |a: Value, _| async move {
            Ok(CallToolResult::text(a["text"].as_str().unwrap_or_default()))
        }))
        .tool(gated(ToolSpec::new("gated", "Logs 'before', waits for the test's gate, logs 'after', answers 'done'", obj.clone()), &gate))
        .tool(tool_fn(ToolSpec::new("until_cancelled", "Waits until cancelled; counts as finished on the gate when the server drops it", obj.clone()), {
            let g = gate.clone();
            move |_, cx| {
                let g = g.clone();
                async move {
                    let _finished_when_dropped = OnDrop(Arc::clone(&g.done));
                    g.started.add_permits(1);
                    cx.cancellation().cancelled().await;
                    Ok(CallToolResult::text("cancelled"))
                }
            }
        }))
        .tool(tool_fn(
            ToolSpec::new("flood_then_wait", "Waits for the gate, sends n log messages, counts as finished, then runs until dropped", json!({"type":"object","properties":{"n":{"type":"integer"}}})),
            {
                let g = gate.clone();
                move |a: Value, cx| {
                    let g = g.clone();
                    async move {
                        let _dropped = OnDrop(Arc::clone(&g.dropped));
                        g.go.acquire().await.map_err(|e| ToolError::Failed(e.to_string()))?.forget();
                        for i in 0..a["n"].as_u64().unwrap_or(1) {
                            cx.log(LogLevel::Info, None, json!(i)).await;
                        }
                        g.done.add_permits(1);
                        std::future::pending::<()>().await;
                        Ok(CallToolResult::text("never"))
                    }
                }
            },
        ))
        .tool(tool_fn(ToolSpec::new("chatty", "Sends n log messages, then answers", json!({"type":"object","properties":{"n":{"type":"integer"}}})), |a: Value, cx| async move {
            for i in 0..a["n"].as_u64().unwrap_or(1) {
                cx.log(LogLevel::Info, None, json!(i)).await;
            }
            Ok(CallToolResult::text("chatty done"))
        }))
        .tool(tool_fn(ToolSpec::new("hasty", "Hands a log message to its stream, then answers without waiting for it", obj.clone()), |_, cx| async move {
            // Polled once, the message is in its stream's mailbox; the send is finished (its
            // receipt awaited) on a task of its own while the tool answers at once.
            let mut sent = Box::pin(async move { cx.log(LogLevel::Info, None, json!("hasty")).await });
            let waker = std::task::Waker::noop();
            assert!(sent.as_mut().poll(&mut std::task::Context::from_waker(waker)).is_pending());
            actix_web::rt::spawn(sent);
            Ok(CallToolResult::text("hasty done"))
        }))
        .tool(tool_fn(ToolSpec::new("ask", "Asks the client to sample, returns its text", obj.clone()), |_, cx| async move {
            let r = cx.request("sampling/createMessage", json!({"messages":[],"maxTokens":1})).await.map_err(ToolError::Protocol)?;
            Ok(CallToolResult::text(format!("client said {}", r["content"]["text"].as_str().unwrap_or("?"))))
        }))
        .tool(write_tool("write", false, &gate))
        .tool(tool_fn(
            ToolSpec::new("echo_ro", "Echo text (read-only)", json!({"type":"object","properties":{"text":{"type":"string"}}}))
                .annotations(ToolAnnotations { read_only_hint: Some(true), ..Default::default() }),
            |a: Value, _| async move { Ok(CallToolResult::text(a["text"].as_str().unwrap_or_default())) },
        ))
        .tool(write_tool("write_idem", true, &gate))
        .tool(gated(
            ToolSpec::new("gated_ro", "Read-only: logs 'before', waits for the test's gate, logs 'after', answers 'done'", json!({"type":"object","properties":{}}))
                .annotations(ToolAnnotations { read_only_hint: Some(true), ..Default::default() }),
            &gate,
        ))
        .tool(tool_fn(ToolSpec::new("poll", "Closes its stream for polling, then answers", obj.clone()), |_, cx| async move {
            cx.close_stream_for_polling().await;
            Ok(CallToolResult::text("polled"))
        }))
        // subscriptions/listen: tools and prompts lists and resources may change (announced
        // by these tools); resources list changes are not offered.
        .announces_list_changes(ListKind::Tools)
        .announces_list_changes(ListKind::Prompts)
        .announces_resource_updates()
        .tool(tool_fn(ToolSpec::new("change_tools", "Announces a tools list change", obj.clone()), |_, cx| async move {
            Ok(CallToolResult::text(cx.list_changed(ListKind::Tools).to_string()))
        }))
        .tool(tool_fn(ToolSpec::new("change_prompts", "Announces a prompts list change", obj), |_, cx| async move {
            Ok(CallToolResult::text(cx.list_changed(ListKind::Prompts).to_string()))
        }))
        // Tasks (2026-07-28 extension): `job` goes on as a task, waits for the gate, counts as
        // finished when its future is dropped; `ask_job` asks inside its task; `needs_task`
        // must run as one.
        .tool(tool_fn(ToolSpec::new("job", "Goes on as a task, waits for the gate, answers 'job done'", json!({"type":"object","properties":{}})).task_support(TaskSupport::Optional), {
            let g = gate.clone();
            move |_, cx| {
                let g = g.clone();
                async move {
                    let _finished_when_dropped = OnDrop(Arc::clone(&g.done));
                    cx.continue_as_task().await;
                    g.started.add_permits(1);
                    g.go.acquire().await.map_err(|e| ToolError::Failed(e.to_string()))?.forget();
                    Ok(CallToolResult::text("job done"))
                }
            }
        }))
        .tool(tool_fn(ToolSpec::new("ask_job", "Goes on as a task and asks for a confirmation (key confirm)", json!({"type":"object","properties":{}})).task_support(TaskSupport::Optional), |_, cx| async move {
            cx.continue_as_task().await;
            let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
            let a = cx.input("confirm", "elicitation/create", json!({"message": "Go?", "requestedSchema": schema})).await.map_err(ToolError::Protocol)?;
            Ok(CallToolResult::text(format!("confirmed={}", a["content"]["ok"])))
        }))
        .tool(tool_fn(ToolSpec::new("needs_task", "Must run as a task", json!({"type":"object","properties":{}})).task_support(TaskSupport::Required), |_, _| async move {
            Ok(CallToolResult::text("ran as a task"))
        }))
        .tool(tool_fn(ToolSpec::new("self_cancelling_job", "Goes on as a task, then fires its own cancellation token and waits", json!({"type":"object","properties":{}})).task_support(TaskSupport::Optional), |_, cx| async move {
            cx.continue_as_task().await;
            cx.cancellation().cancel();
            std::future::pending::<()>().await;
            Ok(CallToolResult::text("never"))
        }))
        .tool(tool_fn(ToolSpec::new("panicky_job", "Goes on as a task, then panics", json!({"type":"object","properties":{}})).task_support(TaskSupport::Optional), |_, cx| async move {
            cx.continue_as_task().await;
            tokio::task::yield_now().await;
            panic!("a tool's bug");
        }))
        .tool(tool_fn(
            ToolSpec::new("panics", "Panics: before returning its future (when: call), in its first poll (poll), or after waiting once (later)", json!({"type":"object","properties":{"when":{"type":"string"}}})),
            |a: Value, _| {
                assert!(a["when"] != "call", "a tool's bug before its future");
                async move {
                    if a["when"] == "later" {
                        tokio::task::yield_now().await;
                    }
                    panic!("a tool's bug in its future");
                }
            },
        ))
        .tool(tool_fn(
            ToolSpec::new("regional", "Echoes its region, which 2026-07-28 clients mirror in Mcp-Param-Region", json!({"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}},"required":["region"]})),
            |a: Value, _| async move { Ok(CallToolResult::text(a["region"].as_str().unwrap_or_default())) },
        ))
        .tool(tool_fn(ToolSpec::new("touch", "Announces that resource uri changed", json!({"type":"object","properties":{"uri":{"type":"string"}},"required":["uri"]})), |a: Value, cx| async move {
            Ok(CallToolResult::text(cx.resource_updated(a["uri"].as_str().unwrap_or_default()).to_string()))
        }))
        .resource(StaticResource::new(
            ResourceSpec { uri: "test://doc".into(), name: "doc".into(), description: None, mime_type: Some("text/plain".into()) },
            vec![ResourceContents::text("test://doc", "text/plain", "doc")],
        ))
        .resource(resource_async_fn(
            ResourceSpec { uri: "test://ask".into(), name: "ask".into(), description: Some("Asks the client's model who reads it".into()), mime_type: Some("text/plain".into()) },
            |cx| async move {
                let a = cx.input("reader", "sampling/createMessage", json!({"messages": [], "maxTokens": 1})).await?;
                Ok(vec![ResourceContents::text("test://ask", "text/plain", format!("read by {}", a["content"]["text"].as_str().unwrap_or("?")))])
            },
        ))
        .build(ServerInfo { name: "test".into(), version: "0".into(), instructions: None })
        .unwrap()
}

pub struct Harness {
    call: Call,
    pub sup: Arc<Supervisor>,
    pub gate: Gate,
}

pub async fn harness() -> Harness {
    harness_with(RuntimeConfig::default()).await
}

/// The default configuration changed by `f`, validated.
pub fn cfg(f: impl FnOnce(&mut RuntimeConfig)) -> RuntimeConfig {
    let mut c = RuntimeConfig::default();
    f(&mut c);
    c.validate().expect("a valid test configuration").into_inner()
}

/// Bearer tokens: `ta` is alice, `tb` is bob.
pub fn two_callers(c: &mut RuntimeConfig) {
    c.security.bearer_tokens =
        [("ta".to_owned(), "alice".to_owned()), ("tb".to_owned(), "bob".to_owned())].into();
}

/// A harness with bearer authentication: token `ta` is alice, `tb` is bob.
pub async fn harness_with_two_callers() -> Harness {
    harness_with(cfg(two_callers)).await
}

pub async fn harness_with(cfg: RuntimeConfig) -> Harness {
    let ledger = mcp_runtime::ledger::Ledger::memory(&cfg);
    harness_on(cfg, ledger).await
}

/// A harness on `ledger` (a clone of it lets the test read and alter what was recorded).
pub async fn harness_on(cfg: RuntimeConfig, ledger: mcp_runtime::ledger::Ledger) -> Harness {
    let gate = Gate::default();
    harness_serving(cfg, catalog(gate.clone()), ledger, gate).await
}

/// A harness serving a test's own `catalog` on a memory ledger.
pub async fn harness_with_catalog(cfg: RuntimeConfig, catalog: Catalog) -> Harness {
    let ledger = mcp_runtime::ledger::Ledger::memory(&cfg);
    harness_serving(cfg, catalog, ledger, Gate::default()).await
}

/// A harness serving a test's own `catalog` on `ledger`.
pub async fn harness_with_catalog_on(
    cfg: RuntimeConfig,
    catalog: Catalog,
    ledger: mcp_runtime::ledger::Ledger,
) -> Harness {
    harness_serving(cfg, catalog, ledger, Gate::default()).await
}

async fn harness_serving(
    cfg: RuntimeConfig,
    catalog: Catalog,
    ledger: mcp_runtime::ledger::Ledger,
    gate: Gate,
) -> Harness {
    let sup = Supervisor::with_ledger(cfg, catalog, ledger);
    sup.start_serving();
    let svc = Rc::new(
        test::init_service(
            App::new().configure(mcp_runtime::http::configure("/mcp", Arc::clone(&sup))),
        )
        .await,
    );
    let call: Call = Rc::new(move |req: TestRequest| {
        let svc = Rc::clone(&svc);
        Box::pin(
            async move { test::call_service(&*svc, req.to_request()).await.map_into_boxed_body() },
        )
    });
    Harness { call, sup, gate }
}

/// A response whose body can be read frame by frame.
pub struct Resp {
    pub status: StatusCode,
    pub headers: actix_web::http::header::HeaderMap,
    body: Option<BoxBody>,
    pub sse: Decoder,
    events: std::collections::VecDeque<SseEvent>,
    /// Every SSE event id seen, in order (the first is the priming cursor on 2025-11-25).
    pub ids: Vec<String>,
    /// Every body byte of an SSE response read so far.
    pub raw: Vec<u8>,
}

const WAIT: Duration = Duration::from_secs(5);

impl Resp {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).map(|v| v.to_str().unwrap().to_owned())
    }

    pub fn content_type(&self) -> String {
        self.header("content-type").unwrap_or_default()
    }

    /// Next body chunk (fed to the SSE decoder as well); `None` at the end of the body.
    /// Fails the test after 5 s.
    pub async fn chunk(&mut self) -> Option<Bytes> {
        let body = self.body.as_mut()?;
        let next = tokio::time::timeout(
            WAIT,
            std::future::poll_fn(|cx| Pin::new(&mut *body).poll_next(cx)),
        )
        .await;
        match next.expect("timed out waiting for a body chunk") {
            Some(Ok(b)) => {
                if self.headers.get("content-type").is_some_and(|v| v == "text/event-stream") {
                    self.raw.extend_from_slice(&b);
                    let evs = self.sse.feed(&b);
                    self.events.extend(evs);
                    let text = String::from_utf8_lossy(&b);
                    self.ids.extend(
                        text.lines().filter_map(|l| l.strip_prefix("id: ")).map(str::to_owned),
                    );
                }
                Some(b)
            }
            Some(Err(e)) => panic!("body error: {e}"),
            None => {
                self.body = None;
                None
            }
        }
    }

    /// Next dispatched SSE event (priming events and comments update state but are skipped).
    pub async fn event(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(e) = self.events.pop_front() {
                return Some(e);
            }
            self.chunk().await?;
        }
    }

    /// Next event's data as JSON.
    pub async fn message(&mut self) -> Value {
        let e = self.event().await.expect("stream ended before the next message");
        serde_json::from_str(&e.data).unwrap()
    }

    /// Every remaining message until the body ends.
    pub async fn rest(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(e) = self.event().await {
            out.push(serde_json::from_str(&e.data).unwrap());
        }
        out
    }

    /// The response as JSON: the whole body of a JSON response, or the first message of an
    /// SSE response.
    pub async fn json(&mut self) -> Value {
        if self.content_type() == "text/event-stream" {
            return self.message().await;
        }
        let mut buf = Vec::new();
        while let Some(c) = self.chunk().await {
            buf.extend_from_slice(&c);
        }
        serde_json::from_slice(&buf)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&buf)))
    }

    /// Drop the body: the client disconnects.
    pub fn disconnect(mut self) -> Decoder {
        self.body = None;
        std::mem::take(&mut self.sse)
    }

    /// The first event id of the stream (its priming cursor on 2025-11-25 sessions).
    pub fn first_id(&self) -> String {
        self.ids.first().cloned().expect("no event id seen")
    }

    pub fn last_event_id(&self) -> String {
        self.sse.last_event_id.clone().expect("no event id seen")
    }
}

impl Harness {
    pub async fn send(&self, req: TestRequest) -> Resp {
        let r = tokio::time::timeout(WAIT, (self.call)(req))
            .await
            .expect("timed out waiting for the response head");
        let status = r.status();
        let headers = r.headers().clone();
        Resp {
            status,
            headers,
            body: Some(r.into_body()),
            sse: Decoder::new(),
            events: Default::default(),
            ids: Vec::new(),
            raw: Vec::new(),
        }
    }

    /// Initialize a session at `version`; returns the client.
    pub async fn client(&self, version: &str) -> Client<'_> {
        self.client_as(version, None).await
    }

    pub async fn client_as(&self, version: &str, token: Option<&str>) -> Client<'_> {
        let mut req = post().set_payload(init_body(version));
        if let Some(t) = token {
            req = req.insert_header(("Authorization", format!("Bearer {t}")));
        }
        let mut r = self.send(req).await;
        assert_eq!(r.status, StatusCode::OK, "initialize failed");
        let sid = r.header("mcp-session-id").expect("session id header");
        let v = r.json().await;
        assert_eq!(v["result"]["protocolVersion"], version);
        let c =
            Client { h: self, sid, version: version.to_owned(), token: token.map(str::to_owned) };
        assert_eq!(
            c.notify(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await,
            StatusCode::ACCEPTED
        );
        c
    }
}

pub fn init_body(version: &str) -> String {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":version,"capabilities":{"sampling":{}},"clientInfo":{"name":"t","version":"1"}}}).to_string()
}

/// A POST with JSON content type and both Accept types (initialize needs no session).
pub fn post() -> TestRequest {
    TestRequest::post()
        .uri("/mcp")
        .insert_header(("Content-Type", "application/json"))
        .insert_header(("Accept", "application/json, text/event-stream"))
        .insert_header(("Host", "127.0.0.1:8080"))
}

pub fn get() -> TestRequest {
    TestRequest::get()
        .uri("/mcp")
        .insert_header(("Accept", "text/event-stream"))
        .insert_header(("Host", "127.0.0.1:8080"))
}

pub struct Client<'a> {
    pub h: &'a Harness,
    pub sid: String,
    pub version: String,
    pub token: Option<String>,
}

impl Client<'_> {
    pub fn with_session(&self, req: TestRequest) -> TestRequest {
        let req = req
            .insert_header(("Mcp-Session-Id", self.sid.clone()))
            .insert_header(("MCP-Protocol-Version", self.version.clone()));
        match &self.token {
            Some(t) => req.insert_header(("Authorization", format!("Bearer {t}"))),
            None => req,
        }
    }

    /// POST a request body; returns the response (SSE by default).
    pub async fn request(&self, body: Value) -> Resp {
        self.h.send(self.with_session(post()).set_payload(body.to_string())).await
    }

    /// `tools/call` with `_meta["io.mcp-host/idempotencyKey"] = key`.
    pub async fn call_keyed(&self, id: i64, name: &str, args: Value, key: &str) -> Resp {
        self.request(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args,"_meta":{"io.mcp-host/idempotencyKey":key}}})).await
    }

    pub async fn call_tool(&self, id: i64, name: &str, args: Value) -> Resp {
        self.request(json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args}})).await
    }

    pub async fn notify(&self, body: Value) -> StatusCode {
        self.request(body).await.status
    }

    pub async fn resume(&self, last_event_id: &str) -> Resp {
        self.h
            .send(
                self.with_session(get()).insert_header(("Last-Event-ID", last_event_id.to_owned())),
            )
            .await
    }

    pub async fn open_get(&self) -> Resp {
        self.h.send(self.with_session(get())).await
    }

    pub async fn delete(&self) -> Resp {
        self.h
            .send(self.with_session(
                TestRequest::delete().uri("/mcp").insert_header(("Host", "127.0.0.1:8080")),
            ))
            .await
    }
}

/// Wait (bounded: 5 s) until `cond` holds — to order a test's steps on server state it can
/// observe, not on elapsed time.
pub async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// Assert an HTTP refusal and its JSON-RPC error code.
pub async fn assert_refused(mut r: Resp, status: StatusCode, code: i64) {
    assert_eq!(r.status, status);
    assert_eq!(r.json().await["error"]["code"], code);
}

/// The `result.content[0].text` of a response message.
pub fn text_of(msg: &Value) -> &str {
    msg["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text result in {msg}"))
}

/// The modern protocol version.
pub const V: &str = "2026-07-28";

pub fn meta(caps: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": caps, "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}})
}

/// A modern POST: headers mirrored from the body as a conforming client sends them.
pub fn modern(id: impl Into<Value>, method: &str, mut params: Value) -> TestRequest {
    if params.get("_meta").is_none() {
        params["_meta"] = meta(json!({"sampling": {}, "elicitation": {}}));
    }
    let mut r =
        post().insert_header(("MCP-Protocol-Version", V)).insert_header(("Mcp-Method", method));
    let name =
        params.get("name").or_else(|| params.get("uri")).and_then(Value::as_str).map(str::to_owned);
    if let Some(n) =
        name.filter(|_| matches!(method, "tools/call" | "prompts/get" | "resources/read"))
    {
        r = r.insert_header(("Mcp-Name", n));
    }
    r.set_payload(
        json!({"jsonrpc": "2.0", "id": id.into(), "method": method, "params": params}).to_string(),
    )
}

/// One HTTP/1.1 request read from a scripted peer's connection: its method, its
/// `Mcp-Session-Id` and its body.
pub async fn read_request(s: &mut tokio::net::TcpStream) -> (String, Option<String>, String) {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head, body_len) = loop {
        let n = s.read(&mut chunk).await.unwrap();
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            break (head, end + 4 + len);
        }
    };
    while buf.len() < body_len {
        let n = s.read(&mut chunk).await.unwrap();
        buf.extend_from_slice(&chunk[..n]);
    }
    let method = head.split(' ').next().unwrap_or_default().to_owned();
    let sid =
        head.lines().find_map(|l| l.strip_prefix("mcp-session-id:")).map(|v| v.trim().to_owned());
    (method, sid, String::from_utf8_lossy(&buf[head.len() + 4..]).into_owned())
}

/// `sup` served by one worker on a loopback port (`url` of its `/mcp`), and a count of the
/// connections it accepted. `half_closed: false` as mcp-host: a client's close is seen at once
/// (in the 2026-07-28 era it is a cancellation).
pub async fn serve_counting(
    sup: Arc<Supervisor>,
    half_closed: bool,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&accepted);
    let server = actix_web::HttpServer::new(move || {
        App::new().configure(mcp_runtime::http::configure("/mcp", Arc::clone(&sup)))
    })
    .on_connect(move |_, _| {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })
    .workers(1)
    .h1_allow_half_closed(half_closed)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .unwrap();
    let url = format!("http://{}/mcp", server.addrs()[0]);
    actix_rt::spawn(server.run());
    (url, accepted)
}
