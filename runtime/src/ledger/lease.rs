//! How long this host's lease on a shared ledger is known to hold: its renewer thread moves
//! the end on after each successful renewal; the request path reads it (one atomic load) and
//! refuses what it reads once the end has passed. A process paused past its lease (a
//! SIGSTOP, a thread starved that long) reads the queued requests before its renewer has
//! found the lease gone and stopped it: those are refused, not served from a session another
//! host may have taken over. The monotonic clock runs on while a process is stopped, not
//! while its whole machine is suspended: a suspended VM is caught by its renewer alone.

use std::sync::atomic::{AtomicU64, Ordering};
use tokio::time::Instant;

/// The end of this host's lease as last renewed, on the monotonic clock (which runs on while
/// the process is stopped).
#[derive(Debug)]
pub(crate) struct LeaseClock {
    base: Instant,
    /// Milliseconds after `base`; 0 until the lease is first taken, [`LOST`] once a renewal
    /// found it gone. An atomic: the renewer thread writes it, every request reads it;
    /// nothing else is published through it.
    holds_until_ms: AtomicU64,
}

/// The end of a lease a renewal found gone: never renewed again (`fetch_max` keeps it).
const LOST: u64 = u64::MAX;

impl Default for LeaseClock {
    fn default() -> LeaseClock {
        LeaseClock::new()
    }
}

impl LeaseClock {
    /// A clock of a lease not taken yet.
    #[must_use]
    pub(crate) fn new() -> LeaseClock {
        LeaseClock { base: Instant::now(), holds_until_ms: AtomicU64::new(0) }
    }

    /// The lease was taken or renewed by a request sent at `sent` (it holds `ttl_ms` from then
    /// at least: Redis started the count later). The end never moves back.
    #[cfg_attr(
        not(feature = "redis"),
        allow(dead_code, reason = "only Redis ledgers renew a lease")
    )]
    pub(crate) fn renewed(&self, sent: Instant, ttl_ms: u64) {
        let end = self.ms(sent).saturating_add(ttl_ms).clamp(1, LOST - 1);
        self.holds_until_ms.fetch_max(end, Ordering::Relaxed);
    }

    /// Whether the lease surely held at `now` (`true` before it was first taken: the ledger
    /// takes it before it is served).
    #[must_use]
    pub(crate) fn holds_at(&self, now: Instant) -> bool {
        match self.holds_until_ms.load(Ordering::Relaxed) {
            0 => true,
            LOST => false,
            end => self.ms(now) < end,
        }
    }

    /// A renewal found the lease gone (another host may have taken it, or it lapsed in Redis
    /// before its known end): it holds no more, whatever renewal comes after.
    #[cfg_attr(
        not(feature = "redis"),
        allow(dead_code, reason = "only Redis ledgers renew a lease")
    )]
    pub(crate) fn lapse(&self) {
        self.holds_until_ms.store(LOST, Ordering::Relaxed);
    }

    fn ms(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_lease_holds_until_its_length_after_the_last_renewal_was_sent() {
        let c = LeaseClock::new();
        let t0 = c.base + Duration::from_millis(10);
        assert!(c.holds_at(t0 + Duration::from_secs(3_600)), "not taken yet: not fenced");
        c.renewed(t0, 600);
        assert!(c.holds_at(t0 + Duration::from_millis(599)));
        assert!(!c.holds_at(t0 + Duration::from_millis(600)), "lapsed: a pause past the lease");
        c.renewed(t0 + Duration::from_millis(200), 600);
        assert!(c.holds_at(t0 + Duration::from_millis(799)));
        assert!(!c.holds_at(t0 + Duration::from_millis(800)));
        // A renewal answered late (sent before the last one) does not move the end back.
        c.renewed(t0 + Duration::from_millis(100), 600);
        assert!(c.holds_at(t0 + Duration::from_millis(799)));
        // Found gone by a renewal: lapsed at once, and no later renewal brings it back.
        c.lapse();
        assert!(!c.holds_at(t0 + Duration::from_millis(300)));
        c.renewed(t0 + Duration::from_millis(400), 600);
        assert!(!c.holds_at(t0 + Duration::from_millis(500)));
    }
}
