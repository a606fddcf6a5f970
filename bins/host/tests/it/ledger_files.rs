//! The real binary and the files of its ledger: one host per ledger, nothing written by a
//! host that cannot start (busy port, foreign file, unsafe key file), files owner-only, and a
//! clean-stop mark after a clean stop. `MCP_HOST_BIN` overrides the binary.
//!
//! Every process a test starts is killed and reaped when its guard drops, on success and on
//! failure.

use crate::common;

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_devtools::TempDir;

fn bin() -> String {
    std::env::var("MCP_HOST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-host").to_owned())
}

/// A host expected to refuse to start: killed and reaped when dropped, whatever happened.
struct Refusing(std::process::Child);

impl Drop for Refusing {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run the host with `args` (stdout discarded) and wait at most 20 s for it to exit: its exit
/// code and stderr. Panics (after killing it) when it is still running then: it started
/// instead of refusing.
pub(crate) fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let child = Command::new(bin())
        .args(args)
        .env(mcp_devtools::LOG_ENV, "warn")
        .env("MCP_HOST_EXIT_WITH_PARENT", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mcp-host");
    let mut child = Refusing(child);
    let mut stderr = child.0.stderr.take().expect("stderr");
    // Read while it runs, so a full pipe never blocks it.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = (0..1000).find_map(|_| {
        let s = child.0.try_wait().expect("wait");
        if s.is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    });
    let Some(status) = status else {
        drop(child);
        panic!(
            "mcp-host {args:?} was still running after 20 s: it started instead of refusing (stderr: {:?})",
            reader.join().unwrap_or_default()
        );
    };
    (status.code(), reader.join().unwrap_or_default())
}

/// The names of the files in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn ledger_path(dir: &TempDir) -> String {
    dir.path().join("mcp-host.db").display().to_string()
}

/// `--port 0 --ledger-path <dir>/mcp-host.db --admin-port 0`, then `extra`.
fn args<'a>(dir: &'a TempDir, extra: &[&'a str]) -> Vec<String> {
    let mut v = vec!["--port".to_owned(), "0".to_owned()];
    v.extend(dir.host_args());
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    v
}

fn run_refused(dir: &TempDir, extra: &[&str]) -> (Option<i32>, String) {
    let a = args(dir, extra);
    run_to_exit(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn a_second_host_on_the_same_ledger_exits_2_naming_the_first_ones_pid() {
    let dir = TempDir::new("second-host");
    let first = common::start(&dir, 0);
    let sid = common::initialize(&first.addr);
    let (code, stderr) = run_refused(&dir, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {}", first.process.pid()))
            && stderr.contains("in use by another mcp-host"),
        "{stderr}"
    );
    // The first host's ledger and its sessions are untouched: it serves on.
    let (status, _) = common::post_json(
        &first.addr,
        &sid,
        &serde_json::json!({"jsonrpc":"2.0","id":2,"method":"ping"}),
    );
    assert_eq!(status, 200);
}

#[test]
fn a_host_on_a_busy_port_writes_no_ledger_file() {
    let dir = TempDir::new("busy-port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let ledger = ledger_path(&dir);
    let (code, stderr) =
        run_to_exit(&["--port", &port, "--ledger-path", &ledger, "--admin-port", "0"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "the message names the port: {stderr}");
    assert_eq!(
        names(dir.path()),
        Vec::<String>::new(),
        "nothing was written (no ledger, -wal, -shm, key, lock or token file)"
    );
    // The admin API's port too.
    let (code, stderr) =
        run_to_exit(&["--port", "0", "--ledger-path", &ledger, "--admin-port", &port]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "{stderr}");
    assert_eq!(names(dir.path()), Vec::<String>::new());
}

#[test]
fn a_foreign_sqlite_file_is_refused_and_left_byte_for_byte_untouched() {
    let dir = TempDir::new("foreign-db");
    let path = dir.path().join("mcp-host.db");
    {
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');").unwrap();
    }
    let copy = std::fs::read(&path).unwrap();
    let before = names(dir.path());
    let (code, stderr) = run_refused(&dir, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("is not an mcp-host ledger") && stderr.contains("mcp-host.db"),
        "{stderr}"
    );
    assert!(std::fs::read(&path).unwrap() == copy, "the foreign file changed");
    // Nothing beside it either but the (empty of data) lock file: no -wal, -shm, key or token.
    let after: Vec<String> =
        names(dir.path()).into_iter().filter(|n| n != "mcp-host.db.lock").collect();
    assert_eq!(after, before);
    // Not SQLite at all.
    std::fs::write(&path, b"these are my notes, not a database\n").unwrap();
    let (code, stderr) = run_refused(&dir, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not an SQLite database"), "{stderr}");
    assert_eq!(std::fs::read(&path).unwrap(), b"these are my notes, not a database\n");
}

/// The permission bits of `path` (not following a symbolic link).
fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn ledger_files_are_created_owner_only() {
    let dir = TempDir::new("owner-only");
    let mut host = common::start_with(&dir, 0, &["--packs", "basket"]);
    let sid = common::initialize(&host.addr);
    // A write of the ledger pack, so its journal has a line (and the WAL a commit).
    let call = serde_json::json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ledger_append","arguments":{"key":"k1"}}});
    assert_eq!(common::post_json(&host.addr, &sid, &call).0, 200);
    for suffix in ["", "-wal", "-shm", ".key", ".lock", ".appends", ".orders"] {
        let p = dir.path().join(format!("mcp-host.db{suffix}"));
        assert_eq!(mode(&p) & 0o077, 0, "{} is {:o}", p.display(), mode(&p));
    }
    let token = dir.path().join("mcp-host.admin-token");
    assert_eq!(mode(&token), 0o600);
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));
    let left: Vec<String> = names(dir.path()).into_iter().filter(|n| n.contains(".tmp")).collect();
    assert!(left.is_empty(), "no temporary file is left: {left:?}");
}

fn write_key(path: &Path, mode: u32) {
    std::fs::write(path, format!("{}\n", "ab".repeat(32))).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_key_file_readable_by_others_refuses_to_start_unless_allowed() {
    let dir = TempDir::new("insecure-key");
    let key = dir.path().join("mcp-host.db.key");
    write_key(&key, 0o644);
    let (code, stderr) = run_refused(&dir, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&key.display().to_string()) && stderr.contains("chmod 600"),
        "{stderr}"
    );
    let mut host = common::start_with(&dir, 0, &["--allow-insecure-key"]);
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));
    // The admin token file the same.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token = dir.path().join("mcp-host.admin-token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (code, stderr) = run_refused(&dir, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("mcp-host.admin-token") && stderr.contains("chmod 600"), "{stderr}");
}

#[test]
fn a_symlinked_key_file_is_refused() {
    let dir = TempDir::new("symlink-key");
    let target = dir.path().join("elsewhere");
    write_key(&target, 0o600);
    let before = std::fs::read(&target).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("mcp-host.db.key")).unwrap();
    let (code, stderr) = run_refused(&dir, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("mcp-host.db.key is a symbolic link"), "{stderr}");
    assert_eq!(std::fs::read(&target).unwrap(), before);
    // A dangling one is not followed to create the key (or the token) at its target.
    std::fs::remove_file(dir.path().join("mcp-host.db.key")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("absent"), dir.path().join("mcp-host.admin-token"))
        .unwrap();
    let (code, stderr) = run_refused(&dir, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("mcp-host.admin-token is a symbolic link"), "{stderr}");
    assert!(!dir.path().join("absent").exists());
}

#[test]
fn sigterm_on_an_idle_host_leaves_a_clean_stop_mark_and_closes_the_ledger_despite_the_stats_thread()
{
    let dir = TempDir::new("clean-mark");
    let mut host = common::start_with(&dir, 0, &["--stats-every-ms", "20"]);
    common::initialize(&host.addr);
    assert!(
        host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()),
        "a clean stop exits 0"
    );
    // The ledger was closed at exit (its writer joined, its connections closed, which
    // checkpoints and removes the WAL): the stats thread did not keep the supervisor alive.
    // (Checked before reading it: a read-only open creates an empty WAL.)
    assert!(
        !dir.path().join("mcp-host.db-wal").exists(),
        "the WAL is left: the ledger was never closed"
    );
    let db = rusqlite::Connection::open_with_flags(
        dir.path().join("mcp-host.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let marks: Vec<String> = db
        .prepare("SELECT key FROM kv WHERE key LIKE 'm/clean/%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(marks, ["m/clean/1"], "the next start sees the run as clean");
}

#[test]
fn check_writes_no_ledger_file_and_refuses_a_ledger_another_host_holds() {
    let dir = TempDir::new("check-sqlite");
    let ledger = ledger_path(&dir);
    let (code, stderr) = run_to_exit(&["--check", "--ledger-path", &ledger]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(names(dir.path()).is_empty(), "nothing written: {:?}", names(dir.path()));
    let mut host = common::start(&dir, 0);
    let (code, stderr) = run_to_exit(&["--check", "--ledger-path", &ledger]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", host.process.pid())), "{stderr}");
    // Stopped: the ledger and its key are checked, and a foreign key is named.
    assert!(host.process.terminate(Duration::from_secs(15)).is_some_and(|s| s.success()));
    let (code, stderr) = run_to_exit(&["--check", "--ledger-path", &ledger]);
    assert_eq!(code, Some(0), "{stderr}");
    let other_key = dir.path().join("other.key");
    std::fs::write(&other_key, format!("{}\n", "cd".repeat(32))).unwrap();
    std::fs::set_permissions(&other_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let key = other_key.display().to_string();
    let set = format!("ledger.key_file={key}");
    let (code, stderr) = run_to_exit(&["--check", "--ledger-path", &ledger, "--set", &set]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("written with another key"), "{stderr}");
    // The same key listed as a previous one of a new key: a start would rotate, and so the
    // check passes.
    let previous =
        format!("ledger.previous_key_files=[\"{}\"]", dir.path().join("mcp-host.db.key").display());
    let (code, stderr) =
        run_to_exit(&["--check", "--ledger-path", &ledger, "--set", &set, "--set", &previous]);
    assert_eq!(code, Some(0), "a rotation is not a mismatch: {stderr}");
}
