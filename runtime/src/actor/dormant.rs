//! A stream answered in its first write, kept by its session as data instead of an actor.
//!
//! Most SSE replies are answered before their priming event goes out: the connection carries
//! the priming event and the answer in one write and ends, and the stream is closed from the
//! start. It is kept only for a late resume, for its retention. An actor for that (a task, a
//! mailbox, a timer, two messages and a stop) cost about a sixth of a legacy SSE echo's CPU
//! (issue 23's profiles), so its session keeps it as data in its stream table (what its core
//! would be made of, or the core, or its answer: below), with what goes with it (its ledger
//! state, its generation count, its memory charge), and:
//!
//! - counts it live, closed, in its mode, exactly as its actor would (and stops counting it
//!   when it is dropped: retention over, evicted, session end);
//! - hears of its connection's end from the body itself ([`StreamReport::DormantDetached`],
//!   or queued in [`DormantEnds`] while the session is busy and the body returned every
//!   frame), then records it in the ledger if that write did not arrive, and starts its
//!   retention;
//! - keeps one timer for all its kept streams' retention ends (its own);
//! - on a resume, wakes it: [`StreamActor::start_woken`] runs its core in an actor, its
//!   retention running on, and the resume attaches to it as to any closed stream.
//!
//! Only resumable streams whose answer is not held for a commit (durability `sync`) are kept
//! so; plain and shadow streams, and every open stream, have actors.
//!
//! While its first connection writes it, a kept stream holds its answer's frame and what its
//! core would be made of, not the core ([`AnsweredAtOnce`]): most settle, and making a core, a
//! window and a change list for each, then dropping them, cost about 1.5 % of a legacy
//! echo's host CPU on one session (issue 23, round 15). One whose connection ends before
//! every frame surely arrived, or that a resume wakes first, gets its core then, made by the
//! same calls (the same cursors, so the same frames).
//!
//! Once its connection returned every frame and nothing of it was recorded (it never will be:
//! settled), the common end of an echo's reply, a kept stream holds only its answer (its
//! JSON alone when small) and its counts and charges ([`StreamCore::settled_answer`]): about
//! 104 bytes and the answer instead of the core's, its ledger state's and its window's 740. A
//! session retains 64 answered streams by default (`sessions.max_retained_streams`), and
//! evicting one that had left the cache was the largest item a call over 64 sessions adds
//! (issue 23's round-12 profile). A resume rebuilds the same core
//! ([`StreamCore::from_settled`]) and wakes it as any kept stream.
//!
//! [`StreamReport::DormantDetached`]: super::links::StreamReport::DormantDetached
//! [`DormantEnds`]: super::links::DormantEnds

use std::sync::Arc;

use actix::prelude::*;

use super::body::{ConnectionOwner, SseBody, StreamOwner};
use super::budget::{Charge, MemoryBudget};
use super::durable::StreamLedger;
use super::generations::GenCount;
use super::links::{DormantEnds, SessionLink};
use super::stream::{
    Parts, StreamActor, StreamEnv, count_started_as, count_stopped, count_stopped_as, forget_copy,
    submit_changes,
};
use crate::proto::event_id::CursorSigner;
use crate::proto::ids::{JsonRpcId, StreamId, Tick};
use crate::proto::stream::{AnsweredAtOnce, SettledAnswer, StreamCore, StreamSettings};
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

    /// Whether the ledger may hold a record of it, so that its session's record writes
    /// extend its record's expiry and its session's end forgets it. An actor's stream may
    /// have one; a kept one only once kept whole (its answer may not have arrived). A kept
    /// one written at once has none while its connection writes (the record it may get then
    /// states its own expiry), and a settled one never will.
    pub(crate) fn may_be_recorded(&self) -> bool {
        match self {
            StreamHandle::Live(_) => true,
            StreamHandle::Dormant(d) => matches!(d.kept, Kept::Whole(_)),
        }
    }
}

/// A closed stream kept as data. Counted live from [`DormantStream::open`] until dropped
/// (unless it woke: its actor counts it on).
///
/// It sits in its session's stream table, up to 64 of them a session by default, so it is
/// small: its retention's end, which its session indexes, is in what it keeps.
pub(crate) struct DormantStream {
    sid: StreamId,
    kept: Kept,
}

/// What a kept stream holds.
enum Kept {
    /// Its frames and what its core would be made of, while its first connection writes (no
    /// core: most such streams settle, and one is made only if this one does not).
    AtOnce(Box<AtOnce>),
    /// All of it: its connection ended before every frame surely arrived.
    Whole(Box<Whole>),
    /// Settled in its retention: its answer, counts and charges.
    Answer(Box<KeptAnswer>),
    /// Nothing: woken (its actor has it), or dropped.
    Taken,
}

/// A kept stream while its first connection writes: its answer as written
/// ([`AnsweredAtOnce`]), the settings its core is made with if it must be, its ledger state
/// (its request, for a record), and what it counts and holds.
struct AtOnce {
    stream: AnsweredAtOnce,
    settings: StreamSettings,
    ledger: StreamLedger,
    generation: GenCount,
    charge: Charge,
    env: Arc<StreamEnv>,
}

impl AtOnce {
    /// Its parts with its core made, as they were while its connection writes: with its
    /// session's `signer`.
    fn into_parts(self, sid: StreamId, signer: Arc<CursorSigner>) -> Parts {
        let AtOnce { stream, settings, ledger, generation, charge, env } = self;
        let g = generation.generation().settings.id;
        let core = stream.into_core(sid, g, signer, settings);
        Parts { core, ledger, generation, charge, env }
    }
}

/// A kept stream whose answer may not have arrived: its parts, and its retention's end as
/// its core named it when its connection ended.
struct Whole {
    parts: Parts,
    until: Option<Tick>,
}

/// A settled kept stream ([`StreamCore::settled_answer`]): what rebuilds its core (and tells
/// when its retention ends), and what it counts and holds until it is dropped or wakes.
struct KeptAnswer {
    answer: SettledAnswer,
    generation: GenCount,
    charge: Charge,
    env: Arc<StreamEnv>,
}

impl KeptAnswer {
    /// Its parts as they were before it settled: its core rebuilt with what it was opened
    /// with (its generation's window bound and `retry`, its server's timing, its session's
    /// `signer`), its ledger state under its session's `hmac` (it is never recorded: only
    /// its names matter).
    fn into_parts(self, sid: StreamId, signer: Arc<CursorSigner>, hmac: Arc<str>) -> Parts {
        let KeptAnswer { answer, generation, charge, env } = self;
        let g = &generation.generation().settings;
        let opened_with = (g.window, Some(g.retry_ms), env.timing);
        let core = StreamCore::from_settled(sid, g.id, signer, opened_with, answer);
        let ledger = StreamLedger::new(hmac, sid, None, Tick(0));
        Parts { core, ledger, generation, charge, env }
    }
}

impl std::fmt::Debug for DormantStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = match self.kept {
            Kept::AtOnce(_) => "at once",
            Kept::Whole(_) => "whole",
            Kept::Answer(_) => "answer",
            Kept::Taken => "taken",
        };
        f.debug_struct("DormantStream")
            .field("kept", &kept)
            .field("until", &self.until())
            .finish_non_exhaustive()
    }
}

impl DormantStream {
    /// Open stream `sid` (its `settings` [`StreamSettings::answers_at_once`]) answering `request` with
    /// `final_json`, signed by `signer`: its first connection's body carries the priming event
    /// and the answer and ends. Returns the stream, the body (reporting its end to `session`,
    /// or queueing it in `ends`) and the bytes its window holds. No core is made for it
    /// ([`AnsweredAtOnce`]) unless its connection ends before every frame surely arrived, or a
    /// resume wakes it first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn open(
        sid: StreamId,
        request: JsonRpcId,
        settings: StreamSettings,
        signer: &CursorSigner,
        final_json: &[u8],
        env: Arc<StreamEnv>,
        caller_budget: &Arc<MemoryBudget>,
        ledger: StreamLedger,
        generation: GenCount,
        session: SessionLink,
        ends: Arc<DormantEnds>,
    ) -> (DormantStream, SseBody, usize) {
        let g = generation.generation().settings.id;
        let (stream, initial) = AnsweredAtOnce::new(sid, g, request, signer, &settings, final_json);
        env.stats.events_appended(1);
        let bytes = stream.retained_bytes();
        let mut charge = env.budget.charge(Some(caller_budget));
        // Over the budget, a window keeps its newest event: this one's only one.
        let _over = charge.set(bytes);
        count_started_as(&env.stats, settings.mode);
        env.stats.stream_state(None, Some(STATE_CLOSED));
        env.stats.stream_dormant(1);
        let owner = ConnectionOwner {
            stream: StreamOwner::Session { stream: sid, ends },
            session,
            conn: AnsweredAtOnce::CONN,
        };
        let body = SseBody::new(initial, None, Some(owner));
        let at_once = AtOnce { stream, settings, ledger, generation, charge, env };
        (DormantStream { sid, kept: Kept::AtOnce(Box::new(at_once)) }, body, bytes)
    }

    /// Its connection `conn` ended (`drained`: every frame went out): recorded in the ledger
    /// if the answer may not have arrived (its core made first, with its session's `signer`,
    /// if it has none yet), and its retention starts (`now`). A stream that settled keeps
    /// only its answer from here on. Returns its retention's end.
    pub(crate) fn detached(
        &mut self,
        conn: u64,
        drained: bool,
        now: Tick,
        signer: &Arc<CursorSigner>,
    ) -> Option<Tick> {
        if matches!(self.kept, Kept::AtOnce(_)) {
            // Only its one connection ever ends while it is kept.
            if conn != AnsweredAtOnce::CONN {
                return None;
            }
            let Kept::AtOnce(a) = std::mem::replace(&mut self.kept, Kept::Taken) else {
                unreachable!("matched above")
            };
            if drained {
                // Every frame went out, nothing of it was recorded: it never will be (its
                // ledger state, with its request, goes).
                let AtOnce { stream, generation, charge, env, .. } = *a;
                let (answer, until) = stream.settled(now, env.timing);
                self.kept = Kept::Answer(Box::new(KeptAnswer { answer, generation, charge, env }));
                return Some(until);
            }
            // Its answer may not have arrived: its core is made, and goes on as below.
            let parts = a.into_parts(self.sid, Arc::clone(signer));
            self.kept = Kept::Whole(Box::new(Whole { parts, until: None }));
        }
        // An end heard again (or of a settled stream) changes nothing.
        let Kept::Whole(w) = &mut self.kept else { return self.until() };
        let p = &mut w.parts;
        p.core.detach(conn, drained);
        let wait = submit_changes(&mut p.ledger, &mut p.core, &p.env, now);
        debug_assert!(wait.is_none(), "a kept stream holds nothing for a commit");
        if p.core.settled() {
            p.ledger.never_recorded();
        }
        w.until = p.core.poll_timeout(now);
        if let Some(answer) = p.core.settled_answer() {
            debug_assert_eq!(w.until, Some(answer.retention_end(p.env.timing)), "its one deadline");
            if let Kept::Whole(w) = std::mem::replace(&mut self.kept, Kept::Taken) {
                let Parts { generation, charge, env, .. } = w.parts;
                self.kept = Kept::Answer(Box::new(KeptAnswer { answer, generation, charge, env }));
            }
        }
        self.until()
    }

    /// Its id.
    pub(crate) fn sid(&self) -> StreamId {
        self.sid
    }

    /// When its retention ends, if it runs (its connection ended).
    pub(crate) fn until(&self) -> Option<Tick> {
        match &self.kept {
            Kept::Whole(w) => w.until,
            Kept::Answer(a) => Some(a.answer.retention_end(a.env.timing)),
            Kept::AtOnce(_) | Kept::Taken => None,
        }
    }

    /// Whether its retention is over at `now`.
    pub(crate) fn retention_over(&self, now: Tick) -> bool {
        match &self.kept {
            // Its connection still writes it.
            Kept::AtOnce(_) => false,
            Kept::Whole(w) => w.parts.core.handle_timeout(now).retention_over,
            // Settled: its retention's end, the only deadline its core had, is `until`.
            Kept::Answer(a) => now >= a.answer.retention_end(a.env.timing),
            Kept::Taken => false,
        }
    }

    /// Its life is over (retention, eviction): its ledger copy goes, then it stops counting.
    pub(crate) fn forget(self) {
        // A settled stream was never recorded.
        if let Kept::Whole(w) = &self.kept {
            forget_copy(&w.parts.ledger, &w.parts.core, &w.parts.env);
        }
    }

    /// A resume arrived: run it in an actor, in `ctx` (whose address its session keeps). A
    /// settled one's core is rebuilt first, with its session's `signer` and `hmac`.
    pub(crate) fn wake(
        mut self,
        ctx: Context<StreamActor>,
        session: SessionLink,
        span: &tracing::Span,
        (signer, hmac): (Arc<CursorSigner>, Arc<str>),
    ) {
        let parts = match std::mem::replace(&mut self.kept, Kept::Taken) {
            Kept::AtOnce(a) => a.into_parts(self.sid, signer),
            Kept::Whole(w) => w.parts,
            Kept::Answer(a) => a.into_parts(self.sid, signer, hmac),
            Kept::Taken => {
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
        match std::mem::replace(&mut self.kept, Kept::Taken) {
            Kept::AtOnce(a) => {
                let stats = &a.env.stats;
                stats.stream_dormant(-1);
                // What its core would have counted: its answer.
                count_stopped_as(
                    stats,
                    &SettledAnswer::COUNTERS,
                    a.settings.mode,
                    Some(STATE_CLOSED),
                );
            }
            Kept::Whole(w) => {
                w.parts.env.stats.stream_dormant(-1);
                count_stopped(&w.parts.env.stats, &w.parts.core, Some(STATE_CLOSED));
            }
            Kept::Answer(a) => {
                let stats = &a.env.stats;
                stats.stream_dormant(-1);
                count_stopped_as(
                    stats,
                    &SettledAnswer::COUNTERS,
                    SettledAnswer::MODE,
                    Some(STATE_CLOSED),
                );
            }
            Kept::Taken => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::generations::{Counted, Gen, GenSettings};
    use crate::actor::links::StreamReport;
    use crate::proto::event_id::CursorKey;
    use crate::proto::ids::JsonRpcId;
    use crate::proto::rollout::StreamMode;
    use crate::proto::stream::StreamTiming;

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

    fn signer() -> Arc<CursorSigner> {
        Arc::new(CursorKey::new(b"k").signer("s", None))
    }

    fn hmac() -> Arc<str> {
        "0".repeat(32).into()
    }

    /// What a kept stream shares with its session and server.
    struct World {
        env: Arc<StreamEnv>,
        share: Arc<MemoryBudget>,
        generation: Arc<Gen>,
    }

    impl World {
        fn new() -> World {
            World {
                env: crate::actor::stream::test_env(TIMING),
                share: MemoryBudget::new(1 << 20),
                generation: Arc::new(Gen::new(GenSettings::for_tests(), Arc::default())),
            }
        }

        /// A kept stream of its generation, answered with `{"result":1}` at `Tick(0)`.
        fn kept(&self) -> DormantStream {
            self.kept_for(None)
        }

        /// The same, its ledger state keeping `request` (method and params) for a record.
        fn kept_for(&self, request: Option<(String, Option<serde_json::Value>)>) -> DormantStream {
            let g = &self.generation.settings;
            let settings = StreamSettings {
                window: g.window,
                prime: true,
                retry_ms: Some(g.retry_ms),
                hold_until_committed: false,
                mode: StreamMode::Resumable,
                timing: self.env.timing,
            };
            assert!(settings.answers_at_once());
            let ledger = StreamLedger::new(hmac(), StreamId(3), request, Tick(0));
            let session: SessionLink = Arc::new(Deaf.start().recipient());
            let (stream, _body, bytes) = DormantStream::open(
                StreamId(3),
                JsonRpcId::Number(9),
                settings,
                &signer(),
                br#"{"result":1}"#,
                Arc::clone(&self.env),
                &self.share,
                ledger,
                self.generation.enter(Counted::Stream),
                session,
                Arc::default(),
            );
            assert!(bytes > 0 && self.share.used() == bytes && self.env.budget.used() == bytes);
            stream
        }

        /// Wake `s`: its actor counts it on, closed, in its generation, charged the same; then
        /// stop it: its counts and charges go.
        async fn wakes_counted_as_before_then_stops(&self, s: DormantStream) {
            let before = self.counts();
            let ctx = Context::<StreamActor>::new();
            let addr = ctx.address();
            let session: SessionLink = Arc::new(Deaf.start().recipient());
            s.wake(ctx, session, &tracing::Span::none(), (signer(), hmac()));
            assert_eq!(self.counts(), (1, 0, 1, 1, 1, before.5, before.6), "{before:?}");
            addr.send(crate::actor::stream::Stop(crate::proto::stream::CloseReason::Evicted))
                .await
                .expect("the woken stream runs");
            for _ in 0..100 {
                if self.counts().0 == 0 {
                    break;
                }
                tokio::task::yield_now().await;
            }
            assert_eq!(self.counts(), (0, 0, 0, 0, 0, 0, 0), "stopped: counts and charges go");
        }

        /// Live and kept streams, closed ones, resumable ones, its generation's streams, and
        /// the bytes charged (to the caller's share and to the server's budget).
        fn counts(&self) -> (i64, i64, i64, i64, i64, usize, usize) {
            let m = self.env.stats.metrics();
            let of =
                |v: &[(&str, i64)], k: &str| v.iter().find(|(n, _)| *n == k).map_or(0, |c| c.1);
            (
                self.env.stats.streams_live(),
                self.env.stats.streams_dormant(),
                of(&m.streams_by_state, "closed"),
                of(&m.streams_by_mode, "resumable"),
                self.generation.count(Counted::Stream),
                self.share.used(),
                self.env.budget.used(),
            )
        }
    }

    fn kept_as(s: &DormantStream) -> &'static str {
        match s.kept {
            Kept::AtOnce(_) => "at once",
            Kept::Whole(_) => "whole",
            Kept::Answer(_) => "answer",
            Kept::Taken => "taken",
        }
    }

    #[actix_web::test]
    async fn a_kept_stream_whose_connection_drained_keeps_only_its_answer_and_counts_as_before() {
        let w = World::new();
        let mut s = w.kept();
        let open = w.counts();
        assert_eq!((open.0, open.1, open.2, open.3, open.4), (1, 1, 1, 1, 1), "{open:?}");
        assert_eq!(kept_as(&s), "at once", "no core while its connection writes");
        assert_eq!(
            s.detached(2, true, Tick(5), &signer()),
            None,
            "not its connection: nothing changes"
        );
        assert_eq!(kept_as(&s), "at once");
        assert_eq!(
            s.detached(1, true, Tick(10), &signer()),
            Some(Tick(1_010)),
            "its retention runs"
        );
        assert_eq!(kept_as(&s), "answer", "settled: its answer alone");
        assert_eq!(w.counts(), open, "counted and charged as before");
        assert_eq!(
            s.detached(1, true, Tick(20), &signer()),
            Some(Tick(1_010)),
            "an end heard twice"
        );
        assert!(!s.retention_over(Tick(1_009)) && s.retention_over(Tick(1_010)));
        s.forget();
        assert_eq!(w.counts(), (0, 0, 0, 0, 0, 0, 0), "dropped: counts and charges go");
    }

    #[actix_web::test]
    async fn a_kept_stream_whose_answer_may_not_have_arrived_is_kept_whole() {
        let w = World::new();
        let mut s = w.kept();
        let open = w.counts();
        assert_eq!(
            s.detached(1, false, Tick(10), &signer()),
            Some(Tick(5_010)),
            "the longer retention"
        );
        assert_eq!(kept_as(&s), "whole", "recorded, so kept whole");
        assert_eq!(w.counts(), open);
        assert_eq!(s.until(), Some(Tick(5_010)), "what it keeps names the end");
        assert_eq!(s.detached(1, false, Tick(900), &signer()), Some(Tick(5_010)), "heard again");
        assert!(!s.retention_over(Tick(5_009)) && s.retention_over(Tick(5_010)));
        drop(s);
        assert_eq!(w.counts(), (0, 0, 0, 0, 0, 0, 0));
    }

    #[actix_web::test]
    async fn a_settled_stream_names_its_retention_end_from_what_it_keeps() {
        let w = World::new();
        let mut s = w.kept();
        assert_eq!(s.until(), None, "its connection still writes it");
        assert_eq!(s.detached(1, true, Tick(10), &signer()), Some(Tick(1_010)));
        assert_eq!((kept_as(&s), s.until()), ("answer", Some(Tick(1_010))));
        assert_eq!(s.detached(1, true, Tick(500), &signer()), Some(Tick(1_010)), "heard again");
        assert!(!s.retention_over(Tick(1_009)) && s.retention_over(Tick(1_010)));
    }

    #[test]
    fn a_kept_streams_table_entry_and_settled_box_stay_small() {
        // Up to 64 kept streams a session sit in its stream table's window, a 64-byte slot
        // each, a settled one's box beside each.
        let slot = std::mem::size_of::<Option<crate::proto::session::StreamEntry<StreamHandle>>>();
        assert!(slot <= 64, "a table slot of {slot} bytes");
        let kept = std::mem::size_of::<KeptAnswer>();
        assert!(kept <= 112, "a settled box of {kept} bytes (jemalloc's 112-byte class)");
    }

    #[actix_web::test]
    async fn a_settled_stream_is_rebuilt_as_it_was_opened_and_wakes_counted_as_before() {
        let w = World::new();
        // Its core as it is once its connection drained, made as it is while it writes.
        let mut whole = w.kept();
        let Kept::AtOnce(a) = std::mem::replace(&mut whole.kept, Kept::Taken) else {
            panic!("no core until its end")
        };
        let parts = a.into_parts(StreamId(3), signer());
        whole.kept = Kept::Whole(Box::new(Whole { parts, until: None }));
        let Kept::Whole(kept) = &mut whole.kept else { panic!("made whole") };
        let p = &mut kept.parts;
        p.core.detach(1, true);
        let _ = p.core.poll_timeout(Tick(10));
        let expected = format!("{:?}", p.core);
        drop(whole);
        // Settled, then rebuilt.
        let mut s = w.kept();
        let _ = s.detached(1, true, Tick(10), &signer());
        let Kept::Answer(a) = std::mem::replace(&mut s.kept, Kept::Taken) else {
            panic!("settled")
        };
        let parts = a.into_parts(StreamId(3), signer(), hmac());
        assert_eq!(format!("{:?}", parts.core), expected, "the same core");
        s.kept = Kept::Whole(Box::new(Whole { parts, until: None }));
        drop(s);
        assert_eq!(w.counts(), (0, 0, 0, 0, 0, 0, 0));
        // Woken: its actor counts it on, closed, in its generation, charged the same.
        let mut s = w.kept();
        let _ = s.detached(1, true, Tick(10), &signer());
        assert_eq!(kept_as(&s), "answer");
        w.wakes_counted_as_before_then_stops(s).await;
    }

    #[actix_web::test]
    async fn a_resume_while_its_connection_writes_wakes_its_core_counted_as_before() {
        let w = World::new();
        let s = w.kept();
        assert_eq!(kept_as(&s), "at once");
        w.wakes_counted_as_before_then_stops(s).await;
    }

    #[actix_web::test]
    async fn a_kept_stream_whose_answer_may_not_have_arrived_is_recorded_with_its_request() {
        use crate::ledger::codec::{self, Record};
        let w = World::new();
        let params = serde_json::json!({"name": "echo", "arguments": {"text": "hi"}});
        let mut s = w.kept_for(Some(("tools/call".into(), Some(params.clone()))));
        let writer = &w.env.ledger.writer;
        writer.wait_committed(writer.barrier()).await.expect("committed");
        let store = writer.store();
        let key = codec::stream_key(&hmac(), 3);
        assert_eq!(store.get(&key, 1).unwrap(), None, "nothing recorded while it writes");
        assert_eq!(s.detached(1, false, Tick(10), &signer()), Some(Tick(5_010)));
        writer.wait_committed(writer.barrier()).await.expect("committed");
        let Record::Stream(r) = codec::decode(&store.get(&key, 20).unwrap().expect("recorded"))
            .expect("a stream record")
        else {
            panic!("a stream record")
        };
        assert_eq!(r.request_id, Some(serde_json::json!(9)));
        let digest = crate::actor::durable::request_digest("tools/call", Some(&params));
        assert_eq!(r.request_digest, Some(digest), "its request's digest");
        assert_eq!((r.stream, r.last_sent, r.last_acked), (3, 1, 0));
        assert_eq!(r.close_reason.as_deref(), Some("responded"));
        let log = store.read_log(&codec::events_key(&hmac(), 3), 20).unwrap();
        assert_eq!(log.len(), 1, "its answer");
        assert_eq!(log[0].0, 1);
        assert!(log[0].1.ends_with(b"\ndata: {\"result\":1}\n\n"), "{:?}", log[0].1);
        drop(s);
    }
}
