//! Hibernation: a session with nothing to do (no request, connection, stream or client
//! request) for `sessions.hibernate_after_ms` stops its actor and is kept by the registry as
//! data, a [`SleepingSession`]: no task, mailbox, timer or tracing span. Its next request
//! (or any lookup, or the supervisor's sweeper at its expiry or parking deadline) wakes it
//! into a new actor that goes on where it stopped: same incarnation, numbering, log level and
//! last use, no ledger read or write. It stays live throughout: counted in the registry, its
//! caller's quota and its generation.

use std::sync::Arc;

use actix::prelude::*;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{
    SessionActor, SessionHandle, SessionStreams, session_limits, session_links, session_span,
};
use crate::actor::budget::{Charge, MemoryBudget};
use crate::actor::durable::SessionMeta;
use crate::actor::env::SessionEnv;
use crate::actor::generations::GenCount;
use crate::actor::lifecycle::Phase;
use crate::actor::registry::RegistryGuard;
use crate::proto::error::Rejection;
use crate::proto::event_id::CursorSigner;
use crate::proto::session::{SessionCore, SleepingCore};

/// What a hibernating session keeps: its core's numbering and deadlines, and what its actor
/// holds for its whole life (names, signer, handshake, counts and charges). The handshake's
/// JSON is kept as text: a parsed object costs a tree node of about 600 bytes per level.
pub(crate) struct SleepingSession {
    core: SleepingCore,
    principal: Option<Arc<str>>,
    owner: Option<Arc<str>>,
    names: Arc<[Arc<str>]>,
    signer: Arc<CursorSigner>,
    streams: SessionStreams,
    generation: GenCount,
    client_caps: Box<RawValue>,
    sup: Arc<dyn SessionEnv>,
    guard: RegistryGuard<SessionHandle>,
    caller_budget: Arc<MemoryBudget>,
    handshake: Charge,
    meta: SessionMeta,
    client_info: Box<RawValue>,
    requested_version: Option<String>,
}

/// A handshake value as text (it was parsed from JSON: it always prints).
fn raw(v: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).expect("a parsed JSON value prints")
}

/// A handshake value kept as text, parsed again.
fn parsed(raw: &RawValue) -> Value {
    serde_json::from_str(raw.get()).expect("printed from a JSON value")
}

impl SessionActor {
    /// Hibernate if nothing is open and the session may: it hands its state to the registry
    /// and stops. Refused (it stays awake another `hibernate_after_ms`) while a request holds
    /// a place in its inbox, a stream is kept, its first record is not handed to the ledger
    /// yet, or the host is not serving.
    pub(super) fn hibernate(&mut self, ctx: &mut Context<Self>) -> bool {
        let now = self.sup.now();
        self.record_if_due();
        let sleeping = self.core.sleep().filter(|_| {
            self.dormant_until.is_empty()
                && self.on_recorded.is_none()
                && self.sup.phase() == Phase::Serving
        });
        let (Some(core), Some(guard)) = (sleeping, self.guard.take()) else {
            self.core.stay_awake(now);
            return false;
        };
        let limits = session_limits(&*self.sup, self.generation_count.as_ref().expect("awake"));
        let hibernated = guard.hibernate(core.deadline(&limits).0, |guard| {
            Box::new(SleepingSession {
                core,
                principal: self.principal.clone(),
                owner: self.owner.clone(),
                names: Arc::clone(&self.names),
                signer: Arc::clone(&self.signer),
                streams: self.streams.clone(),
                generation: self.generation_count.take().expect("awake"),
                client_caps: raw(&self.client_caps),
                sup: Arc::clone(&self.sup),
                guard,
                caller_budget: Arc::clone(&self.caller_budget),
                handshake: self.handshake_charge.take().expect("awake"),
                meta: self.meta.clone(),
                client_info: raw(&self.client_info),
                requested_version: self.requested_version.take(),
            })
        });
        match hibernated {
            Ok(()) => {
                tracing::debug!("session hibernated");
                self.sup.hibernated();
                ctx.stop();
                true
            }
            Err(guard) => {
                self.guard = Some(guard);
                self.core.stay_awake(now);
                false
            }
        }
    }

    /// The actor of a session woken from hibernation.
    fn woken(s: SleepingSession, addr: &Addr<SessionActor>) -> SessionActor {
        let limits = session_limits(&*s.sup, &s.generation);
        let now = s.sup.now();
        let span = session_span(&s.meta.hmac, &s.generation);
        SessionActor {
            core: SessionCore::wake(s.core, limits, now),
            dormant_until: std::collections::BTreeSet::new(),
            principal: s.principal,
            owner: s.owner,
            names: s.names,
            signer: s.signer,
            streams: s.streams,
            gens: Arc::clone(s.sup.generations()),
            generation_count: Some(s.generation),
            client_caps: Arc::new(parsed(&s.client_caps)),
            guard: Some(s.guard),
            timer: None,
            ended_by: Rejection::SessionNotFound,
            link: Arc::new(addr.clone().recipient()),
            links: session_links(addr),
            caller_budget: s.caller_budget,
            handshake_charge: Some(s.handshake),
            meta: s.meta,
            client_info: parsed(&s.client_info),
            requested_version: s.requested_version,
            ledger: Arc::clone(&s.sup.stream_env().ledger),
            on_recorded: None,
            span,
            sup: s.sup,
        }
    }
}

/// Start a hibernating session's actor; its handle, for the registry. Runs on an actix
/// arbiter (a request's worker, or the sweeper's).
pub(super) fn wake(s: SleepingSession) -> SessionHandle {
    let mailbox = s.sup.config().sessions.mailbox;
    let inbox = Arc::clone(s.guard.inbox());
    let principal = s.principal.clone();
    let signer = Arc::clone(&s.signer);
    let caller_budget = Arc::clone(&s.caller_budget);
    let addr = SessionActor::create(move |ctx| {
        ctx.set_mailbox_capacity(mailbox);
        SessionActor::woken(s, &ctx.address())
    });
    SessionHandle { addr, inbox, principal, signer, caller_budget }
}
