//! Session and request lifecycle: GET replacement, cancellation, in-flight ids,
//! server-to-client requests, expiry, DELETE and shutdown.

use crate::common;

use std::time::Duration;

use actix_web::http::StatusCode;
use common::*;
use mcp_runtime::actor::Phase;
use serde_json::json;

#[actix_web::test]
async fn second_get_replaces_the_first() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut first = c.open_get().await;
    first.chunk().await.expect("priming");
    let mut second = c.open_get().await;
    assert_eq!(second.status, StatusCode::OK, "a second GET is not refused with 409");
    second.chunk().await.expect("priming");
    assert!(first.event().await.is_none(), "the first GET stream is ended");
    // Unrelated traffic now goes to the second stream.
    let json_only = c.with_session(post()).insert_header(("Accept", "application/json"));
    let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chatty","arguments":{"n":1}}});
    h.send(json_only.set_payload(body.to_string())).await.json().await;
    assert_eq!(second.message().await["method"], "notifications/message");
}

#[actix_web::test]
async fn cancelled_request_produces_no_response() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(11, "gated", json!({})).await;
    assert_eq!(r.message().await["params"]["data"], "before");
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":11,"reason":"test"}});
    assert_eq!(c.notify(cancel).await, StatusCode::ACCEPTED);
    assert!(r.rest().await.is_empty(), "the stream ends without a response");
    h.gate.open(1);
    // The tool future was dropped: its permit stays unused and nothing else arrives.
    let resumed = c.resume(&r.last_event_id()).await.rest().await;
    assert!(resumed.iter().all(|m| m.get("id").is_none()), "no response after cancel: {resumed:?}");
    // The id is free again.
    let mut again = c.call_tool(11, "echo", json!({"text": "reuse"})).await;
    assert_eq!(text_of(&again.message().await), "reuse");
}

#[actix_web::test]
async fn cancelled_json_request_gets_no_response_body() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let json_only = c.with_session(post()).insert_header(("Accept", "application/json"));
    let body = json!({"jsonrpc":"2.0","id":"j","method":"tools/call","params":{"name":"gated","arguments":{}}});
    let pending = h.send(json_only.set_payload(body.to_string()));
    let cancel = c.notify(
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"j"}}),
    );
    let (mut r, status) = tokio::join!(pending, cancel);
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(r.status, StatusCode::ACCEPTED, "cancelled: 202 and no JSON-RPC response");
    assert!(r.chunk().await.is_none());
}

#[actix_web::test]
async fn request_id_in_flight_is_refused_at_once_and_original_is_undisturbed() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut original = c.call_tool(5, "gated", json!({})).await;
    assert_eq!(original.message().await["params"]["data"], "before");
    let mut dup = c.call_tool(5, "echo", json!({"text": "dup"})).await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    let e = dup.json().await;
    assert_eq!((e["id"].clone(), e["error"]["code"].clone()), (json!(5), json!(-32003)));
    // A string id "5" is a different id.
    let mut s = c.request(json!({"jsonrpc":"2.0","id":"5","method":"ping"})).await;
    assert_eq!(s.message().await["id"], "5");
    h.gate.open(1);
    assert_eq!(original.message().await["params"]["data"], "after");
    let resp = original.message().await;
    assert_eq!((text_of(&resp), &resp["id"]), ("done", &json!(5)));
}

#[actix_web::test]
async fn server_to_client_request_is_sent_on_the_request_stream_and_answer_routed_back() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "ask", json!({})).await;
    let req = r.message().await;
    assert_eq!(req["method"], "sampling/createMessage");
    let answer = json!({"jsonrpc":"2.0","id":req["id"],"result":{"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"}});
    assert_eq!(c.notify(answer).await, StatusCode::ACCEPTED);
    assert_eq!(text_of(&r.message().await), "client said hi");
}

#[actix_web::test]
async fn client_error_answer_fails_the_server_request() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "ask", json!({})).await;
    let req = r.message().await;
    let answer =
        json!({"jsonrpc":"2.0","id":req["id"],"error":{"code":-1,"message":"user declined"}});
    assert_eq!(c.notify(answer).await, StatusCode::ACCEPTED);
    let m = r.message().await;
    assert_eq!(m["error"]["message"], "user declined");
}

#[actix_web::test]
async fn expired_sessions_are_freed() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.idle_ttl_secs = 1)).await;
    let c = h.client("2025-11-25").await;
    assert_eq!(h.sup.session_count(), 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut r = c.request(json!({"jsonrpc":"2.0","id":1,"method":"ping"})).await;
    assert_eq!(r.message().await["result"], json!({}), "activity keeps the session");
    drop(r);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(h.sup.session_count(), 0, "deregistered on expiry");
    assert_eq!(
        c.request(json!({"jsonrpc":"2.0","id":2,"method":"ping"})).await.status,
        StatusCode::NOT_FOUND
    );
}

#[actix_web::test]
async fn attached_get_stream_keeps_an_idle_session_alive() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.idle_ttl_secs = 1)).await;
    let c = h.client("2025-11-25").await;
    let g = c.open_get().await;
    tokio::time::sleep(Duration::from_millis(5_000)).await;
    assert_eq!(h.sup.session_count(), 1);
    drop(g);
    tokio::time::sleep(Duration::from_millis(5_000)).await;
    assert_eq!(h.sup.session_count(), 0);
}

#[actix_web::test]
async fn delete_frees_the_session_and_ends_its_streams() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut g = c.open_get().await;
    g.chunk().await;
    let mut running = c.call_tool(1, "gated", json!({})).await;
    running.message().await;
    assert_eq!(c.delete().await.status, StatusCode::NO_CONTENT);
    assert!(g.event().await.is_none(), "GET stream ended");
    assert!(running.event().await.is_none(), "request stream ended");
    assert_eq!(h.sup.session_count(), 0);
}

#[actix_web::test]
async fn shutdown_stops_every_session_and_refuses_new_ones() {
    let h = harness().await;
    let a = h.client("2025-11-25").await;
    let _b = h.client("2025-06-18").await;
    let mut g = a.open_get().await;
    g.chunk().await;
    assert_eq!(h.sup.shutdown(), 2);
    assert_eq!(h.sup.phase(), Phase::Draining, "stopped only once the host saw every session stop");
    assert!(g.event().await.is_none());
    assert_eq!(h.sup.session_count(), 0);
    let r = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
}

#[actix_web::test]
async fn logging_level_filters_related_log_messages() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.request(json!({"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"warning"}})).await;
    assert_eq!(r.message().await["result"], json!({}));
    let msgs = c.call_tool(2, "chatty", json!({"n": 3})).await.rest().await;
    assert_eq!(msgs.len(), 1, "info messages filtered: {msgs:?}");
    let mut bad = c
        .request(
            json!({"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"loud"}}),
        )
        .await;
    assert_eq!(bad.message().await["error"]["code"], -32602);
}

#[actix_web::test]
async fn idle_stream_gets_keep_alive_comments() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sse.keepalive_ms = 1_000)).await;
    let c = h.client("2025-11-25").await;
    let mut g = c.open_get().await;
    g.chunk().await.expect("priming");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let chunk = g.chunk().await.expect("a keep-alive arrives on an idle stream");
    assert_eq!(&chunk[..], b": keep-alive\n\n");
    assert!(g.sse.comments >= 1);
}

/// A harness on a ledger the test also reads: a memory store, or a SQLite file in `dir`
/// (durable: a revive's new life is committed before it is served).
async fn harness_reading_the_ledger(
    dir: Option<&std::path::Path>,
    mut c: mcp_runtime::config::RuntimeConfig,
) -> (Harness, std::sync::Arc<mcp_runtime::ledger::Writer>) {
    let ledger = match dir {
        Some(dir) => {
            c.ledger.path = dir.join("l.db").display().to_string();
            c.security.cursor_secret_hex = Some("ab".repeat(16).into());
            mcp_runtime::ledger::Ledger::open(&c).unwrap()
        }
        None => {
            let store: std::sync::Arc<dyn mcp_runtime::ledger::Store> =
                std::sync::Arc::new(mcp_runtime::ledger::MemoryStore::new());
            mcp_runtime::ledger::Ledger::on_store(store, &c).unwrap()
        }
    };
    let writer = std::sync::Arc::clone(&ledger.writer);
    let h = harness_on(c, ledger).await;
    assert_eq!(h.sup.ledger_durable(), dir.is_some(), "SQLite commits a revive's life first");
    (h, writer)
}

async fn the_lru_index_holds_a_session_only_while_it_is_out_of_memory(
    dir: Option<&std::path::Path>,
) {
    let c = cfg(|c| c.sessions.park_after_secs = 1);
    let (h, writer) = harness_reading_the_ledger(dir, c).await;
    let indexed = || writer.store().index_len(mcp_runtime::ledger::codec::SESSIONS_LRU, 1).unwrap();
    let c = h.client("2025-11-25").await;
    writer.barrier().await.unwrap();
    assert_eq!(indexed(), 0, "a new session in memory writes no index row");
    until("the session parked", || {
        h.sup.stats_snapshot().sessions_parked >= 1 && h.sup.session_count() == 0
    })
    .await;
    writer.barrier().await.unwrap();
    assert_eq!(indexed(), 1, "parked: out of memory, the cap may evict it");
    let mut r = c.request(json!({"jsonrpc":"2.0","id":2,"method":"ping"})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json().await["id"], 2, "revived");
    // Its open stream keeps it in memory (a session with a connection never parks).
    let mut get = c.open_get().await;
    get.chunk().await.expect("priming");
    writer.barrier().await.unwrap();
    assert_eq!(indexed(), 0, "revived: in memory again, it leaves the index");
}

#[actix_web::test]
async fn the_ledgers_lru_index_holds_a_session_only_while_it_is_out_of_memory() {
    the_lru_index_holds_a_session_only_while_it_is_out_of_memory(None).await;
}

#[actix_web::test]
async fn a_sqlite_ledgers_lru_index_holds_a_session_only_while_it_is_out_of_memory() {
    let dir = mcp_devtools::TempDir::new("lru-sqlite");
    the_lru_index_holds_a_session_only_while_it_is_out_of_memory(Some(dir.path())).await;
}

/// A ledger that records two sessions, swept every second; sessions park after 1 s.
fn full_after_two() -> mcp_runtime::config::RuntimeConfig {
    cfg(|c| {
        c.ledger.max_sessions = 2;
        c.ledger.sweep_every_secs = 1;
        c.sessions.park_after_secs = 1;
    })
}

/// `n` sessions, each created after the one before parked: their last uses are in order.
async fn parked_in_turn(h: &Harness, n: u64) -> Vec<Client<'_>> {
    let mut clients = Vec::new();
    for made in 1..=n {
        clients.push(h.client("2025-11-25").await);
        until("the session parked", || {
            h.sup.stats_snapshot().sessions_parked >= made && h.sup.session_count() == 0
        })
        .await;
    }
    clients
}

#[actix_web::test]
async fn sessions_in_memory_count_toward_the_ledger_cap_and_are_never_evicted() {
    let h = harness_with(full_after_two()).await;
    let parked = parked_in_turn(&h, 2).await;
    // Two parked and one in memory (its open stream keeps it from parking): one too many.
    let live = h.client("2025-11-25").await;
    let mut get = live.open_get().await;
    get.chunk().await.expect("priming");
    until("the ledger evicted one", || h.sup.stats_snapshot().sessions_evicted_from_ledger >= 1)
        .await;
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    assert_eq!(
        parked[0].request(ping.clone()).await.status,
        StatusCode::NOT_FOUND,
        "the oldest parked"
    );
    for c in [&parked[1], &live] {
        let mut r = c.request(ping.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "the newer parked one and the one in memory stay");
        assert_eq!(r.json().await["id"], 9);
    }
    assert_eq!(h.sup.stats_snapshot().sessions_evicted_from_ledger, 1);
}

#[actix_web::test]
async fn a_full_ledger_evicts_the_least_recently_used_parked_session_and_its_id_answers_404() {
    let h = harness_with(full_after_two()).await;
    let clients = parked_in_turn(&h, 3).await;
    until("the ledger evicted one", || h.sup.stats_snapshot().sessions_evicted_from_ledger >= 1)
        .await;
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    assert_eq!(
        clients[0].request(ping.clone()).await.status,
        StatusCode::NOT_FOUND,
        "the least recently used is gone"
    );
    for c in &clients[1..] {
        let mut r = c.request(ping.clone()).await;
        assert_eq!(r.status, StatusCode::OK, "the newer ones are revived");
        assert_eq!(r.json().await["id"], 9);
    }
    assert_eq!(h.sup.stats_snapshot().sessions_evicted_from_ledger, 1);
}
