//! A session's streams: their settings and mode, the start of a request's or the GET stream,
//! eviction past the retention bounds, and the streams it keeps as data
//! (`actor::dormant`): their connections' ends, retention and waking.

use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::Value;

use crate::actor::body::SseBody;
use crate::actor::dormant::{DormantStream, StreamHandle};
use crate::actor::durable::StreamLedger;
use crate::actor::generations::{Counted, GenCount};
use crate::actor::links::{Detached, DormantEnds};
use crate::actor::stream::{Stop as StopStream, StreamActor, StreamLinks};
use crate::pipeline::{Opened, StreamDoor};
use crate::proto::ids::{JsonRpcId, StreamId, Tick};
use crate::proto::rollout::{StreamMode, StreamPurpose};
use crate::proto::session::Evicted;
use crate::proto::stream::{CloseReason, StreamCore, StreamKind, StreamSettings};

use super::SessionActor;

/// Two requests of a session this close make it busy: its kept streams' bodies then queue
/// their ends ([`DormantEnds`]) for its next request instead of sending one each.
const BUSY_MS: u64 = 10;

/// How long a busy session leaves ends in its queue at most: its timer then reads the queue
/// and turns queueing off (bodies send their ends again) until requests come close again. A
/// body that does not end (a slow reader of a large answer) costs it one tick, not one every
/// 50 ms.
const ENDS_CHECK_MS: u64 = 50;

/// Ends a session keeps room for between two looks (more, after a burst, are freed).
const HEARD_KEPT: usize = 256;

/// A session's side of its kept streams' first connections: whether their bodies queue
/// their ends and when it turns queueing off (each body not yet heard of is counted as an
/// attached connection by the core, which also catches an end heard twice).
#[derive(Debug, Default)]
pub(super) struct DormantBodies {
    /// Where its bodies queue their ends while it is busy: shared with them (they may end on
    /// another worker's thread, so behind a lock), made with its first kept stream.
    ends: Option<Arc<DormantEnds>>,
    /// When it last handled a request.
    last_request: Option<Tick>,
    /// What it took from `ends` last (kept for its capacity).
    heard: Vec<(StreamId, u64)>,
    /// While its bodies queue their ends (`Some` exactly then, as switched in `ends`): when
    /// its timer reads the queue and turns queueing off.
    pub(super) check: Option<Tick>,
}

impl DormantBodies {
    /// A request came at `now`: whether it makes the session busy, so its bodies should
    /// start queueing their ends (they have a queue, and do not queue yet).
    fn request(&mut self, now: Tick) -> bool {
        let busy = self.last_request.is_some_and(|t| now.0.saturating_sub(t.0) <= BUSY_MS);
        self.last_request = Some(now);
        busy && !self.queueing() && self.ends.is_some()
    }

    /// Its bodies queue their ends now.
    fn queueing(&self) -> bool {
        self.check.is_some()
    }

    /// Queueing was switched on or off at `now`. While it is on, the timer reads the queue
    /// within 50 ms (a body made before the switch may queue its end too, whatever comes
    /// next) and switches it off.
    fn switched(&mut self, on: bool, now: Tick) {
        self.check = on.then(|| now.plus_ms(ENDS_CHECK_MS));
    }

    /// A body was made: where it reports its end.
    fn opened(&mut self) -> Arc<DormantEnds> {
        Arc::clone(self.ends.get_or_insert_with(Arc::default))
    }

    /// Whether its timer, firing at `now`, turns queueing off.
    pub(super) fn check_due(&self, now: Tick) -> bool {
        self.check.is_some_and(|t| t <= now)
    }
}

impl SessionActor {
    /// What a stream actor of this session is started with.
    pub(super) fn stream_links(&self) -> StreamLinks {
        StreamLinks {
            session: Arc::clone(&self.link),
            env: Arc::clone(self.sup.stream_env()),
            caller_budget: Arc::clone(&self.caller_budget),
            span: self.span.clone(),
        }
    }

    /// How a new stream for `purpose` would be served under the current generation
    /// (resumable and shadow streams are recorded in the ledger; plain ones are not).
    pub(super) fn stream_mode(&self, purpose: StreamPurpose) -> StreamMode {
        self.gens
            .current()
            .settings
            .flags
            .map_or(StreamMode::Resumable, |f| f.mode(self.streams.place, purpose))
    }

    /// The current generation and the settings a new stream for `purpose` gets from it.
    pub(super) fn new_stream_settings(&self, purpose: StreamPurpose) -> (GenCount, StreamSettings) {
        let g = self.gens.enter_current(Counted::Stream);
        let s = &g.generation().settings;
        let mode = s.flags.map_or(StreamMode::Resumable, |f| f.mode(self.streams.place, purpose));
        let settings = StreamSettings {
            window: s.window,
            prime: s.prime_streams && self.streams.primes,
            retry_ms: Some(s.retry_ms),
            hold_until_committed: self.streams.hold_until_committed,
            mode,
            timing: self.sup.stream_env().timing,
        };
        (g, settings)
    }

    /// Start the GET stream registered under `sid` in `sctx`, and count its first
    /// connection; returns that connection's body.
    pub(super) fn start_get_stream(
        &mut self,
        sctx: Context<StreamActor>,
        sid: StreamId,
    ) -> SseBody {
        let (generation, settings) = self.new_stream_settings(StreamPurpose::ReadOnly);
        let core = self.new_core(sid, StreamKind::Get, &generation, settings);
        let now = self.now();
        self.core.connection_delta(now, true);
        let ledger = StreamLedger::new(Arc::clone(&self.meta.hmac), sid, None, now);
        self.run_stream(sctx, sid, core, None, ledger, generation)
    }

    /// Open and start the SSE stream of request `id`, behind `door`; `answered` when the
    /// request is already answered (its answer, and its count in flight). Counts the
    /// stream's first connection and returns its body. Kept as data (`actor::dormant`) when
    /// answered at once, its mode allowing and its tool never having used it; otherwise its
    /// actor runs in the mailbox `door` gives: an answer is written with the priming event (the
    /// stream closed from the start), unless its tool sent to the stream meanwhile (it then
    /// follows what was sent, as a waiting request's answer does).
    pub(super) fn start_post_stream(
        &mut self,
        door: &StreamDoor,
        id: JsonRpcId,
        answered: Option<(Bytes, GenCount)>,
        request: Option<(String, Option<Value>)>,
        purpose: StreamPurpose,
    ) -> SseBody {
        let (generation, settings) = self.new_stream_settings(purpose);
        let opened = door.open(answered, settings.answers_at_once());
        let sid = self.core.alloc_stream();
        let now = self.now();
        self.core.connection_delta(now, true);
        let ledger = StreamLedger::new(Arc::clone(&self.meta.hmac), sid, request, now);
        let (sctx, with_priming, behind) = match opened {
            Opened::Kept((json, _in_flight)) => {
                let (stream, body, bytes) = DormantStream::open(
                    sid,
                    id.clone(),
                    settings,
                    &self.signer,
                    &json,
                    Arc::clone(self.sup.stream_env()),
                    &self.caller_budget,
                    ledger,
                    generation,
                    Arc::clone(&self.link),
                    self.bodies.opened(),
                );
                self.core.insert_post_stream(sid, id, StreamHandle::Dormant(stream));
                let evicted = self.core.stream_closed(sid, bytes);
                self.evict(evicted);
                return body;
            }
            Opened::Fresh(sctx, answered) => (sctx, answered.map(|(json, _)| json), None),
            Opened::Used(sctx, answered) => (sctx, None, answered),
        };
        let kind = StreamKind::Post { request: id.clone() };
        let core = self.new_core(sid, kind, &generation, settings);
        let addr = sctx.address();
        self.core.insert_post_stream(sid, id, StreamHandle::Live(addr.clone()));
        let body = self.run_stream(sctx, sid, core, with_priming.as_deref(), ledger, generation);
        if let Some((json, in_flight)) = behind {
            // Behind what its tool queued.
            super::dispatch::send_final(&addr, json, in_flight);
        }
        body
    }

    /// A new stream's core, `sid` of `kind`, in `generation` with `settings`.
    fn new_core(
        &self,
        sid: StreamId,
        kind: StreamKind,
        generation: &GenCount,
        settings: StreamSettings,
    ) -> StreamCore {
        let g = generation.generation().settings.id;
        StreamCore::new(sid, g, kind, Arc::clone(&self.signer), settings)
    }

    /// Run stream `sid` (registered, its connection counted) in its actor, in `sctx`;
    /// `json`: its answer, written with its priming event. Returns its connection's body.
    fn run_stream(
        &mut self,
        sctx: Context<StreamActor>,
        sid: StreamId,
        core: StreamCore,
        json: Option<&[u8]>,
        ledger: StreamLedger,
        generation: GenCount,
    ) -> SseBody {
        let (body, closed_with) =
            StreamActor::start_in(sctx, core, json, self.stream_links(), ledger, generation);
        if let Some(bytes) = closed_with {
            let evicted = self.core.stream_closed(sid, bytes);
            self.evict(evicted);
        }
        body
    }

    pub(super) fn evict(&mut self, evicted: Evicted<StreamHandle>) {
        if !evicted.is_empty() {
            tracing::debug!(n = evicted.len(), "closed streams evicted by the retention bounds");
            self.sup.stats().streams_evicted(evicted.len());
        }
        // Each stream's copy is forgotten as it stops (an actor's by itself, a kept one's here).
        for e in evicted {
            self.stop_handle(e.handle, CloseReason::Evicted);
        }
    }

    /// Stop a stream this session no longer holds: its actor with `why`, or a kept one at
    /// once (its life is over: evicted, replaced).
    pub(super) fn stop_handle(&mut self, h: StreamHandle, why: CloseReason) {
        match h {
            StreamHandle::Live(a) => a.do_send(StopStream(why)),
            StreamHandle::Dormant(d) => {
                if let Some(t) = d.until() {
                    let indexed = self.dormant_until.remove(&(t, d.sid()));
                    debug_assert!(indexed, "indexed at the end it names");
                }
                d.forget();
            }
        }
    }

    /// A request came at `now`: hear the ends its bodies queued, and have them queue their
    /// ends from now on if requests come close together.
    pub(super) fn request_came(&mut self, now: Tick) {
        if self.bodies.request(now) {
            self.switch_queueing(true, now);
        } else {
            self.hear_dormant_ends(now);
        }
    }

    /// Turn its bodies' queueing of their ends on or off, hearing what was queued, at `now`.
    pub(super) fn switch_queueing(&mut self, on: bool, now: Tick) {
        let Some(ends) = self.bodies.ends.as_ref().map(Arc::clone) else { return };
        let mut heard = std::mem::take(&mut self.bodies.heard);
        ends.queue(on, &mut heard);
        self.bodies.switched(on, now);
        self.heard_ends(heard, now);
        if !on {
            // Not busy any more: neither buffer is kept (nor is the queue's, see `queue`).
            self.bodies.heard = Vec::new();
        }
    }

    /// Hear the ends its kept streams' bodies queued ([`DormantEnds`]), at `now`.
    pub(super) fn hear_dormant_ends(&mut self, now: Tick) {
        // Not queueing: nothing was queued since it last looked (no lock taken).
        let Some(ends) = self.bodies.ends.as_ref().filter(|_| self.bodies.queueing()) else {
            return;
        };
        let mut heard = std::mem::take(&mut self.bodies.heard);
        ends.take_into(&mut heard);
        self.heard_ends(heard, now);
    }

    fn heard_ends(&mut self, mut heard: Vec<(StreamId, u64)>, now: Tick) {
        for &(sid, conn) in &heard {
            self.dormant_detached(sid, conn, true, now);
        }
        // A burst's capacity is not kept for the session's life (nor, swapped in, the
        // queue's).
        heard.clear();
        if heard.capacity() > HEARD_KEPT {
            heard = Vec::new();
        }
        self.bodies.heard = heard;
    }

    /// The connection `conn` of kept stream `sid` ended at `now` (its body said so;
    /// `drained`: it returned every frame). The stream's retention starts; one a resume
    /// woke meanwhile hears it from here.
    pub(super) fn dormant_detached(&mut self, sid: StreamId, conn: u64, drained: bool, now: Tick) {
        self.core.connection_delta(now, false);
        match self.core.stream_handle_mut(sid) {
            Some(StreamHandle::Dormant(d)) => {
                // Indexed again at the end it names now (an end heard again names the same).
                if let Some(t) = d.until() {
                    self.dormant_until.remove(&(t, sid));
                }
                if let Some(t) = d.detached(conn, drained, now, &self.signer) {
                    self.dormant_until.insert((t, sid));
                }
            }
            Some(StreamHandle::Live(a)) => a.do_send(Detached { conn, drained }),
            None => {}
        }
    }

    /// Drop the kept streams whose retention is over (their ledger copies go).
    pub(super) fn end_dormant_retentions(&mut self) {
        let now = self.sup.now();
        while let Some(&(t, sid)) = self.dormant_until.first() {
            if t > now {
                break;
            }
            self.dormant_until.pop_first();
            // Indexed at the end its core named (woken or gone ones are not indexed).
            if let Some(StreamHandle::Dormant(d)) = self.core.stream_handle_mut(sid) {
                debug_assert!(d.retention_over(now), "the index holds the core's end");
            }
            if let Some(e) = self.core.remove_stream(sid) {
                tracing::debug!(stream = %sid, "stream retention ended");
                if let StreamHandle::Dormant(d) = e.handle {
                    d.forget();
                }
            }
        }
    }

    /// Wake kept stream `sid` for a resume: it runs in an actor from now on. Returns its
    /// address (also for one that was live already).
    pub(super) fn wake(&mut self, sid: StreamId) -> Option<Addr<StreamActor>> {
        let h = self.core.stream_handle_mut(sid)?;
        if let StreamHandle::Live(a) = h {
            return Some(a.clone());
        }
        let ctx = Context::<StreamActor>::new();
        let addr = ctx.address();
        let StreamHandle::Dormant(d) = std::mem::replace(h, StreamHandle::Live(addr.clone()))
        else {
            unreachable!("matched as dormant above")
        };
        if let Some(t) = d.until() {
            let indexed = self.dormant_until.remove(&(t, sid));
            debug_assert!(indexed, "indexed at the end it names");
        }
        tracing::debug!(stream = %sid, "kept stream woken by a resume");
        let session = (Arc::clone(&self.signer), Arc::clone(&self.meta.hmac));
        d.wake(ctx, Arc::clone(&self.link), &self.span, session);
        Some(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_close_together_make_a_session_queue_its_bodies_ends_until_its_check() {
        let mut b = DormantBodies::default();
        assert!(!b.request(Tick(1_000)), "a first request: not busy");
        let _ends = b.opened();
        assert_eq!(b.check, None, "not queueing: the bodies send their ends, no check");
        assert!(!b.request(Tick(1_100)), "100 ms apart: not busy");
        assert!(b.request(Tick(1_105)), "5 ms apart: busy, its bodies start queueing");
        b.switched(true, Tick(1_105));
        assert_eq!(b.check, Some(Tick(1_155)), "read within 50 ms at the latest, bodies or not");
        let _ = b.opened();
        assert!(!b.request(Tick(1_110)), "close, but already queueing");
        assert_eq!(b.check, Some(Tick(1_155)), "the switch's check holds");
        assert!(!b.check_due(Tick(1_154)) && b.check_due(Tick(1_155)));
        b.switched(false, Tick(1_155));
        assert_eq!((b.queueing(), b.check), (false, None), "off: no timer for the ends");
        assert!(!b.request(Tick(1_160)), "39 ms after the last: not busy");
        assert!(b.request(Tick(1_165)), "busy again: on again");
        let mut fresh = DormantBodies::default();
        assert!(!fresh.request(Tick(0)) && !fresh.request(Tick(1)), "busy, but no queue made yet");
    }
}
