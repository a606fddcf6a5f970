//! The SQLite store (the default): one file in WAL mode. Batches are single transactions, so
//! a crash leaves each batch either whole or absent; readers use their own connections and
//! never wait for the writer.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Durability, Op, Store, StoreError};

const SCHEMA: &str = "
PRAGMA journal_mode = WAL;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (k, v) VALUES ('schema', 'mcp-host-ledger.v1');
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, expires INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires);
CREATE TABLE IF NOT EXISTS logs (log TEXT PRIMARY KEY, newest INTEGER NOT NULL, expires INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS logs_expires ON logs (expires);
CREATE TABLE IF NOT EXISTS events (log TEXT NOT NULL, seq INTEGER NOT NULL, frame BLOB NOT NULL, PRIMARY KEY (log, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idx (name TEXT NOT NULL, member TEXT NOT NULL, score INTEGER NOT NULL, PRIMARY KEY (name, member)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_score ON idx (name, score, member);
CREATE TABLE IF NOT EXISTS indexes (name TEXT PRIMARY KEY, expires INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS indexes_expires ON indexes (expires);
";

/// Readers kept open (each read takes a free one, or waits for the least busy).
const READERS: usize = 4;

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The SQLite store.
#[derive(Debug)]
pub struct SqliteStore {
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
}

fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let c = Connection::open(path).map_err(backend)?;
    // Short: a lock held longer is a stuck process, not contention (there is one writer
    // connection per ledger); the writer retries a failed batch itself.
    c.busy_timeout(std::time::Duration::from_secs(1)).map_err(backend)?;
    Ok(c)
}

impl SqliteStore {
    /// Open (creating if needed) the ledger at `path`.
    ///
    /// # Errors
    /// [`StoreError::Backend`] when the file cannot be opened, is not a ledger, or was written
    /// by a newer release.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let writer = open_conn(path)?;
        writer.execute_batch(SCHEMA).map_err(backend)?;
        // The writer's page cache holds the hot part of the logs and indexes (32 MiB).
        writer.execute_batch("PRAGMA cache_size = -32768;").map_err(backend)?;
        let schema: String = writer.query_row("SELECT v FROM meta WHERE k = 'schema'", [], |r| r.get(0)).map_err(backend)?;
        if schema != "mcp-host-ledger.v1" {
            return Err(StoreError::Backend(format!("{} holds ledger schema {schema:?}, not mcp-host-ledger.v1", path.display())));
        }
        let readers = (0..READERS).map(|_| open_conn(path).map(Mutex::new)).collect::<Result<Vec<_>, _>>()?;
        Ok(SqliteStore { writer: Mutex::new(writer), readers, next_reader: AtomicUsize::new(0) })
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let conn = (0..READERS)
            .find_map(|i| self.readers[(start + i) % READERS].try_lock())
            .unwrap_or_else(|| self.readers[start % READERS].lock());
        f(&conn).map_err(backend)
    }
}

fn apply_one(tx: &rusqlite::Transaction<'_>, op: &Op) -> rusqlite::Result<()> {
    match op {
        Op::Put { key, value, expires_ms } => {
            tx.prepare_cached("INSERT INTO kv (key, value, expires) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires")?
                .execute(params![key, &value[..], ms(*expires_ms)])?;
        }
        Op::Delete { key } => {
            tx.prepare_cached("DELETE FROM kv WHERE key = ?1")?.execute(params![key])?;
        }
        // Folded per log by `SqliteStore::apply`, the only caller that sees appends.
        Op::Append { .. } => unreachable!("appends are folded in SqliteStore::apply"),
        Op::DropLog { log } => {
            tx.prepare_cached("DELETE FROM events WHERE log = ?1")?.execute(params![log])?;
            tx.prepare_cached("DELETE FROM logs WHERE log = ?1")?.execute(params![log])?;
        }
        Op::IndexAdd { index, member, score, expires_ms } => {
            tx.prepare_cached("INSERT INTO idx (name, member, score) VALUES (?1, ?2, ?3) ON CONFLICT (name, member) DO UPDATE SET score = excluded.score")?
                .execute(params![index, member, ms(*score)])?;
            // An existing index keeps its expiry here (a read, no write): its owner pushes it
            // with `Expire` (a session's record writes do).
            tx.prepare_cached("INSERT OR IGNORE INTO indexes (name, expires) VALUES (?1, ?2)")?.execute(params![index, ms(*expires_ms)])?;
        }
        Op::Expire { name, expires_ms } => {
            let e = ms(*expires_ms);
            tx.prepare_cached("UPDATE kv SET expires = ?2 WHERE key = ?1 AND expires < ?2")?.execute(params![name, e])?;
            tx.prepare_cached("UPDATE logs SET expires = ?2 WHERE log = ?1 AND expires < ?2")?.execute(params![name, e])?;
            tx.prepare_cached("UPDATE indexes SET expires = ?2 WHERE name = ?1 AND expires < ?2")?.execute(params![name, e])?;
        }
        Op::IndexRemove { index, member } => {
            tx.prepare_cached("DELETE FROM idx WHERE name = ?1 AND member = ?2")?.execute(params![index, member])?;
        }
        Op::IndexTrim { index, below } => {
            tx.prepare_cached("DELETE FROM idx WHERE name = ?1 AND score < ?2")?.execute(params![index, ms(*below)])?;
        }
        Op::DropIndex { index } => {
            tx.prepare_cached("DELETE FROM idx WHERE name = ?1")?.execute(params![index])?;
            tx.prepare_cached("DELETE FROM indexes WHERE name = ?1")?.execute(params![index])?;
        }
    }
    Ok(())
}

/// A log's state within one batch.
struct LogTail {
    /// Its newest sequence number.
    newest: i64,
    /// The latest expiry its accepted appends asked for.
    expires: i64,
    /// Events kept (the last accepted append's `max_len`).
    keep: i64,
    /// Appends were accepted after its row was last written.
    row_stale: bool,
    /// An append was accepted: the log is to be trimmed to `keep`.
    trim: bool,
}

/// Write the logs' rows and trims for the appends folded so far, and forget them.
fn write_tails(tx: &rusqlite::Transaction<'_>, logs: &mut HashMap<Arc<str>, LogTail>) -> rusqlite::Result<()> {
    for (log, t) in logs.drain() {
        if t.row_stale {
            tx.prepare_cached("UPDATE logs SET newest = ?2, expires = max(expires, ?3) WHERE log = ?1")?.execute(params![&*log, t.newest, t.expires])?;
        }
        if t.trim && t.newest > t.keep {
            tx.prepare_cached("DELETE FROM events WHERE log = ?1 AND seq <= ?2")?.execute(params![&*log, t.newest - t.keep])?;
        }
    }
    Ok(())
}

impl Store for SqliteStore {
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        let mut conn = self.writer.lock();
        let tx = conn.transaction().map_err(backend)?;
        // Appends are folded per log: each event is one insert, and each log's row and trim
        // are written once per batch (before anything else that touches logs, and at the end).
        let mut logs: HashMap<Arc<str>, LogTail> = HashMap::new();
        for op in ops {
            match op {
                Op::Append { log, seq, frame, max_len, expires_ms } => {
                    let (seq, expires, keep) = (ms(*seq), ms(*expires_ms), i64::try_from((*max_len).max(1)).unwrap_or(i64::MAX));
                    let tail = match logs.entry(Arc::clone(log)) {
                        Entry::Occupied(e) => e.into_mut(),
                        Entry::Vacant(e) => {
                            // The log's first append of the batch moves its row, if it advances
                            // (a replayed append does not).
                            let advanced = tx
                                .prepare_cached(
                                    "INSERT INTO logs (log, newest, expires) VALUES (?1, ?2, ?3) ON CONFLICT (log) DO UPDATE
                                     SET newest = excluded.newest, expires = max(expires, excluded.expires) WHERE excluded.newest > logs.newest",
                                )
                                .and_then(|mut st| st.execute(params![&**log, seq, expires]))
                                .map_err(backend)?
                                == 1;
                            let newest = if advanced {
                                seq
                            } else {
                                tx.prepare_cached("SELECT newest FROM logs WHERE log = ?1").and_then(|mut st| st.query_row(params![&**log], |r| r.get::<_, i64>(0))).map_err(backend)?
                            };
                            if advanced {
                                tx.prepare_cached("INSERT INTO events (log, seq, frame) VALUES (?1, ?2, ?3)").and_then(|mut st| st.execute(params![&**log, seq, &frame[..]])).map_err(backend)?;
                            }
                            e.insert(LogTail { newest, expires, keep, row_stale: false, trim: advanced });
                            continue;
                        }
                    };
                    // Sequence numbers of a log only grow: a replayed append is ignored.
                    if seq > tail.newest {
                        tx.prepare_cached("INSERT INTO events (log, seq, frame) VALUES (?1, ?2, ?3)").and_then(|mut st| st.execute(params![&**log, seq, &frame[..]])).map_err(backend)?;
                        *tail = LogTail { newest: seq, expires: tail.expires.max(expires), keep, row_stale: true, trim: true };
                    }
                }
                Op::DropLog { .. } | Op::Expire { .. } => {
                    write_tails(&tx, &mut logs).map_err(backend)?;
                    apply_one(&tx, op).map_err(backend)?;
                }
                _ => apply_one(&tx, op).map_err(backend)?,
            }
        }
        write_tails(&tx, &mut logs).map_err(backend)?;
        tx.commit().map_err(backend)
    }

    fn get(&self, key: &str, now_ms: u64) -> Result<Option<Bytes>, StoreError> {
        self.read(|c| {
            c.prepare_cached("SELECT value FROM kv WHERE key = ?1 AND expires > ?2")?
                .query_row(params![key, ms(now_ms)], |r| r.get::<_, Vec<u8>>(0))
                .optional()
                .map(|v| v.map(Bytes::from))
        })
    }

    fn read_log(&self, log: &str, now_ms: u64) -> Result<Vec<(u64, Bytes)>, StoreError> {
        self.read(|c| {
            let live: Option<i64> = c.prepare_cached("SELECT newest FROM logs WHERE log = ?1 AND expires > ?2")?.query_row(params![log, ms(now_ms)], |r| r.get(0)).optional()?;
            if live.is_none() {
                return Ok(Vec::new());
            }
            let mut s = c.prepare_cached("SELECT seq, frame FROM events WHERE log = ?1 ORDER BY seq")?;
            let rows = s.query_map(params![log], |r| Ok((r.get::<_, i64>(0)? as u64, Bytes::from(r.get::<_, Vec<u8>>(1)?))))?;
            rows.collect()
        })
    }

    fn index_lowest(&self, index: &str, limit: usize, now_ms: u64) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|c| {
            let live: Option<i64> = c.prepare_cached("SELECT expires FROM indexes WHERE name = ?1 AND expires > ?2")?.query_row(params![index, ms(now_ms)], |r| r.get(0)).optional()?;
            if live.is_none() {
                return Ok(Vec::new());
            }
            let mut s = c.prepare_cached("SELECT member, score FROM idx WHERE name = ?1 ORDER BY score, member LIMIT ?2")?;
            let rows = s.query_map(params![index, i64::try_from(limit).unwrap_or(i64::MAX)], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?;
            rows.collect()
        })
    }

    fn index_len(&self, index: &str, now_ms: u64) -> Result<usize, StoreError> {
        self.read(|c| {
            let live: Option<i64> = c.prepare_cached("SELECT expires FROM indexes WHERE name = ?1 AND expires > ?2")?.query_row(params![index, ms(now_ms)], |r| r.get(0)).optional()?;
            if live.is_none() {
                return Ok(0);
            }
            c.prepare_cached("SELECT count(*) FROM idx WHERE name = ?1")?.query_row(params![index], |r| r.get::<_, i64>(0)).map(|n| n as usize)
        })
    }

    fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let mut conn = self.writer.lock();
        let tx = conn.transaction().map_err(backend)?;
        let (now, limit) = (ms(now_ms), i64::try_from(limit).unwrap_or(i64::MAX));
        let keys = tx.execute("DELETE FROM kv WHERE key IN (SELECT key FROM kv WHERE expires <= ?1 LIMIT ?2)", params![now, limit]).map_err(backend)?;
        // What is left of the limit after `done` removals.
        let expired = |sql: &str, done: usize| -> Result<Vec<String>, StoreError> {
            let mut s = tx.prepare(sql).map_err(backend)?;
            let names = s.query_map(params![now, limit, i64::try_from(done).unwrap_or(i64::MAX)], |r| r.get::<_, String>(0)).map_err(backend)?;
            names.collect::<Result<_, _>>().map_err(backend)
        };
        let logs = expired("SELECT log FROM logs WHERE expires <= ?1 LIMIT ?2 - ?3", keys)?;
        for log in &logs {
            apply_one(&tx, &Op::DropLog { log: log.clone() }).map_err(backend)?;
        }
        let indexes = expired("SELECT name FROM indexes WHERE expires <= ?1 LIMIT ?2 - ?3", keys + logs.len())?;
        for index in &indexes {
            apply_one(&tx, &Op::DropIndex { index: index.clone() }).map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(keys + logs.len() + indexes.len())
    }

    fn set_durability(&self, durability: Durability) {
        let level = match durability {
            Durability::Batched => "NORMAL",
            Durability::Sync => "FULL",
        };
        if let Err(e) = self.writer.lock().pragma_update(None, "synchronous", level) {
            tracing::warn!(error = %e, "could not set the ledger's durability");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sqlite_store_keeps_the_store_contract() {
        let dir = mcp_devtools::TempDir::new("contract");
        super::super::store_tests::contract(&SqliteStore::open(&dir.path().join("l.db")).unwrap());
    }

    #[test]
    fn what_was_committed_is_there_after_reopening() {
        let dir = mcp_devtools::TempDir::new("reopen");
        let path = dir.path().join("l.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            s.apply(&[Op::Put { key: "k".into(), value: Bytes::from_static(b"v"), expires_ms: 100 }]).unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.get("k", 1).unwrap().as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn a_file_that_is_not_a_ledger_is_refused() {
        let dir = mcp_devtools::TempDir::new("foreign");
        let path = dir.path().join("l.db");
        Connection::open(&path).unwrap().execute_batch("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT); INSERT INTO meta VALUES ('schema', 'other.v9');").unwrap();
        assert!(matches!(SqliteStore::open(&path), Err(StoreError::Backend(m)) if m.contains("other.v9")));
    }
}
