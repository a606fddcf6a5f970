//! Generations: immutable snapshots of the reloadable settings. A new one starts on every
//! reload (SIGHUP, `PUT /admin/flags`, `POST /admin/rollback`); each session, stream and
//! request counts against the generation it was opened under and keeps that generation's
//! rules for its life. A generation that is not current and has nothing alive is retired
//! (its cursors stay valid: the cursor key does not change with the generation, and its
//! streams' ledger records expire on their own).
//!
//! Sessions and actors reach their generation through [`GenCount`] and [`Generations`], a
//! small shared context, not through the supervisor.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::RwLock;
use serde::Serialize;

use crate::proto::ids::Generation;
use crate::proto::replay::WindowLimits;
use crate::proto::rollout::RolloutFlags;

/// Why a generation started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GenOrigin {
    /// The process started.
    Start,
    /// A reload (SIGHUP) or `PUT /admin/flags`.
    Reload,
    /// `POST /admin/rollback`.
    Rollback,
    /// Sessions or streams revived from the ledger that an earlier process opened under it
    /// (its flags are not known here; its streams keep their recorded rules).
    Restored,
}

/// The reloadable settings one generation fixes.
#[derive(Debug, Clone, Serialize)]
pub struct GenSettings {
    /// Its number (in session ids and cursors).
    pub id: Generation,
    /// Its rollout flags (`None` for a [`GenOrigin::Restored`] one).
    pub flags: Option<RolloutFlags>,
    /// Replay window per stream.
    pub window: WindowLimits,
    /// SSE `retry` hint (ms).
    pub retry_ms: u64,
    /// Priming events on sessions that prime.
    pub prime_streams: bool,
    /// Most requests in flight per session (sessions opened under it).
    pub max_in_flight: usize,
    /// The cursor key's id (its fingerprint's first hex digits).
    pub key_id: Arc<str>,
    /// Why it started.
    pub origin: GenOrigin,
    /// When it started (ms since the epoch).
    pub started_ms: u64,
}

/// One generation: its settings and what is alive of it.
#[derive(Debug)]
pub struct Gen {
    /// Its settings (immutable).
    pub settings: GenSettings,
    sessions: AtomicI64,
    streams: AtomicI64,
    in_flight: AtomicI64,
    /// When it was superseded (ms since the epoch; 0 while current).
    superseded_ms: AtomicU64,
    /// Fired to end this generation's 2026-07-28 requests still running (a drain's or a
    /// rollback's grace period is over): each is answered "drained" (`-32010`).
    stateless_end: tokio_util::sync::CancellationToken,
    /// Told when one of its counts falls to zero (a stop waits on it, see `Supervisor::settle`).
    quiet: Arc<tokio::sync::Notify>,
}

/// What a [`GenCount`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// A live session (opened or revived under it).
    Session,
    /// A live stream (with an actor or kept as data by its session).
    Stream,
    /// A request in flight.
    InFlight,
}

impl Gen {
    fn counter(&self, what: Counted) -> &AtomicI64 {
        match what {
            Counted::Session => &self.sessions,
            Counted::Stream => &self.streams,
            Counted::InFlight => &self.in_flight,
        }
    }

    /// How many of `what` are alive.
    #[must_use]
    pub fn count(&self, what: Counted) -> i64 {
        self.counter(what).load(Ordering::Relaxed)
    }

    /// Count one more `what` until the returned guard is dropped.
    #[must_use]
    pub fn enter(self: &Arc<Self>, what: Counted) -> GenCount {
        self.counter(what).fetch_add(1, Ordering::Relaxed);
        GenCount { generation: Arc::clone(self), what }
    }

    /// Resolves when this generation's 2026-07-28 requests still running must end.
    pub fn stateless_ended(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.stateless_end.clone().cancelled_owned()
    }

    fn idle(&self) -> bool {
        [Counted::Session, Counted::Stream, Counted::InFlight].iter().all(|c| self.count(*c) <= 0)
    }
}

/// One session, stream or request of a generation; counted off when dropped.
#[derive(Debug)]
pub struct GenCount {
    generation: Arc<Gen>,
    what: Counted,
}

impl GenCount {
    /// The generation.
    #[must_use]
    pub fn generation(&self) -> &Arc<Gen> {
        &self.generation
    }
}

impl Drop for GenCount {
    fn drop(&mut self) {
        if self.generation.counter(self.what).fetch_sub(1, Ordering::AcqRel) == 1 {
            self.generation.quiet.notify_waiters();
        }
    }
}

/// A generation as the admin status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct GenStatus {
    /// Its settings.
    #[serde(flatten)]
    pub settings: GenSettings,
    /// It is the one new sessions and streams are opened under.
    pub current: bool,
    /// Live sessions opened (or revived) under it.
    pub sessions: i64,
    /// Live streams opened under it.
    pub streams: i64,
    /// Its requests still in flight.
    pub in_flight: i64,
    /// When it was superseded (ms since the epoch).
    pub superseded_ms: Option<u64>,
}

/// Every generation with something alive, and the current one.
#[derive(Debug)]
pub struct Generations {
    /// Oldest first; the current one is last.
    list: RwLock<Vec<Arc<Gen>>>,
    /// Told when a count of any generation falls to zero.
    quiet: Arc<tokio::sync::Notify>,
}

impl Generations {
    /// Start with `first`.
    #[must_use]
    pub fn new(first: GenSettings) -> Generations {
        Generations::with_quiet(first, Arc::default())
    }

    /// Start with `first`; `quiet` is told whenever a count of a generation falls to zero.
    #[must_use]
    pub(crate) fn with_quiet(first: GenSettings, quiet: Arc<tokio::sync::Notify>) -> Generations {
        let first = Arc::new(Gen::new(first, Arc::clone(&quiet)));
        Generations { list: RwLock::new(vec![first]), quiet }
    }

    /// The current generation.
    #[must_use]
    pub fn current(&self) -> Arc<Gen> {
        Arc::clone(self.list.read().last().expect("there is always a current generation"))
    }

    /// Count one more `what` in the current generation. Entered under the list's lock: no
    /// retirement can come between finding the generation and counting in it.
    #[must_use]
    pub fn enter_current(&self, what: Counted) -> GenCount {
        self.list.read().last().expect("there is always a current generation").enter(what)
    }

    /// Start a new generation from the current one's settings changed by `change`, numbered
    /// one more than the highest so far; the old ones are retired when idle. Returns it.
    pub fn advance(
        &self,
        origin: GenOrigin,
        now_ms: u64,
        change: impl FnOnce(&mut GenSettings),
    ) -> Arc<Gen> {
        let mut list = self.list.write();
        let current = list.last().expect("there is always a current generation");
        let mut s = current.settings.clone();
        let highest = list.iter().map(|g| g.settings.id.0).max().unwrap_or(0);
        change(&mut s);
        (s.id, s.origin, s.started_ms) = (Generation(highest.saturating_add(1)), origin, now_ms);
        current.superseded_ms.store(now_ms, Ordering::Relaxed);
        let g = Arc::new(Gen::new(s, Arc::clone(&self.quiet)));
        list.push(Arc::clone(&g));
        retire(&mut list);
        g
    }

    /// Count one more `what` in the live generation numbered `id`, else in a
    /// [`GenOrigin::Restored`] entry made for it (a session or stream an earlier process
    /// opened under it is being revived). Counted under the list's lock, like
    /// [`Generations::enter_current`].
    #[must_use]
    pub fn enter_restored(&self, id: Generation, now_ms: u64, what: Counted) -> GenCount {
        if let Some(g) = self.list.read().iter().find(|g| g.settings.id == id) {
            return g.enter(what);
        }
        let mut list = self.list.write();
        if let Some(g) = list.iter().find(|g| g.settings.id == id) {
            return g.enter(what);
        }
        let current = list.last().expect("there is always a current generation");
        let s = GenSettings {
            id,
            flags: None,
            origin: GenOrigin::Restored,
            started_ms: now_ms,
            ..current.settings.clone()
        };
        let g = Arc::new(Gen::new(s, Arc::clone(&self.quiet)));
        g.superseded_ms.store(now_ms, Ordering::Relaxed);
        let count = g.enter(what);
        // Kept in number order, the current one last.
        let at = list.len() - 1;
        list.insert(at, g);
        count
    }

    /// Retire the idle generations that are not current; returns every one left, oldest
    /// first.
    pub fn status(&self) -> Vec<GenStatus> {
        let mut list = self.list.write();
        retire(&mut list);
        let last = list.len() - 1;
        list.iter()
            .enumerate()
            .map(|(i, g)| GenStatus {
                settings: g.settings.clone(),
                current: i == last,
                sessions: g.count(Counted::Session),
                streams: g.count(Counted::Stream),
                in_flight: g.count(Counted::InFlight),
                superseded_ms: Some(g.superseded_ms.load(Ordering::Relaxed)).filter(|t| *t > 0),
            })
            .collect()
    }

    /// Requests in flight, over every generation (a read lock: nothing is retired).
    #[must_use]
    pub fn in_flight_total(&self) -> i64 {
        self.list.read().iter().map(|g| g.count(Counted::InFlight)).sum()
    }

    /// Requests in flight admitted under a generation numbered below `g`.
    #[must_use]
    pub fn in_flight_older_than(&self, g: Generation) -> i64 {
        self.list
            .read()
            .iter()
            .filter(|x| x.settings.id.0 < g.0)
            .map(|x| x.count(Counted::InFlight))
            .sum()
    }

    /// End the 2026-07-28 requests still running in generations older than `g` (every one for
    /// `None`): each is answered "drained" (`-32010`) and its handler stopped.
    pub fn end_stateless_requests(&self, older_than: Option<Generation>) {
        for x in
            self.list.read().iter().filter(|x| older_than.is_none_or(|g| x.settings.id.0 < g.0))
        {
            x.stateless_end.cancel();
        }
    }

    /// Requests in flight in generations other than the current one.
    #[must_use]
    pub fn in_flight_of_old(&self) -> i64 {
        let list = self.list.read();
        list[..list.len() - 1].iter().map(|g| g.count(Counted::InFlight)).sum()
    }
}

fn retire(list: &mut Vec<Arc<Gen>>) {
    let last = list.len() - 1;
    let mut i = 0;
    list.retain(|g| {
        let keep = i == last || !g.idle();
        if !keep {
            tracing::info!(
                generation = g.settings.id.0,
                "generation retired: nothing of it is alive"
            );
        }
        i += 1;
        keep
    });
}

impl GenSettings {
    /// The reloadable settings of `cfg` (the one place that lists them: SIGHUP and the first
    /// generation both read them here), under the key `key_id`.
    #[must_use]
    pub fn from_config(
        cfg: &crate::config::RuntimeConfig,
        key_id: Arc<str>,
        origin: GenOrigin,
        now_ms: u64,
    ) -> GenSettings {
        GenSettings {
            id: Generation(cfg.sessions.generation),
            flags: Some(cfg.rollout),
            window: WindowLimits {
                max_events: cfg.sse.replay_max_events,
                max_bytes: cfg.sse.replay_max_bytes,
            },
            retry_ms: cfg.sse.retry_ms,
            prime_streams: cfg.sse.prime_streams,
            max_in_flight: cfg.sessions.max_in_flight,
            key_id,
            origin,
            started_ms: now_ms,
        }
    }

    /// Take `other`'s reloadable values (a reload: the number, key, origin and start time stay
    /// this one's).
    pub fn reload_from(&mut self, other: &GenSettings) {
        (self.flags, self.window, self.retry_ms, self.prime_streams, self.max_in_flight) =
            (other.flags, other.window, other.retry_ms, other.prime_streams, other.max_in_flight);
    }
}

#[cfg(test)]
impl GenSettings {
    /// Settings for unit tests: generation 1, default flags.
    pub(crate) fn for_tests() -> GenSettings {
        GenSettings {
            id: Generation(1),
            flags: Some(RolloutFlags::default()),
            window: WindowLimits { max_events: 8, max_bytes: 1 << 16 },
            retry_ms: 100,
            prime_streams: true,
            max_in_flight: 16,
            key_id: "test".into(),
            origin: GenOrigin::Start,
            started_ms: 0,
        }
    }
}

impl Gen {
    pub(crate) fn new(settings: GenSettings, quiet: Arc<tokio::sync::Notify>) -> Gen {
        Gen {
            quiet,
            settings,
            sessions: AtomicI64::new(0),
            streams: AtomicI64::new(0),
            in_flight: AtomicI64::new(0),
            superseded_ms: AtomicU64::new(0),
            stateless_end: tokio_util::sync::CancellationToken::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::rollout::Resumable;

    fn first() -> GenSettings {
        GenSettings {
            id: Generation(4),
            flags: Some(RolloutFlags::default()),
            window: WindowLimits { max_events: 8, max_bytes: 1024 },
            retry_ms: 1000,
            prime_streams: true,
            max_in_flight: 16,
            key_id: "abcd".into(),
            origin: GenOrigin::Start,
            started_ms: 1,
        }
    }

    #[test]
    fn a_reload_starts_a_new_generation_and_the_old_one_lives_while_its_things_do() {
        let gens = Generations::new(first());
        let old = gens.current();
        let stream = old.enter(Counted::Stream);
        let request = old.enter(Counted::InFlight);
        let new = gens
            .advance(GenOrigin::Rollback, 10, |s| s.flags = s.flags.map(RolloutFlags::rolled_back));
        assert_eq!(new.settings.id, Generation(5));
        assert_eq!(new.settings.flags.unwrap().resumable, Resumable::Off);
        assert_eq!(
            old.settings.flags.unwrap().resumable,
            Resumable::On,
            "the old snapshot is unchanged"
        );
        assert_eq!(gens.current().settings.id, Generation(5));
        assert_eq!(gens.in_flight_of_old(), 1);
        let st = gens.status();
        assert_eq!(st.len(), 2);
        assert_eq!(
            (st[0].streams, st[0].in_flight, st[0].current, st[0].superseded_ms),
            (1, 1, false, Some(10))
        );
        drop(request);
        assert_eq!(gens.in_flight_of_old(), 0);
        assert_eq!(gens.status().len(), 2, "its stream is still alive");
        drop(stream);
        let st = gens.status();
        assert_eq!(st.len(), 1, "retired once idle");
        assert!(st[0].current);
    }

    #[test]
    fn restored_generations_are_found_or_made_and_numbering_stays_above_them() {
        let gens = Generations::new(first());
        let alive = gens.enter_restored(Generation(9), 5, Counted::Session);
        let r = Arc::clone(alive.generation());
        assert_eq!((r.settings.origin, r.settings.flags), (GenOrigin::Restored, None));
        let again = gens.enter_restored(Generation(9), 6, Counted::Stream);
        assert!(Arc::ptr_eq(again.generation(), &r), "found, not made twice");
        assert_eq!(gens.status().len(), 2);
        assert_eq!(gens.current().settings.id, Generation(4), "the current one stays current");
        assert_eq!(gens.advance(GenOrigin::Reload, 7, |_| {}).settings.id, Generation(10));
    }
}
