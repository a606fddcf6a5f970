//! Checkpoints of the SQLite ledger's write-ahead log, off the writer's thread (issue 23).
//!
//! By default SQLite checkpoints from the connection that commits, once the log holds 1,000
//! pages: the writer copies them into the main file and syncs it while every batch behind it
//! waits. A storm of new sessions dirties a whole page per record (their keys are random), so
//! that checkpoint was a fifth of an `initialize`'s CPU and a stall of tens of milliseconds.
//!
//! Here a thread of its own, on its own connection, runs passive checkpoints, which block
//! neither the writer nor the readers: when the log holds [`Checkpointing::pages`] pages, and
//! [`Checkpointing::every`] after the last one when anything was committed since (so a power
//! loss in `batched` mode loses at most that long of commits, however quiet the ledger). A
//! larger log lets one checkpoint copy a page that many commits rewrote once. Should the log
//! reach [`HARD_FACTOR`] times `pages` (the checkpointer cannot keep up, or keeps failing),
//! the writer checkpoints it itself after its commit, as SQLite would have: the log's size
//! stays bounded.

use std::os::raw::c_int;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use rusqlite::Connection;
use tokio::time::Instant;

use super::super::StoreError;

/// The log's size, in multiples of [`Checkpointing::pages`], past which the writer checkpoints
/// it itself.
pub(crate) const HARD_FACTOR: u32 = 4;

/// When the log is copied into the main file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpointing {
    /// Pages (4 KiB each) in the log that start a checkpoint.
    pub pages: u32,
    /// The longest a commit waits for a checkpoint (its sync of the log).
    pub every: Duration,
}

impl Default for Checkpointing {
    fn default() -> Self {
        Checkpointing { pages: 16384, every: Duration::from_secs(1) }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Something was committed since the last checkpoint.
    dirty: bool,
    /// The log holds `pages` pages: checkpoint now.
    due: bool,
    stop: bool,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// The checkpointer thread; stopped and joined when dropped.
#[derive(Debug)]
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
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
        let hook = Arc::clone(&shared);
        // Registering a WAL hook replaces SQLite's automatic checkpoint (which is one).
        writer
            .wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, frames: c_int| {
                let frames = u32::try_from(frames).unwrap_or(0);
                if frames >= hard {
                    // The checkpointer is behind: copy now, here, as SQLite would. Its failure
                    // (the checkpointer holding the checkpoint lock, a full disk) is not this
                    // commit's, which is done: it must not be reported as failed.
                    let _ = wal.checkpoint();
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
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("ledger-checkpoint".into())
            .spawn(move || run(&conn, &thread_shared, cfg.every))
            .map_err(|e| StoreError::Backend(format!("cannot start the checkpointer: {e}")))?;
        Ok(Checkpointer { shared, thread: Some(thread) })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            // A checkpoint in progress ends first (bounded by the log's size).
            let _ = t.join();
        }
    }
}

fn run(conn: &Connection, shared: &Shared, every: Duration) {
    let mut failing = false;
    loop {
        {
            let mut st = shared.state.lock();
            let mut deadline = Instant::now() + every;
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
        match checkpoint(conn) {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("ledger: checkpoints succeed again");
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "ledger: checkpoint failed (retried; the log grows until the writer checkpoints it)");
                }
                failing = true;
                // Tried again at the next commit past the pages, or after `every`.
                shared.state.lock().dirty = true;
            }
        }
    }
}

/// Passive checkpoints until the log is copied whole (the writer may add to it meanwhile),
/// at most a few rounds.
fn checkpoint(conn: &Connection) -> rusqlite::Result<()> {
    for _ in 0..3 {
        let (log, done): (i64, i64) =
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get(1)?, r.get(2)?)))?;
        if done >= log {
            break;
        }
    }
    Ok(())
}
