//! A store that fails as disks and networks do, for tests of what sits above a store.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use super::{Durability, MemoryStore, Op, Store};

/// A store that refuses every batch while `full` is set (as a full disk does), and
/// answers nothing while `stalled` is (as a stalled disk does).
#[derive(Debug, Default)]
pub(crate) struct Refusing {
    inner: MemoryStore,
    pub(crate) full: AtomicBool,
    pub(crate) stalled: AtomicBool,
    pub(crate) attempts: AtomicU64,
}

impl Store for Refusing {
    fn apply(&self, ops: &[Op]) -> Result<(), crate::ledger::StoreError> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        while self.stalled.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.full.load(Ordering::Acquire) {
            return Err(crate::ledger::StoreError::Backend("database or disk is full".into()));
        }
        self.inner.apply(ops)
    }
    fn get(&self, key: &str, now_ms: u64) -> Result<Option<Bytes>, crate::ledger::StoreError> {
        self.inner.get(key, now_ms)
    }
    fn read_log(
        &self,
        log: &str,
        now_ms: u64,
    ) -> Result<Vec<(u64, Bytes)>, crate::ledger::StoreError> {
        self.inner.read_log(log, now_ms)
    }
    fn index_lowest(
        &self,
        index: &str,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<(String, u64)>, crate::ledger::StoreError> {
        self.inner.index_lowest(index, limit, now_ms)
    }
    fn index_len(&self, index: &str, now_ms: u64) -> Result<usize, crate::ledger::StoreError> {
        self.inner.index_len(index, now_ms)
    }
    fn sweep(&self, now_ms: u64, limit: usize) -> Result<usize, crate::ledger::StoreError> {
        self.inner.sweep(now_ms, limit)
    }
    fn set_durability(&self, _: Durability) {}
    fn tally(&self, tally: &str, now_ms: u64) -> Result<(u64, u64), crate::ledger::StoreError> {
        self.inner.tally(tally, now_ms)
    }
    fn incr(
        &self,
        key: &str,
        floor: u64,
        expires_ms: u64,
        now_ms: u64,
    ) -> Result<u64, crate::ledger::StoreError> {
        self.inner.incr(key, floor, expires_ms, now_ms)
    }
}

impl Refusing {
    /// Hold every batch until the returned guard is released or dropped (a failing test
    /// never leaves the writer's thread held, which would hang the ledger's drop).
    pub(crate) fn stall(&self) -> Stall<'_> {
        self.stalled.store(true, Ordering::Release);
        Stall(self)
    }
}

/// [`Refusing::stall`]'s guard.
pub(crate) struct Stall<'a>(&'a Refusing);

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
