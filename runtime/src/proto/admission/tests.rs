//! Admission as a table: each row is a request head + body and the expected outcome.

use super::*;

const INIT: &str =
    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
const NOTE: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn post<'a>() -> RequestHead<'a> {
    RequestHead {
        accept: Some("application/json, text/event-stream"),
        content_type: Some("application/json"),
        ..RequestHead::new(HttpMethod::Post)
    }
}

fn status(r: Result<Admitted, Rejection>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(e) => e.status(),
    }
}

#[test]
fn admission_table() {
    let p = AdmitPolicy::default();
    let s = Some("sess-1");
    let batch_init = format!("[{INIT}]");
    let rows: Vec<(&str, RequestHead<'_>, &str, u16)> = vec![
        ("initialize without session", post(), INIT, 200),
        (
            "initialize ignores unknown version header",
            RequestHead { protocol_version: Some("2099-01-01"), ..post() },
            INIT,
            200,
        ),
        ("initialize with a session id", RequestHead { session_id: s, ..post() }, INIT, 400),
        ("request without session", post(), LIST, 400),
        ("request with session", RequestHead { session_id: s, ..post() }, LIST, 200),
        (
            "session id with a space is unknown",
            RequestHead { session_id: Some("a b"), ..post() },
            LIST,
            404,
        ),
        (
            "unsupported version header",
            RequestHead { session_id: s, protocol_version: Some("2024-01-01"), ..post() },
            LIST,
            400,
        ),
        (
            "older supported version header",
            RequestHead { session_id: s, protocol_version: Some("2025-03-26"), ..post() },
            LIST,
            200,
        ),
        (
            "accept only json",
            RequestHead { session_id: s, accept: Some("application/json"), ..post() },
            LIST,
            200,
        ),
        (
            "accept only sse",
            RequestHead { session_id: s, accept: Some("text/event-stream"), ..post() },
            LIST,
            200,
        ),
        ("accept */*", RequestHead { session_id: s, accept: Some("*/*"), ..post() }, LIST, 200),
        (
            "accept nothing usable",
            RequestHead { session_id: s, accept: Some("text/html"), ..post() },
            LIST,
            406,
        ),
        (
            "accept json with q=0 only",
            RequestHead { session_id: s, accept: Some("application/json;q=0"), ..post() },
            LIST,
            406,
        ),
        (
            "notification needs no acceptable type",
            RequestHead { session_id: s, accept: Some("text/html"), ..post() },
            NOTE,
            200,
        ),
        (
            "wrong content type",
            RequestHead { session_id: s, content_type: Some("text/plain"), ..post() },
            LIST,
            415,
        ),
        (
            "content type with charset",
            RequestHead {
                session_id: s,
                content_type: Some("application/json; charset=utf-8"),
                ..post()
            },
            LIST,
            200,
        ),
        ("not json", RequestHead { session_id: s, ..post() }, "{", 400),
        (
            "null id",
            RequestHead { session_id: s, ..post() },
            r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            400,
        ),
        ("initialize in batch", RequestHead { session_id: s, ..post() }, &batch_init, 400),
        (
            "evil origin",
            RequestHead { origin: Some("http://evil.example.com"), ..post() },
            INIT,
            403,
        ),
        ("null origin", RequestHead { origin: Some("null"), ..post() }, INIT, 403),
        (
            "localhost origin any port",
            RequestHead { origin: Some("http://localhost:5173"), ..post() },
            INIT,
            200,
        ),
        (
            "127.0.0.1 origin",
            RequestHead { origin: Some("http://127.0.0.1:8080"), ..post() },
            INIT,
            200,
        ),
        (
            "ipv6 loopback origin",
            RequestHead { origin: Some("https://[::1]:1"), ..post() },
            INIT,
            200,
        ),
        (
            "localhost lookalike origin",
            RequestHead { origin: Some("http://localhost.evil.com"), ..post() },
            INIT,
            403,
        ),
        ("evil host", RequestHead { host: Some("evil.example.com"), ..post() }, INIT, 403),
        (
            "loopback host with port",
            RequestHead { host: Some("127.0.0.1:8080"), ..post() },
            INIT,
            200,
        ),
        ("get without session", RequestHead::new(HttpMethod::Get), "", 400),
        (
            "get with session",
            RequestHead { session_id: s, ..RequestHead::new(HttpMethod::Get) },
            "",
            200,
        ),
        (
            "get not accepting sse",
            RequestHead {
                session_id: s,
                accept: Some("application/json"),
                ..RequestHead::new(HttpMethod::Get)
            },
            "",
            406,
        ),
        ("delete without session", RequestHead::new(HttpMethod::Delete), "", 400),
        (
            "delete with session",
            RequestHead { session_id: s, ..RequestHead::new(HttpMethod::Delete) },
            "",
            200,
        ),
        ("put", RequestHead::new(HttpMethod::Other), "", 405),
    ];
    for (name, head, body, want) in rows {
        assert_eq!(status(admit(&head, body.as_bytes(), &p)), want, "{name}");
    }
}

#[test]
fn oversized_body_is_413() {
    let p = AdmitPolicy { max_body_bytes: 10, ..AdmitPolicy::default() };
    assert_eq!(status(admit(&post(), LIST.as_bytes(), &p)), 413);
}

#[test]
fn reply_mode_follows_accept_and_preference() {
    let p = AdmitPolicy::default();
    let mode =
        |accept| match admit(&RequestHead { accept: Some(accept), ..post() }, INIT.as_bytes(), &p)
            .unwrap()
            .command
        {
            Command::Initialize { reply, .. } => reply,
            c => panic!("{c:?}"),
        };
    assert_eq!(mode("application/json, text/event-stream"), ReplyMode::Sse);
    assert_eq!(mode("application/json"), ReplyMode::Json);
    assert_eq!(mode("text/event-stream"), ReplyMode::Sse);
    // Media types are compared without case (RFC 9110 8.3.1).
    assert_eq!(mode("Application/JSON, TEXT/Event-Stream"), ReplyMode::Sse);
    assert_eq!(mode("APPLICATION/JSON"), ReplyMode::Json);
    assert_eq!(mode("Application/JSON, text/event-stream;q=0"), ReplyMode::Json);
    let json_first = AdmitPolicy { prefer_sse: false, ..AdmitPolicy::default() };
    let r = admit(&post(), INIT.as_bytes(), &json_first).unwrap();
    assert!(matches!(r.command, Command::Initialize { reply: ReplyMode::Json, .. }));
}

#[test]
fn get_with_last_event_id_is_a_resume() {
    let head = RequestHead {
        session_id: Some("s"),
        last_event_id: Some("abc"),
        ..RequestHead::new(HttpMethod::Get)
    };
    let r = admit(&head, b"", &AdmitPolicy::default()).unwrap();
    assert_eq!(
        r.command,
        Command::Resume { session: SessionId::parse("s").unwrap(), cursor: "abc".into() }
    );
}

#[test]
fn bearer_tokens_resolve_principals() {
    let p =
        AdmitPolicy { auth: Some(TokenMap::new([("tok-a", "alice")])), ..AdmitPolicy::default() };
    assert_eq!(status(admit(&post(), INIT.as_bytes(), &p)), 401);
    let bad = RequestHead { authorization: Some("Bearer nope"), ..post() };
    assert_eq!(status(admit(&bad, INIT.as_bytes(), &p)), 401);
    let good = RequestHead { authorization: Some("Bearer tok-a"), ..post() };
    assert_eq!(admit(&good, INIT.as_bytes(), &p).unwrap().principal.as_deref(), Some("alice"));
}

#[test]
fn configured_origin_and_host_are_allowed_on_top_of_localhost() {
    let p = AdmitPolicy {
        allowed_origins: vec!["https://app.example.com".into()],
        allowed_hosts: vec!["mcp.example.com".into()],
        ..AdmitPolicy::default()
    };
    let h = RequestHead {
        origin: Some("https://APP.example.com"),
        host: Some("mcp.example.com:443"),
        ..post()
    };
    assert_eq!(status(admit(&h, INIT.as_bytes(), &p)), 200);
    // Names are compared without case; another name is not let in by a shared prefix.
    let upper = RequestHead {
        origin: Some("HTTP://LOCALHOST:3000"),
        host: Some("MCP.Example.COM"),
        ..post()
    };
    assert_eq!(status(admit(&upper, INIT.as_bytes(), &p)), 200);
    let local = RequestHead { host: Some("LocalHost:8080"), ..post() };
    assert_eq!(status(admit(&local, INIT.as_bytes(), &AdmitPolicy::default())), 200);
    for (origin, host) in [
        ("https://app.example.com.evil", "mcp.example.com"),
        ("https://app.example.com", "mcp.example.co"),
    ] {
        let other = RequestHead { origin: Some(origin), host: Some(host), ..post() };
        assert_eq!(status(admit(&other, INIT.as_bytes(), &p)), 403, "{origin} {host}");
    }
}

#[test]
fn a_garbled_header_is_refused_before_anything_else() {
    let h = RequestHead {
        invalid_header: Some("Last-Event-ID"),
        session_id: Some("s"),
        ..RequestHead::new(HttpMethod::Get)
    };
    assert_eq!(
        admit(&h, b"", &AdmitPolicy::default()).unwrap_err(),
        Rejection::InvalidHeader("Last-Event-ID")
    );
}

#[test]
fn cors_preflight_needs_an_allowed_origin_and_a_requested_method_but_no_token() {
    let p =
        AdmitPolicy { auth: Some(TokenMap::new([("tok-a", "alice")])), ..AdmitPolicy::default() };
    let options = RequestHead::new(HttpMethod::Options);
    let pre = RequestHead {
        origin: Some("http://localhost:3000"),
        cors_request_method: Some("POST"),
        ..options
    };
    assert_eq!(
        admit(&pre, b"", &p).unwrap(),
        Admitted { principal: None, command: Command::Preflight, parsed_bytes: 0 }
    );
    assert_eq!(
        status(admit(&RequestHead { origin: Some("https://evil.example"), ..pre }, b"", &p)),
        403
    );
    assert_eq!(status(admit(&RequestHead { cors_request_method: None, ..pre }, b"", &p)), 405);
    assert_eq!(status(admit(&options, b"", &p)), 405);
    assert_eq!(cors_origin(&pre, &p), Some("http://localhost:3000"));
    assert_eq!(cors_origin(&RequestHead { origin: Some("https://evil.example"), ..pre }, &p), None);
}

#[test]
fn parsed_size_and_batch_bounds_are_checked_at_the_door() {
    let limits =
        MessageLimits { json_max_values: 16, batch_max_items: 2, ..MessageLimits::default() };
    let p = AdmitPolicy { limits, ..AdmitPolicy::default() };
    let s = RequestHead { session_id: Some("s"), ..post() };
    let many = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{"a":[{}0]}}}}}}"#,
        "0,".repeat(20)
    );
    assert!(matches!(
        admit(&s, many.as_bytes(), &p),
        Err(Rejection::LimitExceeded(LimitExceeded { limit: Limit::JsonValues, .. }))
    ));
    let batch = format!("[{LIST},{LIST},{LIST}]");
    let p = AdmitPolicy {
        limits: MessageLimits { batch_max_items: 2, ..MessageLimits::default() },
        ..AdmitPolicy::default()
    };
    assert!(matches!(
        admit(&s, batch.as_bytes(), &p),
        Err(Rejection::LimitExceeded(LimitExceeded { limit: Limit::BatchItems, .. }))
    ));
    let big_caps = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"x":"y"},"clientInfo":{"name":"n","version":"1"}}}"#;
    let tight = AdmitPolicy {
        limits: MessageLimits {
            handshake: limits::HandshakeLimits {
                max_values: 2,
                max_depth: 4,
                max_string_bytes: 100,
            },
            ..MessageLimits::default()
        },
        ..AdmitPolicy::default()
    };
    assert!(matches!(
        admit(&post(), big_caps.as_bytes(), &tight),
        Err(Rejection::LimitExceeded(LimitExceeded {
            limit: Limit::ClientInfo(limits::HandshakeBound::Values),
            ..
        }))
    ));
}

const MODERN_LIST: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

fn modern_post<'a>() -> RequestHead<'a> {
    RequestHead { protocol_version: Some("2026-07-28"), mcp_method: Some("tools/list"), ..post() }
}

#[test]
fn get_and_delete_under_a_modern_version_without_a_session_are_405() {
    let p = AdmitPolicy::default();
    for m in [HttpMethod::Get, HttpMethod::Delete] {
        let h = RequestHead {
            protocol_version: Some("2026-07-28"),
            accept: Some("text/event-stream"),
            ..RequestHead::new(m)
        };
        let r = admit(&h, b"", &p).unwrap_err();
        assert_eq!((r.status(), r.cause()), (405, "modern.no_session_methods"), "{m:?}");
        assert_eq!(r.headers(), vec![("Allow", "POST, OPTIONS".to_string())]);
        // With a session it is a legacy request (and that version is not a legacy one).
        let legacy = RequestHead { session_id: Some("s"), ..h };
        assert_ne!(status(admit(&legacy, b"", &p)), 405, "{m:?}");
    }
}

#[test]
fn an_unreadable_session_header_is_ignored_by_a_modern_request_and_refused_on_the_legacy_path() {
    let p = AdmitPolicy::default();
    let garbled = |h: RequestHead<'static>| RequestHead {
        invalid_session_header: Some("MCP-Session-Id"),
        ..h
    };
    assert!(matches!(
        admit(&garbled(modern_post()), MODERN_LIST.as_bytes(), &p),
        Ok(Admitted { command: Command::Modern { .. }, .. })
    ));
    assert_eq!(
        admit(&garbled(post()), LIST.as_bytes(), &p).unwrap_err(),
        Rejection::InvalidHeader("MCP-Session-Id")
    );
    let get = RequestHead {
        invalid_session_header: Some("Last-Event-ID"),
        session_id: Some("s"),
        ..RequestHead::new(HttpMethod::Get)
    };
    assert_eq!(admit(&get, b"", &p).unwrap_err(), Rejection::InvalidHeader("Last-Event-ID"));
}

#[test]
fn an_unreadable_mirrored_header_is_a_modern_header_mismatch_with_the_id_and_ignored_by_legacy() {
    let p = AdmitPolicy::default();
    let h = RequestHead { invalid_modern_header: Some("Mcp-Name"), ..modern_post() };
    let r = admit(&h, MODERN_LIST.as_bytes(), &p).unwrap_err();
    assert_eq!((r.status(), r.code(), r.id()), (400, -32020, Some(&JsonRpcId::Number(7))));
    assert!(r.to_string().contains("=?base64?"), "{r}");
    let legacy =
        RequestHead { invalid_modern_header: Some("Mcp-Name"), session_id: Some("s"), ..post() };
    assert_eq!(status(admit(&legacy, LIST.as_bytes(), &p)), 200);
}

#[test]
fn a_limit_refusal_of_a_modern_request_echoes_its_id() {
    let p = AdmitPolicy {
        limits: crate::proto::limits::MessageLimits {
            method_max_bytes: 8,
            ..crate::proto::limits::MessageLimits::default()
        },
        ..AdmitPolicy::default()
    };
    let r = admit(&modern_post(), MODERN_LIST.as_bytes(), &p).unwrap_err();
    assert_eq!((r.status(), r.cause(), r.id()), (400, "limit.length", Some(&JsonRpcId::Number(7))));
    let legacy = RequestHead { session_id: Some("s"), ..post() };
    assert_eq!(
        admit(&legacy, LIST.as_bytes(), &p).unwrap_err().id(),
        None,
        "legacy refusals are as before"
    );
}

#[test]
fn a_preflight_allows_the_mirrored_argument_headers_it_asks_for() {
    let allow = |req: Option<&str>| cors_preflight_headers(req).unwrap()[1].1.clone();
    assert_eq!(allow(None), CORS_ALLOW_HEADERS);
    let a = allow(Some(
        "content-type, mcp-param-region, Mcp-Param-Tenant_Id, x-other, mcp-param-, mcp-param-bad header",
    ));
    assert!(a.ends_with(", mcp-param-region, Mcp-Param-Tenant_Id"), "{a}");
    assert!(
        !a.contains("x-other") && !a.contains("bad"),
        "only well-formed Mcp-Param-* names are added: {a}"
    );
    assert_eq!(allow(Some("mcp-name")), CORS_ALLOW_HEADERS, "already listed");
    assert_eq!(
        allow(Some("mcp-param-a, MCP-PARAM-A")),
        format!("{CORS_ALLOW_HEADERS}, mcp-param-a"),
        "each once"
    );
}

#[test]
fn a_preflight_asking_for_more_than_64_argument_headers_is_refused() {
    let names = |n: usize| (0..n).map(|i| format!("mcp-param-a{i}")).collect::<Vec<_>>().join(", ");
    let allowed =
        cors_preflight_headers(Some(&format!("x-other, {}", names(CORS_MAX_PARAM_HEADERS))))
            .unwrap();
    assert_eq!(allowed[1].1.matches("mcp-param-").count(), CORS_MAX_PARAM_HEADERS);
    assert_eq!(
        cors_preflight_headers(Some(&names(CORS_MAX_PARAM_HEADERS + 1))),
        Err(Rejection::TooManyParamHeaders)
    );
    let repeated = vec!["mcp-param-a"; CORS_MAX_PARAM_HEADERS + 1].join(",");
    assert_eq!(
        cors_preflight_headers(Some(&repeated)),
        Err(Rejection::TooManyParamHeaders),
        "repeats count"
    );
    assert_eq!(Rejection::TooManyParamHeaders.status(), 400);
    assert!(Rejection::TooManyParamHeaders.to_string().contains("64"));
}

#[test]
fn the_accept_values_recognised_whole_read_as_their_ranges_do() {
    for v in [
        "application/json, text/event-stream",
        "text/event-stream, application/json",
        "application/json",
        "text/event-stream",
    ] {
        assert_eq!(parse_accept(Some(v)), parse_accept_ranges(v), "{v}");
    }
    assert_eq!(parse_accept(Some("application/json")), Accepts { json: true, sse: false });
    assert_eq!(parse_accept(Some("text/event-stream")), Accepts { json: false, sse: true });
}
