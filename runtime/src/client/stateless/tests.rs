use serde_json::json;

use super::*;

#[test]
fn every_request_carries_its_version_capabilities_and_identity_beside_the_callers_meta() {
    let p = request_params(
        Some(&json!({"name": "t", "_meta": {"progressToken": 7}})),
        &json!({"sampling": {}}),
        &json!({"name": "c", "version": "1"}),
    );
    assert_eq!(p["name"], "t");
    assert_eq!(p["_meta"]["progressToken"], 7);
    assert_eq!(p["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
    assert_eq!(p["_meta"]["io.modelcontextprotocol/clientCapabilities"], json!({"sampling": {}}));
    assert_eq!(p["_meta"]["io.modelcontextprotocol/clientInfo"]["name"], "c");
    assert!(request_params(None, &json!({}), &json!({}))["_meta"].is_object());
}

#[test]
fn headers_mirror_method_name_and_annotated_arguments_as_the_server_checks_them() {
    let schema = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "n": {"type": "integer", "x-mcp-header": "N"},
        "flag": {"type": "boolean", "x-mcp-header": "Flag"},
        "unset": {"type": "string", "x-mcp-header": "Unset"}}});
    let list = json!({"tools": [{"name": "t", "inputSchema": schema}, {"name": "plain", "inputSchema": {"type": "object"}}]});
    let mirrored = header_params_of_tools(&list);
    assert_eq!(mirrored.len(), 1, "only annotated tools");
    let params = json!({"name": "t", "arguments": {"region": "élève", "n": 42.0, "flag": true}});
    let h = request_headers("tools/call", &params, &mirrored[0].1);
    let get = |k: &str| h.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("MCP-Protocol-Version"), Some("2026-07-28"));
    assert_eq!(get("Mcp-Method"), Some("tools/call"));
    assert_eq!(get("Mcp-Name"), Some("t"));
    assert_eq!(get("Mcp-Param-N"), Some("42"));
    assert_eq!(get("Mcp-Param-Flag"), Some("true"));
    assert!(get("Mcp-Param-Unset").is_none(), "an absent argument has no header");
    // What the server's own check accepts.
    let lower: Vec<(String, String)> =
        h.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
    let found = |name: &str| {
        lower.iter().find(|(k, _)| *k == format!("mcp-param-{name}")).map(|(_, v)| v.as_str())
    };
    crate::proto::stateless::headers::check_params(&mirrored[0].1, params.get("arguments"), found)
        .unwrap();
    let read = request_headers("resources/read", &json!({"uri": "file:///a b"}), &[]);
    assert!(read.contains(&("Mcp-Name".to_owned(), "file:///a b".to_owned())));
}

#[test]
fn discover_tells_a_modern_server_a_modern_refusal_and_anything_else_apart() {
    let ok = br#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}"#;
    assert_eq!(discovered(200, ok), Discovered::Modern(json!({"tools": {}})));
    let refusal = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"unsupported"}}"#;
    assert!(
        matches!(discovered(400, refusal), Discovered::ModernRefusal(m) if m.contains("-32022"))
    );
    assert_eq!(discovered(400, br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: missing MCP-Session-Id header"}}"#), Discovered::NotModern);
    assert_eq!(discovered(404, b""), Discovered::NotModern);
    let legacy_params = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid request parameters"}}"#;
    assert_eq!(
        discovered(200, legacy_params),
        Discovered::NotModern,
        "a legacy server's -32602 is no modern refusal"
    );
    assert_eq!(
        discovered(400, legacy_params),
        Discovered::NotModern,
        "nor on a 400 unless it is about _meta"
    );
    let missing_meta = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params: missing _meta keys: x"}}"#;
    assert!(matches!(discovered(400, missing_meta), Discovered::ModernRefusal(_)));
    assert_eq!(discovered(200, refusal), Discovered::NotModern, "a refusal is a 400");
    let other_version = br#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2099-01-01"],"capabilities":{}}}"#;
    assert_eq!(discovered(200, other_version), Discovered::NotModern);
}

#[test]
fn an_input_required_result_becomes_the_next_rounds_params() {
    let r = round_of(
        json!({"resultType": "input_required", "inputRequests": {"k": {"method": "roots/list", "params": {}}}, "requestState": "v1.x.y"}),
    );
    let Round::InputRequired { requests, state } = r else { panic!("not input_required") };
    assert_eq!(requests["k"]["method"], "roots/list");
    let first = json!({"name": "t", "inputResponses": {"old": 1}, "_meta": {}});
    let mut answers = Map::new();
    answers.insert("k".into(), json!({"roots": []}));
    let next = next_round(&first, answers, state);
    assert_eq!(next["inputResponses"], json!({"k": {"roots": []}}), "this round's answers only");
    assert_eq!(next["requestState"], "v1.x.y");
    assert_eq!(next["name"], "t");
    assert!(matches!(
        round_of(json!({"resultType": "complete", "content": []})),
        Round::Complete(_)
    ));
    assert!(
        matches!(round_of(json!({"content": []})), Round::Complete(_)),
        "no resultType: complete"
    );
}

#[test]
fn only_a_param_header_mismatch_asks_for_the_tools_list_again() {
    assert!(is_param_header_mismatch(-32020, "Header mismatch: Mcp-Param-Region does not match"));
    assert!(!is_param_header_mismatch(-32020, "Header mismatch: missing Mcp-Method header"));
    assert!(!is_param_header_mismatch(-32602, "Mcp-Param-Region"));
}
