//! What callers keep in one store of the ledger (idempotency receipts, state handles, kept
//! tasks), counted in memory so that its bounds are checked before anything runs, without a
//! read of the ledger (sans-IO: `now` is passed in).
//!
//! Every entry is counted (one, and its bytes) under its caller and under the total, in the
//! bucket of its expiry (rounded up to the bucket width, so an entry never leaves the figures
//! before it expires; it may stay up to one bucket longer). Buckets that expired are dropped:
//! the caller's when its figures are read, every caller's at most once a bucket width.
//! [`Usage::remove`] takes back what [`Usage::add`] counted with the same expiry (an entry
//! rewritten, moved or deleted): it takes from that expiry's bucket, so removing an entry
//! that was never counted (written before the bounds existed) takes from the others counted
//! there; figures never go below zero.
//!
//! Memory: per caller, one map entry per non-empty bucket; callers with nothing left are
//! forgotten by the periodic sweep.
//!
//! On a ledger several hosts share, each host counts what it writes, and the ledger keeps a
//! tally of every host's (per caller and in total, by the same buckets). A check adds what
//! the other hosts keep as last read ([`Usage::read_due`], [`Usage::read_done`]): the tally
//! read less this host's own figures when the read began. A caller's figures are read again
//! once they are [`FRESH_MS`] old (a write that finds them stale does not wait for the read),
//! so a bound holds across hosts within what the other hosts wrote since the last read (at
//! most [`FRESH_MS`] and one read old while the caller keeps writing; a caller's first write
//! on a host is checked against this host's figures while its first read is under way).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Figures of the other hosts are read again once older than this (ms).
pub(crate) const FRESH_MS: u64 = 1_000;

/// Callers whose other hosts' figures are kept; past it, those read longest ago are
/// forgotten (and read again when they come back).
const MAX_ELSEWHERE: usize = 10_000;

/// When the bucket of an entry expiring at `expires_ms` ends (buckets `bucket_ms` wide).
#[must_use]
pub(crate) fn bucket_end(expires_ms: u64, bucket_ms: u64) -> u64 {
    let w = bucket_ms.max(1);
    expires_ms.div_ceil(w).saturating_mul(w)
}

/// A caller's figures on the other hosts sharing the ledger.
#[derive(Debug, Default)]
struct Elsewhere {
    /// `(entries, bytes)` the other hosts keep, as last read (may be negative: this host
    /// took back entries another host counted).
    others: (i64, i64),
    /// When that read began (`None`: never read).
    read_at: Option<u64>,
    /// A read under way: when it was asked for, and this host's figures for the caller when
    /// it began ([`Usage::read_begins`]).
    reading: Option<(u64, Option<(u64, u64)>)>,
}

/// `held` plus `others` (never below zero).
fn with_others(held: u64, others: i64) -> u64 {
    i64::try_from(held).unwrap_or(i64::MAX).saturating_add(others).max(0).unsigned_abs()
}

/// The bounds of one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UsageLimits {
    /// Entries one caller may keep.
    pub per_caller_count: u64,
    /// Bytes one caller may keep.
    pub per_caller_bytes: u64,
    /// Bytes every caller together may keep.
    pub total_bytes: u64,
}

/// Why an entry may not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Over {
    /// The caller keeps as many entries, or bytes, as it may.
    Caller {
        /// Until its oldest entry expires (ms; at least 1 s).
        retry_after_ms: u64,
    },
    /// Every caller together keeps as many bytes as the store may.
    Total {
        /// Until the oldest entry of anyone expires (ms; at least 1 s).
        retry_after_ms: u64,
    },
}

impl Over {
    /// `Retry-After` in whole seconds.
    #[must_use]
    pub(crate) fn retry_after_s(self) -> u32 {
        let (Over::Caller { retry_after_ms } | Over::Total { retry_after_ms }) = self;
        u32::try_from(retry_after_ms.div_ceil(1000)).unwrap_or(u32::MAX).max(1)
    }
}

/// Counts and bytes by expiry bucket.
#[derive(Debug, Default)]
struct Account {
    count: u64,
    bytes: u64,
    /// Bucket end (ms) → (count, bytes).
    buckets: BTreeMap<u64, (u64, u64)>,
}

impl Account {
    fn add(&mut self, bucket: u64, count: u64, bytes: u64) {
        let b = self.buckets.entry(bucket).or_default();
        b.0 = b.0.saturating_add(count);
        b.1 = b.1.saturating_add(bytes);
        self.count = self.count.saturating_add(count);
        self.bytes = self.bytes.saturating_add(bytes);
    }

    fn remove(&mut self, bucket: u64, count: u64, bytes: u64) {
        // Already expired and dropped: nothing left to take back.
        let Some(b) = self.buckets.get_mut(&bucket) else { return };
        let (c, n) = (count.min(b.0), bytes.min(b.1));
        b.0 -= c;
        b.1 -= n;
        self.count -= c;
        self.bytes -= n;
        if *b == (0, 0) {
            self.buckets.remove(&bucket);
        }
    }

    /// Drop the buckets that ended at or before `now`.
    fn prune(&mut self, now: u64) {
        while let Some(e) = self.buckets.first_entry() {
            if *e.key() > now {
                break;
            }
            let (c, n) = e.remove();
            self.count -= c;
            self.bytes -= n;
        }
    }

    /// Until the oldest bucket ends (ms).
    fn retry_after(&self, now: u64) -> u64 {
        self.buckets.keys().next().map_or(1000, |end| end.saturating_sub(now)).max(1000)
    }
}

/// The figures of one store (see the module docs). `K` names a caller.
#[derive(Debug)]
pub(crate) struct Usage<K> {
    limits: UsageLimits,
    bucket_ms: u64,
    callers: HashMap<K, Account>,
    total: Account,
    swept_at: u64,
    /// Whether other hosts share the ledger (their figures are read and added).
    shared: bool,
    elsewhere: HashMap<K, Elsewhere>,
    /// Places held for entries not written yet, by caller `(entries, bytes)`: counted here,
    /// in no tally yet (see [`Usage::hold`]).
    held: HashMap<K, (u64, u64)>,
    /// Bytes every caller keeps on the other hosts, as last read.
    total_elsewhere: i64,
    /// When the total's tally was last read (`None`: never).
    total_read_at: Option<u64>,
    /// A read of the total's tally under way: when it began, and this host's total then.
    total_reading: Option<(u64, u64)>,
}

impl<K: Hash + Eq + Clone> Usage<K> {
    /// Empty figures with these bounds; entries are counted by expiry rounded up to
    /// `bucket_ms`.
    #[must_use]
    pub(crate) fn new(limits: UsageLimits, bucket_ms: u64) -> Usage<K> {
        Usage {
            limits,
            bucket_ms: bucket_ms.max(1),
            callers: HashMap::new(),
            total: Account::default(),
            swept_at: 0,
            shared: false,
            elsewhere: HashMap::new(),
            held: HashMap::new(),
            total_elsewhere: 0,
            total_read_at: None,
            total_reading: None,
        }
    }

    /// These figures count one host of several sharing the ledger (see the module docs).
    pub(crate) fn share(&mut self) {
        self.shared = true;
    }

    fn bucket(&self, expires_ms: u64) -> u64 {
        bucket_end(expires_ms, self.bucket_ms)
    }

    /// Whether `caller`'s figures across the hosts are to be read now (shared figures whose
    /// last read is [`FRESH_MS`] old, none under way): then wait until this host's writes
    /// queued so far are committed, call [`Usage::read_begins`], read the ledger's tallies
    /// and give them to [`Usage::read_done`].
    pub(crate) fn read_due(&mut self, caller: &K, now: u64) -> bool {
        if !self.shared {
            return false;
        }
        if !self.elsewhere.contains_key(caller) && self.elsewhere.len() >= MAX_ELSEWHERE {
            self.forget_oldest();
        }
        let e = self.elsewhere.entry(caller.clone()).or_default();
        let stale = e.read_at.is_none_or(|at| now.saturating_sub(at) >= FRESH_MS);
        if !stale || e.reading.is_some() {
            return false;
        }
        e.reading = Some((now, None));
        true
    }

    /// The read of `caller`'s tallies begins at `now` (what this host wrote is committed up
    /// to here): this host's figures are noted, to be taken from what the read finds. Returns
    /// whether the total's tally is to be read too (at most once a [`FRESH_MS`] for every
    /// caller).
    pub(crate) fn read_begins(&mut self, caller: &K, now: u64) -> bool {
        // What the tallies hold of this host's: its figures less the places held for
        // entries not written yet.
        let (count, bytes) = self.caller(caller, now);
        let (held, held_bytes) = self.held.get(caller).copied().unwrap_or_default();
        let mine = (count.saturating_sub(held), bytes.saturating_sub(held_bytes));
        let all_held: u64 = self.held.values().map(|(_, b)| *b).sum();
        let total = self.total(now).1.saturating_sub(all_held);
        if let Some((_, noted @ None)) =
            self.elsewhere.get_mut(caller).and_then(|e| e.reading.as_mut())
        {
            *noted = Some(mine);
        }
        let stale = self.total_read_at.is_none_or(|at| now.saturating_sub(at) >= FRESH_MS);
        if stale && self.total_reading.is_none() {
            self.total_reading = Some((now, total));
            return true;
        }
        false
    }

    /// The read [`Usage::read_due`] asked for found `caller`'s tally `(entries, bytes)` and,
    /// when [`Usage::read_begins`] asked for it (`total_asked`), the total's bytes (`None`:
    /// the read failed, or never began; the last figures stand, and are read again).
    pub(crate) fn read_done(
        &mut self,
        caller: &K,
        found: Option<(u64, u64)>,
        total_asked: bool,
        total: Option<u64>,
    ) {
        let less = |a: u64, b: u64| {
            i64::try_from(a)
                .unwrap_or(i64::MAX)
                .saturating_sub(i64::try_from(b).unwrap_or(i64::MAX))
        };
        if let Some((began, noted)) = self.total_reading.take_if(|_| total_asked)
            && let Some(all) = total
        {
            self.total_elsewhere = less(all, noted);
            self.total_read_at = Some(began);
        }
        let Some(e) = self.elsewhere.get_mut(caller) else { return };
        let Some((began, noted)) = e.reading.take() else { return };
        if let (Some(mine), Some((count, bytes))) = (noted, found) {
            e.others = (less(count, mine.0), less(bytes, mine.1));
            e.read_at = Some(began);
        }
    }

    /// A place of one entry of `bytes` is held for `caller` (counted with [`Usage::add`] too)
    /// until its entry is written or it is given back ([`Usage::unhold`]): a read of the
    /// tallies does not find it there yet.
    pub(crate) fn hold(&mut self, caller: &K, bytes: u64) {
        if self.shared {
            let h = self.held.entry(caller.clone()).or_default();
            *h = (h.0 + 1, h.1.saturating_add(bytes));
        }
    }

    /// The place [`Usage::hold`] held is written or given back.
    pub(crate) fn unhold(&mut self, caller: &K, bytes: u64) {
        if let Some(h) = self.held.get_mut(caller) {
            *h = (h.0.saturating_sub(1), h.1.saturating_sub(bytes));
            if h.0 == 0 {
                self.held.remove(caller);
            }
        }
    }

    /// Forget the tenth of the callers read longest ago.
    fn forget_oldest(&mut self) {
        let mut by_age: Vec<(u64, K)> =
            self.elsewhere.iter().map(|(k, e)| (e.read_at.unwrap_or(0), k.clone())).collect();
        by_age.sort_unstable_by_key(|(at, _)| *at);
        for (_, k) in by_age.into_iter().take(MAX_ELSEWHERE / 10 + 1) {
            self.elsewhere.remove(&k);
        }
    }

    /// Whether `caller` may add `count` entries of `bytes` at `now`.
    ///
    /// # Errors
    /// [`Over`], with when to try again.
    pub(crate) fn check(
        &mut self,
        caller: &K,
        now: u64,
        count: u64,
        bytes: u64,
    ) -> Result<(), Over> {
        self.sweep(now);
        let others = self.elsewhere.get(caller).map_or((0, 0), |e| e.others);
        let (held, held_bytes, retry_after_ms) = match self.callers.get_mut(caller) {
            Some(a) => {
                a.prune(now);
                (a.count, a.bytes, a.retry_after(now))
            }
            None => (0, 0, 1000),
        };
        // Only what grows is checked: a rewrite that adds no entry is never refused for the
        // count, nor one that adds no bytes for the bytes (a caller may be past a bound it
        // reached on another host, or before a restart).
        if (count > 0
            && with_others(held, others.0).saturating_add(count) > self.limits.per_caller_count)
            || (bytes > 0
                && with_others(held_bytes, others.1).saturating_add(bytes)
                    > self.limits.per_caller_bytes)
        {
            return Err(Over::Caller { retry_after_ms });
        }
        if bytes > 0
            && with_others(self.total.bytes, self.total_elsewhere).saturating_add(bytes)
                > self.limits.total_bytes
        {
            return Err(Over::Total { retry_after_ms: self.total.retry_after(now) });
        }
        Ok(())
    }

    /// Count `count` entries of `bytes` for `caller`, expiring at `expires_ms`.
    pub(crate) fn add(&mut self, caller: &K, expires_ms: u64, count: u64, bytes: u64) {
        let b = self.bucket(expires_ms);
        self.callers.entry(caller.clone()).or_default().add(b, count, bytes);
        self.total.add(b, count, bytes);
    }

    /// Take back what [`Usage::add`] counted for `caller` with the same expiry.
    pub(crate) fn remove(&mut self, caller: &K, expires_ms: u64, count: u64, bytes: u64) {
        let b = self.bucket(expires_ms);
        if let Some(a) = self.callers.get_mut(caller) {
            a.remove(b, count, bytes);
        }
        self.total.remove(b, count, bytes);
    }

    /// `(entries, bytes)` `caller` keeps at `now`.
    pub(crate) fn caller(&mut self, caller: &K, now: u64) -> (u64, u64) {
        self.callers.get_mut(caller).map_or((0, 0), |a| {
            a.prune(now);
            (a.count, a.bytes)
        })
    }

    /// `(entries, bytes)` every caller keeps at `now`.
    pub(crate) fn total(&mut self, now: u64) -> (u64, u64) {
        self.total.prune(now);
        (self.total.count, self.total.bytes)
    }

    /// Callers with figures.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn callers(&self) -> usize {
        self.callers.len()
    }

    /// Drop expired buckets: the total's now, every caller's (and callers left with nothing)
    /// at most once a bucket width.
    fn sweep(&mut self, now: u64) {
        self.total.prune(now);
        if now.saturating_sub(self.swept_at) < self.bucket_ms {
            return;
        }
        self.swept_at = now;
        self.callers.retain(|_, a| {
            a.prune(now);
            !a.buckets.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: UsageLimits =
        UsageLimits { per_caller_count: 3, per_caller_bytes: 100, total_bytes: 150 };

    #[test]
    fn a_caller_past_its_count_or_bytes_is_over_until_its_oldest_entry_expires() {
        let mut u = Usage::new(LIMITS, 1000);
        for i in 0..3 {
            assert_eq!(u.check(&"a", 0, 1, 10), Ok(()));
            u.add(&"a", 10_000 + i * 1000, 1, 10);
        }
        assert_eq!(
            u.check(&"a", 0, 1, 10),
            Err(Over::Caller { retry_after_ms: 10_000 }),
            "a fourth entry"
        );
        assert_eq!(u.check(&"b", 0, 1, 10), Ok(()), "another caller is not");
        assert_eq!(u.check(&"a", 10_000, 1, 10), Ok(()), "the oldest expired");
        assert_eq!(u.caller(&"a", 10_000), (2, 20));
        let mut u = Usage::new(LIMITS, 1000);
        u.add(&"a", 5_000, 1, 95);
        assert_eq!(u.check(&"a", 0, 1, 6), Err(Over::Caller { retry_after_ms: 5_000 }), "bytes");
        assert_eq!(u.check(&"a", 0, 1, 5), Ok(()), "up to the bound");
    }

    #[test]
    fn every_caller_together_is_bounded_by_the_total_bytes() {
        let mut u = Usage::new(LIMITS, 1000);
        u.add(&"a", 60_000, 1, 90);
        u.add(&"b", 30_000, 1, 50);
        assert_eq!(u.check(&"c", 0, 1, 11), Err(Over::Total { retry_after_ms: 30_000 }));
        assert_eq!(u.check(&"c", 0, 1, 10), Ok(()));
        assert_eq!(Over::Total { retry_after_ms: 30_000 }.retry_after_s(), 30);
    }

    #[test]
    fn an_entry_counts_until_its_expiry_rounded_up_never_less() {
        let mut u = Usage::new(LIMITS, 1000);
        u.add(&"a", 1_500, 1, 10);
        assert_eq!(u.total(1_500), (1, 10), "not before its bucket ends");
        assert_eq!(u.total(1_999), (1, 10));
        assert_eq!(u.total(2_000), (0, 0));
        assert_eq!(u.caller(&"a", 2_000), (0, 0));
    }

    #[test]
    fn a_removed_or_rewritten_entry_is_taken_back_and_figures_never_go_negative() {
        let mut u = Usage::new(LIMITS, 1000);
        u.add(&"a", 9_000, 1, 10);
        // Rewritten bigger (a receipt's outcome), then moved (a handle's use).
        u.remove(&"a", 9_000, 1, 10);
        u.add(&"a", 9_000, 1, 40);
        u.remove(&"a", 9_000, 1, 40);
        u.add(&"a", 12_000, 1, 40);
        assert_eq!((u.caller(&"a", 0), u.total(0)), ((1, 40), (1, 40)));
        u.remove(&"a", 12_000, 5, 500);
        assert_eq!((u.caller(&"a", 0), u.total(0)), ((0, 0), (0, 0)));
        u.remove(&"b", 1_000, 1, 1);
        assert_eq!(u.total(0), (0, 0), "unknown entries take nothing");
    }

    #[test]
    fn callers_with_nothing_left_are_forgotten_by_the_sweep() {
        let mut u = Usage::new(LIMITS, 1000);
        for i in 0..100u32 {
            u.add(&i, 1_000, 1, 1);
        }
        assert_eq!(u.callers(), 100);
        assert_eq!(u.check(&0, 5_000, 1, 1), Ok(()));
        assert_eq!(u.callers(), 0);
    }

    #[test]
    fn shared_figures_add_what_the_other_hosts_keep_as_last_read_and_read_again_once_stale() {
        let mut u = Usage::new(LIMITS, 1000);
        u.share();
        // Never read: due (and only once while under way); checked on this host's figures.
        assert!(u.read_due(&"a", 0));
        assert!(!u.read_due(&"a", 10), "a read is under way");
        assert_eq!(u.check(&"a", 10, 1, 10), Ok(()));
        // The read begins (the total is read too) before that entry is counted here.
        assert!(u.read_begins(&"a", 10));
        u.add(&"a", 10_000, 1, 10);
        // It finds 2 entries of 60 bytes on the other hosts, and 140 bytes of everyone.
        u.read_done(&"a", Some((2, 60)), true, Some(140));
        assert_eq!(
            u.check(&"a", 20, 1, 10),
            Err(Over::Caller { retry_after_ms: 9_980 }),
            "2 elsewhere and 1 here: at the count"
        );
        // A caller with nothing anywhere is held by the total: 140 elsewhere, 10 here.
        assert_eq!(
            u.check(&"b", 20, 0, 1),
            Err(Over::Total { retry_after_ms: 9_980 }),
            "140 + 10 + 1 bytes > 150"
        );
        assert!(!u.read_due(&"a", 999), "fresh");
        // Stale: read again; the other hosts' entries are gone, this host's one is in it.
        assert!(u.read_due(&"a", 1_000));
        assert!(u.read_begins(&"a", 1_010), "the total is stale too");
        u.read_done(&"a", Some((1, 10)), true, Some(10));
        assert_eq!(u.check(&"a", 1_001, 1, 10), Ok(()));
        assert_eq!(u.check(&"b", 1_001, 1, 10), Ok(()));
        // Another caller's read within the second does not read the total again.
        assert!(u.read_due(&"b", 1_002));
        assert!(!u.read_begins(&"b", 1_002));
        u.read_done(&"b", Some((0, 0)), false, None);
        // A failed read leaves the last figures and is asked for again (the total too).
        assert!(u.read_due(&"a", 2_020));
        assert!(u.read_begins(&"a", 2_020));
        u.read_done(&"a", None, true, None);
        assert!(u.read_due(&"a", 2_021));
        assert!(u.read_begins(&"a", 2_021));
        // A read that finds less than this host counts (entries counted here at its start
        // that another host has removed since) corrects this host's figures.
        u.read_done(&"a", Some((0, 0)), true, Some(0));
        u.add(&"a", 10_000, 2, 20);
        assert_eq!(u.check(&"a", 2_022, 1, 10), Ok(()), "2 in all, not 3");
        u.add(&"a", 10_000, 1, 10);
        assert!(u.check(&"a", 2_022, 1, 10).is_err(), "3 in all");
        // Past the count (reached on another host): a rewrite that adds no entry is never
        // refused for it, nor one that grows within the bytes bound.
        assert!(u.read_due(&"a", 3_100));
        u.read_begins(&"a", 3_100);
        u.read_done(&"a", Some((5, 30)), true, Some(30));
        assert!(u.check(&"a", 3_101, 1, 0).is_err(), "no new entry");
        assert_eq!(u.check(&"a", 3_101, 0, 0), Ok(()));
        assert_eq!(u.check(&"a", 3_101, 0, 10), Ok(()), "30 + 10 bytes of 100");
        // Not shared: never read.
        let mut alone = Usage::new(LIMITS, 1000);
        assert!(!alone.read_due(&"a", 0));
    }

    #[test]
    fn a_place_held_for_an_entry_not_written_yet_is_not_taken_from_what_the_read_finds() {
        let mut u = Usage::new(LIMITS, 1000);
        u.share();
        // One entry written here, one place held (its entry not written yet).
        u.add(&"a", 10_000, 1, 10);
        u.add(&"a", 10_000, 1, 10);
        u.hold(&"a", 10);
        assert!(u.read_due(&"a", 0));
        u.read_begins(&"a", 0);
        // The tallies hold the written one and another host's.
        u.read_done(&"a", Some((2, 20)), true, Some(20));
        assert!(u.check(&"a", 1, 1, 10).is_err(), "2 here and 1 elsewhere: at the count");
        u.unhold(&"a", 10);
        assert!(u.held.is_empty(), "nothing left once written");
    }
}
