//! Fair shares of what requests hold (issue 19, item 6): one caller's 2026-07-28 requests
//! are bounded by `modern.max_in_flight_per_caller`, and `server/discover` and the lists
//! never take a place.

mod common;

use actix_web::http::StatusCode;
use actix_web::test::TestRequest;
use common::*;
use serde_json::{Value, json};

/// A modern request from bearer token `token`.
fn modern_as(token: &str, id: i64, method: &str, params: Value) -> TestRequest {
    modern(id, method, params).insert_header(("Authorization", format!("Bearer {token}")))
}

/// The refusal's status, JSON-RPC code, echoed id and `Retry-After`.
async fn refusal(mut r: Resp) -> (StatusCode, Value, Value, Option<String>) {
    let retry = r.header("retry-after");
    let body = r.json().await;
    (r.status, body["error"]["code"].clone(), body["id"].clone(), retry)
}

#[actix_web::test]
async fn one_caller_past_its_modern_share_gets_429_and_another_caller_still_gets_in() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.modern.max_in_flight = 4;
    }))
    .await;
    assert_eq!(h.sup.config().modern_share(), 2, "the default share is half the bound");
    // Alice holds her share: two calls that wait until they are cancelled.
    let mut held = Vec::new();
    for id in 1..=2 {
        let r = h.send(modern_as("ta", id, "tools/call", json!({"name": "until_cancelled", "arguments": {}}))).await;
        assert_eq!(r.status, StatusCode::OK);
        held.push(r);
    }
    h.gate.started(2).await;
    // Two places are still free, but not for her.
    let r = h.send(modern_as("ta", 3, "tools/call", json!({"name": "until_cancelled", "arguments": {}}))).await;
    assert_eq!(refusal(r).await, (StatusCode::TOO_MANY_REQUESTS, json!(-32007), json!(3), Some("1".into())));
    assert_eq!(h.sup.stats().refusals("quota.modern_in_flight"), 1);
    // Bob still gets in; a `tasks/*` request of alice's counts against her share too.
    let bob = h.send(modern_as("tb", 4, "tools/call", json!({"name": "until_cancelled", "arguments": {}}))).await;
    assert_eq!(bob.status, StatusCode::OK);
    h.gate.started(1).await;
    let r = h.send(modern_as("ta", 5, "tasks/get", json!({"taskId": "none"})).insert_header(("Mcp-Name", "none"))).await;
    assert_eq!(refusal(r).await.0, StatusCode::TOO_MANY_REQUESTS);
    // Her places come back when her calls end, and she gets in again.
    for r in held {
        drop(r.disconnect());
    }
    drop(bob.disconnect());
    until("every place is given back", || h.sup.stats().modern().0 == 0).await;
    let mut r = h.send(modern_as("ta", 6, "tools/call", json!({"name": "echo", "arguments": {"text": "again"}}))).await;
    assert_eq!(text_of(&r.json().await), "again");
}

#[actix_web::test]
async fn discover_and_lists_are_answered_without_a_place_when_every_place_is_taken() {
    let h = harness_with(cfg(|c| c.modern.max_in_flight = 1)).await;
    let held = h.send(modern(1, "tools/call", json!({"name": "until_cancelled", "arguments": {}}))).await;
    assert_eq!(held.status, StatusCode::OK);
    h.gate.started(1).await;
    assert_eq!(h.sup.stats().modern().0, 1, "the one place is taken");
    let mut id = 10;
    for method in ["server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list"] {
        id += 1;
        let mut r = h.send(modern(id, method, json!({}))).await;
        assert_eq!(r.status, StatusCode::OK, "{method}");
        let body = r.json().await;
        assert!(body.get("result").is_some(), "{method}: {body}");
    }
    // A page of a list (a cursor) is answered at once too, with what the cursor deserves.
    let mut r = h.send(modern(20, "tools/list", json!({"cursor": "not-a-cursor"}))).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json().await["id"], 20);
    // Anything that may wait still needs the place.
    let r = h.send(modern(21, "tools/call", json!({"name": "echo", "arguments": {"text": "x"}}))).await;
    assert_eq!(refusal(r).await, (StatusCode::SERVICE_UNAVAILABLE, json!(-32006), json!(21), Some("1".into())));
    assert_eq!(h.sup.stats().modern().0, 1, "the answers at once took no place");
    drop(held.disconnect());
    until("the held place is given back", || h.sup.stats().modern().0 == 0).await;
}
