//! A stream answered in its first write, kept by its session as data instead of an actor.
//!
//! Most SSE replies are answered before their priming event goes out: the connection carries
//! the priming event and the answer in one write and ends, and the stream is closed from the
//! start. It is kept only for a late resume, for its retention. An actor for that (a task, a
//! mailbox, a timer, two messages and a stop) cost about a sixth of a legacy SSE echo's CPU
//! (issue 23's profiles), so its session keeps the [`StreamCore`] and what goes with it (its
//! ledger state, its generation count, its memory charge) in its stream table, and:
//!
//! - counts it live, closed, in its mode, exactly as its actor would (and stops counting it
//!   when it is dropped: retention over, evicted, session end);
//! - hears of its connection's end from the body itself ([`StreamReport::DormantDetached`],
//!   or queued in [`DormantEnds`] while the session is busy and the body returned every
//!   frame), then records it in the ledger if that write did not arrive, and starts its
//!   retention;
//! - keeps one timer for all its kept streams' retention ends (its own);
//! - on a resume, wakes it: [`StreamActor::start_woken`] runs the same core in an actor, its
//!   retention running on, and the resume attaches to it as to any closed stream.
//!
//! Only resumable streams whose answer is not held for a commit (durability `sync`) are kept
//! so; plain and shadow streams, and every open stream, have actors.
//!
//! Once its connection returned every frame and nothing of it was recorded (it never will be:
//! settled), the common end of an echo's reply, a kept stream holds only its answer and its
//! counts and charges ([`StreamCore::settled_answer`]): about 100 bytes instead of the core's,
//! its ledger state's and its window's 800, dropped while they are still in the cache. A
//! session retains up to 64 answered streams, and evicting one that left the cache was the
//! largest item a call over 64 sessions adds (issue 23's round-12 profile). A resume rebuilds
//! the same core ([`StreamCore::from_settled`]) and wakes it as any kept stream.
//!
//! [`StreamReport::DormantDetached`]: super::links::StreamReport::DormantDetached
//! [`DormantEnds`]: super::links::DormantEnds

use std::sync::Arc;

use actix::prelude::*;

use super::body::{ConnectionOwner, SseBody, StreamOwner};
use super::budget::{Charge, MemoryBudget};
use super::durable::StreamLedger;
use super::generations::{Gen, GenCount};
use super::links::{DormantEnds, SessionLink};
use super::stream::{
    Parts, StreamActor, StreamEnv, charge_window, count_started, count_stopped, count_stopped_as,
    forget_copy, submit_changes,
};
use crate::proto::ids::{StreamId, Tick};
use crate::proto::rollout::StreamMode;
use crate::proto::stream::{Delivery, SettledAnswer, StreamCore, StreamSettings, StreamStats};
use crate::stats::STATE_CLOSED;

/// A session's handle on one of its streams.
pub(crate) enum StreamHandle {
    /// Its actor runs: an open stream, one that is not resumable, or one a resume woke.
    Live(Addr<StreamActor>),
    /// Closed in its first write, kept as data until a resume wakes it or it is dropped.
    Dormant(DormantStream),
}

impl StreamHandle {
    /// Its actor, when it has one.
    pub(crate) fn live(&self) -> Option<&Addr<StreamActor>> {
        match self {
            StreamHandle::Live(a) => Some(a),
            StreamHandle::Dormant(_) => None,
        }
    }
}

/// A closed stream kept as data. Counted live from [`DormantStream::open`] until dropped
/// (unless it woke: its actor counts it on).
pub(crate) struct DormantStream {
    sid: StreamId,
    kept: Kept,
    /// When its retention ends (from its connection's end on), as its session indexes it.
    until: Option<Tick>,
}

/// What a kept stream holds.
enum Kept {
    /// All of it, until its connection ended (and after, unless it settled).
    Whole(Box<Parts>),
    /// Settled in its retention: its answer, counts and charges.
    Answer(Box<KeptAnswer>),
    /// Woken: its actor has it now.
    Woken,
}

/// A settled kept stream ([`StreamCore::settled_answer`]): what rebuilds its core, and what
/// it counts and holds until it is dropped or wakes.
struct KeptAnswer {
    answer: SettledAnswer,
    generation: GenCount,
    charge: Charge,
    env: Arc<StreamEnv>,
}

impl std::fmt::Debug for DormantStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = match self.kept {
            Kept::Whole(_) => "whole",
            Kept::Answer(_) => "answer",
            Kept::Woken => "woken",
        };
        f.debug_struct("DormantStream")
            .field("kept", &kept)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}

impl DormantStream {
    /// Whether a stream with `settings`, answered at once, is kept as data: a resumable one
    /// whose answer goes out without waiting for a commit.
    pub(crate) fn fits(settings: &StreamSettings) -> bool {
        settings.mode == StreamMode::Resumable && !settings.hold_until_committed
    }

    /// Open a stream ([`Self::fits`]) answered with `final_json`: its first connection's
    /// body carries the priming event and the answer and ends. Returns the stream, the body
    /// (reporting its end to `session`, or queueing it in `ends`) and the bytes its window
    /// holds. `now`: the time it opens.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        mut core: StreamCore,
        final_json: &[u8],
        env: Arc<StreamEnv>,
        caller_budget: &Arc<MemoryBudget>,
        mut ledger: StreamLedger,
        generation: GenCount,
        session: SessionLink,
        ends: Arc<DormantEnds>,
        now: Tick,
    ) -> (DormantStream, SseBody, usize) {
        let mut att = core.attach_new();
        env.stats.events_appended(1);
        match core.push_final(final_json) {
            Delivery::Write { frame, .. } => att.initial.push(frame),
            // A resumable stream with its connection attached and nothing held writes it.
            other => debug_assert!(false, "a kept stream's answer was not written: {other:?}"),
        }
        let mut charge = env.budget.charge(Some(caller_budget));
        charge_window(&mut charge, &mut core, &env.stats);
        // With nothing held, nothing waits for a commit.
        let wait = submit_changes(&mut ledger, &mut core, &env, now);
        debug_assert!(wait.is_none(), "a kept stream holds nothing for a commit");
        count_started(&env.stats, &core);
        env.stats.stream_state(None, Some(STATE_CLOSED));
        env.stats.stream_dormant(1);
        let stream = StreamOwner::Session { stream: core.id(), ends };
        let owner = ConnectionOwner { stream, session, conn: att.conn };
        let body = SseBody::new(att.initial, None, Some(owner));
        let bytes = core.retained_bytes();
        let parts = Parts { core, ledger, generation, charge, env };
        let sid = parts.core.id();
        (DormantStream { sid, kept: Kept::Whole(Box::new(parts)), until: None }, body, bytes)
    }

    /// Its connection `conn` ended (`drained`: every frame went out): recorded in the ledger
    /// if the answer may not have arrived, and its retention starts (`now`). A stream that
    /// settled keeps only its answer from here on. Returns its retention's end.
    pub(crate) fn detached(&mut self, conn: u64, drained: bool, now: Tick) -> Option<Tick> {
        // Only its one connection ever ends while it is kept: an end heard again (or of a
        // settled stream) changes nothing.
        let mut p = match std::mem::replace(&mut self.kept, Kept::Woken) {
            Kept::Whole(p) => p,
            other => {
                self.kept = other;
                return self.until;
            }
        };
        p.core.detach(conn, drained);
        let wait = submit_changes(&mut p.ledger, &mut p.core, &p.env, now);
        debug_assert!(wait.is_none(), "a kept stream holds nothing for a commit");
        if p.core.settled() {
            p.ledger.never_recorded();
        }
        self.until = p.core.poll_timeout(now);
        self.kept = match p.core.settled_answer() {
            Some(answer) => {
                let Parts { generation, charge, env, .. } = *p;
                Kept::Answer(Box::new(KeptAnswer { answer, generation, charge, env }))
            }
            None => Kept::Whole(p),
        };
        self.until
    }

    /// Its id.
    pub(crate) fn sid(&self) -> StreamId {
        self.sid
    }

    /// When its retention ends, if it runs (its connection ended).
    pub(crate) fn until(&self) -> Option<Tick> {
        self.until
    }

    /// Whether its retention is over at `now`.
    pub(crate) fn retention_over(&mut self, now: Tick) -> bool {
        match &self.kept {
            Kept::Whole(p) => p.core.handle_timeout(now).retention_over,
            // Settled: its retention's end is the only deadline its core had.
            Kept::Answer(_) => self.until.is_some_and(|t| now >= t),
            Kept::Woken => false,
        }
    }

    /// Its life is over (retention, eviction): its ledger copy goes, then it stops counting.
    pub(crate) fn forget(self) {
        // A settled stream was never recorded.
        if let Kept::Whole(p) = &self.kept {
            forget_copy(&p.ledger, &p.core, &p.env);
        }
    }

    /// A resume arrived: run it in an actor, in `ctx` (whose address its session keeps). A
    /// settled one's core and ledger state are rebuilt first, by `rebuild` from its answer
    /// and its generation.
    pub(crate) fn wake(
        mut self,
        ctx: Context<StreamActor>,
        session: SessionLink,
        span: &tracing::Span,
        rebuild: impl FnOnce(&Arc<Gen>, SettledAnswer) -> (StreamCore, StreamLedger),
    ) {
        let parts = match std::mem::replace(&mut self.kept, Kept::Woken) {
            Kept::Whole(p) => *p,
            Kept::Answer(a) => {
                let KeptAnswer { answer, generation, charge, env } = *a;
                let (core, ledger) = rebuild(generation.generation(), answer);
                Parts { core, ledger, generation, charge, env }
            }
            Kept::Woken => {
                debug_assert!(false, "a kept stream wakes once");
                return;
            }
        };
        parts.env.stats.stream_dormant(-1);
        StreamActor::start_woken(ctx, parts, session, span);
    }
}

impl Drop for DormantStream {
    fn drop(&mut self) {
        // Not woken: it stops counting, as its actor would have when it stopped.
        match std::mem::replace(&mut self.kept, Kept::Woken) {
            Kept::Whole(p) => {
                p.env.stats.stream_dormant(-1);
                count_stopped(&p.env.stats, &p.core, Some(STATE_CLOSED));
            }
            Kept::Answer(a) => {
                a.env.stats.stream_dormant(-1);
                // What its core counted: its answer, in the resumable mode.
                let counters = StreamStats { events: 1, ..StreamStats::default() };
                count_stopped_as(
                    &a.env.stats,
                    &counters,
                    StreamMode::Resumable,
                    Some(STATE_CLOSED),
                );
            }
            Kept::Woken => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::generations::{Counted, GenSettings};
    use crate::actor::links::StreamReport;
    use crate::proto::event_id::CursorKey;
    use crate::proto::ids::Generation;
    use crate::proto::replay::WindowLimits;
    use crate::proto::stream::{StreamKind, StreamTiming};

    /// A session that hears nothing (the tests call the stream's side directly).
    struct Deaf;
    impl Actor for Deaf {
        type Context = Context<Self>;
    }
    impl Handler<StreamReport> for Deaf {
        type Result = ();
        fn handle(&mut self, _: StreamReport, _: &mut Context<Self>) {}
    }

    const TIMING: StreamTiming = StreamTiming {
        keepalive_ms: 60_000,
        retention_after_delivery_ms: 1_000,
        retention_undelivered_ms: 5_000,
    };

    /// A kept stream answered with `{"result":1}` at `Tick(0)`, and what it counts in.
    fn kept(env: &Arc<StreamEnv>, share: &Arc<MemoryBudget>) -> DormantStream {
        let settings = StreamSettings {
            window: WindowLimits { max_events: 8, max_bytes: 1 << 16 },
            prime: true,
            retry_ms: Some(100),
            hold_until_committed: false,
            mode: StreamMode::Resumable,
            timing: TIMING,
        };
        assert!(DormantStream::fits(&settings));
        let core = StreamCore::new(
            StreamId(3),
            Generation(1),
            StreamKind::Post { request: crate::proto::ids::JsonRpcId::Number(9) },
            Arc::new(CursorKey::new(b"k").signer("s", None)),
            settings,
        );
        let generation =
            Arc::new(Gen::new(GenSettings::for_tests(), Arc::default())).enter(Counted::Stream);
        let ledger = StreamLedger::new("0".repeat(32).into(), StreamId(3), None, Tick(0));
        let session: SessionLink = Arc::new(Deaf.start().recipient());
        let (stream, _body, bytes) = DormantStream::open(
            core,
            br#"{"result":1}"#,
            Arc::clone(env),
            share,
            ledger,
            generation,
            session,
            Arc::default(),
            Tick(0),
        );
        assert!(bytes > 0 && share.used() == bytes && env.budget.used() == bytes);
        stream
    }

    /// Live and kept streams, closed ones, resumable ones, and the bytes charged.
    fn counts(env: &StreamEnv, share: &MemoryBudget) -> (i64, i64, i64, i64, usize) {
        let m = env.stats.metrics();
        let of = |v: &[(&str, i64)], k: &str| v.iter().find(|(n, _)| *n == k).map_or(0, |c| c.1);
        (
            env.stats.streams_live(),
            env.stats.streams_dormant(),
            of(&m.streams_by_state, "closed"),
            of(&m.streams_by_mode, "resumable"),
            share.used(),
        )
    }

    #[actix_web::test]
    async fn a_kept_stream_whose_connection_drained_keeps_only_its_answer_and_counts_as_before() {
        let env = crate::actor::stream::test_env(TIMING);
        let share = MemoryBudget::new(1 << 20);
        let mut s = kept(&env, &share);
        let open = counts(&env, &share);
        assert_eq!(&[open.0, open.1, open.2, open.3], &[1, 1, 1, 1], "{open:?}");
        assert_eq!(format!("{s:?}"), r#"DormantStream { kept: "whole", until: None, .. }"#);
        assert_eq!(s.detached(1, true, Tick(10)), Some(Tick(1_010)), "its retention runs");
        assert!(format!("{s:?}").contains(r#"kept: "answer""#), "settled: its answer alone");
        assert_eq!(counts(&env, &share), open, "counted and charged as before");
        assert_eq!(s.detached(1, true, Tick(20)), Some(Tick(1_010)), "an end heard twice");
        assert!(!s.retention_over(Tick(1_009)) && s.retention_over(Tick(1_010)));
        s.forget();
        assert_eq!(counts(&env, &share), (0, 0, 0, 0, 0), "dropped: counts and charges go");
        assert_eq!(env.budget.used(), 0);
    }

    #[actix_web::test]
    async fn a_kept_stream_whose_answer_may_not_have_arrived_is_kept_whole() {
        let env = crate::actor::stream::test_env(TIMING);
        let share = MemoryBudget::new(1 << 20);
        let mut s = kept(&env, &share);
        let open = counts(&env, &share);
        assert_eq!(s.detached(1, false, Tick(10)), Some(Tick(5_010)), "the longer retention");
        assert!(format!("{s:?}").contains(r#"kept: "whole""#), "recorded, so kept whole");
        assert_eq!(counts(&env, &share), open);
        drop(s);
        assert_eq!(counts(&env, &share), (0, 0, 0, 0, 0));
    }
}
