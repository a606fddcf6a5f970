//! The real binary on a real full filesystem (a small tmpfs this test mounts; it needs root,
//! as CI runs): while the ledger cannot commit, every request that needs a new durable record
//! is refused with 503 naming the ledger, reads keep working, `/readyz` answers 503 on both
//! ports and the admin API and `/metrics` say why and since when; once space is freed the
//! writer commits what it held, by itself, and nothing handed over before is lost (a restart
//! finds it). `MCP_HOST_BIN` overrides the binary.

use crate::common;

use std::io::Write as _;
use std::process::Command;
use std::time::Duration;

use common::*;
use mcp_devtools::TempDir;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

/// A tmpfs mounted on a directory, unmounted when dropped (lazily: a process that still has
/// a file open there does not keep the mount).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// `None` when this process may not mount (not root).
    fn mount(at: &std::path::Path, size: &str) -> Option<Tmpfs> {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fill the filesystem of `dir` with one file until it is full; returns the file.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("the filler file");
    let chunk = vec![0u8; 64 << 10];
    for _ in 0..(1 << 16) {
        if f.write_all(&chunk).and_then(|()| f.flush()).is_err() {
            return path;
        }
    }
    panic!("the filesystem never filled up");
}

fn admin_get(addr: &str, token: &str, path: &str) -> (u16, String) {
    let bearer = format!("Bearer {token}");
    let (status, _, body) = http_at(addr, "GET", path, &[("Authorization", &bearer)], "", QUICK);
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn ledger_state(addr: &str, token: &str) -> Value {
    let (status, body) = admin_get(addr, token, "/admin/status");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["ledger"].clone()
}

#[test]
fn a_full_disk_fails_closed_with_503_naming_the_ledger_keeps_reads_and_heals_when_space_returns() {
    let dir = TempDir::new("ledger-full");
    let Some(_fs) = Tmpfs::mount(dir.path(), "6m") else {
        // CI runs as root: there, not being able to mount is a failure, not a skip.
        assert!(
            std::env::var_os("CI").is_none(),
            "cannot mount a tmpfs (CI must run this test as root)"
        );
        eprintln!(
            "SKIPPED: mounting a tmpfs needs root; the same behaviour is tested on a locked ledger in runtime/tests/ledger_health.rs"
        );
        return;
    };
    let config = dir.path().join("host.toml");
    std::fs::write(&config, "[ledger]\ncommit_wait_ms = 1000\n").unwrap();
    let config = config.display().to_string();
    let host = start_with(&dir, 0, &["--config", &config]);
    let admin = host
        .process
        .admin_url(WAIT)
        .expect("the admin line")
        .trim_start_matches("http://")
        .to_owned();
    let token =
        std::fs::read_to_string(dir.path().join("mcp-host.admin-token")).unwrap().trim().to_owned();
    let before = initialize(&host.addr);
    let gone = initialize(&host.addr);
    assert_eq!(http_at(&host.addr, "GET", "/readyz", &[], "", QUICK).0, 200);

    let filler = fill(dir.path());
    // Writes now fail: the first initialize may wait out the commit wait, later ones are
    // refused at once once the writer reports it.
    wait_until("the ledger reports that it cannot commit", Duration::from_secs(60), || {
        let (status, _, _) = initialize_status(&host.addr);
        assert!(status == 200 || status == 503, "{status}");
        ledger_state(&admin, &token)["state"] == "failing"
    });
    let (status, head, body) = initialize_status(&host.addr);
    assert_eq!(status, 503, "{body}");
    assert!(header(&head, "retry-after").is_some(), "{head}");
    assert_eq!(body["error"]["code"], -32006);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("ledger"),
        "the refusal names the ledger: {body}"
    );
    // A keyed write-tool call needs its receipt: refused before the tool runs.
    let keyed = json!({"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":"during-full"}}});
    let (status, body) = post_json(&host.addr, &before, &keyed);
    assert_eq!((status, body["error"]["code"].clone()), (503, json!(-32006)), "{body}");

    // Readiness: 503 on both ports; the admin port says why, the MCP port nothing more.
    let (status, _, plain) = http_at(&host.addr, "GET", "/readyz", &[], "", QUICK);
    assert_eq!(
        (status, String::from_utf8_lossy(&plain).trim().to_owned()),
        (503, "not ready".to_owned())
    );
    assert_eq!(http_at(&host.addr, "GET", "/livez", &[], "", QUICK).0, 200);
    let (status, why) = admin_get(&admin, &token, "/readyz");
    assert_eq!(status, 503, "{why}");
    let why: Value = serde_json::from_str(&why).unwrap();
    assert_eq!(why["ledger"]["state"], "failing");
    assert!(
        why["ledger"]["last_error"].as_str().is_some_and(|e| e.to_lowercase().contains("full")),
        "{why}"
    );
    let state = ledger_state(&admin, &token);
    assert!(
        state["failing_since_ms"].as_u64().is_some()
            && state["since_last_commit_ms"].as_u64().is_some(),
        "{state}"
    );
    let (_, metrics) = admin_get(&admin, &token, "/metrics");
    assert!(metrics.lines().any(|l| l == "mcp_ledger_failing 1"), "{metrics}");
    assert!(metrics.contains("mcp_ledger_seconds_since_commit"));

    // Reads that need nothing new keep working.
    let (status, list) =
        post_json(&host.addr, &before, &json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}));
    assert_eq!(status, 200);
    assert!(list["result"]["tools"].is_array());
    let (status, echo) = post_json(
        &host.addr,
        &before,
        &json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"still here"}}}),
    );
    assert_eq!((status, echo["result"]["content"][0]["text"].clone()), (200, json!("still here")));
    // A DELETE is answered; its record waits in the writer's queue.
    let (status, _, _) = http(
        &host.addr,
        "DELETE",
        &[("Mcp-Session-Id", &gone), ("MCP-Protocol-Version", "2025-11-25")],
        "",
        QUICK,
    );
    assert_eq!(status, 204);

    // Space comes back: the writer commits by itself.
    std::fs::remove_file(filler).unwrap();
    wait_until("the ledger commits again", Duration::from_secs(30), || {
        ledger_state(&admin, &token)["state"] == "ok"
    });
    assert_eq!(http_at(&host.addr, "GET", "/readyz", &[], "", QUICK).0, 200);
    let (status, _, body) = initialize_status(&host.addr);
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_json(&host.addr, &before, &keyed);
    assert_eq!(
        (status, body["result"]["content"][0]["text"].clone()),
        (200, json!("during-full")),
        "{body}"
    );
    // What was handed over while the disk was full is in the ledger: the DELETE's end.
    wait_for_ledger(
        &dir,
        "SELECT count(*) FROM kv WHERE key LIKE 's/%' AND CAST(value AS TEXT) LIKE '%\"state\":\"deleted\"%'",
        1,
    );
    let host = host.kill_and_restart_with(&dir, &["--config", &config]);
    let (status, _) =
        post_json(&host.addr, &before, &json!({"jsonrpc":"2.0","id":6,"method":"tools/list"}));
    assert_eq!(status, 200, "the session of before survives");
    let (status, _) =
        post_json(&host.addr, &gone, &json!({"jsonrpc":"2.0","id":7,"method":"tools/list"}));
    assert_eq!(status, 404, "the session deleted while the disk was full stays deleted");
}
