//! Anonymous callers are not one caller (issue 19, item 7). Without authentication a handle is
//! a bearer capability, its unguessable id the only authority: a list shows only what the same
//! legacy session created, and outside a session nothing (with a text saying listing needs an
//! authenticated caller), while a use by id works from anywhere the caller's address reaches.
//! An authenticated caller lists all its own. Behind a proxy trusted with
//! `security.trust_forwarded_for`, each client is counted and owned as its own address; the
//! same headers from any other peer are ignored.

use crate::common;

use std::net::SocketAddr;

use actix_web::http::StatusCode;
use actix_web::test::TestRequest;
use common::*;
use mcp_runtime::config::RuntimeConfig;
use mcp_runtime::proto::handle::HandleKind;
use mcp_runtime::tools::{CallToolResult, Catalog, Content, ServerInfo, ToolSpec, tool_fn};
use serde_json::{Value, json};

fn notes() -> HandleKind {
    HandleKind::new("note", "note", "make_note", 600, 1024, 50)
}

/// `make_note {text}` → `{id}`, `read_note {id}` → its text, `list_notes` → `{ids}` (sorted),
/// its text the store's "listing needs an authenticated caller" when it may list nothing.
fn note_catalog() -> Catalog {
    let any = json!({"type": "object", "properties": {}});
    Catalog::builder()
        .tool(tool_fn(
            ToolSpec::new("make_note", "Makes a note", any.clone()),
            |a: Value, cx| async move {
                let k = notes();
                let id = cx.handles(&k)?.create(&a["text"]).await?;
                Ok(CallToolResult::structured(json!({"id": id})))
            },
        ))
        .tool(tool_fn(
            ToolSpec::new("read_note", "Reads a note", any.clone()),
            |a: Value, cx| async move {
                let k = notes();
                let text: Value = cx.handles(&k)?.get(a["id"].as_str().unwrap_or_default()).await?;
                Ok(CallToolResult::text(text.as_str().unwrap_or_default()))
            },
        ))
        .tool(tool_fn(
            ToolSpec::new("list_notes", "Lists the caller's notes", any),
            |_, cx| async move {
                let k = notes();
                let scope = cx.handles(&k)?;
                let mut ids: Vec<String> =
                    scope.list::<Value>().await?.into_iter().map(|(id, _)| id).collect();
                ids.sort();
                let mut r = CallToolResult::structured(json!({"ids": ids}));
                if let Some(why) = scope.unlisted() {
                    r.content = vec![Content::text(why)];
                }
                Ok(r)
            },
        ))
        .build(ServerInfo { name: "notes".into(), version: "0".into(), instructions: None })
        .unwrap()
}

fn peer(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A request from `from`, with `token` as bearer when given.
fn from(req: TestRequest, from: SocketAddr, token: Option<&str>) -> TestRequest {
    let req = req.peer_addr(from);
    match token {
        Some(t) => req.insert_header(("Authorization", format!("Bearer {t}"))),
        None => req,
    }
}

/// A legacy session opened from `addr`: its id.
async fn session(h: &Harness, addr: SocketAddr, token: Option<&str>) -> String {
    let r = h.send(from(post(), addr, token).set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::OK, "initialize");
    let sid = r.header("mcp-session-id").expect("a session id");
    let initialized = from(post(), addr, token)
        .insert_header(("Mcp-Session-Id", sid.clone()))
        .set_payload(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    assert_eq!(h.send(initialized).await.status, StatusCode::ACCEPTED);
    sid
}

/// A tool's result in session `sid`.
async fn call_in(
    h: &Harness,
    sid: &str,
    addr: SocketAddr,
    token: Option<&str>,
    tool: &str,
    args: Value,
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": args}});
    let req = from(post(), addr, token)
        .insert_header(("Mcp-Session-Id", sid.to_owned()))
        .insert_header(("MCP-Protocol-Version", "2025-11-25"))
        .set_payload(body.to_string());
    let v = h.send(req).await.json().await;
    v.get("result").cloned().unwrap_or_else(|| panic!("{tool}: {v}"))
}

/// A tool's result over 2026-07-28 (no session).
async fn call_modern(
    h: &Harness,
    addr: SocketAddr,
    token: Option<&str>,
    tool: &str,
    args: Value,
) -> Value {
    let v = h
        .send(from(modern(8, "tools/call", json!({"name": tool, "arguments": args})), addr, token))
        .await
        .json()
        .await;
    v.get("result").cloned().unwrap_or_else(|| panic!("{tool}: {v}"))
}

fn id_of(made: &Value) -> String {
    made["structuredContent"]["id"].as_str().unwrap_or_else(|| panic!("{made}")).to_owned()
}

fn ids(listed: &Value) -> Vec<String> {
    let mut v: Vec<String> = serde_json::from_value(listed["structuredContent"]["ids"].clone())
        .unwrap_or_else(|_| panic!("{listed}"));
    v.sort();
    v
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[actix_web::test]
async fn unauthenticated_sessions_from_one_address_each_list_only_their_own_handles_and_use_the_others_by_id()
 {
    let h = harness_with_catalog(RuntimeConfig::default(), note_catalog()).await;
    let (pa, pb) = (peer(40001), peer(40002));
    let (a, b) = (session(&h, pa, None).await, session(&h, pb, None).await);
    let a1 = id_of(&call_in(&h, &a, pa, None, "make_note", json!({"text": "a1"})).await);
    let a2 = id_of(&call_in(&h, &a, pa, None, "make_note", json!({"text": "a2"})).await);
    let b1 = id_of(&call_in(&h, &b, pb, None, "make_note", json!({"text": "b1"})).await);

    assert_eq!(
        ids(&call_in(&h, &a, pa, None, "list_notes", json!({})).await),
        sorted(vec![a1.clone(), a2]),
        "a's own, not b's"
    );
    let listed_b = call_in(&h, &b, pb, None, "list_notes", json!({})).await;
    assert_eq!(ids(&listed_b), vec![b1.clone()], "b's own, not a's");
    assert!(
        !listed_b["content"][0]["text"].as_str().unwrap().contains("authenticated"),
        "a session's list says nothing of authentication: {listed_b}"
    );

    // Still one caller by address: each session uses the other's handle by its id.
    let read = call_in(&h, &b, pb, None, "read_note", json!({"id": a1})).await;
    assert_eq!(
        (read["isError"].clone(), read["content"][0]["text"].clone()),
        (Value::Null, json!("a1")),
        "{read}"
    );
    let read = call_modern(&h, pb, None, "read_note", json!({"id": b1})).await;
    assert_eq!(
        read["content"][0]["text"], "b1",
        "and so does a stateless request from that address: {read}"
    );
}

#[actix_web::test]
async fn an_unauthenticated_modern_list_returns_nothing_and_says_listing_needs_an_authenticated_caller()
 {
    let h = harness_with_catalog(RuntimeConfig::default(), note_catalog()).await;
    let p = peer(40003);
    let sid = session(&h, p, None).await;
    let in_session = id_of(&call_in(&h, &sid, p, None, "make_note", json!({"text": "s"})).await);
    let made = id_of(&call_modern(&h, p, None, "make_note", json!({"text": "m"})).await);

    let listed = call_modern(&h, p, None, "list_notes", json!({})).await;
    assert_eq!(ids(&listed), Vec::<String>::new(), "nothing, not even its own: {listed}");
    assert_eq!(listed["isError"], Value::Null, "a plain result, not an error: {listed}");
    let text = listed["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("Listing notes needs an authenticated caller")
            && text.contains("Call make_note"),
        "{text}"
    );
    // By id, as before.
    assert_eq!(
        call_modern(&h, p, None, "read_note", json!({"id": made})).await["content"][0]["text"],
        "m"
    );
    assert_eq!(
        call_modern(&h, p, None, "read_note", json!({"id": in_session})).await["content"][0]["text"],
        "s"
    );
    // A note made outside a session is listed in no session either.
    assert_eq!(ids(&call_in(&h, &sid, p, None, "list_notes", json!({})).await), vec![in_session]);
}

#[actix_web::test]
async fn an_authenticated_caller_lists_all_its_own_handles_across_sessions_and_eras() {
    let h = harness_with_catalog(cfg(two_callers), note_catalog()).await;
    let p = peer(40004);
    let (s1, s2) = (session(&h, p, Some("ta")).await, session(&h, p, Some("ta")).await);
    let n1 = id_of(&call_in(&h, &s1, p, Some("ta"), "make_note", json!({"text": "1"})).await);
    let n2 = id_of(&call_in(&h, &s2, p, Some("ta"), "make_note", json!({"text": "2"})).await);
    let n3 = id_of(&call_modern(&h, p, Some("ta"), "make_note", json!({"text": "3"})).await);
    let all = sorted(vec![n1, n2, n3]);
    assert_eq!(
        ids(&call_in(&h, &s2, p, Some("ta"), "list_notes", json!({})).await),
        all,
        "every session's and every era's"
    );
    let listed = call_modern(&h, p, Some("ta"), "list_notes", json!({})).await;
    assert_eq!(ids(&listed), all, "{listed}");
    // Bob, from the same address, sees none of alice's, and is not told to authenticate.
    let bobs = call_modern(&h, p, Some("tb"), "list_notes", json!({})).await;
    assert_eq!(ids(&bobs), Vec::<String>::new());
    assert!(!bobs["content"][0]["text"].as_str().unwrap().contains("authenticated"), "{bobs}");
}

fn behind_proxy(c: &mut RuntimeConfig) {
    c.quotas.sessions_per_principal = 1;
    c.security.trust_forwarded_for = vec!["127.0.0.0/8".parse().unwrap()];
}

/// An `initialize` from `addr` that says it forwards for `client`: its status.
async fn initialize_for(h: &Harness, addr: SocketAddr, header: (&str, &str)) -> StatusCode {
    h.send(post().peer_addr(addr).insert_header(header).set_payload(init_body("2025-11-25")))
        .await
        .status
}

#[actix_web::test]
async fn clients_behind_a_trusted_proxy_get_their_own_session_quota_and_the_headers_of_an_untrusted_peer_are_ignored()
 {
    let h = harness_with_catalog(cfg(behind_proxy), note_catalog()).await;
    let proxy = peer(40005);
    let xff = |c: &'static str| ("X-Forwarded-For", c);
    assert_eq!(initialize_for(&h, proxy, xff("198.51.100.1")).await, StatusCode::OK);
    assert_eq!(
        initialize_for(&h, proxy, xff("198.51.100.1")).await,
        StatusCode::TOO_MANY_REQUESTS,
        "one session per client"
    );
    assert_eq!(
        initialize_for(&h, proxy, xff("203.0.113.9, 198.51.100.2")).await,
        StatusCode::OK,
        "another client behind the same proxy has its own"
    );
    assert_eq!(
        initialize_for(&h, proxy, ("Forwarded", "for=\"[2001:db8::1]:4711\"")).await,
        StatusCode::OK,
        "and so does one named by Forwarded"
    );

    // The same headers from a peer outside the trusted range count as that peer.
    let stranger = SocketAddr::from(([192, 0, 2, 10], 40006));
    assert_eq!(initialize_for(&h, stranger, xff("198.51.100.3")).await, StatusCode::OK);
    assert_eq!(
        initialize_for(&h, stranger, xff("198.51.100.4")).await,
        StatusCode::TOO_MANY_REQUESTS,
        "its headers are ignored: one caller"
    );

    // A client behind the trusted proxy is its own caller for handles too.
    let make = modern(9, "tools/call", json!({"name": "make_note", "arguments": {"text": "mine"}}));
    let mut r = h.send(make.peer_addr(proxy).insert_header(xff("198.51.100.1"))).await;
    let made = r.json().await;
    let id = made["result"]["structuredContent"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{made}"))
        .to_owned();
    let read = |client: &'static str| {
        modern(10, "tools/call", json!({"name": "read_note", "arguments": {"id": id}}))
            .peer_addr(proxy)
            .insert_header(xff(client))
    };
    assert_eq!(
        h.send(read("198.51.100.1")).await.json().await["result"]["content"][0]["text"],
        "mine"
    );
    let other = h.send(read("198.51.100.2")).await.json().await;
    assert_eq!(
        other["result"]["isError"], true,
        "another client's handle is unknown to it: {other}"
    );
}
