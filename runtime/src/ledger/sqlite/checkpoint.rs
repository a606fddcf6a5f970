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
//! A passive checkpoint never restarts the log: the log restarts at a commit only when all of
//! it is copied and no reader uses it, and under steady writes the writer adds frames while the
//! thread copies. So the writer, after a commit that left a full log, finishes it
//! (`finish_log`): a passive checkpoint of the last [`TAIL`] frames or fewer the thread left
//! (a stall the size of SQLite's own checkpoints), and past [`HARD_FACTOR`] times `pages` (the
//! thread cannot keep up, readers hold it back, or it fails) a `RESTART` checkpoint after the
//! thread's current one, waiting up to its busy timeout for readers. The next commit then
//! starts the log again, and the file is cut back to `2 × pages` (`journal_size_limit`).
//! Checkpoints take an in-process lock first: SQLite's own does not wait.

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
/// Frames of a full log the thread may leave uncopied for the writer to copy itself (and so
/// restart the log): SQLite's own checkpoints copy 1,000 at a time on the writer.
const TAIL: u32 = 1024;

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
    /// The last checkpoint's `(log, copied)` frames, of the log since its last restart:
    /// stored by the thread and by the writer's [`finish_log`], forgotten by the hook when it
    /// sees the log restart.
    copied: (u32, u32),
    /// Restarts of the log the hook saw: a thread's checkpoint that ended across one stores
    /// no record (it was of the log before).
    restarts: u64,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Pages in the log after the last commit (the hook's count), for the metrics.
    pages: AtomicU64,
    /// Checkpoints that failed, for the metrics.
    failures: AtomicU64,
    /// Held by whoever checkpoints (the thread, or the writer finishing a log): SQLite's own
    /// checkpoint lock does not wait, so the writer would otherwise fail against the thread.
    ckpt: Mutex<()>,
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
        // Frames after the last commit: fewer now means the log restarted.
        let mut last_frames = 0;
        // Registering a WAL hook replaces SQLite's automatic checkpoint (which is one). The
        // hook runs after the commit released its write lock.
        writer
            .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, frames: c_int| {
                // Frames in the log since it last restarted, copied ones included.
                let frames = u32::try_from(frames).unwrap_or(0);
                hook.pages.store(u64::from(frames), Ordering::Relaxed);
                if frames < last_frames {
                    // A checkpoint's record of the log before says nothing of this one (once
                    // this log grew past it, it would pass for one of this log). A restart by
                    // a commit of more frames than the whole log before goes unseen: that log
                    // was small, and the record wrong by at most that commit.
                    let mut st = hook.state.lock();
                    st.copied = (0, 0);
                    st.restarts += 1;
                }
                last_frames = frames;
                if frames < hard && failed_at.take().is_some() {
                    tracing::info!("ledger: the log is back within its bound");
                }
                let full = frames >= pages;
                if full {
                    finish_log(wal, &hook, frames, pages, hard, &mut failed_at);
                }
                let mut st = hook.state.lock();
                st.dirty = true;
                if full && !st.due {
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

    /// One of the thread's checkpoints, run on `conn` by a test in its place.
    #[cfg(test)]
    pub(super) fn checkpoint_as_the_thread(&self, conn: &Connection) -> bool {
        checkpoint(conn, &self.shared).unwrap()
    }

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

/// On the writer, after a commit that left `frames` in a log of `pages` or more: copy what the
/// checkpointer has not, so that the next commit restarts the log. A passive checkpoint on
/// another connection never gets there under steady writes (the writer adds frames while it
/// copies; the log restarts only when, at a commit's start, all of it is copied), so the log
/// grew past its bound in a storm. Here nobody writes meanwhile.
/// - When the thread's last checkpoint left at most [`TAIL`] frames of this log uncopied (a
///   quarter of `pages` if that is fewer) and
///   the thread is idle: a passive checkpoint of that tail (a short stall, the size SQLite's
///   own checkpoints have).
/// - Past `hard` (the thread cannot keep up, readers hold it back, or it fails): a `RESTART`
///   checkpoint after the thread's current one ends, waiting (the writer's busy timeout) for
///   readers. Its failure (a disk that refuses, readers past the timeout) is not this
///   commit's, which is done: reported, the batch would be retried.
fn finish_log(
    wal: &mut rusqlite::hooks::Wal,
    shared: &Shared,
    frames: u32,
    pages: u32,
    hard: u32,
    failed_at: &mut Option<u32>,
) {
    let (log_at, done) = shared.state.lock().copied;
    // A record of an older log (one that restarted since) says nothing of this one.
    let done = if log_at > frames { 0 } else { done };
    let guard = if frames >= hard {
        if failed_at.is_some_and(|f| frames < f.saturating_add(pages / 8)) {
            return;
        }
        Some(shared.ckpt.lock())
    } else if frames.saturating_sub(done) <= TAIL.min(pages / 4) {
        shared.ckpt.try_lock()
    } else {
        None
    };
    let Some(_guard) = guard else { return };
    let mode = if frames >= hard { CheckpointMode::RESTART } else { CheckpointMode::PASSIVE };
    match wal.checkpoint_v2(mode) {
        Ok((log, done)) => {
            let part = |v: c_int| u32::try_from(v).unwrap_or(0);
            shared.state.lock().copied = (part(log), part(done));
            if failed_at.take().is_some() {
                tracing::info!("ledger: the writer's checkpoint succeeded again");
            }
        }
        Err(e) => {
            shared.failures.fetch_add(1, Ordering::Relaxed);
            // A tail's copy that failed is the thread's to try again (it says so when its own
            // fail); only a failed `RESTART` past the bound is retried here as the log grows.
            if frames < hard {
                tracing::debug!(error = %e, frames, "ledger: the writer could not copy the log's tail");
                return;
            }
            if failed_at.is_none() {
                tracing::warn!(error = %e, frames, "ledger: the writer could not checkpoint the log (tried again as it grows)");
            }
            *failed_at = Some(frames);
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
        match checkpoint(conn, shared) {
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
            // A stop interrupts a checkpoint in progress: not a failure.
            Err(_) if shared.state.lock().stop => return,
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

/// One passive checkpoint, after the writer's own (the in-process lock); whether it copied
/// every frame the log held when it started (the writer may add more meanwhile: those are the
/// next one's). Busy (another process checkpointing, say an operator's `sqlite3`) counts as
/// not whole.
fn checkpoint(conn: &Connection, shared: &Shared) -> rusqlite::Result<bool> {
    let _guard = shared.ckpt.lock();
    let restarts = shared.state.lock().restarts;
    let (busy, log, done): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    if busy != 0 || log < 0 {
        return Ok(false);
    }
    let part = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
    let mut st = shared.state.lock();
    // A commit may have restarted the log once this copy ended (it copied all of it): then
    // the record is of the log before, and the hook forgot that one.
    if st.restarts == restarts {
        st.copied = (part(log), part(done));
    }
    Ok(done >= log)
}
