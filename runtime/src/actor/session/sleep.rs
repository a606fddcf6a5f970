//! Hibernation: a session with nothing to do (no request, connection, stream or client
//! request) for `sessions.hibernate_after_ms` stops its actor and is kept by the registry as
//! data, a [`SleepingSession`]: no task, mailbox, timer or tracing span. Its next request
//! (or any lookup, or the supervisor's sweeper at its expiry or parking deadline) wakes it
//! into a new actor that goes on where it stopped: same incarnation, numbering, log level and
//! last use, no ledger read or write. A stop records it as data, without waking it. It stays
//! live throughout: counted in the registry, its caller's quota and its generation.
//!
//! A new session is kept so from its handshake on ([`SleepingSession::born`]): its actor is
//! made by its first request, and a session that never sends one never has one. A POST of
//! notifications or answers only is taken by the sleeping session itself, as a use, without
//! waking it ([`SleepingSession::try_take_use`]), and a DELETE ends it as data
//! ([`SleepingSession::deleted_ops`]).

use std::sync::{Arc, Weak};

use actix::prelude::*;
use serde_json::Value;

use super::persist::{End, push_end, record_ops};
use super::{
    Begun, RequestTask, SessionActor, SessionHandle, SessionHandleParts, SessionSeed,
    SessionStreams, session_limits, session_links, session_names, session_span,
};
use crate::actor::budget::{Charge, MemoryBudget};
use crate::actor::dormant::StreamHandle;
use crate::actor::durable::{self, Residence, SessionMeta};
use crate::actor::env::SessionEnv;
use crate::actor::generations::GenCount;
use crate::actor::lifecycle::Phase;
use crate::actor::registry::{Inbox, RegistryGuard, Reservation, Starter};
use crate::ledger::codec::{HandshakeLines, RecordState, handshake_lines};
use crate::proto::error::Rejection;
use crate::proto::event_id::CursorSigner;
use crate::proto::ids::Tick;
use crate::proto::session::{STOP_RECORD_SLACK_MS, SessionCore, SessionLimits, SleepingCore};

/// What a hibernating session keeps: its core's numbering and deadlines, and what its actor
/// holds for its whole life and the server does not (its names under previous keys,
/// handshake, counts and charges). The handshake's JSON is kept as text: a parsed object
/// costs a tree node of about 600 bytes per level. Its cursor signer (two HMAC states, about
/// 220 bytes) is not kept: derived again as it wakes, from the server's key, its id and its
/// principal, it is the same signer.
pub(crate) struct SleepingSession {
    guard: RegistryGuard<SessionHandle>,
    generation: GenCount,
    handshake: Charge,
    kept: Kept,
}

/// A sleeping session's state besides what it owns alone (guard, counts, charges): built
/// before the registry's lock is taken, and dropped if the hibernation is refused.
struct Kept {
    core: SleepingCore,
    /// Its names under the server's previous keys (its name under the current one is its
    /// `meta.hmac`): empty, and no allocation, unless a key was rotated.
    previous_names: Box<[Arc<str>]>,
    /// Weak: the registry that keeps the session belongs to the supervisor (no cycle). What
    /// the whole server shares (its cursor key, its mailbox setting) is read there as it wakes
    /// rather than kept by every sleeping session (16 bytes each: a sleeping session fits
    /// jemalloc's 320-byte class).
    sup: Weak<dyn SessionEnv>,
    caller_budget: Arc<MemoryBudget>,
    /// Its name, principal, owner and origin (the awake actor's `principal` and `owner` are
    /// copies of these).
    meta: SessionMeta,
    handshake: KeptHandshake,
}

/// Its handshake as its record states it (the requested version, the capabilities and the
/// client's info): their JSON texts on three lines of one text, one allocation and 16 bytes
/// in place, kept so by an awake session too (a parsed `clientInfo` object alone costs a
/// B-tree node of 632 bytes; the record copies the text, [`HandshakeLines`]). Three
/// texts, not one array, so each parses back at its own depth (serde_json parses 127 levels;
/// a value parsed from a request is at most that deep). Compact JSON has no raw line break.
pub(super) struct KeptHandshake(Box<str>);

impl KeptHandshake {
    pub(super) fn new(requested_version: Option<&str>, capabilities: &Value, info: &Value) -> Self {
        KeptHandshake(handshake_lines(requested_version, capabilities, info).into_boxed_str())
    }

    /// The three lines, as the record copies them.
    pub(super) fn lines(&self) -> HandshakeLines<'_> {
        HandshakeLines(&self.0)
    }

    /// The client's capabilities, parsed again (an awake session's requests read them).
    ///
    /// # Panics
    /// Never: it parses what [`Self::new`] printed.
    pub(super) fn capabilities(&self) -> Value {
        let line = self.0.split('\n').nth(1).expect("three lines");
        serde_json::from_str(line).expect("printed from a JSON value")
    }

    /// As its record states it, parsed again.
    #[cfg(test)]
    fn handshake(&self) -> crate::ledger::codec::Handshake {
        let mut lines = self.0.splitn(3, '\n');
        let mut next = || lines.next().expect("three lines");
        let printed = "printed from JSON values";
        let requested_version = serde_json::from_str(next()).expect(printed);
        let capabilities = serde_json::from_str(next()).expect(printed);
        let client_info = serde_json::from_str(next()).expect(printed);
        crate::ledger::codec::Handshake { requested_version, capabilities, client_info }
    }
}

impl Kept {
    /// What a session keeps of `core` and of its life while it sleeps, under `sup`: its
    /// names under previous keys, its caller's share, its record's `meta` and its `handshake`.
    fn new(
        core: SleepingCore,
        sup: &Arc<dyn SessionEnv>,
        previous_names: Box<[Arc<str>]>,
        caller_budget: &Arc<MemoryBudget>,
        meta: SessionMeta,
        handshake: KeptHandshake,
    ) -> Kept {
        Kept {
            core,
            previous_names,
            sup: Arc::downgrade(sup),
            caller_budget: Arc::clone(caller_budget),
            meta,
            handshake,
        }
    }

    /// Its names in the ledger, its current one first, as its actor holds them.
    fn names(&self) -> Arc<[Arc<str>]> {
        session_names(&self.meta.hmac, &self.previous_names)
    }
}

/// What a sleeping session keeps of an awake one's `names`: those after the first (its
/// current name, which its record's meta holds).
fn previous_names(names: &[Arc<str>]) -> Box<[Arc<str>]> {
    names.get(1..).unwrap_or_default().into()
}

/// A session's core as its actor holds it.
type AwakeCore = SessionCore<RequestTask, StreamHandle, super::ClientRequestRoute>;

/// What goes to sleep besides the guard: built, and taken back on a refusal, outside the
/// registry's lock.
type Parts = (GenCount, Charge, Kept);

/// The registry's entry for a session going to sleep: a plain move (it runs under the
/// registry's lock).
fn asleep(
    guard: RegistryGuard<SessionHandle>,
    (generation, handshake, kept): Parts,
) -> Box<SleepingSession> {
    Box::new(SleepingSession { guard, generation, handshake, kept })
}

impl SessionActor {
    /// Hibernate if nothing is open and the session may: it hands its state to the registry
    /// and stops. Refused (it stays awake another `hibernate_after_ms`) while a request or a
    /// control message holds a place in its inbox, a stream is kept, its first record is not
    /// handed to the ledger yet, or the host is not serving (checked under the registry's
    /// lock, which a stop's sweep of the table takes too).
    pub(super) fn hibernate(&mut self, ctx: &mut Context<Self>) -> bool {
        let now = self.sup.now();
        self.record_if_due();
        let core = self
            .core
            .sleep()
            .filter(|_| self.dormant_until.is_empty() && self.on_recorded.is_none());
        let Some((core, deadline)) = core else {
            self.core.stay_awake(now);
            return false;
        };
        // No guard: it is ending (DELETE, expiry, parking) and stops soon.
        let Some(guard) = self.guard.take() else { return false };
        let (Some(generation), Some(handshake)) =
            (self.generation_count.take(), self.handshake_charge.take())
        else {
            unreachable!("an awake session holds its count and charge until it hibernates")
        };
        // A copy: the actor keeps its own until the hibernation is taken.
        let texts = KeptHandshake(self.handshake.0.clone());
        let meta = self.meta.clone();
        debug_assert!(self.names.first() == Some(&meta.hmac), "its first name is its hmac");
        let previous = previous_names(&self.names);
        let kept = Kept::new(core, &self.sup, previous, &self.caller_budget, meta, texts);
        let serving = || self.sup.phase() == Phase::Serving;
        match guard.hibernate(deadline, serving, (generation, handshake, kept), asleep) {
            Ok(()) => {
                tracing::debug!("session hibernated");
                self.sup.hibernated();
                ctx.stop();
                true
            }
            Err((guard, (generation, handshake, _))) => {
                self.guard = Some(guard);
                self.generation_count = Some(generation);
                self.handshake_charge = Some(handshake);
                self.core.stay_awake(now);
                false
            }
        }
    }

    /// The actor of a session woken from hibernation.
    fn woken(
        s: SleepingSession,
        signer: Arc<CursorSigner>,
        sup: Arc<dyn SessionEnv>,
        addr: &Addr<SessionActor>,
    ) -> Self {
        let SleepingSession { guard, generation, handshake, kept: k } = s;
        let limits = session_limits(&*sup, &generation);
        let names = k.names();
        let now = sup.now();
        SessionActor {
            core: SessionCore::wake(k.core, limits, now),
            dormant_until: crate::proto::deadlines::Deadlines::default(),
            bodies: super::streams::DormantBodies::default(),
            principal: k.meta.principal.clone(),
            owner: k.meta.owner.clone(),
            names,
            signer,
            streams: SessionStreams::new(&*sup, k.core.version(), &k.meta),
            gens: Arc::clone(sup.generations()),
            span: session_span(&k.meta.hmac, &generation),
            generation_count: Some(generation),
            client_caps: Arc::new(k.handshake.capabilities()),
            guard: Some(guard),
            timer: None,
            turn: None,
            ended_by: Rejection::SessionNotFound,
            link: Arc::new(addr.clone().recipient()),
            links: session_links(addr),
            caller_budget: k.caller_budget,
            handshake_charge: Some(handshake),
            meta: k.meta,
            handshake: k.handshake,
            ledger: Arc::clone(&sup.stream_env().ledger),
            on_recorded: None,
            sup,
        }
    }
}

impl SleepingSession {
    /// A new session's bounds when it is kept as data from its handshake on ([`Self::born`]):
    /// when it is new (no restore) and its sessions hibernate (never on a shared ledger).
    /// `None`: it gets its actor at once.
    pub(crate) fn born_limits(seed: &SessionSeed, sup: &dyn SessionEnv) -> Option<SessionLimits> {
        let limits = session_limits(sup, &seed.generation);
        (seed.restore.is_none() && limits.hibernate_after_ms != u64::MAX).then_some(limits)
    }

    /// A new session kept as data from its handshake on, as a hibernation would keep it, with
    /// `limits` ([`Self::born_limits`]): an actor is made only once a request comes (most
    /// clients send one at once; some never do). Its first record goes to the ledger now
    /// (`seed.recorded` is told of its commit). Refused by a drain that began meanwhile
    /// (checked under the registry's lock, as a hibernation is), it is not registered; its
    /// record stays, as an awake session's does when a drain stops it at once.
    ///
    /// # Panics
    /// Never: a new core's first record is always due and its tables are empty.
    pub(crate) fn born(
        seed: SessionSeed,
        limits: SessionLimits,
        sup: Arc<dyn SessionEnv>,
        reservation: Reservation<SessionHandle>,
    ) {
        let now = sup.now();
        let Begun { mut core, previous_names, meta, handshake } = seed.begin(&*sup, limits, now);
        let used = core.poll_ledger(now).expect("a new session's record is due");
        let Some((sleeping, wake_at)) = core.sleep() else {
            unreachable!("a new session's tables are empty")
        };
        let hs = &seed.handshake;
        let texts =
            KeptHandshake::new(hs.requested_version.as_deref(), &hs.capabilities, &hs.client_info);
        let kept = Kept::new(sleeping, &sup, previous_names, &seed.caller_budget, meta, texts);
        let ledger = &sup.stream_env().ledger;
        let now_state = (RecordState::Active, Residence::Stays);
        // The record copies the text just printed: the handshake is printed once.
        let printed = kept.handshake.lines();
        let mut ops = record_ops(&kept.meta, ledger, &core, now_state, used, printed);
        let inbox = Inbox::new(sup.config().sessions.mailbox);
        let inbox_and_name = (inbox, Arc::clone(&kept.meta.hmac));
        let serving = || sup.phase() == Phase::Serving;
        let parts = (seed.generation, handshake, kept);
        // Registered before its record goes out.
        let registered =
            reservation.insert_asleep(seed.id, inbox_and_name, wake_at, serving, parts, asleep);
        match registered {
            Ok(()) => sup.hibernated(),
            Err((_, _, kept)) => {
                tracing::debug!("a new session was refused its place by a drain");
                // Out of memory from the start: recorded as leaving it, so the ledger's
                // session cap counts it ([`Residence`]).
                let leaving = (RecordState::Active, Residence::Leaving);
                let printed = kept.handshake.lines();
                ops = record_ops(&kept.meta, ledger, &core, leaving, used, printed);
            }
        }
        match seed.recorded {
            Some(first) => ledger.writer.submit_then(
                ops,
                Box::new(move || {
                    let _ = first.send(());
                }),
            ),
            None => ledger.writer.submit(ops),
        }
    }

    /// A message that asks for nothing but to count as a use reached it at `now` (one of a
    /// batch when `batch`): taken without waking it unless its version refuses batches (its
    /// woken actor answers with that error) or its record would be due
    /// ([`SleepingCore::try_take_use`]). A hibernating session has nothing in flight and asks
    /// its client nothing, on a ledger of its own: a cancellation finds nothing to cancel and
    /// an answer no question, as its actor would find.
    pub(crate) fn try_take_use(&mut self, now: Tick, idle_ttl_ms: u64, batch: bool) -> bool {
        let core = &mut self.kept.core;
        (!batch || core.version().allows_batches()) && core.try_take_use(now, idle_ttl_ms)
    }

    /// The principal that owns it.
    pub(super) fn principal(&self) -> Option<&str> {
        self.kept.meta.principal.as_deref()
    }

    /// The guard it holds (the registry marks it taken out).
    pub(super) fn guard_mut(&mut self) -> &mut RegistryGuard<SessionHandle> {
        &mut self.guard
    }

    /// Its name in the ledger (its id's HMAC).
    pub(crate) fn hmac(&self) -> &Arc<str> {
        &self.kept.meta.hmac
    }

    /// Its end as data at `now` (a DELETE while it sleeps): the writes an awake session's
    /// `Delete` makes ([`SessionActor::record_end`]). It holds no stream; it is announced, as
    /// a DELETE is, to the hosts of a shared ledger (where a session never sleeps).
    pub(crate) fn deleted_ops(&self, sup: &dyn SessionEnv, now: Tick) -> Vec<crate::ledger::Op> {
        let state = RecordState::Deleted;
        let mut ops = self.record(sup, (state, Residence::Stays), |_| now);
        let end = End { state, at: now, announce: true };
        let ledger = &sup.stream_env().ledger;
        push_end(&mut ops, &self.kept.meta.hmac, ledger, std::iter::empty(), end);
        ops
    }

    /// A stop, without waking it: its row in the LRU index and, unless the record last handed
    /// to the ledger already states it (its last use at most [`STOP_RECORD_SLACK_MS`] behind:
    /// a session not used since its handshake but for its `initialized` notification, or
    /// since its last record), its record as of its last use (as an awake session's
    /// `Shutdown` writes it); then it is dropped, which frees its slot. Writing each such
    /// record again was most of a stop's ledger work with many idle sessions (issue 23). On a
    /// shared ledger, where no session sleeps, the whole record is written.
    pub(crate) fn shut_down(self) {
        let Some(sup) = self.kept.sup.upgrade() else { return };
        let ledger = &sup.stream_env().ledger;
        let core = &self.kept.core;
        let lru_only = if core.record_is_current_within(STOP_RECORD_SLACK_MS) {
            durable::lru_enter(ledger, &self.kept.meta.hmac, core.last_activity().0)
        } else {
            None
        };
        let ops = match lru_only {
            Some(op) => vec![op],
            None => {
                let leaving = (RecordState::Active, Residence::Leaving);
                self.record(&*sup, leaving, SessionCore::last_activity)
            }
        };
        ledger.writer.submit(ops);
    }

    /// The writes of its record in `state`, stating the last use `used` reads from its core
    /// (as its awake actor's would: [`record_ops`]).
    fn record(
        &self,
        sup: &dyn SessionEnv,
        state: (RecordState, Residence),
        used: impl FnOnce(&AwakeCore) -> Tick,
    ) -> Vec<crate::ledger::Op> {
        let k = &self.kept;
        let core = AwakeCore::wake(k.core, session_limits(sup, &self.generation), sup.now());
        let ledger = &sup.stream_env().ledger;
        let handshake = k.handshake.lines();
        record_ops(&k.meta, ledger, &core, state, used(&core), handshake)
    }
}

/// A hibernating session's new actor: its handle (its address, made under the registry's
/// lock: nothing there panics), and what builds and starts it, run once the lock is
/// released, on an actix arbiter (a request's worker, or the sweeper's). Requests sent
/// meanwhile wait in its mailbox. Should the start fail, the session's guard is dropped
/// outside the lock and its entry goes: its requests get 404, none hangs.
///
/// # Errors
/// The session itself, unchanged, when its supervisor is gone (the registry then keeps it as
/// it was: every wake is a lookup or a sweep through a live supervisor, so not seen so far).
pub(super) fn wake(
    s: Box<SleepingSession>,
) -> Result<(SessionHandle, Starter), Box<SleepingSession>> {
    let Some(sup) = s.kept.sup.upgrade() else { return Err(s) };
    let mut ctx = Context::<SessionActor>::new();
    ctx.set_mailbox_capacity(sup.config().sessions.mailbox);
    // As the supervisor derived it when the session was created (plain computation: it
    // cannot fail under the registry's lock).
    let signer = sup.cursor_key().session_signer(s.guard.id(), s.kept.meta.principal.as_deref());
    let handle = SessionHandle::new(SessionHandleParts {
        addr: ctx.address(),
        inbox: Arc::clone(s.guard.inbox()),
        principal: s.kept.meta.principal.clone(),
        signer: Arc::clone(&signer),
        caller_budget: Arc::clone(&s.kept.caller_budget),
    });
    let start = move || {
        let actor = SessionActor::woken(*s, signer, sup, &ctx.address());
        drop(ctx.run(actor));
    };
    Ok((handle, Box::new(start)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_kept_handshake_is_its_record_again() {
        for version in [Some("2025-06-18"), Some("a \"version\" of its own"), None] {
            let caps = json!({"roots": {"listChanged": true}, "sampling": {}});
            let info = json!({"name": "client", "version": "1.0", "n": [1, 2.5, null]});
            let kept = KeptHandshake::new(version, &caps, &info);
            assert_eq!(kept.capabilities(), caps, "an awake session parses them alone");
            let back = kept.handshake();
            assert_eq!(back.requested_version.as_deref(), version);
            assert_eq!((back.capabilities, back.client_info), (caps, info));
        }
        // As deep as serde_json parses (127 levels), a line break inside a string, and text
        // that is not ASCII.
        let deep: Value = serde_json::from_str(&format!("{}{}", "[".repeat(127), "]".repeat(127)))
            .expect("127 levels parse");
        let info = json!({"name": "two\nlines", "title": "Grüße 🦀"});
        let back = KeptHandshake::new(Some("v\n2"), &deep, &info).handshake();
        assert_eq!(back.requested_version.as_deref(), Some("v\n2"));
        assert_eq!((back.capabilities, back.client_info), (deep, info));
    }

    #[test]
    fn a_sleeping_session_keeps_its_names_under_previous_keys_and_wakes_with_all_of_them() {
        let name = |c: char| -> Arc<str> { c.to_string().repeat(32).into() };
        let names: Arc<[Arc<str>]> = vec![name('a'), name('b'), name('c')].into();
        let previous = previous_names(&names);
        assert_eq!(&previous[..], &names[1..]);
        assert_eq!(session_names(&names[0], &previous), names);
        let one: Arc<[Arc<str>]> = vec![name('a')].into();
        assert!(previous_names(&one).is_empty());
        assert_eq!(session_names(&one[0], &previous_names(&one)), one);
    }

    /// A sleeping session is one allocation of jemalloc's 320-byte class (it was 368, in the
    /// 384-byte class): every byte in it is paid by every idle session.
    #[test]
    fn a_sleeping_session_fits_320_bytes() {
        assert!(
            std::mem::size_of::<SleepingSession>() <= 320,
            "{}",
            std::mem::size_of::<SleepingSession>()
        );
    }
}
