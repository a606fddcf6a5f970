//! A session's streams: their settings and mode, the start of a request's or the GET stream,
//! eviction past the retention bounds.

use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::Value;

use crate::actor::body::SseBody;
use crate::actor::durable::StreamLedger;
use crate::actor::generations::{Counted, GenCount};
use crate::actor::stream::{Stop as StopStream, StreamActor, StreamLinks};
use crate::proto::ids::StreamId;
use crate::proto::rollout::{StreamMode, StreamPurpose};
use crate::proto::stream::{CloseReason, StreamCore, StreamKind, StreamSettings};

use super::SessionActor;

impl SessionActor {
    /// Start the stream registered under `sid` in `sctx`; `final_json` when its request is
    /// already answered (the stream is then closed from the start). Counts the stream's first
    /// connection.
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
        let core = StreamCore::new(
            sid,
            generation.generation().settings.id,
            kind,
            (*self.signer).clone(),
            settings,
        );
        let now = self.sup.now();
        self.core.connection_delta(now, true);
        let ledger = StreamLedger::new(Arc::clone(&self.meta.hmac), sid, request, now);
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

    pub(super) fn evict(
        &mut self,
        evicted: Vec<crate::proto::session::StreamEntry<Addr<StreamActor>>>,
    ) {
        if !evicted.is_empty() {
            tracing::debug!(n = evicted.len(), "closed streams evicted by the retention bounds");
            self.sup.stats().streams_evicted(evicted.len());
        }
        // Each stream forgets its own copy when it stops (it knows whether it has one).
        for e in evicted {
            e.handle.do_send(StopStream(CloseReason::Evicted));
        }
    }
}
