//! Every resource is bounded and every refusal is a documented one: parsed-size limits, the
//! per-session and server-wide stream memory bounds, per-principal quotas, CORS, and the
//! small defects of the front door (garbled headers, a session deleted under a JSON
//! request, initialize while stopping).

use crate::common;

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::http::header::HeaderValue;
use actix_web::test::TestRequest;
use common::*;
use serde_json::{Value, json};

fn call(id: Value, name: &str, args: Value) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args}})
        .to_string()
}

async fn limit_refusal(mut r: Resp, limit: &str) {
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let e = r.json().await;
    assert_eq!(e["error"]["code"], -32600, "{e}");
    let named = e["error"]["data"]["limit"].as_str().unwrap_or_default();
    assert!(named.contains(limit), "limit {limit:?} not named in {e}");
}

#[actix_web::test]
async fn oversized_initialize_capabilities_are_refused_and_no_session_is_created() {
    let h = harness().await;
    let zeros = vec![0; 2000];
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"experimental":{"x":zeros}},"clientInfo":{"name":"t","version":"1"}}});
    limit_refusal(h.send(post().set_payload(body.to_string())).await, "capabilities").await;
    let deep = (0..20).fold(json!({}), |inner, _| json!({"a": inner}));
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":deep}});
    limit_refusal(h.send(post().set_payload(body.to_string())).await, "capabilities").await;
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"n".repeat(70_000)}}});
    limit_refusal(h.send(post().set_payload(body.to_string())).await, "clientInfo").await;
    assert_eq!(h.sup.session_count(), 0);
    assert_eq!(h.sup.stats().refusals("limit.handshake"), 3);
    // Just under every bound is accepted.
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"experimental":{"x":vec![0; 1000]}},"clientInfo":{"name":"n".repeat(60_000)}}});
    assert_eq!(h.send(post().set_payload(body.to_string())).await.status, StatusCode::OK);
}

#[actix_web::test]
async fn a_body_of_many_small_values_or_deep_nesting_is_refused_before_it_is_parsed() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    // 1 MB of `0,` is 500,000 values: far over the 262,144 bound although under 4 MiB.
    let zeros = format!("[{}0]", "0,".repeat(500_000));
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x","pad":{zeros}}}}}}}"#
    );
    limit_refusal(h.send(c.with_session(post()).set_payload(body)).await, "json_max_values").await;
    let deep = format!("{}1{}", "[".repeat(100), "]".repeat(100));
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x","pad":{deep}}}}}}}"#
    );
    limit_refusal(h.send(c.with_session(post()).set_payload(body)).await, "json_max_depth").await;
    // A large string is fine: strings are bounded by the body size only.
    let big = call(json!(2), "echo", json!({"text": "t".repeat(3 << 20)}));
    let mut ok = h.send(c.with_session(post()).set_payload(big)).await;
    assert_eq!(text_of(&ok.message().await).len(), 3 << 20);
}

#[actix_web::test]
async fn ids_methods_tool_names_and_uris_over_their_length_are_refused() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let cases = [
        (call(json!("i".repeat(300)), "echo", json!({"text": "x"})), "id"),
        (json!({"jsonrpc":"2.0","id":1,"method":"m".repeat(300)}).to_string(), "method"),
        (call(json!(1), &"n".repeat(300), json!({})), "tool or prompt name"),
        (json!({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":format!("file:///{}", "u".repeat(9000))}}).to_string(), "URI"),
    ];
    for (body, limit) in cases {
        limit_refusal(h.send(c.with_session(post()).set_payload(body)).await, limit).await;
    }
    assert_eq!(h.sup.stats().refusals("limit.length"), 4);
}

#[actix_web::test]
async fn batches_over_the_item_cap_are_refused() {
    let h = harness_with(cfg(|c| c.limits.batch_max_items = 2)).await;
    let c = h.client("2025-03-26").await;
    let ping = |i: i64| json!({"jsonrpc":"2.0","id":i,"method":"ping"});
    let two = json!([ping(1), ping(2)]).to_string();
    let mut r = h
        .send(c.with_session(post()).insert_header(("Accept", "application/json")).set_payload(two))
        .await;
    assert_eq!(r.json().await.as_array().map(Vec::len), Some(2));
    let three = json!([ping(1), ping(2), ping(3)]).to_string();
    limit_refusal(h.send(c.with_session(post()).set_payload(three)).await, "batch").await;
}

#[actix_web::test]
async fn retained_streams_are_bounded_in_bytes_per_session() {
    let h = harness_with(cfg(|c| c.sessions.max_retained_bytes = 4096)).await;
    let c = h.client("2025-11-25").await;
    let mut first = c.call_tool(1, "echo", json!({"text": "a".repeat(3000)})).await;
    first.rest().await;
    let cursor = first.first_id();
    let mut second = c.call_tool(2, "echo", json!({"text": "b".repeat(3000)})).await;
    second.rest().await;
    assert_eq!(
        h.sup.stats_snapshot().streams_evicted,
        1,
        "6000 bytes > 4096: the older stream goes"
    );
    assert_refused(c.resume(&cursor).await, StatusCode::GONE, -32005).await;
    assert_eq!(
        c.resume(&second.first_id()).await.rest().await.len(),
        1,
        "the newer stream is still resumable"
    );
}

#[actix_web::test]
async fn a_full_stream_memory_budget_refuses_new_streams_with_503_until_memory_is_freed() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| {
        c.limits.stream_memory_bytes = 1 << 16;
        c.quotas.stream_memory_per_principal = Some(1 << 16);
    }))
    .await;
    let a = h.client("2025-11-25").await;
    // Two retained closed streams of 40 KiB each: over the 64 KiB budget.
    for id in 1..=2 {
        let mut r = a.call_tool(id, "echo", json!({"text": "z".repeat(40 << 10)})).await;
        assert_eq!(r.status, StatusCode::OK);
        r.rest().await;
    }
    assert!(h.sup.stream_memory_full());
    let refused = a.call_tool(3, "echo", json!({"text": "no"})).await;
    assert_eq!(refused.header("retry-after").as_deref(), Some("2"));
    assert_refused(refused, StatusCode::SERVICE_UNAVAILABLE, -32006).await;
    assert_refused(a.open_get().await, StatusCode::SERVICE_UNAVAILABLE, -32006).await;
    assert_refused(
        h.send(post().set_payload(init_body("2025-11-25"))).await,
        StatusCode::SERVICE_UNAVAILABLE,
        -32006,
    )
    .await;
    // A JSON answer opens no stream: still served.
    let json_only = a.with_session(post()).insert_header(("Accept", "application/json"));
    let mut j =
        h.send(json_only.set_payload(call(json!(4), "echo", json!({"text": "json"})))).await;
    assert_eq!(text_of(&j.json().await), "json");
    assert_eq!(h.sup.stats().refusals("overloaded.stream_memory"), 3);
    // Ending the session frees its streams' memory (its streams stop on their next turn).
    assert_eq!(a.delete().await.status, StatusCode::NO_CONTENT);
    until("the session's streams gave their memory back", || {
        h.sup.stats_snapshot().stream_memory_bytes == 0
    })
    .await;
    let b = h.client("2025-11-25").await;
    assert_eq!(
        text_of(&b.call_tool(1, "echo", json!({"text": "again"})).await.message().await),
        "again"
    );
}

#[actix_web::test]
async fn a_stream_growing_past_a_full_budget_keeps_only_its_newest_event() {
    let h = harness_with(cfg(|c| c.limits.stream_memory_bytes = 1 << 16)).await;
    let c = h.client("2025-11-25").await;
    // The GET stream is opened before the budget fills; a JSON request's notifications go
    // to it while its client is away.
    let mut g = c.open_get().await;
    g.chunk().await.expect("priming");
    let start = g.first_id();
    drop(g.disconnect());
    let mut fill = c.call_tool(1, "echo", json!({"text": "z".repeat(70 << 10)})).await;
    fill.rest().await;
    assert!(h.sup.stream_memory_full());
    let json_only = c.with_session(post()).insert_header(("Accept", "application/json"));
    let mut r = h.send(json_only.set_payload(call(json!(2), "chatty", json!({"n": 5})))).await;
    assert_eq!(text_of(&r.json().await), "chatty done");
    assert_eq!(
        h.sup.stats_snapshot().budget_trimmed,
        4,
        "each of 5 events pushed while over budget left only itself"
    );
    // The trimmed events are an explicit gap, never a silent skip.
    assert_refused(c.resume(&start).await, StatusCode::GONE, -32005).await;
}

#[actix_web::test]
async fn a_caller_over_its_share_of_the_stream_memory_gets_429_and_others_are_served() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.limits.stream_memory_bytes = 1 << 18;
        c.quotas.stream_memory_per_principal = Some(1 << 16);
    }))
    .await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    let mut big = alice.call_tool(1, "echo", json!({"text": "a".repeat(80 << 10)})).await;
    big.rest().await;
    let refused = alice.call_tool(2, "echo", json!({"text": "more"})).await;
    assert_eq!(refused.header("retry-after").as_deref(), Some("2"));
    assert_refused(refused, StatusCode::TOO_MANY_REQUESTS, -32007).await;
    assert_refused(alice.open_get().await, StatusCode::TOO_MANY_REQUESTS, -32007).await;
    let init = h
        .send(
            post()
                .insert_header(("Authorization", "Bearer ta"))
                .set_payload(init_body("2025-11-25")),
        )
        .await;
    assert_refused(init, StatusCode::TOO_MANY_REQUESTS, -32007).await;
    assert!(!h.sup.stream_memory_full(), "the server as a whole has room");
    let bob = h.client_as("2025-11-25", Some("tb")).await;
    assert_eq!(
        text_of(&bob.call_tool(1, "echo", json!({"text": "bob"})).await.message().await),
        "bob",
        "bob is not locked out by alice"
    );
    assert_eq!(h.sup.stats().refusals("quota.stream_memory"), 3);
}

#[actix_web::test]
async fn a_sessions_kept_handshake_is_charged_to_the_memory_budget_for_its_life() {
    let h = harness().await;
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"experimental":{"x":"n".repeat(60_000)}},"clientInfo":{"name":"t","version":"1"}}});
    let mut r = h.send(post().set_payload(body.to_string())).await;
    let sid = r.header("mcp-session-id").unwrap();
    r.json().await;
    assert!(h.sup.stats_snapshot().stream_memory_bytes >= 60_000, "{:?}", h.sup.stats_snapshot());
    let c = Client { h: &h, sid, version: "2025-11-25".into(), token: None };
    assert_eq!(c.delete().await.status, StatusCode::NO_CONTENT);
    assert_eq!(h.sup.stats_snapshot().stream_memory_bytes, 0, "released with the session");
}

#[actix_web::test]
async fn a_principal_at_its_session_quota_gets_429_and_others_are_not_locked_out() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.quotas.sessions_per_principal = 2;
    }))
    .await;
    let a1 = h.client_as("2025-11-25", Some("ta")).await;
    let _a2 = h.client_as("2025-11-25", Some("ta")).await;
    let third = h
        .send(
            post()
                .insert_header(("Authorization", "Bearer ta"))
                .set_payload(init_body("2025-11-25")),
        )
        .await;
    assert_eq!(third.header("retry-after").as_deref(), Some("5"));
    assert_refused(third, StatusCode::TOO_MANY_REQUESTS, -32007).await;
    let _b = h.client_as("2025-11-25", Some("tb")).await;
    // A session that ends gives its slot back.
    assert_eq!(a1.delete().await.status, StatusCode::NO_CONTENT);
    let _a3 = h.client_as("2025-11-25", Some("ta")).await;
    assert_eq!(h.sup.stats().refusals("quota.sessions"), 1);
}

#[actix_web::test]
async fn session_creation_rate_is_limited_per_remote_address_without_auth() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| {
        c.quotas.session_rate_per_sec = 1;
        c.quotas.session_burst = 2;
    }))
    .await;
    let from =
        |ip: [u8; 4]| post().peer_addr((ip, 40000).into()).set_payload(init_body("2025-11-25"));
    for _ in 0..2 {
        assert_eq!(h.send(from([10, 0, 0, 1])).await.status, StatusCode::OK);
    }
    let third = h.send(from([10, 0, 0, 1])).await;
    assert_eq!(third.header("retry-after").as_deref(), Some("1"));
    assert_refused(third, StatusCode::TOO_MANY_REQUESTS, -32007).await;
    assert_eq!(
        h.send(from([10, 0, 0, 2])).await.status,
        StatusCode::OK,
        "another address is not throttled"
    );
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(h.send(from([10, 0, 0, 1])).await.status, StatusCode::OK, "the bucket refills");
    assert_eq!(h.sup.stats().refusals("quota.session_rate"), 1);
}

fn preflight(origin: &str) -> TestRequest {
    TestRequest::default()
        .method(actix_web::http::Method::OPTIONS)
        .uri("/mcp")
        .insert_header(("Host", "127.0.0.1:8080"))
        .insert_header(("Origin", origin.to_owned()))
        .insert_header(("Access-Control-Request-Method", "POST"))
        .insert_header((
            "Access-Control-Request-Headers",
            "content-type, mcp-session-id, mcp-protocol-version",
        ))
}

#[actix_web::test]
async fn cors_preflight_is_answered_for_allowed_origins_before_authentication() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.security.allow_localhost_origins = false;
        c.security.allowed_origins = vec!["https://App.Example.com".into()];
    }))
    .await;
    let ok = h.send(preflight("https://app.example.com")).await;
    assert_eq!(ok.status, StatusCode::NO_CONTENT, "no bearer token needed on a preflight");
    assert_eq!(
        ok.header("access-control-allow-origin").as_deref(),
        Some("https://app.example.com")
    );
    assert_eq!(ok.header("access-control-allow-methods").as_deref(), Some("GET, POST, DELETE"));
    let allowed = ok.header("access-control-allow-headers").unwrap();
    for h in [
        "Content-Type",
        "Accept",
        "Authorization",
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Last-Event-ID",
    ] {
        assert!(allowed.contains(h), "{h} missing from {allowed}");
    }
    assert_eq!(ok.header("vary").as_deref(), Some("Origin"));
    assert_refused(h.send(preflight("http://localhost:3000")).await, StatusCode::FORBIDDEN, -32000)
        .await;
    assert_refused(h.send(preflight("https://evil.example")).await, StatusCode::FORBIDDEN, -32000)
        .await;
    let plain_options = TestRequest::default()
        .method(actix_web::http::Method::OPTIONS)
        .uri("/mcp")
        .insert_header(("Host", "127.0.0.1:8080"));
    let r = h.send(plain_options).await;
    assert_eq!(r.header("allow").as_deref(), Some("GET, POST, DELETE, OPTIONS"));
    assert_refused(r, StatusCode::METHOD_NOT_ALLOWED, -32000).await;
}

#[actix_web::test]
async fn responses_to_an_allowed_origin_carry_cors_headers_and_expose_the_session_id() {
    let h = harness().await;
    let origin = "http://localhost:5173";
    let mut r =
        h.send(post().insert_header(("Origin", origin)).set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("access-control-allow-origin").as_deref(), Some(origin));
    assert!(r.header("access-control-expose-headers").unwrap().contains("Mcp-Session-Id"));
    r.json().await;
    // Refusals too, so a page can read why.
    let refused = h
        .send(
            post()
                .insert_header(("Origin", origin))
                .set_payload(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
        )
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.header("access-control-allow-origin").as_deref(), Some(origin));
    // No Origin, no CORS headers; a disallowed one is still 403.
    let plain = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert!(plain.header("access-control-allow-origin").is_none());
    let evil = h
        .send(
            post()
                .insert_header(("Origin", "https://evil.example"))
                .set_payload(init_body("2025-11-25")),
        )
        .await;
    assert!(evil.header("access-control-allow-origin").is_none());
    assert_eq!(evil.header("vary").as_deref(), Some("Origin"), "the refusal depends on Origin too");
    assert_refused(evil, StatusCode::FORBIDDEN, -32000).await;
}

fn garbled() -> HeaderValue {
    HeaderValue::from_bytes(b"caf\xc3\xa9").expect("obs-text is a legal header value")
}

#[actix_web::test]
async fn headers_that_are_not_visible_ascii_are_refused_not_ignored() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let garbled_cursor =
        h.send(c.with_session(get()).insert_header(("Last-Event-ID", garbled()))).await;
    assert_refused(garbled_cursor, StatusCode::BAD_REQUEST, -32000).await;
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let garbled_version =
        c.with_session(post()).insert_header(("MCP-Protocol-Version", garbled())).set_payload(ping);
    assert_refused(h.send(garbled_version).await, StatusCode::BAD_REQUEST, -32000).await;
    let garbled_type =
        c.with_session(post()).insert_header(("Content-Type", garbled())).set_payload(ping);
    let mut r = h.send(garbled_type).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.json().await["error"]["message"].as_str().unwrap().contains("Content-Type"));
    assert_eq!(h.sup.stats().refusals("invalid_header"), 3);
    assert_eq!(
        h.sup.stats_snapshot().streams,
        0,
        "no GET stream was opened for the garbled cursor"
    );
}

#[actix_web::test]
async fn a_json_request_whose_session_is_deleted_mid_flight_is_404() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let json_only = c.with_session(post()).insert_header(("Accept", "application/json"));
    let pending = h.send(json_only.set_payload(call(json!("j"), "gated", json!({}))));
    let delete_when_running = async {
        h.gate.started(1).await;
        c.delete().await
    };
    let (r, deleted) = tokio::join!(pending, delete_when_running);
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_refused(r, StatusCode::NOT_FOUND, -32001).await;
}

#[actix_web::test]
async fn initialize_and_new_requests_of_open_sessions_are_refused_once_draining_begins() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    h.sup.begin_drain();
    let r = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.header("retry-after").as_deref(), Some("5"));
    assert_refused(r, StatusCode::SERVICE_UNAVAILABLE, -32006).await;
    // In-flight requests finish (see rollout.rs); nothing new starts.
    assert_refused(
        c.call_tool(1, "echo", json!({"text": "late"})).await,
        StatusCode::SERVICE_UNAVAILABLE,
        -32006,
    )
    .await;
}

/// Poll every future in turn until all are done (one task: nothing else runs between their
/// first polls, so each reaches its session before the session runs).
async fn all<'a, T>(
    mut futs: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>>,
) -> Vec<T> {
    let mut out: Vec<Option<T>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (f, slot) in futs.iter_mut().zip(out.iter_mut()) {
            if slot.is_none()
                && let std::task::Poll::Ready(v) = f.as_mut().poll(cx)
            {
                *slot = Some(v);
            }
        }
        if out.iter().all(Option::is_some) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter().map(|v| v.expect("every future finished")).collect()
}

#[actix_web::test]
async fn requests_beyond_the_session_mailbox_are_refused_503_though_they_share_one_address() {
    // Every request sends through the session's one address, past actix's own capacity (which
    // would park that address for all of them): the session's own count is what refuses.
    let h = harness_with(cfg(|c| c.sessions.mailbox = 16)).await;
    let c = h.client("2025-11-25").await;
    let pings: Vec<_> = (0..40)
        .map(|i| {
            Box::pin(c.request(json!({"jsonrpc":"2.0","id":i,"method":"ping"})))
                as std::pin::Pin<Box<dyn std::future::Future<Output = Resp>>>
        })
        .collect();
    let answers = all(pings).await;
    let refused = answers.iter().filter(|r| r.status == StatusCode::SERVICE_UNAVAILABLE).count();
    let served = answers.iter().filter(|r| r.status == StatusCode::OK).count();
    assert_eq!((served, refused), (16, 24), "16 places in the mailbox, 40 requests at once");
    assert_eq!(h.sup.stats().refusals("overloaded.mailbox"), 24);
    for mut r in answers.into_iter().filter(|r| r.status == StatusCode::SERVICE_UNAVAILABLE) {
        assert_eq!(r.header("retry-after").as_deref(), Some("1"));
        assert_eq!(r.json().await["error"]["code"], -32006);
    }
    // Every place was given back: the next burst is served in full.
    let again: Vec<_> = (100..116)
        .map(|i| {
            Box::pin(c.request(json!({"jsonrpc":"2.0","id":i,"method":"ping"})))
                as std::pin::Pin<Box<dyn std::future::Future<Output = Resp>>>
        })
        .collect();
    assert!(all(again).await.iter().all(|r| r.status == StatusCode::OK));
}

/// The best of three runs of `f`, so a run slowed by another process does not count.
fn best_of_three(mut f: impl FnMut()) -> Duration {
    (0..3)
        .map(|_| {
            let t0 = tokio::time::Instant::now();
            f();
            t0.elapsed()
        })
        .min()
        .unwrap()
}

#[test]
fn a_preflight_costs_time_linear_in_the_names_it_asks_for() {
    use mcp_runtime::proto::admission::cors_preflight_headers;
    let names =
        |n: usize| (0..n).map(|i| format!("Mcp-Param-Arg{i}")).collect::<Vec<_>>().join(", ");
    let (many, few) = (names(8_000), names(8));
    // 8,000 names of which 64 are argument headers: answered, in one pass.
    let mixed = (0..8_000)
        .map(|i| if i % 125 == 0 { format!("Mcp-Param-Arg{i}") } else { format!("X-Other-{i}") })
        .collect::<Vec<_>>()
        .join(", ");
    assert!(
        cors_preflight_headers(Some(&many)).is_err()
            && cors_preflight_headers(Some(&mixed)).is_ok()
    );
    let time = |header: &str, times: usize| {
        best_of_three(|| {
            for _ in 0..times {
                drop(std::hint::black_box(cors_preflight_headers(Some(std::hint::black_box(
                    header,
                )))));
            }
        })
    };
    let (t_many, t_mixed, t_few) = (time(&many, 1), time(&mixed, 1), time(&few, 1_000));
    // Linear: 8,000 names cost about what 1,000 preflights of 8 names cost (less, refused at
    // the 65th). Quadratic: hundreds of times more.
    assert!(
        t_many < t_few * 5 && t_mixed < t_few * 5,
        "8,000 names took {t_many:?} ({t_mixed:?} with 64 argument headers); 1,000 x 8 names took {t_few:?}"
    );
}

#[actix_web::test]
async fn a_preflight_asking_for_more_than_64_argument_headers_is_refused_400_with_cors_headers() {
    let h = harness().await;
    let names =
        |n: usize| (0..n).map(|i| format!("Mcp-Param-Arg{i}")).collect::<Vec<_>>().join(", ");
    let origin = "http://localhost:5173";
    let ok = h
        .send(preflight(origin).insert_header(("Access-Control-Request-Headers", names(64))))
        .await;
    assert_eq!(ok.status, StatusCode::NO_CONTENT);
    assert!(
        ok.header("access-control-allow-headers")
            .unwrap()
            .ends_with(", Mcp-Param-Arg62, Mcp-Param-Arg63")
    );
    let refused = h
        .send(preflight(origin).insert_header(("Access-Control-Request-Headers", names(8_000))))
        .await;
    assert_eq!(
        refused.header("access-control-allow-origin").as_deref(),
        Some(origin),
        "a page can read why"
    );
    assert_refused(refused, StatusCode::BAD_REQUEST, -32000).await;
    assert_eq!(h.sup.stats().refusals("preflight_headers"), 1);
}
