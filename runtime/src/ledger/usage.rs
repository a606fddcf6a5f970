//! The bounds of one store of the ledger (receipts, handles, kept tasks), the shell: the
//! in-memory figures ([`crate::proto::usage::Usage`]) of who keeps what, rebuilt at start from
//! the store's usage index ([`codec::usage_index`]), and the index writes that keep that
//! rebuild right. The store that owns it decides when an entry is added, rewritten or
//! removed; the writes it gets back go into the same batch as the entry's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::codec;
use super::{Op, Store, StoreError};
use crate::proto::usage::{Over, Usage, UsageLimits};

/// A caller as the bounds count it: the principal, or without authentication its address
/// (see `QuotaKey::owner`); `None` when neither is known.
pub(crate) type Caller = Option<Arc<str>>;

/// The figures of one store.
pub(crate) struct StoreUsage {
    index: String,
    /// Held for one check or update, never across an await.
    figures: Mutex<Usage<Caller>>,
    bucket_ms: u64,
    /// When expired members of the index were last trimmed (ms).
    trimmed_at: AtomicU64,
}

impl std::fmt::Debug for StoreUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreUsage").field("index", &self.index).finish_non_exhaustive()
    }
}

impl StoreUsage {
    /// Empty figures of the store `store` (see [`codec::usage_index`]), counted by expiry in
    /// buckets of `bucket_ms`.
    pub(crate) fn new(store: &str, limits: UsageLimits, bucket_ms: u64) -> StoreUsage {
        StoreUsage { index: codec::usage_index(store), figures: Mutex::new(Usage::new(limits, bucket_ms)), bucket_ms: bucket_ms.max(1), trimmed_at: AtomicU64::new(0) }
    }

    /// Count what the store's usage index holds (at start, before anything is served: a
    /// blocking read). Returns how many entries were counted.
    ///
    /// # Errors
    /// The store's.
    pub(crate) fn rebuild(&self, store: &dyn Store, now: u64) -> Result<usize, StoreError> {
        let members = store.index_lowest(&self.index, usize::MAX, now)?;
        let mut figures = self.figures.lock();
        let mut n = 0;
        for (member, expires_ms) in members.into_iter().filter(|(_, e)| *e > now) {
            if let Some((caller, bytes)) = codec::parse_usage_member(&member) {
                figures.add(&caller.map(Arc::from), expires_ms, 1, bytes);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Whether `caller` may keep `count` more entries of `bytes`.
    ///
    /// # Errors
    /// [`Over`].
    pub(crate) fn check(&self, caller: &Caller, now: u64, count: u64, bytes: u64) -> Result<(), Over> {
        self.figures.lock().check(caller, now, count, bytes)
    }

    /// Count the entry `name` of `caller`, of `bytes`, expiring at `expires_ms`; returns the
    /// writes that record it (and trim what expired, now and then).
    pub(crate) fn charge(&self, caller: &Caller, name: &str, expires_ms: u64, bytes: u64, now: u64) -> Vec<Op> {
        self.figures.lock().add(caller, expires_ms, 1, bytes);
        let mut ops = vec![Op::IndexAdd { index: self.index.clone(), member: codec::usage_member(caller.as_deref(), bytes, name), score: expires_ms, expires_ms: u64::MAX }];
        let last = self.trimmed_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= self.bucket_ms && self.trimmed_at.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            ops.push(Op::IndexTrim { index: self.index.clone(), below: now.saturating_add(1) });
        }
        ops
    }

    /// Take back an entry [`StoreUsage::charge`] counted (the same caller, name, expiry and
    /// bytes); returns the write that removes it.
    pub(crate) fn release(&self, caller: &Caller, name: &str, expires_ms: u64, bytes: u64) -> Op {
        self.figures.lock().remove(caller, expires_ms, 1, bytes);
        Op::IndexRemove { index: self.index.clone(), member: codec::usage_member(caller.as_deref(), bytes, name) }
    }

    /// `(entries, bytes)` of `caller` at `now`.
    pub(crate) fn of(&self, caller: &Caller, now: u64) -> (u64, u64) {
        self.figures.lock().caller(caller, now)
    }

    /// `(entries, bytes)` of every caller at `now`.
    pub(crate) fn total(&self, now: u64) -> (u64, u64) {
        self.figures.lock().total(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::MemoryStore;

    #[test]
    fn figures_rebuilt_from_the_index_equal_those_that_wrote_it() {
        let limits = UsageLimits { per_caller_count: 10, per_caller_bytes: 1000, total_bytes: 10_000 };
        let store = MemoryStore::new();
        let written = StoreUsage::new("r", limits, 1000);
        let alice: Caller = Some("alice".into());
        let mut ops = written.charge(&alice, "k1", 50_000, 100, 0);
        ops.extend(written.charge(&None, "k2", 60_000, 30, 0));
        ops.extend(written.charge(&alice, "k3", 70_000, 7, 0));
        ops.push(written.release(&alice, "k3", 70_000, 7));
        ops.extend(written.charge(&alice, "k3", 70_000, 70, 0));
        ops.extend(written.charge(&alice, "old", 500, 1, 0));
        store.apply(&ops).unwrap();
        let read = StoreUsage::new("r", limits, 1000);
        assert_eq!(read.rebuild(&store, 1000).unwrap(), 3, "the expired one is not counted");
        assert_eq!(read.of(&alice, 1000), (2, 170));
        assert_eq!(read.of(&None, 1000), (1, 30));
        assert_eq!(read.total(1000), written.total(1000));
    }
}
