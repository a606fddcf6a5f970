//! The supervisor: one per process. Owns the generation, the session registry, the limits and
//! the lifecycle phase, and creates sessions.

use std::sync::Arc;

use actix::{Actor, AsyncContext};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::RwLock;
use tokio::time::Instant;

use super::registry::{Registry, SessionHandle};
use super::session::SessionActor;
use crate::config::RuntimeConfig;
use crate::proto::error::Rejection;
use crate::proto::event_id::CursorKey;
use crate::proto::ids::{Generation, SessionId, Tick};
use crate::proto::mcp::InitializeRequest;
use crate::proto::version::ProtocolVersion;
use crate::tools::Catalog;

/// Lifecycle phase of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Admitting new sessions of this generation.
    Serving(Generation),
    /// Shutting down: no new sessions; existing ones are being stopped.
    Draining(Generation),
}

/// Process-wide owner of sessions.
pub struct Supervisor {
    cfg: Arc<RuntimeConfig>,
    catalog: Arc<Catalog>,
    registry: Arc<Registry>,
    key: CursorKey,
    origin: Instant,
    generation: Generation,
    /// Read on every `initialize`, written twice per process life; never held across await.
    phase: RwLock<Phase>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").field("phase", &*self.phase.read()).field("sessions", &self.registry.len()).finish_non_exhaustive()
    }
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).expect("the operating system CSPRNG is available");
    b
}

impl Supervisor {
    /// Start serving generation `cfg.generation`.
    #[must_use]
    pub fn new(cfg: RuntimeConfig, catalog: Catalog) -> Arc<Supervisor> {
        let secret = cfg.cursor_secret.clone().unwrap_or_else(|| random_bytes::<32>().to_vec());
        let generation = Generation(cfg.generation);
        Arc::new(Supervisor {
            key: CursorKey::new(&secret),
            cfg: Arc::new(cfg),
            catalog: Arc::new(catalog),
            registry: Arc::new(Registry::default()),
            origin: Instant::now(),
            generation,
            phase: RwLock::new(Phase::Serving(generation)),
        })
    }

    /// Configuration.
    #[must_use]
    pub fn config(&self) -> &Arc<RuntimeConfig> {
        &self.cfg
    }

    /// The catalog.
    #[must_use]
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Current phase.
    #[must_use]
    pub fn phase(&self) -> Phase {
        *self.phase.read()
    }

    /// Milliseconds since the supervisor started (the core's clock).
    #[must_use]
    pub fn now(&self) -> Tick {
        Tick(self.origin.elapsed().as_millis() as u64)
    }

    /// Live sessions.
    #[must_use]
    pub fn session_count(&self) -> usize {
        self.registry.len()
    }

    /// Find a session for a caller. Another caller's session is reported as not found.
    ///
    /// # Errors
    /// [`Rejection::SessionNotFound`].
    pub fn lookup(&self, id: &SessionId, principal: Option<&Arc<str>>) -> Result<SessionHandle, Rejection> {
        let h = self.registry.get(id).ok_or(Rejection::SessionNotFound)?;
        if h.principal.as_deref() != principal.map(|p| &**p) {
            return Err(Rejection::SessionNotFound);
        }
        Ok(h)
    }

    /// Create a session for an `initialize` request. Must run on an actix arbiter.
    ///
    /// # Errors
    /// [`Rejection::Overloaded`] when draining or at `max_sessions`.
    pub fn create_session(self: &Arc<Self>, principal: Option<Arc<str>>, init: &InitializeRequest) -> Result<(SessionId, ProtocolVersion), Rejection> {
        if !matches!(self.phase(), Phase::Serving(_)) {
            return Err(Rejection::Overloaded { retry_after_s: 5 });
        }
        let reservation = self.registry.reserve(self.cfg.max_sessions).ok_or(Rejection::Overloaded { retry_after_s: 5 })?;
        let version = ProtocolVersion::negotiate(init.requested_version.as_deref());
        let raw = format!("{}.{}", self.generation.0, URL_SAFE_NO_PAD.encode(random_bytes::<24>()));
        let id = SessionId::parse(&raw).expect("base64url and digits are visible ASCII");
        let signer = Arc::new(self.key.signer(id.as_str(), principal.as_deref()));
        let sup = Arc::clone(self);
        let sid = id.clone();
        let caps = init.capabilities.clone();
        SessionActor::create(move |ctx| {
            let handle = SessionHandle { addr: ctx.address(), principal: principal.clone(), signer: Arc::clone(&signer), generation: sup.generation };
            let guard = reservation.insert(sid.clone(), handle);
            SessionActor::new(sid, principal, version, sup.generation, signer, caps, sup, guard)
        });
        Ok((id, version))
    }

    /// Stop admitting sessions and stop every live one (their streams end, their requests are
    /// cancelled, they deregister). Returns how many were told to stop.
    pub fn shutdown(&self) -> usize {
        {
            let mut phase = self.phase.write();
            *phase = Phase::Draining(self.generation);
        }
        let all = self.registry.all();
        for h in &all {
            h.addr.do_send(super::session::Shutdown);
        }
        all.len()
    }
}
