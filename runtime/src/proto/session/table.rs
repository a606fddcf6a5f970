//! A session's stream table: its streams by id, in a window indexed by the id's offset.
//!
//! A session numbers its streams in order and most end in about that order (a request's
//! stream closes, is kept for a late resume, and the oldest kept one is evicted as a new one
//! closes). A hash table of that churn pays a probe into a cold bucket for every eviction and,
//! as its tombstones fill it, a rehash of every entry now and then; over many sessions those
//! were a quarter of a call's last-level cache misses (issue 23, `bench/cache_misses.py`).
//! Here a stream numbered within the window is its slot: a new one is pushed at the back, the
//! oldest is taken from the front. A stream the window cannot hold (numbered before it, one
//! of another life restored, or one left far behind by newer ones) is kept in a map beside it,
//! so the window stays at most [`WINDOW`] slots whatever the numbering. As a stream joins it,
//! the window is cut to at most four slots for each stream it holds (16 at least): a
//! long-lived stream in front of many short ones moves beside the window rather than keeping a
//! buffer of empty slots behind it. (Removals in the middle leave empty slots until the next
//! insert cuts the window again. A session set to keep more than about 120 streams holds the
//! oldest of them beside the window, in the map, as the hash table did.) The window's buffer
//! and the map shrink as they empty.

use std::collections::VecDeque;

use crate::proto::ids::{FastMap, StreamId};

/// The most slots the window spans: a session's 64 kept streams (the default) and the
/// requests running beside them fit, in at most 8 KiB of slots for a 64-byte entry.
const WINDOW: usize = 128;

/// Streams by id ([module docs](self)).
#[derive(Debug)]
pub(crate) struct StreamTable<V> {
    /// Slot `i` holds the stream numbered `base + i`; the front slot is never empty.
    window: VecDeque<Option<V>>,
    base: u64,
    /// The streams outside the window.
    others: FastMap<StreamId, V>,
    len: usize,
}

impl<V> Default for StreamTable<V> {
    fn default() -> Self {
        StreamTable { window: VecDeque::new(), base: 0, others: FastMap::default(), len: 0 }
    }
}

impl<V> StreamTable<V> {
    /// How many streams it holds.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[must_use]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The window's slot of `sid`, if the window spans it.
    fn slot(&self, sid: StreamId) -> Option<usize> {
        let i = usize::try_from(sid.0.checked_sub(self.base)?).ok()?;
        (i < self.window.len()).then_some(i)
    }

    // A stream is in its window slot or beside the window, never both; one beside may be
    // numbered within the window's span (the window moved on over it), so an empty slot
    // sends a look-up there.

    #[must_use]
    pub(crate) fn get(&self, sid: &StreamId) -> Option<&V> {
        if let Some(v) = self.slot(*sid).and_then(|i| self.window[i].as_ref()) {
            return Some(v);
        }
        if self.others.is_empty() { None } else { self.others.get(sid) }
    }

    pub(crate) fn get_mut(&mut self, sid: &StreamId) -> Option<&mut V> {
        match self.slot(*sid) {
            Some(i) if self.window[i].is_some() => self.window[i].as_mut(),
            _ if self.others.is_empty() => None,
            _ => self.others.get_mut(sid),
        }
    }

    /// Put `v` as stream `sid`; returns the one it replaces.
    pub(crate) fn insert(&mut self, sid: StreamId, v: V) -> Option<V> {
        if let Some(old) = self.get_mut(&sid) {
            return Some(std::mem::replace(old, v));
        }
        self.len += 1;
        if let Some(i) = self.slot(sid) {
            self.window[i] = Some(v);
            return None;
        }
        if self.window.is_empty() {
            self.base = sid.0;
            self.window.push_back(Some(v));
            return None;
        }
        // One numbered before the window (an earlier life's, restored) is kept beside it.
        if sid.0 < self.base {
            self.others.insert(sid, v);
            return None;
        }
        // A newer one becomes the window's last slot. Slots leave the front first (their
        // streams moving beside the window) until the window spans at most `limit` slots:
        // `WINDOW`, and while it holds few streams four slots for each (16 at least), so that
        // a long-lived stream in front (an open GET stream, a slow call) does not keep a
        // window of empty slots, and its buffer, behind it as newer streams come and go.
        let in_window = self.len - 1 - self.others.len();
        let limit = (4 * (in_window + 1)).clamp(16, WINDOW);
        let span = sid.0 - self.base;
        if span >= limit as u64 {
            let over = span - limit as u64 + 1;
            if over >= self.window.len() as u64 {
                // Past every slot (a new life's first stream after restored ones, say): the
                // window starts again at it.
                self.move_window_to_others();
                self.base = sid.0;
                self.window.push_back(Some(v));
                return None;
            }
            for _ in 0..over {
                self.pop_front_to_others();
            }
        }
        let end = self.base + self.window.len() as u64;
        let gap = (sid.0 - end) as usize;
        let needed = self.window.len() + gap + 1;
        if needed > self.window.capacity() {
            // Grown by powers of two up to `WINDOW`, never past it.
            let to = needed.next_power_of_two().min(WINDOW);
            self.window.reserve_exact(to - self.window.len());
        }
        self.window.extend(std::iter::repeat_with(|| None).take(gap));
        self.window.push_back(Some(v));
        self.trim_front();
        None
    }

    /// Take stream `sid` out.
    pub(crate) fn remove(&mut self, sid: &StreamId) -> Option<V> {
        let v = match self.slot(*sid) {
            Some(i) if self.window[i].is_some() => {
                let v = self.window[i].take();
                if i == 0 {
                    self.trim_front();
                }
                v?
            }
            _ if self.others.is_empty() => return None,
            _ => {
                let v = self.others.remove(sid)?;
                // A burst of streams beside the window (a revive's, say) does not keep its
                // buckets for the session's life.
                if self.others.len() * 4 <= self.others.capacity() {
                    self.others.shrink_to(self.others.len() * 2);
                }
                v
            }
        };
        self.len -= 1;
        Some(v)
    }

    /// Every stream, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (StreamId, &V)> {
        let base = self.base;
        let window = self
            .window
            .iter()
            .zip(0u64..)
            .filter_map(move |(s, i)| s.as_ref().map(|v| (StreamId(base + i), v)));
        window.chain(self.others.iter().map(|(sid, v)| (*sid, v)))
    }

    /// Take every stream out.
    pub(crate) fn take_all(&mut self) -> Vec<V> {
        let mut all: Vec<V> = self.window.drain(..).flatten().collect();
        all.extend(self.others.drain().map(|(_, v)| v));
        self.len = 0;
        all
    }

    /// Every stream in the window moves beside it; the window is empty.
    fn move_window_to_others(&mut self) {
        while !self.window.is_empty() {
            self.pop_front_to_others();
        }
    }

    /// The front slot leaves the window; a stream in it moves beside the window. (Never the
    /// last id's slot: an insert moves the window only for a newer stream.)
    fn pop_front_to_others(&mut self) {
        if let Some(slot) = self.window.pop_front() {
            if let Some(v) = slot {
                self.others.insert(StreamId(self.base), v);
            }
            self.base += 1;
        }
    }

    /// Empty slots leave the front (the front slot is never empty); a buffer four times the
    /// window or more is made smaller (given back once the window is empty).
    fn trim_front(&mut self) {
        while matches!(self.window.front(), Some(None)) {
            self.window.pop_front();
            self.base = self.base.wrapping_add(1);
        }
        let (len, cap) = (self.window.len(), self.window.capacity());
        if cap > 8 && len * 4 <= cap {
            self.window.shrink_to(len * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn contents(t: &StreamTable<u32>) -> BTreeMap<u64, u32> {
        t.iter().map(|(s, v)| (s.0, *v)).collect()
    }

    #[test]
    fn streams_numbered_in_order_live_in_the_window_and_the_oldest_leaves_from_its_front() {
        let mut t = StreamTable::default();
        for n in 1..=64u64 {
            assert_eq!(t.insert(StreamId(n), n as u32), None);
        }
        for n in 65..=1_000u64 {
            t.insert(StreamId(n), n as u32);
            assert_eq!(t.remove(&StreamId(n - 64)), Some((n - 64) as u32));
        }
        assert_eq!(t.len(), 64);
        assert!(t.others.is_empty(), "nothing left the window");
        assert_eq!((t.base, t.window.len()), (937, 64), "the window spans the 64 newest");
        assert!(t.window.capacity() <= WINDOW, "its buffer stays within the window's bound");
    }

    #[test]
    fn a_stream_left_far_behind_moves_beside_the_window_and_is_still_found() {
        let mut t = StreamTable::default();
        t.insert(StreamId(1), 1);
        for n in 2..=1_000u64 {
            t.insert(StreamId(n), n as u32);
            if n > 2 {
                assert_eq!(t.remove(&StreamId(n - 1)), Some(n as u32 - 1));
            }
            if n == 30 {
                // Two streams 29 apart: the first left the window once it spanned 16 slots.
                assert_eq!((t.others.len(), t.window.len()), (1, 1), "at {n}");
            }
        }
        assert_eq!(t.get(&StreamId(1)), Some(&1), "the long-lived first stream");
        assert!(t.others.contains_key(&StreamId(1)), "moved beside the window");
        assert_eq!(t.others.len(), 1, "kept beside the window");
        assert_eq!(t.window.len(), 1, "the window holds the newest alone");
        assert!(t.window.capacity() <= 16, "no buffer of empty slots behind the first stream");
        assert_eq!(t.remove(&StreamId(1)), Some(1));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_stream_of_another_life_does_not_stretch_the_window() {
        let mut t = StreamTable::default();
        t.insert(StreamId((1 << 32) + 5), 5);
        t.insert(StreamId((2 << 32) + 1), 1);
        t.insert(StreamId(3), 3);
        assert_eq!(t.window.len(), 1, "one slot, the other two beside it");
        assert_eq!(contents(&t), BTreeMap::from([(3, 3), ((1 << 32) + 5, 5), ((2 << 32) + 1, 1)]));
        assert_eq!(t.insert(StreamId(u64::MAX), 9), None, "the last id too");
        assert_eq!(t.get(&StreamId(u64::MAX)), Some(&9));
        let mut all = t.take_all();
        all.sort_unstable();
        assert_eq!(all, vec![1, 3, 5, 9]);
        assert!(t.is_empty() && t.get(&StreamId(3)).is_none());
    }

    #[test]
    fn a_new_lifes_streams_move_the_window_past_a_restored_one() {
        let mut t = StreamTable::default();
        t.insert(StreamId((1 << 32) + 7), 0);
        for k in 1..=300u64 {
            t.insert(StreamId((2 << 32) + k), k as u32);
            if k > 64 {
                t.remove(&StreamId((2 << 32) + k - 64));
            }
        }
        assert_eq!(t.others.keys().copied().collect::<Vec<_>>(), [StreamId((1 << 32) + 7)]);
        assert_eq!(
            (t.base, t.window.len()),
            ((2 << 32) + 237, 64),
            "the window holds the new life's"
        );
        assert_eq!(t.get(&StreamId((1 << 32) + 7)), Some(&0));
    }

    #[test]
    fn streams_numbered_up_to_the_last_id_are_found_and_leave() {
        let mut t = StreamTable::default();
        t.insert(StreamId(u64::MAX - 1), 1);
        t.insert(StreamId(u64::MAX), 2);
        t.insert(StreamId(5), 5);
        assert_eq!((t.base, t.window.len()), (u64::MAX - 1, 2), "5 sits beside the window");
        assert_eq!(t.remove(&StreamId(u64::MAX - 1)), Some(1));
        assert_eq!((t.base, t.window.len()), (u64::MAX, 1));
        assert_eq!(t.remove(&StreamId(u64::MAX)), Some(2));
        assert!(t.window.is_empty());
        t.insert(StreamId(7), 7);
        assert_eq!(contents(&t), BTreeMap::from([(5, 5), (7, 7)]));
        assert_eq!((t.base, t.window.len()), (7, 1), "a new window starts at the next stream");
    }

    #[test]
    fn the_windows_buffer_and_the_map_beside_it_shrink_as_they_empty() {
        let mut t = StreamTable::default();
        for n in 1..=100u64 {
            t.insert(StreamId(n), n as u32);
        }
        for n in 1..=90u64 {
            t.remove(&StreamId(n));
        }
        assert_eq!(t.window.len(), 10);
        assert!(t.window.capacity() <= 40, "buffer of {} slots for 10", t.window.capacity());
        // 64 streams of an earlier life, numbered before the window, then gone.
        for n in 0..64u64 {
            t.insert(StreamId(n), 0);
        }
        let beside = t.others.capacity();
        assert!(beside >= 64);
        for n in 0..64u64 {
            t.remove(&StreamId(n));
        }
        assert!(
            t.others.is_empty() && t.others.capacity() < beside,
            "{} of {beside} kept",
            t.others.capacity()
        );
        assert_eq!(t.iter().count(), 10, "the window's streams stay");
    }

    #[test]
    fn a_stream_beside_the_window_that_the_window_moves_over_is_still_found_once() {
        // Proptest's first find: 241 went beside the window, which then moved over it.
        let mut t = StreamTable::default();
        for sid in [28, 241, 112, 187, 242] {
            assert_eq!(t.insert(StreamId(sid), sid as u32), None);
        }
        for sid in [28, 241, 112, 187, 242] {
            assert_eq!(t.get(&StreamId(sid)), Some(&(sid as u32)), "{sid}");
        }
        assert_eq!(t.iter().count(), 5);
        assert_eq!(t.insert(StreamId(241), 0), Some(241), "replaced where it is");
        assert_eq!(t.iter().count(), 5);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Insert(u64, u32),
        Remove(u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        // Ids mostly near each other (a session's numbering), now and then far off.
        let id = prop_oneof![
            8 => 0u64..400,
            1 => any::<u64>(),
            1 => (1u64 << 32)..(1u64 << 32) + 300,
            1 => (u64::MAX - 300)..=u64::MAX,
        ];
        prop_oneof![
            3 => (id.clone(), any::<u32>()).prop_map(|(s, v)| Step::Insert(s, v)),
            2 => id.prop_map(Step::Remove),
        ]
    }

    proptest! {
        #[test]
        fn the_table_holds_what_a_map_holds(steps in proptest::collection::vec(step(), 1..400)) {
            let mut t = StreamTable::default();
            let mut model = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Insert(sid, v) => {
                        prop_assert_eq!(t.insert(StreamId(sid), v), model.insert(sid, v));
                    }
                    Step::Remove(sid) => {
                        prop_assert_eq!(t.remove(&StreamId(sid)), model.remove(&sid));
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert!(t.window.len() <= WINDOW && t.window.capacity() <= WINDOW);
                prop_assert!(!matches!(t.window.front(), Some(None)), "the front slot holds a stream");
            }
            prop_assert_eq!(t.iter().count(), model.len(), "each stream once");
            prop_assert_eq!(contents(&t), model.clone());
            for (sid, v) in &model {
                prop_assert_eq!(t.get(&StreamId(*sid)), Some(v));
            }
            let mut all = t.take_all();
            all.sort_unstable();
            let mut want: Vec<u32> = model.into_values().collect();
            want.sort_unstable();
            prop_assert_eq!(all, want);
            prop_assert!(t.is_empty() && t.iter().next().is_none());
        }
    }
}
