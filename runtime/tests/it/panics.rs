//! A tool that panics ends its own call, not its session: the call is answered with the
//! internal error (`-32603`, generic text), the session's other requests go on, and a keyed
//! call's receipt reads "outcome unknown" (it was interrupted), not a stored error.

use crate::common;

use common::*;
use serde_json::{Value, json};

fn internal_error(m: &Value) {
    assert_eq!(
        (&m["error"]["code"], &m["error"]["message"]),
        (&json!(-32603), &json!("Internal error")),
        "{m}"
    );
}

#[actix_web::test]
async fn a_panicking_tool_call_gets_internal_error_and_its_session_serves_the_others() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    for (n, when) in [(1, "call"), (2, "poll"), (3, "later")] {
        // Another request of the session, on a stream of its own, runs across the panic.
        let mut running = c.call_tool(10 + n, "gated", json!({})).await;
        h.gate.started(1).await;
        internal_error(&c.call_tool(n, "panics", json!({"when": when})).await.message().await);
        h.gate.open(1);
        let rest = running.rest().await;
        assert_eq!(text_of(rest.last().unwrap()), "done", "{when}: {rest:?}");
        let next = c.call_tool(20 + n, "echo", json!({"text": "still here"})).await.message().await;
        assert_eq!(text_of(&next), "still here", "{when}");
    }
}

#[actix_web::test]
async fn a_panicking_modern_call_gets_internal_error_and_the_server_serves_the_next() {
    let h = harness().await;
    for (n, when) in [(1, "call"), (2, "poll"), (3, "later")] {
        let mut r = h
            .send(modern(n, "tools/call", json!({"name": "panics", "arguments": {"when": when}})))
            .await;
        internal_error(&r.json().await);
        let mut next = h
            .send(modern(
                10 + n,
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "still here"}}),
            ))
            .await;
        assert_eq!(text_of(&next.json().await), "still here", "{when}");
    }
}

#[actix_web::test]
async fn a_keyed_call_whose_tool_panicked_reads_outcome_unknown_not_a_stored_error() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    for (n, when) in [(1, "call"), (2, "poll"), (3, "later")] {
        let key = format!("k{n}");
        internal_error(
            &c.call_keyed(n, "panics", json!({"when": when}), &key).await.message().await,
        );
        let retry =
            c.call_keyed(10 + n, "panics", json!({"when": when}), &key).await.message().await;
        assert_eq!(retry["result"]["isError"], true, "{when}: {retry}");
        assert!(text_of(&retry).contains("interrupted"), "{when}: {retry}");
    }
}
