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

/// Members of a usage index read per page when the figures are rebuilt.
const REBUILD_PAGE: usize = 10_000;

/// A caller as the bounds count it: the principal, or without authentication its address
/// (see `QuotaKey::owner`); `None` when neither is known.
pub(crate) type Caller = Option<Arc<str>>;

/// One entry as the bounds count it: its name in the store, when it expires, its bytes (key
/// and record).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub(crate) name: &'a str,
    pub(crate) expires_ms: u64,
    pub(crate) bytes: u64,
}

/// A place held in the figures for an entry not written yet ([`StoreUsage::reserve`]).
#[derive(Debug)]
pub(crate) struct Reservation {
    usage: Arc<StoreUsage>,
    caller: Caller,
    expires_ms: u64,
    bytes: u64,
    held: bool,
}

impl Reservation {
    /// The entry takes the reserved place: counted as `entry` instead (beyond the bounds if
    /// it must: it was admitted). Returns the writes that record it in the usage index.
    pub(crate) fn into_entry(mut self, entry: &Entry<'_>, now: u64) -> Vec<Op> {
        self.held = false;
        {
            let mut f = self.usage.figures.lock();
            f.remove(&self.caller, self.expires_ms, 1, self.bytes);
            f.add(&self.caller, entry.expires_ms, 1, entry.bytes);
        }
        self.usage.index_ops(&self.caller, entry, now)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.held {
            self.usage.figures.lock().remove(&self.caller, self.expires_ms, 1, self.bytes);
        }
    }
}

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
        StoreUsage {
            index: codec::usage_index(store),
            figures: Mutex::new(Usage::new(limits, bucket_ms)),
            bucket_ms: bucket_ms.max(1),
            trimmed_at: AtomicU64::new(0),
        }
    }

    /// Count what the store's usage index holds (at start, before anything is served: a
    /// blocking read). Returns how many entries were counted.
    ///
    /// # Errors
    /// The store's.
    pub(crate) fn rebuild(&self, store: &dyn Store, now: u64) -> Result<usize, StoreError> {
        let mut n = 0;
        let mut after: Option<(u64, String)> = None;
        loop {
            // A page at a time: the index may hold millions of members.
            let page = store.index_page(
                &self.index,
                after.as_ref().map(|(s, m)| (*s, m.as_str())),
                REBUILD_PAGE,
                now,
            )?;
            let mut figures = self.figures.lock();
            for (member, expires_ms) in page.iter().filter(|(_, e)| *e > now) {
                if let Some((caller, bytes)) = codec::parse_usage_member(member) {
                    figures.add(&caller.map(Arc::from), *expires_ms, 1, bytes);
                    n += 1;
                }
            }
            match page.into_iter().last() {
                Some((m, s)) => after = Some((s, m)),
                None => return Ok(n),
            }
        }
    }

    /// The write that records `entry` in the usage index (and trims what expired, now and
    /// then).
    fn index_ops(&self, caller: &Caller, entry: &Entry<'_>, now: u64) -> Vec<Op> {
        let mut ops = vec![Op::IndexAdd {
            index: self.index.clone(),
            member: codec::usage_member(caller.as_deref(), entry.bytes, entry.name),
            score: entry.expires_ms,
            expires_ms: u64::MAX,
        }];
        let last = self.trimmed_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= self.bucket_ms
            && self
                .trimmed_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            ops.push(Op::IndexTrim { index: self.index.clone(), below: now.saturating_add(1) });
        }
        ops
    }

    /// Count `new` for `caller` in place of `old` (its previous record: a rewrite, a move;
    /// `None` for a new entry), in one step under the figures' lock, so that concurrent
    /// changes cannot all pass a bound: refused, changing nothing, when the entry's growth
    /// (or a new entry) would take the caller's or everyone's figures past a bound — unless
    /// `force` (a record that must be written whatever it takes: what it replaces is smaller).
    /// Returns the writes that keep the usage index right.
    ///
    /// # Errors
    /// [`Over`].
    pub(crate) fn replace(
        &self,
        caller: &Caller,
        old: Option<&Entry<'_>>,
        new: &Entry<'_>,
        now: u64,
        force: bool,
    ) -> Result<Vec<Op>, Over> {
        {
            let mut f = self.figures.lock();
            let (count, grows) =
                old.map_or((1, new.bytes), |o| (0, new.bytes.saturating_sub(o.bytes)));
            if !force && (count > 0 || grows > 0) {
                f.check(caller, now, count, grows)?;
            }
            if let Some(o) = old {
                f.remove(caller, o.expires_ms, 1, o.bytes);
            }
            f.add(caller, new.expires_ms, 1, new.bytes);
        }
        let mut ops = Vec::with_capacity(3);
        if let Some(o) = old {
            ops.push(Op::IndexRemove {
                index: self.index.clone(),
                member: codec::usage_member(caller.as_deref(), o.bytes, o.name),
            });
        }
        ops.extend(self.index_ops(caller, new, now));
        Ok(ops)
    }

    /// Take back an entry counted before (the same caller, name, expiry and bytes); returns
    /// the write that removes it from the usage index.
    pub(crate) fn release(&self, caller: &Caller, old: &Entry<'_>) -> Op {
        self.figures.lock().remove(caller, old.expires_ms, 1, old.bytes);
        Op::IndexRemove {
            index: self.index.clone(),
            member: codec::usage_member(caller.as_deref(), old.bytes, old.name),
        }
    }

    /// Hold a place for one entry of `bytes` expiring at `expires_ms` (checked and counted in
    /// one step, so concurrent callers cannot all pass the bounds), given back when the
    /// [`Reservation`] is dropped unless [`Reservation::into_entry`] made it an entry.
    ///
    /// # Errors
    /// [`Over`].
    pub(crate) fn reserve(
        self: &Arc<Self>,
        caller: &Caller,
        now: u64,
        expires_ms: u64,
        bytes: u64,
    ) -> Result<Reservation, Over> {
        let mut f = self.figures.lock();
        f.check(caller, now, 1, bytes)?;
        f.add(caller, expires_ms, 1, bytes);
        Ok(Reservation {
            usage: Arc::clone(self),
            caller: caller.clone(),
            expires_ms,
            bytes,
            held: true,
        })
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
        let limits =
            UsageLimits { per_caller_count: 10, per_caller_bytes: 1000, total_bytes: 10_000 };
        let store = MemoryStore::new();
        let written = StoreUsage::new("r", limits, 1000);
        let alice: Caller = Some("alice".into());
        let e = |name, expires_ms, bytes| Entry { name, expires_ms, bytes };
        let mut ops = written.replace(&alice, None, &e("k1", 50_000, 100), 0, false).unwrap();
        ops.extend(written.replace(&None, None, &e("k2", 60_000, 30), 0, false).unwrap());
        ops.extend(written.replace(&alice, None, &e("k3", 70_000, 7), 0, false).unwrap());
        ops.extend(
            written
                .replace(&alice, Some(&e("k3", 70_000, 7)), &e("k3", 70_000, 70), 0, false)
                .unwrap(),
        );
        ops.extend(written.replace(&alice, None, &e("old", 500, 1), 0, false).unwrap());
        store.apply(&ops).unwrap();
        let read = StoreUsage::new("r", limits, 1000);
        assert_eq!(read.rebuild(&store, 1000).unwrap(), 3, "the expired one is not counted");
        assert_eq!(read.of(&alice, 1000), (2, 170));
        assert_eq!(read.of(&None, 1000), (1, 30));
        assert_eq!(read.total(1000), written.total(1000));
    }

    #[test]
    fn concurrent_reservations_cannot_all_pass_a_bound_and_a_dropped_one_gives_its_place_back() {
        let limits =
            UsageLimits { per_caller_count: 3, per_caller_bytes: 1000, total_bytes: 10_000 };
        let u = Arc::new(StoreUsage::new("t", limits, 1000));
        let alice: Caller = Some("alice".into());
        let held: Vec<_> = (0..3).map(|_| u.reserve(&alice, 0, 9_000, 10).unwrap()).collect();
        assert!(
            u.reserve(&alice, 0, 9_000, 10).is_err(),
            "three places held: a fourth is refused before any is written"
        );
        let mut held = held.into_iter();
        let first = held.next().unwrap();
        let ops = first.into_entry(&Entry { name: "t1", expires_ms: 9_000, bytes: 400 }, 0);
        assert_eq!(ops.len(), 1);
        assert_eq!(u.of(&alice, 0), (3, 420), "the entry's own bytes replace the reserved ones");
        drop(held);
        assert_eq!(u.of(&alice, 0), (1, 400), "the dropped reservations gave their places back");
    }

    #[test]
    fn a_rewrite_that_grows_past_a_bound_is_refused_unless_forced_and_changes_nothing() {
        let limits =
            UsageLimits { per_caller_count: 10, per_caller_bytes: 100, total_bytes: 10_000 };
        let u = StoreUsage::new("h", limits, 1000);
        let bob: Caller = Some("bob".into());
        let small = Entry { name: "h1", expires_ms: 5_000, bytes: 60 };
        u.replace(&bob, None, &small, 0, false).unwrap();
        let big = Entry { name: "h1", expires_ms: 6_000, bytes: 120 };
        assert!(u.replace(&bob, Some(&small), &big, 0, false).is_err());
        assert_eq!(u.of(&bob, 0), (1, 60), "unchanged");
        let smaller = Entry { name: "h1", expires_ms: 6_000, bytes: 50 };
        u.replace(&bob, Some(&small), &smaller, 0, false).unwrap();
        assert_eq!(u.of(&bob, 0), (1, 50));
        u.replace(&bob, Some(&smaller), &big, 0, true).unwrap();
        assert_eq!(u.of(&bob, 0), (1, 120), "forced");
    }
}
