//! Resumption: exactly the missed events of that stream, nothing else; cursors bound to
//! stream, session and caller; deterministic answers for unresumable cursors.

use crate::common;

use actix_web::http::StatusCode;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::*;
use serde_json::{Value, json};

fn log_data(m: &Value) -> Value {
    assert_eq!(m["method"], "notifications/message", "expected a log message, got {m}");
    m["params"]["data"].clone()
}

#[actix_web::test]
async fn resume_replays_exactly_the_missed_events_of_that_stream() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut a = c.call_tool(1, "gated", json!({})).await;
    let mut b = c.call_tool(2, "gated", json!({})).await;
    assert_eq!(log_data(&a.message().await), "before");
    assert_eq!(log_data(&b.message().await), "before");
    let cursor = a.last_event_id();
    drop(a.disconnect());
    h.gate.open(2);
    h.gate.finished(2).await;
    // Stream B carries its own events only.
    assert_eq!(log_data(&b.message().await), "after");
    let b_resp = b.message().await;
    assert_eq!((text_of(&b_resp), &b_resp["id"]), ("done", &json!(2)));
    assert!(b.event().await.is_none());
    let mut resumed = c.resume(&cursor).await;
    assert_eq!(resumed.status, StatusCode::OK);
    let msgs = resumed.rest().await;
    assert_eq!(msgs.len(), 2, "exactly the missed events: {msgs:?}");
    assert_eq!(log_data(&msgs[0]), "after");
    assert_eq!(msgs[1]["id"], 1, "only this stream's response");
    assert_eq!(text_of(&msgs[1]), "done");
}

#[actix_web::test]
async fn response_produced_while_disconnected_is_delivered_on_resume() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(7, "gated", json!({})).await;
    r.chunk().await.expect("priming event");
    let cursor = r.last_event_id();
    drop(r.disconnect());
    h.gate.open(1);
    h.gate.finished(1).await;
    let msgs = c.resume(&cursor).await.rest().await;
    assert_eq!(msgs.iter().map(|m| m.get("id").cloned()).filter(Option::is_some).count(), 1);
    assert_eq!(text_of(msgs.last().unwrap()), "done");
    assert_eq!(msgs.last().unwrap()["id"], 7);
}

#[actix_web::test]
async fn resumed_stream_continues_live() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "gated", json!({})).await;
    assert_eq!(log_data(&r.message().await), "before");
    let cursor = r.last_event_id();
    drop(r.disconnect());
    let mut resumed = c.resume(&cursor).await;
    h.gate.open(1);
    assert_eq!(log_data(&resumed.message().await), "after");
    assert_eq!(text_of(&resumed.message().await), "done");
    assert!(resumed.event().await.is_none(), "stream ends after the response");
}

#[actix_web::test]
async fn resuming_another_streams_cursor_replays_only_that_stream() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut a = c.call_tool(1, "echo", json!({"text": "A"})).await;
    let mut b = c.call_tool(2, "echo", json!({"text": "B"})).await;
    a.chunk().await;
    let a_start = a.first_id();
    assert_eq!(text_of(&b.message().await), "B");
    let msgs = c.resume(&a_start).await.rest().await;
    assert_eq!(msgs.len(), 1);
    assert_eq!(
        text_of(&msgs[0]),
        "A",
        "a cursor names its own stream; replay never crosses streams"
    );
}

/// Call `gated`, drop the connection after the priming event, let the tool finish; returns
/// the priming cursor.
async fn finish_while_disconnected(h: &Harness, c: &Client<'_>) -> String {
    let mut r = c.call_tool(1, "gated", json!({})).await;
    r.chunk().await.expect("priming");
    let cursor = r.first_id();
    drop(r.disconnect());
    h.gate.open(1);
    h.gate.finished(1).await;
    cursor
}

fn flip_stream_byte(cursor: &str) -> String {
    let mut raw = URL_SAFE_NO_PAD.decode(cursor).unwrap();
    raw[11] ^= 1; // low byte of the stream id
    URL_SAFE_NO_PAD.encode(raw)
}

#[actix_web::test]
async fn cursor_with_altered_stream_is_rejected() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut a = c.call_tool(1, "echo", json!({"text": "A"})).await;
    a.chunk().await;
    let forged = flip_stream_byte(&a.last_event_id());
    assert_refused(c.resume(&forged).await, StatusCode::BAD_REQUEST, -32004).await;
}

#[actix_web::test]
async fn cursor_from_another_session_is_rejected() {
    let h = harness().await;
    let c1 = h.client("2025-11-25").await;
    let c2 = h.client("2025-11-25").await;
    let mut a = c1.call_tool(1, "echo", json!({"text": "secret"})).await;
    a.chunk().await;
    assert_refused(c2.resume(&a.last_event_id()).await, StatusCode::BAD_REQUEST, -32004).await;
}

#[actix_web::test]
async fn cursor_from_another_caller_is_rejected() {
    let h = harness_with_two_callers().await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    let bob = h.client_as("2025-11-25", Some("tb")).await;
    let mut a = alice.call_tool(1, "echo", json!({"text": "secret"})).await;
    a.chunk().await;
    let cursor = a.last_event_id();
    assert_eq!(bob.resume(&cursor).await.status, StatusCode::BAD_REQUEST);
    // Bob presenting Alice's session id as well: the session is not his.
    let stolen = bob
        .with_session(get())
        .insert_header(("Mcp-Session-Id", alice.sid.clone()))
        .insert_header(("Last-Event-ID", cursor));
    assert_eq!(h.send(stolen).await.status, StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn malformed_cursor_is_400_with_jsonrpc_error() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    for bad in ["0", "garbage", "_GET_stream_1", &"A".repeat(43)] {
        assert_refused(c.resume(bad).await, StatusCode::BAD_REQUEST, -32004).await;
    }
}

#[actix_web::test]
async fn cursor_older_than_post_window_answers_the_request_with_events_lost() {
    let h = harness_with(cfg(|c| c.sse.replay_max_events = 4)).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(9, "chatty", json!({"n": 10})).await;
    r.chunk().await.expect("priming");
    let start = r.last_event_id();
    let all = r.rest().await;
    assert_eq!(all.len(), 11, "10 logs + response on the live connection");
    let mut resumed = c.resume(&start).await;
    assert_eq!(resumed.status, StatusCode::OK);
    let msgs = resumed.rest().await;
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert_eq!(msgs[0]["id"], 9);
    assert_eq!(msgs[0]["error"]["code"], -32005);
}

#[actix_web::test]
async fn resume_into_an_events_lost_gap_ends_the_request_and_frees_its_id() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| {
        c.sse.replay_max_events = 4;
        c.sessions.idle_ttl_secs = 1;
    }))
    .await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(9, "flood_then_wait", json!({"n": 10})).await;
    r.chunk().await.expect("priming");
    let start = r.first_id();
    drop(r.disconnect());
    h.gate.open(1);
    h.gate.finished(1).await;
    let mut resumed = c.resume(&start).await;
    assert_eq!(resumed.status, StatusCode::OK);
    let msgs = resumed.rest().await;
    assert_eq!(
        (msgs.len(), msgs[0]["id"].clone(), msgs[0]["error"]["code"].clone()),
        (1, json!(9), json!(-32005)),
        "{msgs:?}"
    );
    // The request ended with its answer: the tool was cancelled and its id is free.
    h.gate.dropped(1).await;
    let mut again = c.call_tool(9, "echo", json!({"text": "retry"})).await;
    assert_eq!(again.status, StatusCode::OK, "the same id is not 409 after its events-lost answer");
    assert_eq!(text_of(&again.message().await), "retry");
    assert_eq!(h.sup.stats_snapshot().requests_ended_by_gap, 1);
    drop((resumed, again));
    tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    assert_eq!(
        h.sup.session_count(),
        0,
        "with nothing in flight the session goes idle and expires"
    );
}

#[actix_web::test]
async fn cursor_older_than_get_window_is_410_with_jsonrpc_error() {
    let h = harness_with(cfg(|c| c.sse.replay_max_events = 4)).await;
    let c = h.client("2025-11-25").await;
    let mut g = c.open_get().await;
    g.chunk().await.expect("priming");
    let start = g.last_event_id();
    drop(g.disconnect());
    // A request answered as JSON sends its log messages on the GET stream.
    let json_only = c.with_session(post()).insert_header(("Accept", "application/json"));
    let body = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"chatty","arguments":{"n":10}}});
    let mut r = h.send(json_only.set_payload(body.to_string())).await;
    assert_eq!(text_of(&r.json().await), "chatty done");
    assert_refused(c.resume(&start).await, StatusCode::GONE, -32005).await;
}

#[actix_web::test]
async fn resume_of_a_finished_stream_replays_it_and_ends() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "echo", json!({"text": "x"})).await;
    assert_eq!(r.rest().await.len(), 1);
    let start = r.first_id();
    let again = c.resume(&start).await.rest().await;
    assert_eq!(again.len(), 1);
    assert_eq!(text_of(&again[0]), "x");
}

#[actix_web::test]
async fn priming_is_decided_by_the_sessions_version_not_the_header() {
    let h = harness().await;
    let new = h.client("2025-11-25").await;
    let old_header = new.with_session(post()).insert_header(("MCP-Protocol-Version", "2025-03-26"));
    let body = json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string();
    let mut r = h.send(old_header.set_payload(body)).await;
    let first = r.chunk().await.unwrap();
    let text = String::from_utf8_lossy(&first);
    let priming_end = text.find("data: \n\n").expect("a priming event");
    assert!(
        text.starts_with("id: ") && !text[..priming_end].contains("\"result\""),
        "priming first: {text:?}"
    );
    assert_eq!(r.sse.retry_ms, Some(1000));
    let old = h.client("2025-06-18").await;
    let mut r = old.request(json!({"jsonrpc":"2.0","id":1,"method":"ping"})).await;
    let first = r.chunk().await.unwrap();
    assert!(
        first.windows(8).any(|w| w == b"\"result\""),
        "no priming before 2025-11-25: {first:?}"
    );
}

#[actix_web::test]
async fn polling_close_sends_retry_then_resume_gets_the_response() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(4, "poll", json!({})).await;
    assert!(r.rest().await.is_empty(), "stream closed before the response");
    assert_eq!(r.sse.retry_ms, Some(1000));
    let msgs = c.resume(&r.last_event_id()).await.rest().await;
    assert_eq!(text_of(&msgs[0]), "polled");
}

#[actix_web::test]
async fn slow_reader_is_detached_without_blocking_the_session_and_loses_nothing() {
    let h = harness_with(cfg(|c| c.sse.write_queue_frames = 2)).await;
    let c = h.client("2025-11-25").await;
    let mut slow = c.call_tool(1, "chatty", json!({"n": 50})).await;
    // Not reading `slow` at all; the session still answers at once.
    let mut ping = c.request(json!({"jsonrpc":"2.0","id":2,"method":"ping"})).await;
    assert_eq!(ping.message().await["result"], json!({}));
    let mut got = slow.rest().await;
    assert!(got.len() < 51, "the slow connection was cut ({} events)", got.len());
    let rest = c.resume(&slow.last_event_id()).await.rest().await;
    got.extend(rest);
    assert_eq!(got.len(), 51, "nothing lost, nothing duplicated");
    for (i, m) in got.iter().take(50).enumerate() {
        assert_eq!(m["params"]["data"], i, "in order");
    }
    assert_eq!(text_of(&got[50]), "chatty done");
}

#[actix_web::test]
async fn stream_past_its_retention_is_410() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.retention_after_delivery_ms = 1_000)).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "echo", json!({"text": "x"})).await;
    assert_eq!(r.rest().await.len(), 1);
    let start = r.first_id();
    drop(r);
    assert_eq!(c.resume(&start).await.rest().await.len(), 1, "still retained right after delivery");
    tokio::time::sleep(std::time::Duration::from_millis(3_000)).await;
    assert_refused(c.resume(&start).await, StatusCode::GONE, -32005).await;
}

#[actix_web::test]
async fn stream_evicted_by_the_retention_bound_is_410() {
    let h = harness_with(cfg(|c| c.sessions.max_retained_streams = 1)).await;
    let c = h.client("2025-11-25").await;
    let mut first = c.call_tool(1, "echo", json!({"text": "1"})).await;
    assert_eq!(first.rest().await.len(), 1);
    let start = first.first_id();
    assert_eq!(c.call_tool(2, "echo", json!({"text": "2"})).await.rest().await.len(), 1);
    assert_eq!(c.call_tool(3, "echo", json!({"text": "3"})).await.rest().await.len(), 1);
    assert_eq!(c.resume(&start).await.status, StatusCode::GONE);
}

#[actix_web::test]
async fn response_finished_while_disconnected_is_kept_for_the_undelivered_retention_then_released()
{
    tokio::time::pause();
    let cfg = cfg(|c| {
        c.sessions.retention_undelivered_ms = 5_000;
        c.sessions.retention_after_delivery_ms = 1_000;
    });
    let h = harness_with(cfg).await;
    let c = h.client("2025-11-25").await;
    let cursor = finish_while_disconnected(&h, &c).await;
    tokio::time::sleep(std::time::Duration::from_millis(3_000)).await;
    let msgs = c.resume(&cursor).await.rest().await;
    assert_eq!(
        text_of(msgs.last().unwrap()),
        "done",
        "still retained after 3 s (undelivered retention is 5 s)"
    );
    // Delivered now: the short retention applies from here.
    tokio::time::sleep(std::time::Duration::from_millis(2_000)).await;
    assert_eq!(
        c.resume(&cursor).await.status,
        StatusCode::GONE,
        "released after delivery + retention"
    );
}

#[actix_web::test]
async fn undelivered_response_is_released_after_its_retention_when_nobody_resumes() {
    tokio::time::pause();
    let cfg = cfg(|c| c.sessions.retention_undelivered_ms = 5_000);
    let h = harness_with(cfg).await;
    let c = h.client("2025-11-25").await;
    let cursor = finish_while_disconnected(&h, &c).await;
    tokio::time::sleep(std::time::Duration::from_millis(6_000)).await;
    assert_eq!(
        c.resume(&cursor).await.status,
        StatusCode::GONE,
        "released after the undelivered retention"
    );
}
