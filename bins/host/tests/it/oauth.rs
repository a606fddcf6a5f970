//! The host as an OAuth 2.1 resource server, against a real authorization server
//! (`scripts/oidc/provider.mjs`: oidc-provider). Each test is one rule of the MCP
//! authorization specification (2025-11-25, unchanged in 2026-07-28); README "Authorization"
//! lists which MUST or SHOULD each covers.

use std::time::Duration;

use mcp_devtools::{OidcProvider, TempDir};
use serde_json::{Value, json};

use crate::common::{Host, QUICK, header, http, http_at, start_with};

/// Scopes the provider grants; the host needs `mcp` for everything and `baskets:write` for
/// the tool `test_image_content`.
const ALL: &str = "mcp tools:read baskets:write";

fn provider() -> OidcProvider {
    OidcProvider::start().expect("the OAuth provider (npm ci in scripts/oidc)")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A host trusting `issuers`, its resource `http://127.0.0.1:<port>/mcp`, with the scope
/// table above and `extra` lines of TOML in `[auth.oauth]`.
struct Protected {
    host: Host,
    resource: String,
    _dir: TempDir,
}

fn protected(issuers: &[&str], oauth_toml: &str, extra: &[&str]) -> Protected {
    let dir = TempDir::new("oauth");
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let list: Vec<String> = issuers.iter().map(|i| format!("{i:?}")).collect();
    let config = dir.path().join("auth.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nrequired_scopes = [\"mcp\"]\n[auth.scopes]\n\"tools/call:test_image_content\" = [\"baskets:write\"]\n[auth.oauth]\nissuers = [{}]\nresource = {resource:?}\nscopes_supported = [\"mcp\", \"tools:read\", \"baskets:write\", \"offline_access\"]\n{oauth_toml}\n",
            list.join(", ")
        ),
    )
    .unwrap();
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    let host = start_with(&dir, port, &args);
    Protected { host, resource, _dir: dir }
}

fn init_body() -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"oauth-test","version":"1"}}}).to_string()
}

/// A legacy `initialize` with `token`: (status, head).
fn initialize(addr: &str, token: Option<&str>) -> (u16, String) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut h = vec![("Accept", "application/json")];
    if let Some(b) = bearer.as_deref() {
        h.push(("Authorization", b));
    }
    let (status, head, _) = http(addr, "POST", &h, &init_body(), QUICK);
    (status, head)
}

/// A legacy `tools/call` in session `sid` with `token`: (status, head, body).
fn legacy_call(addr: &str, sid: &str, token: &str, tool: &str) -> (u16, String, Value) {
    let bearer = format!("Bearer {token}");
    let body =
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":tool,"arguments":{}}});
    let (status, head, b) = http(
        addr,
        "POST",
        &[
            ("Accept", "application/json"),
            ("Mcp-Session-Id", sid),
            ("MCP-Protocol-Version", "2025-11-25"),
            ("Authorization", &bearer),
        ],
        &body.to_string(),
        QUICK,
    );
    (status, head, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

/// A 2026-07-28 `tools/call` with `token`: (status, head, body).
fn modern_call(addr: &str, token: Option<&str>, tool: &str) -> (u16, String, Value) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut h = vec![
        ("Accept", "application/json"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
    ];
    if let Some(b) = bearer.as_deref() {
        h.push(("Authorization", b));
    }
    let body = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":tool,"arguments":{},
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}});
    let (status, head, b) = http(addr, "POST", &h, &body.to_string(), QUICK);
    (status, head, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

fn challenge(head: &str) -> String {
    header(head, "www-authenticate").unwrap_or_default().to_owned()
}

fn session(addr: &str, token: &str) -> String {
    let (status, head) = initialize(addr, Some(token));
    assert_eq!(status, 200, "{head}");
    header(&head, "mcp-session-id").expect("a session").to_owned()
}

#[test]
fn client_credentials_tokens_of_each_algorithm_call_tools_in_both_eras() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &[]);
    for client in ["jwt-rs256", "jwt-es256", "jwt-eddsa"] {
        let token = p.token(client, &h.resource, ALL).unwrap();
        let sid = session(&h.host.addr, &token);
        let (status, _, body) = legacy_call(&h.host.addr, &sid, &token, "test_simple_text");
        assert_eq!(status, 200, "{client}: {body}");
        assert!(body["result"]["content"].is_array(), "{client}: {body}");
        let (status, _, body) = modern_call(&h.host.addr, Some(&token), "test_simple_text");
        assert_eq!(status, 200, "{client}: {body}");
        assert!(body["result"]["content"].is_array(), "{client}: {body}");
    }
}

#[test]
fn a_request_without_a_token_gets_401_naming_the_metadata_and_the_scopes() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &[]);
    let (status, head) = initialize(&h.host.addr, None);
    assert_eq!(status, 401);
    let port = h.host.port();
    assert_eq!(
        challenge(&head),
        format!(
            "Bearer scope=\"mcp\", resource_metadata=\"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp\""
        )
    );
    let (status, head, _) = modern_call(&h.host.addr, None, "test_simple_text");
    assert_eq!(status, 401);
    assert!(challenge(&head).contains("resource_metadata="), "{head}");
    // GET and DELETE of the session era too.
    for method in ["GET", "DELETE"] {
        let (status, head, _) = http(
            &h.host.addr,
            method,
            &[("Accept", "text/event-stream"), ("Mcp-Session-Id", "x")],
            "",
            QUICK,
        );
        assert_eq!(status, 401, "{method}");
        assert!(challenge(&head).contains("resource_metadata="), "{method}: {head}");
    }
}

#[test]
fn protected_resource_metadata_is_served_at_both_well_known_names_with_cors() {
    let p = provider();
    let h = protected(&[p.issuer()], "resource_documentation = \"https://docs.example/mcp\"", &[]);
    for path in
        ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]
    {
        let (status, head, body) =
            http_at(&h.host.addr, "GET", path, &[("Origin", "http://localhost:3000")], "", QUICK);
        assert_eq!(status, 200, "{path}");
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            doc,
            json!({"resource": h.resource, "authorization_servers": [p.issuer()],
                "scopes_supported": ["mcp", "tools:read", "baskets:write"],
                "bearer_methods_supported": ["header"],
                "resource_documentation": "https://docs.example/mcp"}),
            "{path}: offline_access is never advertised"
        );
        assert_eq!(header(&head, "access-control-allow-origin"), Some("http://localhost:3000"));
    }
    // A browser's preflight of it (the MCP headers allowed).
    let (status, head, _) = http_at(
        &h.host.addr,
        "OPTIONS",
        "/.well-known/oauth-protected-resource/mcp",
        &[
            ("Origin", "http://localhost:3000"),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "mcp-protocol-version"),
        ],
        "",
        QUICK,
    );
    assert_eq!(status, 204);
    assert!(
        header(&head, "access-control-allow-headers")
            .is_some_and(|h| h.to_ascii_lowercase().contains("mcp-protocol-version")),
        "{head}"
    );
    // A Host header naming another server changes nothing: the URLs are the configured ones.
    let (_, _, body) = http_at(
        &h.host.addr,
        "GET",
        "/.well-known/oauth-protected-resource",
        &[("X-Forwarded-Host", "evil.example"), ("Forwarded", "host=evil.example;proto=https")],
        "",
        QUICK,
    );
    assert!(!String::from_utf8_lossy(&body).contains("evil"));
}

#[test]
fn a_token_for_another_resource_is_refused() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &[]);
    let token = p.token("jwt-es256", "https://other.example/mcp", ALL).unwrap();
    let (status, head) = initialize(&h.host.addr, Some(&token));
    assert_eq!(status, 401);
    assert!(challenge(&head).starts_with("Bearer error=\"invalid_token\""), "{head}");
    let (status, _, _) = modern_call(&h.host.addr, Some(&token), "test_simple_text");
    assert_eq!(status, 401);
}

#[test]
fn an_expired_token_is_refused_even_on_a_live_session() {
    let p = provider();
    let h = protected(&[p.issuer()], "leeway_secs = 0", &[]);
    // The `short` client's tokens live 1 s.
    let token = p.token("short", &h.resource, ALL).unwrap();
    let sid = session(&h.host.addr, &token);
    std::thread::sleep(Duration::from_millis(2200));
    let (status, head, _) = legacy_call(&h.host.addr, &sid, &token, "test_simple_text");
    assert_eq!(status, 401, "the cached grant expires with the token");
    assert!(challenge(&head).contains("invalid_token"), "{head}");
    // A new token of the same client continues the session (same principal). Its life is
    // 1 s counted in whole seconds, so it may expire at once when issued late in a second: it
    // is asked for at the start of one, and asked for again only if it did expire meanwhile.
    let mut outcome = (0, Value::Null);
    for _ in 0..5 {
        let into_second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_millis();
        std::thread::sleep(Duration::from_millis(u64::from(1_000 - into_second)));
        let fresh = p.token("short", &h.resource, ALL).unwrap();
        let (status, _, body) = legacy_call(&h.host.addr, &sid, &fresh, "test_simple_text");
        outcome = (status, body);
        let exp = unb64(&parts(&fresh).1)["exp"].as_u64().expect("an exp claim");
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        if status == 200 || now < exp {
            break;
        }
    }
    assert_eq!(outcome.0, 200, "{}", outcome.1);
}

#[test]
fn a_token_of_an_issuer_not_configured_is_refused() {
    let trusted = provider();
    let other = provider();
    let h = protected(&[trusted.issuer()], "", &[]);
    let token = other.token("jwt-es256", &h.resource, ALL).unwrap();
    let (status, head) = initialize(&h.host.addr, Some(&token));
    assert_eq!(status, 401);
    assert!(challenge(&head).contains("invalid_token"));
    assert_eq!(other.jwks_fetches(), 0, "an issuer not trusted is never asked");
}

/// `header.claims.signature` parts of a token.
fn parts(token: &str) -> (String, String, String) {
    let mut it = token.split('.').map(str::to_owned);
    (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
}

fn b64(v: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
}

fn unb64(s: &str) -> Value {
    use base64::Engine as _;
    serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s).unwrap())
        .unwrap()
}

#[test]
fn alg_none_an_hmac_header_and_a_tampered_token_are_refused() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &[]);
    let token = p.token("jwt-rs256", &h.resource, "mcp").unwrap();
    assert_eq!(initialize(&h.host.addr, Some(&token)).0, 200, "the genuine token works");
    let (head, claims, sig) = parts(&token);
    let mut wider = unb64(&claims);
    wider["scope"] = json!(ALL);
    let mut none_header = unb64(&head);
    none_header["alg"] = json!("none");
    let mut hs = unb64(&head);
    hs["alg"] = json!("HS256");
    let flipped = {
        let mut b = sig.into_bytes();
        let last = b.len() - 2;
        b[last] = if b[last] == b'A' { b'B' } else { b'A' };
        String::from_utf8(b).unwrap()
    };
    let forged = [
        ("alg none", format!("{}.{claims}.", b64(&none_header))),
        ("HS256 header", format!("{}.{claims}.{flipped}", b64(&hs))),
        ("claims changed", format!("{head}.{}.{}", b64(&wider), parts(&token).2)),
        ("signature changed", format!("{head}.{claims}.{flipped}")),
    ];
    for (what, t) in forged {
        let (status, hd) = initialize(&h.host.addr, Some(&t));
        assert_eq!(status, 401, "{what}");
        assert!(challenge(&hd).contains("invalid_token"), "{what}: {hd}");
    }
}

#[test]
fn a_new_key_at_the_provider_is_taken_after_one_refresh() {
    let p = provider();
    let h = protected(&[p.issuer()], "jwks_refresh_min_secs = 1", &[]);
    let old = p.token("jwt-es256", &h.resource, ALL).unwrap();
    assert_eq!(initialize(&h.host.addr, Some(&old)).0, 200);
    assert_eq!(p.jwks_fetches(), 1);
    let p = p.restart_rotated().unwrap();
    let new = p.token("jwt-es256", &h.resource, ALL).unwrap();
    assert_ne!(unb64(&parts(&new).0)["kid"], unb64(&parts(&old).0)["kid"], "a new kid signs");
    // The interval since the first fetch passes; then the new kid fetches the keys once.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(initialize(&h.host.addr, Some(&new)).0, 200);
    assert_eq!(initialize(&h.host.addr, Some(&new)).0, 200);
    assert_eq!(p.jwks_fetches(), 1, "one refresh, then the cache");
    // The old token still verifies (its key is still published) and is cached anyway.
    assert_eq!(initialize(&h.host.addr, Some(&old)).0, 200);
}

#[test]
fn unknown_kids_fetch_the_keys_at_most_once_per_interval() {
    let p = provider();
    let h = protected(&[p.issuer()], "jwks_refresh_min_secs = 3600", &[]);
    let token = p.token("jwt-es256", &h.resource, ALL).unwrap();
    assert_eq!(initialize(&h.host.addr, Some(&token)).0, 200);
    assert_eq!(p.jwks_fetches(), 1);
    let (head, claims, sig) = parts(&token);
    for i in 0..5 {
        let mut hd = unb64(&head);
        hd["kid"] = json!(format!("unknown-{i}"));
        let (status, _) = initialize(&h.host.addr, Some(&format!("{}.{claims}.{sig}", b64(&hd))));
        assert_eq!(status, 401);
    }
    assert_eq!(p.jwks_fetches(), 1, "an attacker's kids cost no fetch within the interval");
}

#[test]
fn an_opaque_token_is_introspected_and_once_revoked_refused_after_the_cache_bound() {
    let p = provider();
    let intro = format!(
        "introspection_cache_secs = 1\n[[auth.oauth.introspection]]\nissuer = {:?}\nclient_id = \"mcp-host\"\nclient_secret = \"mcp-host-secret\"",
        p.issuer()
    );
    let h = protected(&[], &intro, &[]);
    let token = p.token("opaque", &h.resource, ALL).unwrap();
    assert!(!token.contains('.'), "an opaque token: {token}");
    let sid = session(&h.host.addr, &token);
    let (status, _, body) = legacy_call(&h.host.addr, &sid, &token, "test_simple_text");
    assert_eq!(status, 200, "{body}");
    p.revoke("opaque", &token).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let (status, head, _) = legacy_call(&h.host.addr, &sid, &token, "test_simple_text");
    assert_eq!(status, 401, "revoked, and past introspection_cache_secs");
    assert!(challenge(&head).contains("invalid_token"), "{head}");
    // An opaque token for another resource: introspection names its audience.
    let other = p.token("opaque", "https://other.example/mcp", ALL).unwrap();
    assert_eq!(initialize(&h.host.addr, Some(&other)).0, 401);
}

#[test]
fn a_token_without_a_needed_scope_gets_403_naming_it_in_both_eras() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &[]);
    let narrow = p.token("jwt-eddsa", &h.resource, "mcp tools:read").unwrap();
    let sid = session(&h.host.addr, &narrow);
    let (status, _, _) = legacy_call(&h.host.addr, &sid, &narrow, "test_simple_text");
    assert_eq!(status, 200, "a tool without an entry needs the endpoint's scopes only");
    let (status, head, body) = legacy_call(&h.host.addr, &sid, &narrow, "test_image_content");
    assert_eq!(status, 403, "{body}");
    assert!(
        challenge(&head)
            .starts_with("Bearer error=\"insufficient_scope\", scope=\"baskets:write mcp\""),
        "{head}"
    );
    let (status, head, body) = modern_call(&h.host.addr, Some(&narrow), "test_image_content");
    assert_eq!(status, 403);
    assert_eq!(body["id"], 7, "the stateless error carries the request id: {body}");
    assert!(challenge(&head).contains("insufficient_scope"));
    // Step-up: a token with the scope is accepted on the same session (same principal).
    let wide = p.token("jwt-eddsa", &h.resource, ALL).unwrap();
    let (status, _, body) = legacy_call(&h.host.addr, &sid, &wide, "test_image_content");
    assert_eq!(status, 200, "{body}");
    // Without the endpoint's scope nothing is served.
    let none = p.token("jwt-eddsa", &h.resource, "tools:read").unwrap();
    let (status, head) = initialize(&h.host.addr, Some(&none));
    assert_eq!(status, 403);
    assert!(challenge(&head).contains("scope=\"mcp\""), "{head}");
}

/// A `tools/list` in both eras with `token`: the tool names, and the stateless result's
/// `cacheScope`.
fn tool_names(addr: &str, token: &str) -> (Vec<String>, Vec<String>, Value) {
    let names = |v: &Value| -> Vec<String> {
        v["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let sid = session(addr, token);
    let bearer = format!("Bearer {token}");
    let (_, _, b) = http(
        addr,
        "POST",
        &[
            ("Accept", "application/json"),
            ("Mcp-Session-Id", &sid),
            ("MCP-Protocol-Version", "2025-11-25"),
            ("Authorization", &bearer),
        ],
        &json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}).to_string(),
        QUICK,
    );
    let legacy: Value = serde_json::from_slice(&b).unwrap();
    let body = json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}});
    let (_, _, b) = http(
        addr,
        "POST",
        &[
            ("Accept", "application/json"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
            ("Authorization", &bearer),
        ],
        &body.to_string(),
        QUICK,
    );
    let modern: Value = serde_json::from_slice(&b).unwrap();
    (names(&legacy), names(&modern), modern["result"]["cacheScope"].clone())
}

#[test]
fn lists_show_only_what_the_token_may_call_when_filter_lists_is_on() {
    let p = provider();
    let narrow_scopes = "mcp tools:read";
    let h = protected(&[p.issuer()], "", &["--set", "auth.filter_lists=true"]);
    let narrow = p.token("jwt-es256", &h.resource, narrow_scopes).unwrap();
    let wide = p.token("jwt-es256", &h.resource, ALL).unwrap();
    let (legacy, modern, scope) = tool_names(&h.host.addr, &narrow);
    assert!(legacy.contains(&"test_simple_text".to_owned()), "{legacy:?}");
    assert!(!legacy.contains(&"test_image_content".to_owned()), "needs baskets:write: {legacy:?}");
    assert_eq!(legacy, modern, "both eras filter alike");
    assert_eq!(scope, "private", "a shared cache must not serve one caller's list to another");
    let (legacy, modern, _) = tool_names(&h.host.addr, &wide);
    assert!(
        legacy.contains(&"test_image_content".to_owned())
            && modern.contains(&"test_image_content".to_owned())
    );
    // Off (the default): the whole catalog for everyone, and still private with OAuth.
    let off = protected(&[p.issuer()], "", &[]);
    let narrow = p.token("jwt-es256", &off.resource, narrow_scopes).unwrap();
    let (legacy, modern, scope) = tool_names(&off.host.addr, &narrow);
    assert!(
        legacy.contains(&"test_image_content".to_owned())
            && modern.contains(&"test_image_content".to_owned())
    );
    assert_eq!(scope, "private");
}

#[test]
fn a_broader_scope_stands_for_the_narrower_ones_it_implies() {
    let p = provider();
    let implies = "[auth.scope_implies]\n\"baskets:admin\" = [\"baskets:write\"]";
    let h = protected(&[p.issuer()], implies, &[]);
    let admin = p.token("jwt-es256", &h.resource, "mcp baskets:admin").unwrap();
    let (status, _, body) = modern_call(&h.host.addr, Some(&admin), "test_image_content");
    assert_eq!(status, 200, "baskets:admin implies baskets:write: {body}");
    let plain = protected(&[p.issuer()], "", &[]);
    let admin = p.token("jwt-es256", &plain.resource, "mcp baskets:admin").unwrap();
    let (status, _, _) = modern_call(&plain.host.addr, Some(&admin), "test_image_content");
    assert_eq!(status, 403, "without the hierarchy it does not");
}

#[test]
fn a_token_in_the_query_string_is_refused() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &[]);
    let token = p.token("jwt-es256", &h.resource, ALL).unwrap();
    let (status, head, _) = http_at(
        &h.host.addr,
        "POST",
        &format!("/mcp?access_token={token}"),
        &[("Accept", "application/json")],
        &init_body(),
        QUICK,
    );
    assert_eq!(status, 400);
    assert!(challenge(&head).contains("invalid_request"), "{head}");
}

#[test]
fn a_session_answers_only_the_principal_that_made_it() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &[]);
    let alice = p.token("jwt-es256", &h.resource, ALL).unwrap();
    let mallory = p.token("jwt-rs256", &h.resource, ALL).unwrap();
    let sid = session(&h.host.addr, &alice);
    let (status, _, body) = legacy_call(&h.host.addr, &sid, &mallory, "test_simple_text");
    assert_eq!(status, 404, "another principal's valid token finds no session: {body}");
    let (status, _, _) = legacy_call(&h.host.addr, &sid, &alice, "test_simple_text");
    assert_eq!(status, 200);
}

#[test]
fn a_state_handle_belongs_to_the_principal_that_made_it() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &["--packs", "basket"]);
    let alice = p.token("jwt-es256", &h.resource, ALL).unwrap();
    let bob = p.token("jwt-rs256", &h.resource, ALL).unwrap();
    let call = |token: &str, tool: &str, args: Value| -> Value {
        let bearer = format!("Bearer {token}");
        let body = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":tool,"arguments":args,
            "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}});
        let (status, _, b) = http(
            &h.host.addr,
            "POST",
            &[
                ("Accept", "application/json"),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", tool),
                ("Authorization", &bearer),
            ],
            &body.to_string(),
            QUICK,
        );
        assert_eq!(status, 200);
        serde_json::from_slice(&b).unwrap()
    };
    let made = call(&alice, "create_basket", json!({"items": [{"sku": "shoes"}]}));
    let id =
        made["result"]["structuredContent"]["basket_id"].as_str().expect("a basket").to_owned();
    let theirs = call(&bob, "get_basket", json!({"basket_id": id}));
    assert_eq!(
        theirs["result"]["isError"], true,
        "another principal's handle is unknown to it: {theirs}"
    );
    let fake = "bsk_doesnotexist000000000000";
    let unknown = call(&bob, "get_basket", json!({"basket_id": fake}));
    assert_eq!(
        theirs["result"]["content"].to_string().replace(&id, fake),
        unknown["result"]["content"].to_string(),
        "and reads exactly like an unknown one"
    );
    let mine = call(&alice, "get_basket", json!({"basket_id": id}));
    assert_eq!(mine["result"]["structuredContent"]["item_count"], 1, "{mine}");
}

#[test]
fn an_address_sending_refused_tokens_is_slowed_down_and_a_known_token_still_passes() {
    let p = provider();
    let h = protected(&[p.issuer()], "failures_burst = 3\nfailures_per_sec = 1", &[]);
    let good = p.token("jwt-es256", &h.resource, ALL).unwrap();
    // Minted first: what follows must fit in the bucket's refill time (1 s).
    let fresh = p.token("jwt-es256", &h.resource, ALL).unwrap();
    assert_eq!(initialize(&h.host.addr, Some(&good)).0, 200, "validated and cached");
    for n in 0..3 {
        let (status, _) = initialize(&h.host.addr, Some(&format!("made-up-{n}")));
        assert_eq!(status, 401, "refusal {n}");
    }
    let (status, head) = initialize(&h.host.addr, Some("made-up-4"));
    assert_eq!(status, 429, "past the burst: refused before any check");
    assert!(header(&head, "retry-after").is_some());
    assert_eq!(initialize(&h.host.addr, Some(&fresh)).0, 429, "a token not seen yet waits too");
    assert_eq!(initialize(&h.host.addr, Some(&good)).0, 200, "a token validated before passes");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(initialize(&h.host.addr, Some(&fresh)).0, 200, "the bucket refills");
}

#[test]
fn static_tokens_work_beside_oauth() {
    let p = provider();
    let h = protected(&[p.issuer()], "", &["--set", "security.bearer_tokens.local-token-123=ops"]);
    assert_eq!(initialize(&h.host.addr, Some("local-token-123")).0, 200);
    let token = p.token("jwt-es256", &h.resource, ALL).unwrap();
    assert_eq!(initialize(&h.host.addr, Some(&token)).0, 200);
    let (status, head) = initialize(&h.host.addr, Some("not-a-token"));
    assert_eq!(status, 401);
    assert!(challenge(&head).contains("invalid_token"), "{head}");
}

#[test]
fn an_authorization_server_that_cannot_be_reached_is_503_not_401() {
    let p = provider();
    let h = protected(&[p.issuer()], "fetch_timeout_ms = 1000", &[]);
    let token = p.token("jwt-es256", &h.resource, ALL).unwrap();
    drop(p);
    // The keys were never fetched, and the issuer is gone: the token may be good.
    let (status, head) = initialize(&h.host.addr, Some(&token));
    assert_eq!(status, 503, "{head}");
    assert!(header(&head, "retry-after").is_some());
}
