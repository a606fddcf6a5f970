//! A slow store stalls only the requests that read it: while a state handle's read hangs in
//! the store, a JSON echo on another session is answered. The test runs the endpoint on one
//! thread (as one actix worker): a store read on that thread would hold the echo until the
//! store let go. And a write that waits on it (a log level's record) holds its answer.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use mcp_runtime::ledger::faulty::{Hooked, StoreHooks};
use mcp_runtime::ledger::{Ledger, Op, Store, StoreError};
use mcp_runtime::proto::handle::HandleKind;
use mcp_runtime::tools::{
    CallToolResult, Catalog, ServerInfo, ToolAnnotations, ToolError, ToolSpec, tool_fn,
};
use parking_lot::{Condvar, Mutex};
use serde_json::{Value, json};

/// A memory store's hooks ([`Hooked`]): its reads of state handles hang while `held`, and its
/// writes hang while `writes_held` (at most 5 s: without the fix the test fails instead of hanging).
#[derive(Debug, Default)]
struct Slow {
    held: Mutex<bool>,
    writes_held: Mutex<bool>,
    /// Batches that entered while writes were held.
    writes_entered: AtomicUsize,
    released: Condvar,
    /// Handle reads that entered while held.
    entered: AtomicUsize,
    /// A held read gave up waiting (the release never came while it waited).
    timed_out: AtomicBool,
}

impl Slow {
    fn release(&self) {
        *self.held.lock() = false;
        *self.writes_held.lock() = false;
        self.released.notify_all();
    }
}

impl StoreHooks for Slow {
    fn before_apply(&self, _: &[Op]) -> Result<(), StoreError> {
        let mut held = self.writes_held.lock();
        if *held {
            self.writes_entered.fetch_add(1, Ordering::SeqCst);
            let _ = self.released.wait_while_for(&mut held, |h| *h, Duration::from_secs(5));
        }
        Ok(())
    }
    fn before_get(&self, key: &str) {
        if key.starts_with("h/") {
            let mut held = self.held.lock();
            if *held {
                self.entered.fetch_add(1, Ordering::SeqCst);
                if self
                    .released
                    .wait_while_for(&mut held, |h| *h, Duration::from_secs(5))
                    .timed_out()
                {
                    self.timed_out.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

fn catalog() -> Catalog {
    let kind = Arc::new(HandleKind::new("box", "box", "make", 600, 4096, 10));
    let obj = json!({"type": "object", "properties": {"h": {"type": "string"}, "text": {"type": "string"}}});
    let (k1, k2) = (Arc::clone(&kind), kind);
    Catalog::builder()
        .tool(tool_fn(ToolSpec::new("make", "Makes a box", obj.clone()).keeps_state(), move |_: Value, cx| {
            let k = Arc::clone(&k1);
            async move { Ok(CallToolResult::text(cx.handles(&k)?.create(&json!("inside")).await?)) }
        }))
        .tool(tool_fn(ToolSpec::new("peek", "Reads a box", obj.clone()).annotations(ToolAnnotations { read_only_hint: Some(true), ..Default::default() }), move |a: Value, cx| {
            let k = Arc::clone(&k2);
            async move {
                let v: Value = cx.handles(&k)?.get(a["h"].as_str().ok_or_else(|| ToolError::Failed("h".into()))?).await?;
                Ok(CallToolResult::text(v.to_string()))
            }
        }))
        .tool(tool_fn(ToolSpec::new("echo", "Echo", obj), |a: Value, _| async move { Ok(CallToolResult::text(a["text"].as_str().unwrap_or_default())) }))
        .build(ServerInfo { name: "slow".into(), version: "0".into(), instructions: None })
        .unwrap()
}

/// A harness serving `catalog()` on a fresh slow store.
async fn on_slow_store() -> (Arc<Hooked<Slow>>, Harness) {
    let store = Arc::new(Hooked::<Slow>::default());
    let c = cfg(|_| {});
    let ledger = Ledger::on_store(Arc::clone(&store) as Arc<dyn Store>, &c).unwrap();
    (store, harness_with_catalog_on(c, catalog(), ledger).await)
}

#[actix_web::test]
async fn a_store_read_that_hangs_does_not_delay_a_json_echo_on_another_session() {
    let (store, h) = on_slow_store().await;
    let (reader, other) = (h.client("2025-11-25").await, h.client("2025-11-25").await);
    let handle = text_of(&reader.call_tool(1, "make", json!({})).await.message().await).to_owned();

    *store.held.lock() = true;
    // The read of the handle hangs in the store; its response stream is open.
    let mut peek = reader.call_tool(2, "peek", json!({"h": handle})).await;
    until("the handle's read is in the store", || store.entered.load(Ordering::SeqCst) == 1).await;
    // Another session's JSON echo is answered meanwhile.
    let echo = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "not delayed"}}});
    let mut r = h
        .send(
            other
                .with_session(post().insert_header(("Accept", "application/json")))
                .set_payload(echo.to_string()),
        )
        .await;
    assert_eq!(text_of(&r.json().await), "not delayed");
    assert!(
        *store.held.lock() && !store.timed_out.load(Ordering::SeqCst),
        "answered while the store still held the read"
    );
    store.release();
    assert_eq!(
        text_of(&peek.message().await),
        "\"inside\"",
        "the slow read completes once the store lets go"
    );
}

/// `logging/setLevel` is answered once the session's record with the new level is committed
/// (a restart right after the answer keeps the level).
#[actix_web::test]
async fn a_log_level_is_answered_once_the_session_record_holding_it_is_committed() {
    let (store, h) = on_slow_store().await;
    let client = h.client("2025-11-25").await;
    *store.writes_held.lock() = true;
    let mut r = client
        .request(json!({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "error"}}))
        .await;
    until("the level's record is in the store", || {
        store.writes_entered.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), r.message()).await.is_err(),
        "answered before the record was committed"
    );
    store.release();
    assert_eq!(r.message().await["result"], json!({}));
}

/// A DELETE of a sleeping session counts it as settling before it leaves the live table: a
/// request that comes while its end is still on its way to the store is not revived from its
/// old record (the store's reads of session records are not held, only its writes).
#[actix_web::test]
async fn a_request_after_a_sleeping_sessions_delete_is_not_revived_while_its_end_is_written() {
    let (store, h) = on_slow_store().await;
    let c = h.client("2025-11-25").await;
    assert_eq!(h.sup.sessions_hibernating(), 1, "new, kept as data");
    // Its first record is in the store: the writes held next are its end's.
    let w = h.sup.ledger_writer();
    w.wait_committed(w.barrier()).await.expect("the store commits");
    *store.writes_held.lock() = true;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let (deleted, pinged) = tokio::join!(c.delete(), async {
        until("the end is in the store", || store.writes_entered.load(Ordering::SeqCst) >= 1).await;
        let r = c.request(ping).await;
        store.release();
        r
    });
    assert_eq!(pinged.status, actix_web::http::StatusCode::NOT_FOUND, "not revived");
    assert_eq!(h.sup.stats_snapshot().sessions_revived, 0);
    assert!(deleted.status.is_success());
}
