//! The real binary's supervisor: the graceful stop on SIGTERM (phase sequence, new requests
//! refused with `Retry-After`, in-flight calls completed, streams ended with a `retry` hint,
//! exit 0, nothing twice on a resume after the restart), the admin API (its token, flags,
//! rollback), `/metrics` in the Prometheus text format, and logs that never carry a session
//! id. `MCP_HOST_BIN` overrides the binary.

use crate::common;

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::process::Command;
use std::time::Duration;

use common::*;
use mcp_devtools::TempDir;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn admin_of(host: &Host) -> String {
    host.process.admin_url(WAIT).expect("the admin line").trim_start_matches("http://").to_owned()
}

fn token_of(dir: &TempDir) -> String {
    std::fs::read_to_string(dir.path().join("mcp-host.admin-token"))
        .expect("the admin token file")
        .trim()
        .to_owned()
}

/// One admin request; (status, head, body as JSON or text).
fn admin(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String, String) {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> =
        bearer.as_deref().map(|b| ("Authorization", b)).into_iter().collect();
    let (status, head, body) = http_at(addr, method, path, &headers, body, QUICK);
    (status, head, String::from_utf8_lossy(&body).into_owned())
}

fn status_of(addr: &str, token: &str) -> Value {
    let (status, _, body) = admin(addr, "GET", "/admin/status", Some(token), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})
}

/// POST a tools/call with SSE and read its stream to the end.
fn call_sse(addr: &str, sid: &str, body: &Value, read_for: Duration) -> (u16, String, String) {
    let (status, head, b) = http(
        addr,
        "POST",
        &[SSE, ("Mcp-Session-Id", sid), ("MCP-Protocol-Version", "2025-11-25")],
        &body.to_string(),
        read_for,
    );
    (status, head, String::from_utf8_lossy(&b).into_owned())
}

#[test]
fn sigterm_drains_in_phase_order_finishes_in_flight_calls_ends_streams_with_retry_and_exits_0() {
    let dir = TempDir::new("sigterm-drain");
    std::fs::write(
        dir.path().join("c.toml"),
        "[shutdown]\ngrace_secs = 20\nretry_after_secs = 3\n",
    )
    .unwrap();
    let log = dir.path().join("host.log");
    let config = dir.path().join("c.toml").display().to_string();
    let mut host = start_logged(&dir, 0, &["--config", &config], Some((&log, "info")));
    let (addr, token) = (host.addr.clone(), token_of(&dir));
    let admin_addr = admin_of(&host);
    let sid = initialize(&addr);
    set_level_info(&addr, &sid);
    // A call whose client hung up: its events land in its window and ledger during the drain.
    let cursor = call_and_hang_up(
        &addr,
        &sid,
        3,
        "soak_flood",
        json!({"delay_ms": 600, "count": 3, "bytes": 8}),
    );
    // A call whose client waits, and a GET stream.
    let (a, s) = (addr.clone(), sid.clone());
    let waiting = std::thread::spawn(move || {
        call_sse(&a, &s, &call(4, "sleep", json!({"ms": 900})), Duration::from_secs(20))
    });
    // The GET stream, open (its head read) before the signal: sent from a thread unawaited,
    // on a loaded machine it could arrive after the drain began and get its 503 instead.
    let mut get = std::net::TcpStream::connect(&addr).unwrap();
    get.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        get,
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n"
    )
    .unwrap();
    let mut get_head = Vec::new();
    while !get_head.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut buf = [0u8; 1024];
        let n = get.read(&mut buf).unwrap();
        assert!(n > 0, "the GET stream closed before its head");
        get_head.extend_from_slice(&buf[..n]);
    }
    assert!(get_head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&get_head));
    let get = std::thread::spawn(move || {
        let mut all = get_head;
        get.read_to_end(&mut all).unwrap();
        all
    });
    wait_until("both calls are in flight", Duration::from_secs(10), || {
        status_of(&admin_addr, &token)["in_flight"] == 2
    });

    assert!(
        Command::new("kill")
            .args(["-TERM", &host.process.pid().to_string()])
            .status()
            .unwrap()
            .success()
    );
    wait_until("the admin status says draining", Duration::from_secs(10), || {
        status_of(&admin_addr, &token)["phase"] == "draining"
    });
    let (status, head, _) = call_sse(&addr, &sid, &call(5, "echo", json!({"text": "late"})), QUICK);
    assert_eq!(status, 503, "a new request while draining: {head}");
    assert_eq!(header(&head, "retry-after"), Some("3"));

    let (status, _, body) = waiting.join().unwrap();
    assert_eq!(status, 200);
    let done: Vec<Value> = events(body.as_bytes())
        .iter()
        .map(|(_, d)| json_of(d))
        .filter(|v| v.get("result").is_some())
        .collect();
    assert_eq!(done.len(), 1, "the in-flight call finished before the exit: {body}");
    assert_eq!(done[0]["result"]["content"][0]["text"], "slept 900 ms");
    let get_body = get.join().unwrap();
    let get_text = String::from_utf8_lossy(&get_body);
    assert!(get_text.contains("retry:"), "the GET stream ends with a retry hint: {get_text}");
    let exit = (0..500).find_map(|_| {
        std::thread::sleep(Duration::from_millis(20));
        host.process.exit_status()
    });
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "exits 0 after the drain");
    let text = std::fs::read_to_string(&log).unwrap();
    let at = |needle: &str| {
        text.find(needle).unwrap_or_else(|| panic!("{needle} not in the log:\n{text}"))
    };
    assert!(at("phase=Draining") < at("phase=Stopped"), "the phases in order:\n{text}");

    // After the restart, the hung-up call's events are all there, each once.
    let host = start(&dir, host.port());
    let (status, evs) = resume(&host.addr, &sid, &cursor);
    assert_eq!(status, 200);
    let ids: Vec<&String> = evs.iter().filter_map(|(id, _)| id.as_ref()).collect();
    let unique: std::collections::HashSet<&&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "nothing twice: {evs:?}");
    assert_eq!(evs.len(), 4, "three log messages and the answer: {evs:?}");
    assert_eq!(json_of(&evs[3].1)["id"], 3);
}

#[test]
fn the_admin_api_needs_its_token_changes_flags_and_rolls_back() {
    let dir = TempDir::new("admin-api");
    let host = start(&dir, 0);
    let admin_addr = admin_of(&host);
    let token = token_of(&dir);
    assert_eq!(token.len(), 64, "32 random bytes, hex");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("mcp-host.admin-token"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "owner-only");
    }
    for path in ["/admin/status", "/admin/flags", "/metrics"] {
        let (status, head, _) = admin(&admin_addr, "GET", path, None, "");
        assert_eq!(status, 401, "{path} without a token");
        assert!(header(&head, "www-authenticate").is_some_and(|v| v.starts_with("Bearer")));
        assert_eq!(
            admin(&admin_addr, "GET", path, Some("not-the-token"), "").0,
            401,
            "{path} with another token"
        );
    }
    assert_eq!(admin(&admin_addr, "POST", "/admin/rollback", Some("nope"), "").0, 401);
    let s = status_of(&admin_addr, &token);
    assert_eq!(s["phase"], "serving");
    let first = s["generation"].as_u64().unwrap();
    assert_eq!(s["generations"][0]["current"], true);

    let sid = initialize(&host.addr);
    let (_, _, before) = call_sse(&host.addr, &sid, &call(2, "echo", json!({"text": "a"})), QUICK);
    assert!(before.contains("id:"), "resumable by default: {before}");
    let (status, _, body) =
        admin(&admin_addr, "PUT", "/admin/flags", Some(&token), r#"{"resumable":"off"}"#);
    assert_eq!(status, 200, "{body}");
    let changed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(changed["generation"].as_u64(), Some(first + 1));
    assert_eq!(
        (changed["flags"]["resumable"].as_str(), changed["flags"]["share"].as_f64()),
        (Some("off"), Some(1.0)),
        "other fields stay"
    );
    let (_, _, after) = call_sse(&host.addr, &sid, &call(3, "echo", json!({"text": "b"})), QUICK);
    assert!(!after.contains("id:") && after.contains("\"b\""), "no ids on a new stream: {after}");
    for bad in [r#"{"share": 3}"#, r#"{"resumable": "maybe"}"#, r#"{"colour": 1}"#, "not json"] {
        let (status, _, body) = admin(&admin_addr, "PUT", "/admin/flags", Some(&token), bad);
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, _, body) = admin(&admin_addr, "POST", "/admin/rollback", Some(&token), "");
    assert_eq!(status, 200);
    let rolled: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(rolled["generation"].as_u64(), Some(first + 2));
    let (_, _, flags) = admin(&admin_addr, "GET", "/admin/flags", Some(&token), "");
    assert_eq!(serde_json::from_str::<Value>(&flags).unwrap()["flags"]["resumable"], "off");
    assert_eq!(admin(&admin_addr, "DELETE", "/admin/flags", Some(&token), "").0, 405);
    assert_eq!(admin(&admin_addr, "GET", "/admin/nothing", Some(&token), "").0, 404);
}

#[test]
fn a_non_loopback_admin_bind_without_a_configured_token_is_refused_at_start() {
    let dir = TempDir::new("admin-bind");
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[admin]\nbind = \"0.0.0.0\"\n").unwrap();
    let bin =
        std::env::var("MCP_HOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-host").to_owned());
    let out = Command::new(bin)
        .args(["--port", "0", "--config"])
        .arg(&config)
        .args(dir.host_args())
        .env(mcp_devtools::EXIT_WITH_PARENT_ENV, "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("admin.token"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "it never listened");
}

/// Samples of a Prometheus text exposition, checked line by line: `# HELP` / `# TYPE` with a
/// known type before a family's samples, names and labels well formed, values numbers; each
/// histogram's buckets cumulative (never falling) up to `+Inf`, which is its `_count` (for
/// histograms without labels, as all of ours are: with labels, series would mix here).
fn parse_prometheus(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    let mut typed = std::collections::HashSet::new();
    let mut histograms = Vec::new();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').expect("TYPE name type");
            assert!(
                name_ok(name)
                    && ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                "{line}"
            );
            typed.insert(name.to_owned());
            if ty == "histogram" {
                histograms.push(name.to_owned());
            }
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# EOF") {
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment: {line}");
        let (series, value) = line.rsplit_once(' ').expect("a sample: series value");
        let name = series.split('{').next().unwrap();
        assert!(name_ok(name), "{line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|f| typed.contains(*f))
            .unwrap_or(name);
        assert!(typed.contains(family), "a sample before its TYPE: {line}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            let inner = labels
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'))
                .expect("labels in braces");
            for pair in inner.split("\",").filter(|p| !p.is_empty()) {
                let (k, v) =
                    pair.split_once("=\"").unwrap_or_else(|| panic!("label pair in {line}"));
                assert!(name_ok(k) && !v.contains('\n'), "{line}");
            }
        }
        let v: f64 = if value == "+Inf" {
            f64::INFINITY
        } else {
            value.parse().unwrap_or_else(|_| panic!("not a number: {line}"))
        };
        samples.insert(series.to_owned(), v);
    }
    for h in &histograms {
        let buckets: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{h}_bucket{{")))
            .map(|l| samples[l.rsplit_once(' ').unwrap().0])
            .collect();
        assert!(!buckets.is_empty(), "histogram {h} has buckets");
        assert!(
            buckets.windows(2).all(|w| w[0] <= w[1]),
            "{h}'s buckets are cumulative: {buckets:?}"
        );
        let inf = samples[&format!("{h}_bucket{{le=\"+Inf\"}}")];
        assert_eq!(inf, samples[&format!("{h}_count")], "{h}: +Inf is the count");
    }
    samples
}

#[test]
fn metrics_parse_as_prometheus_text_and_move_when_traffic_flows() {
    let dir = TempDir::new("metrics");
    let host = start(&dir, 0);
    let admin_addr = admin_of(&host);
    let token = token_of(&dir);
    let scrape = || {
        let (status, head, body) = admin(&admin_addr, "GET", "/metrics", Some(&token), "");
        assert_eq!(status, 200);
        assert!(
            header(&head, "content-type")
                .is_some_and(|c| c.starts_with("text/plain; version=0.0.4")),
            "{head}"
        );
        parse_prometheus(&body)
    };
    let before = scrape();
    let sid = initialize(&host.addr);
    for i in 0..5 {
        let (status, _, _) =
            call_sse(&host.addr, &sid, &call(10 + i, "echo", json!({"text": "m"})), QUICK);
        assert_eq!(status, 200);
    }
    assert_eq!(
        post_json(&host.addr, "1.not-a-session", &json!({"jsonrpc":"2.0","id":1,"method":"ping"}))
            .0,
        404
    );
    let after = scrape();
    let get = |m: &HashMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
    for (series, at_least) in [
        ("mcp_http_responses_total{status=\"200\"}", 6.0),
        ("mcp_http_responses_total{status=\"404\"}", 1.0),
        ("mcp_events_total", 5.0),
        // Answered in their first writes: kept for late resumes as data (no actors).
        ("mcp_streams_dormant", 5.0),
        ("mcp_refusals_total{cause=\"session_not_found\"}", 1.0),
        // Each of those exchanges came on a connection of its own.
        ("mcp_connections_accepted_total", 6.0),
    ] {
        assert!(
            get(&after, series) - get(&before, series) >= at_least,
            "{series}: {} -> {}",
            get(&before, series),
            get(&after, series)
        );
    }
    assert!(
        get(&after, "mcp_ledger_batches_total") > get(&before, "mcp_ledger_batches_total"),
        "the ledger committed"
    );
    for series in
        ["mcp_sessions_hibernating", "mcp_sessions_hibernated_total", "mcp_sessions_woken_total"]
    {
        assert!(after.contains_key(series), "{series} is exported");
    }
    // The host's default SQLite ledger shows its log: the commits above are in it.
    assert!(get(&after, "mcp_ledger_log_pages") > 0.0, "the log's pages");
    assert_eq!(
        after.get("mcp_ledger_checkpoint_failures_total"),
        Some(&0.0),
        "exported, none failed"
    );
    assert!(get(&after, "mcp_ledger_commit_seconds_count") > 0.0);
    // The unknown session's 404 came after a ledger read (a revive looked for it).
    assert!(
        get(&after, "mcp_ledger_read_seconds_count")
            > get(&before, "mcp_ledger_read_seconds_count")
    );
    assert_eq!(after.get("mcp_ledger_read_errors_total"), Some(&0.0), "exported, none failed");
    let generation = get(&after, "mcp_generation_current");
    assert!(generation >= 1.0);
    assert_eq!(get(&after, &format!("mcp_sessions_live{{generation=\"{generation}\"}}")), 1.0);
    assert_eq!(get(&after, "mcp_phase{phase=\"serving\"}"), 1.0);
}

#[test]
fn no_session_id_reaches_the_log_even_at_debug_level_under_load() {
    let dir = TempDir::new("no-ids-in-logs");
    let log = dir.path().join("host.log");
    let mut host = start_logged(&dir, 0, &["--session-ttl-secs", "2"], Some((&log, "debug")));
    let mut ids = Vec::new();
    for n in 0..16 {
        let sid = initialize(&host.addr);
        set_level_info(&host.addr, &sid);
        let cursor = call_and_hang_up(
            &host.addr,
            &sid,
            3,
            "soak_flood",
            json!({"delay_ms": 20, "count": 4, "bytes": 16}),
        );
        let (_, _, _) = call_sse(&host.addr, &sid, &call(4, "echo", json!({"text": "x"})), QUICK);
        assert_eq!(resume(&host.addr, &sid, &cursor).0, 200);
        if n % 2 == 0 {
            let (status, _, _) = http(&host.addr, "DELETE", &[("Mcp-Session-Id", &sid)], "", QUICK);
            assert_eq!(status, 204);
            assert_eq!(
                post_json(&host.addr, &sid, &json!({"jsonrpc":"2.0","id":9,"method":"ping"})).0,
                404
            );
        }
        ids.push(sid);
    }
    // Some expire meanwhile (2 s TTL); then a graceful stop logs its own lines.
    std::thread::sleep(Duration::from_millis(2500));
    let exit = host.process.terminate(Duration::from_secs(20));
    assert_eq!(exit.and_then(|s| s.code()), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("session{hmac="),
        "the log has session spans (the test would prove nothing otherwise):\n{}",
        &text[..text.len().min(2000)]
    );
    for id in &ids {
        let random = id.rsplit_once('.').map_or(id.as_str(), |(_, r)| r);
        for probe in [id.as_str(), &random[..12], &random[random.len() - 12..]] {
            assert!(!text.contains(probe), "a session id ({probe}) reached the log");
        }
    }
}
