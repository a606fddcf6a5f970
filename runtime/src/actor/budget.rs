//! The server-wide byte budget shared by every stream's replay window (open and retained).
//!
//! Each stream (its actor, or its session's data while kept without one) holds one [`Charge`]
//! and sets it to its window's size after every change; the charge is released when the stream
//! is dropped, on every exit path, so the budget cannot
//! drift. When the budget is used up, requests that would open a stream are refused (503) and
//! a growing stream trims its own window to its newest event.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes used out of a fixed capacity.
#[derive(Debug)]
pub struct MemoryBudget {
    used: AtomicUsize,
    capacity: usize,
}

impl MemoryBudget {
    /// A budget of `capacity` bytes.
    #[must_use]
    pub fn new(capacity: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget { used: AtomicUsize::new(0), capacity })
    }

    /// Bytes charged now.
    #[must_use]
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The capacity.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether nothing more should be admitted.
    #[must_use]
    pub fn is_full(&self) -> bool {
        self.used() >= self.capacity
    }

    /// A charge of 0 bytes against this budget and, when given, a caller's share of it.
    #[must_use]
    pub fn charge(self: &Arc<Self>, caller: Option<&Arc<MemoryBudget>>) -> Charge {
        Charge { budget: Arc::clone(self), caller: caller.map(Arc::clone), held: 0 }
    }

    /// Move the use by `from` -> `to` bytes; whether it is over capacity afterwards.
    fn adjust(&self, from: usize, to: usize) -> bool {
        let used = if to >= from {
            self.used.fetch_add(to - from, Ordering::Relaxed) + (to - from)
        } else {
            self.used.fetch_sub(from - to, Ordering::Relaxed) - (from - to)
        };
        used > self.capacity
    }
}

/// What one owner holds of a [`MemoryBudget`] (and of its caller's share); released on drop.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    caller: Option<Arc<MemoryBudget>>,
    held: usize,
}

impl Charge {
    /// Hold exactly `bytes`. Returns `true` when the budget or the caller's share is over its
    /// capacity afterwards.
    pub fn set(&mut self, bytes: usize) -> bool {
        let over = self.budget.adjust(self.held, bytes);
        let caller_over = self.caller.as_ref().is_some_and(|c| c.adjust(self.held, bytes));
        self.held = bytes;
        over || caller_over
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_and_are_released_on_drop() {
        let b = MemoryBudget::new(100);
        let mut a = b.charge(None);
        let mut c = b.charge(None);
        assert!(!a.set(60));
        assert!(c.set(50), "110 > 100");
        assert!(b.is_full());
        assert!(!c.set(10));
        assert_eq!(b.used(), 70);
        drop(a);
        assert_eq!(b.used(), 10);
        drop(c);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn a_callers_share_fills_before_the_whole_budget_and_both_are_released() {
        let all = MemoryBudget::new(1000);
        let alice = MemoryBudget::new(100);
        let mut a = all.charge(Some(&alice));
        assert!(a.set(150), "alice is over her share");
        assert!(!all.is_full() && alice.is_full());
        let mut bob = all.charge(None);
        assert!(!bob.set(500), "bob is not held back by alice's share");
        drop(a);
        assert_eq!((all.used(), alice.used()), (500, 0));
        bob.set(0);
    }
}
