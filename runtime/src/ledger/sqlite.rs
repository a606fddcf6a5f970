//! The SQLite store (the default): one file in WAL mode. Batches are single transactions, so
//! a crash leaves each batch either whole or absent; readers use their own connections and
//! never wait for the writer.
//!
//! Opening ([`SqliteStore::open`]) owns these guarantees, in this order:
//! 1. one process per ledger: the lock file `<path>.lock` is locked first, and held as long as
//!    the store (see `files.rs`);
//! 2. a file that is not a ledger, or a newer release's, is refused before anything is written
//!    to it: its header (`application_id`, `user_version`) is read as plain bytes, and only a
//!    file with SQLite's default id 0 (another application's, or a ledger of the release
//!    before ids) is opened, read-only, to look for the `meta` table;
//! 3. a new ledger file is created by us with mode 0600, so SQLite creates its `-wal` and
//!    `-shm` with that mode too; its application id and schema version are written before it
//!    switches to WAL mode, so they are in the main file from the first commit on.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};

mod checkpoint;

pub use checkpoint::Checkpointing;

use super::files::{self, LockError, LockFile};
use super::{Durability, Named, Op, OpenError, Store, StoreError};

/// The writer's page cache, KiB: the hot part of the logs and indexes. Not more: a page split
/// of these WITHOUT ROWID tables parks a page at the lock-byte page's number (262,145) for a
/// moment, and the commit then walks the whole cache to drop pages past the file's end, a walk
/// as long as the cache. At 32 MiB that walk was 2.5 % of an `initialize` storm's CPU; at 4 MiB
/// `initialize` ran about 7.6 % faster (medians 26,716 -> 28,736 a second,
/// bench/peers/initialize-only.sh) and 256-event batches 4-7 % slower (430k -> 402-414k
/// events/s on tmpfs, ledger-bench), still four times the goal
/// (bench/results/issue23-2026-12-05-round10-writer-cache/).
const WRITER_CACHE_KIB: u32 = 4096;

/// Statements the writer's connection keeps prepared: more than it uses (about 30).
const WRITER_STATEMENTS: usize = 64;

/// A transaction on the writer's connection whose `BEGIN` and `COMMIT` are prepared once and
/// kept: rusqlite's `Connection::transaction` runs them through `execute_batch`, which parses
/// each anew on every batch (issue 23: kept, they saved 2,272 of an `initialize`'s 149,131
/// instructions in callgrind, `bench/results/issue23-2026-12-06-round17/`). Dropped without a
/// commit (an error, or a commit that failed), it rolls back. It borrows the connection
/// shared, so a second one begun inside it is refused by SQLite when it runs, not by the
/// compiler (the writer's lock is held for each).
struct WriteTx<'c> {
    conn: &'c Connection,
}

impl<'c> WriteTx<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<WriteTx<'c>> {
        conn.prepare_cached("BEGIN DEFERRED")?.execute([])?;
        Ok(WriteTx { conn })
    }

    fn commit(self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([]).map(drop)
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        // Still open: not committed, or its commit failed.
        if !self.conn.is_autocommit() {
            let _ = self.conn.prepare_cached("ROLLBACK").and_then(|mut s| s.execute([]));
        }
    }
}

/// SQLite's `PRAGMA application_id` of a ledger: "MCPH".
pub(crate) const APPLICATION_ID: u32 = 0x4D43_5048;
/// SQLite's `PRAGMA user_version` of a ledger: the schema version this release writes and
/// reads (`meta.schema` says it in words).
pub(crate) const SCHEMA_VERSION: u32 = 1;
/// The `meta.schema` value of this release's schema.
const SCHEMA_NAME: &str = "mcp-host-ledger.v1";

/// The schema. Records (`kv`) are a rowid table with its key's index: a new record's row goes
/// to the table's end by SQLite's quick path for appends, where in a table keyed by the key
/// itself (`WITHOUT ROWID`, the layout of ledgers made by earlier releases, which keep it) every
/// few inserts rebalanced three pages of whole records; about a twentieth of an `initialize`'s
/// CPU (issue 23). The statements are the same for both layouts: every release reads and
/// writes either.
const SCHEMA: &str = "
PRAGMA journal_mode = WAL;
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (k, v) VALUES ('schema', 'mcp-host-ledger.v1');
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, expires INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires);
CREATE TABLE IF NOT EXISTS logs (log TEXT PRIMARY KEY, newest INTEGER NOT NULL, expires INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS logs_expires ON logs (expires);
CREATE TABLE IF NOT EXISTS events (log TEXT NOT NULL, seq INTEGER NOT NULL, frame BLOB NOT NULL, PRIMARY KEY (log, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idx (name TEXT NOT NULL, member TEXT NOT NULL, score INTEGER NOT NULL, PRIMARY KEY (name, member)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_score ON idx (name, score, member);
CREATE TABLE IF NOT EXISTS indexes (name TEXT PRIMARY KEY, expires INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS indexes_expires ON indexes (expires);
CREATE TABLE IF NOT EXISTS tallies (name TEXT NOT NULL, bucket INTEGER NOT NULL, count INTEGER NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY (name, bucket)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tallies_bucket ON tallies (bucket);
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
    /// Declared first, so stopped before the connections close (the last of them to close
    /// checkpoints what is left).
    checkpointer: checkpoint::Checkpointer,
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    /// Held as long as the connections (declared after them, so dropped after them): one
    /// process per ledger.
    _lock: LockFile,
}

fn open_conn(path: &Path) -> Result<Connection, StoreError> {
    let c = Connection::open(path).map_err(backend)?;
    // Short: a lock held longer is a stuck process, not contention (there is one writer
    // connection per ledger); the writer retries a failed batch itself.
    c.busy_timeout(std::time::Duration::from_secs(1)).map_err(backend)?;
    Ok(c)
}

/// What the file at a ledger path is, found before anything is written to it.
#[derive(Debug, PartialEq, Eq)]
enum Found {
    /// No file, or an empty one: a new ledger (created owner-only if missing).
    New,
    /// A ledger of this schema.
    Ledger,
    /// A ledger of the release before application ids (id 0, our `meta` table): it gets ours.
    Unmarked,
}

/// The first 100 bytes of an SQLite file hold its header; these are in it.
const HEADER_LEN: usize = 100;
const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Look at `path` without writing anything to it, creating it (empty, mode 0600) when missing.
fn inspect(path: &Path) -> Result<Found, OpenError> {
    let name = || path.display().to_string();
    let foreign = |reason: String| OpenError::NotALedger { path: name(), reason };
    let mut header = Vec::with_capacity(HEADER_LEN);
    match std::fs::File::open(path) {
        Ok(f) => {
            use std::io::Read as _;
            f.take(HEADER_LEN as u64)
                .read_to_end(&mut header)
                .map_err(|source| OpenError::File { path: name(), source })?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match files::create_private(path) {
                // Created by someone else meanwhile (not a host: we hold the lock): look again.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => inspect(path),
                r => {
                    r.map(|_| Found::New).map_err(|source| OpenError::File { path: name(), source })
                }
            };
        }
        Err(source) => return Err(OpenError::File { path: name(), source }),
    }
    if header.is_empty() {
        return Ok(Found::New);
    }
    if header.len() < HEADER_LEN || &header[..16] != MAGIC {
        return Err(foreign("not an SQLite database".into()));
    }
    let be = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let (user_version, application_id) = (be(60), be(68));
    if application_id == APPLICATION_ID {
        return if user_version > SCHEMA_VERSION {
            Err(OpenError::Newer { path: name(), found: format!("version {user_version}") })
        } else {
            Ok(Found::Ledger)
        };
    }
    if application_id != 0 {
        return Err(foreign(format!(
            "an SQLite database of application id {application_id:#010x}, not mcp-host's {APPLICATION_ID:#010x}"
        )));
    }
    // SQLite's default id: another application's database, or a ledger of the release before
    // ids (or one whose id waits in its WAL). Read-only, which changes neither the file nor
    // its journal mode; and without a WAL beside it, immutable too: a read-only open of a
    // WAL-mode file would still create an empty `-wal` and a `-shm` beside it.
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
        | rusqlite::OpenFlags::SQLITE_OPEN_URI;
    let wal = std::fs::symlink_metadata(files::beside(path, "-wal")).is_ok();
    let uri = format!("file:{}{}", uri_path(path), if wal { "" } else { "?immutable=1" });
    let ro = Connection::open_with_flags(uri, flags).map_err(|e| foreign(e.to_string()))?;
    let has_meta: bool = ro
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| foreign(e.to_string()))?;
    if !has_meta {
        return Err(foreign("an SQLite database without the ledger's meta table".into()));
    }
    let schema: Option<String> = ro
        .query_row("SELECT v FROM meta WHERE k = 'schema'", [], |r| r.get(0))
        .optional()
        .map_err(|e| foreign(e.to_string()))?;
    match schema.as_deref() {
        Some(SCHEMA_NAME) => Ok(Found::Unmarked),
        Some(s) if s.starts_with("mcp-host-ledger.") => {
            Err(OpenError::Newer { path: name(), found: s.to_owned() })
        }
        other => Err(foreign(format!("its meta table names schema {other:?}, not {SCHEMA_NAME}"))),
    }
}

/// `path` as the path of an SQLite `file:` URI: every byte but unreserved ones and `/`
/// percent-encoded.
fn uri_path(path: &Path) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for &b in std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()) {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

impl SqliteStore {
    /// Open (creating if needed) the ledger at `path`; see the module doc for what is checked
    /// first.
    ///
    /// # Errors
    /// [`OpenError::Locked`] when another process (or another open store in this one) holds
    /// the ledger; [`OpenError::NotALedger`] and [`OpenError::Newer`] for a file that is not
    /// this release's ledger (left untouched); [`OpenError::File`] and [`OpenError::Store`]
    /// when a file cannot be created or read.
    pub fn open(path: &Path) -> Result<SqliteStore, OpenError> {
        SqliteStore::open_with(path, Checkpointing::default())
    }

    /// [`SqliteStore::open`], its log checkpointed as `checkpointing` says.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub fn open_with(path: &Path, checkpointing: Checkpointing) -> Result<SqliteStore, OpenError> {
        SqliteStore::open_inner(path, checkpointing, true)
    }

    /// Without `with_thread`, only the writer's own checkpoints of a log past its bound.
    fn open_inner(
        path: &Path,
        checkpointing: Checkpointing,
        with_thread: bool,
    ) -> Result<SqliteStore, OpenError> {
        let name = || path.display().to_string();
        let store_err = |source| OpenError::Store { path: name(), source };
        let lock_path = files::beside(path, ".lock");
        let lock = LockFile::acquire(&lock_path).map_err(|e| match e {
            LockError::Held { holder_pid } => OpenError::Locked { path: name(), holder_pid },
            LockError::Io(source) => {
                OpenError::File { path: lock_path.display().to_string(), source }
            }
        })?;
        let found = inspect(path)?;
        let mut writer = open_conn(path).map_err(store_err)?;
        if found == Found::New {
            // In rollback mode, before WAL: committed to the main file at once.
            writer.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};")).map_err(|e| store_err(backend(e)))?;
        }
        writer.execute_batch(SCHEMA).map_err(|e| store_err(backend(e)))?;
        if found == Found::Unmarked {
            writer.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};")).map_err(|e| store_err(backend(e)))?;
            tracing::info!(path = %path.display(), "marked the ledger with mcp-host's application id");
        }
        writer
            .execute_batch(&format!("PRAGMA cache_size = -{WRITER_CACHE_KIB};"))
            .map_err(|e| store_err(backend(e)))?;
        // Every statement the writer runs stays prepared (rusqlite keeps 16 by default; the
        // writer's batches, sweeps and counters use more, and one evicted is parsed again).
        writer.set_prepared_statement_cache_capacity(WRITER_STATEMENTS);
        let schema: String = writer
            .query_row("SELECT v FROM meta WHERE k = 'schema'", [], |r| r.get(0))
            .map_err(|e| store_err(backend(e)))?;
        if schema != SCHEMA_NAME {
            return Err(OpenError::Newer { path: name(), found: schema });
        }
        if let Ok((mode, true)) = std::fs::File::open(path).and_then(|f| files::mode_of(&f)) {
            tracing::warn!(path = %path.display(), mode = format!("{mode:o}"), "the ledger is readable by others than its owner, and so are its -wal and -shm (chmod 600 all three)");
        }
        let readers = (0..READERS)
            .map(|_| open_conn(path).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(store_err)?;
        let thread_conn =
            if with_thread { Some(open_conn(path).map_err(store_err)?) } else { None };
        let checkpointer = checkpoint::Checkpointer::start(&mut writer, thread_conn, checkpointing)
            .map_err(store_err)?;
        Ok(SqliteStore {
            checkpointer,
            writer: Mutex::new(writer),
            readers,
            next_reader: AtomicUsize::new(0),
            _lock: lock,
        })
    }

    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T, StoreError> {
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let conn = (0..READERS)
            .find_map(|i| self.readers[(start + i) % READERS].try_lock())
            .unwrap_or_else(|| self.readers[start % READERS].lock());
        f(&conn).map_err(backend)
    }
}

/// A kind's name, for the debug check of [`Op::Expire`].
fn named(of: Named) -> &'static str {
    match of {
        Named::Key => "key",
        Named::Log => "log",
        Named::Index => "index",
    }
}

fn apply_one(tx: &WriteTx<'_>, op: &Op) -> rusqlite::Result<()> {
    match op {
        Op::Put { key, value, expires_ms } => {
            tx.prepare_cached("INSERT INTO kv (key, value, expires) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires")?
                .execute(params![key, &value[..], ms(*expires_ms)])?;
        }
        Op::PutLater { key, value, expires_ms } => {
            tx.prepare_cached("INSERT INTO kv (key, value, expires) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires WHERE kv.expires <= excluded.expires")?
                .execute(params![key, &value[..], ms(*expires_ms)])?;
        }
        // One process: nobody else to tell.
        Op::Publish { .. } => {}
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
            tx.prepare_cached("INSERT OR IGNORE INTO indexes (name, expires) VALUES (?1, ?2)")?
                .execute(params![index, ms(*expires_ms)])?;
        }
        // One statement, in the table of the kind named.
        Op::Expire { name, of, expires_ms } => {
            let sql = match of {
                Named::Key => "UPDATE kv SET expires = ?2 WHERE key = ?1 AND expires < ?2",
                Named::Log => "UPDATE logs SET expires = ?2 WHERE log = ?1 AND expires < ?2",
                Named::Index => "UPDATE indexes SET expires = ?2 WHERE name = ?1 AND expires < ?2",
            };
            let changed = tx.prepare_cached(sql)?.execute(params![name, ms(*expires_ms)])?;
            if cfg!(debug_assertions) && changed == 0 {
                let elsewhere: bool = tx.query_row(
                    "SELECT (?2 <> 'key' AND EXISTS (SELECT 1 FROM kv WHERE key = ?1))
                         OR (?2 <> 'log' AND EXISTS (SELECT 1 FROM logs WHERE log = ?1))
                         OR (?2 <> 'index' AND EXISTS (SELECT 1 FROM indexes WHERE name = ?1))",
                    params![name, named(*of)],
                    |r| r.get(0),
                )?;
                debug_assert!(!elsewhere, "an expiry of {name} names it a {of:?}, which it is not");
            }
        }
        Op::IndexRemove { index, member } => {
            tx.prepare_cached("DELETE FROM idx WHERE name = ?1 AND member = ?2")?
                .execute(params![index, member])?;
        }
        Op::IndexTrim { index, below } => {
            tx.prepare_cached("DELETE FROM idx WHERE name = ?1 AND score < ?2")?
                .execute(params![index, ms(*below)])?;
        }
        Op::DropIndex { index } => {
            tx.prepare_cached("DELETE FROM idx WHERE name = ?1")?.execute(params![index])?;
            tx.prepare_cached("DELETE FROM indexes WHERE name = ?1")?.execute(params![index])?;
        }
        Op::Tally { tally, bucket, count, bytes, now_ms } => {
            tx.prepare_cached("INSERT INTO tallies (name, bucket, count, bytes) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (name, bucket) DO UPDATE SET count = count + excluded.count, bytes = bytes + excluded.bytes")?
                .execute(params![tally, ms(*bucket), count, bytes])?;
            tx.prepare_cached("DELETE FROM tallies WHERE name = ?1 AND (bucket <= ?2 OR (count <= 0 AND bytes <= 0))")?
                .execute(params![tally, ms(*now_ms)])?;
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
fn write_tails(tx: &WriteTx<'_>, logs: &mut HashMap<Arc<str>, LogTail>) -> rusqlite::Result<()> {
    for (log, t) in logs.drain() {
        if t.row_stale {
            tx.prepare_cached(
                "UPDATE logs SET newest = ?2, expires = max(expires, ?3) WHERE log = ?1",
            )?
            .execute(params![&*log, t.newest, t.expires])?;
        }
        if t.trim && t.newest > t.keep {
            tx.prepare_cached("DELETE FROM events WHERE log = ?1 AND seq <= ?2")?
                .execute(params![&*log, t.newest - t.keep])?;
        }
    }
    Ok(())
}

impl Store for SqliteStore {
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        let conn = self.writer.lock();
        let tx = WriteTx::begin(&conn).map_err(backend)?;
        // Appends are folded per log: each event is one insert, and each log's row and trim
        // are written once per batch (before anything else that touches logs, and at the end).
        let mut logs: HashMap<Arc<str>, LogTail> = HashMap::new();
        for op in ops {
            match op {
                Op::Append { log, seq, frame, max_len, expires_ms } => {
                    let (seq, expires, keep) = (
                        ms(*seq),
                        ms(*expires_ms),
                        i64::try_from((*max_len).max(1)).unwrap_or(i64::MAX),
                    );
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
                                tx.prepare_cached("SELECT newest FROM logs WHERE log = ?1")
                                    .and_then(|mut st| {
                                        st.query_row(params![&**log], |r| r.get::<_, i64>(0))
                                    })
                                    .map_err(backend)?
                            };
                            if advanced {
                                tx.prepare_cached(
                                    "INSERT INTO events (log, seq, frame) VALUES (?1, ?2, ?3)",
                                )
                                .and_then(|mut st| st.execute(params![&**log, seq, &frame[..]]))
                                .map_err(backend)?;
                            }
                            e.insert(LogTail {
                                newest,
                                expires,
                                keep,
                                row_stale: false,
                                trim: advanced,
                            });
                            continue;
                        }
                    };
                    // Sequence numbers of a log only grow: a replayed append is ignored.
                    if seq > tail.newest {
                        tx.prepare_cached(
                            "INSERT INTO events (log, seq, frame) VALUES (?1, ?2, ?3)",
                        )
                        .and_then(|mut st| st.execute(params![&**log, seq, &frame[..]]))
                        .map_err(backend)?;
                        *tail = LogTail {
                            newest: seq,
                            expires: tail.expires.max(expires),
                            keep,
                            row_stale: true,
                            trim: true,
                        };
                    }
                }
                // A log's row is written before it is dropped or its expiry pushed.
                Op::DropLog { .. } | Op::Expire { of: Named::Log, .. } => {
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
            let live: Option<i64> = c
                .prepare_cached("SELECT newest FROM logs WHERE log = ?1 AND expires > ?2")?
                .query_row(params![log, ms(now_ms)], |r| r.get(0))
                .optional()?;
            if live.is_none() {
                return Ok(Vec::new());
            }
            let mut s =
                c.prepare_cached("SELECT seq, frame FROM events WHERE log = ?1 ORDER BY seq")?;
            let rows = s.query_map(params![log], |r| {
                Ok((r.get::<_, i64>(0)? as u64, Bytes::from(r.get::<_, Vec<u8>>(1)?)))
            })?;
            rows.collect()
        })
    }

    fn index_lowest(
        &self,
        index: &str,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|c| {
            let live: Option<i64> = c
                .prepare_cached("SELECT expires FROM indexes WHERE name = ?1 AND expires > ?2")?
                .query_row(params![index, ms(now_ms)], |r| r.get(0))
                .optional()?;
            if live.is_none() {
                return Ok(Vec::new());
            }
            let mut s = c.prepare_cached(
                "SELECT member, score FROM idx WHERE name = ?1 ORDER BY score, member LIMIT ?2",
            )?;
            let rows = s
                .query_map(params![index, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
                })?;
            rows.collect()
        })
    }

    fn index_page(
        &self,
        index: &str,
        after: Option<(u64, &str)>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|c| {
            let live: Option<i64> = c.prepare_cached("SELECT expires FROM indexes WHERE name = ?1 AND expires > ?2")?.query_row(params![index, ms(now_ms)], |r| r.get(0)).optional()?;
            if live.is_none() {
                return Ok(Vec::new());
            }
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let row = |r: &rusqlite::Row<'_>| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64));
            match after {
                None => c.prepare_cached("SELECT member, score FROM idx WHERE name = ?1 ORDER BY score, member LIMIT ?2")?.query_map(params![index, limit], row)?.collect(),
                Some((score, member)) => c
                    .prepare_cached("SELECT member, score FROM idx WHERE name = ?1 AND (score > ?2 OR (score = ?2 AND member > ?3)) ORDER BY score, member LIMIT ?4")?
                    .query_map(params![index, ms(score), member, limit], row)?
                    .collect(),
            }
        })
    }

    fn index_len(&self, index: &str, now_ms: u64) -> Result<usize, StoreError> {
        self.read(|c| {
            let live: Option<i64> = c
                .prepare_cached("SELECT expires FROM indexes WHERE name = ?1 AND expires > ?2")?
                .query_row(params![index, ms(now_ms)], |r| r.get(0))
                .optional()?;
            if live.is_none() {
                return Ok(0);
            }
            c.prepare_cached("SELECT count(*) FROM idx WHERE name = ?1")?
                .query_row(params![index], |r| r.get::<_, i64>(0))
                .map(|n| n as usize)
        })
    }

    fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let conn = self.writer.lock();
        let tx = WriteTx::begin(&conn).map_err(backend)?;
        let (now, limit) = (ms(now_ms), i64::try_from(limit).unwrap_or(i64::MAX));
        let keys = tx
            .execute(
                "DELETE FROM kv WHERE key IN (SELECT key FROM kv WHERE expires <= ?1 LIMIT ?2)",
                params![now, limit],
            )
            .map_err(backend)?;
        // What is left of the limit after `done` removals.
        let expired = |sql: &str, done: usize| -> Result<Vec<String>, StoreError> {
            let mut s = tx.prepare(sql).map_err(backend)?;
            let names = s
                .query_map(params![now, limit, i64::try_from(done).unwrap_or(i64::MAX)], |r| {
                    r.get::<_, String>(0)
                })
                .map_err(backend)?;
            names.collect::<Result<_, _>>().map_err(backend)
        };
        let logs = expired("SELECT log FROM logs WHERE expires <= ?1 LIMIT ?2 - ?3", keys)?;
        for log in &logs {
            apply_one(&tx, &Op::DropLog { log: log.clone() }).map_err(backend)?;
        }
        let indexes = expired(
            "SELECT name FROM indexes WHERE expires <= ?1 LIMIT ?2 - ?3",
            keys + logs.len(),
        )?;
        for index in &indexes {
            apply_one(&tx, &Op::DropIndex { index: index.clone() }).map_err(backend)?;
        }
        let left = limit
            .saturating_sub(i64::try_from(keys + logs.len() + indexes.len()).unwrap_or(i64::MAX));
        let buckets = tx
            .execute(
                "DELETE FROM tallies WHERE (name, bucket) IN (SELECT name, bucket FROM tallies WHERE bucket <= ?1 LIMIT ?2)",
                params![now, left],
            )
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(keys + logs.len() + indexes.len() + buckets)
    }

    fn tally(&self, tally: &str, now_ms: u64) -> Result<(u64, u64), StoreError> {
        self.read(|c| {
            let mut st = c.prepare_cached(
                "SELECT bucket, count, bytes FROM tallies WHERE name = ?1 AND bucket > ?2",
            )?;
            let rows = st.query_map(params![tally, ms(now_ms)], |r| {
                Ok((r.get::<_, i64>(0)?.max(0).unsigned_abs(), r.get(1)?, r.get(2)?))
            })?;
            let rows = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(super::tally_sum(rows.into_iter(), now_ms))
        })
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

    fn log_health(&self) -> Option<super::LogHealth> {
        Some(self.checkpointer.health())
    }

    fn release_memory(&self) {
        // `try_lock`: a connection in use (a batch, a read) is left to the next call.
        for conn in std::iter::once(&self.writer).chain(&self.readers) {
            if let Some(c) = conn.try_lock()
                && let Err(e) = c.execute_batch("PRAGMA shrink_memory;")
            {
                tracing::debug!(error = %e, "ledger: the page cache was not released");
            }
        }
    }

    fn incr(&self, key: &str, floor: u64, expires_ms: u64, now_ms: u64) -> Result<u64, StoreError> {
        // On the writer's connection, in a transaction of its own (waits for a batch).
        let conn = self.writer.lock();
        let tx = WriteTx::begin(&conn).map_err(backend)?;
        let found: Option<(Vec<u8>, i64)> = tx
            .prepare_cached("SELECT value, expires FROM kv WHERE key = ?1 AND expires > ?2")
            .and_then(|mut q| {
                q.query_row(params![key, ms(now_ms)], |r| Ok((r.get(0)?, r.get(1)?))).optional()
            })
            .map_err(backend)?;
        let (current, expires) = match found {
            Some((v, exp)) => (super::counter_value(&v), exp),
            None => (0, ms(expires_ms)),
        };
        let next = current.max(floor).saturating_add(1);
        tx.prepare_cached("INSERT INTO kv (key, value, expires) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires")
            .and_then(|mut q| q.execute(params![key, next.to_string().as_bytes(), expires]))
            .map_err(backend)?;
        tx.commit().map_err(backend)?;
        Ok(next)
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
    fn a_ledger_whose_records_table_has_the_earlier_layout_keeps_the_store_contract() {
        let dir = mcp_devtools::TempDir::new("layout");
        let path = dir.path().join("l.db");
        {
            let earlier = SCHEMA.replace(
                "expires INTEGER NOT NULL);\nCREATE INDEX IF NOT EXISTS kv_expires",
                "expires INTEGER NOT NULL) WITHOUT ROWID;\nCREATE INDEX IF NOT EXISTS kv_expires",
            );
            assert_ne!(earlier, SCHEMA, "the records table's definition is found");
            Connection::open(&path).unwrap().execute_batch(&earlier).unwrap();
        }
        let layout = |path: &Path| -> String {
            Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap()
                .query_row("SELECT sql FROM sqlite_master WHERE name = 'kv'", [], |r| r.get(0))
                .unwrap()
        };
        super::super::store_tests::contract(&SqliteStore::open(&path).unwrap());
        assert!(layout(&path).ends_with("WITHOUT ROWID"), "an existing file keeps its layout");
        let new = dir.path().join("new.db");
        drop(SqliteStore::open(&new).unwrap());
        assert!(!layout(&new).contains("WITHOUT ROWID"), "a new one is a rowid table");
    }

    #[test]
    fn a_write_transaction_dropped_uncommitted_rolls_back_and_a_committed_one_stays() {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let count = |c: &Connection| -> i64 {
            c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap()
        };
        for round in 0..3 {
            {
                let tx = WriteTx::begin(&c).unwrap();
                tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
                assert!(!c.is_autocommit(), "in its transaction");
            }
            assert!(c.is_autocommit(), "rolled back, nothing left open (round {round})");
            assert_eq!(count(&c), round, "the dropped insert is gone");
            let tx = WriteTx::begin(&c).unwrap();
            tx.execute("INSERT INTO t VALUES (2)", []).unwrap();
            tx.commit().unwrap();
            assert!(c.is_autocommit());
            assert_eq!(count(&c), round + 1, "the committed insert stays");
        }
        // A second BEGIN inside it is refused (and ends nothing): the first still rolls back.
        let tx = WriteTx::begin(&c).unwrap();
        assert!(WriteTx::begin(&c).is_err(), "no transaction inside another");
        drop(tx);
        assert!(c.is_autocommit());
        // A COMMIT that fails (a deferred constraint broken) leaves SQLite's transaction open;
        // the commit's own drop rolls it back, and the next one begins.
        c.execute_batch(
            "PRAGMA foreign_keys = ON; CREATE TABLE p (id INTEGER PRIMARY KEY);
             CREATE TABLE ch (p INTEGER REFERENCES p (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
        let tx = WriteTx::begin(&c).unwrap();
        tx.execute("INSERT INTO ch VALUES (7)", []).unwrap();
        tx.execute("INSERT INTO t VALUES (3)", []).unwrap();
        assert!(tx.commit().is_err(), "the commit fails");
        assert!(c.is_autocommit(), "rolled back as the failed commit dropped it");
        assert_eq!(count(&c), 3, "the failed transaction's insert is gone");
        let none: i64 = c.query_row("SELECT count(*) FROM ch", [], |r| r.get(0)).unwrap();
        assert_eq!(none, 0);
        WriteTx::begin(&c).unwrap().commit().unwrap();
    }

    #[test]
    fn what_was_committed_is_there_after_reopening() {
        let dir = mcp_devtools::TempDir::new("reopen");
        let path = dir.path().join("l.db");
        {
            let s = SqliteStore::open(&path).unwrap();
            s.apply(&[Op::Put {
                key: "k".into(),
                value: Bytes::from_static(b"v"),
                expires_ms: 100,
            }])
            .unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.get("k", 1).unwrap().as_deref(), Some(&b"v"[..]));
    }

    /// What the release frees is measured in the bench (RSS per idle session,
    /// `bench/results/issue23-2026-12-04-sqlite-release/`: SQLite's cache use is not readable
    /// without `unsafe`); here, that it never waits and loses nothing.
    #[test]
    fn giving_back_the_page_caches_skips_a_connection_in_use_and_loses_nothing() {
        let dir = mcp_devtools::TempDir::new("release");
        let s = Arc::new(SqliteStore::open(&dir.path().join("l.db")).unwrap());
        let put =
            |k: &str| Op::Put { key: k.into(), value: Bytes::from_static(b"v"), expires_ms: 100 };
        s.apply(&[put("a")]).unwrap();
        // The writer's connection is in use (held here): the release goes past it at once.
        let held = s.writer.lock();
        let (done_tx, done) = std::sync::mpsc::channel();
        let other = Arc::clone(&s);
        let t = std::thread::spawn(move || {
            other.release_memory();
            done_tx.send(()).unwrap();
        });
        let waited = done.recv_timeout(std::time::Duration::from_secs(10));
        drop(held);
        t.join().unwrap();
        assert!(waited.is_ok(), "the release waited for a connection in use");
        // Idle ones are released; what they cached is read again from the file.
        s.release_memory();
        assert_eq!(s.get("a", 1).unwrap().as_deref(), Some(&b"v"[..]));
        s.apply(&[put("b")]).unwrap();
        assert_eq!(s.get("b", 1).unwrap().as_deref(), Some(&b"v"[..]));
    }

    /// A ledger `name/l.db` (its directory kept with it) checkpointed at `pages` pages or after
    /// `every_ms`; without `with_thread`, only the writer checkpoints.
    fn ledger(
        name: &str,
        pages: u32,
        every_ms: u64,
        with_thread: bool,
    ) -> (mcp_devtools::TempDir, std::path::PathBuf, SqliteStore) {
        let dir = mcp_devtools::TempDir::new(name);
        let path = dir.path().join("l.db");
        let every = std::time::Duration::from_millis(every_ms);
        let s =
            SqliteStore::open_inner(&path, Checkpointing { pages, every }, with_thread).unwrap();
        (dir, path, s)
    }

    /// Commit `batches` batches of one 8 KiB value each (about five log frames a batch, more
    /// when a page splits), the first one holding `marker`.
    fn write_pages(s: &SqliteStore, marker: &str, batches: usize) {
        for i in 0..batches {
            let mut value = if i == 0 { marker.as_bytes().to_vec() } else { Vec::new() };
            value.resize(8192, b'.');
            s.apply(&[Op::Put {
                key: format!("k{i}"),
                value: Bytes::from(value),
                expires_ms: 1 << 40,
            }])
            .unwrap();
        }
    }

    /// Whether the ledger's main file (not its log) holds `marker` within 10 s. Polled on the
    /// wall clock: the checkpointer is a real thread, with nothing to wait on from here.
    fn main_file_gets(path: &Path, marker: &str) -> bool {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let main = std::fs::read(path).unwrap();
            if main.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn a_log_of_checkpoint_pages_is_copied_into_the_main_file_by_the_checkpointer() {
        let (_dir, path, s) = ledger("ckpt-pages", 64, 3_600_000, true);
        // About 150 frames: past 64, far below SQLite's own 1,000.
        write_pages(&s, "first-of-a-full-log", 30);
        assert!(main_file_gets(&path, "first-of-a-full-log"), "not checkpointed");
        // The metrics' view: the log holds pages, no checkpoint failed.
        let log = s.log_health().unwrap();
        assert!(log.pages > 0 && log.checkpoint_failures == 0, "{log:?}");
    }

    #[test]
    fn a_quiet_log_is_copied_into_the_main_file_after_checkpoint_every() {
        let (_dir, path, s) = ledger("ckpt-every", 1 << 20, 50, true);
        write_pages(&s, "one-quiet-commit", 1);
        assert!(main_file_gets(&path, "one-quiet-commit"), "not checkpointed");
    }

    #[test]
    fn a_checkpoint_a_reader_held_back_is_tried_again() {
        let (_dir, path, s) = ledger("ckpt-reader", 1 << 20, 50, true);
        // A read begun before the commit keeps its frames from being copied...
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM kv;").unwrap();
        write_pages(&s, "held-back-by-a-reader", 1);
        // ...through several checkpoints (one each 50 ms)...
        std::thread::sleep(std::time::Duration::from_millis(300));
        let main = std::fs::read(&path).unwrap();
        assert!(!main.windows(21).any(|w| w == b"held-back-by-a-reader"));
        // ...and once it ends, with no commit since, the next one copies them.
        reader.execute_batch("COMMIT;").unwrap();
        assert!(main_file_gets(&path, "held-back-by-a-reader"), "never tried again");
    }

    #[test]
    fn the_writer_copies_what_the_checkpointer_left_of_a_full_log_so_the_next_commit_restarts_it() {
        // No thread: the test runs its checkpoint in its place, at a chosen moment. 256 pages:
        // the writer copies a tail of 64 frames or fewer, and its own bound is 1,024.
        let (_dir, path, s) = ledger("ckpt-finish", 256, 3_600_000, false);
        write_pages(&s, "full", 60);
        // The thread copies while commits go on (here: a reader's snapshot keeps it from the
        // last two batches, as a commit during its copy would).
        let reader = Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN; SELECT count(*) FROM kv;").unwrap();
        write_pages(&s, "during", 2);
        let full = s.log_health().unwrap().pages;
        assert!(full >= 256, "{full} pages");
        assert!(!s.checkpointer.checkpoint_as_the_thread(&Connection::open(&path).unwrap()));
        reader.execute_batch("COMMIT;").unwrap();
        // The next commit leaves a full log with a short tail the thread did not copy: the
        // writer copies it, so the commit after starts the log again.
        write_pages(&s, "tail", 1);
        write_pages(&s, "restarted", 1);
        let now = s.log_health().unwrap().pages;
        assert!(now < 32, "the log did not restart: {full} pages, then {now}");
    }

    #[test]
    fn a_checkpoint_of_the_log_before_a_restart_does_not_pass_for_one_of_the_next_log() {
        // No thread, as above: 256 pages, a tail of 64 frames or fewer for the writer.
        let (_dir, path, s) = ledger("ckpt-stale", 256, 3_600_000, false);
        let pages = || s.log_health().unwrap().pages;
        // A log short of full but well past 256 − 64, wholly copied by the "thread": its record
        // says that many frames copied...
        let mut i = 0;
        while pages() < 224 {
            write_pages(&s, &format!("old{i}"), 1);
            i += 1;
            assert!(i < 10_000, "the log never filled: {} pages", pages());
        }
        let old = pages();
        assert!(old < 256, "{old} pages");
        assert!(s.checkpointer.checkpoint_as_the_thread(&Connection::open(&path).unwrap()));
        // ...then the log restarts, and the next one fills with nothing copied of it.
        write_pages(&s, "new", 1);
        assert!(pages() < old, "the log did not restart: {} pages", pages());
        let mut writes = 0;
        while pages() < 256 {
            write_pages(&s, "new", 1);
            writes += 1;
            assert!(writes < 10_000, "the log never filled: {} pages", pages());
        }
        // The record of the old log would make this one's uncopied part look like a short
        // tail: the writer would copy the whole log, and the next commit restart it.
        write_pages(&s, "next", 1);
        let now = pages();
        assert!(now >= 256, "the writer took the old log's record for this one's: {now} pages");
    }

    #[test]
    fn without_its_checkpointer_the_writer_copies_a_log_of_four_times_checkpoint_pages() {
        let (_dir, path, s) = ledger("ckpt-hard", 64, 3_600_000, false);
        // About 2,000 frames (SQLite's own checkpoints would have let the log reach 1,000):
        // the log restarts once past 256, so it never holds them all.
        write_pages(&s, "first-of-a-long-log", 400);
        assert!(main_file_gets(&path, "first-of-a-long-log"), "not checkpointed");
        let wal = std::fs::metadata(files::beside(&path, "-wal")).unwrap().len();
        // 4 × 64 frames, then the batch that passed them (a page split makes it 13 at most
        // here), each frame a 4 KiB page and its 24-byte header, after the log's header.
        assert!(wal <= (4 * 64 + 13) * (4096 + 24) + 32, "the log grew to {wal} bytes");
    }

    #[test]
    fn a_file_whose_meta_table_names_another_schema_is_refused() {
        let dir = mcp_devtools::TempDir::new("foreign");
        let path = dir.path().join("l.db");
        Connection::open(&path).unwrap().execute_batch("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT); INSERT INTO meta VALUES ('schema', 'other.v9');").unwrap();
        assert!(
            matches!(SqliteStore::open(&path), Err(OpenError::NotALedger { reason, .. }) if reason.contains("other.v9"))
        );
    }

    /// The files in `dir`, and their contents, but the lock file (a refused open may create
    /// that one: it is ours, beside the file, and holds no data).
    fn contents(dir: &Path) -> Vec<(String, String)> {
        use sha2::Digest as _;
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !p.to_string_lossy().ends_with(".lock"))
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    super::super::codec::hex(&sha2::Sha256::digest(std::fs::read(&p).unwrap())),
                )
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_foreign_file_is_refused_and_left_byte_for_byte_untouched() {
        type Make = fn(&Path);
        let cases: [(&str, Make, &str); 6] = [
            (
                "plain sqlite, no meta table",
                |p| {
                    Connection::open(p)
                        .unwrap()
                        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
                        .unwrap()
                },
                "meta table",
            ),
            (
                "sqlite in WAL mode, no meta table",
                |p| {
                    let c = Connection::open(p).unwrap();
                    c.execute_batch(
                        "PRAGMA journal_mode = WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1);",
                    )
                    .unwrap();
                },
                "meta table",
            ),
            (
                "another application id",
                |p| {
                    Connection::open(p)
                        .unwrap()
                        .execute_batch("PRAGMA application_id = 7; CREATE TABLE meta (k, v);")
                        .unwrap()
                },
                "application id 0x00000007",
            ),
            (
                "random bytes",
                |p| {
                    std::fs::write(
                        p,
                        (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect::<Vec<_>>(),
                    )
                    .unwrap()
                },
                "not an SQLite database",
            ),
            (
                "a short text file",
                |p| std::fs::write(p, "hello\n").unwrap(),
                "not an SQLite database",
            ),
            (
                "another application's meta table",
                |p| {
                    Connection::open(p)
                        .unwrap()
                        .execute_batch("CREATE TABLE meta (k TEXT, v TEXT);")
                        .unwrap()
                },
                "None",
            ),
        ];
        for (what, make, reason) in cases {
            let dir = mcp_devtools::TempDir::new("foreign-file");
            // A name a URI must escape.
            let path = dir.path().join("l #1?%.db");
            make(&path);
            let before = contents(dir.path());
            match SqliteStore::open(&path) {
                Err(OpenError::NotALedger { reason: r, .. }) => {
                    assert!(r.contains(reason), "{what}: {r}")
                }
                other => panic!("{what}: expected NotALedger, got {other:?}"),
            }
            assert_eq!(
                contents(dir.path()),
                before,
                "{what}: the file (and what lies beside it) is untouched"
            );
        }
    }

    #[test]
    fn a_ledger_of_a_newer_schema_is_refused_and_left_untouched() {
        let dir = mcp_devtools::TempDir::new("newer");
        let path = dir.path().join("l.db");
        drop(SqliteStore::open(&path).unwrap());
        Connection::open(&path)
            .unwrap()
            .execute_batch(&format!("PRAGMA user_version = {};", SCHEMA_VERSION + 1))
            .unwrap();
        let before = contents(dir.path());
        assert!(matches!(SqliteStore::open(&path), Err(OpenError::Newer { .. })));
        assert_eq!(contents(dir.path()), before);
        // A ledger of the release before ids whose meta names a later schema.
        let dir = mcp_devtools::TempDir::new("newer-unmarked");
        let path = dir.path().join("l.db");
        Connection::open(&path).unwrap().execute_batch("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL); INSERT INTO meta VALUES ('schema', 'mcp-host-ledger.v2');").unwrap();
        assert!(
            matches!(SqliteStore::open(&path), Err(OpenError::Newer { found, .. }) if found == "mcp-host-ledger.v2")
        );
    }

    #[test]
    fn a_ledger_of_the_release_before_application_ids_opens_and_gets_ours() {
        let dir = mcp_devtools::TempDir::new("unmarked");
        let path = dir.path().join("l.db");
        {
            // What the previous release created: the same schema, application id 0.
            let c = Connection::open(&path).unwrap();
            c.execute_batch(SCHEMA).unwrap();
            c.execute("INSERT INTO kv (key, value, expires) VALUES ('k', x'76', 100)", []).unwrap();
        }
        let s = SqliteStore::open(&path).unwrap();
        assert_eq!(s.get("k", 1).unwrap().as_deref(), Some(&b"v"[..]));
        drop(s);
        let c =
            Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let ids: (u32, u32) = c.query_row("SELECT application_id, user_version FROM pragma_application_id, pragma_user_version", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        assert_eq!(ids, (APPLICATION_ID, SCHEMA_VERSION));
    }

    #[test]
    fn a_new_ledger_carries_its_ids_in_the_main_file_and_its_files_are_owner_only() {
        let dir = mcp_devtools::TempDir::new("private");
        let path = dir.path().join("l.db");
        let s = SqliteStore::open(&path).unwrap();
        s.apply(&[Op::Put { key: "k".into(), value: Bytes::from_static(b"v"), expires_ms: 100 }])
            .unwrap();
        for suffix in ["", "-wal", "-shm", ".lock"] {
            let p = files::beside(&path, suffix);
            let (mode, _) = files::mode_of(
                &std::fs::File::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
            )
            .unwrap();
            assert_eq!(mode, 0o600, "{}", p.display());
        }
        // Read as plain bytes while the store is open (its WAL not checkpointed yet).
        let header = std::fs::read(&path).unwrap();
        assert_eq!(
            (&header[60..64], &header[68..72]),
            (&SCHEMA_VERSION.to_be_bytes()[..], &APPLICATION_ID.to_be_bytes()[..])
        );
    }

    #[test]
    fn a_second_open_of_a_ledger_is_refused_naming_the_holders_pid() {
        let dir = mcp_devtools::TempDir::new("locked");
        let path = dir.path().join("l.db");
        let first = SqliteStore::open(&path).unwrap();
        match SqliteStore::open(&path) {
            Err(e @ OpenError::Locked { holder_pid: Some(pid), .. }) => {
                assert_eq!(pid, std::process::id());
                assert!(e.to_string().contains(&format!("pid {pid}")), "{e}");
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(first);
        assert!(SqliteStore::open(&path).is_ok(), "free once the first is closed");
    }
}
