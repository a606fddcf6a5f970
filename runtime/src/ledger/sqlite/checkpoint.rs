//! Checkpoints of the SQLite ledger's write-ahead log, off the writer's thread (issue 23).
//!
//! By default SQLite checkpoints from the connection that commits, once the log holds 1,000
//! pages: the writer copies them into the main file and syncs it while every batch behind it
//! waits. A storm of new sessions dirties a whole page per record (their keys are random), so
//! that checkpoint was a fifth of an `initialize`'s CPU and a stall of tens of milliseconds.
//!
//! Here a thread of its own, on its own connection, runs passive checkpoints, which block
//! neither the writer nor the readers: when the log holds [`Checkpointing::pages`] pages, and
//! at most [`Checkpointing::every`] after a commit however quiet the ledger. In WAL mode with
//! `synchronous = NORMAL` a commit is not synced; a checkpoint syncs the log before it copies
//! it, so that is when commits reach the disk. A checkpoint that readers held back (they read
//! frames it may not overwrite) is tried again [`RETRY`] later. A larger log lets one
//! checkpoint copy once a page that many commits rewrote.
//!
//! A passive checkpoint never restarts the log: the writer's next commit does, once all of it
//! is copied and no reader uses it. Should the log reach [`HARD_FACTOR`] times `pages` (the
//! checkpointer cannot keep up, readers keep it from finishing, or it fails), the writer,
//! after its commit, runs a `RESTART` checkpoint itself: it waits (up to its busy timeout) for
//! the checkpointer and the readers, so the next commit starts the log again. The file is cut
//! back to `2 × pages` at that restart (`journal_size_limit`).

use std::ffi::c_int;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rusqlite::wal::CheckpointMode;
use rusqlite::{Connection, InterruptHandle};
use tokio::time::Instant;

use super::super::{LogHealth, StoreError};

/// The log's size, in multiples of [`Checkpointing::pages`], past which the writer checkpoints
/// it itself.
const HARD_FACTOR: u32 = 4;
/// How soon a checkpoint that readers held back is tried again.
const RETRY: Duration = Duration::from_millis(10);
/// The fewest pages between two of the writer's own checkpoints while one keeps failing, so a
/// failing disk costs it one attempt per so many pages, not one per commit.
const WRITER_RETRY_PAGES: u32 = 64;

/// When the log is copied into the main file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpointing {
    /// Pages (4 KiB each) in the log that start a checkpoint.
    pub pages: u32,
    /// The longest a commit waits to be synced (by the next checkpoint).
    pub every: Duration,
}

impl Default for Checkpointing {
    fn default() -> Self {
        Checkpointing {
            pages: crate::config::DEFAULT_CHECKPOINT_PAGES,
            every: Duration::from_millis(crate::config::DEFAULT_CHECKPOINT_EVERY_MS),
        }
    }
}

/// What the writer's commits tell the checkpointer, under one lock with a condition variable:
/// a commit sets a flag and wakes the thread only when a checkpoint is due, so a busy writer
/// costs the thread no wake-ups.
#[derive(Debug, Default)]
struct State {
    /// Something was committed since the last complete checkpoint.
    dirty: bool,
    /// The log holds `pages` pages: checkpoint now.
    due: bool,
    /// The store is closing: the thread ends.
    stop: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Pages in the log after the last commit (the hook's count), for the metrics.
    pages: AtomicU64,
    /// Checkpoints that failed, for the metrics.
    failures: AtomicU64,
}

/// The checkpointer thread; stopped and joined when dropped.
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    /// The thread and its connection's interrupt (a checkpoint of a large log stops at once).
    thread: Option<(JoinHandle<()>, InterruptHandle)>,
}

impl Checkpointer {
    /// Turn off `writer`'s own checkpoints, hook its commits, and start the thread on
    /// `conn` (another connection to the same ledger; none: no thread, for tests of the
    /// writer's own checkpoints).
    pub(super) fn start(
        writer: &mut Connection,
        conn: Option<Connection>,
        cfg: Checkpointing,
    ) -> Result<Checkpointer, StoreError> {
        let shared = Arc::new(Shared::default());
        let pages = cfg.pages.max(1);
        let hard = pages.saturating_mul(HARD_FACTOR);
        // The log's file is cut back to this at a restart when it grew past it.
        writer
            .pragma_update(None, "journal_size_limit", i64::from(pages) * 2 * 4096)
            .map_err(super::backend)?;
        let hook = Arc::clone(&shared);
        // Frames the log held at the writer's last failed checkpoint of its own.
        let mut failed_at: Option<u32> = None;
        // Registering a WAL hook replaces SQLite's automatic checkpoint (which is one). The
        // hook runs after the commit released its write lock.
        writer
            .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, frames: c_int| {
                // Frames in the log since it last restarted, copied ones included.
                let frames = u32::try_from(frames).unwrap_or(0);
                hook.pages.store(u64::from(frames), Ordering::Relaxed);
                if frames < hard && failed_at.take().is_some() {
                    tracing::info!("ledger: the log is back within its bound");
                }
                if frames >= hard && failed_at.is_none_or(|f| frames >= f + WRITER_RETRY_PAGES) {
                    // Its failure (a disk that refuses, readers past the busy timeout) is not
                    // this commit's, which is done: reported, the batch would be retried.
                    match wal.checkpoint_v2(CheckpointMode::RESTART) {
                        Ok((_, _)) if failed_at.take().is_some() => {
                            tracing::info!("ledger: the writer's checkpoint succeeded again");
                        }
                        Ok(_) => {}
                        Err(e) => {
                            hook.failures.fetch_add(1, Ordering::Relaxed);
                            if failed_at.is_none() {
                                tracing::warn!(error = %e, frames, "ledger: the log passed its bound and the writer could not checkpoint it (tried again as it grows)");
                            }
                            failed_at = Some(frames);
                        }
                    }
                }
                let mut st = hook.state.lock();
                st.dirty = true;
                if frames >= pages && !st.due {
                    st.due = true;
                    hook.wake.notify_one();
                }
                Ok(())
            }))
            .map_err(super::backend)?;
        let Some(conn) = conn else {
            return Ok(Checkpointer { shared, thread: None });
        };
        // Checkpoints sync the log and the main file at NORMAL as at FULL (the writer's level
        // is set apart); only OFF would not. Said here rather than left to the default.
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(super::backend)?;
        let interrupt = conn.get_interrupt_handle();
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ledger-checkpoint".into())
            .spawn(move || run(&conn, &thread_shared, cfg.every))
            .map_err(|e| StoreError::Backend(format!("cannot start the checkpointer: {e}")))?;
        Ok(Checkpointer { shared, thread: Some((thread, interrupt)) })
    }
}

impl Checkpointer {
    /// The log's pages and failed checkpoints so far.
    pub(super) fn health(&self) -> LogHealth {
        LogHealth {
            pages: self.shared.pages.load(Ordering::Relaxed),
            checkpoint_failures: self.shared.failures.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer").field("thread", &self.thread.is_some()).finish()
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some((t, interrupt)) = self.thread.take() {
            // A checkpoint in progress stops at its next page; what it did not copy, the last
            // connection to close copies.
            interrupt.interrupt();
            let _ = t.join();
        }
    }
}

fn run(conn: &Connection, shared: &Shared, every: Duration) {
    let mut failing = false;
    let mut wait = every;
    loop {
        {
            let mut st = shared.state.lock();
            let mut deadline = Instant::now() + wait;
            loop {
                if st.stop {
                    return;
                }
                if st.due {
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if shared.wake.wait_for(&mut st, left).timed_out() {
                    if st.dirty {
                        break;
                    }
                    deadline = Instant::now() + every;
                }
            }
            st.due = false;
            st.dirty = false;
        }
        wait = every;
        match checkpoint(conn) {
            Ok(whole) => {
                if failing {
                    failing = false;
                    tracing::info!("ledger: checkpoints succeed again");
                }
                if !whole {
                    // Readers held frames back: those commits are neither copied nor synced.
                    shared.state.lock().dirty = true;
                    wait = RETRY;
                }
            }
            Err(e) => {
                shared.failures.fetch_add(1, Ordering::Relaxed);
                if !failing {
                    tracing::warn!(error = %e, "ledger: checkpoint failed (tried again after checkpoint_every_ms, or at the next full log)");
                }
                failing = true;
                shared.state.lock().dirty = true;
            }
        }
    }
}

/// One passive checkpoint; whether it copied every frame the log held when it started (the
/// writer may add more meanwhile: those are the next one's).
fn checkpoint(conn: &Connection) -> rusqlite::Result<bool> {
    let (log, done): (i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get(1)?, r.get(2)?)))?;
    Ok(done >= log)
}
