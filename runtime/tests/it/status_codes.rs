//! Every HTTP status-code rule of the legacy endpoint, through the real actix service.

use crate::common;

use actix_web::http::StatusCode;
use actix_web::test::TestRequest;
use common::*;
use serde_json::json;

const LIST: &str = r#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#;

#[actix_web::test]
async fn initialize_mints_a_visible_ascii_session_id_of_at_least_128_bits() {
    let h = harness().await;
    let mut r = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::OK);
    let sid = r.header("mcp-session-id").unwrap();
    assert!(sid.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    // The generation, the millisecond it was made (12 hex digits), then 24 random bytes in
    // base64url: 32 characters.
    let parts: Vec<&str> = sid.split('.').collect();
    assert_eq!(parts.len(), 3, "{sid}");
    assert_eq!(parts[1].len(), 12, "{sid}");
    assert_eq!(parts[2].len(), 32, "{sid}");
    assert_eq!(r.json().await["result"]["protocolVersion"], "2025-11-25");
}

#[actix_web::test]
async fn unsupported_client_version_is_answered_with_latest() {
    let h = harness().await;
    let mut r = h.send(post().set_payload(init_body("2024-11-05"))).await;
    assert_eq!(r.json().await["result"]["protocolVersion"], "2025-11-25");
}

#[actix_web::test]
async fn initialize_is_never_refused_for_its_version_header() {
    let h = harness().await;
    let r = h
        .send(
            post()
                .insert_header(("MCP-Protocol-Version", "1999-01-01"))
                .set_payload(init_body("2025-06-18")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[actix_web::test]
async fn notification_and_response_posts_get_202_with_empty_body() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r =
        c.request(json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"})).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert!(r.chunk().await.is_none());
    assert_eq!(c.notify(json!({"jsonrpc":"2.0","id":99,"result":{}})).await, StatusCode::ACCEPTED);
}

#[actix_web::test]
async fn missing_session_is_400_and_unknown_session_is_404() {
    let h = harness().await;
    let mut r = h.send(post().set_payload(LIST)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json().await["error"]["code"], -32000);
    let mut r = h.send(post().insert_header(("Mcp-Session-Id", "1.nope")).set_payload(LIST)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json().await["error"]["code"], -32001);
    let r = h.send(get().insert_header(("Mcp-Session-Id", "1.nope"))).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn deleted_session_is_404_everywhere() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    assert_eq!(c.delete().await.status, StatusCode::NO_CONTENT);
    assert_eq!(c.request(serde_json::from_str(LIST).unwrap()).await.status, StatusCode::NOT_FOUND);
    assert_eq!(c.open_get().await.status, StatusCode::NOT_FOUND);
    assert_eq!(c.delete().await.status, StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn version_header_any_supported_accepted_unsupported_400_missing_ok() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    for (v, want) in [
        ("2025-03-26", StatusCode::OK),
        ("2025-06-18", StatusCode::OK),
        ("2030-01-01", StatusCode::BAD_REQUEST),
    ] {
        let r = h
            .send(
                post()
                    .insert_header(("Mcp-Session-Id", c.sid.clone()))
                    .insert_header(("MCP-Protocol-Version", v))
                    .set_payload(LIST),
            )
            .await;
        assert_eq!(r.status, want, "{v}");
    }
    let r = h.send(post().insert_header(("Mcp-Session-Id", c.sid.clone())).set_payload(LIST)).await;
    assert_eq!(r.status, StatusCode::OK, "missing header falls back to the session's version");
}

#[actix_web::test]
async fn accept_is_lenient_json_only_gets_json_sse_only_gets_sse_neither_is_406() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let with_accept =
        |a: &'static str| c.with_session(post()).insert_header(("Accept", a)).set_payload(LIST);
    let mut r = h.send(with_accept("application/json")).await;
    assert_eq!((r.status, r.content_type().as_str()), (StatusCode::OK, "application/json"));
    assert_eq!(r.json().await["id"], 5);
    let r = h.send(with_accept("text/event-stream")).await;
    assert_eq!((r.status, r.content_type().as_str()), (StatusCode::OK, "text/event-stream"));
    assert_eq!(h.send(with_accept("text/html")).await.status, StatusCode::NOT_ACCEPTABLE);
    let r = h.send(c.with_session(get()).insert_header(("Accept", "application/json"))).await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE);
}

#[actix_web::test]
async fn sse_responses_carry_no_cache_and_no_buffering_headers() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let r = c.request(serde_json::from_str(LIST).unwrap()).await;
    assert_eq!(r.content_type(), "text/event-stream");
    assert!(r.header("cache-control").unwrap().contains("no-cache"));
    assert_eq!(r.header("x-accel-buffering").as_deref(), Some("no"));
}

#[actix_web::test]
async fn bad_origin_and_host_are_403_and_localhost_origin_is_allowed() {
    let h = harness().await;
    let r = h
        .send(
            post()
                .insert_header(("Origin", "http://evil.example.com"))
                .set_payload(init_body("2025-11-25")),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = h
        .send(
            post().insert_header(("Host", "evil.example.com")).set_payload(init_body("2025-11-25")),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = h
        .send(
            post()
                .insert_header(("Origin", "http://localhost:3000"))
                .set_payload(init_body("2025-11-25")),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[actix_web::test]
async fn oversized_body_413_wrong_media_type_415_other_method_405() {
    let cfg = cfg(|c| c.security.max_body_bytes = 64);
    let h = harness_with(cfg).await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(100)
    );
    assert_eq!(h.send(post().set_payload(big)).await.status, StatusCode::PAYLOAD_TOO_LARGE);
    let r = h.send(post().insert_header(("Content-Type", "text/plain")).set_payload("{}")).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let r = h.send(TestRequest::put().uri("/mcp").insert_header(("Host", "localhost"))).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(r.header("allow").unwrap().contains("POST"));
}

#[actix_web::test]
async fn null_id_is_invalid_request_and_unparsable_body_omits_id() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.request(json!({"jsonrpc":"2.0","id":null,"method":"tools/list"})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let v = r.json().await;
    assert_eq!(v["error"]["code"], -32600);
    assert!(v.get("id").is_none(), "id omitted, never null: {v}");
    let mut r = h.send(c.with_session(post()).set_payload("{nope")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let v = r.json().await;
    assert_eq!(v["error"]["code"], -32700);
    assert!(v.get("id").is_none());
}

#[actix_web::test]
async fn batches_only_on_2025_03_26_sessions_and_each_request_is_answered() {
    let h = harness().await;
    let batch = json!([
        {"jsonrpc":"2.0","id":1,"method":"ping"},
        {"jsonrpc":"2.0","method":"notifications/initialized"},
        {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"b"}}},
        {"jsonrpc":"2.0","id":3,"method":"no/such/method"}
    ]);
    let new = h.client("2025-11-25").await;
    assert_eq!(new.request(batch.clone()).await.status, StatusCode::BAD_REQUEST);
    let old = h.client("2025-03-26").await;
    let mut r = old.request(batch).await;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json().await;
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 3);
    assert_eq!(arr[0]["id"], 1);
    assert_eq!(text_of(&arr[1]), "b");
    assert_eq!(arr[2]["error"]["code"], -32601);
    let init_in_batch =
        json!([serde_json::from_str::<serde_json::Value>(&init_body("2025-03-26")).unwrap()]);
    assert_eq!(old.request(init_in_batch).await.status, StatusCode::BAD_REQUEST);
}

#[actix_web::test]
async fn initialize_with_a_session_id_is_400() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let r = h.send(c.with_session(post()).set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

#[actix_web::test]
async fn session_limit_is_503_with_retry_after() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.sessions.max_sessions = 1;
        c.quotas.sessions_per_principal = 1;
    }))
    .await;
    let _alice = h.client_as("2025-11-25", Some("ta")).await;
    let r = h
        .send(
            post()
                .insert_header(("Authorization", "Bearer tb"))
                .set_payload(init_body("2025-11-25")),
        )
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "the table is full: not bob's fault");
    assert_eq!(r.header("retry-after").as_deref(), Some("5"));
}

#[actix_web::test]
async fn with_auth_missing_token_is_401_and_another_callers_session_is_404() {
    let h = harness_with_two_callers().await;
    let r = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.header("www-authenticate").as_deref(), Some("Bearer"));
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    let as_bob = post()
        .insert_header(("Mcp-Session-Id", alice.sid.clone()))
        .insert_header(("Authorization", "Bearer tb"))
        .set_payload(LIST);
    assert_eq!(h.send(as_bob).await.status, StatusCode::NOT_FOUND);
    assert_eq!(alice.request(serde_json::from_str(LIST).unwrap()).await.status, StatusCode::OK);
}

#[actix_web::test]
async fn unknown_method_and_unknown_tool_are_jsonrpc_errors_on_200() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.request(json!({"jsonrpc":"2.0","id":1,"method":"nope"})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.message().await["error"]["code"], -32601);
    let mut r = c.call_tool(2, "missing", json!({})).await;
    assert_eq!(r.message().await["error"]["code"], -32602);
    let mut r = c.call_tool(3, "echo", json!({"text": 5})).await;
    let m = r.message().await;
    assert_eq!(
        m["result"]["isError"], true,
        "argument errors are tool results the model can read: {m}"
    );
}
