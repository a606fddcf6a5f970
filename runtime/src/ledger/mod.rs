//! The durable ledger: sessions, streams with their events, and idempotency receipts.
//!
//! - [`codec`]: the versioned records and their codec (pure).
//! - [`Store`]: the one storage trait. Every operation is a plain key-value or log command
//!   (set with expiry, delete, expire, append to a log with a maximum length, a sorted
//!   index), so a Redis backend maps it one to one; nothing here is SQL or assumes a
//!   single process.
//! - [`MemoryStore`] (tests, throwaway runs) and [`SqliteStore`] (the default: rusqlite, WAL;
//!   one process per file, files owner-only, foreign files refused untouched), and
//!   `RedisStore` (feature `redis`: the ledger on a Redis server several hosts share).
//! - [`Writer`]: the ledger writer. The actors hand it the operations their state machines
//!   produced; it commits them in groups (one transaction per batch) on its own thread, off
//!   the request path, in the order they were handed over, so a crash loses at most a suffix
//!   of what was handed over: never a torn or duplicated record.
//!
//! Expiry is per key, per log and per index (Redis: `PEXPIREAT`), never per index member,
//! so a sweep (or Redis itself) removes whatever a session left behind, also when no process
//! was there to clean up after it.
//!
//! Reads (restoring a session after a restart or from parking, receipts, handles, tasks) run
//! on the runtime's blocking threads ([`Reads`]), never on an HTTP worker: a read that must
//! see everything handed over so far comes after a [`Writer::barrier`] (a parked session's
//! revive), or after the writes it must see were waited for (a handle's use holds its lock
//! until its commit).

pub mod codec;
pub mod faulty;
mod files;
pub(crate) mod lease;
mod memory;
mod open;
mod reads;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;
mod usage;
mod writer;

use std::sync::Arc;

use bytes::Bytes;

pub use memory::MemoryStore;
pub(crate) use open::derive_key;
pub use open::{LEASE_LOST_EXIT, Ledger, OpenError, load_or_create_key, redacted};
pub use reads::{READ_QUEUE, READ_THREADS, ReadError, Reads, ReadsSnapshot};
#[cfg(feature = "redis")]
pub use redis::{EXPIRY_GRACE_MS, LeaseError, RedisStore, Tls as RedisTls, redis_key};
#[cfg(feature = "sqlite")]
pub use sqlite::{Checkpointing, SqliteStore};
pub(crate) use usage::{Caller, Entry, Reservation, StoreUsage};
pub use writer::{
    Committed, Housekeeping, LedgerState, Unconfirmed, Writer, WriterSettings, WriterSnapshot,
    WriterStats,
};

/// One write. A batch of them is applied atomically ([`Store::apply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Set `key` to `value` until `expires_ms` (Redis: `SET key value PXAT expires_ms`).
    Put {
        /// Key.
        key: String,
        /// Encoded record.
        value: Bytes,
        /// Expiry, ms since the epoch.
        expires_ms: u64,
    },
    /// Set `key` to `value` until `expires_ms` unless it holds a live value that expires
    /// later: of two hosts' writes of one record (each expiring its last use plus a TTL), the
    /// later use wins whatever order they land in (Redis: checked in the batch's script).
    PutLater {
        /// Key.
        key: String,
        /// Encoded record.
        value: Bytes,
        /// Expiry, ms since the epoch.
        expires_ms: u64,
    },
    /// Tell the other hosts sharing the store `message` on `channel` once the batch commits
    /// (Redis: `PUBLISH` inside the batch's script); a store that only one process uses has
    /// nobody to tell and ignores it.
    Publish {
        /// Channel (a short name, under the store's prefix).
        channel: &'static str,
        /// What the subscribers get.
        message: Bytes,
    },
    /// Delete `key` (Redis: `DEL`).
    Delete {
        /// Key.
        key: String,
    },
    /// Append event `seq` to the log `log`, keeping its newest `max_len` events, and push the
    /// log's expiry to `expires_ms` (Redis: `XADD log MAXLEN max_len seq-0 f frame` and
    /// `PEXPIREAT`). Sequence numbers of one log only grow; an append at or below the newest
    /// is ignored (a replayed batch is never duplicated).
    Append {
        /// Log name (shared by every append of one stream).
        log: Arc<str>,
        /// Event sequence number.
        seq: u64,
        /// The encoded SSE frame.
        frame: Bytes,
        /// Most events kept.
        max_len: usize,
        /// Expiry of the whole log, ms since the epoch.
        expires_ms: u64,
    },
    /// Delete a whole log (Redis: `DEL`).
    DropLog {
        /// Log name.
        log: String,
    },
    /// Add or re-score `member` in the sorted index `index`; a new index expires at
    /// `expires_ms`, an existing one keeps its expiry (push it with [`Op::Expire`]) (Redis:
    /// `ZADD` and `PEXPIREAT ... NX`).
    IndexAdd {
        /// Index name.
        index: String,
        /// Member.
        member: String,
        /// Score (lowest first).
        score: u64,
        /// Expiry of the whole index, ms since the epoch.
        expires_ms: u64,
    },
    /// Push the expiry of the key, log or index named `name` to at least `expires_ms`;
    /// nothing when it does not exist (Redis: `PEXPIREAT name expires_ms GT`).
    Expire {
        /// Key, log or index name.
        name: String,
        /// Which of the three it is (SQLite keeps each in its own table, and looks in that
        /// one only; Redis has one name space).
        of: Named,
        /// New expiry, ms since the epoch.
        expires_ms: u64,
    },
    /// Remove `member` from `index` (Redis: `ZREM`).
    IndexRemove {
        /// Index name.
        index: String,
        /// Member.
        member: String,
    },
    /// Remove the members of `index` scored below `below` (Redis: `ZREMRANGEBYSCORE index
    /// -inf (below`).
    IndexTrim {
        /// Index name.
        index: String,
        /// Members scored lower than this go.
        below: u64,
    },
    /// Delete a whole index (Redis: `DEL`).
    DropIndex {
        /// Index name.
        index: String,
    },
    /// Add `count` entries and `bytes` (either may be negative: taken back) to the tally
    /// `tally` in the bucket ending at `bucket` (ms; what it counts is gone by then), and
    /// forget the tally's buckets that ended by `now_ms` (Redis: `HINCRBY` twice on a hash,
    /// its fields cleared when a bucket starts, its expiry pushed to its last bucket). Read
    /// with [`Store::tally`].
    Tally {
        /// Tally name.
        tally: String,
        /// When the bucket ends, ms since the epoch.
        bucket: u64,
        /// Entries added (negative: removed).
        count: i64,
        /// Bytes added (negative: removed).
        bytes: i64,
        /// The ledger's clock when the batch was made.
        now_ms: u64,
    },
}

impl Op {
    /// Bytes this operation holds (for the writer's queue bound).
    #[must_use]
    pub fn size(&self) -> usize {
        64 + match self {
            Op::Put { key, value, .. } | Op::PutLater { key, value, .. } => key.len() + value.len(),
            Op::Publish { channel, message } => channel.len() + message.len(),
            Op::Append { log, frame, .. } => log.len() + frame.len(),
            Op::Delete { key } => key.len(),
            Op::DropLog { log } => log.len(),
            Op::IndexAdd { index, member, .. } => index.len() + member.len(),
            Op::IndexRemove { index, member } => index.len() + member.len(),
            Op::DropIndex { index } | Op::IndexTrim { index, .. } => index.len(),
            Op::Expire { name, .. } => name.len(),
            Op::Tally { tally, .. } => tally.len() + 24,
        }
    }
}

/// What an [`Op::Expire`] names. SQLite and the memory store look the name up only among
/// that kind, so an expiry given the wrong kind pushes nothing there (Redis, with one name
/// space, would still push it); debug builds of both check that a name missed in its kind's
/// table is in no other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// A key ([`Op::Put`], [`Op::PutLater`], a [`Store::incr`] counter).
    Key,
    /// A log ([`Op::Append`]).
    Log,
    /// An index ([`Op::IndexAdd`]).
    Index,
}

/// How committed writes are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Commit within a few ms of the event reaching the wire; the database survives a
    /// process crash with every committed batch (SQLite `synchronous = NORMAL` in WAL mode).
    /// A crash (SIGKILL) loses at most the batch that was not committed yet; a power loss may
    /// also lose the batches since the last WAL checkpoint (normally within
    /// `ledger.checkpoint_every_ms` of a commit).
    #[default]
    Batched,
    /// An event is released to the wire only after its batch is committed with fsync
    /// (`synchronous = FULL`): whatever a client received survives even a power loss.
    Sync,
}

/// A store's write-ahead log (SQLite), as the metrics show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LogHealth {
    /// Pages in the log since it last restarted, copied ones included: what its file holds.
    pub pages: u64,
    /// Checkpoints that failed (the checkpointer's, and the writer's own past the bound).
    pub checkpoint_failures: u64,
}

/// The storage failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The backend reported an error (disk full, corrupt file, permissions...).
    #[error("ledger storage error: {0}")]
    Backend(String),
    /// A stored record could not be read.
    #[error(transparent)]
    Codec(#[from] codec::CodecError),
}

/// The storage of the ledger. Implementations are shared by every thread.
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Apply `ops` in order, all or none.
    ///
    /// # Errors
    /// [`StoreError::Backend`]; nothing was applied.
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError>;

    /// The value of `key`, unless absent or expired at `now_ms`.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn get(&self, key: &str, now_ms: u64) -> Result<Option<Bytes>, StoreError>;

    /// Every event of `log` (oldest first), unless the log expired at `now_ms`.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn read_log(&self, log: &str, now_ms: u64) -> Result<Vec<(u64, Bytes)>, StoreError>;

    /// The events of `log` after sequence number `after`, oldest first, at most `limit`, unless
    /// the log expired at `now_ms` (Redis: `XRANGE log (after+1)-0 + COUNT limit`). The
    /// default reads the whole log; a store several hosts share reads only what is asked.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn read_log_after(
        &self,
        log: &str,
        after: u64,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(u64, Bytes)>, StoreError> {
        let mut all = self.read_log(log, now_ms)?;
        all.retain(|(seq, _)| *seq > after);
        all.truncate(limit);
        Ok(all)
    }

    /// The `limit` lowest-scored members of `index`, lowest first, unless the index expired
    /// at `now_ms` (Redis: `ZRANGE ... WITHSCORES`).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn index_lowest(
        &self,
        index: &str,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError>;

    /// The next `limit` members of `index` after `after` (a `(score, member)` returned by the
    /// page before; `None`: from the lowest), in the order of [`Store::index_lowest`], unless
    /// the index expired at `now_ms` (Redis: `ZRANGE ... BYSCORE` from the score, then by
    /// member). The default reads the whole index; stores page it.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn index_page(
        &self,
        index: &str,
        after: Option<(u64, &str)>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let all = self.index_lowest(index, usize::MAX, now_ms)?;
        Ok(all
            .into_iter()
            .filter(|(m, s)| after.is_none_or(|(as_, am)| (*s, m.as_str()) > (as_, am)))
            .take(limit)
            .collect())
    }

    /// How many members `index` has, unless it expired at `now_ms` (Redis: `ZCARD`).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn index_len(&self, index: &str, now_ms: u64) -> Result<usize, StoreError>;

    /// How many members of `index` are scored `min` or more, unless it expired at `now_ms`
    /// (Redis: `ZCOUNT index min +inf`). The default reads the whole index; a store that
    /// several hosts share counts in place.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn index_count_from(&self, index: &str, min: u64, now_ms: u64) -> Result<usize, StoreError> {
        Ok(self.index_lowest(index, usize::MAX, now_ms)?.iter().filter(|(_, s)| *s >= min).count())
    }

    /// Remove keys, logs and indexes expired at `now_ms`, at most `limit` of them
    /// (Redis expires them itself: a no-op there); returns how many were removed.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError>;

    /// Make batches applied from now on durable as `durability` says.
    fn set_durability(&self, durability: Durability);

    /// Its write-ahead log, for a store that keeps one (SQLite); `None` for the others.
    fn log_health(&self) -> Option<LogHealth> {
        None
    }

    /// `(entries, bytes)` the tally `tally` holds in its buckets that end after `now_ms`
    /// ([`Op::Tally`]; never below zero; absent: `(0, 0)`) (Redis: `HGETALL`).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn tally(&self, tally: &str, now_ms: u64) -> Result<(u64, u64), StoreError>;

    /// Add one to the counter at `key` (absent, or expired at `now_ms`: 0) after raising it
    /// to `floor`, and return the new value, committed (Redis: one script). A counter that
    /// starts (absent or expired) expires at `expires_ms`; a live one keeps its expiry (a
    /// claim's losers never prolong it; push it with [`Op::Expire`]). The value is decimal
    /// text, as a [`Op::Put`] of a number writes it. Two hosts that count at once get
    /// different numbers.
    ///
    /// # Errors
    /// [`StoreError::Backend`]; nothing was counted.
    fn incr(&self, key: &str, floor: u64, expires_ms: u64, now_ms: u64) -> Result<u64, StoreError>;

    /// Call `deliver` with each message another host publishes on `channel`
    /// ([`Op::Publish`]) from now on, on a thread of the store's, until the store is dropped;
    /// `deliver(None)` each time messages may have been missed (the subscription was cut and
    /// is taken again). A store only one process uses has nobody to hear: the default does
    /// nothing.
    ///
    /// # Errors
    /// [`StoreError::Backend`]: the subscription could not be started.
    fn subscribe(&self, channel: &'static str, deliver: Deliver) -> Result<(), StoreError> {
        let _ = (channel, deliver);
        Ok(())
    }

    /// Whether the host that runs as `run` still holds its lease on a store several hosts
    /// share, for writes to ledger name `near` (what the caller would take over or wait for:
    /// on a Redis Cluster each tag has its own copy of the lease, and only the copy that
    /// fences writes to `near` says whether that host can still write there). A store only
    /// one process uses has no other host: `false` (the caller knows its own run).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn run_alive(&self, run: u64, near: &str) -> Result<bool, StoreError> {
        let _ = (run, near);
        Ok(false)
    }

    /// Wait at most `block_ms` for an event after `after` in any of `logs` (`(log, after)`,
    /// one entry per log): for those that have one, their position in `logs` and the
    /// sequence number of the first such event (none when the wait ran out). Redis: one
    /// `XREAD BLOCK` over them all, on a connection of its own. The default (a store only one
    /// process writes, where nobody follows another's stream) waits a twentieth of a second
    /// and names them all (`u64::MAX`: maybe anything), so its callers read as they would
    /// poll.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn wait_appended(
        &self,
        logs: &[(&str, u64)],
        block_ms: u64,
    ) -> Result<Vec<(usize, u64)>, StoreError> {
        std::thread::sleep(std::time::Duration::from_millis(block_ms.min(50)));
        Ok((0..logs.len()).map(|i| (i, u64::MAX)).collect())
    }

    /// Round trips to a store on another machine so far (Redis: each request on a pooled
    /// connection: a batch, a read, a count, a sweep; the lease's renewals, the subscriptions
    /// and the followers' wait are not counted). `None` for an embedded store.
    fn round_trips(&self) -> Option<u64> {
        None
    }

    /// The last round trip to a store on another machine (µs): on Redis, the lease's last
    /// renewal (one script call, every third of the lease). `None` for an embedded store, or
    /// before the first.
    fn round_trip_us(&self) -> Option<u64> {
        None
    }

    /// Give back the memory the store caches and can read again (SQLite: each idle
    /// connection's page cache; the pages stay in the operating system's file cache). Never
    /// waits: a connection in use keeps its cache until the next call. Nothing for a store
    /// that caches nothing.
    fn release_memory(&self) {}
}

/// A counter's value as [`Store::incr`] keeps it (decimal text; anything else counts as 0).
pub(crate) fn counter_value(v: &[u8]) -> u64 {
    std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The sum of a tally's buckets `(bucket end, entries, bytes)` that end after `now_ms`, as
/// [`Store::tally`] answers it.
pub(crate) fn tally_sum(buckets: impl Iterator<Item = (u64, i64, i64)>, now_ms: u64) -> (u64, u64) {
    let (count, bytes) = buckets
        .filter(|(end, ..)| *end > now_ms)
        .fold((0i64, 0i64), |(c, b), (_, dc, db)| (c.saturating_add(dc), b.saturating_add(db)));
    (count.max(0).unsigned_abs(), bytes.max(0).unsigned_abs())
}

/// What a [`Store::subscribe`] calls with each message (`None`: some may have been missed).
pub type Deliver = Box<dyn Fn(Option<Bytes>) + Send + Sync>;

#[cfg(test)]
pub(crate) mod store_tests;
