//! The modern era (2026-07-28) on the same endpoint: each row of the modern error table, a
//! stray session id or `Last-Event-ID` ignored, disconnect as cancellation, lists that never
//! vary and carry cache hints, and `input_required` round trips with a sealed `requestState`.

use crate::common;

use actix_web::http::StatusCode;
use actix_web::test::TestRequest;
use common::*;
use serde_json::{Value, json};

async fn refused(h: &Harness, req: TestRequest, status: StatusCode, code: i64, id: i64) -> Value {
    let mut r = h.send(req).await;
    assert_eq!(r.status, status);
    let body = r.json().await;
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["id"], id, "every error echoes the request id: {body}");
    body
}

#[actix_web::test]
async fn each_row_of_the_modern_error_table() {
    let h = harness().await;
    // No MCP-Protocol-Version while _meta names one: header mismatch.
    let no_header = post().insert_header(("Mcp-Method", "tools/list")).set_payload(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta": meta(json!({}))}})
            .to_string(),
    );
    refused(&h, no_header, StatusCode::BAD_REQUEST, -32020, 1).await;
    // _meta without clientCapabilities: -32602.
    refused(
        &h,
        modern(
            2,
            "server/discover",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V}}),
        ),
        StatusCode::BAD_REQUEST,
        -32602,
        2,
    )
    .await;
    // _meta's version differs from the header: -32020.
    let mut m = meta(json!({}));
    m["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    refused(
        &h,
        modern(3, "server/discover", json!({"_meta": m.clone()})),
        StatusCode::BAD_REQUEST,
        -32020,
        3,
    )
    .await;
    // Both name an unsupported version: -32022 with supported and requested.
    let req = post()
        .insert_header(("MCP-Protocol-Version", "2099-01-01"))
        .insert_header(("Mcp-Method", "server/discover"))
        .set_payload(
            json!({"jsonrpc":"2.0","id":4,"method":"server/discover","params":{"_meta": m}})
                .to_string(),
        );
    let body = refused(&h, req, StatusCode::BAD_REQUEST, -32022, 4).await;
    assert_eq!(body["error"]["data"], json!({"supported": [V], "requested": "2099-01-01"}));
    // Mcp-Method missing or different; Mcp-Name different.
    let wrong_method = post().insert_header(("MCP-Protocol-Version", V)).insert_header(("Mcp-Method", "prompts/list")).set_payload(json!({"jsonrpc":"2.0","id":5,"method":"tools/list","params":{"_meta": meta(json!({}))}}).to_string());
    refused(&h, wrong_method, StatusCode::BAD_REQUEST, -32020, 5).await;
    let wrong_name = modern(6, "tools/call", json!({"name": "echo", "arguments": {"text": "x"}}))
        .insert_header(("Mcp-Name", "other"));
    refused(&h, wrong_name, StatusCode::BAD_REQUEST, -32020, 6).await;
    // A tool that needs sampling, from a client that did not declare it: -32021.
    let body = refused(
        &h,
        modern(7, "tools/call", json!({"name": "ask", "_meta": meta(json!({}))})),
        StatusCode::BAD_REQUEST,
        -32021,
        7,
    )
    .await;
    assert_eq!(body["error"]["data"]["requiredCapabilities"], json!({"sampling": {}}));
    // Removed and unknown methods: 404 / -32601; initialize's message names the versions.
    for (i, method) in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "unknown/method",
    ]
    .into_iter()
    .enumerate()
    {
        let body = refused(
            &h,
            modern(10 + i as i64, method, json!({})),
            StatusCode::NOT_FOUND,
            -32601,
            10 + i as i64,
        )
        .await;
        if method == "initialize" {
            assert!(body["error"]["message"].as_str().unwrap().contains("2025-11-25"), "{body}");
        }
    }
    // A batch under a modern header: -32600.
    let batch = post()
        .insert_header(("MCP-Protocol-Version", V))
        .set_payload(json!([{"jsonrpc":"2.0","id":20,"method":"tools/list"}]).to_string());
    let mut r = h.send(batch).await;
    assert_eq!(
        (r.status, r.json().await["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(-32600))
    );
    // A modern notification is accepted and dropped.
    let note = post().insert_header(("MCP-Protocol-Version", V)).insert_header(("Mcp-Method", "notifications/cancelled")).set_payload(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"_meta": meta(json!({}))}}).to_string());
    assert_eq!(h.send(note).await.status, StatusCode::ACCEPTED);
    assert_eq!(h.sup.session_count(), 0, "no modern request made a session");
}

#[actix_web::test]
async fn a_stray_session_id_or_last_event_id_on_a_modern_request_is_ignored() {
    let h = harness().await;
    let req = modern(1, "tools/call", json!({"name": "echo", "arguments": {"text": "hi"}}))
        .insert_header(("Mcp-Session-Id", "not-a-session"))
        .insert_header(("Last-Event-ID", "forged"));
    let mut r = h.send(req).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.header("mcp-session-id").is_none(), "never minted or echoed");
    let body = r.json().await;
    assert_eq!(body["result"]["content"][0]["text"], "hi");
    assert_eq!(body["result"]["resultType"], "complete");
    assert_eq!(body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "test");
    assert_eq!(h.sup.session_count(), 0);
}

#[actix_web::test]
async fn legacy_requests_are_untouched_by_the_modern_path() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "echo", json!({"text": "legacy"})).await;
    let msgs = r.rest().await;
    assert_eq!(text_of(&msgs[0]), "legacy");
    assert!(msgs[0]["result"].get("resultType").is_none(), "legacy results are as before");
}

#[actix_web::test]
async fn closing_a_modern_stream_cancels_the_tool_and_nothing_more_is_sent() {
    let h = harness().await;
    let mut r = h.send(modern(1, "tools/call", json!({"name": "flood_then_wait", "arguments": {"n": 1}, "_meta": {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/logLevel": "debug"}}))).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.content_type().starts_with("text/event-stream"));
    h.gate.open(1);
    // The response body drives the handler: reading it lets the tool run.
    let log = r.message().await;
    h.gate.finished(1).await;
    assert_eq!(log["method"], "notifications/message", "the log level was asked for: {log}");
    assert_eq!(h.sup.stats().modern().0, 1, "one modern request running");
    drop(r.disconnect());
    // The tool's future is dropped at once (its drop guard counts it).
    h.gate.dropped(1).await;
    until("the modern request is counted cancelled and gone", || {
        h.sup.stats().modern() == (0, 0, 1)
    })
    .await;
}

#[actix_web::test]
async fn without_a_log_level_a_modern_request_gets_no_log_notifications() {
    let h = harness().await;
    let mut r =
        h.send(modern(1, "tools/call", json!({"name": "chatty", "arguments": {"n": 3}}))).await;
    let body = r.json().await;
    assert_eq!(text_of(&body), "chatty done", "answered as one JSON body: nothing preceded it");
}

#[actix_web::test]
async fn list_results_are_byte_identical_across_connections_and_carry_cache_hints() {
    let h = harness().await;
    let mut seen = Vec::new();
    for (i, method) in [
        "tools/list",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "server/discover",
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = h.send(modern(i as i64, method, json!({}))).await;
        let body = r.json().await;
        let res = &body["result"];
        assert_eq!(res["ttlMs"], 300_000, "{method}: {body}");
        assert_eq!(res["cacheScope"], "public", "{method}");
        assert_eq!(res["resultType"], "complete");
        seen.push(res.clone());
    }
    assert_eq!(
        serde_json::to_vec(&seen[0]).unwrap(),
        serde_json::to_vec(&seen[1]).unwrap(),
        "same bytes on another request"
    );
    let discover = &seen[5];
    assert_eq!(discover["supportedVersions"], json!([V]));
    assert!(discover["capabilities"].get("logging").is_none(), "{discover}");
    // What the catalog announces on subscriptions/listen, and nothing it does not.
    assert_eq!(discover["capabilities"]["tools"], json!({"listChanged": true}));
    assert_eq!(
        discover["capabilities"]["resources"],
        json!({"subscribe": true}),
        "resource updates, not resources list changes"
    );
}

fn state_of(body: &Value) -> String {
    body["result"]["requestState"].as_str().expect("a requestState").to_owned()
}

#[actix_web::test]
async fn a_question_becomes_input_required_and_the_retry_with_its_answer_completes() {
    let h = harness().await;
    let mut r = h.send(modern(1, "tools/call", json!({"name": "ask", "arguments": {}}))).await;
    let first = r.json().await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let requests = first["result"]["inputRequests"].as_object().unwrap();
    let (key, q) = requests.iter().next().unwrap();
    assert_eq!(q["method"], "sampling/createMessage");
    let answer =
        json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"});
    let retry = json!({"name": "ask", "arguments": {}, "inputResponses": {key.clone(): answer}, "requestState": state_of(&first)});
    let mut r = h.send(modern(2, "tools/call", retry)).await;
    assert_eq!(text_of(&r.json().await), "client said hi");
}

#[actix_web::test]
async fn a_tampered_foreign_or_misapplied_request_state_is_refused() {
    let h = harness_with_two_callers().await;
    let as_caller = |req: TestRequest, token: &str| {
        req.insert_header(("Authorization", format!("Bearer {token}")))
    };
    let mut r = h
        .send(as_caller(modern(1, "tools/call", json!({"name": "ask", "arguments": {}})), "ta"))
        .await;
    let first = r.json().await;
    let state = state_of(&first);
    let key = first["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let answer =
        json!({"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"});
    let retry = |s: &str, name: &str| json!({"name": name, "arguments": {}, "inputResponses": {key.clone(): answer.clone()}, "requestState": s});
    for (req, token, why) in [
        (modern(2, "tools/call", retry(&format!("{state}x"), "ask")), "ta", "altered"),
        (modern(3, "tools/call", retry(&state, "ask")), "tb", "another caller"),
        (modern(4, "tools/call", retry(&state, "echo")), "ta", "another request"),
    ] {
        let id = req_id(why);
        let body = refused(&h, as_caller(req, token), StatusCode::BAD_REQUEST, -32602, id).await;
        assert!(
            body["error"]["message"].as_str().unwrap().contains("requestState"),
            "{why}: {body}"
        );
    }
    let mut ok = h.send(as_caller(modern(5, "tools/call", retry(&state, "ask")), "ta")).await;
    assert_eq!(text_of(&ok.json().await), "client said hi", "the caller's own state still works");
}

fn req_id(why: &str) -> i64 {
    match why {
        "altered" => 2,
        "another caller" => 3,
        _ => 4,
    }
}

#[actix_web::test]
async fn an_expired_request_state_is_refused() {
    let h = harness_with(cfg(|c| c.modern.request_state_ttl_secs = 1)).await;
    let mut r = h.send(modern(1, "tools/call", json!({"name": "ask", "arguments": {}}))).await;
    let first = r.json().await;
    let key = first["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    // The deadline is wall-clock time (another node must agree on it): wait it out, without
    // blocking the runtime.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let retry = json!({"name": "ask", "arguments": {}, "inputResponses": {key: {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"}}, "requestState": state_of(&first)});
    let body =
        refused(&h, modern(2, "tools/call", retry), StatusCode::BAD_REQUEST, -32602, 2).await;
    assert!(body["error"]["message"].as_str().unwrap().contains("expired"), "{body}");
}

#[actix_web::test]
async fn an_answer_of_the_wrong_shape_is_an_error_not_a_result() {
    let h = harness().await;
    let mut r = h.send(modern(1, "tools/call", json!({"name": "ask", "arguments": {}}))).await;
    let first = r.json().await;
    let key = first["result"]["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    let mut r = h
        .send(modern(
            2,
            "tools/call",
            json!({"name": "ask", "arguments": {}, "inputResponses": {key: 12345}}),
        ))
        .await;
    let body = r.json().await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    refused(
        &h,
        modern(3, "tools/call", json!({"name": "ask", "arguments": {}, "inputResponses": null})),
        StatusCode::BAD_REQUEST,
        -32602,
        3,
    )
    .await;
}

#[actix_web::test]
async fn a_modern_request_refused_for_capacity_or_a_drain_still_echoes_its_id() {
    let h = harness_with(cfg(|c| c.modern.max_in_flight = 1)).await;
    // The one place is held by a waiting tool (its SSE stream stays open).
    let held = h.send(modern(1, "tools/call", json!({"name": "gated", "arguments": {}}))).await;
    assert_eq!(held.status, StatusCode::OK);
    // (A list would be answered: it never takes a place.)
    let mut r =
        h.send(modern(2, "tools/call", json!({"name": "echo", "arguments": {"text": "x"}}))).await;
    assert_eq!(
        (r.status, r.header("retry-after")),
        (StatusCode::SERVICE_UNAVAILABLE, Some("1".into()))
    );
    let body = r.json().await;
    assert_eq!(
        (body["id"].clone(), body["error"]["code"].clone()),
        (json!(2), json!(-32006)),
        "{body}"
    );
    drop(held.disconnect());
    until("the held place is given back", || h.sup.stats().modern().0 == 0).await;
    h.sup.begin_drain();
    let mut r = h.send(modern(3, "tools/list", json!({}))).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.json().await["id"], 3, "a drain's refusal echoes the id too");
}

#[actix_web::test]
async fn a_modern_request_still_running_when_a_drain_or_rollback_ends_is_answered_drained() {
    let h = harness_with(cfg(|c| c.shutdown.grace_secs = 0)).await;
    // A rollback's grace period over: the older generation's request is stopped and answered.
    let mut r =
        h.send(modern(1, "tools/call", json!({"name": "until_cancelled", "arguments": {}}))).await;
    assert_eq!(r.status, StatusCode::OK);
    h.gate.started(1).await;
    h.sup.rollback();
    let body = r.json().await;
    assert_eq!(
        (body["id"].clone(), body["error"]["code"].clone()),
        (json!(1), json!(-32010)),
        "{body}"
    );
    assert!(body["error"]["message"].as_str().unwrap().contains("Re-issue"), "{body}");
    assert!(r.rest().await.is_empty(), "the stream ends after the error");
    drop(r);
    h.gate.finished(1).await;
    until("the request is no longer running", || h.sup.stats().modern().0 == 0).await;
    // A request of the new generation is not touched by that rollback; a stop ends it.
    let mut r =
        h.send(modern(2, "tools/call", json!({"name": "until_cancelled", "arguments": {}}))).await;
    h.gate.started(1).await;
    h.sup.shutdown();
    let body = r.json().await;
    assert_eq!(
        (body["id"].clone(), body["error"]["code"].clone()),
        (json!(2), json!(-32010)),
        "{body}"
    );
    h.gate.finished(1).await;
}

#[actix_web::test]
async fn a_resource_asks_through_the_same_context_in_both_eras() {
    let h = harness().await;
    // 2026-07-28: input_required, then the retry with the answer reads the contents.
    let mut r = h.send(modern(1, "resources/read", json!({"uri": "test://ask"}))).await;
    let first = r.json().await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert_eq!(first["result"]["inputRequests"]["reader"]["method"], "sampling/createMessage");
    assert!(first["result"].get("ttlMs").is_none(), "an input_required result is not cacheable");
    let answer =
        json!({"role": "assistant", "content": {"type": "text", "text": "ada"}, "model": "m"});
    let retry = json!({"uri": "test://ask", "inputResponses": {"reader": answer}, "requestState": state_of(&first)});
    let mut r = h.send(modern(2, "resources/read", retry)).await;
    let body = r.json().await;
    assert_eq!(body["result"]["contents"][0]["text"], "read by ada", "{body}");
    assert_eq!(body["result"]["resultType"], "complete");
    // Legacy: the same question is a server-to-client request on the read's stream.
    let c = h.client("2025-11-25").await;
    let mut r = c.request(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "test://ask"}})).await;
    let req = r.message().await;
    assert_eq!(req["method"], "sampling/createMessage", "{req}");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "bob"}, "model": "m"}});
    assert_eq!(c.notify(answer).await, StatusCode::ACCEPTED);
    assert_eq!(r.message().await["result"]["contents"][0]["text"], "read by bob");
}

#[actix_web::test]
async fn an_unreadable_mirrored_header_is_a_header_mismatch_and_an_unreadable_stray_session_id_is_ignored()
 {
    use actix_web::http::header::HeaderValue;
    let h = harness().await;
    let raw = HeaderValue::from_bytes("éire".as_bytes()).unwrap();
    let req = modern(1, "tools/call", json!({"name": "echo", "arguments": {"text": "x"}}))
        .insert_header(("Mcp-Name", raw.clone()));
    refused(&h, req, StatusCode::BAD_REQUEST, -32020, 1).await;
    let req = modern(2, "tools/call", json!({"name": "echo", "arguments": {"text": "ok"}}))
        .insert_header(("Mcp-Session-Id", raw.clone()));
    let mut r = h.send(req).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(text_of(&r.json().await), "ok");
    // A legacy request with it is refused as before.
    let legacy = post()
        .insert_header(("Mcp-Session-Id", raw))
        .set_payload(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).to_string());
    assert_eq!(h.send(legacy).await.status, StatusCode::BAD_REQUEST);
    // GET under the modern version without a session: 405.
    let get = actix_web::test::TestRequest::get()
        .uri("/mcp")
        .insert_header(("Accept", "text/event-stream"))
        .insert_header(("Host", "127.0.0.1:8080"))
        .insert_header(("MCP-Protocol-Version", V));
    let r = h.send(get).await;
    assert_eq!(
        (r.status, r.header("allow")),
        (StatusCode::METHOD_NOT_ALLOWED, Some("POST, OPTIONS".into()))
    );
}
