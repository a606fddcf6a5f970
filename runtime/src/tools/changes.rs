//! Changes a running server announces to `subscriptions/listen` streams (2026-07-28): a list
//! that changed, a resource that was updated. Tools announce them through
//! [`ToolContext::list_changed`](super::ToolContext::list_changed) and
//! [`ToolContext::resource_updated`](super::ToolContext::resource_updated), anything else
//! through [`Catalog::changes`](super::Catalog::changes).
//!
//! Bounded on every edge: list changes are counters in a `watch` (a subscriber that reads late
//! sees the newest counts: changes coalesce, nothing queues); resource updates go through a
//! `broadcast` of [`UPDATE_QUEUE`] entries, and a subscriber that falls further behind is told
//! every URI it subscribed to changed (see [`crate::proto::stateless::listen`]). Announcing never
//! waits.

use std::sync::Arc;

use tokio::sync::{broadcast, watch};

use crate::proto::stateless::listen::{ListKind, ListVersions, Offered};

/// Resource updates a listen stream may fall behind by before it is told every subscribed
/// URI changed.
pub const UPDATE_QUEUE: usize = 256;

/// The change announcements of one catalog.
#[derive(Debug)]
pub struct Changes {
    offered: Offered,
    /// Counters per list. A `watch`: a reader gets the newest value, never a queue.
    lists: watch::Sender<ListVersions>,
    /// Updated URIs, to every live subscriber; bounded, a lagging reader is told so.
    updates: broadcast::Sender<Arc<str>>,
    /// Where announcements made here also go: the other hosts sharing the ledger (set once,
    /// by the supervisor of a shared ledger).
    relay: std::sync::OnceLock<Relay>,
}

/// What an announcement made here is relayed with (its message: JSON `{"list": "tools"}` or
/// `{"uri": "..."}`).
pub(crate) struct Relay(pub(crate) Box<dyn Fn(serde_json::Value) + Send + Sync>);

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Relay")
    }
}

/// What a listen stream reads changes from.
#[derive(Debug)]
pub struct ChangeFeed {
    /// List counters.
    pub lists: watch::Receiver<ListVersions>,
    /// Updated URIs.
    pub updates: broadcast::Receiver<Arc<str>>,
}

impl Changes {
    /// Announcements of what `offered` names (anything else is dropped).
    #[must_use]
    pub fn new(offered: Offered) -> Changes {
        let (lists, _) = watch::channel(ListVersions::default());
        let (updates, _) = broadcast::channel(UPDATE_QUEUE);
        Changes { offered, lists, updates, relay: std::sync::OnceLock::new() }
    }

    /// What this catalog may announce (its capabilities say so to clients).
    #[must_use]
    pub fn offered(&self) -> Offered {
        self.offered
    }

    /// Announce that a list changed: every listen stream that opted into it is told (once,
    /// however many changes it has not yet been told of). Ignored (and `false`) for a list the
    /// catalog did not declare with [`CatalogBuilder::announces_list_changes`](super::CatalogBuilder::announces_list_changes).
    pub fn list_changed(&self, kind: ListKind) -> bool {
        if !self.offered.list(kind) {
            tracing::debug!(?kind, "list change not announced: the catalog does not declare it");
            return false;
        }
        self.lists.send_modify(|v| v.bump(kind));
        if let Some(r) = self.relay.get() {
            let name = match kind {
                ListKind::Tools => "tools",
                ListKind::Prompts => "prompts",
                ListKind::Resources => "resources",
            };
            (r.0)(serde_json::json!({"list": name}));
        }
        true
    }

    /// Announce that resource `uri` changed: every listen stream subscribed to it (or to a
    /// resource it belongs to) is told. Ignored (and `false`) unless the catalog declared
    /// [`CatalogBuilder::announces_resource_updates`](super::CatalogBuilder::announces_resource_updates).
    pub fn resource_updated(&self, uri: &str) -> bool {
        if !self.offered.resource_updates {
            tracing::debug!(uri, "resource update not announced: the catalog does not declare it");
            return false;
        }
        // No subscriber: nothing to tell.
        let _ = self.updates.send(uri.into());
        if let Some(r) = self.relay.get() {
            (r.0)(serde_json::json!({"uri": uri}));
        }
        true
    }

    /// Relay every announcement made here with `relay` from now on (set once).
    pub(crate) fn relay_to(&self, relay: Relay) {
        let _ = self.relay.set(relay);
    }

    /// An announcement another host relayed: told to this host's listen streams, never
    /// relayed again.
    pub(crate) fn heard(&self, m: &serde_json::Value) {
        if let Some(uri) = m["uri"].as_str() {
            if self.offered.resource_updates {
                let _ = self.updates.send(uri.into());
            }
            return;
        }
        let kind = match m["list"].as_str() {
            Some("tools") => ListKind::Tools,
            Some("prompts") => ListKind::Prompts,
            Some("resources") => ListKind::Resources,
            _ => return,
        };
        if self.offered.list(kind) {
            self.lists.send_modify(|v| v.bump(kind));
        }
    }

    /// Announcements other hosts relayed may have been missed (the subscription to them was
    /// cut, or not yet taken when they were made): every listen stream here is told each list
    /// it opted into changed and each URI it subscribed to was updated (a client re-reads what
    /// did not change, but misses nothing that did).
    pub(crate) fn missed(&self) {
        let offered = self.offered;
        // A catalog that announces nothing wakes no stream.
        self.lists.send_if_modified(|v| {
            for kind in ListKind::ALL {
                if offered.list(kind) {
                    v.bump(kind);
                }
            }
            if offered.resource_updates {
                v.bump_missed_updates();
            }
            offered.lists.contains(&true) || offered.resource_updates
        });
    }

    /// A feed of the changes from now on.
    #[must_use]
    pub fn feed(&self) -> ChangeFeed {
        ChangeFeed { lists: self.lists.subscribe(), updates: self.updates.subscribe() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miss_bumps_each_offered_list_and_the_missed_updates_and_nothing_not_offered() {
        let offered = Offered { lists: [true, false, true], resource_updates: true };
        let changes = Changes::new(offered);
        let mut feed = changes.feed();
        changes.missed();
        assert!(feed.lists.has_changed().unwrap(), "listen streams are woken");
        let now = *feed.lists.borrow_and_update();
        let mut want = ListVersions::default();
        want.bump(ListKind::Tools);
        want.bump(ListKind::Resources);
        want.bump_missed_updates();
        assert_eq!(now, want);
        let quiet = Changes::new(Offered { lists: [false; 3], resource_updates: false });
        let mut feed = quiet.feed();
        quiet.missed();
        assert!(!feed.lists.has_changed().unwrap(), "nothing to tell: no stream woken");
        assert_eq!(*feed.lists.borrow_and_update(), ListVersions::default());
    }
}
