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

/// What a caller's figures across hosts answer: [`CallerCounts`] (its sessions) and
/// [`CallerRates`] (its new sessions a second).
pub(crate) trait AcrossHosts: Send + 'static {
    /// Admit one more of `owner`'s, who may have `max`, at `now`.
    fn admit(&mut self, owner: &Arc<str>, max: usize, now: u64) -> Admit;
    /// The read begun for `owner` found `found` (`None`: it failed).
    fn read_done(&mut self, owner: &Arc<str>, found: Option<usize>);
}

impl AcrossHosts for CallerCounts {
    fn admit(&mut self, owner: &Arc<str>, max: usize, now: u64) -> Admit {
        CallerCounts::admit(self, owner, max, now)
    }
    fn read_done(&mut self, owner: &Arc<str>, found: Option<usize>) {
        CallerCounts::read_done(self, owner, found);
    }
}

impl AcrossHosts for CallerRates {
    fn admit(&mut self, owner: &Arc<str>, max: usize, now: u64) -> Admit {
        CallerRates::admit(self, owner, max, now)
    }
    fn read_done(&mut self, owner: &Arc<str>, found: Option<usize>) {
        CallerRates::read_done(self, owner, found);
    }
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

    /// Take back the session [`CallerCounts::admit`] counted for `owner` last (it was not
    /// made after all).
    pub(crate) fn unadmit(&mut self, owner: &Arc<str>) {
        if let Some(c) = self.counts.get_mut(owner) {
            c.made = c.made.saturating_sub(1);
        }
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

    fn forget_oldest(&mut self) {
        forget_oldest(&mut self.counts, |c| c.read_at);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.counts.len()
    }
}

/// Forget the tenth of the callers in `map` read longest ago (`read_at`; one whose read is
/// under way too: its result then finds nothing to update).
fn forget_oldest<T>(map: &mut HashMap<Arc<str>, T>, read_at: impl Fn(&T) -> Option<u64>) {
    let mut by_age: Vec<(u64, Arc<str>)> =
        map.iter().map(|(k, c)| (read_at(c).unwrap_or(0), Arc::clone(k))).collect();
    by_age.sort_unstable();
    for (_, k) in by_age.into_iter().take(MAX_CALLERS / 10 + 1) {
        map.remove(&k);
    }
}

/// The window a caller's session rate is counted over across hosts (ms).
pub(crate) const RATE_WINDOW_MS: u64 = 1_000;
/// The window's slices: this host's own new sessions are counted per slice.
const SLICES: usize = 10;
const SLICE_MS: u64 = RATE_WINDOW_MS / SLICES as u64;

/// One caller's new sessions in the last [`RATE_WINDOW_MS`] (`quotas.session_rate_per_sec`)
/// across the hosts of a shared ledger. Each new session is also scored in the caller's rate
/// index in the ledger ([`crate::ledger::codec::caller_rate_index`], until it leaves the
/// window); a read counts the index's members in the window. A handshake is admitted against
/// the other hosts' part as last read (the count less this host's own when the read began)
/// plus this host's own in the window now (exact, per tenth of the window); a read older than
/// the window counts nothing (what it found has left the window) and is read again in the
/// background (the handshake does not wait). The rate holds across hosts past it by at most
/// what the other hosts admitted since the last read.
#[derive(Debug, Default)]
pub(crate) struct CallerRates {
    rates: HashMap<Arc<str>, Rate>,
}

#[derive(Debug, Default)]
struct Rate {
    /// This host's own new sessions per slice: (the slice's start, ms; how many).
    own: [(u64, u32); SLICES],
    /// The other hosts' new sessions in the window, as last read.
    others: usize,
    /// When that read began (`None`: never read).
    read_at: Option<u64>,
    /// A read is under way, begun at this time, when this host's own count was this.
    reading: Option<(u64, usize)>,
}

impl Rate {
    /// This host's own new sessions in the window ending at `now`.
    fn own_at(&self, now: u64) -> usize {
        let since = now.saturating_sub(RATE_WINDOW_MS);
        self.own
            .iter()
            .filter(|(start, n)| *n > 0 && start + SLICE_MS > since)
            .map(|(_, n)| *n as usize)
            .sum()
    }

    fn count_own(&mut self, now: u64) {
        let start = now - now % SLICE_MS;
        let slot = &mut self.own[(start / SLICE_MS) as usize % SLICES];
        if slot.0 != start {
            *slot = (start, 0);
        }
        slot.1 = slot.1.saturating_add(1);
    }
}

impl CallerRates {
    /// Admit one more new session of `owner`, who may make `max` a window across the hosts,
    /// at `now`.
    pub(crate) fn admit(&mut self, owner: &Arc<str>, max: usize, now: u64) -> Admit {
        if !self.rates.contains_key(owner) && self.rates.len() >= MAX_CALLERS {
            forget_oldest(&mut self.rates, |r| r.read_at);
        }
        let r = self.rates.entry(Arc::clone(owner)).or_default();
        let age = r.read_at.map(|at| now.saturating_sub(at));
        let others = if age.is_some_and(|a| a < RATE_WINDOW_MS) { r.others } else { 0 };
        let ok = others.saturating_add(r.own_at(now)) < max;
        if ok {
            r.count_own(now);
        }
        // This one counted among this host's own: the read waits until what this host queued
        // is committed (its rate entry included) before it counts.
        let read = age.is_none_or(|a| a >= FRESH_MS) && r.reading.is_none();
        if read {
            r.reading = Some((now, r.own_at(now)));
        }
        Admit { ok, read }
    }

    /// The read begun for `owner` found `counted` new sessions in the window, on every host,
    /// once what this host had queued when it began was committed (`None`: it failed; the
    /// next handshake reads again).
    pub(crate) fn read_done(&mut self, owner: &Arc<str>, counted: Option<usize>) {
        let Some(r) = self.rates.get_mut(owner) else { return };
        let Some((began, own_then)) = r.reading.take() else { return };
        if let Some(n) = counted {
            // This host's own made until the read began are in it (committed before it
            // counted); those made since may be too: counted twice until the next read.
            r.others = n.saturating_sub(own_then);
            r.read_at = Some(began);
        }
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
        // One taken back (refused by another check after all) leaves its place.
        assert_eq!(c.admit(&alice, 3, FRESH_MS + 3), Admit { ok: true, read: false });
        assert_eq!(c.admit(&alice, 3, FRESH_MS + 4), Admit { ok: true, read: false });
        assert_eq!(c.admit(&alice, 3, FRESH_MS + 5), Admit { ok: false, read: false });
        c.unadmit(&alice);
        assert_eq!(c.admit(&alice, 3, FRESH_MS + 6), Admit { ok: true, read: false });
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
    fn a_callers_rate_counts_the_other_hosts_as_read_and_its_own_in_the_window() {
        let mut r = CallerRates::default();
        let alice: Arc<str> = "alice".into();
        // Never read: admitted while the read is under way.
        assert_eq!(r.admit(&alice, 3, 10_000), Admit { ok: true, read: true });
        // The read finds 3 in the window: this host's 1 (the one that began it) and the
        // other hosts' 2.
        r.read_done(&alice, Some(3));
        assert_eq!(r.admit(&alice, 3, 10_100), Admit { ok: false, read: false }, "2 + 1 = 3");
        // Once the window passed, what the read found counts nothing, and this host's own
        // left it too: admitted while read again.
        assert_eq!(r.admit(&alice, 3, 11_050), Admit { ok: true, read: true });
        r.read_done(&alice, Some(1)); // only this host's own, made as the read began
        assert_eq!(r.admit(&alice, 3, 11_100), Admit { ok: true, read: false });
        assert_eq!(r.admit(&alice, 3, 11_200), Admit { ok: true, read: false });
        assert_eq!(r.admit(&alice, 3, 11_300), Admit { ok: false, read: false }, "3 of its own");
        // A failed read keeps nothing new and the next handshake reads again.
        assert!(r.admit(&alice, 3, 12_400).read);
        r.read_done(&alice, None);
        assert!(r.admit(&alice, 3, 12_401).read);
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
