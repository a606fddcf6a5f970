//! The per-caller rate of new sessions.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::actor::registry::QuotaKey;
use crate::proto::bucket::TokenBucket;
use crate::proto::error::{Quota, Rejection};
use crate::proto::ids::Tick;

/// Session-creation rate per caller: one token bucket per [`QuotaKey`], at most
/// `max_entries` of them. A full bucket equals a new one, so when the map is full a newcomer
/// sweeps the full buckets out — at most once every [`RATE_SWEEP_EVERY_MS`], so a flood of
/// distinct callers cannot make every handshake scan the whole map under the lock — and is
/// refused (429) while it stays full: such a flood can slow new sessions down, never reset
/// anyone's throttling or grow the map. A refused handshake has used its token (attempts
/// are what is rated).
#[derive(Debug)]
pub(super) struct RateLimiter {
    table: Mutex<RateTable>,
    burst: u32,
    per_second: f64,
    max_entries: usize,
    /// What a refusal names.
    cause: Quota,
}

#[derive(Debug, Default)]
pub(super) struct RateTable {
    buckets: HashMap<QuotaKey, TokenBucket>,
    /// When the full buckets were last swept out (`None`: never).
    swept_at: Option<Tick>,
}

/// Least time between two sweeps of a full rate table.
const RATE_SWEEP_EVERY_MS: u64 = 100;

impl RateLimiter {
    pub(super) fn new(burst: u32, per_second: u32, max_entries: usize) -> RateLimiter {
        RateLimiter {
            table: Mutex::new(RateTable::default()),
            burst,
            per_second: f64::from(per_second),
            max_entries,
            cause: Quota::SessionRate,
        }
    }

    /// The same, its refusals naming `cause`.
    pub(super) fn with_cause(mut self, cause: Quota) -> RateLimiter {
        self.cause = cause;
        self
    }

    /// Give back a token taken from `key`'s bucket (what it was taken for did not count).
    pub(super) fn give_back(&self, key: &QuotaKey) {
        if let Some(b) = self.table.lock().buckets.get_mut(key) {
            b.give_back();
        }
    }

    /// Take a token for `key` at `now`; the refusal carries `Retry-After` (whole seconds,
    /// at least 1).
    pub(super) fn take(&self, key: &QuotaKey, now: Tick) -> Result<(), Rejection> {
        let mut table = self.table.lock();
        let RateTable { buckets, swept_at } = &mut *table;
        if buckets.len() >= self.max_entries && !buckets.contains_key(key) {
            if swept_at.is_none_or(|t| now.0.saturating_sub(t.0) >= RATE_SWEEP_EVERY_MS) {
                buckets.retain(|_, b| !b.is_full_at(now));
                *swept_at = Some(now);
            }
            if buckets.len() >= self.max_entries {
                return Err(Rejection::QuotaExceeded { cause: self.cause, retry_after_s: 1 });
            }
        }
        let bucket = buckets
            .entry(key.clone())
            .or_insert_with(|| TokenBucket::new(self.burst, self.per_second, now));
        if bucket.try_take(now) {
            return Ok(());
        }
        let wait_ms = bucket.ready_at(now).0.saturating_sub(now.0);
        Err(Rejection::QuotaExceeded {
            cause: self.cause,
            retry_after_s: wait_ms.div_ceil(1000).max(1) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_rate_is_per_caller_with_retry_after() {
        let r = RateLimiter::new(2, 1, 1024);
        let a = QuotaKey::Principal("a".into());
        let b = QuotaKey::Principal("b".into());
        assert!(r.take(&a, Tick(0)).is_ok() && r.take(&a, Tick(0)).is_ok());
        let refused = r.take(&a, Tick(0)).unwrap_err();
        assert_eq!((refused.status(), refused.retry_after_s()), (429, Some(1)));
        assert!(r.take(&b, Tick(0)).is_ok(), "another caller is not throttled");
        assert!(r.take(&a, Tick(1000)).is_ok(), "one more a second");
    }

    #[test]
    fn a_token_given_back_counts_as_never_taken_and_a_refusal_names_its_cause() {
        let r = RateLimiter::new(2, 1, 1024).with_cause(Quota::AuthFailures);
        let a = QuotaKey::Address([10, 0, 0, 1].into());
        for _ in 0..10 {
            r.take(&a, Tick(0)).unwrap();
            r.give_back(&a);
        }
        r.take(&a, Tick(0)).unwrap();
        r.take(&a, Tick(0)).unwrap();
        assert_eq!(r.take(&a, Tick(0)).unwrap_err().cause(), "quota.auth_failures");
        r.give_back(&QuotaKey::Address([10, 0, 0, 2].into()));
        assert_eq!(r.table.lock().buckets.len(), 1, "giving back to a caller never seen adds none");
    }

    #[test]
    fn rate_map_stays_bounded_under_a_flood_of_callers_and_throttled_ones_stay_throttled() {
        let r = RateLimiter::new(1, 1, 16);
        let heavy = QuotaKey::Principal("heavy".into());
        r.take(&heavy, Tick(0)).unwrap();
        let mut refused = 0;
        for i in 0..1000u32 {
            let k = QuotaKey::Address(std::net::IpAddr::from(i.to_be_bytes()));
            if r.take(&k, Tick(0)).is_err() {
                refused += 1;
            }
            assert!(r.table.lock().buckets.len() <= 16);
        }
        assert_eq!(refused, 1000 - 15, "newcomers beyond the table wait for buckets to refill");
        assert!(
            r.take(&heavy, Tick(0)).is_err(),
            "the flood did not reset the heavy caller's bucket"
        );
        assert!(
            r.take(&QuotaKey::Principal("late".into()), Tick(2_000)).is_ok(),
            "refilled buckets are forgotten"
        );
    }

    #[test]
    fn a_full_rate_table_is_swept_at_most_once_per_interval() {
        // A token a millisecond: every bucket is full again 1 ms after its use.
        let r = RateLimiter::new(1, 1000, 16);
        let key = |i: u32| QuotaKey::Address(std::net::IpAddr::from(i.to_be_bytes()));
        (0..16).for_each(|i| r.take(&key(i), Tick(0)).unwrap());
        assert!(
            r.take(&key(100), Tick(10)).is_ok(),
            "the first newcomer sweeps the refilled buckets out"
        );
        (101..116).for_each(|i| r.take(&key(i), Tick(10)).unwrap());
        assert!(
            r.take(&key(200), Tick(50)).is_err(),
            "40 ms after a sweep: no scan, the newcomer waits"
        );
        assert_eq!(r.table.lock().buckets.len(), 16);
        assert!(
            r.take(&key(201), Tick(10 + RATE_SWEEP_EVERY_MS)).is_ok(),
            "an interval later the table is swept again"
        );
    }
}
