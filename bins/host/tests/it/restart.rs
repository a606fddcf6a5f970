//! The real binary on a SQLite ledger, killed (SIGKILL) or stopped (SIGTERM) and started
//! again on the same ledger and port: sessions, their log level and version, and the
//! responses buffered for disconnected clients survive; a request that was running answers
//! its resume with the documented "server restarted" error; deleted sessions stay 404.
//! `MCP_HOST_BIN` overrides the binary.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use mcp_devtools::TempDir;
use serde_json::{Value, json};

#[test]
fn a_response_buffered_for_a_disconnected_client_survives_sigkill_and_is_delivered_once() {
    let dir = TempDir::new("restart-buffered");
    let host = start(&dir, 0);
    let sid = initialize(&host.addr);
    set_level_info(&host.addr, &sid);
    // Two log messages and the answer, produced after the client hung up.
    let cursor = call_and_hang_up(
        &host.addr,
        &sid,
        3,
        "soak_flood",
        json!({"delay_ms": 300, "count": 2, "bytes": 8}),
    );
    wait_for_committed_events(&dir, 3);
    let host = host.kill_and_restart(&dir);

    let (status, got) = resume(&host.addr, &sid, &cursor);
    assert_eq!(status, 200);
    let messages: Vec<Value> = got.iter().map(|(_, d)| json_of(d)).collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(messages[..2].iter().all(|m| m["method"] == "notifications/message"));
    assert_eq!(
        (messages[2]["id"].clone(), messages[2]["result"]["content"][0]["text"].clone()),
        (json!(3), json!("flooded 2"))
    );
    let ids: std::collections::HashSet<_> = got.iter().map(|(id, _)| id.clone().unwrap()).collect();
    assert_eq!(ids.len(), 3, "distinct cursors");
    // Resuming after the last one: nothing is delivered twice.
    let last = got[2].0.clone().unwrap();
    let (status, again) = resume(&host.addr, &sid, &last);
    assert_eq!((status, again.len()), (200, 0), "{again:?}");
}

#[test]
fn a_revived_session_keeps_its_version_and_log_level_across_sigkill() {
    let dir = TempDir::new("restart-level");
    let host = start(&dir, 0);
    let sid = initialize_as(&host.addr, "2025-06-18", &[]);
    set_level_info(&host.addr, &sid);
    // The level change is committed before the kill (a record write, no event).
    wait_for_ledger(
        &dir,
        "SELECT count(*) FROM kv WHERE key LIKE 's/%' AND CAST(value AS TEXT) LIKE '%\"log_level\":\"info\"%'",
        1,
    );
    let host = host.kill_and_restart(&dir);

    let body = json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"soak_flood","arguments":{"count":1,"bytes":4}}}).to_string();
    let (status, _, b) = http(
        &host.addr,
        "POST",
        &[SSE, ("Mcp-Session-Id", &sid), ("MCP-Protocol-Version", "2025-11-25")],
        &body,
        QUICK,
    );
    assert_eq!(status, 200, "the session is still valid");
    let text = String::from_utf8_lossy(&b);
    let (before_data, _) = text.split_once("data: {").expect("events");
    assert!(
        !before_data.contains("retry:"),
        "no priming event: still a 2025-06-18 session: {text}"
    );
    let got = events(&b);
    assert_eq!(json_of(&got[0].1)["method"], "notifications/message", "the log level survived");
    assert_eq!(json_of(&got[1].1)["id"], 4);
}

#[test]
fn a_request_running_at_the_kill_ends_its_resume_with_the_restarted_error() {
    let dir = TempDir::new("restart-running");
    let host = start(&dir, 0);
    let sid = initialize(&host.addr);
    let cursor = call_and_hang_up(&host.addr, &sid, 7, "soak_flood", json!({"delay_ms": 10_000}));
    // The stream's record (opened) is committed; the tool is still waiting.
    wait_for_ledger(&dir, "SELECT count(*) FROM kv WHERE key LIKE 't/%'", 1);
    let host = host.kill_and_restart(&dir);

    let (status, got) = resume(&host.addr, &sid, &cursor);
    assert_eq!(status, 200);
    assert_eq!(got.len(), 1, "{got:?}");
    let error = json_of(&got[0].1);
    assert_eq!((error["id"].clone(), error["error"]["code"].clone()), (json!(7), json!(-32009)));
    // The request id is free again: the client can re-issue it.
    let (status, v) = post_json(
        &host.addr,
        &sid,
        &json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"again"}}}),
    );
    assert_eq!((status, v["result"]["content"][0]["text"].clone()), (200, json!("again")));
}

#[test]
fn sessions_survive_a_sigterm_restart_and_deleted_ones_stay_404() {
    let dir = TempDir::new("restart-term");
    let mut host = start(&dir, 0);
    let kept = initialize(&host.addr);
    let deleted = initialize(&host.addr);
    let (status, _, _) = http(
        &host.addr,
        "DELETE",
        &[("Mcp-Session-Id", &deleted), ("MCP-Protocol-Version", "2025-11-25")],
        "",
        QUICK,
    );
    assert_eq!(status, 204);
    let port = host.port();
    assert!(
        host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()),
        "a clean stop"
    );
    let host = start(&dir, port);
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    assert_eq!(post_json(&host.addr, &kept, &ping).0, 200, "the session survived");
    assert_eq!(post_json(&host.addr, &deleted, &ping).0, 404, "a deleted session stays deleted");
    assert_eq!(post_json(&host.addr, "1.not-a-session-of-ours", &ping).0, 404);
}

#[test]
fn sessions_with_and_without_their_time_in_the_id_are_found_after_restarts_whichever_is_minted() {
    let dir = TempDir::new("restart-ordered-ids");
    let unordered_ids = ["--set", "ledger.ordered_session_ids=false"];
    let host = start_with(&dir, 0, &unordered_ids);
    let unordered = initialize(&host.addr);
    assert_eq!(unordered.matches('.').count(), 1, "random bits only: {unordered}");
    let host = host.kill_and_restart(&dir);
    let ordered = initialize(&host.addr);
    let at = ordered.split('.').nth(1).unwrap_or_else(|| panic!("{ordered}"));
    assert_eq!(at.len(), 12, "the millisecond it was made: {ordered}");
    // Its record's name leads with that time.
    wait_for_ledger(&dir, &format!("SELECT count(*) FROM kv WHERE key LIKE 's/{at}%'"), 1);
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    let served = |host: &Host| {
        for sid in [&unordered, &ordered] {
            assert_eq!(post_json(&host.addr, sid, &ping).0, 200, "revived: {sid}");
        }
    };
    let host = host.kill_and_restart_with(&dir, &unordered_ids);
    served(&host);
    served(&host.kill_and_restart(&dir));
}

/// `stats {json}` lines, newest first seen, until `pred` holds (bounded).
fn wait_for_stats(host: &Host, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..500 {
        if let Some(line) = host.process.latest_stats()
            && pred(&line.value)
        {
            return line.value;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("stats never showed {what}: {:?}", host.process.latest_stats().map(|l| l.value));
}

#[test]
fn an_idle_session_is_parked_and_revived_with_its_version_principal_capabilities_and_log_level() {
    let dir = TempDir::new("park");
    let config = dir.path().join("park.toml");
    std::fs::write(&config, "[sessions]\npark_after_secs = 1\n[security.bearer_tokens]\n\"tok-alice\" = \"alice\"\n\"tok-bob\" = \"bob\"\n").unwrap();
    let host =
        start_with(&dir, 0, &["--config", config.to_str().unwrap(), "--stats-every-ms", "50"]);
    let alice = [("Authorization", "Bearer tok-alice")];
    let sid = initialize_as(&host.addr, "2025-06-18", &alice);
    let as_alice = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        [alice[0], ("MCP-Protocol-Version", "2025-11-25")]
            .into_iter()
            .chain(extra.iter().copied())
            .collect()
    };
    let with_sid = |h: Vec<(&'static str, &'static str)>| -> Vec<(String, String)> {
        h.into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .chain([("Mcp-Session-Id".to_owned(), sid.clone())])
            .collect()
    };
    let send = |method: &str, h: &[(String, String)], body: &str, wait: Duration| {
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        http(&host.addr, method, &h, body, wait)
    };
    let set_level =
        json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}})
            .to_string();
    assert_eq!(
        send("POST", &with_sid(as_alice(&[("Accept", "application/json")])), &set_level, QUICK).0,
        200
    );

    let parked = wait_for_stats(&host, "the session parked", |v| {
        v["sessions_parked"] == 1 && v["sessions"] == 0
    });
    assert_eq!(parked["sessions_revived"], 0);

    // Another caller cannot revive it.
    let ping = json!({"jsonrpc":"2.0","id":3,"method":"ping"}).to_string();
    let bob = with_sid(vec![
        ("Authorization", "Bearer tok-bob"),
        ("Accept", "application/json"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ]);
    assert_eq!(
        send("POST", &bob, &ping, QUICK).0,
        404,
        "a parked session is bound to its principal"
    );

    // Its owner's next request revives it: same version (no priming), same log level.
    let call = json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"soak_flood","arguments":{"count":1,"bytes":4}}}).to_string();
    let (status, _, b) = send("POST", &with_sid(as_alice(&[SSE])), &call, QUICK);
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&b);
    assert!(
        text.split_once("data: {").is_some_and(|(p, _)| !p.contains("retry:")),
        "no priming event: still 2025-06-18: {text}"
    );
    let got = events(&b);
    assert_eq!(
        json_of(&got[0].1)["method"],
        "notifications/message",
        "the log level survived parking"
    );
    let revived = wait_for_stats(&host, "the revive", |v| v["sessions_revived"] == 1);
    assert_eq!(revived["sessions"], 1);

    // Its capabilities too: a tool that asks the client for sampling gets to ask.
    let sample = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"test_sampling","arguments":{"prompt":"hi"}}}).to_string();
    let (_, _, b) = send("POST", &with_sid(as_alice(&[SSE])), &sample, Duration::from_secs(1));
    let first =
        events(&b).into_iter().map(|(_, d)| json_of(&d)).find(|m| m.is_object()).expect("an event");
    assert_eq!(
        first["method"], "sampling/createMessage",
        "the sampling capability survived parking: {first}"
    );
}

#[test]
fn an_expired_session_stays_404_across_a_restart() {
    let dir = TempDir::new("restart-expired");
    let host = start_with(&dir, 0, &["--session-ttl-secs", "1", "--stats-every-ms", "50"]);
    let sid = initialize(&host.addr);
    let ping = json!({"jsonrpc":"2.0","id":2,"method":"ping"});
    assert_eq!(post_json(&host.addr, &sid, &ping).0, 200);
    let _ = wait_for_stats(&host, "the session expired", |v| v["sessions"] == 0);
    // The expiry is recorded (a tombstone) before the kill.
    wait_for_ledger(
        &dir,
        "SELECT count(*) FROM kv WHERE key LIKE 's/%' AND CAST(value AS TEXT) LIKE '%\"state\":\"expired\"%'",
        1,
    );
    let host = host.kill_and_restart(&dir);
    assert_eq!(post_json(&host.addr, &sid, &ping).0, 404);
}

/// Open the GET stream, have a JSON-mode call log onto it, and hang up: the log's cursor.
fn get_stream_cursor_after_one_notification(addr: &str, sid: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(QUICK)).unwrap();
    let req = format!(
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    // The priming event first: the stream is registered before the call below.
    while !String::from_utf8_lossy(&raw).contains("id:") {
        let n = s.read(&mut buf).expect("the GET stream's priming event");
        assert!(n > 0);
        raw.extend_from_slice(&buf[..n]);
    }
    let call = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"soak_flood","arguments":{"count":1,"bytes":4}}});
    assert_eq!(post_json(addr, sid, &call).0, 200);
    while !String::from_utf8_lossy(&raw).contains("notifications/message") {
        let n = s.read(&mut buf).expect("the log on the GET stream");
        assert!(n > 0);
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (before, _) = text.split_once("notifications/message").unwrap();
    before
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .next_back()
        .map(|c| c.trim().to_owned())
        .expect("the log's cursor")
}

#[test]
fn the_get_stream_resumes_after_a_clean_stop_and_answers_410_after_a_crash_that_may_have_lost_its_tail()
 {
    let dir = TempDir::new("restart-get");
    let mut host = start(&dir, 0);
    let sid = initialize(&host.addr);
    set_level_info(&host.addr, &sid);
    let cursor = get_stream_cursor_after_one_notification(&host.addr, &sid);
    wait_for_committed_events(&dir, 1);

    // A clean stop: everything reached the ledger; the GET stream resumes (nothing missed).
    let port = host.port();
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));
    let host = start(&dir, port);
    let (status, got) = resume(&host.addr, &sid, &cursor);
    assert_eq!((status, got.len()), (200, 0), "{got:?}");

    // A crash: its last batch may be missing, and a GET stream has no request to answer
    // with the restarted error, so its resume is refused explicitly.
    let cursor = get_stream_cursor_after_one_notification(&host.addr, &sid);
    // Its log is `e/<32 hex>/<stream id>`, the id of this second life at least 2^32 (10 digits).
    wait_for_ledger(&dir, "SELECT count(*) FROM events WHERE length(log) >= 45", 1);
    let host = host.kill_and_restart(&dir);
    let (status, _) = resume(&host.addr, &sid, &cursor);
    assert_eq!(status, 410, "never a silent skip");
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    assert_eq!(post_json(&host.addr, &sid, &ping).0, 200, "the session itself survived");
}

fn keyed_call(id: i64, tool: &str, args: Value, key: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args,"_meta":{"io.mcp-host/idempotencyKey":key}}})
}

fn ledger_stats(addr: &str, sid: &str) -> Value {
    let (status, v) = post_json(
        addr,
        sid,
        &json!({"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"ledger_stats","arguments":{}}}),
    );
    assert_eq!(status, 200);
    v["result"]["structuredContent"].clone()
}

#[test]
fn a_write_answered_before_a_sigkill_is_replayed_after_it_and_not_applied_again() {
    let dir = TempDir::new("restart-receipt");
    let host = start(&dir, 0);
    let sid = initialize(&host.addr);
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":"order-1"}}});
    let (status, first) = post_json(&host.addr, &sid, &call);
    assert_eq!((status, first["result"]["content"][0]["text"].clone()), (200, json!("order-1")));
    wait_for_ledger(
        &dir,
        "SELECT count(*) FROM kv WHERE key LIKE 'r/%' AND CAST(value AS TEXT) LIKE '%\"state\":\"done\"%'",
        1,
    );
    let host = host.kill_and_restart(&dir);

    // The answer was lost, say: the client retries in a new session.
    let fresh = initialize(&host.addr);
    let (status, again) = post_json(&host.addr, &fresh, &call);
    assert_eq!(status, 200);
    assert_eq!(
        again["result"]["structuredContent"], first["result"]["structuredContent"],
        "the recorded result: {again}"
    );
    assert_eq!(again["result"]["_meta"]["io.mcp-host/idempotency"], "replayed");
    let stats = ledger_stats(&host.addr, &fresh);
    assert_eq!(
        (stats["applied"].clone(), stats["duplicates"].clone()),
        (json!(1), json!(0)),
        "applied once across the restart: {stats}"
    );
}

#[test]
fn a_write_interrupted_by_a_sigkill_is_outcome_unknown_and_an_idempotent_one_runs_again() {
    let dir = TempDir::new("restart-interrupted");
    let host = start(&dir, 0);
    let sid = initialize(&host.addr);
    // Both apply at once, then hold their answer; the kill falls between.
    let append = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":"pay-1","hold_ms":20_000}}});
    // The set holds long enough for the waits below on a loaded machine; its re-run holds
    // as long.
    let set = keyed_call(
        3,
        "ledger_set",
        json!({"name": "colour", "value": "blue", "hold_ms": 4_000}),
        "set-1",
    );
    hang_up_after_priming(&host.addr, &sid, &append);
    hang_up_after_priming(&host.addr, &sid, &set);
    wait_for_ledger(
        &dir,
        "SELECT count(*) FROM kv WHERE key LIKE 'r/%' AND CAST(value AS TEXT) LIKE '%\"state\":\"running\"%'",
        2,
    );
    // The append's effect happened (its journal line), its answer is held.
    let journal = dir.path().join("mcp-host.db.appends");
    for _ in 0..500 {
        if std::fs::read_to_string(&journal).is_ok_and(|j| j.contains("pay-1")) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        std::fs::read_to_string(&journal).unwrap_or_default().contains("pay-1"),
        "the append never ran"
    );
    let host = host.kill_and_restart(&dir);

    let (status, unknown) = post_json(&host.addr, &sid, &append);
    assert_eq!(status, 200);
    assert_eq!(unknown["result"]["isError"], true, "{unknown}");
    assert!(
        unknown["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("may or may not have taken effect"),
        "{unknown}"
    );
    let (status, rerun) = post_json(&host.addr, &sid, &set);
    assert_eq!(
        (status, rerun["result"]["content"][0]["text"].clone()),
        (200, json!("colour set")),
        "the idempotent tool ran again: {rerun}"
    );
    assert!(rerun["result"]["_meta"].is_null(), "a new execution, not a replay: {rerun}");
    let stats = ledger_stats(&host.addr, &sid);
    assert_eq!(
        (stats["applied"].clone(), stats["duplicates"].clone(), stats["sets"].clone()),
        (json!(1), json!(0), json!(1)),
        "{stats}"
    );
}

#[test]
fn a_session_killed_right_after_its_initialize_answered_is_still_valid() {
    let dir = TempDir::new("restart-fresh");
    let host = start(&dir, 0);
    // No wait for the ledger: the id is handed out only once its record is committed.
    let sids: Vec<String> = (0..5).map(|_| initialize(&host.addr)).collect();
    let host = host.kill_and_restart(&dir);
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    for sid in &sids {
        assert_eq!(post_json(&host.addr, sid, &ping).0, 200, "session {sid} survived");
    }
}

#[test]
fn after_a_key_rotation_sessions_and_cursors_of_the_previous_key_stay_valid_and_move_to_the_new_key()
 {
    let dir = TempDir::new("restart-rotate");
    let mut host = start(&dir, 0);
    let sid = initialize(&host.addr);
    set_level_info(&host.addr, &sid);
    let cursor = call_and_hang_up(
        &host.addr,
        &sid,
        3,
        "soak_flood",
        json!({"delay_ms": 300, "count": 2, "bytes": 8}),
    );
    wait_for_committed_events(&dir, 3);
    let port = host.port();
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));

    // Rotate: the old key file is kept aside and listed; a new one is created at start.
    let old_key = dir.path().join("old.key");
    std::fs::rename(dir.path().join("mcp-host.db.key"), &old_key).unwrap();
    let cfg = dir.path().join("rotate.toml");
    std::fs::write(
        &cfg,
        format!("[ledger]\nprevious_key_files = [{:?}]\n", old_key.display().to_string()),
    )
    .unwrap();
    let host = start_with(&dir, port, &["--config", &cfg.display().to_string()]);
    let (status, got) = resume(&host.addr, &sid, &cursor);
    assert_eq!(status, 200, "a cursor of the previous key resumes");
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(json_of(&got[2].1)["id"], 3);
    let port = host.port();
    drop(host.process);

    // Moved: the previous key is no longer needed for this session.
    let host = start(&dir, port);
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    assert_eq!(post_json(&host.addr, &sid, &ping).0, 200, "the session moved to the new key");
}

#[test]
fn in_sync_mode_every_event_a_client_received_survives_a_sigkill_right_after() {
    let dir = TempDir::new("restart-sync");
    let cfg = dir.path().join("sync.toml");
    std::fs::write(&cfg, "[ledger]\ndurability = \"sync\"\n").unwrap();
    let host = start_with(&dir, 0, &["--config", &cfg.display().to_string()]);
    let sid = initialize(&host.addr);
    set_level_info(&host.addr, &sid);
    // The whole stream is read, then the host is killed at once: no wait for the ledger.
    let body = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"soak_flood","arguments":{"count":5,"bytes":8}}}).to_string();
    let (status, _, b) = http(
        &host.addr,
        "POST",
        &[SSE, ("Mcp-Session-Id", &sid), ("MCP-Protocol-Version", "2025-11-25")],
        &body,
        QUICK,
    );
    assert_eq!(status, 200);
    let received = events(&b);
    assert_eq!(received.len(), 6, "five messages and the answer: {received:?}");
    let first = received[0].0.clone().expect("an event id");
    let host = host.kill_and_restart_with(&dir, &["--config", &cfg.display().to_string()]);

    let (status, replayed) = resume(&host.addr, &sid, &first);
    assert_eq!(status, 200);
    assert_eq!(
        replayed,
        received[1..].to_vec(),
        "everything after the first event, exactly as received"
    );
}

#[test]
fn a_delete_is_acknowledged_once_recorded_so_a_sigkill_right_after_it_never_brings_the_session_back()
 {
    let dir = TempDir::new("restart-delete");
    // Batches wait 100 ms for more (the most allowed): an acknowledgement sent before its
    // record's commit would leave a wide window for the kill below.
    let linger = ["--set", "ledger.commit_linger_us=100000"];
    let host = start_with(&dir, 0, &linger);
    let deleted = initialize(&host.addr);
    let (status, _, _) = http(
        &host.addr,
        "DELETE",
        &[("Mcp-Session-Id", &deleted), ("MCP-Protocol-Version", "2025-11-25")],
        "",
        QUICK,
    );
    assert_eq!(status, 204);
    let host = host.kill_and_restart_with(&dir, &linger);
    let ping = json!({"jsonrpc":"2.0","id":9,"method":"ping"});
    assert_eq!(post_json(&host.addr, &deleted, &ping).0, 404, "deleted stays deleted");
}
