//! Idempotency receipts of write-tool calls: replay, attach, conflicting arguments, callers,
//! interruption with and without `idempotentHint`, and what is not keyed.

use crate::common;

use actix_web::http::StatusCode;
use common::*;
use serde_json::{Value, json};

fn is_error(msg: &Value) -> bool {
    msg["result"]["isError"] == true
}

fn marker(msg: &Value) -> &Value {
    &msg["result"]["_meta"]["io.mcp-host/idempotency"]
}

#[actix_web::test]
async fn a_completed_call_is_replayed_from_its_receipt_without_running_the_tool() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let first = c.call_keyed(1, "write", json!({"n": 1}), "k1").await.message().await;
    assert_eq!(text_of(&first), "wrote 1 #1");
    assert!(marker(&first).is_null(), "the first call is not marked");
    let again = c.call_keyed(2, "write", json!({"n": 1}), "k1").await.message().await;
    assert_eq!(text_of(&again), "wrote 1 #1", "the recorded result");
    assert_eq!(again["id"], 2, "answered under the retry's own id");
    assert_eq!(marker(&again), "replayed");
    assert_eq!(h.gate.writes(), 1, "the tool ran once");
    // A retry in a new session (after a 404, say) is the same caller's retry.
    let other = h.client("2025-06-18").await;
    assert_eq!(
        text_of(&other.call_keyed(3, "write", json!({"n": 1}), "k1").await.message().await),
        "wrote 1 #1"
    );
    assert_eq!(h.gate.writes(), 1);
}

#[actix_web::test]
async fn a_retry_while_the_call_runs_attaches_to_it_and_both_get_its_result() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut first = c.call_keyed(1, "write", json!({"n": 2, "wait": true}), "k").await;
    h.gate.started(1).await;
    // Its response head means the session has polled its call once: it is attached.
    let mut second = c.call_keyed(2, "write", json!({"n": 2, "wait": true}), "k").await;
    h.gate.open(1);
    let (a, b) = (first.message().await, second.message().await);
    assert_eq!((text_of(&a), text_of(&b)), ("wrote 2 #1", "wrote 2 #1"));
    assert_eq!((a["id"].clone(), b["id"].clone()), (json!(1), json!(2)), "each on its own stream");
    assert_eq!(marker(&b), "attached");
    assert_eq!(h.gate.writes(), 1, "one execution");
}

#[actix_web::test]
async fn the_same_key_with_other_arguments_or_another_tool_is_refused_with_a_tool_error() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    c.call_keyed(1, "write", json!({"n": 1}), "k").await.message().await;
    for (id, tool, args) in [(2, "write", json!({"n": 2})), (3, "write_idem", json!({"n": 1}))] {
        let m = c.call_keyed(id, tool, args, "k").await.message().await;
        assert!(is_error(&m), "{m}");
        assert!(text_of(&m).contains("different call"), "{m}");
    }
    // While it runs, too.
    let mut running = c.call_keyed(4, "write", json!({"n": 1, "wait": true}), "busy").await;
    h.gate.started(1).await;
    let m = c.call_keyed(5, "write", json!({"n": 9}), "busy").await.message().await;
    assert!(is_error(&m) && text_of(&m).contains("different call"), "{m}");
    h.gate.open(1);
    running.message().await;
    assert_eq!(h.gate.writes(), 2);
}

#[actix_web::test]
async fn keys_belong_to_their_caller() {
    let h = harness_with_two_callers().await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    let bob = h.client_as("2025-11-25", Some("tb")).await;
    assert_eq!(
        text_of(&alice.call_keyed(1, "write", json!({"n": 1}), "k").await.message().await),
        "wrote 1 #1"
    );
    let b = bob.call_keyed(1, "write", json!({"n": 1}), "k").await.message().await;
    assert_eq!(text_of(&b), "wrote 1 #2", "bob's key is not alice's: his call runs");
    assert!(marker(&b).is_null());
}

#[actix_web::test]
async fn a_cancelled_call_is_outcome_unknown_for_a_retry_unless_the_tool_is_idempotent() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    for (tool, key) in [("write", "a"), ("write_idem", "b")] {
        let mut r = c.call_keyed(1, tool, json!({"n": 1, "wait": true}), key).await;
        h.gate.started(1).await;
        let cancel =
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}});
        assert_eq!(c.notify(cancel).await, StatusCode::ACCEPTED);
        assert!(r.rest().await.is_empty(), "cancelled: no response");
    }
    assert_eq!(h.gate.writes(), 2);
    let unknown =
        c.call_keyed(2, "write", json!({"n": 1, "wait": true}), "a").await.message().await;
    assert!(
        is_error(&unknown) && text_of(&unknown).contains("may or may not have taken effect"),
        "{unknown}"
    );
    let mut rerun = c.call_keyed(3, "write_idem", json!({"n": 1, "wait": true}), "b").await;
    h.gate.started(1).await;
    h.gate.open(1);
    let rerun = rerun.message().await;
    assert_eq!(text_of(&rerun), "wrote 1 #3", "an idempotent tool runs again");
    assert_eq!(h.gate.writes(), 3);
}

#[actix_web::test]
async fn a_call_attached_to_a_cancelled_execution_is_told_the_outcome_is_unknown() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut first = c.call_keyed(1, "write", json!({"n": 1, "wait": true}), "k").await;
    h.gate.started(1).await;
    let mut second = c.call_keyed(2, "write", json!({"n": 1, "wait": true}), "k").await;
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}});
    assert_eq!(c.notify(cancel).await, StatusCode::ACCEPTED);
    assert!(first.rest().await.is_empty());
    let m = second.message().await;
    assert!(is_error(&m) && text_of(&m).contains("interrupted"), "{m}");
    assert_eq!(h.gate.writes(), 1);
}

#[actix_web::test]
async fn calls_without_a_key_and_read_only_tools_are_not_keyed() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    c.call_tool(1, "write", json!({"n": 1})).await.message().await;
    c.call_tool(2, "write", json!({"n": 1})).await.message().await;
    assert_eq!(h.gate.writes(), 2, "no key: every call runs");
    let e1 = c.call_keyed(3, "echo_ro", json!({"text": "a"}), "k").await.message().await;
    let e2 = c.call_keyed(4, "echo_ro", json!({"text": "b"}), "k").await.message().await;
    assert_eq!((text_of(&e1), text_of(&e2)), ("a", "b"), "a read-only tool ignores the key");
}

#[actix_web::test]
async fn a_key_that_is_not_a_short_string_is_invalid_params() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    for key in [json!(7), json!(""), json!("k".repeat(129))] {
        let body = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write","arguments":{},"_meta":{"io.mcp-host/idempotencyKey":key}}});
        let m = c.request(body).await.message().await;
        assert_eq!(m["error"]["code"], -32602, "{m}");
    }
    assert_eq!(h.gate.writes(), 0);
}
