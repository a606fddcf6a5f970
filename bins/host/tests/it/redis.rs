//! The host on a Redis ledger (`--ledger redis://…`), against a real `redis-server` of the
//! test's own: what the SQLite ledger survives, the Redis one does too, and a host whose key
//! differs from the one the shared ledger records refuses to start.

use std::time::Duration;

use serde_json::json;

use crate::common::{self, initialize, post_json};
use mcp_devtools::{RedisServer, TempDir};

/// A host on `url` with its ledger files (key) in `dir`, expected to refuse to start: its
/// exit code and stderr.
fn refused_on(dir: &TempDir, url: &str) -> (Option<i32>, String) {
    refused_with(dir, url, &[])
}

/// [`refused_on`] with `extra` arguments.
fn refused_with(dir: &TempDir, url: &str, extra: &[&str]) -> (Option<i32>, String) {
    let ledger = dir.path().join("mcp-host.db").display().to_string();
    let args = ["--port", "0", "--admin-port", "0", "--ledger-path", &ledger, "--ledger", url];
    crate::ledger_files::run_to_exit(&[&args[..], extra].concat())
}

fn redis() -> RedisServer {
    RedisServer::start().expect("a redis-server (scripts/test.sh installs Debian's)")
}

#[test]
fn a_session_on_a_redis_ledger_survives_a_sigkill_and_a_sigterm_restart_and_a_deleted_one_stays_404()
 {
    let server = redis();
    let url = server.url();
    let dir = TempDir::new("redis-restart");
    let host = common::start_with(&dir, 0, &["--ledger", &url]);
    // A new session's id is handed out once its record is committed (Redis is durable here).
    let (kept, deleted) = (initialize(&host.addr), initialize(&host.addr));
    let echo = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"r"}}});
    assert_eq!(post_json(&host.addr, &kept, &echo).0, 200);
    let mut host = host.kill_and_restart_with(&dir, &["--ledger", &url]);
    let (status, body) = post_json(&host.addr, &kept, &echo);
    assert_eq!(status, 200, "revived from Redis after a SIGKILL: {body}");
    assert_eq!(body["result"]["content"][0]["text"], "r");
    let (status, _, _) = common::http(
        &host.addr,
        "DELETE",
        &[("Mcp-Session-Id", &deleted), ("MCP-Protocol-Version", "2025-11-25")],
        "",
        common::QUICK,
    );
    assert_eq!(status, 204);
    // A clean stop writes what the sessions owe (the DELETE's record among it) before it ends.
    let port = host.port();
    assert!(
        host.process.terminate(std::time::Duration::from_secs(15)).is_some_and(|s| s.success()),
        "a clean stop"
    );
    let host = common::start_with(&dir, port, &["--ledger", &url]);
    let ping = json!({"jsonrpc":"2.0","id":3,"method":"ping"});
    assert_eq!(post_json(&host.addr, &kept, &ping).0, 200, "survived the SIGTERM restart too");
    assert_eq!(post_json(&host.addr, &deleted, &ping).0, 404, "a deleted session stays deleted");
    assert!(
        !dir.path().join("mcp-host.db").exists(),
        "the sessions were in Redis, not in a SQLite file beside the key"
    );
}

#[test]
fn a_second_host_on_a_redis_ledger_is_refused_while_the_first_holds_its_lease() {
    let server = redis();
    let url = server.url();
    let dir = TempDir::new("redis-second");
    let first = common::start_with(&dir, 0, &["--ledger", &url]);
    let sid = initialize(&first.addr);
    let (code, stderr) = refused_on(&dir, &url);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("in use by another mcp-host")
            && stderr.contains(&format!(":{}:", first.process.pid())),
        "names the holder's pid: {stderr}"
    );
    // The first host serves on.
    let ping = json!({"jsonrpc":"2.0","id":2,"method":"ping"});
    assert_eq!(post_json(&first.addr, &sid, &ping).0, 200);
}

#[test]
fn a_host_whose_key_differs_from_the_one_redis_records_refuses_to_start_naming_both() {
    let server = redis();
    let url = server.url();
    let first_dir = TempDir::new("redis-key-a");
    let mut first = common::start_with(&first_dir, 0, &["--ledger", &url]);
    initialize(&first.addr);
    // A clean stop releases the ledger's lease.
    assert!(
        first.process.terminate(std::time::Duration::from_secs(15)).is_some_and(|s| s.success())
    );
    // Another directory: another key file, made fresh by the second host.
    let other = TempDir::new("redis-key-b");
    let (code, stderr) = refused_on(&other, &url);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("written with another key"), "{stderr}");
    let fingerprints: Vec<&str> =
        stderr.split(|c: char| !c.is_ascii_hexdigit()).filter(|w| w.len() == 16).collect();
    assert!(fingerprints.len() >= 2 && fingerprints[0] != fingerprints[1], "{stderr}");
}

#[test]
fn a_redis_that_does_not_answer_is_refused_at_start_without_its_password() {
    let dir = TempDir::new("redis-none");
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("redis://mcp:s3cret@127.0.0.1:{port}/0");
    let (code, stderr) = refused_on(&dir, &url);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "names the server: {stderr}");
    assert!(!stderr.contains("s3cret"), "never its password: {stderr}");
}

#[test]
fn a_redis_that_goes_away_fails_the_host_closed_and_the_host_heals_when_redis_is_back() {
    let server = redis();
    let (url, port) = (server.url(), server.port());
    let dir = TempDir::new("redis-gone");
    let host = common::start_with(
        &dir,
        0,
        &[
            "--ledger",
            &url,
            "--set",
            "ledger.commit_wait_ms=500",
            "--set",
            "ledger.redis_timeout_ms=500",
        ],
    );
    let sid = initialize(&host.addr);
    // The admin status names the backend and the server, never its password, and the
    // round trip to it (the lease's renewal, every third of the 5 s lease).
    let status = || {
        serde_json::from_slice::<serde_json::Value>(&host.admin_get(&dir, "/admin/status")).unwrap()
    };
    let first = status();
    assert_eq!(first["ledger"]["backend"], "redis");
    assert_eq!(first["ledger"]["location"], format!("{url} (prefix mcp:)"));
    common::wait_until("a round trip is measured", Duration::from_secs(5), || {
        status()["ledger"]["round_trip_us"].as_u64().is_some_and(|us| us > 0)
    });
    // /metrics: the round trip, the commits' and reads' timings, errors none yet.
    let metric = |name: &str| host.metric(&dir, name);
    assert!(metric("mcp_ledger_round_trip_seconds") > 0.0);
    assert!(metric("mcp_ledger_commit_seconds_count") >= 1.0, "initialize committed");
    assert!(metric("mcp_ledger_round_trips_total") >= 1.0, "its batch went to Redis");
    assert_eq!(metric("mcp_ledger_errors_total"), 0.0);
    let ready = |addr: &str| common::http_at(addr, "GET", "/readyz", &[], "", common::QUICK).0;
    assert_eq!(ready(&host.addr), 200);
    drop(server);
    // New sessions need a record: refused with 503 naming the ledger once the writer knows;
    // not ready meanwhile; a read that needs nothing new (a ping of a live session) goes on.
    common::wait_until("a new session is refused", Duration::from_secs(20), || {
        let (status, _, body) = common::initialize_status(&host.addr);
        assert!(status == 200 || status == 503, "{status}");
        status == 503 && body["error"]["message"].as_str().is_some_and(|m| m.contains("ledger"))
    });
    assert_eq!(ready(&host.addr), 503);
    assert!(metric("mcp_ledger_errors_total") >= 1.0, "the refused commits are counted");
    let ping = json!({"jsonrpc":"2.0","id":2,"method":"ping"});
    assert_eq!(post_json(&host.addr, &sid, &ping).0, 200, "the live session is served");
    // Redis is back (empty: the test's server keeps nothing): the host heals by itself.
    let again = RedisServer::start_on(port).expect("redis-server again on its port");
    common::wait_until("the host is ready again", Duration::from_secs(20), || {
        ready(&host.addr) == 200
    });
    assert_eq!(common::initialize_status(&host.addr).0, 200, "new sessions again");
    drop(again);
}

/// `mcp-host --check` with `args`: its exit code and stdout + stderr.
fn check(args: &[&str]) -> (Option<i32>, String) {
    let bin =
        std::env::var("MCP_HOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-host").to_owned());
    let out = std::process::Command::new(bin)
        .arg("--check")
        .args(args)
        .env(mcp_devtools::LOG_ENV, "warn")
        .output()
        .expect("run mcp-host --check");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn check_reports_a_shared_redis_ledger_its_lease_holder_and_a_key_that_differs_writing_nothing() {
    let server = redis();
    let url = server.url();
    let dir = TempDir::new("redis-check");
    let ledger = dir.path().join("mcp-host.db").display().to_string();
    let args =
        |l: &str| ["--ledger-path".to_owned(), l.to_owned(), "--ledger".to_owned(), url.clone()];
    // Before any host: the server answers, no key recorded yet, and the check made no key file.
    let a = args(&ledger);
    let (code, text) = check(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("answers") && text.contains(", prefix mcp:"), "{text}");
    assert!(text.contains("records none yet") && text.contains("no lease held"), "{text}");
    assert!(!dir.path().join("mcp-host.db.key").exists(), "the check writes nothing");
    // With a host serving: its key matches, and the check names the lease holder's pid.
    let host = common::start_with(&dir, 0, &["--ledger", &url]);
    let (code, text) = check(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("the one the ledger records"), "{text}");
    assert!(text.contains(&format!(":{}:", host.process.pid())), "names the holder: {text}");
    // Another directory's key: exit 2 naming both fingerprints.
    let other = TempDir::new("redis-check-other");
    std::fs::write(other.path().join("mcp-host.db.key"), format!("{}\n", "ab".repeat(32))).unwrap();
    set_owner_only(&other.path().join("mcp-host.db.key"));
    let ledger = other.path().join("mcp-host.db").display().to_string();
    let b = args(&ledger);
    let (code, text) = check(&b.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("written with another key"), "{text}");
}

fn set_owner_only(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn a_host_on_a_rediss_ledger_serves_over_tls_and_one_that_does_not_trust_its_certificate_is_refused()
 {
    let server = RedisServer::start_tls().expect("a redis-server with TLS and openssl");
    let (url, (ca, cert, key)) = (server.tls_url().unwrap(), server.tls_files().unwrap());
    let dir = TempDir::new("redis-tls");
    let tls = |name: &str, file: &str| format!("ledger.redis_tls_{name}_file={file:?}");
    let (ca_set, cert_set, key_set) = (tls("ca", &ca), tls("cert", &cert), tls("key", &key));
    let host = common::start_with(
        &dir,
        0,
        &["--ledger", &url, "--set", &ca_set, "--set", &cert_set, "--set", &key_set],
    );
    let sid = initialize(&host.addr);
    let echo = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"tls"}}});
    let (status, body) = post_json(&host.addr, &sid, &echo);
    assert_eq!(
        (status, body["result"]["content"][0]["text"].as_str()),
        (200, Some("tls")),
        "{body}"
    );
    assert!(server.count_keys("mcp:*").is_some_and(|n| n > 0), "written through TLS");
    drop(host);
    // A client key others may read is refused as a key file is (exit 2, saying chmod 600).
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let set = ["--set", &ca_set, "--set", &cert_set, "--set", &key_set];
    let (code, err) = refused_with(&TempDir::new("redis-tls-open-key"), &url, &set);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(&key) && err.contains("chmod 600"), "{err}");
    // The system's roots do not sign its certificate: refused at start (exit 2), said why.
    let (code, err) = refused_on(&TempDir::new("redis-tls-untrusted"), &url);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("rediss://127.0.0.1") && err.to_lowercase().contains("certificate"),
        "{err}"
    );
}

/// On a Redis ledger this host alone uses, sessions are kept as data (a new one until its
/// first request), while the ledger's bus listens on a thread of its own. Each time its
/// subscription is taken (first, and again after a cut) every live session is told to read
/// the answers it may have missed: a sleeping one waits for none and is left asleep, not
/// woken on a thread where no actor can start (that killed the bus and lost the session).
#[test]
fn a_sleeping_session_on_a_redis_ledger_outlives_the_bus_taking_its_subscription_again() {
    let server = redis();
    let dir = TempDir::new("redis-bus-sleeping");
    let host = common::start_with(&dir, 0, &["--ledger", &server.url()]);
    let missed = || host.metric(&dir, "mcp_bus_missed_total{channel=\"sessions\"}");
    common::wait_until("the bus subscribed", Duration::from_secs(10), || missed() >= 1.0);
    let sid = initialize(&host.addr);
    let before = missed();
    assert!(server.kill_subscribers().is_some_and(|n| n >= 1), "the bus's subscriptions cut");
    common::wait_until("the bus subscribed again", Duration::from_secs(10), || missed() > before);
    let echo = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"awake"}}});
    let (status, body) = post_json(&host.addr, &sid, &echo);
    assert_eq!((status, body["result"]["content"][0]["text"].as_str()), (200, Some("awake")));
}
