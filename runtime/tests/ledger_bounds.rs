//! No caller can make the ledger hold more than its share, and all callers together no more
//! than the store's bound: idempotency receipts by count and bytes per caller (429) and bytes
//! in total (503), refused before the tool runs, in both eras; the figures survive a restart;
//! a result too large to keep replays as the `-32011` error with its size and digest; state
//! handles and kept tasks by bytes.

mod common;

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
    assert_eq!(body["error"]["code"], if status == StatusCode::TOO_MANY_REQUESTS { -32007 } else { -32006 }, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains(cause_text), "{body}");
    retry
}

#[actix_web::test]
async fn a_caller_past_its_receipt_count_is_refused_429_before_the_tool_runs_and_another_caller_is_not() {
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
    let retry = refused(alice.request(keyed(3, 3, "k3")).await, StatusCode::TOO_MANY_REQUESTS, "idempotency receipts").await;
    // Room comes back when alice's oldest receipt expires (a day, counted in 64ths of it).
    assert!((86_000..=86_400 + 86_400 / 64 + 1).contains(&retry), "Retry-After {retry}");
    assert_eq!(h.gate.writes(), 2, "the refused call did not run");
    // The same refusal on the stateless path, with the request's id.
    let mut m = meta(json!({}));
    m["io.mcp-host/idempotencyKey"] = json!("k9");
    let modern_call = modern(9, "tools/call", json!({"name": "write", "arguments": {"n": 9}, "_meta": m}));
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

#[actix_web::test]
async fn a_caller_past_its_receipt_bytes_is_refused_429_below_its_count() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.ledger.receipt_bytes_per_caller = 64 << 10;
    }))
    .await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    let pad = "x".repeat(8 << 10);
    let mut kept = 0;
    for i in 1..=64 {
        let body = json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"write","arguments":{"n":i,"pad":pad},"_meta":{"io.mcp-host/idempotencyKey":format!("b{i}")}}});
        let r = alice.request(body).await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            refused(r, StatusCode::TOO_MANY_REQUESTS, "idempotency receipts").await;
            break;
        }
        let mut r = r;
        assert!(text_of(&r.message().await).starts_with("wrote"));
        kept += 1;
    }
    assert!((6..=8).contains(&kept), "64 KiB holds about seven results of 8 KiB: {kept}");
    let kept_bytes = h.sup.stats_snapshot().kept.receipts.bytes;
    assert!(kept_bytes <= (64 << 10) + (9 << 10), "at most one result past the bound: {kept_bytes}");
    let bob = h.client_as("2025-11-25", Some("tb")).await;
    assert_eq!(bob.request(keyed(1, 1, "b1")).await.status, StatusCode::OK);
}

#[actix_web::test]
async fn every_caller_together_past_the_receipt_bytes_total_is_refused_503() {
    let h = harness_with(cfg(|c| {
        two_callers(c);
        c.ledger.receipt_bytes_total = 64 << 10;
    }))
    .await;
    let (alice, bob) = (h.client_as("2025-11-25", Some("ta")).await, h.client_as("2025-11-25", Some("tb")).await);
    let pad = "x".repeat(8 << 10);
    let call = |i: i64| json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"write","arguments":{"n":i,"pad":pad},"_meta":{"io.mcp-host/idempotencyKey":format!("t{i}")}}});
    for i in 1..=4 {
        for c in [&alice, &bob] {
            let mut r = c.request(call(i)).await;
            assert_eq!(r.status, StatusCode::OK);
            assert!(text_of(&r.message().await).starts_with("wrote"));
        }
    }
    let writes = h.gate.writes();
    refused(alice.request(call(9)).await, StatusCode::SERVICE_UNAVAILABLE, "ledger.receipt_bytes_total").await;
    refused(bob.request(call(9)).await, StatusCode::SERVICE_UNAVAILABLE, "ledger.receipt_bytes_total").await;
    assert_eq!(h.gate.writes(), writes, "nothing ran");
    assert_eq!(h.sup.stats().refusals("overloaded.receipts"), 2);
}

#[actix_web::test]
async fn a_callers_receipts_are_counted_again_after_a_restart() {
    // Two processes on one store, one after the other (a memory store both open: the
    // figures of the second come only from what the first recorded).
    let store: std::sync::Arc<dyn mcp_runtime::ledger::Store> = std::sync::Arc::new(mcp_runtime::ledger::MemoryStore::new());
    let config = || {
        cfg(|c| {
            two_callers(c);
            c.security.cursor_secret_hex = Some("ab".repeat(16));
            c.ledger.receipts_per_caller = 2;
        })
    };
    {
        let c = config();
        let ledger = mcp_runtime::ledger::Ledger::on_store(std::sync::Arc::clone(&store), &c).unwrap();
        let writer = std::sync::Arc::clone(&ledger.writer);
        let h = harness_on(c, ledger).await;
        let alice = h.client_as("2025-11-25", Some("ta")).await;
        for i in 1..=2 {
            assert_eq!(alice.request(keyed(i, i, &format!("r{i}"))).await.message().await["result"]["isError"], Value::Null);
        }
        writer.barrier().await.unwrap();
    }
    let c = config();
    let ledger = mcp_runtime::ledger::Ledger::on_store(store, &c).unwrap();
    let h = harness_on(c, ledger).await;
    assert_eq!(h.sup.stats_snapshot().kept.receipts.count, 2, "rebuilt from the ledger");
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    refused(alice.request(keyed(3, 3, "r3")).await, StatusCode::TOO_MANY_REQUESTS, "idempotency receipts").await;
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
    use mcp_runtime::handles::{HandleError, Handles};
    use mcp_runtime::proto::handle::HandleKind;
    use mcp_runtime::proto::usage::UsageLimits;
    let ledger = mcp_runtime::ledger::Ledger::memory(&mcp_runtime::config::RuntimeConfig::default());
    let s = Handles::bounded(&ledger, UsageLimits { per_caller_count: u64::MAX, per_caller_bytes: 64 << 10, total_bytes: 100 << 10 });
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
    assert!(matches!(&refusal, HandleError::TooMany(t) if t.contains("as many bytes as one caller may keep")), "{refusal:?}");
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
    assert!(matches!(&total, HandleError::TooMany(t) if t.contains("server keeps as much state")), "{total:?}");
    assert!((2..=5).contains(&bob), "bob fills what is left of the total: {bob}");
}
