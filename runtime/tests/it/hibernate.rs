//! A session with nothing to do hibernates (`actor::session::sleep`): the registry keeps it
//! as data, its next request wakes it where it stopped (no ledger read), it expires and
//! parks at its own deadlines, and it stays live and counted throughout.

use crate::common;

use std::time::Duration;

use actix_web::http::StatusCode;
use common::*;
use mcp_runtime::ledger::faulty::{Hooked, StoreHooks};
use mcp_runtime::ledger::{Op, StoreError};
use serde_json::{Value, json};

/// A request answered as JSON (no stream of its own, so nothing keeps the session awake).
async fn json_call(c: &Client<'_>, id: i64, method: &str, params: Value) -> Resp {
    let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}).to_string();
    let req = c.with_session(post()).insert_header(("Accept", "application/json"));
    c.h.send(req.set_payload(body)).await
}

async fn ping(c: &Client<'_>, id: i64) {
    let mut r = json_call(c, id, "ping", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json().await["id"], id);
}

/// A session that answered one request, once it hibernated (the harness's only session).
async fn hibernated_client(h: &Harness) -> Client<'_> {
    let c = h.client("2025-11-25").await;
    ping(&c, 1).await;
    hibernating(h, 1).await;
    c
}

/// `c`'s session as another caller (bearer `token`) names it.
fn as_caller<'a>(c: &Client<'a>, token: &str) -> Client<'a> {
    Client { h: c.h, sid: c.sid.clone(), version: c.version.clone(), token: Some(token.into()) }
}

async fn hibernating(h: &Harness, n: usize) {
    until(&format!("{n} sessions hibernate"), || h.sup.sessions_hibernating() == n).await;
}

#[actix_web::test]
async fn an_idle_session_hibernates_and_its_next_request_wakes_it_without_the_ledger() {
    tokio::time::pause();
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    ping(&c, 1).await;
    assert_eq!(h.sup.sessions_hibernating(), 0, "not before its time");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!((h.sup.sessions_hibernating(), h.sup.session_count()), (1, 1), "live, as data");
    let mut r =
        json_call(&c, 2, "tools/call", json!({"name":"echo","arguments":{"text":"up"}})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(text_of(&r.json().await), "up");
    assert_eq!(h.sup.sessions_hibernating(), 0, "woken by the request");
    let s = h.sup.stats_snapshot();
    assert_eq!((s.sessions_revived, s.sessions_parked), (0, 0), "not parked nor read back");
    // Its GET stream opens on the woken session, and keeps it awake.
    let get = c.open_get().await;
    assert_eq!(get.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(h.sup.sessions_hibernating(), 0, "an open stream keeps it awake");
    // Not yet hibernated: a GET stream, once opened, is kept for its resume, with no
    // retention of its own, and the session keeps its actor while it has one.
    drop(get);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!((h.sup.sessions_hibernating(), h.sup.stats_snapshot().streams), (0, 1));
}

#[actix_web::test]
async fn a_new_session_is_kept_as_data_from_its_handshake_until_its_first_request() {
    tokio::time::pause();
    let h = harness().await;
    let mut r = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::OK);
    let sid = r.header("mcp-session-id").expect("its id");
    assert_eq!(r.json().await["result"]["protocolVersion"], "2025-11-25");
    assert_eq!((h.sup.session_count(), h.sup.sessions_hibernating()), (1, 1), "live, as data");
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (1, 0));
    let c = Client { h: &h, sid, version: "2025-11-25".into(), token: None };
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    assert_eq!(c.notify(initialized).await, StatusCode::ACCEPTED);
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (1, 0), "a notification wakes nothing");
    ping(&c, 1).await;
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (1, 1), "woken by its first request");
    // Awake now, it hibernates as any idle session does.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (2, 1));
    ping(&c, 2).await;
}

#[actix_web::test]
async fn a_hibernating_session_takes_notifications_and_answers_without_waking() {
    tokio::time::pause();
    let h = harness().await;
    let c = hibernated_client(&h).await;
    let (kept, woken) = h.sup.sessions_hibernated_and_woken();
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}});
    assert_eq!(c.notify(cancel).await, StatusCode::ACCEPTED, "nothing to cancel");
    let answer = json!({"jsonrpc":"2.0","id":9,"result":{}});
    assert_eq!(c.notify(answer).await, StatusCode::ACCEPTED, "no question asked");
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (kept, woken), "none woke it");
    ping(&c, 2).await;
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (kept, woken + 1));
}

#[actix_web::test]
async fn another_callers_notification_to_a_hibernating_session_is_404_and_wakes_nothing() {
    tokio::time::pause();
    let h = harness_with_two_callers().await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    ping(&alice, 1).await;
    hibernating(&h, 1).await;
    let woken = h.sup.sessions_hibernated_and_woken().1;
    let bob = as_caller(&alice, "tb");
    let note = json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"});
    assert_eq!(bob.notify(note.clone()).await, StatusCode::NOT_FOUND);
    assert_eq!(h.sup.sessions_hibernated_and_woken().1, woken, "not woken by another caller");
    assert_eq!(alice.notify(note).await, StatusCode::ACCEPTED);
}

#[actix_web::test]
async fn a_hibernating_session_wakes_for_a_batch_its_version_refuses() {
    tokio::time::pause();
    let h = harness().await;
    let c = hibernated_client(&h).await;
    let (_, woken) = h.sup.sessions_hibernated_and_woken();
    let batch = json!([{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]);
    assert_eq!(c.request(batch).await.status, StatusCode::BAD_REQUEST, "as an awake session");
    assert_eq!(h.sup.sessions_hibernated_and_woken().1, woken + 1, "its actor answered");
    let old = h.client("2025-03-26").await;
    ping(&old, 1).await;
    hibernating(&h, 2).await;
    let (_, woken) = h.sup.sessions_hibernated_and_woken();
    let batch = json!([{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]);
    assert_eq!(old.request(batch).await.status, StatusCode::ACCEPTED);
    assert_eq!(h.sup.sessions_hibernated_and_woken().1, woken, "taken asleep");
}

#[actix_web::test]
async fn a_notification_whose_use_would_be_due_for_a_record_wakes_the_session() {
    // Real time: the records are committed by the ledger writer's thread. TTL 16 s: a record
    // is due once its use is more than 1 s past the one recorded.
    let h = harness_with(cfg(|c| c.sessions.idle_ttl_secs = 16)).await;
    let c = h.client("2025-11-25").await;
    let created = recorded_last_use(&h, &c).await;
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (1, 0), "its initialized taken asleep");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let note = json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"});
    assert_eq!(c.notify(note).await, StatusCode::ACCEPTED);
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (1, 1), "woken to record its use");
    assert!(recorded_last_use(&h, &c).await >= created + 1_100, "its record states that use");
}

#[actix_web::test]
async fn a_new_session_gets_its_actor_at_once_with_hibernation_off() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.hibernate_after_ms = 0)).await;
    let r = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!((h.sup.session_count(), h.sup.sessions_hibernating()), (1, 0));
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (0, 0));
}

#[actix_web::test]
async fn a_woken_session_keeps_its_log_level() {
    // Real time: the level's record is committed by the ledger writer's thread.
    let h = harness_with(cfg(|c| c.sessions.hibernate_after_ms = 100)).await;
    let quiet = h.client("2025-11-25").await;
    let mut r = json_call(&quiet, 1, "logging/setLevel", json!({"level": "warning"})).await;
    assert_eq!(r.json().await["id"], 1);
    let loud = h.client("2025-11-25").await;
    ping(&loud, 1).await;
    hibernating(&h, 2).await;
    h.gate.open(2);
    // The gated tool logs at info: heard by the session at the default level only.
    let logs =
        |msgs: &[Value]| msgs.iter().filter(|m| m["method"] == "notifications/message").count();
    let msgs = quiet.call_tool(2, "gated", json!({})).await.rest().await;
    assert_eq!((logs(&msgs), text_of(msgs.last().unwrap())), (0, "done"), "{msgs:?}");
    let msgs = loud.call_tool(2, "gated", json!({})).await.rest().await;
    assert_eq!(logs(&msgs), 2, "{msgs:?}");
}

#[actix_web::test]
async fn a_session_refused_its_hibernation_by_a_drain_stays_registered_until_stopped() {
    tokio::time::pause();
    let h = harness().await;
    let idle = h.client("2025-11-25").await;
    ping(&idle, 1).await;
    let busy = h.client("2025-11-25").await;
    let _running = busy.call_tool(2, "gated", json!({})).await;
    h.gate.started(1).await;
    h.sup.begin_drain();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        (h.sup.session_count(), h.sup.sessions_hibernating()),
        (2, 0),
        "the idle session stays, awake, while the drain waits for the busy one"
    );
    assert_eq!(h.sup.shutdown(), 2, "and is told to stop");
    h.gate.open(1);
    until("both sessions stopped", || h.sup.session_count() == 0).await;
}

#[actix_web::test]
async fn a_session_keeping_a_stream_hibernates_only_once_the_stream_is_gone() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.retention_after_delivery_ms = 3_000)).await;
    let c = h.client("2025-11-25").await;
    let mut r = c.call_tool(1, "echo", json!({"text": "x"})).await;
    assert_eq!(text_of(&r.rest().await[0]), "x");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let s = h.sup.stats_snapshot();
    assert_eq!((s.streams, h.sup.sessions_hibernating()), (1, 0), "its answer is kept");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    hibernating(&h, 1).await;
    assert_eq!(h.sup.stats_snapshot().streams, 0);
}

/// A sleeping session keeps no cursor signer: it is derived again as the session wakes, and
/// is the same. A cursor it minted before it slept still reads as its own (its stream gone:
/// 410), not as forged (400).
#[actix_web::test]
async fn a_cursor_minted_before_hibernation_is_the_woken_sessions_own() {
    tokio::time::pause();
    // Without authentication, and with a caller (the signer is bound to its principal too).
    for token in [None, Some("ta")] {
        let h = harness_with(cfg(|c| {
            c.sessions.retention_after_delivery_ms = 500;
            if token.is_some() {
                two_callers(c);
            }
        }))
        .await;
        let c = h.client_as("2025-11-25", token).await;
        let mut r = c.call_tool(1, "echo", json!({"text": "x"})).await;
        assert_eq!(text_of(&r.rest().await[0]), "x");
        let cursor = r.first_id();
        hibernating(&h, 1).await;
        assert_refused(c.resume(&cursor).await, StatusCode::GONE, -32005).await;
        assert_eq!(h.sup.sessions_hibernating(), 0, "woken by the resume");
    }
}

#[actix_web::test]
async fn a_hibernating_session_expires_at_its_idle_ttl_and_then_answers_404() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.idle_ttl_secs = 3)).await;
    let c = hibernated_client(&h).await;
    // Woken by the sweeper at its expiry (within a second of it).
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    until("the session expired", || h.sup.session_count() == 0).await;
    assert_eq!(h.sup.sessions_hibernating(), 0);
    assert_eq!(json_call(&c, 2, "ping", json!({})).await.status, StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn a_request_after_the_idle_ttl_never_reaches_the_hibernating_session() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.idle_ttl_secs = 3)).await;
    let c = hibernated_client(&h).await;
    // Past its expiry: whether the request or the sweeper wakes it, it expires before it
    // handles anything.
    tokio::time::advance(Duration::from_millis(3_000)).await;
    assert_eq!(json_call(&c, 2, "ping", json!({})).await.status, StatusCode::NOT_FOUND);
    until("the session expired", || h.sup.session_count() == 0).await;
}

#[actix_web::test]
async fn a_hibernating_session_parks_at_its_park_time_and_is_revived_from_the_ledger() {
    // Real time: the revive waits for the ledger writer's thread.
    let h = harness_with(cfg(|c| {
        c.sessions.hibernate_after_ms = 100;
        c.sessions.park_after_secs = 1;
    }))
    .await;
    let c = hibernated_client(&h).await;
    assert_eq!(h.sup.stats_snapshot().sessions_parked, 0, "hibernating first");
    // Woken by the sweeper at its park time, where its actor parks it.
    until("the session parked", || h.sup.stats_snapshot().sessions_parked == 1).await;
    assert_eq!((h.sup.session_count(), h.sup.sessions_hibernating()), (0, 0));
    ping(&c, 2).await;
    assert_eq!(h.sup.stats_snapshot().sessions_revived, 1, "read back from the ledger");
}

#[actix_web::test]
async fn a_hibernating_session_is_deleted_and_then_answers_404() {
    tokio::time::pause();
    let h = harness().await;
    let c = hibernated_client(&h).await;
    let woken = h.sup.sessions_hibernated_and_woken().1;
    assert!(c.delete().await.status.is_success());
    assert_eq!((h.sup.session_count(), h.sup.sessions_hibernating()), (0, 0));
    assert_eq!(h.sup.sessions_hibernated_and_woken().1, woken, "ended as data, not woken");
    assert_eq!(json_call(&c, 2, "ping", json!({})).await.status, StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn a_deleted_sleeping_sessions_end_is_in_the_ledger_and_it_is_never_revived() {
    // Real time: the end is committed by the ledger writer's thread.
    let h = harness().await;
    let c = h.client("2025-11-25").await;
    let gone = h.client("2025-11-25").await;
    assert_eq!(h.sup.sessions_hibernating(), 2, "new, kept as data");
    assert!(gone.delete().await.status.is_success());
    assert_eq!(h.sup.sessions_hibernated_and_woken(), (2, 0), "ended as data, not woken");
    use mcp_runtime::ledger::codec::{Record, RecordState, decode, session_key};
    let w = h.sup.ledger_writer();
    w.wait_committed(w.barrier()).await.expect("the ledger commits");
    let hmac = h.sup.session_hmac(&mcp_runtime::proto::ids::SessionId::parse(&gone.sid).unwrap());
    let bytes = w.store().get(&session_key(&hmac), 0).expect("a read").expect("its record");
    match decode(&bytes).expect("a record") {
        Record::Session(r) => assert_eq!(r.state, RecordState::Deleted),
        other => panic!("not a session record: {other:?}"),
    }
    // Not found here, and not brought back from the ledger.
    assert_eq!(json_call(&gone, 1, "ping", json!({})).await.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.delete().await.status, StatusCode::NOT_FOUND);
    // The other session is untouched.
    ping(&c, 1).await;
}

#[actix_web::test]
async fn another_callers_delete_of_a_hibernating_session_is_404_and_ends_nothing() {
    tokio::time::pause();
    let h = harness_with_two_callers().await;
    let alice = h.client_as("2025-11-25", Some("ta")).await;
    let bob = as_caller(&alice, "tb");
    assert_eq!(bob.delete().await.status, StatusCode::NOT_FOUND);
    assert_eq!((h.sup.session_count(), h.sup.sessions_hibernating()), (1, 1));
    ping(&alice, 1).await;
}

#[actix_web::test]
async fn a_hibernating_session_keeps_its_place_in_its_callers_quota() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.quotas.sessions_per_principal = 1)).await;
    let c = hibernated_client(&h).await;
    let r = h.send(post().set_payload(init_body("2025-11-25"))).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "the caller's one session counts");
    ping(&c, 2).await;
}

/// The last use its ledger record states, once everything submitted so far is committed.
async fn recorded_last_use(h: &Harness, c: &Client<'_>) -> u64 {
    use mcp_runtime::ledger::codec::{Record, decode, session_key};
    let w = h.sup.ledger_writer();
    w.wait_committed(w.barrier()).await.expect("the ledger commits");
    let hmac = h.sup.session_hmac(&mcp_runtime::proto::ids::SessionId::parse(&c.sid).unwrap());
    let bytes = w.store().get(&session_key(&hmac), 0).expect("a read").expect("its record");
    match decode(&bytes).expect("a record") {
        Record::Session(r) => r.last_used_ms,
        other => panic!("not a session record: {other:?}"),
    }
}

#[actix_web::test]
async fn a_stop_records_hibernating_sessions_without_waking_them() {
    // Real time: the records are committed by the ledger writer's thread.
    let h = harness_with(cfg(|c| c.sessions.hibernate_after_ms = 100)).await;
    let c = h.client("2025-11-25").await;
    let created = recorded_last_use(&h, &c).await;
    // Past the second a stop lets a record lag its last use.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    ping(&c, 1).await;
    hibernating(&h, 1).await;
    // Its record was not written again for that use (a sixteenth of the TTL had not passed).
    assert_eq!(recorded_last_use(&h, &c).await, created);
    assert_eq!(h.sup.shutdown(), 1, "counted with the sessions told to stop");
    assert_eq!((h.sup.session_count(), h.sup.sessions_hibernating()), (0, 0), "gone at once");
    assert_eq!(
        h.sup.sessions_hibernated_and_woken(),
        (2, 1),
        "born as data and woken by its first request, then hibernated: recorded as data, not woken"
    );
    assert!(recorded_last_use(&h, &c).await >= created + 1_100, "its record states its last use");
}

/// A memory store's hooks ([`Hooked`]): the key of every record written (`Op::Put`).
#[derive(Debug, Default)]
struct PutsSeen {
    puts: parking_lot::Mutex<Vec<String>>,
}

impl StoreHooks for PutsSeen {
    fn before_apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        let keys = ops.iter().filter_map(|o| match o {
            Op::Put { key, .. } => Some(key.clone()),
            _ => None,
        });
        self.puts.lock().extend(keys);
        Ok(())
    }
}

#[actix_web::test]
async fn a_stop_writes_only_the_lru_row_of_a_sleeping_session_its_record_already_states() {
    use mcp_runtime::ledger::codec::{SESSIONS_LRU, session_key};
    // Real time: the records are committed by the ledger writer's thread.
    let cfg = cfg(|c| c.sessions.hibernate_after_ms = 100);
    let store = std::sync::Arc::new(Hooked::<PutsSeen>::default());
    let ledger = mcp_runtime::ledger::Ledger::on_store(store.clone(), &cfg).expect("a ledger");
    let h = harness_on(cfg, ledger).await;
    let idle = h.client("2025-11-25").await;
    let created = recorded_last_use(&h, &idle).await;
    // A notification taken asleep moves its last use past its record, within the slack.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cancel =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}});
    assert_eq!(idle.notify(cancel).await, StatusCode::ACCEPTED);
    let used = h.client("2025-11-25").await;
    // Past the second a stop lets a record lag its last use.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    ping(&used, 1).await;
    hibernating(&h, 2).await;
    let used_created = recorded_last_use(&h, &used).await;
    let name = |c: &Client<'_>| {
        h.sup.session_hmac(&mcp_runtime::proto::ids::SessionId::parse(&c.sid).unwrap())
    };
    let (idle_key, used_key) = (session_key(&name(&idle)), session_key(&name(&used)));
    let puts = |key: &str| store.puts.lock().iter().filter(|k| *k == key).count();
    assert_eq!((puts(&idle_key), puts(&used_key)), (1, 1), "each written once, at its handshake");
    assert_eq!(h.sup.shutdown(), 2);
    let w = h.sup.ledger_writer();
    w.wait_committed(w.barrier()).await.expect("the ledger commits");
    assert_eq!(puts(&idle_key), 1, "the idle one's record is not written again");
    assert_eq!(puts(&used_key), 2, "the used one's is: its last use moved");
    assert_eq!(recorded_last_use(&h, &idle).await, created, "its handshake's record stays");
    assert!(recorded_last_use(&h, &used).await >= used_created + 1_100, "the other's last use");
    let lru = w.store().index_lowest(SESSIONS_LRU, 10, 0).expect("a read");
    // Scored by its exact last use (the notification's, not its record's).
    let idle_row = lru.iter().find(|(m, _)| *m == *name(&idle)).expect("its LRU row");
    assert!((created + 20..created + 1_000).contains(&idle_row.1), "{lru:?}");
    assert_eq!(lru.len(), 2, "both are out of memory: {lru:?}");
}

#[actix_web::test]
async fn with_hibernation_off_an_idle_session_keeps_its_actor() {
    tokio::time::pause();
    let h = harness_with(cfg(|c| c.sessions.hibernate_after_ms = 0)).await;
    let c = h.client("2025-11-25").await;
    ping(&c, 1).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!((h.sup.sessions_hibernating(), h.sup.session_count()), (0, 1));
}
