//! The `Server` facade over real sockets: it serves, and its graceful stop refuses what comes
//! during the drain, lets what runs finish, and resolves once drained with the clean mark.

use crate::common;

use std::time::Duration;

use common::{Gate, V, catalog, cfg, meta};
use mcp_runtime::Server;
use mcp_runtime::config::LedgerBackend;
use mcp_runtime::server::Marked;
use serde_json::{Value, json};

/// A 2026-07-28 `tools/call` of `tool` with `args` to `url`: status and JSON-RPC message.
async fn call(url: &str, tool: &str, args: Value) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta(json!({}))}});
    let mut r = awc::Client::new()
        .post(url)
        .insert_header(("Content-Type", "application/json"))
        .insert_header(("Accept", "application/json, text/event-stream"))
        .insert_header(("MCP-Protocol-Version", V))
        .insert_header(("Mcp-Method", "tools/call"))
        .insert_header(("Mcp-Name", tool))
        .timeout(Duration::from_secs(30))
        .send_body(body.to_string())
        .await
        .expect("the server answers");
    let bytes = r.body().await.expect("a body");
    let text = String::from_utf8_lossy(&bytes);
    // A JSON answer, or the last `data:` line of an SSE one.
    let json = text.lines().filter_map(|l| l.strip_prefix("data: ")).next_back().unwrap_or(&text);
    (r.status().as_u16(), serde_json::from_str(json).unwrap_or(Value::Null))
}

#[actix_web::test]
async fn shutdown_refuses_new_calls_lets_a_running_one_finish_and_resolves_once_drained() {
    let gate = Gate::default();
    let config = cfg(|c| c.ledger.backend = LedgerBackend::Memory);
    let running = Server::builder(catalog(gate.clone()))
        .config(config.validate().unwrap())
        .workers(1)
        .serve("127.0.0.1:0")
        .expect("serves");
    let url = format!("http://{}/mcp", running.addrs()[0]);
    let (status, echo) = call(&url, "echo", json!({"text": "hi"})).await;
    assert_eq!((status, &echo["result"]["content"][0]["text"]), (200, &json!("hi")), "{echo}");

    let running_call = actix_web::rt::spawn({
        let url = url.clone();
        async move { call(&url, "gated", json!({})).await }
    });
    gate.started(1).await;
    let stop = actix_web::rt::spawn(running.shutdown(Duration::from_secs(60)));
    // The drain has begun once a new call is refused; the running one is not done.
    let mut refused = None;
    for _ in 0..200 {
        let (status, body) = call(&url, "echo", json!({"text": "late"})).await;
        if status == 503 {
            refused = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = refused.expect("a call during the drain is refused with 503");
    assert!(refused["error"]["message"].as_str().unwrap_or_default().contains("shutting down"));
    assert!(!stop.is_finished(), "the stop waits for the running call");
    gate.open(1);
    let (status, answer) = running_call.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
    let stopped = stop.await.unwrap().expect("the HTTP server ran without error");
    assert!(stopped.drained, "the running call finished within the grace period");
    assert_eq!(stopped.marked, Marked::Clean);
}

#[actix_web::test]
async fn a_busy_port_is_refused_before_the_ledger_is_opened() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = mcp_devtools::TempDir::new("busy-port");
    let db = dir.path().join("l.db");
    let config = cfg(|c| c.ledger.path = db.display().to_string());
    let err = Server::builder(catalog(Gate::default()))
        .config(config.validate().unwrap())
        .serve(addr.clone())
        .expect_err("the port is taken");
    assert!(err.to_string().contains(&addr), "{err}");
    assert!(!db.exists(), "nothing was written: the ledger was never opened");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "no file beside it either");
}

#[actix_web::test]
async fn a_mounted_endpoint_serves_in_an_app_of_ones_own_and_stops_clean() {
    use actix_web::{App, test};
    let config = cfg(|c| c.ledger.backend = LedgerBackend::Memory);
    let mounted = Server::builder(catalog(Gate::default()))
        .config(config.validate().unwrap())
        .path("/api/mcp")
        .mount()
        .expect("mounts");
    let app = test::init_service(App::new().configure(mounted.configure())).await;
    let req = common::modern(1, "tools/call", json!({"name": "echo", "arguments": {"text": "m"}}))
        .uri("/api/mcp")
        .to_request();
    let answer: Value = test::call_and_read_body_json(&app, req).await;
    assert_eq!(answer["result"]["content"][0]["text"], "m", "{answer}");
    let stopped = mounted.shutdown(Duration::from_secs(5)).await;
    assert!(stopped.drained);
    assert_eq!(stopped.marked, Marked::Clean);
    let req = common::modern(2, "tools/call", json!({"name": "echo", "arguments": {"text": "m"}}))
        .uri("/api/mcp")
        .to_request();
    assert_eq!(test::call_service(&app, req).await.status(), 503, "stopped: refused");
}
