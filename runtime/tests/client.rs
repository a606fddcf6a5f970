//! The resilient client's HTTP driver against the real endpoint on a loopback socket.

mod common;

use std::sync::Arc;

use actix_web::{App, HttpServer};
use mcp_runtime::actor::Supervisor;
use mcp_runtime::client::journal::MemoryJournal;
use mcp_runtime::client_http::{ClientConfig, ClientError, McpClient};
use mcp_runtime::config::RuntimeConfig;
use serde_json::json;

async fn serve(cfg: RuntimeConfig) -> (String, Arc<Supervisor>) {
    let sup = Supervisor::new(cfg, common::catalog(common::Gate::default()));
    let app_sup = Arc::clone(&sup);
    let server = HttpServer::new(move || App::new().configure(mcp_runtime::http::configure("/mcp", Arc::clone(&app_sup))))
        .workers(1)
        .disable_signals()
        .bind(("127.0.0.1", 0))
        .unwrap();
    let url = format!("http://{}/mcp", server.addrs()[0]);
    actix_rt::spawn(server.run());
    (url, sup)
}

fn fast() -> RuntimeConfig {
    RuntimeConfig { retry_ms: Some(20), ..RuntimeConfig::default() }
}

async fn connect(url: &str) -> McpClient {
    let mut cfg = ClientConfig::new(url);
    cfg.backoff.default_ms = 20;
    McpClient::connect(cfg, MemoryJournal::new(4096)).await.unwrap()
}

async fn delete_session(url: &str, sid: &str) {
    let r = awc::Client::default().delete(url).insert_header(("Mcp-Session-Id", sid)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 204);
}

#[actix_web::test]
async fn client_connects_lists_tools_and_calls_one() {
    let (url, _sup) = serve(fast()).await;
    let c = connect(&url).await;
    let tools = c.request("tools/list", None, true).await.unwrap();
    assert!(tools["tools"].as_array().unwrap().iter().any(|t| t["name"] == "echo"));
    let r = c.request("tools/call", Some(json!({"name":"echo","arguments":{"text":"hi"}})), false).await.unwrap();
    assert_eq!(r["content"][0]["text"], "hi");
    assert_eq!(c.stats().handshakes, 1);
}

#[actix_web::test]
async fn client_resumes_a_stream_the_server_closed_after_priming() {
    let (url, _sup) = serve(fast()).await;
    let c = connect(&url).await;
    let r = c.request("tools/call", Some(json!({"name":"poll","arguments":{}})), false).await.unwrap();
    assert_eq!(r["content"][0]["text"], "polled");
    assert!(c.stats().resumes >= 1, "{:?}", c.stats());
}

#[actix_web::test]
async fn related_notifications_are_accepted_once() {
    let (url, _sup) = serve(fast()).await;
    let c = connect(&url).await;
    c.request("tools/call", Some(json!({"name":"chatty","arguments":{"n":3}})), false).await.unwrap();
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
}

#[actix_web::test]
async fn non_idempotent_request_after_404_is_reported_lost_not_moved() {
    let (url, sup) = serve(fast()).await;
    let c = connect(&url).await;
    let old = c.session_id();
    delete_session(&url, &old).await;
    let r = c.request("tools/call", Some(json!({"name":"echo","arguments":{"text":"x"}})), false).await;
    assert!(matches!(r, Err(ClientError::Lost(..))), "{r:?}");
    assert_ne!(c.session_id(), old, "a new session exists for later calls");
    assert_eq!(sup.session_count(), 1);
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
    let r = c.request("tools/call", Some(json!({"name":"ask","arguments":{}})), false).await.unwrap();
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
