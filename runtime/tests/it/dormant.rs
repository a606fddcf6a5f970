//! A stream answered in its first write is kept by its session as data, with no actor
//! (`actor::dormant`): counted like any retained stream, recorded if its answer may not have
//! arrived, ended by its retention or the retention bounds, and woken by a resume, which then
//! replays it as before.

use crate::common;

use std::time::Duration;

use actix_web::http::StatusCode;
use common::*;
use mcp_runtime::ledger::codec::stream_key;
use mcp_runtime::proto::ids::SessionId;
use serde_json::json;

/// Whether the session's stream `sid` has a record in the ledger, once everything submitted
/// so far is committed.
async fn recorded(h: &Harness, c: &Client<'_>, sid: u64) -> bool {
    let w = h.sup.ledger_writer();
    w.wait_committed(w.barrier()).await.expect("the ledger commits");
    let hmac = h.sup.session_hmac(&SessionId::parse(&c.sid).expect("a session id"));
    w.store().get(&stream_key(&hmac, sid), h.sup.now().0).expect("a read").is_some()
}

/// Returns once the session has handled everything sent to it before (a dropped body's end
/// included): its mailbox is handled in order, each request (the ping too) hears the ends
/// bodies queued first, and a ping's answer comes after.
async fn handled_before(c: &Client<'_>) {
    // Answered as JSON: no stream of its own.
    let ping = json!({"jsonrpc":"2.0","id":"barrier","method":"ping"}).to_string();
    let req = c.with_session(post()).insert_header(("Accept", "application/json"));
    assert_eq!(c.h.send(req.set_payload(ping)).await.json().await["id"], "barrier");
}

/// An echo answered in its first write and read to its end; its priming cursor.
async fn echo(c: &Client<'_>, id: i64, text: &str) -> String {
    let mut r = c.call_tool(id, "echo", json!({"text": text})).await;
    let msgs = r.rest().await;
    assert_eq!(text_of(&msgs[0]), text);
    r.first_id()
}

#[actix_web::test]
async fn a_reply_answered_in_its_first_write_is_kept_without_an_actor_until_a_resume_wakes_it() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut first = c.call_tool(1, "echo", json!({"text": "x"})).await;
    assert_eq!(text_of(&first.rest().await[0]), "x");
    let (cursor, answer_id) = (first.first_id(), first.last_event_id());
    assert_ne!(cursor, answer_id, "a priming event, then the answer");
    let s = h.sup.stats_snapshot();
    assert_eq!((s.streams, s.streams_dormant), (1, 1), "retained, as data");
    handled_before(&c).await;
    assert!(!recorded(&h, &c, 1).await, "every frame arrived: nothing to record");
    let mut resumed = c.resume(&cursor).await;
    let again = resumed.rest().await;
    assert_eq!(again.len(), 1, "the answer, replayed: {again:?}");
    assert_eq!((text_of(&again[0]), &again[0]["id"]), ("x", &json!(1)));
    // Kept as its JSON, its frame made again: the event id the client first saw.
    assert_eq!(resumed.last_event_id(), answer_id);
    let s = h.sup.stats_snapshot();
    assert_eq!((s.streams, s.streams_dormant), (1, 0), "woken: an actor serves it now");
    // The woken stream goes on as any closed stream: resumable again.
    assert_eq!(c.resume(&cursor).await.rest().await.len(), 1);
}

#[actix_web::test]
async fn an_answer_at_once_comes_after_what_its_tool_sent_and_its_stream_is_not_kept() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "hasty", json!({})).await;
    let msgs = r.rest().await;
    assert_eq!(msgs.len(), 2, "the log message, then the answer: {msgs:?}");
    assert_eq!(
        (&msgs[0]["method"], &msgs[0]["params"]["data"]),
        (&json!("notifications/message"), &json!("hasty"))
    );
    assert_eq!((text_of(&msgs[1]), &msgs[1]["id"]), ("hasty done", &json!(1)));
    handled_before(&c).await;
    let s = h.sup.stats_snapshot();
    assert_eq!((s.streams, s.streams_dormant), (1, 0), "retained by its actor, not as data");
}

#[actix_web::test]
async fn a_kept_stream_ends_at_its_retention_and_its_cursor_is_then_gone() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.retention_after_delivery_ms = 1_000)).await;
    let c = h.client("2025-11-25").await;
    let memory = h.sup.stats_snapshot().stream_memory_bytes;
    let cursor = echo(&c, 1, "x").await;
    assert!(h.sup.stats_snapshot().stream_memory_bytes > memory, "its window is charged");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = h.sup.stats_snapshot();
    assert_eq!((s.streams, s.streams_dormant), (0, 0), "its retention ended");
    assert_eq!(s.stream_memory_bytes, memory, "its window's charge was released");
    assert_refused(c.resume(&cursor).await, StatusCode::GONE, -32005).await;
    assert_eq!(h.sup.session_count(), 1, "the session itself goes on");
}

/// Requests close together make the session busy: its bodies queue their ends for its next
/// message, and nothing is sent to it after the last echo, whose end its timer then reads.
#[actix_web::test]
async fn a_busy_sessions_kept_streams_end_at_their_retention_without_another_request() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.retention_after_delivery_ms = 1_000)).await;
    let c = h.client("2025-11-25").await;
    for id in 1..=3 {
        echo(&c, id, "x").await;
    }
    assert_eq!(h.sup.stats_snapshot().streams, 3, "retained");
    // The first end came by message (not busy yet), the second was queued and heard by the
    // third request: both retentions are over at 1.02 s; the last end, heard by the timer
    // within 50 ms, is not.
    tokio::time::sleep(Duration::from_millis(1_020)).await;
    assert_eq!(h.sup.stats_snapshot().streams, 1, "the request heard the queued end");
    // Its retention is over by 1.05 s; heard at the others' retention end instead (1 s), it
    // would run to 2 s.
    tokio::time::sleep(Duration::from_millis(480)).await;
    let s = h.sup.stats_snapshot();
    assert_eq!((s.streams, s.streams_dormant), (0, 0), "every retention ended");
}

/// Call `echo` and go away after its one write, before the body ended (whether the answer
/// arrived is then unknown); its priming cursor.
async fn echo_unread(c: &Client<'_>) -> String {
    let mut r = c.call_tool(1, "echo", json!({"text": "x"})).await;
    r.chunk().await.expect("the one write: priming and answer");
    let cursor = r.first_id();
    drop(r.disconnect());
    cursor
}

#[actix_web::test]
async fn a_kept_stream_whose_answer_was_not_read_to_its_end_is_recorded_until_its_retention_ends() {
    // Real time: the ledger's writer is a thread of its own, which paused time would skip past
    // (its commits are awaited).
    let h = harness_with(cfg(|c| c.sessions.retention_undelivered_ms = 300)).await;
    let c = h.client("2025-11-25").await;
    echo_unread(&c).await;
    handled_before(&c).await;
    assert!(recorded(&h, &c, 1).await, "an answer that may not have arrived is recorded");
    until("its retention ended", || h.sup.stats_snapshot().streams == 0).await;
    assert!(!recorded(&h, &c, 1).await, "its record went with it");
}

#[actix_web::test]
async fn a_kept_stream_whose_answer_was_not_read_to_its_end_is_kept_for_the_longer_retention() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| {
        c.sessions.retention_after_delivery_ms = 1_000;
        c.sessions.retention_undelivered_ms = 5_000;
    }))
    .await;
    let c = h.client("2025-11-25").await;
    let cursor = echo_unread(&c).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let again = c.resume(&cursor).await.rest().await;
    assert_eq!(again.len(), 1, "the answer, once: {again:?}");
    assert_eq!(text_of(&again[0]), "x", "kept past the delivered retention");
}

#[actix_web::test]
async fn kept_streams_past_the_retention_bound_are_evicted_and_stop_counting() {
    let h = harness_with(cfg(|c| c.sessions.max_retained_streams = 2)).await;
    let c = h.client("2025-11-25").await;
    let mut cursors = Vec::new();
    for id in 1..=4 {
        cursors.push(echo(&c, id, "x").await);
    }
    let s = h.sup.stats_snapshot();
    assert_eq!((s.streams, s.streams_dormant, s.streams_evicted), (2, 2, 2));
    assert_refused(c.resume(&cursors[0]).await, StatusCode::GONE, -32005).await;
    assert_eq!(c.resume(&cursors[3]).await.rest().await.len(), 1, "the newest is kept");
}

#[actix_web::test]
async fn a_deleted_session_drops_its_kept_streams_and_their_charges() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    for id in 1..=3 {
        echo(&c, id, "x").await;
    }
    assert_eq!(h.sup.stats_snapshot().streams_dormant, 3);
    assert_eq!(c.delete().await.status, StatusCode::NO_CONTENT);
    until("the session stopped", || h.sup.session_count() == 0).await;
    let s = h.sup.stats_snapshot();
    assert_eq!((s.streams, s.streams_dormant, s.stream_memory_bytes), (0, 0, 0));
}

/// The ledger operations a DELETE of `c`'s session commits.
async fn ops_of_delete(h: &Harness, c: &Client<'_>) -> u64 {
    let w = h.sup.ledger_writer();
    let before = h.sup.session_count();
    w.wait_committed(w.barrier()).await.expect("the ledger commits");
    let ops = w.snapshot().ops;
    assert_eq!(c.delete().await.status, StatusCode::NO_CONTENT);
    until("the session stopped", || h.sup.session_count() == before - 1).await;
    w.wait_committed(w.barrier()).await.expect("the ledger commits");
    w.snapshot().ops - ops
}

#[actix_web::test]
async fn a_deleted_session_writes_nothing_for_kept_streams_the_ledger_never_held() {
    let h = harness().await;
    let bare = h.client("2025-11-25").await;
    handled_before(&bare).await;
    let none = ops_of_delete(&h, &bare).await;
    let c = h.client("2025-11-25").await;
    for id in 1..=10 {
        echo(&c, id, "x").await;
    }
    handled_before(&c).await;
    assert!(!recorded(&h, &c, 1).await, "settled: never recorded");
    assert_eq!(h.sup.stats_snapshot().streams_dormant, 10);
    // Forgetting them would be three writes each (record, log, index member), finding nothing.
    assert_eq!(ops_of_delete(&h, &c).await, none, "the end of a session that kept none");
    // One the ledger may hold is forgotten as before.
    let d = h.client("2025-11-25").await;
    echo_unread(&d).await;
    handled_before(&d).await;
    assert!(recorded(&h, &d, 1).await, "its answer may not have arrived: recorded");
    assert_eq!(ops_of_delete(&h, &d).await, none + 3, "its record, log and index member go");
    assert!(!recorded(&h, &d, 1).await, "forgotten with its session");
}

#[actix_web::test]
async fn a_sessions_record_extends_no_kept_stream_the_ledger_never_held() {
    // Real time (the writer is a thread of its own): a record is due once the last use moved
    // more than a sixteenth of the idle TTL, one second here.
    let h = harness_with(cfg(|c| c.sessions.idle_ttl_secs = 16)).await;
    let c = h.client("2025-11-25").await;
    for id in 1..=10 {
        echo(&c, id, "x").await;
    }
    handled_before(&c).await;
    assert_eq!(h.sup.stats_snapshot().streams_dormant, 10);
    let w = h.sup.ledger_writer();
    w.wait_committed(w.barrier()).await.expect("the ledger commits");
    let ops = w.snapshot().ops;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    handled_before(&c).await;
    w.wait_committed(w.barrier()).await.expect("the ledger commits");
    let record = w.snapshot().ops - ops;
    assert_eq!(h.sup.stats_snapshot().streams_dormant, 10, "all kept still");
    // Extending each kept answer's record and log would be twenty writes.
    assert!((1..10).contains(&record), "its record alone: {record} operations");
}

#[actix_web::test]
async fn a_resume_that_comes_before_the_first_connection_ended_still_lets_the_session_end() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| {
        c.sessions.idle_ttl_secs = 1;
        c.sessions.retention_after_delivery_ms = 1_000;
        c.sessions.retention_undelivered_ms = 1_000;
    }))
    .await;
    let c = h.client("2025-11-25").await;
    let mut first = c.call_tool(1, "echo", json!({"text": "x"})).await;
    first.chunk().await.expect("the one write");
    // Its body is still held: the stream wakes with that first connection attached.
    let again = c.resume(&first.first_id()).await.rest().await;
    assert_eq!(again.len(), 1, "the answer, once: {again:?}");
    drop(first);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let s = h.sup.stats_snapshot();
    assert_eq!(h.sup.session_count(), 0, "both connections were counted off: it expired");
    assert_eq!((s.streams, s.streams_dormant, s.stream_memory_bytes), (0, 0, 0));
}
