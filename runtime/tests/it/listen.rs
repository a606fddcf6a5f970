//! `subscriptions/listen` (2026-07-28): the acknowledgement first with the honoured filter,
//! the subscription id on every notification, only opted-in notifications, several
//! subscriptions at once, the graceful completion on a drain, and the bounds on how many are
//! open.

use crate::common;

use actix_web::http::StatusCode;
use common::*;
use serde_json::{Value, json};

const SUB_ID: &str = "io.modelcontextprotocol/subscriptionId";

fn listen(id: impl Into<Value>, filter: Value) -> actix_web::test::TestRequest {
    modern(id, "subscriptions/listen", json!({"notifications": filter, "_meta": meta(json!({}))}))
}

/// Run a trigger tool as a modern request; its text says whether it was announced.
async fn trigger(h: &Harness, name: &str, args: Value) {
    let mut r = h.send(modern(900, "tools/call", json!({"name": name, "arguments": args}))).await;
    assert_eq!(text_of(&r.json().await), "true", "{name} announced its change");
}

#[actix_web::test]
async fn the_acknowledgement_comes_first_and_only_opted_in_notifications_follow_each_tagged() {
    let h = harness().await;
    let filter = json!({"toolsListChanged": true, "resourcesListChanged": true, "resourceSubscriptions": ["test://doc", "test://unknown"]});
    let mut r = h.send(listen(1_790_000_000_000_i64, filter)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.content_type().starts_with("text/event-stream"));
    assert!(r.header("mcp-session-id").is_none());
    let ack = r.message().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(
        ack["params"]["_meta"][SUB_ID],
        json!(1_790_000_000_000_i64),
        "the listen id, a number as sent"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["test://doc"]}),
        "the honoured subset: resources list changes are not offered, the unknown URI is dropped"
    );
    trigger(&h, "change_tools", json!({})).await;
    let tools = r.message().await;
    assert_eq!(tools["method"], "notifications/tools/list_changed");
    assert_eq!(tools["params"]["_meta"][SUB_ID], json!(1_790_000_000_000_i64));
    // Not opted into: a prompts change and another resource. Then one it asked for: it is the
    // next frame, so the two before were never sent.
    trigger(&h, "change_prompts", json!({})).await;
    trigger(&h, "touch", json!({"uri": "test://other"})).await;
    trigger(&h, "touch", json!({"uri": "test://doc"})).await;
    let updated = r.message().await;
    assert_eq!(updated["method"], "notifications/resources/updated", "{updated}");
    assert_eq!(updated["params"]["uri"], "test://doc");
    assert_eq!(updated["params"]["_meta"][SUB_ID], json!(1_790_000_000_000_i64));
    assert_eq!(h.sup.stats().listen().0, 1);
    assert_eq!(
        h.sup.stats().modern().0,
        0,
        "a listen stream is not a request in flight (a drain does not wait for it)"
    );
}

#[actix_web::test]
async fn several_subscriptions_each_get_their_own_changes_under_their_own_id() {
    let h = harness().await;
    let mut tools = h.send(listen("tools-sub", json!({"toolsListChanged": true}))).await;
    let mut prompts = h.send(listen(2, json!({"promptsListChanged": true}))).await;
    assert_eq!(tools.message().await["params"]["_meta"][SUB_ID], "tools-sub");
    assert_eq!(prompts.message().await["params"]["_meta"][SUB_ID], 2);
    trigger(&h, "change_prompts", json!({})).await;
    trigger(&h, "change_tools", json!({})).await;
    let t = tools.message().await;
    assert_eq!(
        (t["method"].as_str(), &t["params"]["_meta"][SUB_ID]),
        (Some("notifications/tools/list_changed"), &json!("tools-sub"))
    );
    let p = prompts.message().await;
    assert_eq!(
        (p["method"].as_str(), &p["params"]["_meta"][SUB_ID]),
        (Some("notifications/prompts/list_changed"), &json!(2))
    );
    assert_eq!(h.sup.stats().listen().0, 2);
}

#[actix_web::test]
async fn list_changes_a_subscriber_has_not_been_told_of_yet_coalesce() {
    let h = harness().await;
    let mut r = h.send(listen(1, json!({"toolsListChanged": true}))).await;
    let _ack = r.message().await;
    // Three changes before the stream's task runs again: one notification.
    let changes = h.sup.catalog().changes();
    for _ in 0..3 {
        assert!(changes.list_changed(mcp_runtime::tools::ListKind::Tools));
    }
    h.sup.begin_drain();
    let rest = r.rest().await;
    let methods: Vec<&str> =
        rest.iter().map(|m| m["method"].as_str().unwrap_or("(result)")).collect();
    assert_eq!(methods, ["notifications/tools/list_changed", "(result)"]);
}

#[actix_web::test]
async fn a_drain_ends_every_listen_stream_with_its_completion_result() {
    let h = harness().await;
    let mut a = h.send(listen("a", json!({"toolsListChanged": true}))).await;
    let mut b = h.send(listen(7, json!({}))).await;
    let _ = (a.message().await, b.message().await);
    h.sup.begin_drain();
    for (r, id) in [(&mut a, json!("a")), (&mut b, json!(7))] {
        let rest = r.rest().await;
        assert_eq!(rest.len(), 1, "the completion, then the end of the stream: {rest:?}");
        assert_eq!(rest[0]["id"], id);
        assert_eq!(rest[0]["result"]["resultType"], "complete");
        assert_eq!(rest[0]["result"]["_meta"][SUB_ID], id);
        assert_eq!(
            rest[0]["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "test"
        );
    }
    until("both listen places given back and counted completed", || {
        h.sup.stats().listen() == (0, 2, 2)
    })
    .await;
    // While draining, a new one is refused (with its id).
    let mut r = h.send(listen(9, json!({}))).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.json().await["id"], 9);
}

#[actix_web::test]
async fn closing_a_listen_stream_gives_its_place_back_and_the_caps_refuse_with_the_id() {
    let h = harness_with(cfg(|c| {
        c.modern.listen_per_caller = 1;
        c.modern.listen_max = 2;
    }))
    .await;
    let mut first = h.send(listen(1, json!({}))).await;
    let _ack = first.message().await;
    let mut over = h.send(listen(2, json!({}))).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS, "one per caller");
    assert_eq!(over.header("retry-after").as_deref(), Some("1"));
    let body = over.json().await;
    assert_eq!(body["id"], 2, "{body}");
    drop(first.disconnect());
    until("the closed stream's place is given back", || h.sup.stats().listen().0 == 0).await;
    let mut again = h.send(listen(3, json!({}))).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.message().await["method"], "notifications/subscriptions/acknowledged");
    // Server-wide: with the caller's place free but every place taken, 503.
    let h = harness_with(cfg(|c| {
        c.modern.listen_per_caller = 4;
        c.modern.listen_max = 1;
    }))
    .await;
    let mut one = h.send(listen(1, json!({}))).await;
    let _ack = one.message().await;
    let mut r = h.send(listen(2, json!({}))).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.json().await["id"], 2);
}

#[actix_web::test]
async fn a_malformed_filter_or_a_json_only_client_is_refused_with_the_id() {
    let h = harness().await;
    for (i, params) in [
        json!({}),
        json!({"notifications": {"toolsListChanged": "yes"}}),
        json!({"notifications": {"resourceSubscriptions": "test://doc"}}),
    ]
    .into_iter()
    .enumerate()
    {
        let mut p = params;
        p["_meta"] = meta(json!({}));
        let mut r = h.send(modern(i as i64, "subscriptions/listen", p)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        let body = r.json().await;
        assert_eq!(
            (body["error"]["code"].as_i64(), body["id"].as_i64()),
            (Some(-32602), Some(i as i64)),
            "{body}"
        );
    }
    let json_only = listen(5, json!({})).insert_header(("Accept", "application/json"));
    let mut r = h.send(json_only).await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(r.json().await["id"], 5);
    assert_eq!(h.sup.stats().listen(), (0, 0, 0), "nothing was opened");
}
