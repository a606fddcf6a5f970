//! A ledger that cannot commit fails closed and heals by itself: while another connection
//! holds SQLite's write lock (longer than the writer's old give-up budget of five attempts),
//! every request that needs a new durable record is refused with 503 naming the ledger,
//! reads keep working, `/readyz` says not ready; once the lock is let go, the writer commits
//! what it held and everything works again, with nothing handed over lost.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::test::TestRequest;
use common::*;
use mcp_runtime::ledger::{Ledger, LedgerState};
use serde_json::json;

/// Wait (bounded by `limit`) until `cond` holds.
async fn within(limit: Duration, what: &str, cond: impl Fn() -> bool) {
    let until = tokio::time::Instant::now() + limit;
    while !cond() {
        assert!(tokio::time::Instant::now() < until, "never happened within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn assert_ledger_refusal(mut r: Resp) {
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.header("retry-after").is_some(), "a 503 says when to come back");
    let body = r.json().await;
    assert_eq!(body["error"]["code"], -32006, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap_or_default().contains("ledger"),
        "the refusal names the ledger: {body}"
    );
}

#[actix_web::test]
async fn a_ledger_locked_past_the_old_retry_budget_refuses_durable_work_keeps_reads_and_heals_by_itself()
 {
    let dir = mcp_devtools::TempDir::new("ledger-locked");
    let path = dir.path().join("l.db");
    let cfg = cfg(|c| {
        c.ledger.path = path.display().to_string();
        c.ledger.commit_wait_ms = 500;
        c.security.cursor_secret_hex = Some("ab".repeat(16).into());
    });
    let ledger = Ledger::open(&cfg).unwrap();
    let writer = Arc::clone(&ledger.writer);
    let h = harness_on(cfg, ledger).await;
    let before = h.client("2025-11-25").await;
    let gone = h.client("2025-06-18").await;
    assert_eq!(h.send(TestRequest::get().uri("/readyz")).await.status, StatusCode::OK);

    // Another process's connection takes the write lock and holds it.
    let lock = rusqlite::Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    // A new session needs its record: it is not committed within the commit wait.
    let woken = h.sup.sessions_hibernated_and_woken().1;
    assert_ledger_refusal(h.send(post().set_payload(init_body("2025-11-25"))).await).await;
    assert_eq!(
        (h.sup.session_count(), h.sup.sessions_hibernated_and_woken().1),
        (2, woken),
        "the session whose record did not commit is gone, taken out as data, not woken"
    );
    within(Duration::from_secs(60), "the writer reports that it cannot commit", || {
        writer.is_failing()
    })
    .await;
    // Longer than the old writer tried before it stopped recording for good (5 attempts).
    within(Duration::from_secs(120), "six failed attempts", || writer.snapshot().errors >= 6).await;
    assert_eq!(writer.snapshot().state, LedgerState::Failing);

    // Everything that needs a new durable record is refused at once, naming the ledger.
    assert_ledger_refusal(h.send(post().set_payload(init_body("2025-11-25"))).await).await;
    assert_ledger_refusal(before.call_keyed(2, "write", json!({"n": 1}), "k-during").await).await;
    assert_ledger_refusal(before.open_get().await).await;
    let mut ready = h.send(TestRequest::get().uri("/readyz")).await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        ready.chunk().await.as_deref(),
        Some(&b"not ready\n"[..]),
        "no detail on the MCP port"
    );
    assert_eq!(
        h.send(TestRequest::get().uri("/livez")).await.status,
        StatusCode::OK,
        "the process still serves"
    );
    // Reads that need nothing new keep working.
    let mut list = before.request(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})).await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.message().await["result"]["tools"].is_array());
    let mut echo = before.call_tool(4, "echo_ro", json!({"text": "still here"})).await;
    assert_eq!(text_of(&echo.message().await), "still here");
    // A DELETE needs no new record: it is answered, and its end is handed over to land
    // once the ledger heals.
    assert_eq!(gone.delete().await.status, StatusCode::NO_CONTENT);

    // The lock is let go: the writer commits what it held, by itself.
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    within(Duration::from_secs(30), "the writer commits again", || !writer.is_failing()).await;
    let s = writer.snapshot();
    assert_eq!((s.state, s.lost_ops), (LedgerState::Ok, 0), "{s:?}");
    assert_eq!(h.send(TestRequest::get().uri("/readyz")).await.status, StatusCode::OK);
    let after = h.client("2025-11-25").await;
    let mut w = after.call_keyed(5, "write", json!({"n": 7}), "k-after").await;
    assert_eq!(text_of(&w.message().await), "wrote 7 #1");
    let mut again = before.call_tool(6, "echo_ro", json!({"text": "ok"})).await;
    assert_eq!(text_of(&again.message().await), "ok", "the session of before lives on");
    // What was handed over while it failed is in the ledger: the DELETE's end.
    let _ = writer.barrier().await;
    let hmac = h.sup.session_hmac(&mcp_runtime::proto::SessionId::parse(&gone.sid).unwrap());
    let record = writer
        .store()
        .get(&mcp_runtime::ledger::codec::session_key(&hmac), h.sup.now().0)
        .unwrap()
        .expect("the session's record");
    let mcp_runtime::ledger::codec::Record::Session(r) =
        mcp_runtime::ledger::codec::decode(&record).unwrap()
    else {
        panic!("not a session record")
    };
    assert_eq!(r.state, mcp_runtime::ledger::codec::RecordState::Deleted);
}

/// A harness on a SQLite ledger (`l.db` in the returned directory) whose sessions park after
/// 1 s and whose commits are waited for 500 ms.
async fn parking_on_sqlite(
    name: &str,
) -> (mcp_devtools::TempDir, Harness, Arc<mcp_runtime::ledger::Writer>) {
    let dir = mcp_devtools::TempDir::new(name);
    let path = dir.path().join("l.db");
    let cfg = cfg(|c| {
        c.ledger.path = path.display().to_string();
        c.ledger.commit_wait_ms = 500;
        c.sessions.park_after_secs = 1;
        c.security.cursor_secret_hex = Some("ab".repeat(16).into());
    });
    let ledger = Ledger::open(&cfg).unwrap();
    let writer = Arc::clone(&ledger.writer);
    (dir, harness_on(cfg, ledger).await, writer)
}

#[actix_web::test]
async fn a_session_parked_while_the_ledger_fails_is_refused_503_not_held_until_it_heals() {
    let (dir, h, writer) = parking_on_sqlite("ledger-locked-park").await;
    let path = dir.path().join("l.db");
    let parked = h.client("2025-11-25").await;
    let lock = rusqlite::Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    // It parks while the ledger cannot commit: its last writes wait in the queue.
    within(Duration::from_secs(30), "the session parks", || {
        h.sup.stats_snapshot().sessions_parked == 1
    })
    .await;
    within(Duration::from_secs(30), "the writer reports that it cannot commit", || {
        writer.is_failing()
    })
    .await;
    let mut r = parked.request(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    assert_eq!(
        r.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "refused, not held until the ledger heals"
    );
    assert!(r.json().await["error"]["message"].as_str().unwrap_or_default().contains("ledger"));
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    within(Duration::from_secs(30), "the writer commits again", || !writer.is_failing()).await;
    let mut r = parked.request(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})).await;
    assert_eq!(r.status, StatusCode::OK, "revived once the ledger commits");
    assert!(r.message().await["result"]["tools"].is_array());
}

#[actix_web::test]
async fn a_revive_whose_commit_times_out_leaves_the_parked_session_in_the_caps_index() {
    let (dir, h, writer) = parking_on_sqlite("ledger-locked-revive").await;
    let path = dir.path().join("l.db");
    let indexed = || writer.store().index_len(mcp_runtime::ledger::codec::SESSIONS_LRU, 1).unwrap();
    let parked = h.client("2025-11-25").await;
    within(Duration::from_secs(30), "the session parks", || {
        h.sup.stats_snapshot().sessions_parked == 1 && h.sup.session_count() == 0
    })
    .await;
    writer.barrier().await.unwrap();
    assert_eq!(indexed(), 1, "parked: in the cap's index");
    // The ledger stops committing after the park: the revive's new life is not committed in
    // time, and its batch (the life, the leave from the index) commits once the lock goes.
    let lock = rusqlite::Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let r = parked.request(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "not revived");
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    within(Duration::from_secs(30), "the writer commits again", || !writer.is_failing()).await;
    writer.barrier().await.unwrap();
    assert_eq!(h.sup.session_count(), 0, "out of memory");
    assert_eq!(indexed(), 1, "still counted and evictable by the cap");
    let r = parked.request(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"})).await;
    assert_eq!(r.status, StatusCode::OK, "revived once the ledger commits");
    writer.barrier().await.unwrap();
    assert_eq!(indexed(), 0, "in memory: out of the index");
}

#[actix_web::test]
async fn in_sync_durability_a_stream_that_would_wait_for_its_commits_is_refused_and_json_reads_go_on()
 {
    let dir = mcp_devtools::TempDir::new("ledger-locked-sync");
    let path = dir.path().join("l.db");
    let cfg = cfg(|c| {
        c.ledger.path = path.display().to_string();
        c.ledger.commit_wait_ms = 500;
        c.ledger.durability = mcp_runtime::ledger::Durability::Sync;
        c.security.cursor_secret_hex = Some("ab".repeat(16).into());
    });
    let ledger = Ledger::open(&cfg).unwrap();
    let writer = Arc::clone(&ledger.writer);
    let h = harness_on(cfg, ledger).await;
    let c = h.client("2025-11-25").await;
    let lock = rusqlite::Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Something to commit, so that the writer finds out.
    let _ = h.send(post().set_payload(init_body("2025-11-25"))).await;
    within(Duration::from_secs(60), "the writer reports that it cannot commit", || {
        writer.is_failing()
    })
    .await;
    // Every event of a recorded stream waits for its commit in sync mode: refused, not held.
    assert_ledger_refusal(c.call_tool(2, "echo_ro", json!({"text": "held?"})).await).await;
    // The same read answered as JSON needs nothing new.
    let echo = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo_ro", "arguments": {"text": "json"}}});
    let mut r = h
        .send(
            c.with_session(post().insert_header(("Accept", "application/json")))
                .set_payload(echo.to_string()),
        )
        .await;
    assert_eq!(text_of(&r.json().await), "json");
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    within(Duration::from_secs(30), "the writer commits again", || !writer.is_failing()).await;
    assert_eq!(
        text_of(&c.call_tool(4, "echo_ro", json!({"text": "streamed"})).await.message().await),
        "streamed"
    );
    assert_eq!(
        h.sup.session_count(),
        1,
        "the session whose record never committed in time was stopped"
    );
}
