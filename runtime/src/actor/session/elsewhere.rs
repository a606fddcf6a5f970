//! A resume of a stream this session does not hold (a ledger several hosts share): the stream
//! is looked up in the ledger on a reader thread; one that a live host serves is followed
//! (`actor::follow`), one whose host is gone is taken over (restored here, its unfinished
//! request answered with the "server restarted" error, as after a restart).

use std::sync::Arc;

use actix::prelude::*;

use crate::actor::follow::{self, Found, LookUp};
use crate::ledger::ReadError;
use crate::proto::error::{Overload, Rejection};
use crate::proto::ids::Seq;

use super::SessionActor;
use super::messages::Resume;

impl SessionActor {
    /// Look the resumed stream up in the ledger, then follow it, take it over, or answer that
    /// its events are gone.
    pub(super) fn resume_elsewhere(&mut self, msg: Resume, ctx: &mut Context<Self>) {
        let cx = &self.ledger;
        let reads = Arc::clone(&cx.ledger.reads);
        let at = LookUp {
            this_run: cx.ledger.run,
            now_ms: self.sup.now().0,
            stream_ttl_ms: cx.stream_ttl_ms,
            idle_ttl_ms: cx.idle_ttl_ms,
            claim_ms: cx.ledger.hold_ms(follow::CLAIM_MS),
        };
        let (hmac, sid, after) = (Arc::clone(&self.meta.hmac), msg.event.stream.0, msg.event.seq.0);
        let look = async move {
            reads.run(move |store| follow::look_up(store, &hmac, sid, after, &at)).await
        };
        ctx.spawn(look.into_actor(self).map(move |found, act, _| act.found_elsewhere(found, msg)));
    }

    fn found_elsewhere(&mut self, found: Result<Found, ReadError>, msg: Resume) {
        let refuse = |msg: Resume, r: Rejection| {
            let _ = msg.reply.send(Err(r));
        };
        match found {
            Err(ReadError::Busy) => refuse(msg, Rejection::Overloaded(Overload::LedgerReads)),
            Err(ReadError::Store(e)) => {
                tracing::error!(error = %e, "cannot look a resumed stream up in the ledger");
                refuse(msg, Rejection::Internal);
            }
            Ok(Found::Nothing) => {
                tracing::debug!(stream = %msg.event.stream, "resume of a stream no longer retained");
                refuse(msg, Rejection::EventsLost);
            }
            Ok(Found::Claimed) => refuse(msg, Rejection::Overloaded(Overload::Elsewhere)),
            Ok(Found::Live { record, events }) => {
                let env = self.sup.stream_env();
                let Ok(permit) = Arc::clone(&env.followers).try_acquire_owned() else {
                    return refuse(msg, Rejection::Overloaded(Overload::Elsewhere));
                };
                tracing::debug!(stream = %msg.event.stream, run = record.run, "following a stream another host serves");
                let body = follow::follow(
                    env,
                    (Arc::clone(&self.meta.hmac), msg.event.stream.0, msg.event.seq.0),
                    &record,
                    events,
                    permit,
                );
                let _ = msg.reply.send(Ok(body));
            }
            Ok(Found::Orphan { record, events, complete, life }) => {
                // Restored meanwhile (a second resume of it): attach to that one.
                if self.core.stream(msg.event.stream).is_none() {
                    tracing::info!(stream = %msg.event.stream, run = record.run, "taking over a stream whose host is gone");
                    self.restore_streams(
                        vec![(record, events)],
                        complete,
                        Seq(u64::from(life) << 32),
                    );
                }
                self.attach(msg);
            }
        }
    }
}
