//! A token bucket: `capacity` actions at once, refilled continuously at a rate. Used by the
//! server's session-creation quota and by the client's reconnect budget. Pure: time comes in
//! as a [`Tick`].

use super::ids::Tick;

/// A token bucket, full when created.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    capacity: f64,
    tokens: f64,
    per_ms: f64,
    last: Tick,
}

impl TokenBucket {
    /// A full bucket of `capacity` (at least 1) tokens, refilled at `per_second`.
    #[must_use]
    pub(crate) fn new(capacity: u32, per_second: f64, now: Tick) -> TokenBucket {
        let capacity = f64::from(capacity.max(1));
        TokenBucket { capacity, tokens: capacity, per_ms: per_second.max(0.0) / 1000.0, last: now }
    }

    fn refill(&mut self, now: Tick) {
        let elapsed = now.0.saturating_sub(self.last.0) as f64;
        self.tokens = (self.tokens + elapsed * self.per_ms).min(self.capacity);
        self.last = self.last.max(now);
    }

    /// Take one token at `now`; `false` means wait (see [`Self::ready_at`]).
    pub(crate) fn try_take(&mut self, now: Tick) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next token will be available (`now` if one is).
    #[must_use]
    pub(crate) fn ready_at(&self, now: Tick) -> Tick {
        if self.tokens >= 1.0 || self.per_ms <= 0.0 {
            return now;
        }
        now.plus_ms(((1.0 - self.tokens) / self.per_ms).ceil() as u64)
    }

    /// Put back a token taken (at most up to the capacity).
    pub(crate) fn give_back(&mut self) {
        self.tokens = (self.tokens + 1.0).min(self.capacity);
    }

    /// Whether the bucket would be full at `now` (then it is equivalent to a new one and may
    /// be forgotten).
    #[must_use]
    pub(crate) fn is_full_at(&self, now: Tick) -> bool {
        let elapsed = now.0.saturating_sub(self.last.0) as f64;
        self.tokens + elapsed * self.per_ms >= self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_given_back_can_be_taken_again_and_never_past_the_capacity() {
        let mut b = TokenBucket::new(1, 1.0, Tick(0));
        assert!(b.try_take(Tick(0)) && !b.try_take(Tick(0)));
        b.give_back();
        assert!(b.try_take(Tick(0)));
        b.give_back();
        b.give_back();
        assert!(b.try_take(Tick(0)) && !b.try_take(Tick(0)), "capacity 1");
    }

    #[test]
    fn burst_then_rate() {
        let mut b = TokenBucket::new(3, 10.0, Tick(0));
        assert!((0..3).all(|_| b.try_take(Tick(0))));
        assert!(!b.try_take(Tick(0)));
        assert_eq!(b.ready_at(Tick(0)), Tick(100));
        assert!(!b.try_take(Tick(99)));
        assert!(b.try_take(Tick(100)));
        assert!(!b.is_full_at(Tick(100)));
        assert!(b.is_full_at(Tick(400)));
    }
}
