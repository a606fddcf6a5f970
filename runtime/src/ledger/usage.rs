//! The bounds of one store of the ledger (receipts, handles, kept tasks), the shell: the
//! in-memory figures ([`crate::proto::usage::Usage`]) of who keeps what, rebuilt at start from
//! the store's usage index ([`codec::usage_index`]), and the index writes that keep that
//! rebuild right. The store that owns it decides when an entry is added, rewritten or
//! removed; the writes it gets back go into the same batch as the entry's own. On a ledger
//! several hosts share, those writes also keep the tallies of every host's figures
//! ([`codec::usage_tally`]), read in the background when a caller's are stale (see
//! [`crate::proto::usage`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::codec;
use super::{Op, Reads, Store, StoreError};
use crate::clock::Clock;
use crate::proto::usage::{Over, Usage, UsageLimits, bucket_end};

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
            f.unhold(&self.caller, self.bytes);
            f.add(&self.caller, entry.expires_ms, 1, entry.bytes);
        }
        let mut ops = self.usage.index_ops(&self.caller, entry, now);
        ops.extend(self.usage.tallies(&self.caller, entry.expires_ms, 1, entry.bytes, now, true));
        ops
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.held {
            let mut f = self.usage.figures.lock();
            f.remove(&self.caller, self.expires_ms, 1, self.bytes);
            f.unhold(&self.caller, self.bytes);
        }
    }
}

/// Reads of the other hosts' figures under way at once, at most (past it a read is skipped
/// and asked for again by the next write: they never take the request reads' places).
const READS_ACROSS: usize = 4;

/// What reads the other hosts' figures of a shared ledger.
struct Across {
    reads: Arc<Reads>,
    writer: Arc<super::Writer>,
    clock: Clock,
    store: String,
    reading: Arc<tokio::sync::Semaphore>,
}

/// The figures of one store.
pub(crate) struct StoreUsage {
    index: String,
    /// Held for one check or update, never across an await.
    figures: Arc<Mutex<Usage<Caller>>>,
    /// On a shared ledger.
    across: Option<Across>,
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
            figures: Arc::new(Mutex::new(Usage::new(limits, bucket_ms))),
            across: None,
            bucket_ms: bucket_ms.max(1),
            trimmed_at: AtomicU64::new(0),
        }
    }

    /// The figures of store `store` (`what` it keeps, for the log) on `ledger`, counted from
    /// the ledger's usage index (a failure is logged: the bounds start from zero); on a
    /// shared ledger every write also keeps the tallies, and a caller's stale figures are
    /// read from them.
    pub(crate) fn open(
        ledger: &super::Ledger,
        store: &str,
        what: &str,
        limits: UsageLimits,
        bucket_ms: u64,
    ) -> StoreUsage {
        let mut usage = StoreUsage::new(store, limits, bucket_ms);
        if ledger.shared {
            usage.figures.lock().share();
            usage.across = Some(Across {
                reads: Arc::clone(&ledger.reads),
                writer: Arc::clone(&ledger.writer),
                clock: ledger.clock,
                store: store.to_owned(),
                reading: Arc::new(tokio::sync::Semaphore::new(READS_ACROSS)),
            });
        }
        match usage.rebuild(ledger.writer.store().as_ref(), ledger.clock.now().0) {
            Ok(n) if n > 0 => tracing::info!(entries = n, "{what} counted from the ledger"),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "cannot count the {what} in the ledger: their bounds start from zero");
            }
        }
        usage
    }

    /// The tally writes of `count` entries of `bytes` expiring at `expires_ms` for `caller`
    /// (and in the total), taken back unless `add`; none unless the ledger is shared.
    fn tallies(
        &self,
        caller: &Caller,
        expires_ms: u64,
        count: i64,
        bytes: u64,
        now: u64,
        add: bool,
    ) -> Vec<Op> {
        let Some(a) = &self.across else { return Vec::new() };
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        let (count, bytes) = if add { (count, bytes) } else { (-count, -bytes) };
        let bucket = bucket_end(expires_ms, self.bucket_ms);
        [codec::usage_tally(&a.store, Some(caller.as_deref())), codec::usage_tally(&a.store, None)]
            .into_iter()
            .map(|tally| Op::Tally { tally, bucket, count, bytes, now_ms: now })
            .collect()
    }

    /// Read `caller`'s figures across the hosts in the background, when they are due: this
    /// host's figures noted, then once what it queued is committed, its tallies.
    fn read_across(&self, caller: &Caller, due: bool) {
        let Some(a) = self.across.as_ref().filter(|_| due) else { return };
        let figures = Arc::clone(&self.figures);
        let (Ok(rt), Ok(permit)) =
            (tokio::runtime::Handle::try_current(), Arc::clone(&a.reading).try_acquire_owned())
        else {
            figures.lock().read_done(caller, None, false, None);
            return;
        };
        let (reads, writer, clock, caller) =
            (Arc::clone(&a.reads), Arc::clone(&a.writer), a.clock, caller.clone());
        let (mine, all) = (
            codec::usage_tally(&a.store, Some(caller.as_deref())),
            codec::usage_tally(&a.store, None),
        );
        rt.spawn(async move {
            let _permit = permit;
            // This host's figures are noted first, then everything it queued until then is
            // committed, then the tallies are read: what it counted is in them (a write
            // counted after the note may be counted twice until the next read, never missed).
            let now = clock.now().0;
            let total_too = figures.lock().read_begins(&caller, now);
            if writer.wait_committed(writer.barrier()).await.is_err() {
                figures.lock().read_done(&caller, None, total_too, None);
                return;
            }
            let found = reads
                .run(move |store| {
                    let total = if total_too { Some(store.tally(&all, now)?.1) } else { None };
                    Ok((store.tally(&mine, now)?, total))
                })
                .await
                .map_err(|e| tracing::warn!(error = %e, "cannot read a caller's figures across the hosts"))
                .ok();
            let (found, total) = found.map_or((None, None), |(f, t)| (Some(f), t));
            figures.lock().read_done(&caller, found, total_too, total);
        });
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
        let due = {
            let mut f = self.figures.lock();
            let (count, grows) =
                old.map_or((1, new.bytes), |o| (0, new.bytes.saturating_sub(o.bytes)));
            let due = f.read_due(caller, now);
            if !force
                && (count > 0 || grows > 0)
                && let Err(over) = f.check(caller, now, count, grows)
            {
                drop(f);
                self.read_across(caller, due);
                return Err(over);
            }
            if let Some(o) = old {
                f.remove(caller, o.expires_ms, 1, o.bytes);
            }
            f.add(caller, new.expires_ms, 1, new.bytes);
            due
        };
        self.read_across(caller, due);
        let mut ops = Vec::with_capacity(7);
        if let Some(o) = old {
            ops.push(Op::IndexRemove {
                index: self.index.clone(),
                member: codec::usage_member(caller.as_deref(), o.bytes, o.name),
            });
            ops.extend(self.tallies(caller, o.expires_ms, 1, o.bytes, now, false));
        }
        ops.extend(self.index_ops(caller, new, now));
        ops.extend(self.tallies(caller, new.expires_ms, 1, new.bytes, now, true));
        Ok(ops)
    }

    /// Take back an entry counted before (the same caller, name, expiry and bytes); returns
    /// the writes that remove it from the usage index (and the tallies).
    pub(crate) fn release(&self, caller: &Caller, old: &Entry<'_>) -> Vec<Op> {
        self.figures.lock().remove(caller, old.expires_ms, 1, old.bytes);
        let now = self.across.as_ref().map_or(0, |a| a.clock.now().0);
        let mut ops = vec![Op::IndexRemove {
            index: self.index.clone(),
            member: codec::usage_member(caller.as_deref(), old.bytes, old.name),
        }];
        ops.extend(self.tallies(caller, old.expires_ms, 1, old.bytes, now, false));
        ops
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
        let due = f.read_due(caller, now);
        let checked = f.check(caller, now, 1, bytes);
        if checked.is_ok() {
            f.add(caller, expires_ms, 1, bytes);
            f.hold(caller, bytes);
        }
        drop(f);
        self.read_across(caller, due);
        checked?;
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
