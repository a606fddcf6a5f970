use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn single(body: &str) -> Result<Message, ParseError> {
    match parse_body(body.as_bytes())? {
        Incoming::Single(m) => Ok(m),
        Incoming::Batch(_) => panic!("unexpected batch"),
    }
}

#[test]
fn request_notification_response_are_classified() {
    assert!(matches!(
        single(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
        Ok(Message::Request { .. })
    ));
    assert!(matches!(
        single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        Ok(Message::Notification { .. })
    ));
    assert!(matches!(
        single(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
        Ok(Message::Response { .. })
    ));
    assert!(matches!(
        single(r#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"x"}}"#),
        Ok(Message::ErrorResponse { .. })
    ));
}

#[test]
fn null_request_id_is_rejected_not_treated_as_notification() {
    let err = single(r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#).unwrap_err();
    assert!(matches!(err, ParseError::Invalid { id: None, .. }));
    assert_eq!(err.to_error_object().code, code::INVALID_REQUEST);
}

#[test]
fn string_and_number_ids_keep_their_type() {
    let Message::Request { id, .. } = single(r#"{"jsonrpc":"2.0","id":"7","method":"m"}"#).unwrap()
    else {
        panic!()
    };
    assert_eq!(id, JsonRpcId::String("7".into()));
    let Message::Request { id, .. } = single(r#"{"jsonrpc":"2.0","id":7,"method":"m"}"#).unwrap()
    else {
        panic!()
    };
    assert_eq!(id, JsonRpcId::Number(7));
}

#[test]
fn wrong_version_keeps_readable_id_for_the_error() {
    let err = single(r#"{"jsonrpc":"1.0","id":5,"method":"m"}"#).unwrap_err();
    assert_eq!(err.id(), Some(&JsonRpcId::Number(5)));
}

#[test]
fn only_the_string_2_0_is_the_version_whether_escaped_batched_or_missing() {
    let reason = |body: &str| match parse_body(body.as_bytes()) {
        Err(ParseError::Invalid { reason, .. }) => reason,
        other => panic!("{body}: {other:?}"),
    };
    assert!(single(r#"{"jsonrpc":"2\u002e0","id":1,"method":"m"}"#).is_ok());
    assert!(parse_body(br#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#).is_ok());
    for wrong in [
        r#"{"id":1,"method":"m"}"#,
        r#"{"jsonrpc":null,"id":1,"method":"m"}"#,
        r#"{"jsonrpc":"2.0 ","id":1,"method":"m"}"#,
        r#"[{"jsonrpc":"1.0","id":1,"method":"m"}]"#,
    ] {
        assert_eq!(reason(wrong), "jsonrpc must be \"2.0\"", "{wrong}");
    }
    // Not a string at all: the object is not a JSON-RPC message.
    assert_eq!(reason(r#"{"jsonrpc":2.0,"id":1,"method":"m"}"#), "not a JSON-RPC object");
}

#[test]
fn invalid_json_is_a_parse_error_without_id() {
    let err = parse_body(b"{not json").unwrap_err();
    assert!(matches!(err, ParseError::Json(_)));
    assert_eq!(err.id(), None);
    assert_eq!(err.to_error_object().code, code::PARSE_ERROR);
}

#[test]
fn scalar_params_and_empty_batch_are_invalid() {
    assert!(single(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#).is_err());
    assert!(matches!(parse_body(b"[]"), Err(ParseError::Invalid { .. })));
    assert!(matches!(parse_body(b"42"), Err(ParseError::Invalid { .. })));
}

#[test]
fn batch_is_parsed_in_order() {
    let Incoming::Batch(items) =
        parse_body(br#"[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"b"}]"#)
            .unwrap()
    else {
        panic!()
    };
    assert_eq!(items.len(), 2);
    assert!(items[0].is_request());
    assert!(!items[1].is_request());
}

#[test]
fn error_encoding_omits_unreadable_id() {
    let bytes = encode_error(None, &ErrorObject::new(code::PARSE_ERROR, "Parse error"));
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(v.get("id").is_none(), "id must be omitted, not null: {v}");
}

fn arb_id() -> impl Strategy<Value = JsonRpcId> {
    prop_oneof![
        any::<i64>().prop_map(JsonRpcId::Number),
        "[ -~]{0,24}".prop_map(|s| JsonRpcId::String(s.into())),
    ]
}

proptest! {
    #[test]
    fn parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_body(&bytes);
    }

    #[test]
    fn encoded_request_round_trips(id in arb_id(), method in "[a-z/]{1,20}", n in any::<i32>()) {
        let bytes = encode_request(&id, &method, Some(&json!({"n": n})));
        let parsed = parse_body(&bytes).unwrap();
        prop_assert_eq!(parsed, Incoming::Single(Message::Request {
            id, method, params: Some(json!({"n": n})), meta: None,
        }));
    }

    #[test]
    fn a_text_reply_is_the_same_response_in_one_buffer_of_its_exact_length(
        id in prop_oneof![arb_id(), "\\PC{20,60}".prop_map(|s| JsonRpcId::String(s.into()))],
        s in "\\PC{0,40}",
    ) {
        let result = json!({"content": [{"type": "text", "text": s}]});
        let reply = Reply::of(&result);
        let bytes = encode_reply(&id, &reply);
        prop_assert_eq!(&bytes, &encode_result(&id, &result));
        // A Vec whose length is its capacity becomes Bytes without a shared header: such
        // Bytes turned back into a Vec reuse its buffer, with no room to spare.
        let v: Vec<u8> = bytes.into();
        prop_assert_eq!(v.len(), v.capacity());
    }

    #[test]
    fn encoded_result_round_trips(id in arb_id(), s in "[ -~]{0,32}") {
        let bytes = encode_result(&id, &json!({"s": s}));
        let parsed = parse_body(&bytes).unwrap();
        prop_assert_eq!(parsed, Incoming::Single(Message::Response { id, result: json!({"s": s}) }));
    }

    #[test]
    fn mutated_valid_messages_never_panic(cut in 0usize..60, flip in any::<u8>()) {
        let mut bytes = br#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"a":[1,2]}}"#.to_vec();
        let i = cut % bytes.len();
        bytes[i] ^= flip;
        let _ = parse_body(&bytes);
    }
}

#[test]
fn progress_token_is_read_from_params_meta_only() {
    assert_eq!(progress_token(&json!({"_meta": {"progressToken": "t-1"}})), Some(&json!("t-1")));
    assert_eq!(progress_token(&json!({"_meta": {"progressToken": 7}})), Some(&json!(7)));
    assert_eq!(progress_token(&json!({"progressToken": "t-1"})), None);
    assert_eq!(progress_token(&json!({"_meta": ["progressToken"]})), None);
    assert_eq!(progress_token(&json!({"_meta": {}})), None);
}

#[test]
fn the_modern_meta_keys_are_read_apart_and_the_rest_of_params_is_kept() {
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":{}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/logLevel":"info"}}}"#;
    let Ok(Incoming::Single(Message::Request { params, meta, .. })) = parse_body(body) else {
        panic!("not a request")
    };
    assert_eq!(
        params,
        Some(json!({"name": "t", "_meta": {"progressToken": 7}})),
        "other _meta keys stay"
    );
    let m = meta.expect("modern keys");
    assert_eq!(m.protocol_version, Some(json!("2026-07-28")));
    assert_eq!(m.client_capabilities, Some(json!({"sampling": {}})));
    assert_eq!((m.client_info_is_object, m.log_level.clone()), (Some(true), Some(json!("info"))));
    assert_eq!(
        Some(*m),
        WireMeta::of(&serde_json::from_slice::<Value>(body).unwrap()["params"]),
        "the same as reading them from a Value"
    );
    // Only modern keys: _meta goes; a _meta that is not an object stays as it is.
    let only = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":5,"io.modelcontextprotocol/clientInfo":[1]}}}"#;
    let Ok(Incoming::Single(Message::Request { params, meta, .. })) = parse_body(only) else {
        panic!()
    };
    assert_eq!(params, Some(json!({})));
    let m = meta.unwrap();
    assert_eq!(
        (m.protocol_version, m.client_info_is_object),
        (Some(json!(5)), Some(false)),
        "types are checked later, not here"
    );
    let odd = br#"{"jsonrpc":"2.0","method":"n","params":{"_meta":"x"}}"#;
    assert_eq!(
        parse_body(odd).unwrap(),
        Incoming::Single(Message::Notification {
            method: "n".into(),
            params: Some(json!({"_meta": "x"})),
            meta: None
        })
    );
    // params itself: an array is kept, null and scalars are refused as before.
    assert!(matches!(
        parse_body(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1,{"_meta":{}}]}"#),
        Ok(Incoming::Single(Message::Request { params: Some(Value::Array(_)), .. }))
    ));
    for p in ["null", "1", "\"s\"", "true"] {
        let b = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{p}}}"#);
        assert!(
            matches!(
                parse_body(b.as_bytes()),
                Err(ParseError::Invalid { reason: "params must be an object or array", .. })
            ),
            "{p}"
        );
    }
    // In a batch too.
    let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/logLevel":"debug"}}}]"#;
    let Ok(Incoming::Batch(ms)) = parse_body(batch) else { panic!() };
    assert!(
        matches!(&ms[0], Message::Request { meta: Some(m), .. } if m.log_level == Some(json!("debug")))
    );
}
