//! The server-wide byte budget shared by every stream's replay window (open and retained).
//!
//! Each stream actor holds one [`Charge`] and sets it to its window's size after every change;
//! the charge is released when the actor is dropped, on every exit path, so the budget cannot
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

    /// A charge of 0 bytes against this budget.
    #[must_use]
    pub fn charge(self: &Arc<Self>) -> Charge {
        Charge { budget: Arc::clone(self), held: 0 }
    }
}

/// What one owner holds of a [`MemoryBudget`]; released on drop.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    held: usize,
}

impl Charge {
    /// Hold exactly `bytes`. Returns `true` when the budget is over its capacity afterwards.
    pub fn set(&mut self, bytes: usize) -> bool {
        let used = if bytes >= self.held {
            self.budget.used.fetch_add(bytes - self.held, Ordering::Relaxed) + (bytes - self.held)
        } else {
            self.budget.used.fetch_sub(self.held - bytes, Ordering::Relaxed) - (self.held - bytes)
        };
        self.held = bytes;
        used > self.budget.capacity
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.held, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_and_are_released_on_drop() {
        let b = MemoryBudget::new(100);
        let mut a = b.charge();
        let mut c = b.charge();
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
}
