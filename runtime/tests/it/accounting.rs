//! Every session ends: connection accounting cannot drift on any exit path of a stream, a
//! server-to-client request has a deadline, and a session whose only activity is waiting on
//! an absent client expires. Each test ends by checking that the session and every stream
//! actor (with its timers) are gone.

use crate::common;

use std::time::Duration;

use actix_web::http::StatusCode;
use common::*;
use serde_json::json;

/// A 1 s idle TTL, and `f`.
fn short_ttl(
    f: impl FnOnce(&mut mcp_runtime::config::RuntimeConfig),
) -> mcp_runtime::config::RuntimeConfig {
    cfg(|c| {
        c.sessions.idle_ttl_secs = 1;
        f(c);
    })
}

/// After far more than the TTL, the session is gone and so is every stream actor.
async fn assert_everything_ends(h: &Harness, c: &Client<'_>) {
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(h.sup.session_count(), 0, "the session expired");
    assert_eq!(h.sup.stats_snapshot().streams, 0, "every stream actor stopped");
    assert_eq!(h.sup.stats_snapshot().stream_memory_bytes, 0, "every window released its budget");
    assert_eq!(
        c.request(json!({"jsonrpc":"2.0","id":99,"method":"ping"})).await.status,
        StatusCode::NOT_FOUND
    );
}

#[actix_web::test]
async fn replaced_get_stream_does_not_keep_its_session_alive() {
    tokio::time::pause();
    let h = harness_with(short_ttl(|_| {})).await;
    let c = h.client("2025-11-25").await;
    let mut first = c.open_get().await;
    first.chunk().await.expect("priming");
    let mut second = c.open_get().await;
    second.chunk().await.expect("priming");
    drop(first);
    drop(second);
    assert_everything_ends(&h, &c).await;
}

#[actix_web::test]
async fn stream_evicted_by_the_retention_bound_while_its_connection_is_open_does_not_keep_its_session_alive()
 {
    tokio::time::pause();
    let h = harness_with(short_ttl(|c| c.sessions.max_retained_streams = 1)).await;
    let c = h.client("2025-11-25").await;
    // Answered at once: each stream is closed from the start, its connection still open
    // (the test does not read the bodies).
    let a = c.call_tool(1, "echo", json!({"text": "a"})).await;
    let b = c.call_tool(2, "echo", json!({"text": "b"})).await;
    assert_eq!(
        h.sup.stats_snapshot().streams_evicted,
        1,
        "a was evicted under its open connection"
    );
    drop(a);
    drop(b);
    assert_everything_ends(&h, &c).await;
}

#[actix_web::test]
async fn retention_does_not_end_a_stream_under_a_resumed_connection_and_the_session_still_ends() {
    tokio::time::pause();
    let h = harness_with(short_ttl(|c| c.sessions.retention_after_delivery_ms = 1_000)).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "echo", json!({"text": "x"})).await;
    let cursor = {
        let msgs = r.rest().await;
        assert_eq!(text_of(&msgs[0]), "x");
        r.first_id()
    };
    drop(r);
    // The stream is closed and delivered: resumable for 1 s. A resume attaches a connection
    // that the client then leaves open without reading.
    let resumed = c.resume(&cursor).await;
    assert_eq!(resumed.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(h.sup.session_count(), 1, "an attached connection keeps the session");
    assert_eq!(
        h.sup.stats_snapshot().streams,
        1,
        "the retention did not stop the stream under its connection"
    );
    drop(resumed);
    assert_everything_ends(&h, &c).await;
}

#[actix_web::test]
async fn resumed_get_stream_that_is_then_replaced_does_not_keep_its_session_alive() {
    tokio::time::pause();
    let h = harness_with(short_ttl(|_| {})).await;
    let c = h.client("2025-11-25").await;
    let mut g = c.open_get().await;
    g.chunk().await.expect("priming");
    let cursor = g.first_id();
    drop(g.disconnect());
    let resumed = c.resume(&cursor).await;
    assert_eq!(resumed.status, StatusCode::OK);
    let mut newer = c.open_get().await;
    newer.chunk().await.expect("priming");
    drop(resumed);
    drop(newer);
    assert_everything_ends(&h, &c).await;
}

#[actix_web::test]
async fn an_attached_connection_still_keeps_its_session_and_its_end_starts_the_ttl() {
    tokio::time::pause();
    let h = harness_with(short_ttl(|_| {})).await;
    let c = h.client("2025-11-25").await;
    let g = c.open_get().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.sup.session_count(), 1);
    drop(g);
    assert_everything_ends(&h, &c).await;
}

#[actix_web::test]
async fn unanswered_client_request_fails_the_tool_with_a_timeout_and_tells_the_client() {
    tokio::time::pause();
    let h = harness_with(short_ttl(|c| c.sessions.client_request_timeout_secs = 2)).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "ask", json!({})).await;
    let asked = r.message().await;
    assert_eq!(asked["method"], "sampling/createMessage");
    // Nobody answers.
    let cancelled = r.message().await;
    assert_eq!(
        (cancelled["method"].clone(), cancelled["params"]["requestId"].clone()),
        (json!("notifications/cancelled"), asked["id"].clone())
    );
    let answer = r.message().await;
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (json!(1), json!(-32008)),
        "{answer}"
    );
    assert!(answer["error"]["message"].as_str().unwrap().contains("sampling/createMessage"));
    assert_eq!(h.sup.stats_snapshot().client_requests_timed_out, 1);
    // A late answer finds nothing and disturbs nothing.
    let late = json!({"jsonrpc":"2.0","id":asked["id"],"result":{"role":"assistant","content":{"type":"text","text":"late"},"model":"m"}});
    assert_eq!(c.notify(late).await, StatusCode::ACCEPTED);
    drop(r);
    assert_everything_ends(&h, &c).await;
}

#[actix_web::test]
async fn client_that_went_away_mid_question_does_not_keep_its_session_alive() {
    tokio::time::pause();
    let h = harness_with(short_ttl(|c| c.sessions.client_request_timeout_secs = 3)).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "ask", json!({})).await;
    assert_eq!(r.message().await["method"], "sampling/createMessage");
    drop(r.disconnect());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(h.sup.session_count(), 1, "the tool is still waiting within its deadline");
    assert_everything_ends(&h, &c).await;
}

#[actix_web::test]
async fn answered_client_request_is_not_timed_out_later() {
    tokio::time::pause();
    let h = harness_with(short_ttl(|c| c.sessions.client_request_timeout_secs = 2)).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "ask", json!({})).await;
    let req = r.message().await;
    let answer = json!({"jsonrpc":"2.0","id":req["id"],"result":{"role":"assistant","content":{"type":"text","text":"hi"},"model":"m"}});
    assert_eq!(c.notify(answer).await, StatusCode::ACCEPTED);
    assert_eq!(text_of(&r.message().await), "client said hi");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.sup.stats_snapshot().client_requests_timed_out, 0);
}
