//! What a host hears from the other hosts sharing its ledger: a session that ended on one of
//! them ends here too, within the time a publication takes; after a subscription that was cut
//! (messages may have been missed), every live session's end is looked up in the ledger. And
//! what a client sent another host for a session live here (an answer to a server-to-client
//! request, a cancellation, a log level) is handed to it; after a cut, each live session reads
//! the answers kept for the questions it waits for. The catalog's announcements are relayed both
//! ways; after a cut, every listen stream here is told everything it follows changed.

use std::sync::Arc;

use crate::actor::session::{EndedElsewhere, Relay, Relayed, SessionHandle};
use crate::ledger::codec;
use crate::stats::BusChannel;

use super::Supervisor;

impl Supervisor {
    /// Subscribe to the ends other hosts publish (a ledger only this process uses has none).
    /// The subscription holds the supervisor weakly: it never keeps the ledger alive.
    pub(super) fn hear_ends(self: &Arc<Self>) {
        let sup = Arc::downgrade(self);
        let store = Arc::clone(self.stream_env.ledger.ledger.writer.store());
        let heard = Box::new(move |message: Option<bytes::Bytes>| {
            let Some(sup) = sup.upgrade() else { return };
            match message {
                Some(hmac) => sup.ended_elsewhere(std::str::from_utf8(&hmac).unwrap_or("")),
                None => {
                    sup.stats().bus_missed(BusChannel::Ends);
                    sup.look_up_ends();
                }
            }
        });
        if let Err(e) = store.subscribe(codec::ENDS_CHANNEL, heard) {
            tracing::error!(error = %e, "cannot hear the other hosts' session ends; a session deleted on another host stays usable here until it parks");
        }
        let sup = Arc::downgrade(self);
        let relayed = Box::new(move |message: Option<bytes::Bytes>| {
            let Some(sup) = sup.upgrade() else { return };
            match message {
                Some(m) => sup.relayed(&m),
                None => sup.relays_maybe_missed(),
            }
        });
        if let Err(e) = store.subscribe(codec::SESSIONS_CHANNEL, relayed) {
            tracing::error!(error = %e, "cannot hear what clients send other hosts for sessions served here");
        }
    }

    /// On a shared ledger, relay the catalog's announcements (list changes, resource updates)
    /// to the other hosts' listen streams, and tell this host's the ones they relay (all of
    /// them, as changed, when some may have been missed).
    pub(super) fn relay_changes(self: &Arc<Self>) {
        let cx = &self.stream_env.ledger;
        if !cx.ledger.shared {
            return;
        }
        let writer = std::sync::Arc::downgrade(&cx.writer);
        // Each message names the run that announced it: Redis delivers a publication to its
        // publisher's own subscription too, and this host told its streams already.
        let run = cx.ledger.run;
        self.catalog.changes().relay_to(crate::tools::Relay(Box::new(move |mut message| {
            message["from"] = serde_json::json!(run);
            if let Some(w) = writer.upgrade() {
                let message = bytes::Bytes::from(message.to_string());
                w.submit(vec![crate::ledger::Op::Publish {
                    channel: codec::CHANGES_CHANNEL,
                    message,
                }]);
            }
        })));
        let changes = std::sync::Arc::downgrade(self.catalog.changes());
        let stats = Arc::clone(self.stats());
        let heard = Box::new(move |message: Option<bytes::Bytes>| {
            let Some(c) = changes.upgrade() else { return };
            let Some(m) = message else {
                stats.bus_missed(BusChannel::Changes);
                return c.missed();
            };
            let Ok(m) = serde_json::from_slice::<serde_json::Value>(&m) else { return };
            if m["from"] != serde_json::json!(run) {
                c.heard(&m);
            }
        });
        if let Err(e) = cx.writer.store().subscribe(codec::CHANGES_CHANNEL, heard) {
            tracing::error!(error = %e, "cannot hear the other hosts' list changes and resource updates");
        }
    }

    /// What a client sent another host for a session live here: handed to the session.
    fn relayed(&self, message: &[u8]) {
        let Ok(m) = serde_json::from_slice::<serde_json::Value>(message) else { return };
        if m["from"] == serde_json::json!(self.stream_env.ledger.ledger.run) {
            return;
        }
        // A session kept as data asks nothing and runs nothing, and sleeps only on a ledger
        // no other host shares: nothing is relayed to it (and this thread could not wake it).
        let Some(Ok(h)) = m["s"].as_str().and_then(|s| self.registry.awake_by_hmac(s)) else {
            return;
        };
        let Some(relayed) = Relayed::parse(&m) else { return };
        // Within the session's mailbox bound (a flood of relayed messages must not grow it):
        // one that finds it full is dropped. The client was answered 202 by the other host
        // already: a dropped answer is read again only after a cut subscription, else its
        // request waits until `sessions.client_request_timeout_secs`; a dropped cancellation
        // lets the call run on.
        if !relay(&h, relayed) {
            self.stats().relay_dropped();
            tracing::warn!(
                "a message relayed from another host found its session's mailbox full or closed; dropped"
            );
        }
    }

    /// This host's subscription to the sessions channel was cut, or not yet taken: every
    /// live session reads the answers kept for the questions it still waits for. Told past
    /// its inbox's bound, as a control message is: one such message a session a cut, and
    /// what it stands for are all the answers that may have been missed.
    fn relays_maybe_missed(&self) {
        self.stats().bus_missed(BusChannel::Sessions);
        // Those kept as data wait for no answer: they are left asleep. One that stopped
        // meanwhile has no question left.
        for hmac in self.registry.live_hmacs() {
            if let Some(Ok(h)) = self.registry.awake_by_hmac(&hmac) {
                let place = h.inbox.control();
                let _ = h.deliver(place, |_place| Relay { relayed: Relayed::MaybeMissed, _place });
            }
        }
    }

    /// End the live session recorded under `hmac`, if there is one here (never dropped: one
    /// message per session, and the end must happen).
    fn ended_elsewhere(&self, hmac: &str) {
        match self.registry.awake_by_hmac(hmac) {
            Some(Ok(h)) => h.addr.do_send(EndedElsewhere),
            // Kept as data (it holds no stream): taken out and dropped, which frees its slot;
            // its end is in the ledger already (announced once committed).
            Some(Err(id)) => drop(self.registry.take_asleep(&id)),
            None => {}
        }
    }

    /// End every live session whose end the ledger records (on the subscription's thread).
    fn look_up_ends(&self) {
        let (store, now) = (self.stream_env.ledger.ledger.writer.store(), self.now().0);
        for hmac in self.registry.live_hmacs() {
            if matches!(store.get(&codec::session_end_key(&hmac), now), Ok(Some(_))) {
                self.ended_elsewhere(&hmac);
            }
        }
    }

    /// A session just revived here may have ended on another host between the revive's read
    /// and its start (the publication found nothing to end): look its end up once more, on a
    /// reader thread.
    pub(super) fn recheck_end(self: &Arc<Self>, hmac: Arc<str>) {
        let sup = Arc::clone(self);
        let now = self.now().0;
        let reads = Arc::clone(&self.stream_env.ledger.ledger.reads);
        actix_rt::spawn(async move {
            let key = codec::session_end_key(&hmac);
            if let Ok(Some(_)) = reads.run(move |store| store.get(&key, now)).await {
                sup.ended_elsewhere(&hmac);
            }
        });
    }
}

/// Hand `relayed` to the session of `h` within its inbox's bound (a place taken like a
/// request's, [`SessionHandle::deliver`]); `false` when the inbox is full or the session
/// stopped.
fn relay(h: &SessionHandle, relayed: Relayed) -> bool {
    h.inbox.enter().is_ok_and(|place| h.deliver(place, |_place| Relay { relayed, _place }).is_ok())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use actix::{AsyncContext, Context};

    use super::*;
    use crate::actor::budget::MemoryBudget;
    use crate::actor::registry::Inbox;
    use crate::actor::session::{SessionActor, SessionHandleParts};
    use crate::proto::event_id::CursorKey;

    #[test]
    fn relays_beyond_the_sessions_inbox_are_dropped_not_queued() {
        // A session whose actor does not run yet: what is handed to it waits in its mailbox,
        // each holding its place in the inbox.
        let ctx = Context::<SessionActor>::new();
        let h = SessionHandle::new(SessionHandleParts {
            addr: ctx.address(),
            inbox: Inbox::new(2),
            principal: None,
            signer: Arc::new(CursorKey::new(b"k").signer("s", None)),
            caller_budget: MemoryBudget::new(1 << 20),
        });
        let handed: Vec<bool> = (0..5).map(|_| relay(&h, Relayed::MaybeMissed)).collect();
        assert_eq!(handed, [true, true, false, false, false], "two places, five relays");
        // A request finds the inbox full too: relays and requests share the one bound.
        assert!(h.inbox.enter().is_err());
        // The session gone: nothing is handed to it (and the places its messages held are
        // given back with them).
        drop(ctx);
        assert!(h.inbox.enter().is_ok(), "the dropped messages' places are free");
        assert!(!relay(&h, Relayed::MaybeMissed), "a stopped session takes no relay");
    }
}
