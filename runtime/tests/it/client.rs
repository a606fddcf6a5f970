//! The resilient client's HTTP driver against the real endpoint on a loopback socket.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use actix_web::{App, HttpServer};
use mcp_runtime::actor::Supervisor;
use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{ClientConfig, ClientError, McpClient};
use mcp_runtime::config::RuntimeConfig;
use serde_json::json;

async fn serve(cfg: RuntimeConfig) -> (String, Arc<Supervisor>) {
    let sup = Supervisor::new(cfg, common::catalog(common::Gate::default()));
    (serve_sup(Arc::clone(&sup)).await, sup)
}

async fn serve_sup(sup: Arc<Supervisor>) -> String {
    common::serve_counting(sup, true).await.0
}

fn fast() -> RuntimeConfig {
    common::cfg(|c| c.sse.retry_ms = 20)
}

async fn connect(url: &str) -> McpClient {
    let mut cfg = ClientConfig::new(url);
    cfg.backoff.default_ms = 20;
    McpClient::connect(cfg, MemoryJournal::new(4096)).await.unwrap()
}

async fn delete_session(url: &str, sid: &str) {
    let r = awc::Client::default()
        .delete(url)
        .insert_header(("Mcp-Session-Id", sid))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
}

#[actix_web::test]
async fn client_connects_lists_tools_and_calls_one() {
    let (url, _sup) = serve(fast()).await;
    let c = connect(&url).await;
    let tools = c.request("tools/list", None, true).await.unwrap();
    assert!(tools["tools"].as_array().unwrap().iter().any(|t| t["name"] == "echo"));
    let r = c
        .request("tools/call", Some(json!({"name":"echo","arguments":{"text":"hi"}})), false)
        .await
        .unwrap();
    assert_eq!(r["content"][0]["text"], "hi");
    assert_eq!(c.stats().handshakes, 1);
}

#[actix_web::test]
async fn calls_answered_on_their_streams_reuse_the_clients_connection() {
    let sup = Supervisor::new(fast(), common::catalog(common::Gate::default()));
    let (url, accepted) = common::serve_counting(sup, true).await;
    let c = connect(&url).await;
    for i in 0..20 {
        let text = format!("call {i}");
        let r = c
            .request("tools/call", Some(json!({"name":"echo","arguments":{"text":text}})), false)
            .await
            .unwrap();
        assert_eq!(r["content"][0]["text"], text);
    }
    assert_eq!(c.stats().streams, 20, "answered on their streams");
    // Each stream is read to its end after its answer: its connection goes back to the pool
    // (dropped before its end, each call would need a new one). When the end has not arrived
    // with the answer, the next call takes a second connection and the two alternate: 2
    // measured, 3 allowed.
    let n = accepted.load(Ordering::Relaxed);
    assert!(n <= 3, "{n} connections for a handshake and 20 calls");
}

#[actix_web::test]
async fn client_resumes_a_stream_the_server_closed_after_priming() {
    let (url, _sup) = serve(fast()).await;
    let c = connect(&url).await;
    let r =
        c.request("tools/call", Some(json!({"name":"poll","arguments":{}})), false).await.unwrap();
    assert_eq!(r["content"][0]["text"], "polled");
    assert!(c.stats().resumes >= 1, "{:?}", c.stats());
}

#[actix_web::test]
async fn related_notifications_are_accepted_once() {
    let (url, _sup) = serve(fast()).await;
    let c = connect(&url).await;
    c.request("tools/call", Some(json!({"name":"chatty","arguments":{"n":3}})), false)
        .await
        .unwrap();
    let notes = c.take_notifications();
    assert_eq!(notes.len(), 3);
    assert!(notes.iter().all(|n| n["method"] == "notifications/message"));
}

#[actix_web::test]
async fn jsonrpc_error_response_is_terminal() {
    let (url, _sup) = serve(fast()).await;
    let c = connect(&url).await;
    match c.request("tools/call", Some(json!({"name":"missing"})), true).await {
        Err(ClientError::Rpc(e)) => assert_eq!(e.code, -32602),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.stats().resumes, 0);
}

#[actix_web::test]
async fn a_404_triggers_exactly_one_new_handshake_for_concurrent_requests() {
    let (url, _sup) = serve(fast()).await;
    let c = connect(&url).await;
    delete_session(&url, &c.session_id()).await;
    let list = || c.request("tools/list", None, true);
    let (a, b) = tokio::join!(list(), list());
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    assert_eq!(c.stats().handshakes, 2, "initial + exactly one re-handshake: {:?}", c.stats());
    assert_eq!(c.stats().reissued, 2);
    assert_eq!(
        (c.stats().not_found, c.stats().recovered_after_404),
        (2, 2),
        "one made the handshake, the other joined it"
    );
}

#[actix_web::test]
async fn non_idempotent_request_after_404_is_reported_lost_not_moved() {
    let (url, sup) = serve(fast()).await;
    let c = connect(&url).await;
    let old = c.session_id();
    delete_session(&url, &old).await;
    let r =
        c.request("tools/call", Some(json!({"name":"echo","arguments":{"text":"x"}})), false).await;
    assert!(matches!(r, Err(ClientError::Lost(..))), "{r:?}");
    assert_ne!(c.session_id(), old, "a new session exists for later calls");
    assert_eq!(sup.session_count(), 1);
}

#[actix_web::test]
async fn a_stream_is_not_resumed_once_another_call_replaced_its_session() {
    // The stream closes for polling with a 10 s retry: its resume would wait that long, far
    // past the new session (if not, `resumes` below says so). Which of the client's checks
    // ends it (as the stream ends, or after the wait) depends on when the stream's end is read.
    let (url, _sup) = serve(common::cfg(|c| c.sse.retry_ms = 10_000)).await;
    let c = connect(&url).await;
    let old = c.session_id();
    let polled = c.request("tools/call", Some(json!({"name":"poll","arguments":{}})), false);
    let meanwhile = async {
        // Once it holds its stream's cursor (the priming event), and while it waits to resume:
        // its session ends, and another call's 404 makes a new one.
        for _ in 0..1_000 {
            if c.stats().accept.cursor_only > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(c.stats().accept.cursor_only, 1, "the call's priming event arrived");
        delete_session(&url, &old).await;
        c.request("tools/list", None, true).await.unwrap();
        assert_ne!(c.session_id(), old, "the other call made a new session");
        assert_eq!(c.stats().resumes, 0, "before the stream's resume");
    };
    let (r, ()) = tokio::join!(polled, meanwhile);
    // Resumed with the new session's id, its cursor (bound to the old one) would be refused
    // as forged (400). Its session was replaced, so it is not resumed at all: the call ends as
    // one whose session ended (404), reported lost as it is not idempotent.
    match r {
        Err(ClientError::Lost(_, why)) => assert!(why.contains("(404)"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.stats().handshakes, 2, "{:?}", c.stats());
    assert_eq!(c.stats().resumes, 0, "no resume went out for a session replaced");
}

#[actix_web::test]
async fn server_to_client_requests_are_answered_by_the_handler() {
    let (url, _sup) = serve(fast()).await;
    let mut cfg = ClientConfig::new(&url);
    cfg.capabilities = json!({"sampling": {}});
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = std::rc::Rc::clone(&seen);
    let c = McpClient::connect(cfg, MemoryJournal::new(64)).await.unwrap().with_handler(std::rc::Rc::new(move |method: &str, _params: &serde_json::Value| {
        log.borrow_mut().push(method.to_owned());
        Ok(json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "test"}))
    }));
    let r =
        c.request("tools/call", Some(json!({"name":"ask","arguments":{}})), false).await.unwrap();
    assert_eq!(r["content"][0]["text"], "client said hi");
    assert_eq!(*seen.borrow(), vec!["sampling/createMessage".to_owned()]);
}

#[actix_web::test]
async fn without_a_handler_server_requests_get_method_not_found() {
    let (url, _sup) = serve(fast()).await;
    let mut cfg = ClientConfig::new(&url);
    cfg.capabilities = json!({"sampling": {}});
    let c = McpClient::connect(cfg, MemoryJournal::new(64)).await.unwrap();
    match c.request("tools/call", Some(json!({"name":"ask","arguments":{}})), false).await {
        Err(ClientError::Rpc(e)) => assert_eq!(e.code, -32601),
        other => panic!("{other:?}"),
    }
}

#[actix_web::test]
async fn close_sends_delete_and_the_session_is_gone() {
    let (url, sup) = serve(fast()).await;
    let c = connect(&url).await;
    assert_eq!(sup.session_count(), 1);
    assert_eq!(c.close().await.unwrap(), mcp_runtime::client_http::Closed::Ended);
    assert_eq!(sup.session_count(), 0);
}

#[actix_web::test]
async fn handshake_refused_with_503_is_retried_no_sooner_than_retry_after() {
    // One slot in the whole table and two callers: when bob holds it, alice's handshake finds
    // the table full (503, Retry-After: 5), not her own quota.
    let (url, sup) = serve(common::cfg(|c| {
        common::two_callers(c);
        c.sse.retry_ms = 20;
        c.sessions.max_sessions = 1;
        c.quotas.sessions_per_principal = 1;
    }))
    .await;
    let connect_as = |token: &str| {
        let mut cfg = ClientConfig::new(&url);
        cfg.backoff.default_ms = 20;
        cfg.token = Some(mcp_runtime::client_http::BearerToken::fixed(token));
        McpClient::connect(cfg, MemoryJournal::new(4096))
    };
    let a = connect_as("ta").await.unwrap();
    let r = awc::Client::default()
        .delete(&url)
        .insert_header(("Mcp-Session-Id", a.session_id()))
        .insert_header(("Authorization", "Bearer ta"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    let b = connect_as("tb").await.unwrap(); // takes the only slot
    let release = async move {
        common::until("alice's new handshake was refused", || {
            sup.stats().refusals("overloaded.sessions") >= 1
        })
        .await;
        assert_eq!(
            sup.stats().refusals("quota.sessions"),
            0,
            "refused for the table, not for her quota"
        );
        b.close().await.unwrap();
    };
    let t0 = tokio::time::Instant::now();
    let (r, ()) = tokio::join!(
        a.request("tools/call", Some(json!({"name":"echo","arguments":{"text":"later"}})), true),
        release
    );
    assert_eq!(r.unwrap()["content"][0]["text"], "later");
    // A lower bound only (a slow machine cannot make it fail): no retry before Retry-After.
    assert!(
        t0.elapsed() >= std::time::Duration::from_secs(5),
        "waited {:?}, less than Retry-After",
        t0.elapsed()
    );
    assert_eq!(a.stats().handshakes, 2);
}

#[actix_web::test]
async fn idempotent_request_refused_with_503_is_retried_and_others_are_not() {
    let gate = common::Gate::default();
    let sup = Supervisor::new(
        common::cfg(|c| {
            c.sse.retry_ms = 20;
            c.sessions.max_in_flight = 1;
        }),
        common::catalog(gate.clone()),
    );
    let url = serve_sup(Arc::clone(&sup)).await;
    let c = connect(&url).await;
    let call = |idempotent| {
        c.request("tools/call", Some(json!({"name":"echo","arguments":{"text":"x"}})), idempotent)
    };
    let hold = c.request("tools/call", Some(json!({"name":"gated","arguments":{}})), false);
    let open_later = async {
        // Both calls below were refused once: the slot may free now.
        common::until("two calls refused", || sup.stats().refusals("overloaded.in_flight") >= 2)
            .await;
        gate.open(1);
    };
    // While `gated` holds the only slot: a non-idempotent call gets the 503 back at once...
    let probe = async {
        gate.started(1).await;
        let refused = call(false).await;
        // ...an idempotent one waits Retry-After (1 s) and succeeds once the slot is free.
        let retried = call(true).await;
        (refused, retried)
    };
    let (held, (), (refused, retried)) = tokio::join!(hold, open_later, probe);
    assert_eq!(held.unwrap()["content"][0]["text"], "done");
    assert!(
        matches!(
            refused,
            Err(ClientError::Unavailable { status: 503, retry_after_ms: Some(1000), .. })
        ),
        "{refused:?}"
    );
    assert_eq!(retried.unwrap()["content"][0]["text"], "x");
    assert_eq!(c.stats().reissued, 1);
}

#[actix_web::test]
async fn cancelling_a_request_tells_the_server_and_returns_cancelled() {
    let gate = common::Gate::default();
    let url = serve_sup(Supervisor::new(fast(), common::catalog(gate.clone()))).await;
    let c = connect(&url).await;
    let token = tokio_util::sync::CancellationToken::new();
    let call = c.request_cancellable(
        "tools/call",
        Some(json!({"name":"until_cancelled","arguments":{}})),
        true,
        &token,
    );
    let cancel_soon = async {
        gate.started(1).await;
        token.cancel();
    };
    let (r, ()) = tokio::join!(call, cancel_soon);
    assert_eq!(r, Err(ClientError::Cancelled));
    // The tool saw the cancellation: the server got notifications/cancelled.
    gate.finished(1).await;
    assert_eq!(c.stats().reissued, 0, "a cancelled request is not re-issued");
}

/// Serve `sup` on `port` (0: any free port); the handle stops it.
async fn serve_on(sup: Arc<Supervisor>, port: u16) -> (u16, actix_web::dev::ServerHandle) {
    let stats = Arc::clone(sup.stats());
    let server = HttpServer::new(move || {
        App::new().configure(mcp_runtime::http::configure("/mcp", Arc::clone(&sup)))
    })
    // Counted as the host counts them: a test can wait until a stopped server let go of all.
    .on_connect(move |_, data| {
        data.insert(stats.connection());
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", port))
    .unwrap();
    let port = server.addrs()[0].port();
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    (port, handle)
}

/// Stop a server of [`serve_on`] and wait (bounded) until it has closed every connection: the
/// stop returns before its worker has let go of them (the client's pooled keep-alive one
/// among them), and a call made meanwhile could still reach it.
async fn stop(server: &actix_web::dev::ServerHandle, sup: &Supervisor) {
    server.stop(false).await;
    common::until("the stopped server closed its connections", || {
        sup.stats_snapshot().connections == 0
    })
    .await;
}

#[actix_web::test]
async fn an_idempotent_request_is_reissued_until_a_restarted_server_is_back_within_the_window() {
    // Re-issues are paced 50..100 ms here, so eight of them (the old count bound) are spent in
    // well under a second; the server is away for 3 s (about 30 paced re-issues: room for a
    // loaded machine to make fewer and still more than 8) and comes back with no memory of
    // the session (404 → new handshake → re-issue). Only a time bound gets the call through.
    let first_sup = Supervisor::new(fast(), common::catalog(common::Gate::default()));
    let (port, first) = serve_on(Arc::clone(&first_sup), 0).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut cfg = ClientConfig::new(&url);
    cfg.backoff = mcp_runtime::client::budget::Backoff { default_ms: 20, max_ms: 100 };
    cfg.reissue_window_ms = 20_000;
    let c = McpClient::connect(cfg, MemoryJournal::new(4096)).await.unwrap();
    stop(&first, &first_sup).await;
    let restart = async {
        tokio::time::sleep(std::time::Duration::from_millis(3_000)).await;
        serve_on(Supervisor::new(fast(), common::catalog(common::Gate::default())), port).await
    };
    let (r, (_, second)) = tokio::join!(
        c.request("tools/call", Some(json!({"name":"echo","arguments":{"text":"back"}})), true),
        restart
    );
    assert_eq!(r.unwrap()["content"][0]["text"], "back");
    let s = c.stats();
    assert!(s.reissued > 8, "more re-issues than the old count allowed: {s:?}");
    assert_eq!((s.not_found, s.handshakes, s.lost), (1, 2, 0), "{s:?}");
    second.stop(false).await;
}

#[actix_web::test]
async fn reissues_end_once_the_window_has_passed_and_the_request_is_reported_lost() {
    let sup = Supervisor::new(fast(), common::catalog(common::Gate::default()));
    let (port, server) = serve_on(Arc::clone(&sup), 0).await;
    let mut cfg = ClientConfig::new(&format!("http://127.0.0.1:{port}/mcp"));
    cfg.backoff = mcp_runtime::client::budget::Backoff { default_ms: 20, max_ms: 100 };
    cfg.reissue_window_ms = 400;
    let c = McpClient::connect(cfg, MemoryJournal::new(4096)).await.unwrap();
    stop(&server, &sup).await;
    match c
        .request("tools/call", Some(json!({"name":"echo","arguments":{"text":"never"}})), true)
        .await
    {
        Err(ClientError::Lost(method, why)) => {
            assert!(method == "tools/call" && why.contains("after its first failure"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.stats().lost, 1);
}

#[actix_web::test]
async fn an_idempotent_request_refused_for_the_whole_window_is_reported_lost_with_its_history() {
    // A scripted peer: a session, then 503 (`Retry-After: 0`) to every request.
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let peer = actix_rt::spawn(async move {
        // Bounded: the window below is 300 ms of 20 ms refusals.
        for _ in 0..200 {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let (_, _, body) = common::read_request(&mut s).await;
            let answer = if body.contains("\"initialize\"") {
                let result = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"scripted","version":"0"}}}"#;
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{result}",
                    result.len()
                )
            } else if body.contains("notifications/initialized") {
                "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
            } else {
                "HTTP/1.1 503 Service Unavailable\r\nretry-after: 0\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
            };
            s.write_all(answer.as_bytes()).await.unwrap();
            let _ = s.shutdown().await;
        }
    });
    let mut cfg = ClientConfig::new(&url);
    cfg.backoff = mcp_runtime::client::budget::Backoff { default_ms: 20, max_ms: 40 };
    cfg.reissue_window_ms = 300;
    let c = McpClient::connect(cfg, MemoryJournal::new(64)).await.unwrap();
    match c.request("tools/call", Some(json!({"name":"echo","arguments":{}})), true).await {
        Err(ClientError::Lost(_, why)) => {
            assert!(why.contains("503") && why.contains("after its first failure"), "{why}");
        }
        other => panic!("lost after the window, not {other:?}"),
    }
    assert_eq!(c.stats().lost, 1);
    // Not idempotent: the refusal itself, at once.
    match c.request("tools/call", Some(json!({"name":"echo","arguments":{}})), false).await {
        Err(ClientError::Unavailable { status: 503, .. }) => {}
        other => panic!("the refusal, not {other:?}"),
    }
    peer.abort();
}

#[actix_web::test]
async fn a_404_to_initialized_sends_no_delete_with_the_dead_id() {
    // A scripted peer (the client is what is tested): the first session answers 404 to its
    // `notifications/initialized`, the second is accepted. Every request is recorded.
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::<(String, Option<String>)>::new()));
    let log = std::rc::Rc::clone(&seen);
    let peer = actix_rt::spawn(async move {
        let mut sessions = 0;
        for _ in 0..6 {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let (method, sid, body) = common::read_request(&mut s).await;
            log.borrow_mut().push((method.clone(), sid.clone()));
            let answer = if body.contains("\"initialize\"") {
                sessions += 1;
                let result = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"scripted","version":"0"}}}"#;
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: s{sessions}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{result}",
                    result.len()
                )
            } else if sid.as_deref() == Some("s1") {
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    .to_owned()
            } else {
                "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
            };
            s.write_all(answer.as_bytes()).await.unwrap();
            let _ = s.shutdown().await;
        }
    });
    let mut cfg = ClientConfig::new(&url);
    cfg.backoff.default_ms = 20;
    // The first handshake fails with the 404 (callers such as mcp-load retry connect) ...
    let first = McpClient::connect(cfg.clone(), MemoryJournal::new(64)).await;
    assert!(matches!(first, Err(ClientError::Http(404, _))), "{:?}", first.err());
    // ... and the next one is a new session.
    let c = McpClient::connect(cfg, MemoryJournal::new(64)).await.unwrap();
    assert_eq!(c.session_id(), "s2");
    peer.abort();
    let seen = seen.borrow();
    let after_404 = seen
        .iter()
        .skip_while(|(_, sid)| sid.as_deref() != Some("s1"))
        .skip(1)
        .filter(|(_, sid)| sid.as_deref() == Some("s1"))
        .count();
    assert_eq!(after_404, 0, "the id answered 404 was sent again: {seen:?}");
    assert!(
        !seen.iter().any(|(m, _)| m == "delete"),
        "no DELETE for a session the server called unknown: {seen:?}"
    );
}

/// A scripted endpoint's part: the first call's stream (`first`, cut before its answer), and
/// what it saw: the calls posted, and the `Last-Event-ID` of each GET.
#[derive(Default)]
struct Script {
    first: String,
    calls: usize,
    resumes: Vec<String>,
    /// The first call's JSON-RPC id (its resumed stream answers it).
    first_id: serde_json::Value,
}

/// An endpoint that plays the network between the client and a server: the first call's
/// stream is `first` (its progress events carry the call's token in place of `{token}`), cut
/// there; a resume from `own-priming` gets the answer, any other is refused 400 as a server
/// refuses a cursor it did not issue; later calls are answered at once.
async fn scripted(
    req: actix_web::HttpRequest,
    body: actix_web::web::Bytes,
    script: actix_web::web::Data<parking_lot::Mutex<Script>>,
) -> actix_web::HttpResponse {
    use actix_web::HttpResponse;
    let answer = |id: &serde_json::Value| json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text","text":"done"}]}});
    if req.method() == actix_web::http::Method::GET {
        let cursor = req.headers().get("last-event-id").and_then(|v| v.to_str().ok());
        let cursor = cursor.unwrap_or_default().to_owned();
        let mut s = script.lock();
        s.resumes.push(cursor.clone());
        if cursor != "own-priming" {
            return HttpResponse::BadRequest().finish();
        }
        let sse = format!("id: own-answer\ndata: {}\n\n", answer(&s.first_id));
        return HttpResponse::Ok().content_type("text/event-stream").body(sse);
    }
    if req.method() == actix_web::http::Method::DELETE {
        return HttpResponse::NoContent().finish();
    }
    let msg: serde_json::Value = serde_json::from_slice(&body).unwrap();
    match msg["method"].as_str().unwrap_or_default() {
        "initialize" => HttpResponse::Ok().insert_header(("Mcp-Session-Id", "scripted")).json(
            json!({"jsonrpc":"2.0","id":msg["id"],"result":{
                "protocolVersion":"2025-11-25","capabilities":{"tools":{}},
                "serverInfo":{"name":"scripted","version":"0"}}}),
        ),
        "tools/call" => {
            let mut s = script.lock();
            s.calls += 1;
            if s.calls > 1 {
                return HttpResponse::Ok().json(answer(&msg["id"]));
            }
            s.first_id = msg["id"].clone();
            let token = msg["params"]["_meta"]["progressToken"].to_string();
            let sse = s.first.replace("{token}", &token);
            HttpResponse::Ok().content_type("text/event-stream").body(sse)
        }
        _ => HttpResponse::Accepted().finish(),
    }
}

/// Run one idempotent progress call against [`scripted`] with `first` as its first stream:
/// its result, and the script's record.
async fn call_scripted(first: &str) -> (Result<serde_json::Value, ClientError>, Script) {
    let script = Script { first: first.to_owned(), ..Script::default() };
    let script = actix_web::web::Data::new(parking_lot::Mutex::new(script));
    let data = script.clone();
    let server = HttpServer::new(move || {
        App::new().app_data(data.clone()).default_service(actix_web::web::to(scripted))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .unwrap();
    let url = format!("http://{}/mcp", server.addrs()[0]);
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let c = connect(&url).await;
    let params = json!({"name":"progress","arguments":{},"_meta":{"progressToken":"mine"}});
    let r = c.request("tools/call", Some(params), true).await;
    handle.stop(false).await;
    let s = std::mem::take(&mut *script.lock());
    (r, s)
}

/// A progress notification of `token` (`{token}`: the call's own), as an SSE data line.
fn progress_line(token: &str) -> String {
    let note = json!({"jsonrpc":"2.0","method":"notifications/progress",
        "params":{"progressToken":"TOKEN","progress":1}});
    format!("data: {}\n\n", note.to_string().replace("\"TOKEN\"", token))
}

#[actix_web::test]
async fn a_plain_streams_events_never_take_an_injected_events_id_as_their_cursor() {
    // A stream that sends no ids (outside the resumable rollout) gets another session's event,
    // with its id, injected; then comes its own progress event, without one, and the cut.
    let first = format!(
        "id: another-sessions-cursor\n{}{}",
        progress_line("\"another-sessions\""),
        progress_line("{token}")
    );
    let (r, s) = call_scripted(&first).await;
    // Its own event inherited the injected one's id (WHATWG keeps the last id); taken as the
    // stream's cursor, a resume would send another session's cursor (a real server refuses it
    // with 400). With no id of its own, the stream cannot resume: the idempotent call is
    // issued again instead.
    assert_eq!(s.resumes, Vec::<String>::new(), "no resume from another session's cursor");
    assert_eq!(r.unwrap()["content"][0]["text"], "done");
    assert_eq!(s.calls, 2, "issued again");
}

#[actix_web::test]
async fn a_streams_own_priming_id_is_its_cursor_though_a_data_event_follows_in_the_same_read() {
    // The priming event and the first progress event (no id of its own) in one body, then the
    // cut: the stream resumes from its priming event's id.
    let first = format!("id: own-priming\ndata: \n\n{}", progress_line("{token}"));
    let (r, s) = call_scripted(&first).await;
    assert_eq!(s.resumes, ["own-priming"], "resumed from its own priming event");
    assert_eq!(r.unwrap()["content"][0]["text"], "done");
    assert_eq!(s.calls, 1, "answered on the resumed stream, not issued again");
}
