//! The ledger's reads for the async shells (a handle's or a task's record, a receipt, a
//! session to revive, a shadow copy): run on the runtime's blocking threads, so that a slow
//! disk stalls the requests that read it and never an HTTP worker or an actor's arbiter,
//! whose other requests go on.
//!
//! Bounded: at most [`READ_THREADS`] reads run at once (the SQLite store keeps as many reader
//! connections), at most [`READ_QUEUE`] more wait (without a thread); one more is refused at
//! once ([`ReadError::Busy`]: the store is slower than the traffic) rather than queued
//! without end. A read on the blocking pool also keeps a test's paused clock from
//! auto-advancing while it runs (tokio's rule for blocking tasks).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Semaphore;

use super::{Store, StoreError};
use crate::stats::histogram::{Histo, LATENCY_BOUNDS};

/// Reads running at once.
pub const READ_THREADS: usize = 4;
/// Reads waiting for one of them, at most.
pub const READ_QUEUE: usize = 1024;

/// Why a read did not run, or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// [`READ_QUEUE`] reads wait already.
    #[error("the ledger's read queue is full")]
    Busy,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The reads of one store.
pub struct Reads {
    store: Arc<dyn Store>,
    /// Places among the reads admitted (running or waiting).
    admitted: Arc<Semaphore>,
    /// Places among the reads running.
    running: Arc<Semaphore>,
    /// What the reads took and how they failed, counted on the reading threads.
    stats: Arc<ReadStats>,
}

#[derive(Debug)]
struct ReadStats {
    /// How long each read took the store (on Redis: its round trips).
    seconds: Histo,
    /// Reads the store failed.
    errors: AtomicU64,
    /// Reads refused because [`READ_QUEUE`] waited already.
    refused: AtomicU64,
}

/// What the reads did, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadsSnapshot {
    /// Reads the store failed.
    pub errors: u64,
    /// Reads refused with the queue full.
    pub refused: u64,
}

impl std::fmt::Debug for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reads")
            .field("running", &(READ_THREADS - self.running.available_permits()))
            .finish_non_exhaustive()
    }
}

impl Reads {
    /// The reads of `store`.
    #[must_use]
    pub fn start(store: &Arc<dyn Store>) -> Arc<Reads> {
        Arc::new(Reads {
            store: Arc::clone(store),
            admitted: Arc::new(Semaphore::new(READ_THREADS + READ_QUEUE)),
            running: Arc::new(Semaphore::new(READ_THREADS)),
            stats: Arc::new(ReadStats {
                seconds: Histo::new(LATENCY_BOUNDS),
                errors: AtomicU64::new(0),
                refused: AtomicU64::new(0),
            }),
        })
    }

    /// How long reads took the store.
    #[must_use]
    pub fn histogram(&self) -> &Histo {
        &self.stats.seconds
    }

    /// Reads failed and refused so far.
    #[must_use]
    pub fn snapshot(&self) -> ReadsSnapshot {
        ReadsSnapshot {
            errors: self.stats.errors.load(Ordering::Relaxed),
            refused: self.stats.refused.load(Ordering::Relaxed),
        }
    }

    /// Run `read` on a blocking thread and wait for its answer. Must be called on a tokio
    /// runtime (every actix arbiter is one).
    ///
    /// # Errors
    /// [`ReadError::Busy`] when the queue is full; what `read` returns.
    pub async fn run<T: Send + 'static>(
        &self,
        read: impl FnOnce(&dyn Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ReadError> {
        let admitted = Arc::clone(&self.admitted).try_acquire_owned().map_err(|_| {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            ReadError::Busy
        })?;
        let running =
            Arc::clone(&self.running).acquire_owned().await.map_err(|_| ReadError::Busy)?;
        let (store, stats) = (Arc::clone(&self.store), Arc::clone(&self.stats));
        let done = tokio::task::spawn_blocking(move || {
            let started = tokio::time::Instant::now();
            let r = read(store.as_ref());
            stats.seconds.observe(started.elapsed().as_secs_f64());
            if r.is_err() {
                stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            drop((running, admitted));
            r
        });
        // A read that panicked, or was dropped unrun (the runtime stops), answers as busy.
        done.await.map_err(|_| ReadError::Busy)?.map_err(ReadError::Store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{MemoryStore, Op};

    #[tokio::test]
    async fn a_read_runs_on_another_thread_and_answers() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        store
            .apply(&[Op::Put {
                key: "k".into(),
                value: bytes::Bytes::from_static(b"v"),
                expires_ms: u64::MAX,
            }])
            .unwrap();
        let reads = Reads::start(&store);
        let here = std::thread::current().id();
        let (value, there) =
            reads.run(|s| Ok((s.get("k", 0)?, std::thread::current().id()))).await.unwrap();
        assert_eq!(value.as_deref(), Some(&b"v"[..]));
        assert_ne!(there, here, "not on the asking thread");
        // Timed, and a failed read counted.
        let failed = reads.run(|_| Err::<(), _>(StoreError::Backend("down".into()))).await;
        assert!(matches!(failed, Err(ReadError::Store(_))));
        assert_eq!(reads.histogram().count(), 2);
        assert_eq!(reads.snapshot(), ReadsSnapshot { errors: 1, refused: 0 });
    }

    #[tokio::test]
    async fn past_the_queue_bound_a_read_is_refused_at_once_and_reads_run_again_once_it_drains() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let reads = Arc::new(Reads::start(&store));
        // Every running place held by reads that wait for the gate, then the queue filled.
        let gate = Arc::new(std::sync::Barrier::new(READ_THREADS + 1));
        let mut held = Vec::new();
        for _ in 0..READ_THREADS {
            let (r, g) = (Arc::clone(&reads), Arc::clone(&gate));
            held.push(tokio::spawn(async move {
                r.run(move |_| {
                    g.wait();
                    Ok(())
                })
                .await
            }));
        }
        while reads.running.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        let mut queued = Vec::new();
        for _ in 0..READ_QUEUE {
            let r = Arc::clone(&reads);
            queued.push(tokio::spawn(async move { r.run(|_| Ok(())).await }));
        }
        while reads.admitted.available_permits() > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(reads.run(|_| Ok(())).await, Err(ReadError::Busy));
        assert_eq!(reads.snapshot(), ReadsSnapshot { errors: 0, refused: 1 }, "counted");
        tokio::task::spawn_blocking(move || gate.wait()).await.unwrap();
        for h in held.into_iter().chain(queued) {
            assert!(h.await.unwrap().is_ok());
        }
        assert_eq!(reads.run(|_| Ok(7)).await, Ok(7), "drained: reads run again");
    }
}
