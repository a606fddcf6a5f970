//! Several hosts sharing one Redis ledger (`ledger.redis_shared`), each request free to go to
//! any of them: a session made on one is served by the others, an end on one is an end on
//! all, and a host paused past its lease is fenced while the others serve on.

use std::time::Duration;

use serde_json::json;

use crate::common::{self, Host, initialize, post_json};
use mcp_devtools::{RedisCluster, RedisServer, TempDir};

/// A host on the shared ledger at `url` (its key file in `dir`, which every host of the test
/// shares), with `extra` arguments.
fn shared_host(dir: &TempDir, url: &str, extra: &[&str]) -> Host {
    let mut args = vec!["--ledger", url, "--set", "ledger.redis_shared=true"];
    args.extend_from_slice(extra);
    common::start_with(dir, 0, &args)
}

/// The Redis a test's hosts share: one server, or a Cluster of three primaries.
enum Shared {
    One(RedisServer),
    Cluster(RedisCluster),
}

impl Shared {
    fn start(cluster: bool) -> Shared {
        if cluster {
            Shared::Cluster(RedisCluster::start().expect("a Redis Cluster of redis-servers"))
        } else {
            Shared::One(
                RedisServer::start().expect("a redis-server (scripts/test.sh installs Debian's)"),
            )
        }
    }

    fn url(&self) -> String {
        match self {
            Shared::One(s) => s.url(),
            Shared::Cluster(c) => c.url(),
        }
    }

    /// The servers (a Cluster's every node).
    fn servers(&self) -> &[RedisServer] {
        match self {
            Shared::One(s) => std::slice::from_ref(s),
            Shared::Cluster(c) => c.nodes(),
        }
    }

    /// Wait until `hosts` subscriptions listen on the channel whose name ends with `suffix`
    /// (what is published before a subscription is missed).
    fn wait_for_subscribers(&self, suffix: &str, hosts: u64) {
        let subscribed =
            || -> Option<u64> { self.servers().iter().map(|n| n.subscribers(suffix)).sum() };
        common::wait_until(
            &format!("{hosts} subscribed to {suffix}"),
            Duration::from_secs(10),
            || subscribed() == Some(hosts),
        );
    }

    /// How many keys match `pattern`, on every node.
    fn count_keys(&self, pattern: &str) -> Option<usize> {
        match self {
            Shared::One(s) => s.count_keys(pattern),
            Shared::Cluster(c) => c.nodes().iter().map(|n| n.count_keys(pattern)).sum(),
        }
    }
}

/// The tests that run twice: on one Redis server and on a Redis Cluster (each `fn(cluster)`).
macro_rules! on_one_server_and_on_a_cluster {
    ($($name:ident),* $(,)?) => {
        mod on_one_server {
            $( #[test] fn $name() { super::$name(false) } )*
        }
        mod on_a_cluster {
            $( #[test] fn $name() { super::$name(true) } )*
        }
    };
}

on_one_server_and_on_a_cluster!(
    any_host_sharing_a_redis_ledger_serves_a_session_made_on_another_and_a_delete_on_one_ends_it_on_all,
    a_host_paused_past_its_lease_on_a_shared_ledger_exits_and_the_others_serve_its_sessions,
    a_stream_one_host_serves_is_resumed_on_another_and_followed_to_its_end_without_a_gap_or_a_repeat,
    a_stream_whose_host_died_is_taken_over_once_and_answered_restarted_for_its_request,
    one_idempotency_key_sent_to_two_hosts_at_once_runs_once_and_both_get_its_outcome,
    two_hosts_adding_to_one_basket_at_once_lose_no_item,
    a_clients_answer_posted_to_another_host_reaches_the_request_that_asked,
    a_list_change_and_a_resource_update_announced_on_one_host_reach_a_listen_stream_on_another,
    a_listen_stream_is_told_everything_changed_when_its_hosts_subscription_to_the_others_was_cut,
);

/// Two hosts sharing a Redis of their own (a Cluster if `cluster`), with `extra` arguments,
/// their key file in a directory named after `name`.
fn two_hosts_on(cluster: bool, name: &str, extra: &[&str]) -> (Shared, TempDir, Host, Host) {
    let shared = Shared::start(cluster);
    let url = shared.url();
    let dir = TempDir::new(name);
    let (a, b) = (shared_host(&dir, &url, extra), shared_host(&dir, &url, extra));
    (shared, dir, a, b)
}

/// A Redis of its own and two hosts sharing it (with `extra` arguments), their key file in a
/// directory named after `name`.
fn two_hosts(name: &str, extra: &[&str]) -> (RedisServer, TempDir, Host, Host) {
    let server = RedisServer::start().expect("a redis-server (scripts/test.sh installs Debian's)");
    let url = server.url();
    let dir = TempDir::new(name);
    let (a, b) = (shared_host(&dir, &url, extra), shared_host(&dir, &url, extra));
    (server, dir, a, b)
}

fn echo(id: i64, text: &str) -> serde_json::Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo","arguments":{"text":text}}})
}

/// POST `body` (a notification or an answer) to `addr` in session `sid`: its status and body.
fn post_answer(addr: &str, sid: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("Mcp-Session-Id", sid),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let (status, _, body) =
        common::http(addr, "POST", &headers, &body.to_string(), Duration::from_millis(500));
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

/// [`post_answer`]'s status.
fn post_to(addr: &str, sid: &str, body: &serde_json::Value) -> u16 {
    post_answer(addr, sid, body).0
}

fn delete(addr: &str, sid: &str) -> u16 {
    common::http(
        addr,
        "DELETE",
        &[("Mcp-Session-Id", sid), ("MCP-Protocol-Version", "2025-11-25")],
        "",
        common::QUICK,
    )
    .0
}

fn any_host_sharing_a_redis_ledger_serves_a_session_made_on_another_and_a_delete_on_one_ends_it_on_all(
    cluster: bool,
) {
    let server = Shared::start(cluster);
    let url = server.url();
    let dir = TempDir::new("shared-any");
    let (a, b) = (shared_host(&dir, &url, &[]), shared_host(&dir, &url, &[]));
    let sid = initialize(&a.addr);
    // Round robin, no affinity: every request may land on either host.
    for (i, host) in [&b, &a, &b, &a].into_iter().enumerate() {
        let text = format!("call {i}");
        let (status, body) = post_json(&host.addr, &sid, &echo(10 + i as i64, &text));
        assert_eq!(status, 200, "host {}: {body}", host.addr);
        assert_eq!(body["result"]["content"][0]["text"], text.as_str());
    }
    // A second session, deleted on the host that did not make it: both hosts hold it live
    // now, and the one that did not delete it hears of the end.
    let other = initialize(&b.addr);
    let ping = json!({"jsonrpc":"2.0","id":2,"method":"ping"});
    assert_eq!(post_json(&a.addr, &other, &ping).0, 200);
    assert_eq!(delete(&a.addr, &other), 204);
    common::wait_until("the other host ends the deleted session", Duration::from_secs(5), || {
        post_json(&b.addr, &other, &ping).0 == 404
    });
    assert_eq!(post_json(&a.addr, &other, &ping).0, 404);
    // A third host started after the end never revives it; the first session lives on there.
    let c = shared_host(&dir, &url, &[]);
    assert_eq!(post_json(&c.addr, &other, &ping).0, 404);
    assert_eq!(post_json(&c.addr, &sid, &ping).0, 200);
}

fn a_host_paused_past_its_lease_on_a_shared_ledger_exits_and_the_others_serve_its_sessions(
    cluster: bool,
) {
    let server = Shared::start(cluster);
    let url = server.url();
    let dir = TempDir::new("shared-pause");
    let fast = [
        "--set",
        "ledger.redis_lease_ms=600",
        "--set",
        "ledger.commit_wait_ms=500",
        "--set",
        "ledger.redis_timeout_ms=500",
    ];
    let (a, b) = (shared_host(&dir, &url, &fast), shared_host(&dir, &url, &fast));
    let sid = initialize(&a.addr);
    assert_eq!(post_json(&a.addr, &sid, &echo(2, "before")).0, 200);
    // `a` is paused well past its lease (a long GC pause, a VM migration): `b` serves on.
    assert!(a.process.signal("STOP"));
    std::thread::sleep(Duration::from_millis(1_500));
    let (status, body) = post_json(&b.addr, &sid, &echo(3, "while a sleeps"));
    // Requests sent to `a` meanwhile wait in its socket (its kernel took them); `a` reads
    // them once woken, before its lease thread has found the lease gone: none may be answered
    // from the session `b` took over (a 503, or no answer if `a` stopped first).
    let headers = [
        ("Accept", "application/json"),
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let queued: Vec<_> = (30..34)
        .map(|id| {
            let body = echo(id, "queued while a sleeps").to_string();
            common::send(&a.addr, "POST", "/mcp", &headers, &body).expect("queued by the kernel")
        })
        .collect();
    assert!(a.process.signal("CONT"));
    assert_eq!(status, 200, "{body}");
    for s in queued {
        let answered = common::status_in(&common::read_answer(s, Duration::from_secs(10)));
        assert!(
            matches!(answered, None | Some(503)),
            "a request queued on the paused host was answered {answered:?} from what it held"
        );
    }
    // Back, `a` finds its lease gone: what it holds may have been taken over, so it stops at
    // once, as a crash does (exit status 3), for its supervisor to start it again; `b` is
    // unaffected, and the session lives on.
    let mut a = a;
    common::wait_until("the paused host exits", Duration::from_secs(10), || {
        a.process.exit_status().is_some()
    });
    assert_eq!(a.process.exit_status().and_then(|s| s.code()), Some(3));
    let ready = |addr: &str| common::http_at(addr, "GET", "/readyz", &[], "", common::QUICK).0;
    assert_eq!(ready(&b.addr), 200);
    assert_eq!(post_json(&b.addr, &sid, &echo(4, "after")).0, 200);
    // Started again, it joins under a new run and serves the session too.
    let again = shared_host(&dir, &url, &fast);
    assert_eq!(post_json(&again.addr, &sid, &echo(5, "rejoined")).0, 200);
    assert_eq!(common::initialize_status(&b.addr).0, 200);
}

/// The messages of a resumed stream, with their event ids.
fn messages(events: &[(Option<String>, String)]) -> Vec<(Option<String>, serde_json::Value)> {
    events
        .iter()
        .filter(|(_, d)| !d.is_empty())
        .map(|(id, d)| (id.clone(), common::json_of(d)))
        .collect()
}

fn a_stream_one_host_serves_is_resumed_on_another_and_followed_to_its_end_without_a_gap_or_a_repeat(
    cluster: bool,
) {
    let (server, _dir, a, b) = two_hosts_on(cluster, "shared-follow", &[]);
    let sid = initialize(&a.addr);
    // A call on `a` that notifies four times, 300 ms apart; its client is cut off after the
    // priming event and resumes on `b` (the balancer's choice) while `a` still runs it.
    let args = json!({"delay_ms": 300, "count": 4, "bytes": 8});
    let cursor = common::call_and_hang_up(&a.addr, &sid, 3, "soak_flood", args.clone());
    common::wait_until("the stream is recorded", Duration::from_secs(5), || {
        server.count_keys("mcp:{*}d:t/*").unwrap_or(0) >= 1
    });
    let (status, got) = common::resume(&b.addr, &sid, &cursor);
    assert_eq!(status, 200);
    let got = messages(&got);
    let last = got.last().map(|(_, m)| m.clone()).unwrap_or_default();
    assert_eq!(last["id"], 3, "the answer ends the followed stream: {got:?}");
    assert!(last["result"].is_object(), "{last}");
    let notes = got.iter().filter(|(_, m)| m["method"].is_string()).count();
    // What the same call sends on one host, for comparison.
    let (status, whole) = {
        let c = common::call_and_hang_up(&a.addr, &sid, 4, "soak_flood", args);
        common::resume(&a.addr, &sid, &c)
    };
    assert_eq!(status, 200);
    let whole = messages(&whole);
    assert_eq!(notes, whole.iter().filter(|(_, m)| m["method"].is_string()).count(), "{got:?}");
    let mut ids: Vec<&String> = got.iter().filter_map(|(id, _)| id.as_ref()).collect();
    let n = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), n, "no event twice: {got:?}");
    // Resumed again on `b` after the last event: nothing more, and the stream is over.
    let end = got.last().and_then(|(id, _)| id.clone()).expect("an event id");
    let (status, after) = common::resume(&b.addr, &sid, &end);
    assert_eq!(status, 200);
    assert!(messages(&after).is_empty(), "{after:?}");
}

#[test]
fn a_quiet_stream_followed_on_another_host_is_waited_for_with_a_blocking_read_not_polled() {
    let (server, _dir, a, b) = two_hosts("shared-watch", &[]);
    let sid = initialize(&a.addr);
    let cursor =
        common::call_and_hang_up(&a.addr, &sid, 7, "soak_flood", json!({"delay_ms": 10_000}));
    let (xrange, xread) = (server.calls("xrange").unwrap(), server.calls("xread").unwrap());
    // Followed on `b` for 3 s while nothing comes: one XREAD BLOCK over the followed streams
    // waits for it; a read every second at most (a 50 ms poll read 60 times).
    let headers = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Last-Event-ID", cursor.as_str()),
    ];
    let (status, _, _) = common::http(&b.addr, "GET", &headers, "", Duration::from_secs(3));
    assert_eq!(status, 200);
    let read = server.calls("xrange").unwrap() - xrange;
    assert!(read <= 8, "{read} reads of the log in 3 s");
    assert!(server.calls("xread").unwrap() > xread, "a blocking read waited for it");
}

fn a_stream_whose_host_died_is_taken_over_once_and_answered_restarted_for_its_request(
    cluster: bool,
) {
    let server = Shared::start(cluster);
    let url = server.url();
    let dir = TempDir::new("shared-takeover");
    let lease = ["--set", "ledger.redis_lease_ms=600"];
    let (a, b, c) = (
        shared_host(&dir, &url, &lease),
        shared_host(&dir, &url, &lease),
        shared_host(&dir, &url, &lease),
    );
    let sid = initialize(&a.addr);
    let cursor =
        common::call_and_hang_up(&a.addr, &sid, 7, "soak_flood", json!({"delay_ms": 10_000}));
    common::wait_until("the stream is recorded", Duration::from_secs(5), || {
        server.count_keys("mcp:{*}d:t/*").unwrap_or(0) >= 1
    });
    // `a` dies with the call running; its lease lapses.
    drop(a);
    common::wait_until("a's lease lapses", Duration::from_secs(5), || {
        server.count_keys("mcp:{0}m:run:*").unwrap_or(0) == 2
    });
    // The resume on `b` takes the stream over: the unfinished request is answered with the
    // "server restarted" error, and its id is free for the client to re-issue.
    let (status, got) = common::resume(&b.addr, &sid, &cursor);
    assert_eq!(status, 200);
    let got = messages(&got);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].1["id"].clone(), got[0].1["error"]["code"].clone()),
        (json!(7), json!(-32009))
    );
    // On `c`, the same cursor gets the same one event (`b` serves the stream now), never a
    // second answer of its own.
    let (status, again) = common::resume(&c.addr, &sid, &cursor);
    assert_eq!(status, 200);
    assert_eq!(messages(&again), got, "one answer, the same event");
    let (status, v) = post_json(&c.addr, &sid, &echo(7, "re-issued"));
    assert_eq!(status, 200, "{v}");
}

/// `ledger_stats` on `addr`: how many writes that host applied.
fn applied(addr: &str, sid: &str) -> u64 {
    let (status, v) = post_json(
        addr,
        sid,
        &json!({"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"ledger_stats","arguments":{}}}),
    );
    assert_eq!(status, 200, "{v}");
    v["result"]["structuredContent"]["applied"].as_u64().expect("applied")
}

fn one_idempotency_key_sent_to_two_hosts_at_once_runs_once_and_both_get_its_outcome(cluster: bool) {
    let (_server, _dir, a, b) = two_hosts_on(cluster, "shared-key", &[]);
    let sid = initialize(&a.addr);
    assert_eq!(post_json(&b.addr, &sid, &json!({"jsonrpc":"2.0","id":1,"method":"ping"})).0, 200);
    // The same write (its key is its idempotency key), held 800 ms, to both hosts at once.
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":"order-7","hold_ms":800}}});
    let answers: Vec<(u16, serde_json::Value)> = std::thread::scope(|s| {
        let calls: Vec<_> = [&a.addr, &b.addr]
            .into_iter()
            .map(|addr| {
                let (sid, call) = (&sid, &call);
                s.spawn(move || post_json(addr, sid, call))
            })
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (status, v) in &answers {
        assert_eq!(*status, 200, "{v}");
        assert_eq!(v["result"]["content"][0]["text"], "order-7", "{v}");
    }
    assert_eq!(applied(&a.addr, &sid) + applied(&b.addr, &sid), 1, "run once in all: {answers:?}");
    // Later, on either host: replayed from the receipt, not run again.
    let (status, again) = post_json(&b.addr, &sid, &call);
    assert_eq!(status, 200);
    assert_eq!(again["result"]["_meta"]["io.mcp-host/idempotency"], "replayed", "{again}");
    assert_eq!(applied(&a.addr, &sid) + applied(&b.addr, &sid), 1);
}

#[test]
fn a_keyed_call_whose_host_died_ends_restarted_and_its_reissue_on_another_host_gets_the_one_outcome()
 {
    let lease = ["--set", "ledger.redis_lease_ms=1500"];
    let (server, _dir, a, b) = two_hosts("shared-reissue", &lease);
    let sid = initialize(&a.addr);
    // A write held 10 s on `a`; the client hangs up after the priming event.
    let args = json!({"key": "order-21", "hold_ms": 10_000});
    let cursor = common::call_and_hang_up(&a.addr, &sid, 2, "ledger_append", args.clone());
    common::wait_until("its receipt is recorded", Duration::from_secs(5), || {
        server.count_keys("mcp:{*}d:r/*").unwrap_or(0) >= 1
    });
    drop(a);
    common::wait_until("a's lease lapses", Duration::from_secs(5), || {
        server.count_keys("mcp:{*}m:run:*").unwrap_or(0) == 1
    });
    // The resume on `b` ends the request: restarted, its outcome unknown.
    let (status, got) = common::resume(&b.addr, &sid, &cursor);
    assert_eq!(status, 200);
    let ended = messages(&got).into_iter().find(|(_, m)| m["id"] == json!(2)).expect("its end");
    assert_eq!(ended.1["error"]["code"], json!(-32009), "{got:?}");
    // Re-issued with its key on `b`: never run a second time; the one outcome, the same on
    // every later try.
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ledger_append","arguments":args}});
    for _ in 0..2 {
        let (status, v) = post_json(&b.addr, &sid, &call);
        assert_eq!(status, 200, "{v}");
        let text = v["result"]["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("may or may not have taken effect"), "{v}");
    }
    assert_eq!(applied(&b.addr, &sid), 0, "not run again");
}

fn two_hosts_adding_to_one_basket_at_once_lose_no_item(cluster: bool) {
    let basket = ["--packs", "basket"];
    let (_server, _dir, a, b) = two_hosts_on(cluster, "shared-basket", &basket);
    let created = common::modern_call(&a.addr, 1, "create_basket", json!({"items": []}));
    let id = created["structuredContent"]["basket_id"].as_str().expect("a basket_id").to_owned();
    // 2 × 2 callers on each host, 10 adds of one item each, all at once.
    let adds = 10;
    std::thread::scope(|s| {
        for (n, host) in [&a, &b, &a, &b].into_iter().enumerate() {
            let id = &id;
            s.spawn(move || {
                for i in 0..adds {
                    let sku = format!("sku-{n}-{i}");
                    let r = common::modern_call(
                        &host.addr,
                        100 + i,
                        "add_item",
                        json!({"basket_id": id, "sku": sku, "quantity": 1}),
                    );
                    assert!(r["isError"] != true, "{r}");
                }
            });
        }
    });
    let got = common::modern_call(&b.addr, 2, "get_basket", json!({"basket_id": id}));
    assert_eq!(got["structuredContent"]["item_count"], 4 * adds, "{got}");
}

fn with_tasks(mut params: serde_json::Value) -> serde_json::Value {
    params["_meta"] = json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}});
    params
}

fn task_status(addr: &str, id: i64, task: &str) -> serde_json::Value {
    common::modern(addr, id, "tasks/get", with_tasks(json!({"taskId": task})))
}

#[test]
fn a_task_running_on_one_host_is_read_answered_and_cancelled_through_another() {
    let (_server, _dir, a, b) = two_hosts("shared-tasks", &[]);
    // A task on `a` that asks a question, answered through `b`.
    let asks = common::modern(
        &a.addr,
        1,
        "tools/call",
        with_tasks(json!({"name": "confirm_delete", "arguments": {"filename": "x.txt"}})),
    );
    let asks = asks["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{asks}")).to_owned();
    common::wait_until("b reads the question", Duration::from_secs(10), || {
        task_status(&b.addr, 2, &asks)["result"]["status"] == "input_required"
    });
    let answer = json!({"taskId": asks, "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": true}}}});
    let ok = common::modern(&b.addr, 3, "tasks/update", with_tasks(answer));
    assert_eq!(ok["result"]["resultType"], "complete", "{ok}");
    common::wait_until("the task completes on a", Duration::from_secs(10), || {
        task_status(&a.addr, 4, &asks)["result"]["status"] == "completed"
    });
    assert_eq!(
        task_status(&b.addr, 5, &asks)["result"]["result"]["content"][0]["text"],
        "Deleted x.txt"
    );
    // A long task on `a`: `b` reads it as working (not interrupted), and cancels it.
    let long = common::modern(
        &a.addr,
        6,
        "tools/call",
        with_tasks(json!({"name": "slow_compute", "arguments": {"seconds": 600, "label": "far"}})),
    );
    let long = long["result"]["taskId"].as_str().unwrap_or_else(|| panic!("{long}")).to_owned();
    assert_eq!(task_status(&b.addr, 7, &long)["result"]["status"], "working");
    let ack = common::modern(&b.addr, 8, "tasks/cancel", with_tasks(json!({"taskId": long})));
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_eq!(task_status(&a.addr, 9, &long)["result"]["status"], "cancelled");
    assert_eq!(task_status(&b.addr, 10, &long)["result"]["status"], "cancelled");
}

/// Session `sid`'s call on `addr` of a tool that asks the client's model (sampling) on its
/// response stream, read until the question: the stream and the question.
fn ask_the_model(addr: &str, sid: &str) -> (common::Streamed, serde_json::Value) {
    let body = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"test_missing_capability","arguments":{}}}).to_string();
    let mut s =
        common::post_streamed(addr, &common::session_headers(sid), &body, Duration::from_secs(10));
    s.read_until("sampling/createMessage");
    let asked = s
        .messages()
        .into_iter()
        .find(|m| m["method"] == "sampling/createMessage")
        .expect("the question");
    (s, asked)
}

/// The client's answer to sampling request `id`: the model said `text`.
fn sampled(id: &serde_json::Value, text: &str) -> serde_json::Value {
    json!({"jsonrpc":"2.0","id":id,"result":{"role":"assistant","content":{"type":"text","text":text},"model":"m"}})
}

fn a_clients_answer_posted_to_another_host_reaches_the_request_that_asked(cluster: bool) {
    let (shared, _dir, a, b) = two_hosts_on(cluster, "shared-answer", &[]);
    let sid = initialize(&a.addr);
    let (mut s, asked) = ask_the_model(&a.addr, &sid);
    // The balancer sends the answer to `b`.
    let answer = sampled(&asked["id"], "hello from b");
    assert_eq!(post_to(&b.addr, &sid, &answer), 202);
    s.read_until("sampled: hello from b");
    // `b` kept it (for an asker whose subscription was cut) ...
    let kept = || shared.count_keys("mcp:{*}d:qa/*");
    assert_eq!(kept(), Some(1), "the answer to the question asked");
    // ... and keeps nothing for answers to questions nobody asked.
    for id in 900..905 {
        let unasked = sampled(&json!(id), "x");
        assert_eq!(post_to(&b.addr, &sid, &unasked), 202);
    }
    // A level is answered once its record is committed, after what `b` wrote before it.
    let level =
        json!({"jsonrpc":"2.0","id":7,"method":"logging/setLevel","params":{"level":"info"}});
    assert_eq!(post_json(&b.addr, &sid, &level).0, 200);
    assert_eq!(kept(), Some(1), "nothing kept for questions nobody asked");
}

#[test]
fn an_answer_relayed_while_the_askers_subscription_is_cut_is_read_from_the_ledger() {
    // A cut subscription is taken again 4 s later: what is published meanwhile is missed. A
    // question waits 10 s at most: without the kept answer the call ends with an error then.
    let extra = [
        "--set",
        "ledger.redis_bus_retry_ms=4000",
        "--set",
        "sessions.client_request_timeout_secs=10",
    ];
    let (shared, dir, a, b) = two_hosts_on(false, "shared-answer-cut", &extra);
    shared.wait_for_subscribers("bus:sessions", 2);
    let sid = initialize(&a.addr);
    let (mut s, asked) = ask_the_model(&a.addr, &sid);
    let missed =
        |channel: &str| a.metric(&dir, &format!("mcp_bus_missed_total{{channel=\"{channel}\"}}"));
    // Each channel's first subscription counts once: counted before the cut, not after it.
    common::wait_until("every channel subscribed once", Duration::from_secs(10), || {
        ["ends", "sessions", "changes"].map(missed).iter().all(|n| *n >= 1.0)
    });
    let before: Vec<f64> = ["ends", "sessions", "changes"].map(missed).to_vec();
    // Both hosts' subscriptions are cut (three channels each); the answer posted to `b` now
    // is published while `a` does not listen.
    let cut: u64 = shared.servers().iter().filter_map(RedisServer::kill_subscribers).sum();
    assert!(cut >= 6, "the hosts' subscriptions were cut ({cut} in all)");
    let answer = sampled(&asked["id"], "kept by b");
    assert_eq!(post_to(&b.addr, &sid, &answer), 202);
    // Subscribed again, `a` reads it from the ledger.
    s.read_until("sampled: kept by b");
    assert_eq!(a.metric(&dir, "mcp_bus_answers_recovered_total"), 1.0, "read from the ledger");
    // The operator sees each channel's subscription taken again.
    common::wait_until("every channel subscribed again", Duration::from_secs(10), || {
        ["ends", "sessions", "changes"].map(missed).iter().zip(&before).all(|(n, b)| n > b)
    });
}

#[test]
fn an_answer_posted_for_a_request_whose_host_died_is_refused_as_gone_and_the_request_ends_restarted()
 {
    let lease = ["--set", "ledger.redis_lease_ms=1500"];
    let (server, _dir, a, b) = two_hosts("shared-answer-gone", &lease);
    let sid = initialize(&a.addr);
    let (s, asked) = ask_the_model(&a.addr, &sid);
    let start = s.raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
    let events = common::events(&mcp_devtools::dechunk(&s.raw[start..]));
    let cursor = events.first().and_then(|(id, _)| id.clone()).expect("the priming event's id");
    let answer = sampled(&asked["id"], "too late");
    // Killed as soon as the question arrived (who asked is committed before it is sent).
    drop(s);
    drop(a);
    common::wait_until("a's lease lapses", Duration::from_secs(5), || {
        server.count_keys("mcp:{*}m:run:*").unwrap_or(0) == 1
    });
    // `a` is gone: the answer is refused, saying so, rather than accepted for nobody.
    let (status, v) = post_answer(&b.addr, &sid, &answer);
    assert_eq!((status, v["error"]["code"].clone()), (410, json!(-32012)), "{v}");
    // The request that asked ends as any request of a host that died: restarted, once.
    let (status, got) = common::resume(&b.addr, &sid, &cursor);
    assert_eq!(status, 200);
    let ended = messages(&got).into_iter().find(|(_, m)| m["id"] == json!(5)).expect("its end");
    assert_eq!(ended.1["error"]["code"], json!(-32009), "{got:?}");
}

#[test]
fn a_log_level_set_through_one_host_applies_to_the_calls_another_host_serves() {
    let (_server, _dir, a, b) = two_hosts("shared-level", &[]);
    let sid = initialize(&a.addr);
    // The info-level messages a logging call on `addr` sends (request `id`).
    let logs_on = |addr: &str, id: i64| {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"test_tool_with_logging","arguments":{}}}).to_string();
        let headers = common::session_headers(&sid);
        let mut s = common::post_streamed(addr, &headers, &body, Duration::from_secs(10));
        s.read_until("\"result\"");
        s.messages().iter().filter(|m| m["method"] == "notifications/message").count()
    };
    assert_eq!(logs_on(&a.addr, 2), 3, "no level set: every message");
    let set =
        json!({"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"error"}});
    assert_eq!(post_json(&b.addr, &sid, &set).0, 200);
    // `a` serves the session still (live there): it hears the level within moments.
    let mut id = 10;
    common::wait_until("the level applies on a", Duration::from_secs(5), || {
        id += 1;
        logs_on(&a.addr, id) == 0
    });
}

#[test]
fn a_cancellation_posted_to_another_host_stops_the_request() {
    let (_server, _dir, a, b) = two_hosts("shared-cancel", &[]);
    let sid = initialize(&a.addr);
    let body = json!({"jsonrpc":"2.0","id":"long-1","method":"tools/call","params":{"name":"soak_flood","arguments":{"delay_ms":10_000,"hold_ms":10_000}}}).to_string();
    let mut s = common::post_streamed(
        &a.addr,
        &common::session_headers(&sid),
        &body,
        Duration::from_secs(10),
    );
    s.read_until("HTTP/1.1 200");
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"long-1","reason":"changed my mind"}});
    assert_eq!(post_to(&b.addr, &sid, &cancel), 202);
    // `a` stops the call and ends its stream (the body's last chunk) within 3 s, long before
    // the tool's 20 s.
    s.look_from_here(Duration::from_secs(3));
    s.read_until("0\r\n\r\n");
}

fn a_list_change_and_a_resource_update_announced_on_one_host_reach_a_listen_stream_on_another(
    cluster: bool,
) {
    let (shared, _dir, a, b) = two_hosts_on(cluster, "shared-listen", &[]);
    shared.wait_for_subscribers("bus:changes", 2);
    // A miss (`b` subscribed a moment before it says so) tells the stream every URI it
    // follows was updated: only the relay tells it of `watched-resource` alone.
    let mut s = listen(&b.addr, &["test://watched-resource", "test://static-binary"]);
    // The change is announced by a tool on `a`.
    let r = common::modern_call(&a.addr, 2, "test_trigger_tool_change", json!({}));
    assert!(r["isError"] != true, "{r}");
    s.read_until("notifications/tools/list_changed");
    // An update of a resource it subscribed to reaches it too; one of another does not.
    for uri in ["test://static-text", "test://watched-resource"] {
        let r =
            common::modern_call(&a.addr, 3, "test_trigger_resource_update", json!({"uri": uri}));
        assert!(r["isError"] != true, "{r}");
    }
    let updated = |s: &common::Streamed, uri: &str| {
        s.messages()
            .iter()
            .filter(|m| m["method"] == "notifications/resources/updated")
            .filter(|m| m["params"]["uri"] == uri)
            .count()
    };
    while updated(&s, "test://watched-resource") <= updated(&s, "test://static-binary") {
        s.read_more();
    }
    assert_eq!(updated(&s, "test://static-text"), 0, "not subscribed");
}

/// A `subscriptions/listen` stream on `addr` for tools list changes and updates of `uris`,
/// read past its acknowledgement.
fn listen(addr: &str, uris: &[&str]) -> common::Streamed {
    let body = json!({"jsonrpc":"2.0","id":"sub-1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true,"resourceSubscriptions":uris},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}).to_string();
    let listen = [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "subscriptions/listen")];
    let mut s = common::post_streamed(addr, &listen, &body, Duration::from_secs(10));
    s.read_until("acknowledged");
    s
}

fn a_listen_stream_is_told_everything_changed_when_its_hosts_subscription_to_the_others_was_cut(
    cluster: bool,
) {
    let (shared, _dir, _a, b) = two_hosts_on(cluster, "shared-listen-cut", &[]);
    shared.wait_for_subscribers("bus:changes", 2);
    let mut s = listen(&b.addr, &["test://watched-resource"]);
    // Nothing is announced anywhere; the hosts' subscriptions are cut (what was published
    // meanwhile is lost) and taken again: the stream is told its list and its resource may
    // have changed.
    let cut: u64 = shared.servers().iter().filter_map(RedisServer::kill_subscribers).sum();
    assert!(cut >= 2, "the hosts' subscriptions were cut ({cut} in all)");
    s.read_until("notifications/tools/list_changed");
    s.read_until("notifications/resources/updated");
    // On a Cluster a subscription taken again on the next node may be cut there too: one
    // notice per cut, each of the subscribed URI only.
    let updated: Vec<_> = s
        .messages()
        .into_iter()
        .filter(|m| m["method"] == "notifications/resources/updated")
        .map(|m| m["params"]["uri"].clone())
        .collect();
    assert!(updated.iter().all(|u| *u == json!("test://watched-resource")), "{updated:?}");
}

/// `test_input_required_result_multi_round` with `answers` and `state` (a client that can
/// elicit).
fn multi_round(
    addr: &str,
    id: i64,
    answers: serde_json::Value,
    state: Option<&str>,
) -> serde_json::Value {
    let mut params = json!({"name": "test_input_required_result_multi_round", "arguments": {}, "inputResponses": answers, "_meta": {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    if let Some(s) = state {
        params["requestState"] = json!(s);
    }
    common::modern(addr, id, "tools/call", params)
}

#[test]
fn a_multi_round_request_goes_on_on_whichever_host_gets_each_round() {
    let (_server, _dir, a, b) = two_hosts("shared-mrtr", &[]);
    // Round 1 on `a`, round 2 on `b`, round 3 on `a`: the sealed requestState opens on both.
    let first = multi_round(&a.addr, 1, json!({}), None);
    let step1 = json!({"step1": {"action": "accept", "content": {"name": "Alice"}}});
    let second = multi_round(&b.addr, 2, step1, first["result"]["requestState"].as_str());
    let state = second["result"]["requestState"].as_str().unwrap_or_else(|| panic!("{second}"));
    let step2 = json!({"step2": {"action": "accept", "content": {"color": "blue"}}});
    let finished = multi_round(&a.addr, 3, step2, Some(state));
    assert_eq!(finished["result"]["content"][0]["text"], "Alice likes blue", "{finished}");
}

#[test]
fn a_keyed_call_interrupted_on_one_host_is_answered_at_once_on_another() {
    let (_server, _dir, a, b) = two_hosts("shared-interrupted", &[]);
    let sid = initialize(&a.addr);
    // A write on `a`, held 5 s; its session is deleted on `b` meanwhile, which ends the call
    // on `a` (its outcome unknown: the write ran).
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":"order-9","hold_ms":5000}}});
    common::hang_up_after_priming(&a.addr, &sid, &call);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(delete(&b.addr, &sid), 204);
    // The client retries in a new session on `b`: told at once that the outcome is unknown,
    // not kept waiting for an outcome `a` will never record.
    let fresh = initialize(&b.addr);
    let (status, v) = post_json(&b.addr, &fresh, &call);
    assert_eq!(status, 200, "{v}");
    let text = v["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("may or may not have taken effect"), "{v}");
}

#[test]
fn a_delete_on_the_host_where_the_session_parked_ends_the_call_running_on_another() {
    let park = ["--set", "sessions.park_after_secs=1"];
    let (_server, _dir, a, b) = two_hosts("shared-parked-delete", &park);
    let sid = initialize(&a.addr);
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":"order-11","hold_ms":8000}}});
    common::hang_up_after_priming(&b.addr, &sid, &call);
    // `a` parks its copy (idle for a second); the DELETE reaches `a`.
    std::thread::sleep(Duration::from_millis(2_500));
    let (status, _, _) = common::http(
        &a.addr,
        "DELETE",
        &[("Mcp-Session-Id", &sid), ("MCP-Protocol-Version", "2025-11-25")],
        "",
        Duration::from_secs(5),
    );
    assert_eq!(status, 204);
    let ping = json!({"jsonrpc":"2.0","id":3,"method":"ping"});
    common::wait_until(
        "the host running the call ends the session",
        Duration::from_secs(5),
        || post_json(&b.addr, &sid, &ping).0 == 404,
    );
}

#[test]
fn a_keyed_call_whose_session_ends_while_another_host_holds_its_claim_leaves_the_key_to_the_next_call()
 {
    let (server, _dir, a, b) = two_hosts("shared-claim-wait", &[]);
    let keyed = |id: i64, key: &str| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":key}}});
    // The receipt's name in Redis, learnt from a first keyed call.
    let probe = initialize(&a.addr);
    assert_eq!(post_json(&a.addr, &probe, &keyed(1, "probe-3")).0, 200);
    let found = server.keys("*d:r/*probe-3").expect("redis answers");
    let probe_key = found.first().expect("the probe's receipt");
    let name = probe_key.split_once("}d:").expect("a ledger key").1.replace("probe-3", "order-13");
    // Another host claimed order-13's execution and has written nothing yet (it died right
    // after its claim): its claim lapses in 4 s.
    let claim = mcp_runtime::ledger::redis_key("mcp:", "d", &format!("c/0/{name}"));
    let now_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as u64;
    assert!(server.set_px(&claim, &format!("{:016}1", now_ms + 4_000), 60_000));
    // A call with the key on `b` waits on that claim; its session ends meanwhile.
    let first = initialize(&b.addr);
    common::hang_up_after_priming(&b.addr, &first, &keyed(2, "order-13"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(delete(&b.addr, &first), 204);
    // The client re-issues it in a new session on `b`: once the claim lapses, `b` runs it
    // (it waited for ever on the execution that went away with the first session).
    let again = initialize(&b.addr);
    let (status, _, body) = common::http(
        &b.addr,
        "POST",
        &[
            ("Accept", "application/json"),
            ("Content-Type", "application/json"),
            ("Mcp-Session-Id", &again),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &keyed(3, "order-13").to_string(),
        Duration::from_secs(15),
    );
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON answer");
    assert_eq!(v["result"]["content"][0]["text"], "order-13", "{v}");
    assert_eq!(applied(&a.addr, &probe) + applied(&b.addr, &again), 2, "each key ran once");
}

/// `initialize` on `addr`: its status, and the session id when made.
fn try_initialize(addr: &str) -> (u16, Option<String>) {
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"quota-test","version":"1"}}});
    let (status, head, _) = common::http(
        addr,
        "POST",
        &[("Accept", "application/json")],
        &init.to_string(),
        common::QUICK,
    );
    (status, common::header(&head, "mcp-session-id").map(str::to_owned))
}

/// Attempts `attempt(i)` for `i` in `first..first + most`, 500 ms apart (each host reads a
/// caller's figures across the hosts at most 1 s old, in the background: a read takes
/// milliseconds), until one is refused (`false`) or all were made: how many were made.
fn made_until_refused(first: usize, most: usize, attempt: impl Fn(usize) -> bool) -> usize {
    let mut made = 0;
    for i in first..first + most {
        if !attempt(i) {
            return made;
        }
        made += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    made
}

/// A handshake on `addr`: made (`true`) or refused with 429 (`false`).
fn handshake(addr: &str) -> bool {
    match try_initialize(addr) {
        (200, Some(_)) => true,
        (429, _) => false,
        (status, _) => panic!("initialize answered {status}"),
    }
}

#[test]
fn one_callers_sessions_are_counted_across_hosts_against_its_quota() {
    let quota = ["--set", "quotas.sessions_per_principal=3"];
    let (_server, _dir, a, b) = two_hosts("shared-quota", &quota);
    // Two sessions on `b`; then `a` (which would allow 3 of its own) makes the third only.
    let on_b: Vec<String> = (0..2).map(|_| initialize(&b.addr)).collect();
    assert_eq!(made_until_refused(0, 5, |_| handshake(&a.addr)), 1, "3 in all across the hosts");
    // An ended session no longer counts on another host, once that host reads the count
    // again (a stale count still refuses: the first try only starts the read).
    assert_eq!(delete(&b.addr, &on_b[0]), 204);
    std::thread::sleep(Duration::from_millis(1_200));
    let made_again = (0..5).any(|_| {
        let made = try_initialize(&a.addr).0 == 200;
        std::thread::sleep(Duration::from_millis(500));
        made
    });
    assert!(made_again, "room for one again");
}

#[test]
fn one_callers_session_rate_is_counted_across_hosts() {
    let rate = ["--set", "quotas.session_rate_per_sec=3", "--set", "quotas.session_burst=3"];
    let (_server, _dir, a, b) = two_hosts("shared-rate", &rate);
    // Within one second: 3 sessions on `b`, then `a` (whose own bucket holds 3) makes 1 while
    // it reads the count (2 if the read is slow), and is refused once it has read it. A try
    // that took most of the second (a slow machine), or in which `b` still counted an earlier
    // try's sessions, is made again once the window passed.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(1_200));
        let began = tokio::time::Instant::now();
        let on_b = (0..3).filter(|_| handshake(&b.addr)).count();
        let mut on_a = 0;
        for _ in 0..3 {
            if handshake(&a.addr) {
                on_a += 1;
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        if on_b == 3 && began.elapsed() < Duration::from_millis(900) {
            assert!(on_a <= 2, "3 a second across the hosts: {on_a} more on a");
            return;
        }
    }
    panic!("no try ran within the rate's one-second window");
}

/// Keyed write `i` on `addr` in session `sid`: made (`true`) or refused with 429 (`false`).
fn keyed_write(addr: &str, sid: &str, i: usize) -> bool {
    let call = json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":format!("order-{i}")}}});
    match post_json(addr, sid, &call) {
        (200, v) if v["result"]["content"][0]["text"] == format!("order-{i}") => true,
        (429, _) => false,
        (status, v) => panic!("a keyed write answered {status}: {v}"),
    }
}

#[test]
fn one_callers_receipts_are_counted_across_hosts_against_its_bound() {
    let bound = ["--set", "ledger.receipts_per_caller=3"];
    let (_server, _dir, a, b) = two_hosts("shared-receipts", &bound);
    let sid = initialize(&a.addr);
    // One receipt kept through `a`; then `b` (which would keep 3 of its own) keeps two, or
    // one when its first read already finds its own first receipt (counted twice until the
    // next read, documented): the caller (its address, without authentication) is the same
    // on both.
    assert_eq!(made_until_refused(1, 1, |i| keyed_write(&a.addr, &sid, i)), 1);
    let on_b = made_until_refused(10, 5, |i| keyed_write(&b.addr, &sid, i));
    assert!((1..=2).contains(&on_b), "3 at most in all across the hosts: {on_b} on b");
    // And `a` (which holds one of its own) refuses once it has read what `b` kept: its
    // figures for the caller are stale by now, so its first write only starts that read
    // (documented). Counting only its own, it would make two.
    std::thread::sleep(Duration::from_millis(1_100));
    assert!(made_until_refused(20, 3, |i| keyed_write(&a.addr, &sid, i)) <= 1);
}

/// A task (of a tool that needs one: refused past the bound, never run without) started
/// through `addr` (request `i`): kept (`true`) or refused with 429 (`false`).
fn kept_task(addr: &str, i: usize) -> bool {
    let call = json!({"name": "failing_job", "arguments": {}});
    let r = common::modern(addr, i as i64, "tools/call", with_tasks(call));
    if r["result"]["taskId"].is_string() {
        true
    } else if r["error"]["code"] == json!(-32007) {
        false
    } else {
        panic!("a task answered {r}")
    }
}

#[test]
fn one_callers_kept_tasks_are_counted_across_hosts_against_its_bound() {
    let bound = ["--set", "tasks.max_kept_per_caller=3"];
    let (_server, _dir, a, b) = two_hosts("shared-kept-tasks", &bound);
    // As the receipts: one kept through `a`, then `b` (which would keep 3 of its own) keeps
    // one or two, and `a` at most one more once it has read what `b` kept.
    assert_eq!(made_until_refused(1, 1, |i| kept_task(&a.addr, i)), 1);
    let on_b = made_until_refused(10, 5, |i| kept_task(&b.addr, i));
    assert!((1..=2).contains(&on_b), "3 at most in all across the hosts: {on_b} on b");
    std::thread::sleep(Duration::from_millis(1_100));
    assert!(made_until_refused(20, 3, |i| kept_task(&a.addr, i)) <= 1);
}

/// A basket of about 12 KiB created through `addr` (request `i`): kept (`true`) or refused
/// for the caller's handle bytes (`false`).
fn kept_basket(addr: &str, i: usize) -> bool {
    let sku = format!("{i}-{}", "x".repeat(12_000));
    let r = common::modern_call(
        addr,
        i as i64,
        "create_basket",
        json!({"items": [{"sku": sku, "quantity": 1}]}),
    );
    if r["structuredContent"]["basket_id"].is_string() {
        true
    } else if r["isError"] == true {
        false
    } else {
        panic!("create_basket answered {r}")
    }
}

#[test]
fn one_callers_handle_bytes_are_counted_across_hosts_against_its_bound() {
    let args = ["--packs", "basket", "--set", "ledger.handle_bytes_per_caller=65536"];
    let (_server, _dir, a, b) = two_hosts("shared-handle-bytes", &args);
    // 64 KiB hold five baskets of 12 KiB. Two through `a`; then `b`, which alone would keep
    // five, keeps three at most (four when its first read counts none of `a`'s: it is
    // admitted while that read is under way).
    assert_eq!(made_until_refused(1, 2, |i| kept_basket(&a.addr, i)), 2);
    let on_b = made_until_refused(10, 6, |i| kept_basket(&b.addr, i));
    assert!((1..=4).contains(&on_b), "5 at most in all across the hosts: {on_b} on b");
}
