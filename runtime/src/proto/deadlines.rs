//! A set of deadlines kept in order, for deadlines that mostly come in the order they fall.
//!
//! A session's kept streams are indexed by the end of their retention: a settled answer's is
//! the time it settled plus one setting, so each new one is the latest, and the one that
//! leaves first (evicted as a newer one closes, or its retention over) is the earliest. A
//! B-tree of that churn touched a cold leaf, and now and then merged two, for each eviction
//! over many sessions (issue 23, `bench/cache_misses.py`); a sorted ring takes the earliest
//! from its front and puts the latest at its back. One out of order is placed by a binary
//! search and a shift of the entries on the shorter side of it, as is one taken out of the
//! middle (a kept stream a resume wakes): its cost grows with the set, which its owner bounds
//! (a session's kept streams: `sessions.max_retained_streams`, 64 by default: up to 32 entries
//! of 16 bytes moved; at its largest setting, 65,536, up to 512 KiB).

use std::collections::VecDeque;

/// Deadlines (with what makes each unique) in order ([module docs](self)).
#[derive(Debug)]
pub(crate) struct Deadlines<T>(VecDeque<T>);

impl<T> Default for Deadlines<T> {
    fn default() -> Self {
        Deadlines(VecDeque::new())
    }
}

impl<T: Ord + Copy> Deadlines<T> {
    /// Add `x`; `false` if it was there.
    pub(crate) fn insert(&mut self, x: T) -> bool {
        match self.0.back() {
            None => {}
            Some(b) if *b < x => {}
            Some(b) if *b == x => return false,
            Some(_) => {
                let i = self.0.partition_point(|e| *e < x);
                if self.0[i] == x {
                    return false;
                }
                self.0.insert(i, x);
                return true;
            }
        }
        self.0.push_back(x);
        true
    }

    /// Take `x` out; `false` if it was not there.
    pub(crate) fn remove(&mut self, x: &T) -> bool {
        let found = if self.0.front() == Some(x) {
            self.0.pop_front().is_some()
        } else if self.0.back() == Some(x) {
            self.0.pop_back().is_some()
        } else {
            let i = self.0.partition_point(|e| e < x);
            i < self.0.len() && self.0[i] == *x && self.0.remove(i).is_some()
        };
        self.shrink();
        found
    }

    /// The earliest.
    #[must_use]
    pub(crate) fn first(&self) -> Option<&T> {
        self.0.front()
    }

    /// Take the earliest out.
    pub(crate) fn pop_first(&mut self) -> Option<T> {
        let x = self.0.pop_front();
        self.shrink();
        x
    }

    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.0 = VecDeque::new();
    }

    /// A burst's buffer is given back as the set shrinks below an eighth of it.
    fn shrink(&mut self) {
        if self.0.capacity() > 256 && self.0.len() * 8 < self.0.capacity() {
            self.0.shrink_to(self.0.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn deadlines_in_order_go_in_at_the_back_and_out_at_the_front() {
        let mut d = Deadlines::default();
        for t in 0..100u64 {
            assert!(d.insert((t, 7)));
        }
        assert!(!d.insert((99, 7)) && !d.insert((40, 7)), "each one once");
        assert!(d.insert((40, 3)), "the same time for another stream, out of order");
        assert_eq!(d.first(), Some(&(0, 7)));
        assert!(d.remove(&(0, 7)) && d.remove(&(99, 7)) && d.remove(&(40, 3)));
        assert!(!d.remove(&(40, 3)) && !d.remove(&(1_000, 0)));
        assert_eq!(d.pop_first(), Some((1, 7)));
        d.clear();
        assert!(d.is_empty() && d.pop_first().is_none());
    }

    #[test]
    fn a_bursts_buffer_is_given_back() {
        let mut d = Deadlines::default();
        for t in 0..10_000u64 {
            d.insert(t);
        }
        while d.0.len() > 10 {
            d.pop_first();
        }
        assert!(d.0.capacity() <= 256, "capacity {} for {} deadlines", d.0.capacity(), d.0.len());
    }

    #[derive(Debug, Clone)]
    enum Step {
        Insert(u8, u8),
        Remove(u8, u8),
        PopFirst,
    }

    proptest! {
        #[test]
        fn the_deadlines_are_the_ordered_set_a_btree_holds(
            steps in proptest::collection::vec(prop_oneof![
                4 => (any::<u8>(), 0u8..4).prop_map(|(t, s)| Step::Insert(t, s)),
                2 => (any::<u8>(), 0u8..4).prop_map(|(t, s)| Step::Remove(t, s)),
                1 => Just(Step::PopFirst),
            ], 1..300)
        ) {
            let mut d = Deadlines::default();
            let mut model = BTreeSet::new();
            for s in steps {
                match s {
                    Step::Insert(t, s) => prop_assert_eq!(d.insert((t, s)), model.insert((t, s))),
                    Step::Remove(t, s) => prop_assert_eq!(d.remove(&(t, s)), model.remove(&(t, s))),
                    Step::PopFirst => prop_assert_eq!(d.pop_first(), model.pop_first()),
                }
                prop_assert_eq!(d.first(), model.first());
            }
            prop_assert_eq!(d.0.iter().copied().collect::<Vec<_>>(), model.into_iter().collect::<Vec<_>>());
        }
    }
}
