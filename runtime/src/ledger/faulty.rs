//! Stores for tests of what sits above a store: a memory store with a test's hooks before its
//! writes and reads ([`Hooked`], this crate's tests and an embedder's), and, in this crate's
//! own tests, one that fails as disks do.

use bytes::Bytes;

use super::{Durability, MemoryStore, Op, Store, StoreError};

/// What a test's store does before the memory store beneath it ([`Hooked`]).
pub trait StoreHooks: std::fmt::Debug + Send + Sync + 'static {
    /// Before a batch is applied: it may block (a write held by the test) or refuse it.
    ///
    /// # Errors
    /// The refusal the batch gets instead of being applied.
    fn before_apply(&self, _ops: &[Op]) -> Result<(), StoreError> {
        Ok(())
    }
    /// Before a record is read: it may block (a read held by the test).
    fn before_get(&self, _key: &str) {}
}

/// A memory store with a test's hooks before its writes and record reads; every other call
/// goes straight to the memory store. It derefs to the hooks, whose state the test reads.
#[derive(Debug, Default)]
pub struct Hooked<H> {
    inner: MemoryStore,
    hooks: H,
}

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<H: StoreHooks> Store for Hooked<H> {
    fn apply(&self, ops: &[Op]) -> Result<(), StoreError> {
        self.hooks.before_apply(ops)?;
        self.inner.apply(ops)
    }
    fn get(&self, key: &str, now_ms: u64) -> Result<Option<Bytes>, StoreError> {
        self.hooks.before_get(key);
        self.inner.get(key, now_ms)
    }
    fn read_log(&self, log: &str, now_ms: u64) -> Result<Vec<(u64, Bytes)>, StoreError> {
        self.inner.read_log(log, now_ms)
    }
    fn index_lowest(
        &self,
        index: &str,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        self.inner.index_lowest(index, limit, now_ms)
    }
    fn index_len(&self, index: &str, now_ms: u64) -> Result<usize, StoreError> {
        self.inner.index_len(index, now_ms)
    }
    fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        self.inner.sweep(now_ms, limit)
    }
    fn set_durability(&self, _: Durability) {}
    fn tally(&self, tally: &str, now_ms: u64) -> Result<(u64, u64), StoreError> {
        self.inner.tally(tally, now_ms)
    }
    fn incr(&self, key: &str, floor: u64, expires_ms: u64, now_ms: u64) -> Result<u64, StoreError> {
        self.inner.incr(key, floor, expires_ms, now_ms)
    }
}

#[cfg(test)]
pub(crate) use disk::{Refusing, settle_until};

/// This crate's own tests: a store that fails as disks do.
#[cfg(test)]
mod disk {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::Duration;

    use super::{Hooked, Op, StoreError, StoreHooks};

    /// A store that refuses every batch while `full` is set (as a full disk does), and
    /// answers nothing while `stalled` is (as a stalled disk does).
    pub(crate) type Refusing = Hooked<Refuse>;

    /// [`Refusing`]'s hooks.
    #[derive(Debug, Default)]
    pub(crate) struct Refuse {
        pub(crate) full: AtomicBool,
        pub(crate) stalled: AtomicBool,
        pub(crate) attempts: AtomicU64,
    }

    impl StoreHooks for Refuse {
        fn before_apply(&self, _: &[Op]) -> Result<(), StoreError> {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            while self.stalled.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if self.full.load(Ordering::Acquire) {
                return Err(StoreError::Backend("database or disk is full".into()));
            }
            Ok(())
        }
    }

    impl Refuse {
        /// Hold every batch until the returned guard is released or dropped (a failing test
        /// never leaves the writer's thread held, which would hang the ledger's drop).
        pub(crate) fn stall(&self) -> Stall<'_> {
            self.stalled.store(true, Ordering::Release);
            Stall(self)
        }
    }

    /// [`Refusing::stall`]'s guard.
    pub(crate) struct Stall<'a>(&'a Refuse);

    impl Stall<'_> {
        /// Let the held batches through.
        pub(crate) fn release(self) {}
    }

    impl Drop for Stall<'_> {
        fn drop(&mut self) {
            self.0.stalled.store(false, Ordering::Release);
        }
    }

    /// Wait (bounded: 400 pauses of 5 ms) until `cond` holds; the caller asserts it after.
    pub(crate) async fn settle_until(cond: impl Fn() -> bool) {
        for _ in 0..400 {
            if cond() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
