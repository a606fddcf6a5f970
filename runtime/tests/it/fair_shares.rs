//! Fair shares of what requests hold (issue 19, item 6): one caller's 2026-07-28 requests
//! are bounded by `modern.max_in_flight_per_caller`, `server/discover` and the lists never
//! take a place, and the parsed bodies requests hold in flight are charged to
//! `limits.request_memory_bytes` in both eras and given back when they end.

use crate::common;

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
        let r = h
            .send(modern_as(
                "ta",
                id,
                "tools/call",
                json!({"name": "until_cancelled", "arguments": {}}),
            ))
            .await;
        assert_eq!(r.status, StatusCode::OK);
        held.push(r);
    }
    h.gate.started(2).await;
    // Two places are still free, but not for her.
    let r = h
        .send(modern_as("ta", 3, "tools/call", json!({"name": "until_cancelled", "arguments": {}})))
        .await;
    assert_eq!(
        refusal(r).await,
        (StatusCode::TOO_MANY_REQUESTS, json!(-32007), json!(3), Some("1".into()))
    );
    assert_eq!(h.sup.stats().refusals("quota.modern_in_flight"), 1);
    // Bob still gets in; a `tasks/*` request of alice's counts against her share too.
    let bob = h
        .send(modern_as("tb", 4, "tools/call", json!({"name": "until_cancelled", "arguments": {}})))
        .await;
    assert_eq!(bob.status, StatusCode::OK);
    h.gate.started(1).await;
    let r = h
        .send(
            modern_as("ta", 5, "tasks/get", json!({"taskId": "none"}))
                .insert_header(("Mcp-Name", "none")),
        )
        .await;
    assert_eq!(refusal(r).await.0, StatusCode::TOO_MANY_REQUESTS);
    // Her places come back when her calls end, and she gets in again.
    for r in held {
        drop(r.disconnect());
    }
    drop(bob.disconnect());
    until("every place is given back", || h.sup.stats().modern().0 == 0).await;
    let mut r = h
        .send(modern_as(
            "ta",
            6,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "again"}}),
        ))
        .await;
    assert_eq!(text_of(&r.json().await), "again");
}

#[actix_web::test]
async fn discover_and_lists_are_answered_without_a_place_when_every_place_is_taken() {
    let h = harness_with(cfg(|c| c.modern.max_in_flight = 1)).await;
    let held =
        h.send(modern(1, "tools/call", json!({"name": "until_cancelled", "arguments": {}}))).await;
    assert_eq!(held.status, StatusCode::OK);
    h.gate.started(1).await;
    assert_eq!(h.sup.stats().modern().0, 1, "the one place is taken");
    let mut id = 10;
    for method in [
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    ] {
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
    let r =
        h.send(modern(21, "tools/call", json!({"name": "echo", "arguments": {"text": "x"}}))).await;
    assert_eq!(
        refusal(r).await,
        (StatusCode::SERVICE_UNAVAILABLE, json!(-32006), json!(21), Some("1".into()))
    );
    assert_eq!(h.sup.stats().modern().0, 1, "the answers at once took no place");
    drop(held.disconnect());
    until("the held place is given back", || h.sup.stats().modern().0 == 0).await;
}

/// A call of `until_cancelled` whose arguments carry `pad` bytes (held until cancelled).
fn pinned_args(pad: usize) -> Value {
    json!({"name": "until_cancelled", "arguments": {"pad": "x".repeat(pad)}})
}

#[actix_web::test]
async fn requests_holding_their_arguments_past_the_request_memory_budget_get_503_and_the_budget_returns_to_zero()
 {
    const BUDGET: usize = 1 << 20;
    let h = harness_with(cfg(|c| c.limits.request_memory_bytes = BUDGET)).await;
    let used = || h.sup.stats().request_memory_bytes();
    // Initialize holds nothing after its answer.
    let c = h.client("2025-11-25").await;
    assert_eq!(used(), 0);

    // 2026-07-28: calls whose arguments are held while they wait, until the budget is full.
    let first = h.send(modern(1, "tools/call", pinned_args(300_000))).await;
    assert_eq!(first.status, StatusCode::OK);
    let each = used();
    assert!(each > 300_000 && each < 310_000, "charged about the parsed arguments: {each}");
    let fit = BUDGET / each;
    let mut held = vec![first];
    for id in 2..=fit as i64 {
        let r = h.send(modern(id, "tools/call", pinned_args(300_000))).await;
        assert_eq!(r.status, StatusCode::OK);
        held.push(r);
    }
    h.gate.started(fit as u32).await;
    assert_eq!(used(), fit * each);
    let r = h.send(modern(9, "tools/call", pinned_args(300_000))).await;
    assert_eq!(
        refusal(r).await,
        (StatusCode::SERVICE_UNAVAILABLE, json!(-32006), json!(9), Some("1".into()))
    );
    // A legacy request of the same size is refused too, before its session sees it.
    let mut r = c.call_tool(10, "until_cancelled", pinned_args(300_000)["arguments"].clone()).await;
    assert_eq!(
        (r.status, r.json().await["error"]["code"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!(-32006))
    );
    assert_eq!(h.sup.stats().refusals("overloaded.request_memory"), 2);
    for r in held {
        drop(r.disconnect());
    }
    until("the modern requests' charges are given back", || used() == 0).await;

    // Legacy: the charge travels with the request into its session and ends with it.
    let mut streams = Vec::new();
    for id in 0..fit as i64 {
        let r = c
            .call_tool(20 + id, "until_cancelled", pinned_args(300_000)["arguments"].clone())
            .await;
        assert_eq!(r.status, StatusCode::OK);
        streams.push(r);
    }
    h.gate.started(fit as u32).await;
    let legacy_each = used() / fit;
    assert!(legacy_each > 300_000 && legacy_each < 310_000, "{legacy_each}");
    let mut r = c.call_tool(30, "until_cancelled", pinned_args(300_000)["arguments"].clone()).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.json().await["error"]["code"], -32006);
    // Notifications are never refused for it (a cancellation gives memory back).
    for id in 0..fit as i64 {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 20 + id}});
        assert_eq!(c.notify(cancel).await, StatusCode::ACCEPTED);
    }
    until("the legacy requests' charges are given back", || used() == 0).await;
    drop(streams);
    // A request answered at once holds nothing once answered, in both eras.
    let mut r = c.call_tool(40, "echo", json!({"text": "small"})).await;
    assert_eq!(text_of(&r.json().await), "small");
    let mut r = h
        .send(modern(41, "tools/call", json!({"name": "echo", "arguments": {"text": "small"}})))
        .await;
    assert_eq!(text_of(&r.json().await), "small");
    assert_eq!(used(), 0);
}

#[actix_web::test]
async fn a_batchs_requests_share_its_charge_and_give_it_back_as_each_ends() {
    let h = harness_with(cfg(|c| c.limits.request_memory_bytes = 1 << 20)).await;
    let c = h.client("2025-03-26").await;
    let call = |id: i64, name: &str| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {"pad": "x".repeat(100_000)}}});
    let batch = json!([call(1, "gated"), call(2, "gated"), {"jsonrpc": "2.0", "method": "notifications/initialized"}]);
    let req = c
        .with_session(post().insert_header(("Accept", "application/json")))
        .set_payload(batch.to_string());
    let answer = async { h.send(req).await.json().await };
    let release = async {
        h.gate.started(2).await;
        let held = h.sup.stats().request_memory_bytes();
        assert!(held > 200_000, "the two requests hold the batch's charge between them: {held}");
        h.gate.open(1);
        h.gate.finished(1).await;
        let one = h.sup.stats().request_memory_bytes();
        assert!(
            one > 0 && one <= held / 2 + 1,
            "the one that ended gave its part back: {one} of {held}"
        );
        h.gate.open(1);
    };
    let (answers, ()) = tokio::join!(answer, release);
    assert_eq!(answers.as_array().map(Vec::len), Some(2), "{answers}");
    assert_eq!(h.sup.stats().request_memory_bytes(), 0);
}
