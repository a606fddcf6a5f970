//! Generations and rollout flags: a reload changes new streams only, `share` is stable per
//! session, `write_tools = "receipts"`, shadow streams (ledger written, nothing of it on the
//! wire, a corrupted copy counted), rollback (old requests drain, old cursors resume), and
//! draining the process (new requests refused with the configured `Retry-After`).

use crate::common;

use actix_web::http::StatusCode;
use common::*;
use mcp_runtime::actor::{GenOrigin, Phase};
use mcp_runtime::ledger::codec;
use mcp_runtime::proto::SessionId;
use mcp_runtime::proto::rollout::{Resumable, RolloutFlags, WriteTools};
use serde_json::{Value, json};

fn flags(resumable: Resumable, share: f64, write_tools: WriteTools) -> RolloutFlags {
    RolloutFlags { resumable, share, write_tools }
}

fn log_data(msg: &Value) -> &Value {
    &msg["params"]["data"]
}

/// Read a response to its end; `(messages, event ids seen, raw SSE bytes)`.
async fn drain(mut r: Resp) -> (Vec<Value>, Vec<String>, String) {
    let msgs = r.rest().await;
    (msgs, r.ids, String::from_utf8_lossy(&r.raw).into_owned())
}

#[actix_web::test]
async fn a_flag_reload_changes_new_streams_only_and_an_old_cursor_still_resumes() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let mut old = c.call_tool(1, "gated_ro", json!({})).await;
    assert_eq!(log_data(&old.message().await), "before");
    let cursor = old.last_event_id();
    let g = h
        .sup
        .reload(GenOrigin::Reload, |s| s.flags = Some(flags(Resumable::Off, 1.0, WriteTools::All)));
    assert_eq!(h.sup.generations().current().settings.id, g);
    let (msgs, ids, raw) = drain(c.call_tool(2, "echo_ro", json!({"text": "new"})).await).await;
    assert_eq!(text_of(&msgs[0]), "new");
    assert!(
        ids.is_empty() && !raw.contains("retry:"),
        "a stream opened after the reload has no ids: {raw}"
    );
    // The stream opened before keeps its generation's rules.
    drop(old.disconnect());
    h.gate.open(1);
    h.gate.finished(1).await;
    let mut resumed = c.resume(&cursor).await;
    assert_eq!(resumed.status, StatusCode::OK);
    assert_eq!(log_data(&resumed.message().await), "after");
    assert_eq!(text_of(&resumed.message().await), "done");
    assert!(!resumed.ids.is_empty());
}

#[actix_web::test]
async fn share_picks_sessions_by_a_stable_hash_and_a_session_never_flips() {
    let h = harness_with(cfg(|c| c.rollout = flags(Resumable::On, 0.5, WriteTools::All))).await;
    let mut chosen = Vec::new();
    for _ in 0..24 {
        let c = h.client("2025-06-18").await;
        let mut resumable = Vec::new();
        for (i, share) in [(1, 0.5), (2, 0.5), (3, 0.5)] {
            // A reload to the same share (a new generation) changes nobody's place.
            h.sup.reload(GenOrigin::Reload, |s| {
                s.flags = Some(flags(Resumable::On, share, WriteTools::All))
            });
            let (_, ids, _) = drain(c.call_tool(i, "echo_ro", json!({"text": "x"})).await).await;
            resumable.push(!ids.is_empty());
        }
        assert!(resumable.iter().all(|r| *r == resumable[0]), "a session flipped: {resumable:?}");
        // In the share exactly when the hash of its id's HMAC places it below 0.5.
        let id = SessionId::parse(&c.sid).unwrap();
        let place = mcp_runtime::proto::rollout::share_place(
            &h.sup.session_hmac(&id),
            id.minted_at().is_some(),
        );
        assert_eq!(resumable[0], place < 0.5, "place {place}");
        chosen.push(resumable[0]);
    }
    let n = chosen.iter().filter(|c| **c).count();
    assert!(n > 0 && n < chosen.len(), "half the sessions, by hash: {n} of {}", chosen.len());
}

#[actix_web::test]
async fn with_write_tools_receipts_a_write_without_a_key_gets_no_ids_and_one_with_a_key_does() {
    let h =
        harness_with(cfg(|c| c.rollout = flags(Resumable::On, 1.0, WriteTools::Receipts))).await;
    let c = h.client("2025-11-25").await;
    let (msgs, ids, raw) = drain(c.call_tool(1, "write", json!({"n": 1})).await).await;
    assert_eq!(text_of(&msgs[0]), "wrote 1 #1");
    assert!(ids.is_empty() && !raw.contains("retry:"), "{raw}");
    let (msgs, ids, _) = drain(c.call_keyed(2, "write", json!({"n": 2}), "key-2").await).await;
    assert_eq!(text_of(&msgs[0]), "wrote 2 #2");
    assert_eq!(ids.len(), 2, "priming and the response");
    let (_, ids, _) = drain(c.call_tool(3, "echo_ro", json!({"text": "r"})).await).await;
    assert_eq!(ids.len(), 2, "read-only streams are not affected");
}

#[actix_web::test]
async fn a_shadow_stream_writes_the_ledger_sends_no_id_priming_or_retry_and_verifies_its_copy() {
    let h = harness_with(cfg(|c| c.rollout = flags(Resumable::Shadow, 1.0, WriteTools::All))).await;
    let c = h.client("2025-11-25").await;
    let (msgs, ids, raw) = drain(c.call_tool(1, "chatty", json!({"n": 3})).await).await;
    // chatty is not read-only: a write's stream is never shadowed.
    assert_eq!(msgs.len(), 4);
    assert!(ids.is_empty());
    until("no shadow verification of a write", || h.sup.stats().streams_live() == 0).await;
    assert_eq!(h.sup.stats().metrics().shadow_verified, 0, "{raw}");
    let (msgs, ids, raw) = drain(c.call_tool(2, "echo_ro", json!({"text": "s"})).await).await;
    assert_eq!(text_of(&msgs[0]), "s");
    assert!(
        ids.is_empty() && !raw.contains("id:") && !raw.contains("retry:"),
        "nothing of the ledger on the wire: {raw}"
    );
    until("the shadow stream is verified", || h.sup.stats().metrics().shadow_verified == 1).await;
    let m = h.sup.stats().metrics();
    assert_eq!(m.shadow_events, 1);
    assert!(m.shadow_mismatches.iter().all(|(_, n)| *n == 0), "{:?}", m.shadow_mismatches);
}

#[actix_web::test]
async fn a_corrupted_shadow_copy_is_counted_as_a_mismatch() {
    let config = cfg(|c| c.rollout = flags(Resumable::Shadow, 1.0, WriteTools::All));
    let ledger = mcp_runtime::ledger::Ledger::memory(&config);
    let store = std::sync::Arc::clone(ledger.writer.store());
    let writer = std::sync::Arc::clone(&ledger.writer);
    let h = harness_on(config, ledger).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "gated_ro", json!({})).await;
    assert_eq!(log_data(&r.message().await), "before");
    assert!(r.ids.is_empty());
    h.gate.started(1).await;
    // The ledger copy of "before", altered behind the stream's back.
    let hmac = h.sup.session_hmac(&SessionId::parse(&c.sid).unwrap());
    let _ = writer.barrier().await;
    let now = u64::MAX / 4;
    let sid = store
        .index_lowest(&codec::streams_index(&hmac), 8, 0)
        .unwrap()
        .first()
        .map(|(m, _)| m.parse::<u64>().unwrap())
        .expect("the shadow stream is recorded");
    let log = codec::events_key(&hmac, sid);
    let copy = store.read_log(&log, 0).unwrap();
    assert_eq!(copy.len(), 1, "the ledger has the event the client got without an id");
    let (seq, frame) = &copy[0];
    let altered = String::from_utf8(frame.to_vec()).unwrap().replace("before", "BEFORE");
    store
        .apply(&[
            mcp_runtime::ledger::Op::DropLog { log: log.clone() },
            mcp_runtime::ledger::Op::Append {
                log: log.into(),
                seq: *seq,
                frame: altered.into(),
                max_len: 1024,
                expires_ms: now,
            },
        ])
        .unwrap();
    h.gate.open(1);
    let rest = r.rest().await;
    assert_eq!(text_of(rest.last().unwrap()), "done");
    until("the shadow stream is verified", || h.sup.stats().metrics().shadow_verified == 1).await;
    let m = h.sup.stats().metrics();
    let content = m.shadow_mismatches.iter().find(|(k, _)| *k == "content").unwrap().1;
    assert_eq!(content, 1, "{:?}", m.shadow_mismatches);
    assert_eq!(m.shadow_events, 3);
}

#[actix_web::test]
async fn rollback_drains_old_requests_keeps_their_cursors_resumable_and_new_streams_plain() {
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let old_gen = h.sup.generations().current().settings.id;
    let mut old = c.call_tool(1, "gated_ro", json!({})).await;
    assert_eq!(log_data(&old.message().await), "before");
    let cursor = old.last_event_id();
    let g = h.sup.rollback();
    assert!(g.0 > old_gen.0);
    assert_eq!(h.sup.generations().current().settings.flags.unwrap().resumable, Resumable::Off);
    assert_eq!(
        h.sup.generations().in_flight_of_old(),
        1,
        "the old generation's request is counted"
    );
    let (_, ids, _) = drain(c.call_tool(2, "echo_ro", json!({"text": "n"})).await).await;
    assert!(ids.is_empty(), "new streams are not resumable after a rollback");
    drop(old.disconnect());
    h.gate.open(1);
    h.gate.finished(1).await;
    until("the old generation's requests drain", || h.sup.generations().in_flight_of_old() == 0)
        .await;
    let mut resumed = c.resume(&cursor).await;
    assert_eq!(resumed.status, StatusCode::OK, "an old cursor resumes until its retention ends");
    assert_eq!(log_data(&resumed.message().await), "after");
    assert_eq!(text_of(&resumed.message().await), "done");
    let status = mcp_runtime::http::admin::status(&h.sup);
    let gens = status["generations"].as_array().unwrap();
    assert!(
        gens.iter().any(|x| x["id"] == old_gen.0 && x["current"] == false),
        "the old generation lives while its stream does: {status}"
    );
}

#[actix_web::test]
async fn after_a_rollback_an_old_cursor_resumes_until_its_retention_ends_and_is_410_after() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.retention_after_delivery_ms = 1_000)).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "echo_ro", json!({"text": "old"})).await;
    assert_eq!(r.rest().await.len(), 1);
    let cursor = r.first_id();
    drop(r);
    h.sup.rollback();
    let mut resumed = c.resume(&cursor).await;
    assert_eq!(resumed.status, StatusCode::OK, "the rollback did not end the old stream");
    assert_eq!(text_of(&resumed.rest().await[0]), "old");
    tokio::time::sleep(std::time::Duration::from_millis(3_000)).await;
    assert_refused(c.resume(&cursor).await, StatusCode::GONE, -32005).await;
}

#[actix_web::test]
async fn a_rollback_ends_the_old_generations_requests_still_running_at_its_grace_deadline() {
    let h = harness_with(cfg(|c| c.shutdown.grace_secs = 0)).await;
    let c = h.client("2025-11-25").await;
    let mut old = c.call_tool(1, "gated_ro", json!({})).await;
    assert_eq!(log_data(&old.message().await), "before");
    h.sup.rollback();
    let answer = old.message().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["error"]["code"], -32010, "{answer}");
    until("the old generation's requests drained", || h.sup.generations().in_flight_of_old() == 0)
        .await;
    // A request admitted after the rollback is not touched.
    let (msgs, _, _) = drain(c.call_tool(2, "echo_ro", json!({"text": "new"})).await).await;
    assert_eq!(text_of(&msgs[0]), "new");
}

#[actix_web::test]
async fn while_draining_new_requests_get_503_with_the_configured_retry_after_and_in_flight_ones_finish()
 {
    let h = harness_with(cfg(|c| c.shutdown.retry_after_secs = 7)).await;
    let c = h.client("2025-11-25").await;
    let mut running = c.call_tool(1, "gated_ro", json!({})).await;
    assert_eq!(log_data(&running.message().await), "before");
    h.sup.begin_drain();
    assert_eq!(h.sup.phase(), Phase::Draining);
    let mut lifecycle = h.sup.lifecycle();
    assert_eq!(lifecycle.borrow_and_update().phase, Phase::Draining);
    let refused = c.call_tool(2, "echo", json!({"text": "late"})).await;
    assert_eq!(refused.header("retry-after").as_deref(), Some("7"));
    assert_refused(refused, StatusCode::SERVICE_UNAVAILABLE, -32006).await;
    let init = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert_eq!(init.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        c.notify(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await,
        StatusCode::ACCEPTED,
        "notifications still go through"
    );
    assert_eq!(h.sup.in_flight(), 1);
    h.gate.open(1);
    assert_eq!(log_data(&running.message().await), "after");
    assert_eq!(text_of(&running.message().await), "done");
    until("nothing in flight", || h.sup.in_flight() == 0).await;
    h.sup.shutdown();
    until("every session stopped", || h.sup.session_count() == 0).await;
    h.sup.mark_stopped();
    assert_eq!(lifecycle.borrow_and_update().phase, Phase::Stopped);
}
