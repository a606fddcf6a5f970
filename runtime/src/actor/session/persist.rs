//! What a session records in the ledger and when: its record, its streams' restore after a
//! revive, parking, the end.

use std::sync::Arc;

use bytes::Bytes;

use crate::actor::dormant::StreamHandle;
use crate::actor::durable::{self, Residence, StreamLedger};
use crate::actor::env::Settle;
use crate::actor::generations::Counted;
use crate::actor::stream::StreamActor;
use crate::ledger::codec::{HandshakeLines, RecordState};
use crate::proto::ids::{Generation, JsonRpcId, StreamId, Tick};
use crate::proto::mcp::LogLevel;
use crate::proto::replay::WindowLimits;
use crate::proto::rollout::StreamMode;
use crate::proto::stream::{RestoredStream, StreamCore, StreamKind, StreamSettings};

use super::SessionActor;

impl SessionActor {
    /// Rebuild the streams the ledger held (each as a stream actor with no connection); the
    /// events they add are numbered from `first_seq` on (this life's, or one counted for a
    /// stream taken over from a host that is gone).
    pub(super) fn restore_streams(
        &mut self,
        streams: Vec<(crate::ledger::codec::StreamRecord, Vec<(u64, Bytes)>)>,
        complete: bool,
        first_seq: crate::proto::ids::Seq,
    ) {
        use crate::ledger::codec::StreamKindRecord;
        use crate::proto::ids::Seq;
        for (record, events) in streams {
            let sid = StreamId(record.stream);
            if record.shadow {
                // Its client never got a cursor: nothing to resume.
                self.forget_streams([sid]);
                continue;
            }
            let closed = record.close_reason.as_deref().map(durable::reason_from);
            let (kind, request) = match record.kind {
                StreamKindRecord::Get if closed.is_none() && !complete => {
                    self.forget_streams([sid]);
                    continue;
                }
                StreamKindRecord::Get => (StreamKind::Get, None),
                StreamKindRecord::Post => {
                    match record.request_id.as_ref().and_then(JsonRpcId::from_value) {
                        Some(id) => (StreamKind::Post { request: id.clone() }, Some(id)),
                        // Not a record this release wrote: nothing to resume it with.
                        None => {
                            self.forget_streams([sid]);
                            continue;
                        }
                    }
                }
            };
            let restored = RestoredStream {
                events: events.into_iter().map(|(q, f)| (Seq(q), f)).collect(),
                newest: Seq(record.last_sent),
                acked: Seq(record.last_acked),
                closed,
                first_seq,
            };
            // Its rules are its record's (the generation it was opened under may be an
            // earlier process's).
            let settings = StreamSettings {
                window: WindowLimits { max_events: record.max_events, max_bytes: record.max_bytes },
                prime: false,
                retry_ms: record.retry_ms,
                hold_until_committed: self.streams.hold_until_committed,
                mode: StreamMode::Resumable,
                timing: self.sup.stream_env().timing,
            };
            let generation = self.gens.enter_restored(
                Generation(record.generation),
                self.sup.now().0,
                Counted::Stream,
            );
            let core = StreamCore::restore(
                sid,
                generation.generation().settings.id,
                kind,
                Arc::clone(&self.signer),
                settings,
                restored,
            );
            let ledger = StreamLedger::restored(Arc::clone(&self.meta.hmac), sid, &record);
            let (addr, closed) =
                StreamActor::start_restored(core, self.stream_links(), ledger, generation);
            let evicted = self.core.restore_stream(sid, request, closed, StreamHandle::Live(addr));
            self.evict(evicted);
        }
    }

    pub(super) fn record_ops_at(
        &self,
        state: RecordState,
        last_used: Tick,
        residence: Residence,
    ) -> Vec<crate::ledger::Op> {
        let handshake = self.handshake.lines();
        record_ops(&self.meta, &self.ledger, &self.core, (state, residence), last_used, handshake)
    }

    /// The session ended for good (DELETE, expiry): its record says so until it expires (its
    /// id stays 404 across restarts), its streams are forgotten. Written before the registry
    /// lets go of it, so a revive that follows reads the end. A stop for any other reason
    /// (process shutdown, parking) leaves its record active.
    ///
    /// The end's own key outlives every record another host may still write for the session
    /// before it hears of the end; `announce` tells the other hosts sharing the ledger once it
    /// commits (not when the end was heard from one of them).
    pub(super) fn record_end(&mut self, state: RecordState, announce: bool) {
        let now = self.sup.now();
        let mut ops = self.record_ops_at(state, now, Residence::Stays);
        let end = End { state, at: now, announce };
        push_end(&mut ops, &self.meta.hmac, &self.ledger, in_ledger(&self.core), end);
        self.sup.settle(&self.meta.hmac, Settle::Ended, ops);
    }

    /// Park: record the session as it is and deregister it, unless a request holds a place
    /// in its inbox (then it stays, and that request's activity moves the deadline).
    pub(super) fn park(&mut self) -> bool {
        let Some(guard) = self.guard.take() else { return false };
        let ops =
            self.record_ops_at(RecordState::Active, self.core.last_activity(), Residence::Leaving);
        // Announced before it leaves the registry: a revive waits for these writes. When the
        // session stays after all, they were an ordinary record write.
        self.sup.settle(&self.meta.hmac, Settle::Parked, ops);
        match guard.park() {
            Ok(()) => {
                tracing::debug!("session parked");
                self.sup.stats().session_parked();
                true
            }
            Err(guard) => {
                // It stays in memory: out of the cap's index again, after the park's row.
                if let Some(leave) = durable::lru_leave(&self.ledger, &self.meta.hmac) {
                    self.ledger.writer.submit(vec![leave]);
                }
                self.guard = Some(guard);
                false
            }
        }
    }

    /// Write the record when the core says it is due.
    pub(super) fn record_if_due(&mut self) {
        let _ = self.record_due(false);
    }

    /// Write the record when the core says it is due (a change it holds is); with `acked`,
    /// returns the acknowledgement of its commit (`None`: nothing was due).
    pub(super) fn record_due(&mut self, acked: bool) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let used = self.core.poll_ledger(self.now())?;
        // The first record of this life: its `initialize` (or revive) waits for it.
        let first = self.on_recorded.take();
        let ops = self.record_ops_at(RecordState::Active, used, Residence::Stays);
        if first.is_none() && !acked {
            self.ledger.writer.submit(ops);
            return None;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.ledger.writer.submit_then(
            ops,
            Box::new(move || {
                if let Some(first) = first {
                    let _ = first.send(());
                }
                let _ = tx.send(());
            }),
        );
        Some(rx)
    }

    /// Forget streams in the ledger (retention over, evicted, replaced).
    pub(super) fn forget_streams(&self, sids: impl IntoIterator<Item = StreamId>) {
        let mut ops = Vec::new();
        for sid in sids {
            durable::forget_stream_ops(&self.meta.hmac, sid, &mut ops);
        }
        self.ledger.writer.submit(ops);
    }
}

/// A session's end: its `state` (deleted, expired), when, and whether the other hosts sharing
/// the ledger are told once it commits.
pub(super) struct End {
    pub(super) state: RecordState,
    pub(super) at: Tick,
    pub(super) announce: bool,
}

/// The writes of a session's end after its record's (see [`SessionActor::record_end`]): its
/// `streams` forgotten, its streams' index dropped, its end's own key, its announcement.
pub(super) fn push_end(
    ops: &mut Vec<crate::ledger::Op>,
    hmac: &str,
    ledger: &durable::LedgerCtx,
    streams: impl Iterator<Item = StreamId>,
    end: End,
) {
    use crate::ledger::{Op, codec};
    for sid in streams {
        durable::forget_stream_ops(hmac, sid, ops);
    }
    ops.push(Op::DropIndex { index: codec::streams_index(hmac) });
    ops.push(Op::Put {
        key: codec::session_end_key(hmac),
        value: Bytes::from(format!("{:?}", end.state)),
        expires_ms: end.at.0.saturating_add(ledger.idle_ttl_ms.saturating_mul(2)),
    });
    if end.announce {
        ops.push(Op::Publish {
            channel: codec::ENDS_CHANNEL,
            message: Bytes::copy_from_slice(hmac.as_bytes()),
        });
    }
}

/// The streams of `core` the ledger may hold records of ([`StreamHandle::may_be_recorded`]).
fn in_ledger<R, P>(
    core: &crate::proto::session::SessionCore<R, StreamHandle, P>,
) -> impl Iterator<Item = StreamId> + '_ {
    core.stream_ids_where(StreamHandle::may_be_recorded)
}

/// The writes of a session's record as `core` states it (a hibernating session's too).
pub(super) fn record_ops<R, P>(
    meta: &durable::SessionMeta,
    ledger: &durable::LedgerCtx,
    core: &crate::proto::session::SessionCore<R, StreamHandle, P>,
    (state, residence): (RecordState, Residence),
    last_used: Tick,
    handshake: HandshakeLines<'_>,
) -> Vec<crate::ledger::Op> {
    meta.record_ops(
        ledger,
        durable::SessionNow {
            version: core.version().as_str(),
            generation: core.generation().0,
            state,
            log_level: core.log_level().map(LogLevel::as_str),
            incarnation: core.incarnation(),
            last_used,
            handshake,
            streams: in_ledger(core),
            held_streams: core.held_streams(),
            residence,
        },
    )
}
