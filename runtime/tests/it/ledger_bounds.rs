//! No caller can make the ledger hold more than its share, and all callers together no more
//! than the store's bound: idempotency receipts by count and bytes per caller (429) and bytes
//! in total (503), refused before the tool runs, in both eras; the figures survive a restart;
//! a result too large to keep replays as the `-32011` error with its size and digest; state
//! handles and kept tasks by bytes.

use crate::common;

use actix_web::http::StatusCode;
use common::*;
use serde_json::{Value, json};

fn keyed(id: i64, n: i64, key: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"write","arguments":{"n":n},"_meta":{"io.mcp-host/idempotencyKey":key}}})
}

async fn refused(mut r: Resp, status: StatusCode, cause_text: &str) -> u64 {
    assert_eq!(r.status, status);
    let retry: u64 = r.header("retry-after").and_then(|v| v.parse().ok()).expect("a Retry-After");
    let body = r.json().await;
    assert_eq!(
        body["error"]["code"],
        if status == StatusCode::TOO_MANY_REQUESTS { -32007 } else { -32006 },
        "{body}"
    );
    assert!(body["error"]["message"].as_str().unwrap().contains(cause_text), "{body}");
    retry
}

#[actix_web::test]
async fn a_caller_past_its_receipt_count_is_refused_429_before_the_tool_runs_and_another_caller_is_not()
 {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.ledger.receipts_per_caller = 2;
    }))
    .await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    for i in 1..=2 {
        let mut r = alice.request(keyed(i, i, &format!("k{i}"))).await;
        assert_eq!(text_of(&r.message().await), format!("wrote {i} #{i}"));
    }
    let retry = refused(
        alice.request(keyed(3, 3, "k3")).await,
        StatusCode::TOO_MANY_REQUESTS,
        "idempotency receipts",
    )
    .await;
    // Room comes back when alice's oldest receipt expires (a day, counted in 64ths of it).
    assert!((86_000..=86_400 + 86_400 / 64 + 1).contains(&retry), "Retry-After {retry}");
    assert_eq!(h.gate.writes(), 2, "the refused call did not run");
    // The same refusal on the stateless path, with the request's id.
    let mut m = meta(json!({}));
    m["io.mcp-host/idempotencyKey"] = json!("k9");
    let modern_call =
        modern(9, "tools/call", json!({"name": "write", "arguments": {"n": 9}, "_meta": m}));
    let mut r = h.send(modern_call.insert_header(("Authorization", "Bearer ta"))).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.json().await["id"], 9);
    assert_eq!(h.gate.writes(), 2);
    // Another caller has its own share; calls without a key are not receipts.
    let bob = h.client_as("2025-11-25", Some("tb")).await;
    assert_eq!(text_of(&bob.request(keyed(1, 5, "k1")).await.message().await), "wrote 5 #3");
    let plain = json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"write","arguments":{"n":4}}});
    assert_eq!(text_of(&alice.request(plain).await.message().await), "wrote 4 #4");
    assert_eq!(h.sup.stats_snapshot().kept.receipts.count, 3);
}

/// Keyed calls of `write` with a result of 8 KiB from `c`, each replayed at once, until one
/// is refused with `status`: (calls run, replays of a kept result, replays saying the result
/// was not kept). Bounded: 200 calls.
async fn fill(c: &Client<'_>, prefix: &str, status: StatusCode, says: &str) -> (i64, i64, i64) {
    let pad = "x".repeat(8 << 10);
    let call = |i: i64| json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"write","arguments":{"n":i,"pad":pad},"_meta":{"io.mcp-host/idempotencyKey":format!("{prefix}{i}")}}});
    let (mut ran, mut kept, mut not_kept) = (0, 0, 0);
    for i in 1..=200 {
        for replay in [false, true] {
            let mut r = c.request(call(i)).await;
            if r.status != StatusCode::OK {
                refused(r, status, says).await;
                return (ran, kept, not_kept);
            }
            let m = r.message().await;
            if !replay {
                // Every call that runs gets its whole result, kept or not.
                assert!(text_of(&m).ends_with(&pad), "{m}");
                ran += 1;
            } else if m["error"]["code"] == -32011 {
                assert!(m["error"]["message"].as_str().unwrap().contains("ran once"), "{m}");
                not_kept += 1;
            } else {
                assert_eq!(m["result"]["_meta"]["io.mcp-host/idempotency"], "replayed", "{m}");
                kept += 1;
            }
        }
    }
    panic!("never refused")
}

#[actix_web::test]
async fn a_caller_past_its_receipt_bytes_keeps_no_more_results_and_is_then_refused_429_below_its_count()
 {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.ledger.receipt_bytes_per_caller = 64 << 10;
    }))
    .await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    let (ran, kept, not_kept) =
        fill(&alice, "b", StatusCode::TOO_MANY_REQUESTS, "idempotency receipts").await;
    assert_eq!(kept, 7, "seven results of 8 KiB fit in 64 KiB with their records");
    assert!(
        not_kept > 0,
        "then calls run whose results are not kept, before the caller is refused"
    );
    assert_eq!(h.gate.writes() as i64, ran, "nothing ran twice");
    let kept_bytes = h.sup.stats_snapshot().kept.receipts.bytes;
    assert!(kept_bytes <= 64 << 10, "never past the bound: {kept_bytes}");
    let bob = h.client_as("2025-11-25", Some("tb")).await;
    assert_eq!(
        bob.request(keyed(1, 1, "b1")).await.status,
        StatusCode::OK,
        "another caller is not"
    );
}

#[actix_web::test]
async fn every_caller_together_past_the_receipt_bytes_total_is_refused_503() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.ledger.receipt_bytes_total = 64 << 10;
    }))
    .await;
    let (alice, bob) =
        (h.client_as("2025-11-25", Some("ta")).await, h.client_as("2025-11-25", Some("tb")).await);
    let (ran, kept, _) =
        fill(&alice, "t", StatusCode::SERVICE_UNAVAILABLE, "ledger.receipt_bytes_total").await;
    assert_eq!(kept, 7);
    let writes = h.gate.writes() as i64;
    assert_eq!(writes, ran);
    refused(
        bob.request(keyed(1, 1, "t1")).await,
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger.receipt_bytes_total",
    )
    .await;
    assert_eq!(h.gate.writes() as i64, writes, "nothing ran");
    assert!(h.sup.stats_snapshot().kept.receipts.bytes <= 64 << 10);
    assert_eq!(h.sup.stats().refusals("overloaded.receipts"), 2);
}

#[actix_web::test]
async fn a_callers_receipts_are_counted_again_after_a_restart() {
    // Two processes on one store, one after the other (a memory store both open: the
    // figures of the second come only from what the first recorded).
    let store: std::sync::Arc<dyn mcp_runtime::ledger::Store> =
        std::sync::Arc::new(mcp_runtime::ledger::MemoryStore::new());
    let config = || {
        cfg(|c| {
            two_callers(c);
            c.security.cursor_secret_hex = Some("ab".repeat(16).into());
            c.ledger.receipts_per_caller = 2;
        })
    };
    {
        let c = config();
        let ledger =
            mcp_runtime::ledger::Ledger::on_store(std::sync::Arc::clone(&store), &c).unwrap();
        let writer = std::sync::Arc::clone(&ledger.writer);
        let h = harness_on(c, ledger).await;
        let alice = h.client_as("2025-11-25", Some("ta")).await;
        for i in 1..=2 {
            assert_eq!(
                alice.request(keyed(i, i, &format!("r{i}"))).await.message().await["result"]["isError"],
                Value::Null
            );
        }
        writer.barrier().await.unwrap();
    }
    let c = config();
    let ledger = mcp_runtime::ledger::Ledger::on_store(store, &c).unwrap();
    let h = harness_on(c, ledger).await;
    assert_eq!(h.sup.stats_snapshot().kept.receipts.count, 2, "rebuilt from the ledger");
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    refused(
        alice.request(keyed(3, 3, "r3")).await,
        StatusCode::TOO_MANY_REQUESTS,
        "idempotency receipts",
    )
    .await;
    let bob = h.client_as("2025-11-25", Some("tb")).await;
    assert_eq!(bob.request(keyed(1, 1, "r1")).await.status, StatusCode::OK);
}

#[actix_web::test]
async fn a_result_too_large_to_keep_ran_once_and_replays_as_an_error_with_its_size_and_digest() {
    let h = harness_with(cfg(|c| c.ledger.receipt_max_bytes = 1024)).await;
    let c = h.client("2025-11-25").await;
    let pad = "y".repeat(4096);
    let body = |id: i64| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"write","arguments":{"n":1,"pad":pad},"_meta":{"io.mcp-host/idempotencyKey":"big"}}});
    let first = c.request(body(1)).await.message().await;
    assert!(text_of(&first).ends_with(&pad), "the first caller gets the whole result");
    let again = c.request(body(2)).await.message().await;
    assert_eq!(again["error"]["code"], -32011, "{again}");
    let data = &again["error"]["data"];
    assert_eq!(data["idempotencyKey"], "big");
    assert!(data["resultBytes"].as_u64().unwrap() > 4096);
    assert_eq!(data["resultSha256"].as_str().unwrap().len(), 64);
    assert!(again["error"]["message"].as_str().unwrap().contains("ran once"));
    assert_eq!(h.gate.writes(), 1, "never run again");
}

#[tokio::test]
async fn state_handles_are_bounded_by_bytes_per_caller_and_in_total() {
    use mcp_runtime::proto::handle::HandleKind;
    use mcp_runtime::stores::handles::{HandleError, Handles};
    let ledger =
        mcp_runtime::ledger::Ledger::memory(&mcp_runtime::config::RuntimeConfig::default());
    let s = Handles::bounded(&ledger, 64 << 10, 100 << 10);
    let k = HandleKind::new("bsk", "basket", "create_basket", 600, 32 << 10, 1000);
    let value = json!("z".repeat(10 << 10));
    let mut made = Vec::new();
    let refusal = loop {
        match s.create(&k, Some("alice"), None, value.clone()).await {
            Ok(h) => made.push(h),
            Err(e) => break e,
        }
        assert!(made.len() < 100, "never bounded");
    };
    assert!(
        matches!(&refusal, HandleError::TooMany(t) if t.contains("as many bytes as one caller may keep")),
        "{refusal:?}"
    );
    assert_eq!(made.len(), 6, "64 KiB holds six values of 10 KiB with their records");
    // A growing update is bounded too; a shrinking one is not.
    let grow = s.update(&k, Some("alice"), &made[0], |v| {
        *v = json!("z".repeat(20 << 10));
        Ok(())
    });
    assert!(matches!(grow.await, Err(HandleError::TooMany(_))));
    s.update(&k, Some("alice"), &made[0], |v| {
        *v = json!("small");
        Ok(())
    })
    .await
    .unwrap();
    // Destroying one gives its bytes back; another caller meets the total.
    s.destroy(&k, Some("alice"), &made[1]).await.unwrap();
    s.create(&k, Some("alice"), None, value.clone()).await.unwrap();
    let mut bob = 0;
    let total = loop {
        match s.create(&k, Some("bob"), None, value.clone()).await {
            Ok(_) => bob += 1,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(&total, HandleError::TooMany(t) if t.contains("server keeps as much state")),
        "{total:?}"
    );
    assert!((2..=5).contains(&bob), "bob fills what is left of the total: {bob}");
}

#[actix_web::test]
async fn concurrent_keyed_calls_cannot_all_pass_the_receipt_count() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.ledger.receipts_per_caller = 3;
    }))
    .await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    let body = |i: i64| json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"write","arguments":{"n":i,"wait":true},"_meta":{"io.mcp-host/idempotencyKey":format!("c{i}")}}});
    // Six calls at once, every one still running (waiting for the gate): three places.
    let mut running = Vec::new();
    let mut refused_now = 0;
    for i in 1..=6 {
        let r = alice.request(body(i)).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            refused_now += 1;
        } else {
            assert_eq!(r.status, StatusCode::OK);
            running.push(r);
        }
    }
    assert_eq!(
        (running.len(), refused_now),
        (3, 3),
        "the places held by calls still running count"
    );
    h.gate.started(3).await;
    h.gate.open(3);
    for mut r in running {
        assert!(text_of(&r.message().await).starts_with("wrote"));
    }
    assert_eq!(h.gate.writes(), 3);
}
