//! Session registry: `SessionId -> SessionHandle` in a sharded map. Guards are held only for
//! the lookup (never across an await); a handle is cloned out.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use actix::Addr;
use parking_lot::RwLock;

use super::session::SessionActor;
use crate::proto::event_id::CursorSigner;
use crate::proto::ids::{Generation, SessionId};

const SHARDS: usize = 16;

/// What a request needs to reach a session without messaging it: its address, owner and
/// cursor signer.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    /// The session actor.
    pub addr: Addr<SessionActor>,
    /// The owning principal (authentication on).
    pub principal: Option<Arc<str>>,
    /// Verifies cursors for this session and owner.
    pub signer: Arc<CursorSigner>,
    /// Generation the session belongs to.
    pub generation: Generation,
}

/// The sharded session map.
#[derive(Debug)]
pub struct Registry {
    shards: Vec<RwLock<HashMap<SessionId, SessionHandle>>>,
    hasher: RandomState,
    /// Live plus reserved sessions; reservations make the limit check atomic.
    count: AtomicUsize,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry { shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(), hasher: RandomState::new(), count: AtomicUsize::new(0) }
    }
}

impl Registry {
    fn shard(&self, id: &SessionId) -> &RwLock<HashMap<SessionId, SessionHandle>> {
        &self.shards[(self.hasher.hash_one(id) as usize) % SHARDS]
    }

    /// Look a session up.
    #[must_use]
    pub fn get(&self, id: &SessionId) -> Option<SessionHandle> {
        self.shard(id).read().get(id).cloned()
    }

    /// Reserve a slot if fewer than `max` sessions exist. The slot is released by dropping
    /// the returned [`Reservation`] (or the [`RegistryGuard`] it becomes).
    #[must_use]
    pub fn reserve(self: &Arc<Self>, max: usize) -> Option<Reservation> {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| Reservation { registry: Some(Arc::clone(self)) })
    }

    /// Live sessions (including reservations).
    #[must_use]
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Whether there is no session.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every handle (for shutdown).
    #[must_use]
    pub fn all(&self) -> Vec<SessionHandle> {
        self.shards.iter().flat_map(|s| s.read().values().cloned().collect::<Vec<_>>()).collect()
    }
}

/// A reserved slot, not yet holding a session.
#[derive(Debug)]
#[must_use = "dropping a reservation releases the slot"]
pub struct Reservation {
    registry: Option<Arc<Registry>>,
}

impl Reservation {
    /// Publish the session under `id`; the returned guard deregisters it on drop.
    pub fn insert(mut self, id: SessionId, handle: SessionHandle) -> RegistryGuard {
        let registry = self.registry.take().expect("reservation used once");
        registry.shard(&id).write().insert(id.clone(), handle);
        RegistryGuard { registry, id }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(r) = &self.registry {
            r.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Owned by the session actor: dropping it (on every exit path of the actor) removes the
/// session from the registry and frees its slot.
#[derive(Debug)]
pub struct RegistryGuard {
    registry: Arc<Registry>,
    id: SessionId,
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        self.registry.shard(&self.id).write().remove(&self.id);
        self.registry.count.fetch_sub(1, Ordering::AcqRel);
    }
}
