//! The ledger writer: one thread that commits what the actors hand over, in groups.
//!
//! Group commit: the thread takes everything queued (up to `batch_max_ops`) and applies it as
//! one transaction; while it commits, the next batch gathers. On the request path, what must
//! be durable before it is answered waits for its commit ([`Writer::submit_and_wait`]: a new
//! session's record, a receipt before its tool runs, a handle's or a task's change), and in
//! `sync` durability a stream's frames wait for the acknowledgement of their batch; nothing
//! else does.
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
//! (`events_dropped`). Past the same bound the writer takes no new durable work
//! ([`Writer::refusal`]: the front door answers 503).
//!
//! Failure: a batch the store refuses (disk full, `SQLITE_BUSY` past the busy timeout, an I/O
//! error) is retried, the same batch, with backoff (50 ms doubling to 1 s) for as long as it
//! takes: nothing after it is applied first, nothing handed over is dropped, and its
//! acknowledgements wait. A commit the store has not answered within the commit wait (a
//! stalled disk) makes it failing too (a watchdog thread). Meanwhile the ledger is *failing*
//! ([`LedgerState::Failing`]): new
//! durable work is refused ([`Writer::refusal`]), writes that may be skipped (a handle's use)
//! are skipped, and the sweep waits. The first commit that succeeds ends it by itself. Only a
//! writer being dropped (the process stops) gives up on a store that still fails, after a few
//! more attempts: what is left is counted (`lost_ops`), its acknowledgements are dropped
//! unanswered, and the store holds a prefix of what was handed over.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use serde::Serialize;
use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::{Durability, Op, Store};

/// Run on the writer thread once a batch is committed. Dropped uncalled when the writer gives
/// up on a failing store as the process stops.
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
    /// The last commit attempt failed and none succeeded since.
    failing: AtomicBool,
    /// When it began failing (wall ms; 0: not failing).
    failing_since_ms: AtomicU64,
    /// When a batch was last committed (wall ms; 0: never).
    last_commit_ms: AtomicU64,
    /// Operations given up on as the process stopped with a failing store.
    lost_ops: AtomicU64,
    /// The store's last error (for the status page).
    last_error: Mutex<Option<String>>,
    /// `failing`, published: a request waiting for a commit starts its commit wait when the
    /// writer begins to fail (a healthy writer is waited for as long as it takes).
    failing_tx: tokio::sync::watch::Sender<bool>,
    /// Since when the store has been applying the current batch (`None` between batches): a
    /// store that answers nothing for the commit wait is failing too (a stalled disk).
    applying_since: Mutex<Option<tokio::time::Instant>>,
    commit_us_total: AtomicU64,
    commit_seconds: crate::stats::histogram::Histo,
    batch_ops: crate::stats::histogram::Histo,
}

impl Default for WriterStats {
    fn default() -> WriterStats {
        WriterStats {
            batches: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            events_dropped: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            failing_since_ms: AtomicU64::new(0),
            last_commit_ms: AtomicU64::new(0),
            lost_ops: AtomicU64::new(0),
            last_error: Mutex::new(None),
            failing_tx: tokio::sync::watch::Sender::new(false),
            applying_since: Mutex::new(None),
            commit_us_total: AtomicU64::new(0),
            commit_seconds: crate::stats::histogram::Histo::new(
                crate::stats::histogram::LATENCY_BOUNDS,
            ),
            batch_ops: crate::stats::histogram::Histo::new(crate::stats::histogram::COUNT_BOUNDS),
        }
    }
}

impl WriterStats {
    /// The store refused (or has not answered) a commit: failing from now, if it was not.
    /// Returns whether it began now.
    fn begin_failing(&self, why: String, wall_ms: u64) -> bool {
        *self.last_error.lock() = Some(why);
        if self.failing.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.failing_since_ms.store(wall_ms.max(1), Ordering::Relaxed);
        self.failing_tx.send_replace(true);
        true
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
    /// Commit attempts the store refused (each was retried).
    pub errors: u64,
    /// Whether it can take new durable work.
    pub state: LedgerState,
    /// Since when it has been failing (ms since the epoch), when it is.
    pub failing_since_ms: Option<u64>,
    /// When a batch was last committed (ms since the epoch; `None`: not yet in this process).
    pub last_commit_ms: Option<u64>,
    /// Operations given up on as the process stopped with a failing store.
    pub lost_ops: u64,
    /// Bytes waiting to be committed.
    pub queued_bytes: u64,
    /// Mean commit time of a batch (µs).
    pub mean_commit_us: u64,
    /// The store's write-ahead log, when it keeps one (SQLite).
    pub log: Option<super::LogHealth>,
}

/// Whether the ledger takes new durable work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerState {
    /// It commits.
    Ok,
    /// More than `queue_max_bytes` wait for it (the disk is slower than the traffic).
    Backlog,
    /// Its last commit attempt failed and it is retrying (disk full, locked, I/O errors).
    Failing,
}

/// The writer. Dropping the last handle commits what is queued and stops its thread (giving
/// up, after a few attempts, on a store that still fails).
pub struct Writer {
    tx: mpsc::Sender<Msg>,
    store: Arc<dyn Store>,
    durability: Durability,
    queued: Arc<AtomicUsize>,
    queue_max_bytes: usize,
    /// How long [`Writer::submit_and_wait`] waits.
    commit_wait: Duration,
    stats: Arc<WriterStats>,
    /// Set when the writer is dropped: a failing store is given up on.
    stopping: Arc<AtomicBool>,
    /// Must not own what owns the writer (it runs on the writer's thread, which the writer's
    /// drop joins).
    housekeeping: Arc<Mutex<Option<Housekeeping>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("durability", &self.durability)
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// Start the writer thread over `store`. `now` gives the time expiries are compared with
    /// (ms since the epoch, the same clock the records' expiries come from).
    ///
    /// # Panics
    /// When the operating system cannot start a thread.
    #[must_use]
    pub fn start(
        store: Arc<dyn Store>,
        settings: WriterSettings,
        now: Box<dyn Fn() -> u64 + Send>,
    ) -> Arc<Writer> {
        let WriterSettings {
            durability,
            batch_max_ops,
            queue_max_bytes,
            sweep_every,
            linger,
            commit_wait,
        } = settings;
        store.set_durability(durability);
        let (tx, rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let stats = Arc::new(WriterStats::default());
        let housekeeping: Arc<Mutex<Option<Housekeeping>>> = Arc::default();
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (store, queued, stats, hk, stop) = (
                Arc::clone(&store),
                Arc::clone(&queued),
                Arc::clone(&stats),
                Arc::clone(&housekeeping),
                Arc::clone(&stopping),
            );
            std::thread::Builder::new()
                .name("ledger-writer".into())
                .spawn(move || {
                    let shared = Shared {
                        store: store.as_ref(),
                        wall_ms: &*now,
                        queued: &queued,
                        stats: &stats,
                        housekeeping: &hk,
                        stopping: &stop,
                    };
                    run(
                        &rx,
                        &shared,
                        Batching { max_ops: batch_max_ops.max(1), linger },
                        sweep_every,
                    );
                })
                .expect("the ledger writer thread starts")
        };
        // The watchdog: a commit the store has not answered within the commit wait makes the
        // ledger failing, as a refused one does (its requests then get their 503s and their
        // waits end); the commit's own end clears it.
        {
            let (stats, stop) = (Arc::clone(&stats), Arc::clone(&stopping));
            std::thread::Builder::new()
                .name("ledger-watchdog".into())
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        std::thread::sleep(WATCH_EVERY);
                        let stalled = stats.applying_since.lock().is_some_and(|t| t.elapsed() >= commit_wait);
                        if stalled {
                            let why = format!("the store has not answered a commit for {} ms (a stalled disk?)", commit_wait.as_millis());
                            if stats.begin_failing(why.clone(), wall_ms_now()) {
                                tracing::error!(reason = %why, "the ledger cannot commit: new durable work is refused (503) until it can");
                            }
                        }
                    }
                })
                .expect("the ledger watchdog thread starts");
        }
        Arc::new(Writer {
            tx,
            store,
            durability,
            queued,
            queue_max_bytes,
            commit_wait,
            stats,
            stopping,
            housekeeping,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Run `task` on the writer thread after every sweep (between batches, so what it applies
    /// is ordered with every batch), with the store and the sweep's time; when it returns
    /// `true` the sweep and it run again after the next batch. Replaces an earlier one. It
    /// must not own the writer (the writer's drop joins the thread it runs on).
    pub fn set_housekeeping(&self, task: Housekeeping) {
        *self.housekeeping.lock() = Some(task);
    }

    /// The store, for blocking reads: at start, on the writer's thread (housekeeping), or
    /// through [`crate::ledger::Reads`] (never on an async worker).
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

    /// Whether the queue is over its bound (`batched` mode): event appends are refused then.
    #[must_use]
    pub fn backed_up(&self) -> bool {
        self.durability == Durability::Batched
            && self.queued.load(Ordering::Acquire) > self.queue_max_bytes
    }

    /// Whether writes that may be skipped (a handle's use) are skipped now: the queue is over
    /// its bound, or the store fails.
    #[must_use]
    pub fn skip_optional(&self) -> bool {
        self.backed_up() || self.is_failing()
    }

    /// Whether the store refuses commits now (it is being retried).
    #[must_use]
    pub fn is_failing(&self) -> bool {
        self.stats.failing.load(Ordering::Acquire)
    }

    /// Why new durable work (a session, a receipt, a handle's or a task's change, a
    /// resumable stream) must be refused now, if it must: the store fails, or more than
    /// `queue_max_bytes` wait (in either durability mode).
    #[must_use]
    pub fn refusal(&self) -> Option<LedgerState> {
        if self.is_failing() {
            Some(LedgerState::Failing)
        } else if self.queued.load(Ordering::Acquire) > self.queue_max_bytes {
            Some(LedgerState::Backlog)
        } else {
            None
        }
    }

    /// The store's last error, while it fails.
    #[must_use]
    pub fn last_error(&self) -> Option<String> {
        if self.is_failing() { self.stats.last_error.lock().clone() } else { None }
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

    /// Queue `ops` and be told when they are committed (the receiver errs when the writer
    /// gave up on them as the process stopped).
    pub fn submit_acked(&self, ops: Vec<Op>) -> oneshot::Receiver<()> {
        let (ack, rx) = oneshot::channel();
        self.send(
            ops,
            Some(Box::new(move || {
                let _ = ack.send(());
            })),
        );
        rx
    }

    /// Queue `ops` and wait until they are committed: as long as the writer commits, and at
    /// most the commit wait (`ledger.commit_wait_ms`) once it cannot.
    ///
    /// # Errors
    /// [`Unconfirmed`]: the ops may still be committed later ([`Unconfirmed::TimedOut`]).
    pub async fn submit_and_wait(&self, ops: Vec<Op>) -> Result<(), Unconfirmed> {
        self.wait_committed(self.submit_acked(ops)).await
    }

    /// Wait for an acknowledgement of this writer's (from [`Writer::submit_acked`], or a
    /// channel fired by a [`Writer::submit_then`] callback): as long as the writer commits,
    /// and at most the commit wait from when it fails. No timer runs while it commits, so a
    /// test on paused time never times a healthy commit out.
    ///
    /// # Errors
    /// [`Unconfirmed`].
    pub async fn wait_committed(&self, ack: oneshot::Receiver<()>) -> Result<(), Unconfirmed> {
        self.wait_until(async move { ack.await.is_ok() }).await
    }

    /// [`Writer::wait_committed`] for any sign of a commit: `done` resolves `true` once it
    /// is committed, `false` when the writer gave up on it.
    ///
    /// # Errors
    /// [`Unconfirmed`].
    pub async fn wait_until(
        &self,
        done: impl std::future::Future<Output = bool>,
    ) -> Result<(), Unconfirmed> {
        let mut done = std::pin::pin!(done);
        let mut failing = self.stats.failing_tx.subscribe();
        tokio::select! {
            ok = &mut done => return if ok { Ok(()) } else { Err(Unconfirmed::GaveUp) },
            _ = failing.wait_for(|f| *f) => {}
        }
        match tokio::time::timeout(self.commit_wait, done).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(Unconfirmed::GaveUp),
            Err(_) => Err(Unconfirmed::TimedOut),
        }
    }

    /// Queue `ops` and run `then` on the writer thread once they are committed (dropped
    /// uncalled if the writer gives up on them as the process stops). `then` must be quick (it
    /// holds up the next batch).
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
    pub fn histograms(&self) -> (&crate::stats::histogram::Histo, &crate::stats::histogram::Histo) {
        (&self.stats.commit_seconds, &self.stats.batch_ops)
    }

    /// Counters.
    #[must_use]
    pub fn snapshot(&self) -> WriterSnapshot {
        let s = &self.stats;
        let batches = s.batches.load(Ordering::Relaxed);
        let nonzero = |v: u64| (v > 0).then_some(v);
        let failing = s.failing.load(Ordering::Relaxed);
        WriterSnapshot {
            batches,
            ops: s.ops.load(Ordering::Relaxed),
            events_dropped: s.events_dropped.load(Ordering::Relaxed),
            errors: s.errors.load(Ordering::Relaxed),
            state: self.refusal().unwrap_or(LedgerState::Ok),
            failing_since_ms: if failing {
                nonzero(s.failing_since_ms.load(Ordering::Relaxed))
            } else {
                None
            },
            last_commit_ms: nonzero(s.last_commit_ms.load(Ordering::Relaxed)),
            lost_ops: s.lost_ops.load(Ordering::Relaxed),
            queued_bytes: self.queued.load(Ordering::Relaxed) as u64,
            mean_commit_us: s
                .commit_us_total
                .load(Ordering::Relaxed)
                .checked_div(batches)
                .unwrap_or(0),
            log: self.store.log_health(),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
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
    /// concurrent (and quickly successive) requests are shared. The writer sleeps it out
    /// (operations sent meanwhile only queue), then takes what is queued up to
    /// `batch_max_ops`; a batch full before the linger ends still waits for its end.
    pub linger: Duration,
    /// How long [`Writer::submit_and_wait`] waits for the commit.
    pub commit_wait: Duration,
}

impl From<Unconfirmed> for crate::proto::error::Rejection {
    /// A request that needed the commit: 503, the ledger failing (not committed in time), or
    /// draining (the process is stopping).
    fn from(u: Unconfirmed) -> Self {
        use crate::proto::error::{Overload, Rejection};
        match u {
            Unconfirmed::TimedOut => Rejection::Overloaded(Overload::LedgerFailing),
            Unconfirmed::GaveUp => Rejection::Overloaded(Overload::Draining),
        }
    }
}

/// Why operations waited for were not confirmed committed ([`Writer::submit_and_wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unconfirmed {
    /// Not committed within the commit wait: they are queued and land when the store
    /// commits again (unless the process stops first).
    #[error("not committed within the commit wait (the ledger cannot commit right now)")]
    TimedOut,
    /// The writer gave up on them (the process is stopping with a store that fails).
    #[error("the ledger gave up on them as the process stopped")]
    GaveUp,
}

/// Work done on the writer thread after each sweep (see [`Writer::set_housekeeping`]);
/// `true`: more to do, run again after the next batch.
pub type Housekeeping = Box<dyn FnMut(&dyn Store, u64) -> bool + Send>;

/// What the writer thread works with besides its channel.
struct Shared<'a> {
    store: &'a dyn Store,
    /// The time expiries are compared with and commits are stamped with (ms since the epoch).
    wall_ms: &'a dyn Fn() -> u64,
    queued: &'a AtomicUsize,
    stats: &'a WriterStats,
    housekeeping: &'a Mutex<Option<Housekeeping>>,
    stopping: &'a AtomicBool,
}

fn run(rx: &mpsc::Receiver<Msg>, sh: &Shared<'_>, batching: Batching, sweep_every: Duration) {
    let mut batch: Vec<Op> = Vec::new();
    let mut acks: Vec<Committed> = Vec::new();
    let mut next_sweep = tokio::time::Instant::now() + sweep_every;
    // Set once the writer gave up on a failing store as the process stops: the rest is
    // dropped (and counted), not retried batch by batch.
    let mut abandoned = false;
    loop {
        let now = tokio::time::Instant::now();
        if now >= next_sweep && !sh.stats.failing.load(Ordering::Acquire) && !abandoned {
            // Expiry runs here, between batches, on the writer's own connection, a bounded
            // chunk at a time: a full chunk comes back for more after the next batch.
            next_sweep = now + sweep_every;
            match sh.store.sweep((sh.wall_ms)(), SWEEP_CHUNK) {
                Ok(n) if n >= SWEEP_CHUNK => next_sweep = now,
                Ok(n) if n > 0 => tracing::debug!(removed = n, "ledger: expired records removed"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "ledger: sweep failed"),
            }
            if let Some(task) = sh.housekeeping.lock().as_mut()
                && task(sh.store, (sh.wall_ms)())
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
        // The linger is slept, not waited on the channel: a thread blocked in `recv` is woken
        // (a futex call and a context switch) by every operation sent, so a burst of
        // handshakes paid one wake each; asleep, the senders only queue (issue 23: a tenth
        // of an `initialize`'s CPU went to those switches). What is queued is taken after.
        let until = tokio::time::Instant::now() + batching.linger;
        loop {
            while batch.len() < batching.max_ops {
                match rx.try_recv() {
                    Ok(m) => take(m, &mut batch, &mut acks),
                    Err(_) => break,
                }
            }
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if batch.len() >= batching.max_ops || left.is_zero() {
                break;
            }
            std::thread::sleep(left);
        }
        let committed = if batch.is_empty() {
            true
        } else if abandoned {
            sh.stats.lost_ops.fetch_add(batch.len() as u64, Ordering::Relaxed);
            false
        } else {
            let ok = commit(sh, &batch);
            abandoned = !ok;
            ok
        };
        sh.queued.fetch_sub(bytes, Ordering::AcqRel);
        batch.clear();
        if committed {
            for a in acks.drain(..) {
                a();
            }
        } else {
            // Given up on as the process stops: nobody is told it was committed.
            acks.clear();
        }
    }
}

/// How often the watchdog looks at the commit in progress.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Wall time (ms since the epoch), for the watchdog's record of when failing began.
fn wall_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Most expired entries one sweep transaction removes.
const SWEEP_CHUNK: usize = 10_000;
/// The pause after a batch the store refused (doubling up to [`MAX_PAUSE`]).
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// Attempts at a failing batch once the writer is being dropped, before it gives up.
const ATTEMPTS_WHEN_STOPPING: u32 = 3;
/// How often a store that keeps failing is logged again.
const FAILING_LOG_EVERY: Duration = Duration::from_secs(30);

/// Apply `batch`, retrying the same batch with backoff until it is committed. `false` only
/// when the writer is being dropped and the store still fails (the batch is counted lost).
fn commit(sh: &Shared<'_>, batch: &[Op]) -> bool {
    let stats = sh.stats;
    let mut pause = FIRST_PAUSE;
    let mut attempts_stopping = 0;
    let mut logged = tokio::time::Instant::now();
    loop {
        let started = tokio::time::Instant::now();
        *stats.applying_since.lock() = Some(started);
        let applied = sh.store.apply(batch);
        *stats.applying_since.lock() = None;
        match applied {
            Ok(()) => {
                stats.batches.fetch_add(1, Ordering::Relaxed);
                stats.ops.fetch_add(batch.len() as u64, Ordering::Relaxed);
                let took = started.elapsed();
                stats.commit_us_total.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
                stats.commit_seconds.observe(took.as_secs_f64());
                stats.batch_ops.observe(batch.len() as f64);
                let now = (sh.wall_ms)();
                stats.last_commit_ms.store(now.max(1), Ordering::Relaxed);
                if stats.failing.swap(false, Ordering::AcqRel) {
                    stats.failing_tx.send_replace(false);
                    let since = stats.failing_since_ms.swap(0, Ordering::Relaxed);
                    tracing::info!(
                        failing_ms = now.saturating_sub(since),
                        "the ledger commits again; nothing handed over was lost"
                    );
                }
                return true;
            }
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                if stats.begin_failing(e.to_string(), (sh.wall_ms)()) {
                    tracing::error!(error = %e, ops = batch.len(), "the ledger cannot commit: retrying with backoff; new durable work is refused (503) until it can");
                } else if logged.elapsed() >= FAILING_LOG_EVERY {
                    logged = tokio::time::Instant::now();
                    tracing::warn!(error = %e, "the ledger still cannot commit; retrying");
                }
                if sh.stopping.load(Ordering::Acquire) {
                    attempts_stopping += 1;
                    if attempts_stopping >= ATTEMPTS_WHEN_STOPPING {
                        stats.lost_ops.fetch_add(batch.len() as u64, Ordering::Relaxed);
                        tracing::error!(error = %e, "stopping with a ledger that cannot commit: what was still queued is lost (the next start treats this run as crashed)");
                        return false;
                    }
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::ledger::MemoryStore;
    use crate::ledger::faulty::Refusing;

    fn settings(
        durability: Durability,
        batch_max_ops: usize,
        queue_max_bytes: usize,
    ) -> WriterSettings {
        WriterSettings {
            durability,
            batch_max_ops,
            queue_max_bytes,
            sweep_every: Duration::from_secs(60),
            linger: Duration::ZERO,
            commit_wait: Duration::from_secs(10),
        }
    }

    fn append(seq: u64) -> Op {
        Op::Append {
            log: "l".into(),
            seq,
            frame: Bytes::from(vec![b'x'; 100]),
            max_len: 1 << 20,
            expires_ms: u64::MAX,
        }
    }

    #[test]
    fn everything_submitted_is_committed_in_order_before_a_barrier_resolves() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let w = Writer::start(
            Arc::clone(&store),
            settings(Durability::Batched, 16, usize::MAX),
            Box::new(|| 0),
        );
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
    fn operations_sent_during_the_linger_share_its_commit_up_to_the_batch_cap() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let mut s = settings(Durability::Batched, 8, usize::MAX);
        // Long enough that a busy machine cannot stretch the 12 sends past it.
        s.linger = Duration::from_secs(1);
        let w = Writer::start(Arc::clone(&store), s, Box::new(|| 0));
        // Sent one by one well within one linger: 12 operations, a cap of 8 a batch.
        for seq in 1..=12 {
            w.submit(vec![append(seq)]);
        }
        w.flush_blocking();
        let snap = w.snapshot();
        assert_eq!(snap.ops, 12);
        assert_eq!(snap.batches, 2, "8 in the first commit, the other 4 in the next");
        let log = store.read_log("l", 0).unwrap();
        assert_eq!(log.iter().map(|(s, _)| *s).collect::<Vec<_>>(), (1..=12).collect::<Vec<_>>());
    }

    #[test]
    fn a_writer_dropped_during_its_linger_still_commits_what_it_was_given() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let mut s = settings(Durability::Batched, 16, usize::MAX);
        s.linger = Duration::from_millis(50);
        let w = Writer::start(Arc::clone(&store), s, Box::new(|| 0));
        w.submit(vec![append(1)]);
        w.submit(vec![append(2)]);
        drop(w);
        let log = store.read_log("l", 0).unwrap();
        assert_eq!(log.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![1, 2]);
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
        let w =
            Writer::start(Arc::clone(&store), settings(Durability::Batched, 16, 0), Box::new(|| 0));
        w.queued.fetch_add(1, Ordering::AcqRel);
        let record = Op::Put {
            key: "t/x".into(),
            value: Bytes::from_static(b"closed"),
            expires_ms: u64::MAX,
        };
        assert!(!w.submit_events(vec![append(1), record]));
        w.queued.fetch_sub(1, Ordering::AcqRel);
        w.flush_blocking();
        assert!(store.get("t/x", 0).unwrap().is_some(), "the stream's record is kept");
        assert!(store.read_log("l", 0).unwrap().is_empty(), "its event was refused");
    }

    fn put(k: &str) -> Vec<Op> {
        vec![Op::Put { key: k.into(), value: Bytes::from_static(b"v"), expires_ms: u64::MAX }]
    }

    /// Wait (bounded: 2,000 pauses of 5 ms) until `cond` holds.
    fn eventually(what: &str, cond: impl Fn() -> bool) {
        for _ in 0..2_000 {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("timed out waiting for: {what}");
    }

    #[test]
    fn a_batch_the_store_refuses_is_retried_until_it_commits_and_nothing_handed_over_is_lost() {
        let store = Arc::new(Refusing::default());
        let w = Writer::start(
            Arc::clone(&store) as Arc<dyn Store>,
            settings(Durability::Batched, 1, usize::MAX),
            Box::new(|| 7),
        );
        w.submit(put("first"));
        w.flush_blocking();
        assert_eq!((w.snapshot().state, w.snapshot().last_commit_ms), (LedgerState::Ok, Some(7)));
        store.full.store(true, Ordering::Release);
        let mut acked = w.submit_acked(put("during-1"));
        w.submit(put("during-2"));
        eventually("the writer reports the failure", || w.is_failing());
        assert_eq!(w.refusal(), Some(LedgerState::Failing), "new durable work is refused");
        assert!(w.skip_optional());
        assert_eq!(w.snapshot().failing_since_ms, Some(7));
        assert!(w.last_error().is_some_and(|e| e.contains("full")));
        // Retried, not given up on: more attempts come, nothing lands, nothing is acknowledged.
        let tried = store.attempts.load(Ordering::Relaxed);
        eventually("it keeps retrying", || store.attempts.load(Ordering::Relaxed) >= tried + 3);
        assert!(store.get("during-1", 0).unwrap().is_none());
        assert!(
            matches!(acked.try_recv(), Err(oneshot::error::TryRecvError::Empty)),
            "an acknowledgement waits for the commit"
        );
        store.full.store(false, Ordering::Release);
        w.flush_blocking();
        assert!(acked.try_recv().is_ok(), "acknowledged once committed");
        for k in ["first", "during-1", "during-2"] {
            assert!(
                store.get(k, 0).unwrap().is_some(),
                "{k} was handed over before the store healed"
            );
        }
        let s = w.snapshot();
        assert_eq!((s.state, s.failing_since_ms, s.lost_ops), (LedgerState::Ok, None, 0), "{s:?}");
        assert!(s.errors >= 3);
        assert_eq!(w.refusal(), None);
        assert!(w.last_error().is_none());
    }

    #[test]
    fn a_store_that_answers_nothing_for_the_commit_wait_is_failing_until_it_answers() {
        let store = Arc::new(Refusing::default());
        let mut s = settings(Durability::Batched, 1, usize::MAX);
        s.commit_wait = Duration::from_millis(200);
        let w = Writer::start(Arc::clone(&store) as Arc<dyn Store>, s, Box::new(|| 7));
        store.stalled.store(true, Ordering::Release);
        w.submit(put("stuck"));
        eventually("the watchdog reports the stall", || w.is_failing());
        assert_eq!(w.refusal(), Some(LedgerState::Failing));
        assert!(
            w.last_error().is_some_and(|e| e.contains("has not answered")),
            "{:?}",
            w.last_error()
        );
        store.stalled.store(false, Ordering::Release);
        w.flush_blocking();
        assert!(!w.is_failing(), "the commit's own end clears it");
        assert!(store.get("stuck", 0).unwrap().is_some());
    }

    #[test]
    fn a_queue_over_its_bound_refuses_new_durable_work_in_either_mode() {
        for durability in [Durability::Batched, Durability::Sync] {
            let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
            let w = Writer::start(store, settings(durability, 16, 10), Box::new(|| 0));
            assert_eq!(w.refusal(), None);
            w.queued.fetch_add(11, Ordering::AcqRel);
            assert_eq!(w.refusal(), Some(LedgerState::Backlog), "{durability:?}");
            assert_eq!(w.snapshot().state, LedgerState::Backlog);
            w.queued.fetch_sub(11, Ordering::AcqRel);
        }
    }

    #[test]
    fn a_writer_dropped_while_the_store_fails_gives_up_and_counts_what_is_lost() {
        let store = Arc::new(Refusing::default());
        let w = Writer::start(
            Arc::clone(&store) as Arc<dyn Store>,
            settings(Durability::Batched, 1, usize::MAX),
            Box::new(|| 0),
        );
        store.full.store(true, Ordering::Release);
        let acked = w.submit_acked(put("a"));
        w.submit(put("b"));
        let stats = Arc::clone(&w.stats);
        drop(w);
        assert_eq!(stats.lost_ops.load(Ordering::Relaxed), 2);
        assert!(acked.blocking_recv().is_err(), "nobody is told it was committed");
        assert!(store.get("a", 0).unwrap().is_none());
    }

    #[test]
    fn sync_appends_are_never_refused_and_are_acknowledged_after_commit() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let w =
            Writer::start(Arc::clone(&store), settings(Durability::Sync, 16, 0), Box::new(|| 0));
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
        let w = Writer::start(
            Arc::clone(&store),
            settings(Durability::Batched, 4, usize::MAX),
            Box::new(|| 0),
        );
        for seq in 1..=100 {
            w.submit(vec![append(seq)]);
        }
        drop(w);
        assert_eq!(store.read_log("l", 0).unwrap().len(), 100);
    }
}
