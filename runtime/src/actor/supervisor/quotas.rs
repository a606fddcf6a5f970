//! One caller's sessions across the hosts of a shared ledger (`quotas.sessions_per_principal`).
//!
//! Each record write of a session also scores it in its caller's index in the ledger
//! ([`crate::ledger::codec::caller_sessions_index`], scored by when the record expires; an end
//! removes it), so the caller's sessions on every host, parked ones included, are the members
//! scored in the future. A handshake is admitted against the count last read plus the sessions
//! this host made since that read began; a count older than [`FRESH_MS`] is read again in the
//! background (the handshake that finds it stale does not wait for the read). The quota holds
//! across hosts within that staleness: past it by at most what the other hosts admitted since
//! the last read, which is never older than [`FRESH_MS`] plus one read once the caller keeps
//! asking. Each host's own count (its live sessions) still applies as on one host.

use std::collections::HashMap;
use std::sync::Arc;

/// A caller's count is read again once it is older than this (ms).
pub(crate) const FRESH_MS: u64 = 1_000;

/// Callers whose count is kept; past it, those read longest ago are forgotten (and read again
/// when they come back).
const MAX_CALLERS: usize = 10_000;

#[derive(Debug, Default)]
struct Count {
    /// Its sessions in the ledger, as last read.
    recorded: usize,
    /// When that read began (`None`: never read).
    read_at: Option<u64>,
    /// Sessions this host admitted since that read began.
    made: usize,
    /// A read is under way, begun at this time, when `made` was this.
    reading: Option<(u64, usize)>,
}

/// What [`CallerCounts::admit`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admit {
    /// The session may be made (it is counted).
    pub(crate) ok: bool,
    /// Read the caller's count now ([`CallerCounts::read_done`] with what it finds).
    pub(crate) read: bool,
}

/// The counts (sans IO: the supervisor reads the ledger when asked to).
#[derive(Debug, Default)]
pub(crate) struct CallerCounts {
    counts: HashMap<Arc<str>, Count>,
}

impl CallerCounts {
    /// Admit one more session of `owner`, who may have `max` across the hosts, at `now`.
    pub(crate) fn admit(&mut self, owner: &Arc<str>, max: usize, now: u64) -> Admit {
        if !self.counts.contains_key(owner) && self.counts.len() >= MAX_CALLERS {
            self.forget_oldest();
        }
        let c = self.counts.entry(Arc::clone(owner)).or_default();
        let stale = c.read_at.is_none_or(|at| now.saturating_sub(at) >= FRESH_MS);
        let read = stale && c.reading.is_none();
        if read {
            c.reading = Some((now, c.made));
        }
        let ok = c.recorded.saturating_add(c.made) < max;
        if ok {
            c.made += 1;
        }
        Admit { ok, read }
    }

    /// The read begun for `owner` found `recorded` sessions (`None`: it failed; the last count
    /// stands and the next handshake reads again).
    pub(crate) fn read_done(&mut self, owner: &Arc<str>, recorded: Option<usize>) {
        let Some(c) = self.counts.get_mut(owner) else { return };
        let Some((began, made_then)) = c.reading.take() else { return };
        if let Some(n) = recorded {
            // Those made before the read began are in it (committed before their ids went out).
            c.recorded = n;
            c.made = c.made.saturating_sub(made_then);
            c.read_at = Some(began);
        }
    }

    /// Forget the tenth of the callers read longest ago (one whose read is under way too: its
    /// result then finds nothing to update).
    fn forget_oldest(&mut self) {
        let mut by_age: Vec<(u64, Arc<str>)> =
            self.counts.iter().map(|(k, c)| (c.read_at.unwrap_or(0), Arc::clone(k))).collect();
        by_age.sort_unstable();
        for (_, k) in by_age.into_iter().take(MAX_CALLERS / 10 + 1) {
            self.counts.remove(&k);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.counts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_is_admitted_up_to_the_quota_counted_across_hosts_and_read_again_once_stale() {
        let mut c = CallerCounts::default();
        let alice: Arc<str> = "alice".into();
        // Never read: admitted, and read.
        assert_eq!(c.admit(&alice, 3, 0), Admit { ok: true, read: true });
        assert_eq!(c.admit(&alice, 3, 10), Admit { ok: true, read: false });
        // The read finds 2 sessions (the other hosts'): the 2 made here since it began may
        // not be among them, so they count too.
        c.read_done(&alice, Some(2));
        assert_eq!(c.admit(&alice, 3, 20), Admit { ok: false, read: false }, "at the quota");
        // Stale after FRESH_MS: read again; until it lands the last count stands.
        assert_eq!(c.admit(&alice, 3, FRESH_MS + 1), Admit { ok: false, read: true });
        // The other hosts' sessions ended: 0 recorded.
        c.read_done(&alice, Some(0));
        assert_eq!(c.admit(&alice, 3, FRESH_MS + 2), Admit { ok: true, read: false });
    }

    #[test]
    fn a_failed_read_keeps_the_last_count_and_the_next_handshake_reads_again() {
        let mut c = CallerCounts::default();
        let bob: Arc<str> = "bob".into();
        assert!(c.admit(&bob, 1, 0).read);
        c.read_done(&bob, Some(5));
        assert_eq!(c.admit(&bob, 1, FRESH_MS), Admit { ok: false, read: true });
        c.read_done(&bob, None);
        assert_eq!(c.admit(&bob, 1, FRESH_MS + 1), Admit { ok: false, read: true });
    }

    #[test]
    fn the_callers_kept_are_bounded_even_while_their_reads_are_under_way() {
        let mut c = CallerCounts::default();
        // Every caller's first read is under way (none landed): a map that kept callers
        // whose read is under way would grow past the bound here.
        for n in 0..(MAX_CALLERS + 50) {
            let who: Arc<str> = format!("caller-{n}").into();
            assert!(c.admit(&who, 10, n as u64).read);
        }
        assert!(c.len() <= MAX_CALLERS, "{}", c.len());
        // A read that lands for a forgotten caller changes nothing.
        c.read_done(&"caller-1".into(), Some(3));
        assert!(c.len() <= MAX_CALLERS);
    }
}
