//! Reconnect pacing: never sooner than the server's `retry`, jittered exponential backoff on
//! repeated failures, and one global token bucket shared by every stream of a client, so a
//! network outage cannot turn into a reconnect storm.

use crate::proto::bucket::TokenBucket;
use crate::proto::ids::Tick;

/// The reconnect budget: a token bucket, `capacity` reconnects at once, refilled at
/// `per_second`, that counts the attempts it refused.
#[derive(Debug, Clone)]
pub struct ReconnectBudget {
    bucket: TokenBucket,
    denied: u64,
}

impl ReconnectBudget {
    /// A full bucket.
    #[must_use]
    pub fn new(capacity: u32, per_second: f64, now: Tick) -> ReconnectBudget {
        ReconnectBudget { bucket: TokenBucket::new(capacity, per_second, now), denied: 0 }
    }

    /// Take a token for one reconnect attempt; `false` means wait (see [`Self::ready_at`]).
    pub fn try_take(&mut self, now: Tick) -> bool {
        let ok = self.bucket.try_take(now);
        if !ok {
            self.denied += 1;
        }
        ok
    }

    /// When the next token will be available.
    #[must_use]
    pub fn ready_at(&self, now: Tick) -> Tick {
        self.bucket.ready_at(now)
    }

    /// Attempts refused so far.
    #[must_use]
    pub fn denied(&self) -> u64 {
        self.denied
    }
}

/// Backoff settings.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// Delay when the server gave no `retry` (ms).
    pub default_ms: u64,
    /// Upper bound of the delay (ms).
    pub max_ms: u64,
}

impl Backoff {
    /// Delay before reconnect attempt number `attempt` (0 = first after a disconnect).
    /// Never below the server's `retry` hint (clients MUST wait at least that long). From
    /// the second attempt on, grows exponentially with full jitter (`jitter` in `[0, 1)`,
    /// supplied by the caller's RNG).
    #[must_use]
    pub fn delay_ms(&self, retry_hint: Option<u64>, attempt: u32, jitter: f64) -> u64 {
        let base = retry_hint.unwrap_or(self.default_ms);
        if attempt == 0 {
            return base;
        }
        let ceiling = base.saturating_mul(1u64 << attempt.min(16)).min(self.max_ms.max(base));
        base + ((ceiling - base) as f64 * jitter.clamp(0.0, 1.0)) as u64
    }

    /// Delay after a 429/503 that carried `Retry-After` (in ms): that long, never below the
    /// server's `retry` hint, plus up to a quarter more of jitter so refused clients do not
    /// return in lockstep. It does not grow with attempts: the server said when (the
    /// reconnect budget still caps the rate).
    #[must_use]
    pub fn delay_after_refusal_ms(
        &self,
        retry_hint: Option<u64>,
        retry_after_ms: u64,
        jitter: f64,
    ) -> u64 {
        let base = retry_after_ms
            .max(retry_hint.unwrap_or(0))
            .min(self.max_ms.max(retry_hint.unwrap_or(0)));
        base + (base as f64 * 0.25 * jitter.clamp(0.0, 1.0)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnect_budget_caps_attempts_during_an_outage() {
        // 1000 streams try to reconnect every 100 ms for 10 s; the bucket allows a burst of
        // 10 and 5 per second after that.
        let mut b = ReconnectBudget::new(10, 5.0, Tick(0));
        let mut allowed = 0;
        for t in (0..10_000).step_by(100) {
            for _ in 0..1000 {
                if b.try_take(Tick(t)) {
                    allowed += 1;
                }
            }
        }
        assert!(allowed <= 10 + 50, "allowed {allowed}");
        assert!(allowed >= 50, "the budget refills: {allowed}");
        assert!(b.denied() > 90_000);
    }

    #[test]
    fn ready_at_says_when_a_token_returns() {
        let mut b = ReconnectBudget::new(1, 2.0, Tick(0));
        assert!(b.try_take(Tick(0)));
        assert!(!b.try_take(Tick(0)));
        assert_eq!(b.ready_at(Tick(0)), Tick(500));
        assert!(b.try_take(Tick(500)));
    }

    #[test]
    fn retry_after_sets_the_delay_without_exponential_growth() {
        let b = Backoff { default_ms: 1000, max_ms: 30_000 };
        assert_eq!(b.delay_after_refusal_ms(Some(500), 2000, 0.0), 2000);
        assert_eq!(
            b.delay_after_refusal_ms(Some(500), 2000, 0.999),
            2499,
            "at most a quarter of jitter"
        );
        assert_eq!(b.delay_after_refusal_ms(Some(3000), 1000, 0.0), 3000, "never below retry");
        assert_eq!(b.delay_after_refusal_ms(None, 3_600_000, 0.0), 30_000, "capped");
    }

    #[test]
    fn delay_honours_retry_then_backs_off_with_jitter_and_a_cap() {
        let b = Backoff { default_ms: 1000, max_ms: 30_000 };
        assert_eq!(b.delay_ms(Some(250), 0, 0.9), 250, "first reconnect waits exactly retry");
        assert_eq!(b.delay_ms(None, 0, 0.9), 1000);
        for attempt in 1..20 {
            for j in [0.0, 0.5, 0.999] {
                let d = b.delay_ms(Some(250), attempt, j);
                assert!((250..=30_000).contains(&d), "attempt {attempt} jitter {j}: {d}");
            }
        }
        assert!(b.delay_ms(Some(250), 6, 0.999) > b.delay_ms(Some(250), 1, 0.999));
    }
}
