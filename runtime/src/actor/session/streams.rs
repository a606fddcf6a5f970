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
use crate::proto::ids::{StreamId, Tick};
use crate::proto::rollout::{StreamMode, StreamPurpose};
use crate::proto::stream::{CloseReason, StreamCore, StreamKind, StreamSettings};

use super::SessionActor;

/// How long after a kept stream's body was made its session looks at [`DormantEnds`] at the
/// latest (it looks at every message too): when a retention may start late, and a
/// connection be counted late off.
const ENDS_CHECK_MS: u64 = 50;

/// Ends a session keeps room for between two looks (more, after a burst, are freed).
const HEARD_KEPT: usize = 256;

/// A session's side of its kept streams' first connections: where their bodies queue their
/// ends, how many it has not heard the end of, and when it looks next.
#[derive(Debug, Default)]
pub(super) struct DormantBodies {
    ends: Arc<DormantEnds>,
    /// Bodies made whose end it has not heard (each is counted as an attached connection).
    open: usize,
    /// What it took from `ends` last (kept for its capacity).
    heard: Vec<(StreamId, u64)>,
    /// When its timer looks at `ends` next, while `open > 0`.
    pub(super) check: Option<Tick>,
}

impl DormantBodies {
    /// A body was made at `now`.
    fn opened(&mut self, now: Tick) -> Arc<DormantEnds> {
        self.open += 1;
        self.check.get_or_insert(now.plus_ms(ENDS_CHECK_MS));
        Arc::clone(&self.ends)
    }

    /// One end heard.
    fn closed(&mut self) {
        debug_assert!(self.open > 0, "a kept stream's body ended twice");
        self.open = self.open.saturating_sub(1);
    }

    /// The timer fired at `now`: look again later while bodies are open.
    pub(super) fn recheck(&mut self, now: Tick) {
        if self.check.is_some_and(|t| t <= now) {
            self.check = (self.open > 0).then(|| now.plus_ms(ENDS_CHECK_MS));
        }
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

    /// Start the stream registered under `sid`; `final_json` when its request is already
    /// answered (the stream is then closed from the start). Counts the stream's first
    /// connection and returns its body. Its actor runs in `sctx`, unless the stream is kept
    /// as data (`actor::dormant`): `sctx` is then dropped without being started.
    pub(super) fn start_stream(
        &mut self,
        sctx: Context<StreamActor>,
        sid: StreamId,
        kind: StreamKind,
        final_json: Option<Bytes>,
        request: Option<(String, Option<Value>)>,
        purpose: StreamPurpose,
    ) -> SseBody {
        let (generation, settings) = self.new_stream_settings(purpose);
        let kept = DormantStream::fits(&settings);
        let core = StreamCore::new(
            sid,
            generation.generation().settings.id,
            kind,
            Arc::clone(&self.signer),
            settings,
        );
        let now = self.now();
        self.core.connection_delta(now, true);
        let ledger = StreamLedger::new(Arc::clone(&self.meta.hmac), sid, request, now);
        if let Some(json) = final_json.as_ref().filter(|_| kept) {
            // Its context is never started: nothing it awaited was sent to it (the handler
            // answered without waiting).
            drop(sctx);
            let (stream, body, bytes) = DormantStream::open(
                core,
                json,
                Arc::clone(self.sup.stream_env()),
                &self.caller_budget,
                ledger,
                generation,
                Arc::clone(&self.link),
                self.bodies.opened(now),
                now,
            );
            *self.core.stream_handle_mut(sid).expect("registered before its request ran") =
                StreamHandle::Dormant(stream);
            let evicted = self.core.stream_closed(sid, bytes);
            self.evict(evicted);
            return body;
        }
        let (body, closed_with) = StreamActor::start_in(
            sctx,
            core,
            final_json.as_deref(),
            self.stream_links(),
            ledger,
            generation,
        );
        if let Some(bytes) = closed_with {
            let evicted = self.core.stream_closed(sid, bytes);
            self.evict(evicted);
        }
        body
    }

    pub(super) fn evict(&mut self, evicted: Vec<crate::proto::session::StreamEntry<StreamHandle>>) {
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
                    self.dormant_until.remove(&(t, d.sid()));
                }
                d.forget();
            }
        }
    }

    /// Hear the ends its kept streams' bodies queued ([`DormantEnds`]), at `now`.
    pub(super) fn hear_dormant_ends(&mut self, now: Tick) {
        let mut heard = std::mem::take(&mut self.bodies.heard);
        self.bodies.ends.take_into(&mut heard);
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
        self.bodies.closed();
        self.core.connection_delta(now, false);
        match self.core.stream_handle_mut(sid) {
            Some(StreamHandle::Dormant(d)) => {
                if let Some(t) = d.detached(conn, drained, now) {
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
            self.dormant_until.remove(&(t, sid));
        }
        tracing::debug!(stream = %sid, "kept stream woken by a resume");
        d.wake(ctx, Arc::clone(&self.link), &self.span);
        Some(addr)
    }
}
