//! The ledger writer: one thread that commits what the actors hand over, in groups.
//!
//! Group commit: the thread takes everything queued (up to `batch_max_ops`) and applies it as
//! one transaction; while it commits, the next batch gathers. Nothing waits for a commit on
//! the request path unless durability is `sync`, where a stream's frames wait for the
//! acknowledgement of their batch before they are written.
//!
//! Order: operations are applied in the order they were handed over, and a batch is applied
//! whole or not at all, so after a crash the store holds a prefix of what was handed over.
//!
//! Overflow policy: records (sessions, streams, receipts: bounded by the session and stream
//! limits) are always queued, also when they travel with refused appends. Event appends are
//! refused while more than `queue_max_bytes` are waiting in `batched` mode: the event still
//! goes out on the wire and stays in the stream's in-memory window, but the durable copy of
//! that stream has a hole, which a resume after a restart reports as lost events (-32005 /
//! 410), never skips. In `sync` mode appends are never refused: the frames wait for their
//! commit, which bounds the queue by the streams' own windows. Every refusal is counted
//! (`events_dropped`).
//!
//! Failure: a batch the store refuses (disk full, I/O error) is retried for about a second;
//! if it still fails the ledger stops recording: that batch and every later operation are
//! dropped and counted (`errors`, `failed`), so what the store holds stays a prefix of what
//! was handed over (a later batch never lands after a lost one). Acknowledgements still run,
//! so `sync` streams are released without durability rather than stalled; the stats line
//! shows `failed: true` and the log says why.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use serde::Serialize;
use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::{Durability, Op, Store};

/// Run on the writer thread once a batch is committed (or failed).
pub type Committed = Box<dyn FnOnce() + Send>;

enum Msg {
    Ops { ops: Vec<Op>, bytes: usize, ack: Option<Committed> },
    Barrier(Committed),
}

/// Counters of the writer.
#[derive(Debug)]
pub struct WriterStats {
    batches: AtomicU64,
    ops: AtomicU64,
    events_dropped: AtomicU64,
    errors: AtomicU64,
    failed: std::sync::atomic::AtomicBool,
    commit_us_total: AtomicU64,
    commit_seconds: crate::metrics::Histo,
    batch_ops: crate::metrics::Histo,
}

impl Default for WriterStats {
    fn default() -> WriterStats {
        WriterStats {
            batches: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            events_dropped: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            failed: std::sync::atomic::AtomicBool::new(false),
            commit_us_total: AtomicU64::new(0),
            commit_seconds: crate::metrics::Histo::new(crate::metrics::LATENCY_BOUNDS),
            batch_ops: crate::metrics::Histo::new(crate::metrics::COUNT_BOUNDS),
        }
    }
}

/// A snapshot of [`WriterStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WriterSnapshot {
    /// Transactions committed.
    pub batches: u64,
    /// Operations committed.
    pub ops: u64,
    /// Event appends refused by the overflow policy.
    pub events_dropped: u64,
    /// Batches the store failed to apply, after retries (their operations are lost).
    pub errors: u64,
    /// The ledger stopped recording after a batch failed for good (see the module doc).
    pub failed: bool,
    /// Bytes waiting to be committed.
    pub queued_bytes: u64,
    /// Mean commit time of a batch (µs).
    pub mean_commit_us: u64,
}

/// The writer. Dropping the last handle commits what is queued and stops its thread.
pub struct Writer {
    tx: mpsc::Sender<Msg>,
    store: Arc<dyn Store>,
    durability: Durability,
    queued: Arc<AtomicUsize>,
    queue_max_bytes: usize,
    stats: Arc<WriterStats>,
    /// Must not own what owns the writer (it runs on the writer's thread, which the writer's
    /// drop joins).
    housekeeping: Arc<Mutex<Option<Housekeeping>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("durability", &self.durability).field("queued", &self.queued.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

impl Writer {
    /// Start the writer thread over `store`.
    ///
    /// # Panics
    /// When the operating system cannot start a thread.
    #[must_use]
    /// `now` gives the time expiries are compared with (ms since the epoch, the same clock
    /// the records' expiries come from).
    pub fn start(store: Arc<dyn Store>, settings: WriterSettings, now: Box<dyn Fn() -> u64 + Send>) -> Arc<Writer> {
        let WriterSettings { durability, batch_max_ops, queue_max_bytes, sweep_every, linger } = settings;
        store.set_durability(durability);
        let (tx, rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let stats = Arc::new(WriterStats::default());
        let housekeeping: Arc<Mutex<Option<Housekeeping>>> = Arc::default();
        let thread = {
            let (store, queued, stats, hk) = (Arc::clone(&store), Arc::clone(&queued), Arc::clone(&stats), Arc::clone(&housekeeping));
            std::thread::Builder::new()
                .name("ledger-writer".into())
                .spawn(move || run(&rx, store.as_ref(), Batching { max_ops: batch_max_ops.max(1), linger }, sweep_every, &*now, &queued, &stats, &hk))
                .expect("the ledger writer thread starts")
        };
        Arc::new(Writer { tx, store, durability, queued, queue_max_bytes, stats, housekeeping, thread: Mutex::new(Some(thread)) })
    }

    /// Run `task` on the writer thread after every sweep (between batches, so what it applies
    /// is ordered with every batch), with the store and the sweep's time; when it returns
    /// `true` the sweep and it run again after the next batch. Replaces an earlier one. It
    /// must not own the writer (the writer's drop joins the thread it runs on).
    pub fn set_housekeeping(&self, task: Housekeeping) {
        *self.housekeeping.lock() = Some(task);
    }

    /// The store (for reads).
    #[must_use]
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The durability mode.
    #[must_use]
    pub fn durability(&self) -> Durability {
        self.durability
    }

    fn send(&self, ops: Vec<Op>, ack: Option<Committed>) {
        let bytes = ops.iter().map(Op::size).sum();
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        if self.tx.send(Msg::Ops { ops, bytes, ack }).is_err() {
            // The thread is gone only after the process began to exit.
            self.queued.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// Whether the queue is over its bound (`batched` mode): writes that may be skipped (a
    /// handle's use, event appends) are skipped then.
    #[must_use]
    pub fn backed_up(&self) -> bool {
        self.durability == Durability::Batched && self.queued.load(Ordering::Acquire) > self.queue_max_bytes
    }

    /// Queue records (never refused).
    pub fn submit(&self, ops: Vec<Op>) {
        if !ops.is_empty() {
            self.send(ops, None);
        }
    }

    /// Queue event appends and the records that go with them. In `batched` mode the appends
    /// are refused (`false`, counted) while the queue is over its bound, and the records
    /// still go in; see the module doc.
    pub fn submit_events(&self, mut ops: Vec<Op>) -> bool {
        if self.backed_up() {
            let before = ops.len();
            ops.retain(|o| !matches!(o, Op::Append { .. }));
            self.stats.events_dropped.fetch_add((before - ops.len()) as u64, Ordering::Relaxed);
            self.submit(ops);
            return false;
        }
        self.submit(ops);
        true
    }

    /// Queue `ops` and be told when they are committed (or failed: see [`WriterSnapshot::errors`]).
    pub fn submit_acked(&self, ops: Vec<Op>) -> oneshot::Receiver<()> {
        let (ack, rx) = oneshot::channel();
        self.send(ops, Some(Box::new(move || {
            let _ = ack.send(());
        })));
        rx
    }

    /// Queue `ops` and run `then` on the writer thread once they are committed (or failed).
    /// `then` must be quick (it holds up the next batch).
    pub fn submit_then(&self, ops: Vec<Op>, then: Committed) {
        self.send(ops, Some(then));
    }

    /// Resolves once everything queued before it is committed.
    pub fn barrier(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        let _ = self.tx.send(Msg::Barrier(Box::new(move || {
            let _ = tx.send(());
        })));
        rx
    }

    /// Block the calling thread until everything queued so far is committed (tests).
    #[cfg(test)]
    pub(crate) fn flush_blocking(&self) {
        let _ = self.barrier().blocking_recv();
    }

    /// Commit latency and batch size histograms.
    #[must_use]
    pub fn histograms(&self) -> (&crate::metrics::Histo, &crate::metrics::Histo) {
        (&self.stats.commit_seconds, &self.stats.batch_ops)
    }

    /// Counters.
    #[must_use]
    pub fn snapshot(&self) -> WriterSnapshot {
        let s = &self.stats;
        let batches = s.batches.load(Ordering::Relaxed);
        WriterSnapshot {
            batches,
            ops: s.ops.load(Ordering::Relaxed),
            events_dropped: s.events_dropped.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            queued_bytes: self.queued.load(Ordering::Relaxed) as u64,
            mean_commit_us: s.commit_us_total.load(Ordering::Relaxed).checked_div(batches).unwrap_or(0),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel lets the thread commit the rest and end.
        let (tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

/// How the writer forms batches.
#[derive(Debug, Clone, Copy)]
struct Batching {
    max_ops: usize,
    /// How long a batch waits for more operations once its first arrived.
    linger: Duration,
}

/// What a writer is started with.
#[derive(Debug, Clone, Copy)]
pub struct WriterSettings {
    /// How commits are made durable.
    pub durability: Durability,
    /// Most operations in one transaction.
    pub batch_max_ops: usize,
    /// Bytes waiting past which `batched` appends are refused.
    pub queue_max_bytes: usize,
    /// How often expired entries are swept.
    pub sweep_every: Duration,
    /// How long a batch waits for more operations once its first arrived: commits of
    /// concurrent (and quickly successive) requests are shared.
    pub linger: Duration,
}

/// Work done on the writer thread after each sweep (see [`Writer::set_housekeeping`]);
/// `true`: more to do, run again after the next batch.
pub type Housekeeping = Box<dyn FnMut(&dyn Store, u64) -> bool + Send>;

#[allow(clippy::too_many_arguments)]
fn run(rx: &mpsc::Receiver<Msg>, store: &dyn Store, batching: Batching, sweep_every: Duration, wall_ms: &dyn Fn() -> u64, queued: &AtomicUsize, stats: &WriterStats, housekeeping: &Mutex<Option<Housekeeping>>) {
    let mut batch: Vec<Op> = Vec::new();
    let mut acks: Vec<Committed> = Vec::new();
    let mut next_sweep = tokio::time::Instant::now() + sweep_every;
    loop {
        let now = tokio::time::Instant::now();
        if now >= next_sweep && !stats.failed.load(Ordering::Relaxed) {
            // Expiry runs here, between batches, on the writer's own connection, a bounded
            // chunk at a time: a full chunk comes back for more after the next batch.
            next_sweep = now + sweep_every;
            match store.sweep(wall_ms(), SWEEP_CHUNK) {
                Ok(n) if n >= SWEEP_CHUNK => next_sweep = now,
                Ok(n) if n > 0 => tracing::debug!(removed = n, "ledger: expired records removed"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "ledger: sweep failed"),
            }
            if let Some(task) = housekeeping.lock().as_mut()
                && task(store, wall_ms())
            {
                next_sweep = now;
            }
        }
        let first = match rx.recv_timeout(next_sweep.saturating_duration_since(now)) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let mut bytes = 0;
        let mut take = |m: Msg, batch: &mut Vec<Op>, acks: &mut Vec<Committed>| match m {
            Msg::Ops { ops, bytes: b, ack } => {
                batch.extend(ops);
                bytes += b;
                acks.extend(ack);
            }
            Msg::Barrier(ack) => acks.push(ack),
        };
        take(first, &mut batch, &mut acks);
        let until = tokio::time::Instant::now() + batching.linger;
        while batch.len() < batching.max_ops {
            let m = match rx.try_recv() {
                Ok(m) => m,
                Err(mpsc::TryRecvError::Disconnected) => break,
                Err(mpsc::TryRecvError::Empty) => {
                    let left = until.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match rx.recv_timeout(left) {
                        Ok(m) => m,
                        Err(_) => break,
                    }
                }
            };
            take(m, &mut batch, &mut acks);
        }
        if !batch.is_empty() && !stats.failed.load(Ordering::Relaxed) {
            commit(store, &batch, stats);
        }
        queued.fetch_sub(bytes, Ordering::AcqRel);
        batch.clear();
        for a in acks.drain(..) {
            a();
        }
    }
}

/// Most expired entries one sweep transaction removes.
const SWEEP_CHUNK: usize = 10_000;
/// Attempts at a batch the store refuses, and the pause after the first (doubling).
const ATTEMPTS: u32 = 5;
const FIRST_PAUSE: Duration = Duration::from_millis(50);

fn commit(store: &dyn Store, batch: &[Op], stats: &WriterStats) {
    let mut pause = FIRST_PAUSE;
    for attempt in 1..=ATTEMPTS {
        let started = tokio::time::Instant::now();
        match store.apply(batch) {
            Ok(()) => {
                stats.batches.fetch_add(1, Ordering::Relaxed);
                stats.ops.fetch_add(batch.len() as u64, Ordering::Relaxed);
                let took = started.elapsed();
                stats.commit_us_total.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
                stats.commit_seconds.observe(took.as_secs_f64());
                stats.batch_ops.observe(batch.len() as f64);
                return;
            }
            Err(e) if attempt < ATTEMPTS => {
                tracing::warn!(error = %e, attempt, "ledger batch refused; retrying");
                std::thread::sleep(pause);
                pause *= 2;
            }
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                stats.failed.store(true, Ordering::Relaxed);
                tracing::error!(error = %e, ops = batch.len(), "ledger batch lost; the ledger stops recording (restart the host once the store is fixed)");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::ledger::MemoryStore;

    fn settings(durability: Durability, batch_max_ops: usize, queue_max_bytes: usize) -> WriterSettings {
        WriterSettings { durability, batch_max_ops, queue_max_bytes, sweep_every: Duration::from_secs(60), linger: Duration::ZERO }
    }

    fn append(seq: u64) -> Op {
        Op::Append { log: "l".into(), seq, frame: Bytes::from(vec![b'x'; 100]), max_len: 1 << 20, expires_ms: u64::MAX }
    }

    #[test]
    fn everything_submitted_is_committed_in_order_before_a_barrier_resolves() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let w = Writer::start(Arc::clone(&store), settings(Durability::Batched, 16, usize::MAX), Box::new(|| 0));
        for seq in 1..=1000 {
            w.submit(vec![append(seq)]);
        }
        w.flush_blocking();
        let log = store.read_log("l", 0).unwrap();
        assert_eq!(log.iter().map(|(s, _)| *s).collect::<Vec<_>>(), (1..=1000).collect::<Vec<_>>());
        let snap = w.snapshot();
        assert_eq!((snap.ops, snap.queued_bytes), (1000, 0));
        assert!(snap.batches <= 1000 && snap.batches >= 1000 / 16);
    }

    #[test]
    fn batched_appends_over_the_queue_bound_are_refused_and_counted_and_records_never() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        // A bound below one append: the second is refused while the first may still wait.
        let w = Writer::start(store, settings(Durability::Batched, 16, 0), Box::new(|| 0));
        w.queued.fetch_add(1, Ordering::AcqRel); // hold the queue "non-empty"
        assert!(!w.submit_events(vec![append(1)]));
        assert_eq!(w.snapshot().events_dropped, 1);
        w.submit(vec![Op::Delete { key: "k".into() }]);
        w.queued.fetch_sub(1, Ordering::AcqRel);
        w.flush_blocking();
        assert_eq!(w.snapshot().ops, 1, "the record went in");
    }

    #[test]
    fn records_travelling_with_refused_appends_still_go_in() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let w = Writer::start(Arc::clone(&store), settings(Durability::Batched, 16, 0), Box::new(|| 0));
        w.queued.fetch_add(1, Ordering::AcqRel);
        let record = Op::Put { key: "t/x".into(), value: Bytes::from_static(b"closed"), expires_ms: u64::MAX };
        assert!(!w.submit_events(vec![append(1), record]));
        w.queued.fetch_sub(1, Ordering::AcqRel);
        w.flush_blocking();
        assert!(store.get("t/x", 0).unwrap().is_some(), "the stream's record is kept");
        assert!(store.read_log("l", 0).unwrap().is_empty(), "its event was refused");
    }

    /// A store that refuses the batch holding key "bad".
    #[derive(Debug, Default)]
    struct Refusing(MemoryStore);

    impl Store for Refusing {
        fn apply(&self, ops: &[Op]) -> Result<(), crate::ledger::StoreError> {
            if ops.iter().any(|o| matches!(o, Op::Put { key, .. } if key == "bad")) {
                return Err(crate::ledger::StoreError::Backend("disk full".into()));
            }
            self.0.apply(ops)
        }
        fn get(&self, key: &str, now_ms: u64) -> Result<Option<Bytes>, crate::ledger::StoreError> {
            self.0.get(key, now_ms)
        }
        fn read_log(&self, log: &str, now_ms: u64) -> Result<Vec<(u64, Bytes)>, crate::ledger::StoreError> {
            self.0.read_log(log, now_ms)
        }
        fn index_lowest(&self, index: &str, limit: usize, now_ms: u64) -> Result<Vec<(String, u64)>, crate::ledger::StoreError> {
            self.0.index_lowest(index, limit, now_ms)
        }
        fn index_len(&self, index: &str, now_ms: u64) -> Result<usize, crate::ledger::StoreError> {
            self.0.index_len(index, now_ms)
        }
        fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, crate::ledger::StoreError> {
            self.0.sweep(now_ms, limit)
        }
        fn set_durability(&self, _: Durability) {}
    }

    #[test]
    fn after_a_batch_fails_for_good_nothing_later_is_applied_so_the_store_stays_a_prefix() {
        let store = Arc::new(Refusing::default());
        let w = Writer::start(Arc::clone(&store) as Arc<dyn Store>, settings(Durability::Batched, 1, usize::MAX), Box::new(|| 0));
        let put = |k: &str| vec![Op::Put { key: k.into(), value: Bytes::from_static(b"v"), expires_ms: u64::MAX }];
        w.submit(put("first"));
        w.flush_blocking();
        w.submit(put("bad"));
        w.submit(put("after"));
        w.flush_blocking();
        assert!(store.get("first", 0).unwrap().is_some());
        assert!(store.get("after", 0).unwrap().is_none(), "a batch after the lost one would break the prefix");
        let s = w.snapshot();
        assert!(s.failed && s.errors == 1, "{s:?}");
    }

    #[test]
    fn sync_appends_are_never_refused_and_are_acknowledged_after_commit() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let w = Writer::start(Arc::clone(&store), settings(Durability::Sync, 16, 0), Box::new(|| 0));
        w.queued.fetch_add(1, Ordering::AcqRel);
        assert!(w.submit_events(vec![append(1)]));
        let ack = w.submit_acked(vec![append(2)]);
        ack.blocking_recv().unwrap();
        assert_eq!(store.read_log("l", 0).unwrap().len(), 2, "acknowledged means committed");
        w.queued.fetch_sub(1, Ordering::AcqRel);
    }

    #[test]
    fn dropping_the_writer_commits_what_was_queued() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let w = Writer::start(Arc::clone(&store), settings(Durability::Batched, 4, usize::MAX), Box::new(|| 0));
        for seq in 1..=100 {
            w.submit(vec![append(seq)]);
        }
        drop(w);
        assert_eq!(store.read_log("l", 0).unwrap().len(), 100);
    }
}
