use serde_json::{Value, json};

use super::*;

const LIMITS: FilterLimits = FilterLimits { max_uris: 4, max_uri_bytes: 32 };
const ALL: Offered = Offered { lists: [true; 3], resource_updates: true };

fn filter(n: Value) -> Result<Filter, String> {
    Filter::parse(Some(&json!({ "notifications": n })), LIMITS)
}

fn frames(s: &mut Subscription) -> Vec<Value> {
    std::iter::from_fn(|| s.poll_frame()).map(|b| serde_json::from_slice(&b).unwrap()).collect()
}

fn sub(id: JsonRpcId, n: Value, offered: &Offered) -> Subscription {
    let honoured = filter(n).unwrap().honoured(offered, |u| u.starts_with("test://"));
    Subscription::new(id, honoured, ListVersions::default(), json!({"name": "t", "version": "1"}))
}

#[test]
fn the_acknowledgement_comes_first_with_the_honoured_filter_and_the_id_as_sent() {
    // Prompts are not offered; an unknown URI is dropped.
    let offered = Offered { lists: [true, false, true], resource_updates: true };
    let mut s = sub(
        JsonRpcId::Number(1_790_000_000_000),
        json!({"toolsListChanged": true, "promptsListChanged": true, "resourceSubscriptions": ["test://a", "file:///x"]}),
        &offered,
    );
    let f = frames(&mut s);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0]["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        f[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(1_790_000_000_000_i64),
        "a number stays a number"
    );
    assert_eq!(
        f[0]["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["test://a"]})
    );
    let mut s = sub(JsonRpcId::String("listen-1".into()), json!({}), &ALL);
    assert_eq!(
        frames(&mut s)[0]["params"],
        json!({"_meta": {"io.modelcontextprotocol/subscriptionId": "listen-1"}, "notifications": {}})
    );
}

#[test]
fn only_opted_in_changes_are_sent_each_tagged_with_the_subscription_id() {
    let mut s = sub(
        JsonRpcId::Number(7),
        json!({"promptsListChanged": true, "resourceSubscriptions": ["test://a"]}),
        &ALL,
    );
    let _ack = frames(&mut s);
    let mut v = ListVersions::default();
    v.bump(ListKind::Tools);
    s.handle_lists(v);
    s.handle_updated("test://b");
    assert!(frames(&mut s).is_empty(), "tools list changes and other resources were not asked for");
    v.bump(ListKind::Prompts);
    s.handle_lists(v);
    s.handle_updated("test://a");
    s.handle_updated("test://a/part");
    s.handle_updated("test://ab");
    let f = frames(&mut s);
    let methods: Vec<&str> = f.iter().map(|m| m["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "notifications/prompts/list_changed",
            "notifications/resources/updated",
            "notifications/resources/updated"
        ]
    );
    assert_eq!(
        (f[1]["params"]["uri"].as_str(), f[2]["params"]["uri"].as_str()),
        (Some("test://a"), Some("test://a/part")),
        "a sub-resource, not a longer name"
    );
    for m in &f {
        assert_eq!(m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7, "{m}");
    }
}

#[test]
fn list_changes_coalesce_and_changes_before_the_subscription_are_not_announced() {
    let mut before = ListVersions::default();
    before.bump(ListKind::Tools);
    let honoured = filter(json!({"toolsListChanged": true})).unwrap().honoured(&ALL, |_| true);
    let mut s = Subscription::new(JsonRpcId::Number(1), honoured, before, Value::Null);
    let _ack = frames(&mut s);
    s.handle_lists(before);
    assert!(frames(&mut s).is_empty());
    let mut v = before;
    v.bump(ListKind::Tools);
    v.bump(ListKind::Tools);
    s.handle_lists(v);
    assert_eq!(
        frames(&mut s).len(),
        1,
        "two changes the client had not been told of: one notification"
    );
}

#[test]
fn missed_updates_announce_every_subscribed_uri() {
    let mut s =
        sub(JsonRpcId::Number(1), json!({"resourceSubscriptions": ["test://a", "test://b"]}), &ALL);
    let _ack = frames(&mut s);
    s.handle_missed_updates();
    let uris: Vec<Value> = frames(&mut s).iter().map(|m| m["params"]["uri"].clone()).collect();
    assert_eq!(uris, [json!("test://a"), json!("test://b")]);
}

#[test]
fn updates_counted_as_missed_in_the_versions_announce_every_subscribed_uri_once() {
    let mut s =
        sub(JsonRpcId::Number(1), json!({"resourceSubscriptions": ["test://a", "test://b"]}), &ALL);
    let _ack = frames(&mut s);
    let mut v = ListVersions::default();
    v.bump_missed_updates();
    s.handle_lists(v);
    let uris: Vec<Value> = frames(&mut s).iter().map(|m| m["params"]["uri"].clone()).collect();
    assert_eq!(uris, [json!("test://a"), json!("test://b")]);
    s.handle_lists(v);
    assert!(frames(&mut s).is_empty(), "told once per miss");
}

#[test]
fn the_server_ends_a_subscription_with_the_completion_result_and_then_sends_nothing() {
    let mut s = sub(JsonRpcId::String("l".into()), json!({"toolsListChanged": true}), &ALL);
    let mut v = ListVersions::default();
    v.bump(ListKind::Tools);
    s.handle_lists(v);
    s.handle_end();
    assert!(!s.is_finished(), "queued frames go out first");
    let f = frames(&mut s);
    assert_eq!(f.len(), 3);
    assert_eq!(f[2]["id"], "l");
    assert_eq!(f[2]["result"]["resultType"], "complete");
    assert_eq!(f[2]["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "l");
    assert_eq!(f[2]["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "t");
    assert!(s.is_finished());
    v.bump(ListKind::Tools);
    s.handle_lists(v);
    s.handle_end();
    assert!(frames(&mut s).is_empty(), "nothing after the completion");
}

#[test]
fn a_malformed_or_oversized_filter_is_refused_with_a_reason() {
    assert!(Filter::parse(Some(&json!({})), LIMITS).unwrap_err().contains("notifications"));
    assert!(filter(json!({"toolsListChanged": "yes"})).unwrap_err().contains("toolsListChanged"));
    assert!(filter(json!({"resourceSubscriptions": "test://a"})).is_err());
    assert!(filter(json!({"resourceSubscriptions": [1]})).is_err());
    assert!(filter(json!({"resourceSubscriptions": ["test://1", "test://2", "test://3", "test://4", "test://5"]})).unwrap_err().contains("at most 4"));
    assert!(filter(json!({"resourceSubscriptions": ["x".repeat(33)]})).is_err());
    assert!(filter(json!({"resourceSubscriptions": [""]})).is_err());
    let f = filter(
        json!({"resourceSubscriptions": ["test://a", "test://a"], "toolsListChanged": false}),
    )
    .unwrap();
    assert_eq!(
        f.to_value(),
        json!({"resourceSubscriptions": ["test://a"]}),
        "duplicates once; false flags are not echoed"
    );
}

#[test]
fn nothing_is_honoured_that_the_server_does_not_offer() {
    let f = filter(json!({"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true, "resourceSubscriptions": ["test://a"]})).unwrap();
    assert_eq!(f.honoured(&Offered::default(), |_| true).to_value(), json!({}));
}
