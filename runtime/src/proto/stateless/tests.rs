use serde_json::{Value, json};

use super::*;

fn meta(extra: Value) -> Value {
    let mut m = json!({meta::PROTOCOL_VERSION: VERSION, meta::CLIENT_CAPABILITIES: {}});
    if let (Value::Object(m), Value::Object(e)) = (&mut m, extra) {
        m.extend(e);
    }
    m
}

/// [`is_modern`] and [`check`] on a `params` value, as the parser would have split it.
fn is_modern_v(header: Option<&str>, params: Option<&Value>) -> bool {
    is_modern(header, params.and_then(WireMeta::of).as_ref())
}

fn check_v(
    h: &ModernHead<'_>,
    method: &str,
    params: Option<&Value>,
) -> Result<ModernMeta, ModernError> {
    check(h, method, params, params.and_then(WireMeta::of).map(Box::new))
}

fn head<'a>(
    version: Option<&'a str>,
    method: Option<&'a str>,
    name: Option<&'a str>,
) -> ModernHead<'a> {
    ModernHead { protocol_version: version, method, name, unreadable: None }
}

#[test]
fn a_request_is_modern_by_its_meta_or_a_non_legacy_version_header() {
    assert!(is_modern_v(None, Some(&json!({"_meta": {meta::PROTOCOL_VERSION: "2026-07-28"}}))));
    assert!(
        is_modern_v(Some("2026-07-28"), None),
        "header alone: modern (then refused for its missing _meta)"
    );
    assert!(is_modern_v(
        Some("v999.0.0"),
        Some(&json!({"_meta": {meta::PROTOCOL_VERSION: "v999.0.0"}}))
    ));
    assert!(
        !is_modern_v(Some("2099-01-01"), Some(&json!({"protocolVersion": "2025-11-25"}))),
        "a legacy initialize negotiates in its body"
    );
    assert!(
        !is_modern_v(Some("2025-11-25"), Some(&json!({"name": "x"}))),
        "a legacy session's request"
    );
    assert!(!is_modern_v(None, None), "no header, no meta: legacy (2025-03-26 assumed)");
    assert!(!is_modern_v(None, Some(&json!({"_meta": {"progressToken": 1}}))));
}

#[test]
fn each_modern_rule_gives_its_error_in_the_documented_order() {
    let ok = head(Some(VERSION), Some("tools/list"), None);
    let p = |m: Value| Some(json!({"_meta": m}));
    assert!(check_v(&ok, "tools/list", p(meta(json!({}))).as_ref()).is_ok());
    let err = |h: &ModernHead<'_>, method: &str, params: Option<Value>| {
        check_v(h, method, params.as_ref()).unwrap_err()
    };
    assert!(matches!(
        err(&head(None, Some("tools/list"), None), "tools/list", p(meta(json!({})))),
        ModernError::HeaderMismatch(_)
    ));
    assert!(
        matches!(err(&ok, "tools/list", Some(json!({}))), ModernError::InvalidMeta(m) if m.contains("protocolVersion"))
    );
    assert!(
        matches!(err(&ok, "tools/list", p(json!({meta::PROTOCOL_VERSION: VERSION}))), ModernError::InvalidMeta(m) if m.contains("clientCapabilities"))
    );
    // A mismatch comes before an unsupported version (missing _meta fields come first: above).
    assert!(matches!(
        err(&ok, "tools/list", p(meta(json!({meta::PROTOCOL_VERSION: "v999"})))),
        ModernError::HeaderMismatch(_)
    ));
    assert!(
        matches!(
            err(&ok, "tools/list", p(json!({meta::CLIENT_CAPABILITIES: {}, "x": 1}))),
            ModernError::InvalidMeta(_)
        ),
        "missing version in _meta: -32602, not a mismatch"
    );
    let v999 = head(Some("v999"), Some("tools/list"), None);
    assert_eq!(
        err(&v999, "tools/list", p(meta(json!({meta::PROTOCOL_VERSION: "v999"})))),
        ModernError::UnsupportedVersion("v999".into())
    );
    assert!(matches!(
        err(&ok, "tools/list", p(meta(json!({meta::CLIENT_CAPABILITIES: []})))),
        ModernError::InvalidMeta(_)
    ));
    assert!(matches!(
        err(&ok, "tools/list", p(meta(json!({meta::LOG_LEVEL: "loud"})))),
        ModernError::InvalidMeta(_)
    ));
    assert!(
        matches!(err(&head(Some(VERSION), None, None), "tools/list", p(meta(json!({})))), ModernError::HeaderMismatch(m) if m.contains("Mcp-Method"))
    );
    assert!(
        matches!(
            err(&head(Some(VERSION), Some("TOOLS/LIST"), None), "tools/list", p(meta(json!({})))),
            ModernError::HeaderMismatch(_)
        ),
        "values are case-sensitive"
    );
    for removed in REMOVED_METHODS {
        assert_eq!(
            err(&head(Some(VERSION), Some(removed), None), removed, p(meta(json!({})))),
            ModernError::MethodNotFound(removed.into())
        );
    }
}

#[test]
fn mcp_name_mirrors_the_tool_prompt_or_uri_after_decoding() {
    let call = |name: Option<&str>| {
        check_v(
            &head(Some(VERSION), Some("tools/call"), name),
            "tools/call",
            Some(&json!({"name": "élan", "_meta": meta(json!({}))})),
        )
    };
    assert!(call(Some("=?base64?w6lsYW4=?=")).is_ok());
    assert!(matches!(call(None), Err(ModernError::HeaderMismatch(m)) if m.contains("Mcp-Name")));
    assert!(matches!(call(Some("other")), Err(ModernError::HeaderMismatch(_))));
    let read = check_v(
        &head(Some(VERSION), Some("resources/read"), Some("test://x")),
        "resources/read",
        Some(&json!({"uri": "test://x", "_meta": meta(json!({}))})),
    );
    assert!(read.is_ok());
}

#[test]
fn log_level_and_capabilities_come_from_meta() {
    let m = check_v(&head(Some(VERSION), Some("tools/list"), None), "tools/list", Some(&json!({"_meta": meta(json!({meta::LOG_LEVEL: "warning", meta::CLIENT_CAPABILITIES: {"sampling": {}}}))}))).unwrap();
    assert_eq!(m.log_level, Some(LogLevel::Warning));
    assert_eq!(m.capabilities, json!({"sampling": {}}));
}

#[test]
fn a_result_encoded_with_its_tail_equals_the_completed_result() {
    let info = json!({"name": "s", "version": "1"});
    let (list, read) =
        (CacheHints { ttl_ms: 300, public: true }, CacheHints { ttl_ms: 0, public: false });
    let tails = ResultTails::new(&info, list, read);
    let cases = [
        ("tools/call", json!({"content": [{"type": "text", "text": "h\"i"}]})),
        ("tools/call", json!({})),
        ("tools/call", json!({"content": [], "_meta": {"x": 1}})),
        ("tools/call", json!({"resultType": "input_required", "inputRequests": {}})),
        ("tools/list", json!({"tools": []})),
        ("server/discover", json!({"supportedVersions": [VERSION]})),
        ("resources/read", json!({"contents": []})),
    ];
    for (method, result) in cases {
        let hints = if method == "resources/read" { read } else { list };
        let fast: Value = serde_json::from_slice(&tails.encode(method, &result)).unwrap();
        assert_eq!(
            fast,
            complete_result(method, result.clone(), &info, hints),
            "{method} {result}"
        );
    }
}

#[test]
fn a_reply_sent_as_text_gets_the_same_tail_as_its_value() {
    let info = json!({"name": "s", "version": "1"});
    let (list, read) =
        (CacheHints { ttl_ms: 300, public: true }, CacheHints { ttl_ms: 0, public: false });
    let tails = ResultTails::new(&info, list, read);
    let cases = [
        ("tools/call", r#"{"content":[{"type":"text","text":"h\"i"}],"isError":true}"#),
        ("tools/call", "{}"),
        ("tools/call", "{ }"),
        // The keys a complete result gets: merged the slow way, the handler's kept.
        ("tools/call", r#"{"content":[],"_meta":{"x":1}}"#),
        ("tools/call", r#"{"resultType":"input_required","inputRequests":{}}"#),
        // Only looking like them (nested, or inside a string, where its quotes are escaped):
        // the same answer either way.
        ("tools/call", r#"{"content":[{"type":"text","text":"\"_meta\""}]}"#),
        ("tools/call", r#"{"structuredContent":{"resultType":1}}"#),
        ("resources/read", r#"{"contents":[]}"#),
        ("tools/list", r#"{"tools":[]}"#),
        // Not an object: as its value would be.
        ("tools/call", "[1]"),
    ];
    for (method, text) in cases {
        let value: Value = serde_json::from_str(text).unwrap();
        let raw = Reply::of(&*serde_json::value::RawValue::from_string(text.into()).unwrap());
        let sent: Value =
            serde_json::from_slice(&tails.encode_reply(method, &raw).unwrap()).unwrap();
        let from_value: Value = serde_json::from_slice(&tails.encode(method, &value)).unwrap();
        assert_eq!(sent, from_value, "{method} {text}");
        let as_value = Reply::Value(value.clone());
        assert_eq!(tails.encode_reply(method, &as_value).unwrap(), tails.encode(method, &value));
        // The whole response: the envelope around that result, in one allocation of its
        // length when the tail is appended to the text (a short id and one past the stack's
        // 48 bytes alike).
        for id in [JsonRpcId::Number(7), JsonRpcId::String("i".repeat(60).into())] {
            let whole = tails.encode_response(&id, method, &raw).unwrap();
            let expected = crate::proto::jsonrpc::encode_result_raw(
                &id,
                &tails.encode_reply(method, &raw).unwrap(),
            );
            assert_eq!(whole, expected, "{method} {text}");
            let m = whole.try_into_mut().expect("not shared");
            assert_eq!(m.capacity(), m.len(), "{method} {text}");
        }
    }
    // The text itself is sent, its tail appended (not read back and written sorted).
    let plain = String::from_utf8(tails.plain.clone()).unwrap();
    let text = r#"{"z":1,"content":[{"type":"text","text":"\"_meta\""}]}"#;
    let raw = Reply::of(&*serde_json::value::RawValue::from_string(text.into()).unwrap());
    assert_eq!(
        String::from_utf8(tails.encode_reply("tools/call", &raw).unwrap()).unwrap(),
        format!(r#"{{"z":1,"content":[{{"type":"text","text":"\"_meta\""}}],{plain}}}"#)
    );
    let empty = Reply::of(&json!({}));
    assert_eq!(
        tails.encode_reply("tools/call", &empty).unwrap(),
        format!("{{{plain}}}").into_bytes()
    );
}

#[test]
fn a_reply_too_deep_to_read_back_is_an_error_not_null() {
    let info = json!({"name": "s", "version": "1"});
    let hints = CacheHints { ttl_ms: 0, public: false };
    let tails = ResultTails::new(&info, hints, hints);
    // Written, 200 levels; read back, past serde_json's 128.
    let deep = crate::proto::jsonrpc::nested_arrays(200);
    let reply = Reply::of(&json!({"structuredContent": deep.clone()}));
    assert!(matches!(reply, Reply::Raw(_)));
    let code = |e: crate::proto::jsonrpc::ErrorObject| e.code;
    assert_eq!(
        reply.clone().into_value().map_err(code),
        Err(crate::proto::jsonrpc::code::INTERNAL_ERROR)
    );
    assert!(reply != json!(null));
    // Sent as it is when no tail needs merging; an error when one does.
    assert!(tails.encode_reply("tools/call", &reply).is_ok());
    let merged = Reply::of(&json!({"_meta": {}, "structuredContent": deep}));
    assert_eq!(
        tails.encode_reply("tools/call", &merged).map_err(code),
        Err(crate::proto::jsonrpc::code::INTERNAL_ERROR)
    );
}

#[test]
fn a_reply_is_its_value_whether_kept_as_text_or_as_a_value() {
    let v = json!({"content": [{"type": "text", "text": "x"}], "isError": false});
    let raw = Reply::of(&v);
    assert!(matches!(raw, Reply::Raw(_)));
    assert!(raw == v);
    assert_eq!(raw.clone().into_value().unwrap(), v);
    assert_eq!(*raw.to_value().unwrap(), v);
    assert_eq!(serde_json::to_value(&raw).unwrap(), v);
    assert_eq!(Reply::from(v.clone()).into_value().unwrap(), v);
    assert_eq!(
        crate::proto::jsonrpc::encode_result(&crate::proto::JsonRpcId::Number(7), &raw),
        crate::proto::jsonrpc::encode_result(&crate::proto::JsonRpcId::Number(7), &v)
    );
}
