//! Crash safety of the SQLite ledger: a process killed (SIGKILL) while its writer commits
//! batches leaves a prefix of what it handed over — no torn frame, no duplicated or missing
//! event inside the prefix, and the record written with each event agrees with the log
//! (both or neither of a batch).
//!
//! The test runs itself as the writing child (selected by an environment variable).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mcp_runtime::ledger::{Durability, Op, SqliteStore, Store, Writer, WriterSettings};

const CHILD: &str = "MCP_LEDGER_CRASH_CHILD";
const LOG: &str = "e/crash/1";

fn frame(seq: u64) -> Bytes {
    // Varied lengths, so a torn write would show as a wrong length or content.
    let pad = "x".repeat((seq % 97) as usize * 13);
    Bytes::from(format!("id: {seq}\ndata: {{\"seq\":{seq},\"pad\":\"{pad}\"}}\n\n"))
}

/// The child: append events with a record naming the newest, through the group-commit
/// writer, until killed (bounded: 5 million events, some seconds).
fn write_until_killed(path: &str) {
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(std::path::Path::new(path)).expect("open"));
    let settings = WriterSettings {
        durability: Durability::Batched,
        batch_max_ops: 256,
        queue_max_bytes: 64 << 20,
        sweep_every: Duration::from_secs(3600),
        linger: Duration::from_micros(200),
        commit_wait: Duration::from_secs(10),
    };
    let w = Writer::start(store, settings, Box::new(|| 0));
    for seq in 1..=5_000_000u64 {
        let log: Arc<str> = LOG.into();
        w.submit(vec![
            Op::Append { log, seq, frame: frame(seq), max_len: usize::MAX, expires_ms: u64::MAX },
            Op::Put {
                key: "newest".into(),
                value: Bytes::from(seq.to_string()),
                expires_ms: u64::MAX,
            },
        ]);
        if seq % 2_000 == 0 {
            // Keep the queue short, so batches are committing when the kill comes.
            let _ = w.barrier().blocking_recv();
        }
    }
}

#[test]
fn a_sqlite_ledger_killed_during_a_batch_keeps_a_prefix_never_torn_or_duplicated() {
    if let Ok(path) = std::env::var(CHILD) {
        write_until_killed(&path);
        return;
    }
    let dir = mcp_devtools::TempDir::new("ledger-crash");
    let path = dir.path().join("crash.db");
    // This test's name as the test binary knows it (its module path without the crate).
    let name = format!(
        "{}::a_sqlite_ledger_killed_during_a_batch_keeps_a_prefix_never_torn_or_duplicated",
        module_path!().split_once("::").map_or("", |(_, m)| m)
    );
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name.as_str(), "--nocapture"])
        .env(CHILD, &path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the writing child");
    // Kill it mid-run: once a good number of events is committed (bounded wait).
    let mut committed = 0i64;
    for _ in 0..1_000 {
        std::thread::sleep(Duration::from_millis(10));
        if let Ok(db) =
            rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        {
            committed = db.query_row("SELECT count(*) FROM events", [], |r| r.get(0)).unwrap_or(0);
            if committed >= 20_000 {
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(committed >= 20_000, "the child committed only {committed} events");

    let store = SqliteStore::open(&path).expect("the killed ledger opens");
    let events = store.read_log(LOG, 0).unwrap();
    let n = events.len() as u64;
    assert!(n >= committed as u64, "nothing committed was lost");
    for (i, (seq, f)) in events.iter().enumerate() {
        assert_eq!(*seq, i as u64 + 1, "a prefix: no gap, no duplicate");
        assert_eq!(f, &frame(*seq), "event {seq} is whole");
    }
    let newest = store.get("newest", 0).unwrap().expect("the record");
    assert_eq!(
        std::str::from_utf8(&newest).unwrap(),
        n.to_string(),
        "the record and the log come from the same batches"
    );
}
