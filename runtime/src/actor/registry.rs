//! Session registry: `SessionId -> handle` in a sharded map, the live-session count
//! and the per-caller session counts of the quotas. Guards are held only for the lookup
//! (never across an await); a handle is cloned out.
//!
//! A hibernating session is kept here as data in its handle's place (its actor stopped, or
//! none made yet: a new session is kept so until its first request): every lookup that
//! finds one wakes it first, so callers only ever see handles; only a message that asks for
//! nothing but to count as a use is taken by the data itself
//! ([`Registry::try_take_asleep`]), and a DELETE takes it out as data
//! ([`Registry::try_take_out_asleep`]). The wake
//! makes the new actor's address under the shard's lock and starts the actor once the lock
//! is released. Its deadlines (expiry, parking) are kept in one index that the supervisor's
//! sweeper reads ([`Registry::wake_due`]); a stop takes hibernating sessions out as data
//! ([`Registry::take_for_shutdown`]) rather than waking them.
//!
//! Lock order: a shard, then `wake_at`, `live_hmacs` or what a caller's hook under it takes
//! (the supervisor's settling map: [`Registry::try_take_out_asleep`]); never two shards.
//!
//! Every slot is taken by a [`Reservation`] and given back by the drop of that reservation
//! or of the [`RegistryGuard`] it becomes, on every exit path, so neither count can drift.

use std::collections::{BTreeSet, HashMap};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock, RwLockWriteGuard};

use super::budget::MemoryBudget;
use crate::proto::error::{Overload, Quota, Rejection};
use crate::proto::ids::{FastMap, SessionId, Tick};

pub(crate) use crate::proto::caller::QuotaKey;

const SHARDS: usize = 16;

/// What the registry keeps of a session (its handle, cloned out on every lookup): the
/// session's module defines it; the registry needs only its inbox.
pub(crate) trait Registered: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// What a hibernating session keeps in the handle's place.
    type Asleep: Send + Sync + 'static;

    /// Requests' messages waiting in the session's mailbox.
    fn inbox(&self) -> &Arc<Inbox>;

    /// Wake a hibernating session: the handle of its new actor, and what starts that actor
    /// (run once the shard's lock is released; messages sent meanwhile wait in its mailbox).
    /// Runs under the shard's write lock: it must not use the registry, nor drop the guard
    /// the session holds (nor panic, which would drop it).
    ///
    /// # Errors
    /// The session unchanged when it cannot be woken (its server is going away): it is put
    /// back as it was, and the lookup finds nothing.
    fn wake(asleep: Box<Self::Asleep>) -> Result<(Self, Starter), Box<Self::Asleep>>;

    /// The registry guard a hibernating session holds.
    fn guard_of(asleep: &mut Self::Asleep) -> &mut RegistryGuard<Self>;

    /// Whether a lookup by `caller` may find the session (awake, or hibernating: then it is
    /// woken only for its own caller).
    fn belongs_to(slot: Result<&Self, &Self::Asleep>, caller: Option<&str>) -> bool;
}

/// What starts a woken session's actor, outside the registry's locks.
pub(crate) type Starter = Box<dyn FnOnce()>;

/// A registered session: awake (its handle, one counted pointer: cloned out on every look-up)
/// or hibernating (its deadline in [`Registry::wake_at`], and its state as data, boxed: a
/// shard's table holds a slot for every live session, most of them asleep once a server has
/// many).
enum Slot<H: Registered> {
    Awake(H),
    Asleep(Tick, Box<H::Asleep>),
}

/// The bound on requests' messages waiting for one session (`sessions.mailbox`), counted
/// across every sender: the one bound of that edge. Requests (and messages relayed from other
/// hosts) take a place here first, then go by actix's `do_send`, which ignores actix's own
/// capacity: actix's `try_send` parks an address that sends into a full mailbox, and every
/// request shares the session's one address ([`crate::actor::session::SessionHandle`]).
#[derive(Debug)]
pub struct Inbox {
    queued: AtomicUsize,
    capacity: usize,
}

impl Inbox {
    /// An empty inbox of `capacity` messages.
    #[must_use]
    pub fn new(capacity: usize) -> Arc<Inbox> {
        Arc::new(Inbox { queued: AtomicUsize::new(0), capacity })
    }

    /// A place for one message; it is given back when the returned ticket is dropped (with the
    /// message, once handled, or unhandled when the session has stopped).
    ///
    /// # Errors
    /// [`Rejection::Overloaded`] (`503`, mailbox) when `capacity` messages are waiting.
    pub fn enter(self: &Arc<Self>) -> Result<InboxTicket, Rejection> {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(Rejection::Overloaded(Overload::Mailbox));
        }
        Ok(InboxTicket(Arc::clone(self)))
    }

    /// A place for a control message, past the capacity (it must arrive): counted like a
    /// request's, so the session neither parks nor hibernates while it waits.
    pub(crate) fn control(self: &Arc<Self>) -> InboxTicket {
        self.queued.fetch_add(1, Ordering::AcqRel);
        InboxTicket(Arc::clone(self))
    }
}

/// One message's place in an [`Inbox`], given back on drop.
#[derive(Debug)]
#[must_use = "the place is given back when the ticket is dropped"]
pub struct InboxTicket(Arc<Inbox>);

impl Drop for InboxTicket {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One caller's entry: its live sessions and its share of the stream memory budget.
#[derive(Debug)]
struct Caller {
    sessions: usize,
    budget: Arc<MemoryBudget>,
    /// Its owner ([`QuotaKey::owner`]), made once: its sessions share it.
    owner: Option<Arc<str>>,
}

/// A live session's ledger name as the HMAC table keys it: the 16 bytes its 32 lowercase hex
/// digits spell (every name this build makes, `actor::durable`), held in the entry, so a
/// look-up, an insert and the table's growth hash and compare them without reading a string
/// elsewhere in memory (a new session's insert into the table was a tenth of its
/// registration, issue 23); or the text of a name of another form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum NameKey {
    Digits([u8; 16]),
    Text(Arc<str>),
}

impl NameKey {
    fn of(name: &str) -> NameKey {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let bytes = name.as_bytes();
        let mut out = [0u8; 16];
        if bytes.len() == 32 {
            let all = out.iter_mut().zip(bytes.chunks_exact(2)).all(|(o, pair)| {
                match (digit(pair[0]), digit(pair[1])) {
                    (Some(hi), Some(lo)) => {
                        *o = hi << 4 | lo;
                        true
                    }
                    _ => false,
                }
            });
            if all {
                return NameKey::Digits(out);
            }
        }
        NameKey::Text(Arc::from(name))
    }

    /// The name it keys.
    fn name(&self) -> Arc<str> {
        match self {
            NameKey::Digits(b) => crate::proto::digest::hex(b).into(),
            NameKey::Text(t) => Arc::clone(t),
        }
    }
}

/// The sharded session map.
#[derive(Debug)]
pub(crate) struct Registry<H: Registered> {
    shards: Vec<RwLock<FastMap<SessionId, Slot<H>>>>,
    hasher: foldhash::fast::RandomState,
    /// Live plus reserved sessions; reservations make the limit check atomic.
    count: AtomicUsize,
    /// Live plus reserved sessions per caller, and the caller's memory share; an entry is
    /// removed when its count reaches 0, so the map holds at most one entry per live session.
    /// Taken once per session start and end.
    per_key: Mutex<HashMap<QuotaKey, Caller>>,
    /// Ledger HMACs of the live sessions, with their ids: ledger housekeeping never evicts
    /// one of these, and an end heard from another host finds its session here. Keyed by
    /// HMACs this server computes (a client cannot choose one that collides without the key).
    live_hmacs: Mutex<FastMap<NameKey, SessionId>>,
    /// Told when the last session leaves.
    quiet: Arc<tokio::sync::Notify>,
    /// Hibernating sessions.
    sleeping: AtomicUsize,
    /// Sessions kept as data (hibernations, and new sessions kept so from the start) and
    /// wakes so far.
    hibernations: AtomicU64,
    wakes: AtomicU64,
    /// When each hibernating session must be woken (to expire or park), by id: one entry per
    /// hibernating session, taken out when it wakes or leaves.
    wake_at: Mutex<BTreeSet<(Tick, SessionId)>>,
}

impl<H: Registered> Slot<H> {
    /// The handle of an awake session.
    fn awake(&self) -> Option<&H> {
        match self {
            Slot::Awake(h) => Some(h),
            Slot::Asleep(..) => None,
        }
    }
}

impl<H: Registered> std::fmt::Debug for Slot<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Awake(h) => h.fmt(f),
            Slot::Asleep(at, _) => write!(f, "Asleep until {}", at.0),
        }
    }
}

impl<H: Registered> Default for Registry<H> {
    fn default() -> Registry<H> {
        Registry::with_quiet(Arc::default())
    }
}

impl<H: Registered> Registry<H> {
    /// An empty registry; `quiet` is told when the last session leaves.
    pub(crate) fn with_quiet(quiet: Arc<tokio::sync::Notify>) -> Registry<H> {
        Registry {
            quiet,
            shards: (0..SHARDS).map(|_| RwLock::new(FastMap::default())).collect(),
            hasher: foldhash::fast::RandomState::default(),
            count: AtomicUsize::new(0),
            per_key: Mutex::new(HashMap::new()),
            live_hmacs: Mutex::default(),
            sleeping: AtomicUsize::new(0),
            hibernations: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            wake_at: Mutex::default(),
        }
    }
}

impl<H: Registered> Registry<H> {
    /// Whether the session recorded under ledger HMAC `hmac` is live here.
    pub(crate) fn is_live_hmac(&self, hmac: &str) -> bool {
        self.live_hmacs.lock().contains_key(&NameKey::of(hmac))
    }

    /// The awake session recorded under ledger HMAC `hmac`, if any (`Err` with its id when it
    /// is kept as data): never woken here, so a thread that is no actix arbiter's (the
    /// ledger's bus) may call it.
    pub(crate) fn awake_by_hmac(&self, hmac: &str) -> Option<Result<H, SessionId>> {
        let id = self.live_hmacs.lock().get(&NameKey::of(hmac)).cloned()?;
        match self.shard(&id).read().get(&id)? {
            Slot::Awake(h) => Some(Ok(H::clone(h))),
            Slot::Asleep(..) => Some(Err(id)),
        }
    }

    /// The ledger HMACs of every live session.
    pub(crate) fn live_hmacs(&self) -> Vec<Arc<str>> {
        self.live_hmacs.lock().keys().map(NameKey::name).collect()
    }

    fn shard(&self, id: &SessionId) -> &RwLock<FastMap<SessionId, Slot<H>>> {
        &self.shards[(self.hasher.hash_one(id) as usize) % SHARDS]
    }

    /// Find `caller`'s session and take a place in its inbox, both under the shard's lock: a
    /// session parks or hibernates only with an empty inbox, under the same lock, so a request
    /// that found it is handled by it, and one that did not revives it. A hibernating session
    /// is woken; another caller's is not found (and not woken).
    ///
    /// # Errors
    /// [`Rejection::Overloaded`] (`503`, mailbox) when its inbox is full.
    pub(crate) fn enter(
        &self,
        id: &SessionId,
        caller: Option<&str>,
    ) -> Option<Result<(H, InboxTicket), Rejection>> {
        {
            let shard = self.shard(id).read();
            match shard.get(id)? {
                Slot::Awake(h) if H::belongs_to(Ok(h), caller) => {
                    return Some(h.inbox().enter().map(|t| (H::clone(h), t)));
                }
                Slot::Asleep(_, s) if H::belongs_to(Err(s), caller) => {}
                _ => return None,
            }
        }
        self.woken(id, |h| h.inbox().enter().map(|t| (h.clone(), t)))
    }

    /// Let `caller`'s hibernating session under `id` take a message without waking, under its
    /// shard's write lock (so no lookup wakes it meanwhile): `take` says whether it did. Not
    /// asked (`false`) when the session is awake, another caller's, unknown, or past its
    /// deadline at `now` (a wake expires or parks it first). A message taken moves no
    /// deadline in [`Self::wake_at`]: the sweeper may wake it at the earlier one, and it then
    /// sleeps again.
    pub(crate) fn try_take_asleep(
        &self,
        id: &SessionId,
        caller: Option<&str>,
        now: Tick,
        take: impl FnOnce(&mut H::Asleep) -> bool,
    ) -> bool {
        let Some(mut shard) = self.asleep_locked(id, caller, now) else { return false };
        match shard.get_mut(id) {
            Some(Slot::Asleep(_, s)) => take(s),
            _ => unreachable!("looked at under this lock"),
        }
    }

    /// Find a session (woken if it hibernates) and take a place in its inbox for a control
    /// message, past its capacity: it cannot park or hibernate before it handles the message.
    pub(crate) fn enter_control(&self, id: &SessionId) -> Option<(H, InboxTicket)> {
        self.woken(id, |h| (h.clone(), h.inbox().control()))
    }

    /// Whether a session is registered (awake or hibernating).
    #[must_use]
    pub(crate) fn contains(&self, id: &SessionId) -> bool {
        self.shard(id).read().contains_key(id)
    }

    /// `f` of the session under `id`, woken if it hibernates, under its shard's write lock;
    /// a woken actor starts once the lock is released. `None` if it is unknown or could not
    /// be woken.
    fn woken<T>(&self, id: &SessionId, f: impl FnOnce(&H) -> T) -> Option<T> {
        let (out, starter) = {
            let mut shard = self.shard(id).write();
            let starter = self.wake_in(&mut shard, id);
            (shard.get(id).and_then(Slot::awake).map(f), starter)
        };
        if let Some(start) = starter {
            start();
        }
        out
    }

    /// Wake the session under `id` in its (write-locked) shard if it hibernates: its actor's
    /// starter, to run once the lock is released; `None` if it was awake, unknown, or could
    /// not be woken (then kept as it was).
    fn wake_in(&self, shard: &mut FastMap<SessionId, Slot<H>>, id: &SessionId) -> Option<Starter> {
        let Some(Slot::Asleep(..)) = shard.get(id) else { return None };
        // The table's own key goes back in: `id` is often a request's copy of it, which would
        // otherwise stay in the table for the session's life beside its guard's.
        let Some((key, Slot::Asleep(at, asleep))) = shard.remove_entry(id) else {
            unreachable!("looked at")
        };
        match H::wake(asleep) {
            Ok((handle, starter)) => {
                shard.insert(key, Slot::Awake(handle));
                self.sleeping.fetch_sub(1, Ordering::AcqRel);
                self.wakes.fetch_add(1, Ordering::Relaxed);
                // (The sweeper's own wakes took it out already.)
                self.wake_at.lock().remove(&(at, id.clone()));
                Some(starter)
            }
            // Left as it was, its deadline too (the sweeper took it out before waking).
            Err(asleep) => {
                self.wake_at.lock().insert((at, key.clone()));
                shard.insert(key, Slot::Asleep(at, asleep));
                None
            }
        }
    }

    /// Put `asleep` under `id` in its (write-locked) `shard`, woken at `wake_at` at the
    /// latest, and count it; returns the entry it replaced, to drop outside the lock.
    fn put_asleep(
        &self,
        shard: &mut FastMap<SessionId, Slot<H>>,
        id: SessionId,
        wake_at: Tick,
        asleep: Box<H::Asleep>,
    ) -> Option<Slot<H>> {
        let old = shard.insert(id.clone(), Slot::Asleep(wake_at, asleep));
        self.sleeping.fetch_add(1, Ordering::AcqRel);
        self.hibernations.fetch_add(1, Ordering::Relaxed);
        self.wake_at.lock().insert((wake_at, id));
        old
    }

    /// Hibernating sessions now.
    #[must_use]
    pub(crate) fn sleeping(&self) -> usize {
        self.sleeping.load(Ordering::Acquire)
    }

    /// Sessions kept as data (hibernations, and new sessions kept so from the start) and
    /// wakes so far.
    #[must_use]
    pub(crate) fn hibernations_and_wakes(&self) -> (u64, u64) {
        (self.hibernations.load(Ordering::Relaxed), self.wakes.load(Ordering::Relaxed))
    }

    /// Wake at most `most` hibernating sessions whose deadline (see
    /// [`RegistryGuard::hibernate`]) is at or before `now`; returns how many were woken.
    pub(crate) fn wake_due(&self, now: Tick, most: usize) -> usize {
        let due: Vec<SessionId> = {
            let mut wake_at = self.wake_at.lock();
            let mut due = Vec::new();
            while due.len() < most && wake_at.first().is_some_and(|(t, _)| *t <= now) {
                due.push(wake_at.pop_first().expect("looked at").1);
            }
            due
        };
        let mut woken = 0;
        for id in due {
            // Its lock is released before the actor starts.
            let starter = self.wake_in(&mut self.shard(&id).write(), &id);
            if let Some(start) = starter {
                start();
                woken += 1;
            }
        }
        woken
    }

    /// The earliest deadline of a hibernating session, if any.
    #[must_use]
    pub(crate) fn next_wake(&self) -> Option<Tick> {
        self.wake_at.lock().first().map(|(t, _)| *t)
    }

    /// Take every hibernating session out, as data: each has left the table (its guard
    /// gives its slot back when it is dropped, outside the locks).
    fn take_sleepers(&self) -> Vec<Box<H::Asleep>> {
        let mut taken = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.write();
            let ids: Vec<SessionId> = shard
                .iter()
                .filter(|(_, slot)| matches!(slot, Slot::Asleep(..)))
                .map(|(id, _)| id.clone())
                .collect();
            taken.extend(ids.iter().filter_map(|id| self.take_out(&mut shard, id)));
        }
        taken
    }

    /// Take `caller`'s hibernating session under `id` out as data to end it without waking it,
    /// `first` told of it under its shard's lock before it leaves (so what a lookup that
    /// misses it does next can see that it is ending). `None` (nothing told) when it is awake,
    /// another caller's, unknown, or past its deadline at `now` (a wake expires or parks it
    /// first). `first` runs under the shard's lock: it must not panic nor use the registry.
    pub(crate) fn try_take_out_asleep(
        &self,
        id: &SessionId,
        caller: Option<&str>,
        now: Tick,
        first: impl FnOnce(&H::Asleep),
    ) -> Option<Box<H::Asleep>> {
        let mut shard = self.asleep_locked(id, caller, now)?;
        if let Some(Slot::Asleep(_, s)) = shard.get(id) {
            first(s);
        }
        self.take_out(&mut shard, id)
    }

    /// The write-locked shard of `caller`'s hibernating session under `id`, if it is before
    /// its deadline at `now` (a wake expires or parks it first). Most messages of the kinds
    /// a sleeping session takes go to awake sessions: looked at under the read lock first, as
    /// a lookup does, and again under the write lock (it may have woken in between).
    fn asleep_locked(
        &self,
        id: &SessionId,
        caller: Option<&str>,
        now: Tick,
    ) -> Option<RwLockWriteGuard<'_, FastMap<SessionId, Slot<H>>>> {
        let may = |slot: Option<&Slot<H>>| match slot {
            Some(Slot::Asleep(at, s)) => now < *at && H::belongs_to(Err(&**s), caller),
            _ => false,
        };
        if !may(self.shard(id).read().get(id)) {
            return None;
        }
        let shard = self.shard(id).write();
        may(shard.get(id)).then_some(shard)
    }

    /// Take the session under `id` out as data if it hibernates (its guard gives its slot
    /// back when it is dropped, outside the lock); `None` if it is awake or unknown.
    pub(crate) fn take_asleep(&self, id: &SessionId) -> Option<Box<H::Asleep>> {
        self.take_out(&mut self.shard(id).write(), id)
    }

    /// Take the hibernating session under `id` out of its (write-locked) `shard`.
    fn take_out(
        &self,
        shard: &mut FastMap<SessionId, Slot<H>>,
        id: &SessionId,
    ) -> Option<Box<H::Asleep>> {
        let Some(Slot::Asleep(..)) = shard.get(id) else { return None };
        let Some(Slot::Asleep(at, mut asleep)) = shard.remove(id) else {
            unreachable!("looked at")
        };
        let guard = H::guard_of(&mut asleep);
        guard.removed = true;
        self.live_hmacs.lock().remove(&NameKey::of(&guard.hmac));
        self.wake_at.lock().remove(&(at, id.clone()));
        self.sleeping.fetch_sub(1, Ordering::AcqRel);
        Some(asleep)
    }

    /// For a stop: the awake sessions' handles, and the hibernating sessions taken out as data
    /// (the caller records each and drops it, which frees its slot). A session that
    /// hibernates meanwhile is refused by its own check of the phase, under its shard's lock.
    pub(crate) fn take_for_shutdown(&self) -> (Vec<H>, Vec<Box<H::Asleep>>) {
        let sleepers = self.take_sleepers();
        (self.all_awake(), sleepers)
    }

    /// Drop every hibernating session (its supervisor is gone: nothing will wake it).
    pub(crate) fn drop_sleepers(&self) {
        drop(self.take_sleepers());
    }

    /// Reserve a slot for `key` if it has fewer than `limits.max_per_key` sessions, its memory
    /// share is not full, and fewer than `limits.max` sessions exist in all. The slot is
    /// released by dropping the returned [`Reservation`] (or the [`RegistryGuard`] it becomes).
    ///
    /// # Errors
    /// [`Rejection::QuotaExceeded`] (429) when `key` is at its session quota or its memory
    /// share is full; [`Rejection::Overloaded`] (503) when the table is full.
    pub(crate) fn reserve(
        self: &Arc<Self>,
        key: QuotaKey,
        limits: SlotLimits,
    ) -> Result<Reservation<H>, Rejection> {
        let mut per_key = self.per_key.lock();
        let caller = per_key.get(&key);
        let mine = caller.map_or(0, |c| c.sessions);
        if mine >= limits.max_per_key {
            return Err(Rejection::QuotaExceeded {
                cause: Quota::Sessions,
                retry_after_s: Overload::Sessions.retry_after_s(),
            });
        }
        // A new caller's share holds nothing yet: full only if it has no room at all.
        if caller.map_or(limits.memory_per_key == 0, |c| c.budget.is_full()) {
            return Err(Rejection::QuotaExceeded {
                cause: Quota::StreamMemory,
                retry_after_s: Overload::StreamMemory.retry_after_s(),
            });
        }
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limits.max).then_some(n + 1)
            })
            .map_err(|_| Rejection::Overloaded(Overload::Sessions))?;
        let caller = per_key.entry(key.clone()).or_insert_with(|| Caller {
            sessions: 0,
            budget: MemoryBudget::new(limits.memory_per_key),
            owner: key.owner(),
        });
        caller.sessions += 1;
        let (budget, owner) = (Arc::clone(&caller.budget), caller.owner.clone());
        Ok(Reservation { registry: Some(Arc::clone(self)), key: Some(key), budget, owner })
    }

    fn release(&self, key: &QuotaKey) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.quiet.notify_waiters();
        }
        let mut per_key = self.per_key.lock();
        if let Some(c) = per_key.get_mut(key) {
            c.sessions -= 1;
            if c.sessions == 0 {
                // Streams still stopping keep their share alive through their charges; a new
                // session of this caller starts a new share.
                per_key.remove(key);
            }
        }
    }

    /// Live sessions (including reservations).
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Live sessions (including reservations) of one caller.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn len_of(&self, key: &QuotaKey) -> usize {
        self.per_key.lock().get(key).map_or(0, |c| c.sessions)
    }

    /// The id its table holds for `id` (the same text; which copy of it).
    #[cfg(test)]
    fn key_of(&self, id: &SessionId) -> Option<SessionId> {
        self.shard(id).read().get_key_value(id).map(|(k, _)| k.clone())
    }

    /// The handles of the sessions that are awake (a hibernating one has nothing running).
    #[must_use]
    pub(crate) fn all_awake(&self) -> Vec<H> {
        let awake = |s: &FastMap<SessionId, Slot<H>>| -> Vec<H> {
            s.values().filter_map(Slot::awake).cloned().collect()
        };
        self.shards.iter().flat_map(|s| awake(&s.read())).collect()
    }
}

/// The bounds a reservation checks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotLimits {
    /// Sessions in all (`sessions.max_sessions`).
    pub max: usize,
    /// Sessions per caller (`quotas.sessions_per_principal`).
    pub max_per_key: usize,
    /// A caller's share of the stream memory (`quotas.stream_memory_per_principal`).
    pub memory_per_key: usize,
}

/// A reserved slot, not yet holding a session.
#[derive(Debug)]
#[must_use = "dropping a reservation releases the slot"]
pub(crate) struct Reservation<H: Registered> {
    registry: Option<Arc<Registry<H>>>,
    key: Option<QuotaKey>,
    budget: Arc<MemoryBudget>,
    /// The caller's owner, shared by its sessions.
    owner: Option<Arc<str>>,
}

impl<H: Registered> Reservation<H> {
    /// The owner (see [`QuotaKey::owner`]) of the caller the reservation counts.
    #[must_use]
    pub(crate) fn owner(&self) -> Option<Arc<str>> {
        self.owner.clone()
    }

    /// The caller's share of the stream memory budget.
    #[must_use]
    pub(crate) fn caller_budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Publish the session under `id`; the returned guard deregisters it on drop.
    pub(crate) fn insert(self, id: SessionId, handle: H, hmac: Arc<str>) -> RegistryGuard<H> {
        let guard = self.into_guard(id, Arc::clone(handle.inbox()), hmac);
        let registry = &guard.registry;
        registry.live_hmacs.lock().insert(NameKey::of(&guard.hmac), guard.id.clone());
        let old = registry.shard(&guard.id).write().insert(guard.id.clone(), Slot::Awake(handle));
        debug_assert!(old.is_none(), "a session id is inserted once");
        // Dropped outside the shard's lock.
        drop(old);
        guard
    }

    /// Publish a new session under `id` kept as data from the start, as a hibernation keeps
    /// one ([`RegistryGuard::hibernate`]): `make(guard, parts)` is its entry, woken by its
    /// first lookup or at `wake_at` at the latest. Refused when `may` says no, checked under
    /// the shard's lock as a hibernation's is (a stop's sweep of the table takes it too):
    /// `parts` come back and the slot is given back. `may` and `make` run under that lock:
    /// they must not panic (a plain struct's making).
    ///
    /// # Errors
    /// `parts`, when refused.
    pub(crate) fn insert_asleep<P>(
        self,
        id: SessionId,
        (inbox, hmac): (Arc<Inbox>, Arc<str>),
        wake_at: Tick,
        may: impl FnOnce() -> bool,
        parts: P,
        make: fn(RegistryGuard<H>, P) -> Box<H::Asleep>,
    ) -> Result<(), P> {
        let registry = Arc::clone(self.registry.as_ref().expect("reservation used once"));
        let mut shard = registry.shard(&id).write();
        if !may() {
            drop(shard);
            return Err(parts);
        }
        let guard = self.into_guard(id.clone(), inbox, hmac);
        registry.live_hmacs.lock().insert(NameKey::of(&guard.hmac), id.clone());
        let old = registry.put_asleep(&mut shard, id, wake_at, make(guard, parts));
        debug_assert!(old.is_none(), "a session id is inserted once");
        drop(shard);
        drop(old);
        Ok(())
    }

    /// The guard the reservation becomes (not registered yet).
    fn into_guard(mut self, id: SessionId, inbox: Arc<Inbox>, hmac: Arc<str>) -> RegistryGuard<H> {
        let registry = self.registry.take().expect("reservation used once");
        let key = self.key.take().expect("reservation used once");
        RegistryGuard { registry, id, key, inbox, hmac, removed: false }
    }
}

impl<H: Registered> Drop for Reservation<H> {
    fn drop(&mut self) {
        if let (Some(r), Some(k)) = (&self.registry, &self.key) {
            r.release(k);
        }
    }
}

/// Owned by the session actor: dropping it (on every exit path of the actor) removes the
/// session from the registry and frees its slot and its caller's quota.
#[derive(Debug)]
pub(crate) struct RegistryGuard<H: Registered> {
    registry: Arc<Registry<H>>,
    id: SessionId,
    key: QuotaKey,
    inbox: Arc<Inbox>,
    hmac: Arc<str>,
    /// The entry was removed already (parking): the drop only gives the slot back, and
    /// never removes a new entry a revive may have put under the same id meanwhile.
    removed: bool,
}

impl<H: Registered> RegistryGuard<H> {
    /// The session's id.
    pub(crate) fn id(&self) -> &SessionId {
        &self.id
    }

    /// The session's inbox.
    pub(crate) fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    /// Hibernate the session: `make(guard, parts)` takes its handle's place, and the session
    /// is woken at `wake_at` at the latest. Refused (the guard and `parts` come back, the
    /// session stays awake) while a request or control message holds a place in its inbox,
    /// or when `may` says no: both are checked under the shard's lock, which every lookup
    /// and a stop's sweep of the table take too. `may` and `make` run under that lock: they
    /// must not panic (a plain struct's making).
    ///
    /// # Errors
    /// The guard and `parts`, when refused.
    pub(crate) fn hibernate<P>(
        self,
        wake_at: Tick,
        may: impl FnOnce() -> bool,
        parts: P,
        make: fn(RegistryGuard<H>, P) -> Box<H::Asleep>,
    ) -> Result<(), (RegistryGuard<H>, P)> {
        let registry = Arc::clone(&self.registry);
        let id = self.id.clone();
        let mut shard = registry.shard(&id).write();
        if self.inbox.queued.load(Ordering::Acquire) > 0 || !may() {
            drop(shard);
            return Err((self, parts));
        }
        // The entry is this session's (the guard removes it only on drop).
        let old = registry.put_asleep(&mut shard, id, wake_at, make(self, parts));
        drop(shard);
        // The awake handle goes outside the lock.
        drop(old);
        Ok(())
    }

    /// Deregister the session to park it, unless a request holds a place in its inbox (then
    /// the guard comes back and the session stays).
    ///
    /// # Errors
    /// The guard, when the inbox is not empty.
    pub(crate) fn park(mut self) -> Result<(), RegistryGuard<H>> {
        {
            let mut shard = self.registry.shard(&self.id).write();
            if self.inbox.queued.load(Ordering::Acquire) > 0 {
                drop(shard);
                return Err(self);
            }
            shard.remove(&self.id);
            self.registry.live_hmacs.lock().remove(&NameKey::of(&self.hmac));
        }
        self.removed = true;
        // The drop gives the slot back.
        Ok(())
    }
}

impl<H: Registered> Drop for RegistryGuard<H> {
    fn drop(&mut self) {
        if !self.removed {
            // Under the shard lock, like the insert: a revive's new entry is not touched.
            let mut shard = self.registry.shard(&self.id).write();
            let gone = shard.remove(&self.id);
            self.registry.live_hmacs.lock().remove(&NameKey::of(&self.hmac));
            drop(shard);
            // A hibernating session's guard is in its entry: it is dropped only once taken
            // out (`removed` set), never through its own removal here.
            debug_assert!(!matches!(gone, Some(Slot::Asleep(..))), "a guard dropped while asleep");
        }
        self.registry.release(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_of_32_lowercase_hex_digits_is_keyed_by_its_bytes_and_any_other_by_its_text() {
        let hex = "019412345678aabbccddeeff00112233";
        let NameKey::Digits(b) = NameKey::of(hex) else { panic!("digits") };
        assert_eq!(b[0], 0x01);
        assert_eq!(b[15], 0x33);
        assert_eq!(&*NameKey::of(hex).name(), hex, "the same name back");
        for other in [
            "h1",
            "",
            &hex.to_uppercase(),
            &hex[1..],
            &format!("{hex}0"),
            "019412345678aabbccddeeff0011223g",
        ] {
            assert_eq!(NameKey::of(other), NameKey::Text(other.into()), "{other:?}");
            assert_eq!(&*NameKey::of(other).name(), other);
        }
        assert_ne!(NameKey::of(hex), NameKey::of(&hex.to_uppercase()), "not the same name");
    }

    /// A handle with nothing but its inbox.
    #[derive(Debug, Clone)]
    struct Handle(Arc<Inbox>);

    thread_local! {
        /// Its sessions cannot be woken (as a session whose server is gone), on this thread.
        static REFUSE_WAKE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    impl Registered for Handle {
        type Asleep = RegistryGuard<Handle>;

        fn inbox(&self) -> &Arc<Inbox> {
            &self.0
        }

        fn wake(
            asleep: Box<RegistryGuard<Handle>>,
        ) -> Result<(Handle, Starter), Box<RegistryGuard<Handle>>> {
            if REFUSE_WAKE.get() {
                return Err(asleep);
            }
            let inbox = Arc::clone(asleep.inbox());
            // The woken "session" keeps its guard, as an actor would: here it is leaked.
            std::mem::forget(asleep);
            Ok((Handle(inbox), Box::new(|| {})))
        }

        fn guard_of(asleep: &mut RegistryGuard<Handle>) -> &mut RegistryGuard<Handle> {
            asleep
        }

        fn belongs_to(_: Result<&Handle, &RegistryGuard<Handle>>, caller: Option<&str>) -> bool {
            caller.is_none()
        }
    }

    fn limits(max: usize, max_per_key: usize) -> SlotLimits {
        SlotLimits { max, max_per_key, memory_per_key: 1000 }
    }

    #[test]
    fn per_key_quota_refuses_429_and_the_table_503_and_drops_give_back() {
        let r = Arc::new(Registry::<Handle>::default());
        let alice = QuotaKey::Principal("alice".into());
        let bob = QuotaKey::Principal("bob".into());
        let a1 = r.reserve(alice.clone(), limits(3, 2)).unwrap();
        let _a2 = r.reserve(alice.clone(), limits(3, 2)).unwrap();
        assert_eq!(
            r.reserve(alice.clone(), limits(3, 2)).unwrap_err().status(),
            429,
            "alice is at her quota"
        );
        let _b1 = r.reserve(bob.clone(), limits(3, 2)).expect("bob is not locked out by alice");
        assert_eq!(
            r.reserve(bob.clone(), limits(3, 2)).unwrap_err().status(),
            503,
            "the table is full"
        );
        drop(a1);
        assert_eq!((r.len(), r.len_of(&alice)), (2, 1));
        let _b2 = r.reserve(bob.clone(), limits(3, 2)).unwrap();
        assert_eq!(r.len_of(&bob), 2);
    }

    #[test]
    fn a_refused_reservation_leaves_the_counts_unchanged() {
        let r = Arc::new(Registry::<Handle>::default());
        let k = QuotaKey::Unknown;
        let _a = r.reserve(k.clone(), limits(1, 5)).unwrap();
        assert!(r.reserve(k.clone(), limits(1, 5)).is_err());
        assert_eq!((r.len(), r.len_of(&k)), (1, 1));
    }

    #[test]
    fn a_callers_sessions_share_one_memory_budget_and_a_full_one_refuses_429() {
        let r = Arc::new(Registry::<Handle>::default());
        let k = QuotaKey::Principal("alice".into());
        let a = r.reserve(k.clone(), limits(10, 10)).unwrap();
        let b = r.reserve(k.clone(), limits(10, 10)).unwrap();
        assert!(Arc::ptr_eq(a.caller_budget(), b.caller_budget()));
        let mut charge = a.caller_budget().charge(None);
        charge.set(1000);
        let refused = r.reserve(k.clone(), limits(10, 10)).unwrap_err();
        assert_eq!((refused.status(), refused.cause()), (429, "quota.stream_memory"));
        assert!(
            r.reserve(QuotaKey::Principal("bob".into()), limits(10, 10)).is_ok(),
            "bob has his own share"
        );
        charge.set(0);
    }

    #[test]
    fn an_address_callers_sessions_share_one_owner_made_once() {
        let r = Arc::new(Registry::<Handle>::default());
        let k = QuotaKey::Address("192.0.2.7".parse().unwrap());
        let a = r.reserve(k.clone(), limits(10, 10)).unwrap();
        let b = r.reserve(k.clone(), limits(10, 10)).unwrap();
        let (oa, ob) = (a.owner().unwrap(), b.owner().unwrap());
        assert_eq!((&*oa, k.owner().as_deref()), ("ip:192.0.2.7", Some("ip:192.0.2.7")));
        assert!(Arc::ptr_eq(&oa, &ob), "one owner for the caller's sessions");
        let other = r.reserve(QuotaKey::Address("192.0.2.8".parse().unwrap()), limits(10, 10));
        assert_eq!(other.unwrap().owner().as_deref(), Some("ip:192.0.2.8"));
        assert_eq!(r.reserve(QuotaKey::Unknown, limits(10, 10)).unwrap().owner(), None);
    }

    fn asleep(guard: RegistryGuard<Handle>, (): ()) -> Box<RegistryGuard<Handle>> {
        Box::new(guard)
    }

    fn registered(
        r: &Arc<Registry<Handle>>,
        n: u32,
    ) -> (SessionId, Arc<Inbox>, RegistryGuard<Handle>) {
        let id = SessionId::parse(&format!("s{n}")).unwrap();
        let inbox = Inbox::new(4);
        let reservation = r.reserve(QuotaKey::Unknown, limits(10, 10)).unwrap();
        let guard =
            reservation.insert(id.clone(), Handle(Arc::clone(&inbox)), format!("h{n}").into());
        (id, inbox, guard)
    }

    #[test]
    fn a_new_session_kept_as_data_is_live_and_asleep_and_one_refused_gives_its_slot_back() {
        let r = Arc::new(Registry::<Handle>::default());
        let id = SessionId::parse("s1").unwrap();
        let name = || (Inbox::new(4), Arc::<str>::from("h1"));
        let reservation = r.reserve(QuotaKey::Unknown, limits(10, 10)).unwrap();
        let refused = reservation.insert_asleep(id.clone(), name(), Tick(50), || false, (), asleep);
        assert!(refused.is_err(), "refused by `may`");
        assert_eq!((r.len(), r.sleeping(), r.next_wake()), (0, 0, None), "its slot given back");
        assert!(!r.contains(&id) && !r.is_live_hmac("h1"));
        let reservation = r.reserve(QuotaKey::Unknown, limits(10, 10)).unwrap();
        reservation.insert_asleep(id.clone(), name(), Tick(50), || true, (), asleep).unwrap();
        assert_eq!((r.len(), r.sleeping(), r.next_wake()), (1, 1, Some(Tick(50))));
        assert!(r.contains(&id) && r.is_live_hmac("h1") && r.all_awake().is_empty());
        assert_eq!(r.hibernations_and_wakes(), (1, 0));
        let (_h, _ticket) = r.enter(&id, None).unwrap().unwrap();
        assert_eq!((r.len(), r.sleeping(), r.next_wake()), (1, 0, None), "woken by a lookup");
        assert_eq!(r.hibernations_and_wakes(), (1, 1));
    }

    #[test]
    fn a_sleeping_session_takes_a_message_only_its_own_callers_and_before_its_deadline() {
        let r = Arc::new(Registry::<Handle>::default());
        let (id, _inbox, guard) = registered(&r, 1);
        let never = |_: &mut RegistryGuard<Handle>| -> bool { panic!("not asked") };
        assert!(!r.try_take_asleep(&id, None, Tick(10), never), "awake: not asked");
        guard.hibernate(Tick(50), || true, (), asleep).expect("an empty inbox");
        assert!(!r.try_take_asleep(&id, Some("mallory"), Tick(10), never), "another caller's");
        assert!(!r.try_take_asleep(&id, None, Tick(50), never), "at its deadline: a wake first");
        let unknown = SessionId::parse("s9").unwrap();
        assert!(!r.try_take_asleep(&unknown, None, Tick(10), never));
        assert!(!r.try_take_asleep(&id, None, Tick(10), |_| false), "it may say no");
        assert!(r.try_take_asleep(&id, None, Tick(10), |_| true));
        assert_eq!((r.sleeping(), r.hibernations_and_wakes()), (1, (1, 0)), "none woke it");
    }

    #[test]
    fn a_delete_takes_out_only_its_callers_sleeping_session_before_its_deadline() {
        let r = Arc::new(Registry::<Handle>::default());
        let (id, _inbox, guard) = registered(&r, 1);
        let never = |_: &RegistryGuard<Handle>| panic!("not told");
        assert!(r.try_take_out_asleep(&id, None, Tick(10), never).is_none(), "awake");
        guard.hibernate(Tick(50), || true, (), asleep).expect("an empty inbox");
        assert!(r.try_take_out_asleep(&id, Some("mallory"), Tick(10), never).is_none());
        assert!(r.try_take_out_asleep(&id, None, Tick(50), never).is_none(), "at its deadline");
        let unknown = SessionId::parse("s9").unwrap();
        assert!(r.try_take_out_asleep(&unknown, None, Tick(10), never).is_none());
        let mut told = false;
        let taken = r.try_take_out_asleep(&id, None, Tick(10), |_| told = true).expect("asleep");
        assert!(told, "told before it left");
        assert_eq!((r.sleeping(), r.next_wake(), r.contains(&id)), (0, None, false));
        assert!(!r.is_live_hmac("h1"));
        assert_eq!(r.len(), 1, "its slot is given back only as it is dropped");
        drop(taken);
        assert_eq!((r.len(), r.hibernations_and_wakes()), (0, (1, 0)), "never woken");
    }

    #[test]
    fn a_sleeping_session_is_taken_out_as_data_and_an_awake_one_is_not() {
        let r = Arc::new(Registry::<Handle>::default());
        let (id, _inbox, guard) = registered(&r, 1);
        assert!(r.take_asleep(&id).is_none(), "awake");
        guard.hibernate(Tick(50), || true, (), asleep).expect("an empty inbox");
        let taken = r.take_asleep(&id).expect("asleep");
        assert_eq!((r.sleeping(), r.next_wake(), r.contains(&id)), (0, None, false));
        assert!(!r.is_live_hmac("h1"));
        assert_eq!(r.len(), 1, "its slot is given back only as it is dropped");
        drop(taken);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn a_session_hibernates_only_with_an_empty_inbox_and_a_lookup_wakes_it() {
        let r = Arc::new(Registry::<Handle>::default());
        let (id, inbox, guard) = registered(&r, 1);
        let ticket = inbox.enter().unwrap();
        let guard = guard.hibernate(Tick(50), || true, (), asleep).expect_err("a request waits").0;
        drop(ticket);
        let control = inbox.control();
        let guard =
            guard.hibernate(Tick(50), || true, (), asleep).expect_err("a control message").0;
        drop(control);
        let guard =
            guard.hibernate(Tick(50), || false, (), asleep).expect_err("refused by `may`").0;
        guard.hibernate(Tick(50), || true, (), asleep).expect("an empty inbox");
        assert_eq!((r.len(), r.sleeping(), r.next_wake()), (1, 1, Some(Tick(50))));
        assert!(r.contains(&id) && r.is_live_hmac("h1"), "still live");
        assert!(r.all_awake().is_empty());
        assert!(r.enter(&id, Some("mallory")).is_none(), "not another caller's");
        assert_eq!(r.sleeping(), 1, "and not woken by one");
        // A request's own copy of the id wakes it; the table keeps the id it was given.
        let copy = SessionId::parse(id.as_str()).unwrap();
        let (h, _ticket) = r.enter(&copy, None).unwrap().unwrap();
        assert!(Arc::ptr_eq(&h.0, &inbox), "woken with its inbox");
        assert_eq!((r.len(), r.sleeping(), r.next_wake()), (1, 0, None), "its deadline is gone");
        let kept = r.key_of(&id).unwrap();
        assert!(std::ptr::eq(kept.as_str(), id.as_str()), "not the request's copy");
    }

    #[test]
    fn a_session_that_cannot_be_woken_stays_asleep_with_its_deadline() {
        let r = Arc::new(Registry::<Handle>::default());
        let (id, _inbox, guard) = registered(&r, 1);
        guard.hibernate(Tick(50), || true, (), asleep).expect("an empty inbox");
        REFUSE_WAKE.set(true);
        assert!(r.enter(&id, None).is_none(), "not woken: not found");
        assert_eq!(r.wake_due(Tick(60), 10), 0, "nor by the sweeper");
        assert_eq!((r.len(), r.sleeping(), r.next_wake()), (1, 1, Some(Tick(50))));
        assert_eq!(r.hibernations_and_wakes(), (1, 0), "no wake counted");
        REFUSE_WAKE.set(false);
        assert!(r.enter(&id, None).is_some(), "woken once it can be");
        assert_eq!((r.sleeping(), r.next_wake()), (0, None));
    }

    #[test]
    fn the_sweeper_wakes_only_sessions_past_their_deadline_and_no_more_than_asked() {
        let r = Arc::new(Registry::<Handle>::default());
        for (n, at) in [(1, 10), (2, 20), (3, 30)] {
            let (_, _, guard) = registered(&r, n);
            guard.hibernate(Tick(at), || true, (), asleep).unwrap();
        }
        assert_eq!(r.wake_due(Tick(20), 1), 1);
        assert_eq!(r.wake_due(Tick(20), 5), 1);
        assert_eq!((r.sleeping(), r.next_wake(), r.len()), (1, Some(Tick(30)), 3));
        assert_eq!(r.hibernations_and_wakes(), (3, 2));
        let (awake, asleep) = r.take_for_shutdown();
        assert_eq!((awake.len(), asleep.len()), (2, 1), "a stop takes the sleeper out as data");
        assert_eq!((r.sleeping(), r.next_wake(), r.is_live_hmac("h3")), (0, None, false));
        drop(asleep);
        assert_eq!(r.len(), 2, "its slot is given back when it is dropped");
    }

    #[test]
    fn a_session_named_by_hex_digits_is_found_by_its_name_awake_asleep_and_not_once_gone() {
        let r = Arc::new(Registry::<Handle>::default());
        let hex = "019412345678aabbccddeeff00112233";
        let id = SessionId::parse("s1").unwrap();
        let inbox = Inbox::new(4);
        let reservation = r.reserve(QuotaKey::Unknown, limits(10, 10)).unwrap();
        let guard = reservation.insert(id.clone(), Handle(Arc::clone(&inbox)), hex.into());
        assert!(r.is_live_hmac(hex) && !r.is_live_hmac(&hex.to_uppercase()));
        assert!(matches!(r.awake_by_hmac(hex), Some(Ok(_))));
        assert_eq!(r.live_hmacs(), vec![Arc::<str>::from(hex)], "its name back, as text");
        guard.hibernate(Tick(50), || true, (), asleep).expect("an empty inbox");
        assert!(matches!(r.awake_by_hmac(hex), Some(Err(ref asleep)) if *asleep == id));
        assert!(r.try_take_asleep(&id, None, Tick(10), |_| true), "a message, still live");
        assert!(r.is_live_hmac(hex));
        let taken = r.take_asleep(&id).expect("taken out as data");
        assert!(!r.is_live_hmac(hex) && r.live_hmacs().is_empty());
        drop(taken);
        // An awake one's guard dropped.
        let other = "019412345678aabbccddeeff00112234";
        let reservation = r.reserve(QuotaKey::Unknown, limits(10, 10)).unwrap();
        let guard = reservation.insert(id.clone(), Handle(Arc::clone(&inbox)), other.into());
        assert!(r.is_live_hmac(other) && !r.is_live_hmac(hex));
        drop(guard);
        assert!(!r.is_live_hmac(other) && r.awake_by_hmac(other).is_none());
    }
}
