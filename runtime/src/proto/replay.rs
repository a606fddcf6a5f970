//! The replay window: a stream's bounded memory of its own events, for resumption.
//!
//! Bounded by event count **and** bytes (both from config, independent of any channel size).
//! Holds pre-encoded SSE frames so a replay is a cheap `Bytes` clone. The newest event is
//! always kept, even when it alone exceeds the byte bound, so a final response is never
//! dropped by its own size. A resume from a cursor whose successors were evicted returns an
//! explicit [`ReplayGap`]; the window never skips silently and never replays from its oldest
//! event instead.

use std::collections::VecDeque;

use bytes::Bytes;

use super::ids::Seq;

/// Capacity of a replay window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct WindowLimits {
    /// Most events kept (at least 1).
    pub max_events: usize,
    /// Most bytes of encoded frames kept (the newest event is kept regardless).
    pub max_bytes: usize,
}

/// The events after the requested cursor are partly gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayGap {
    /// Oldest sequence number still retained (or the next one to be assigned, if none).
    pub oldest: Seq,
    /// The cursor's sequence number.
    pub requested: Seq,
}

/// Why a replay cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// Events after the cursor were evicted.
    Gap(ReplayGap),
    /// The cursor is ahead of anything this stream produced.
    Ahead {
        /// The newest sequence number assigned so far.
        newest: Seq,
        /// The cursor's sequence number.
        requested: Seq,
    },
}

/// A bounded ring of `(Seq, frame)`, in strictly increasing `Seq` order.
#[derive(Debug)]
pub struct ReplayWindow {
    limits: WindowLimits,
    events: VecDeque<(Seq, Bytes)>,
    bytes: usize,
    /// Sequence number the next pushed event must have.
    next: Seq,
    /// Every sequence number assigned from here on is retained (numbers skipped by
    /// [`Self::skip_to`] were never assigned); a cursor below it has lost events after it.
    complete_from: Seq,
}

impl ReplayWindow {
    /// An empty window; the first event pushed must be `Seq(1)`.
    #[must_use]
    pub fn new(limits: WindowLimits) -> ReplayWindow {
        ReplayWindow {
            limits: WindowLimits {
                max_events: limits.max_events.max(1),
                max_bytes: limits.max_bytes,
            },
            events: VecDeque::new(),
            bytes: 0,
            next: Seq::START.next(),
            complete_from: Seq::START.next(),
        }
    }

    /// Drop the oldest event; what follows it is still complete.
    fn evict_front(&mut self) -> bool {
        match self.events.pop_front() {
            Some((seq, old)) => {
                self.bytes -= old.len();
                self.complete_from = seq.next();
                true
            }
            None => false,
        }
    }

    fn enforce_bounds(&mut self) {
        while self.events.len() > 1
            && (self.events.len() > self.limits.max_events || self.bytes > self.limits.max_bytes)
        {
            self.evict_front();
        }
    }

    /// A window rebuilt from a durable copy: `events` in increasing order, `newest` the last
    /// sequence number ever assigned (at least the last event's). Only the contiguous run of
    /// events ending at `newest` is kept, so a hole in the copy (events that never reached
    /// it) answers a resume from before it with a [`ReplayGap`], never a silent skip.
    #[must_use]
    pub fn restore(
        limits: WindowLimits,
        newest: Seq,
        events: impl IntoIterator<Item = (Seq, Bytes)>,
    ) -> ReplayWindow {
        let events: Vec<(Seq, Bytes)> = events.into_iter().collect();
        let newest = events.last().map_or(newest, |(s, _)| newest.max(*s));
        let mut w = ReplayWindow::new(limits);
        w.next = newest.next();
        let mut start = events.len();
        let mut expect = newest;
        while start > 0 && events[start - 1].0 == expect {
            start -= 1;
            expect = Seq(expect.0.saturating_sub(1));
        }
        for (seq, frame) in events.into_iter().skip(start) {
            w.bytes += frame.len();
            w.events.push_back((seq, frame));
        }
        w.complete_from = w.events.front().map_or(w.next, |(s, _)| *s);
        w.enforce_bounds();
        w
    }

    /// Never assign a sequence number below `next`: those may have gone out to a client
    /// before a crash without reaching the durable copy, so a new event must not reuse one.
    pub fn skip_to(&mut self, next: Seq) {
        self.next = self.next.max(next);
    }

    /// Append the frame of the next event and return its sequence number. Evicts the oldest
    /// events while either bound is exceeded, always keeping the newest.
    pub fn push(&mut self, frame: Bytes) -> Seq {
        let seq = self.next;
        self.next = seq.next();
        self.bytes += frame.len();
        self.events.push_back((seq, frame));
        self.enforce_bounds();
        seq
    }

    /// Its only event, when it holds exactly one and no other number was ever assigned
    /// (`Seq(1)` of a new window).
    #[must_use]
    pub(crate) fn only_first(&self) -> Option<&Bytes> {
        let first = Seq::START.next();
        match self.events.front() {
            Some((seq, frame))
                if *seq == first && self.events.len() == 1 && self.next == first.next() =>
            {
                Some(frame)
            }
            _ => None,
        }
    }

    /// The sequence number the next event will get.
    #[must_use]
    pub fn next_seq(&self) -> Seq {
        self.next
    }

    /// The newest assigned sequence number (`Seq::START` before any event).
    #[must_use]
    pub fn newest(&self) -> Seq {
        Seq(self.next.0 - 1)
    }

    /// Oldest retained sequence number, or the next one if the window is empty.
    #[must_use]
    pub fn oldest(&self) -> Seq {
        self.events.front().map_or(self.next, |(s, _)| *s)
    }

    /// Frames of every event after `after`, oldest first.
    ///
    /// # Errors
    /// [`ReplayError::Gap`] when some event after `after` was evicted;
    /// [`ReplayError::Ahead`] when `after` is newer than anything pushed.
    pub fn replay_after(
        &self,
        after: Seq,
    ) -> Result<impl Iterator<Item = &Bytes> + '_, ReplayError> {
        self.events_after(after).map(|it| it.map(|(_, f)| f))
    }

    /// [`Self::replay_after`] with each frame's sequence number (numbers may jump: see
    /// [`Self::skip_to`]).
    ///
    /// # Errors
    /// As [`Self::replay_after`].
    pub fn events_after(
        &self,
        after: Seq,
    ) -> Result<impl Iterator<Item = (Seq, &Bytes)> + '_, ReplayError> {
        if after > self.newest() {
            return Err(ReplayError::Ahead { newest: self.newest(), requested: after });
        }
        if after.0 + 1 < self.complete_from.0 {
            return Err(ReplayError::Gap(ReplayGap { oldest: self.oldest(), requested: after }));
        }
        let skip = self.events.partition_point(|(s, _)| *s <= after);
        Ok(self.events.range(skip..).map(|(s, f)| (*s, f)))
    }

    /// Retained events and bytes.
    #[must_use]
    pub fn len(&self) -> (usize, usize) {
        (self.events.len(), self.bytes)
    }

    /// Whether no event is retained.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Drop every event but the newest (memory pressure); returns how many were dropped. A
    /// replay from a cursor before the newest then reports a [`ReplayGap`].
    pub fn trim_to_newest(&mut self) -> usize {
        let mut dropped = 0;
        while self.events.len() > 1 && self.evict_front() {
            dropped += 1;
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn frame(n: u64, len: usize) -> Bytes {
        let mut v = format!("{n}:").into_bytes();
        v.resize(len.max(v.len()), b'x');
        Bytes::from(v)
    }

    #[test]
    fn replays_exactly_the_events_after_the_cursor() {
        let mut w = ReplayWindow::new(WindowLimits { max_events: 10, max_bytes: 1 << 20 });
        for i in 1..=5 {
            assert_eq!(w.push(frame(i, 4)), Seq(i));
        }
        let got: Vec<_> = w.replay_after(Seq(2)).unwrap().cloned().collect();
        assert_eq!(got, vec![frame(3, 4), frame(4, 4), frame(5, 4)]);
        assert_eq!(w.replay_after(Seq(5)).unwrap().count(), 0);
        assert_eq!(w.replay_after(Seq::START).unwrap().count(), 5);
    }

    #[test]
    fn only_a_window_that_ever_held_just_its_first_event_gives_it() {
        let limits = WindowLimits { max_events: 4, max_bytes: 1 << 20 };
        let mut w = ReplayWindow::new(limits);
        assert_eq!(w.only_first(), None, "empty");
        w.push(frame(1, 4));
        assert_eq!(w.only_first(), Some(&frame(1, 4)));
        w.push(frame(2, 4));
        assert_eq!(w.only_first(), None, "two events");
        assert_eq!(w.trim_to_newest(), 1);
        assert_eq!(w.only_first(), None, "one event, but not the first");
        let mut skipped = ReplayWindow::new(limits);
        skipped.skip_to(Seq(5));
        skipped.push(frame(5, 4));
        assert_eq!(skipped.only_first(), None, "numbers skipped before it");
        let restored = ReplayWindow::restore(limits, Seq(1), vec![(Seq(1), frame(1, 4))]);
        assert_eq!(restored.only_first(), Some(&frame(1, 4)), "the same window, restored");
        let later = ReplayWindow::restore(limits, Seq(3), vec![(Seq(1), frame(1, 4))]);
        assert_eq!(later.only_first(), None, "restored past numbers it lost");
    }

    #[test]
    fn cursor_older_than_window_is_a_gap_not_a_silent_skip() {
        let mut w = ReplayWindow::new(WindowLimits { max_events: 3, max_bytes: 1 << 20 });
        for i in 1..=6 {
            w.push(frame(i, 4));
        }
        assert_eq!(w.oldest(), Seq(4));
        assert_eq!(w.replay_after(Seq(3)).unwrap().count(), 3, "cursor just before oldest is fine");
        assert_eq!(
            w.replay_after(Seq(2)).err(),
            Some(ReplayError::Gap(ReplayGap { oldest: Seq(4), requested: Seq(2) }))
        );
    }

    #[test]
    fn byte_bound_evicts_but_keeps_the_newest_event() {
        let mut w = ReplayWindow::new(WindowLimits { max_events: 100, max_bytes: 10 });
        w.push(frame(1, 6));
        w.push(frame(2, 6));
        assert_eq!(w.len(), (1, 6));
        w.push(frame(3, 50));
        assert_eq!(w.len(), (1, 50), "an oversized newest event is still kept");
        assert_eq!(w.replay_after(Seq(2)).unwrap().count(), 1);
    }

    #[test]
    fn trim_keeps_only_the_newest_and_older_cursors_then_gap() {
        let mut w = ReplayWindow::new(WindowLimits { max_events: 10, max_bytes: 1 << 20 });
        for n in 1..=4 {
            w.push(frame(n, 4));
        }
        assert_eq!(w.trim_to_newest(), 3);
        assert_eq!(w.len().0, 1);
        assert!(matches!(w.replay_after(Seq(1)), Err(ReplayError::Gap(_))));
        assert_eq!(w.replay_after(Seq(3)).unwrap().count(), 1, "the newest is still replayable");
    }

    #[test]
    fn a_restored_window_keeps_only_the_run_ending_at_its_newest_and_reports_the_hole() {
        let limits = WindowLimits { max_events: 10, max_bytes: 1 << 20 };
        // Event 3 never reached the durable copy.
        let w = ReplayWindow::restore(limits, Seq(5), [1, 2, 4, 5].map(|n| (Seq(n), frame(n, 4))));
        assert_eq!((w.oldest(), w.newest(), w.next_seq()), (Seq(4), Seq(5), Seq(6)));
        assert!(matches!(w.replay_after(Seq(2)), Err(ReplayError::Gap(_))), "the hole is a gap");
        assert_eq!(w.replay_after(Seq(3)).unwrap().count(), 2);
        // The copy lost its newest event: everything before it is a gap, nothing is replayed wrong.
        let w = ReplayWindow::restore(limits, Seq(6), [1, 2].map(|n| (Seq(n), frame(n, 4))));
        assert!(w.is_empty() && matches!(w.replay_after(Seq(2)), Err(ReplayError::Gap(_))));
        assert_eq!(w.replay_after(Seq(6)).unwrap().count(), 0);
        // Bounds apply to what is restored.
        let w = ReplayWindow::restore(
            WindowLimits { max_events: 2, max_bytes: 1 << 20 },
            Seq(3),
            (1..=3).map(|n| (Seq(n), frame(n, 4))),
        );
        assert_eq!(w.len().0, 2);
    }

    #[test]
    fn numbers_skipped_after_a_restore_are_not_a_gap_but_events_missing_before_them_are() {
        let limits = WindowLimits { max_events: 10, max_bytes: 1 << 20 };
        let mut w =
            ReplayWindow::restore(limits, Seq(2), [(Seq(1), frame(1, 4)), (Seq(2), frame(2, 4))]);
        w.skip_to(Seq(100));
        assert_eq!(w.push(frame(100, 4)), Seq(100));
        assert_eq!(w.replay_after(Seq(2)).unwrap().count(), 1, "3..=99 were never assigned");
        assert_eq!(
            w.replay_after(Seq(50)).unwrap().count(),
            1,
            "a cursor in the skipped range is not a gap"
        );
        let mut empty = ReplayWindow::restore(limits, Seq(2), []);
        empty.skip_to(Seq(100));
        let _ = empty.push(frame(100, 4));
        assert_eq!(empty.replay_after(Seq(2)).unwrap().count(), 1);
        assert!(
            matches!(empty.replay_after(Seq(1)), Err(ReplayError::Gap(_))),
            "event 2 is not in the copy"
        );
    }

    #[test]
    fn cursor_ahead_of_stream_is_refused() {
        let mut w = ReplayWindow::new(WindowLimits { max_events: 4, max_bytes: 100 });
        w.push(frame(1, 2));
        assert!(matches!(w.replay_after(Seq(9)), Err(ReplayError::Ahead { .. })));
    }

    proptest! {
        /// Model check: the window agrees with an unbounded log on everything it answers, and
        /// answers `Gap` exactly when the model's events after the cursor are not all retained.
        #[test]
        fn window_matches_unbounded_model(
            sizes in proptest::collection::vec(1usize..40, 1..60),
            max_events in 1usize..12,
            max_bytes in 1usize..200,
            cursor in 0u64..70,
        ) {
            let mut w = ReplayWindow::new(WindowLimits { max_events, max_bytes });
            let mut model = Vec::new();
            for (i, len) in sizes.iter().enumerate() {
                let f = frame(i as u64 + 1, *len);
                model.push(f.clone());
                w.push(f);
                let (n, b) = w.len();
                prop_assert!(n >= 1 && n <= max_events);
                prop_assert!(b <= max_bytes || n == 1);
            }
            let newest = model.len() as u64;
            match w.replay_after(Seq(cursor)) {
                Ok(it) => {
                    let got: Vec<Bytes> = it.cloned().collect();
                    prop_assert_eq!(got, model[cursor as usize..].to_vec());
                }
                Err(ReplayError::Gap(g)) => {
                    prop_assert!(cursor + 1 < g.oldest.0);
                    prop_assert_eq!(g.oldest, w.oldest());
                }
                Err(ReplayError::Ahead { .. }) => prop_assert!(cursor > newest),
            }
        }
    }
}
