//! Several hosts sharing one Redis ledger (`ledger.redis_shared`), each request free to go to
//! any of them: a session made on one is served by the others, an end on one is an end on
//! all, and a host paused past its lease is fenced while the others serve on.

use std::time::Duration;

use serde_json::json;

use crate::common::{self, Host, initialize, post_json};
use mcp_devtools::{RedisServer, TempDir};

/// A host on the shared ledger at `url` (its key file in `dir`, which every host of the test
/// shares), with `extra` arguments.
fn shared_host(dir: &TempDir, url: &str, extra: &[&str]) -> Host {
    let mut args = vec!["--ledger", url, "--set", "ledger.redis_shared=true"];
    args.extend_from_slice(extra);
    common::start_with(dir, 0, &args)
}

fn echo(id: i64, text: &str) -> serde_json::Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"echo","arguments":{"text":text}}})
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

#[test]
fn any_host_sharing_a_redis_ledger_serves_a_session_made_on_another_and_a_delete_on_one_ends_it_on_all()
 {
    let server = RedisServer::start().expect("a redis-server (scripts/test.sh installs Debian's)");
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

#[test]
fn a_host_paused_past_its_lease_on_a_shared_ledger_is_fenced_and_the_others_serve_its_sessions() {
    let server = RedisServer::start().expect("a redis-server (scripts/test.sh installs Debian's)");
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
    assert!(a.process.signal("CONT"));
    assert_eq!(status, 200, "{body}");
    // Back, `a` finds its lease gone: its writes are refused, so it takes no new session and
    // says it is not ready (a balancer takes it out); `b` is unaffected.
    let ready = |addr: &str| common::http_at(addr, "GET", "/readyz", &[], "", common::QUICK).0;
    common::wait_until("the paused host fails closed", Duration::from_secs(10), || {
        common::initialize_status(&a.addr).0 == 503 && ready(&a.addr) == 503
    });
    assert_eq!(ready(&b.addr), 200);
    assert_eq!(post_json(&b.addr, &sid, &echo(4, "after")).0, 200);
    assert_eq!(common::initialize_status(&b.addr).0, 200);
}
