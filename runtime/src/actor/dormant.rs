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
//! [`StreamReport::DormantDetached`]: super::links::StreamReport::DormantDetached
//! [`DormantEnds`]: super::links::DormantEnds

use std::sync::Arc;

use actix::prelude::*;

use super::body::{ConnectionOwner, SseBody, StreamOwner};
use super::budget::MemoryBudget;
use super::durable::StreamLedger;
use super::generations::GenCount;
use super::links::{DormantEnds, SessionLink};
use super::stream::{
    Parts, StreamActor, StreamEnv, charge_window, count_started, count_stopped, forget_copy,
    submit_changes,
};
use crate::proto::ids::{StreamId, Tick};
use crate::proto::rollout::StreamMode;
use crate::proto::stream::{Delivery, StreamCore, StreamSettings};
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
    parts: Option<Box<Parts>>,
    /// When its retention ends (from its connection's end on), as its session indexes it.
    until: Option<Tick>,
}

impl std::fmt::Debug for DormantStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DormantStream").field("until", &self.until).finish_non_exhaustive()
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
        (DormantStream { sid, parts: Some(Box::new(parts)), until: None }, body, bytes)
    }

    fn parts(&mut self) -> &mut Parts {
        self.parts.as_mut().expect("a dormant stream's parts are taken only as it wakes")
    }

    /// Its connection `conn` ended (`drained`: every frame went out): recorded in the ledger
    /// if the answer may not have arrived, and its retention starts (`now`). Returns its end.
    pub(crate) fn detached(&mut self, conn: u64, drained: bool, now: Tick) -> Option<Tick> {
        let p = self.parts();
        p.core.detach(conn, drained);
        let wait = submit_changes(&mut p.ledger, &mut p.core, &p.env, now);
        debug_assert!(wait.is_none(), "a kept stream holds nothing for a commit");
        if p.core.settled() {
            p.ledger.never_recorded();
        }
        let until = p.core.poll_timeout(now);
        self.until = until;
        until
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
        self.parts().core.handle_timeout(now).retention_over
    }

    /// Its life is over (retention, eviction): its ledger copy goes, then it stops counting.
    pub(crate) fn forget(mut self) {
        let p = self.parts();
        forget_copy(&p.ledger, &p.core, &p.env);
    }

    /// A resume arrived: run it in an actor, in `ctx` (whose address its session keeps).
    pub(crate) fn wake(
        mut self,
        ctx: Context<StreamActor>,
        session: SessionLink,
        span: &tracing::Span,
    ) {
        let parts = self.parts.take().expect("a dormant stream wakes once");
        parts.env.stats.stream_dormant(-1);
        StreamActor::start_woken(ctx, *parts, session, span);
    }
}

impl Drop for DormantStream {
    fn drop(&mut self) {
        // Not woken: it stops counting, as its actor would have when it stopped.
        if let Some(p) = self.parts.take() {
            p.env.stats.stream_dormant(-1);
            count_stopped(&p.env.stats, &p.core, Some(STATE_CLOSED));
        }
    }
}
