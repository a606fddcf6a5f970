//! `subscriptions/listen` (2026-07-28, SPEC.md §3.7): the filter a client asks for, the part
//! of it this server honours, which changes reach a subscription, and the frames of its
//! stream, in order. Pure: the shell feeds it changes and the lifecycle, and writes what
//! [`Subscription::poll_frame`] gives.
//!
//! Invariants: the acknowledgement is the first frame; every frame after it carries the
//! listen request's id as `io.modelcontextprotocol/subscriptionId` (the same JSON type);
//! only notification types the honoured filter names are ever sent; list changes coalesce
//! (two changes of one list before the client reads are one notification — a list-changed
//! notification says "fetch again", not what changed); after the completion result nothing
//! more is sent. A subscription that missed resource updates (its shell's queue overflowed)
//! is told every subscribed URI changed: a spurious "read again" is safe, a missed one is not.

use std::collections::VecDeque;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::meta;
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{encode_notification, encode_result};

/// The lists whose changes a subscription may ask to hear about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// `tools/list`: `notifications/tools/list_changed`.
    Tools,
    /// `prompts/list`: `notifications/prompts/list_changed`.
    Prompts,
    /// `resources/list`: `notifications/resources/list_changed`.
    Resources,
}

impl ListKind {
    /// Every kind, in the order frames are sent when several changed at once.
    pub const ALL: [ListKind; 3] = [ListKind::Tools, ListKind::Prompts, ListKind::Resources];

    fn index(self) -> usize {
        self as usize
    }

    /// The notification method.
    #[must_use]
    pub fn method(self) -> &'static str {
        match self {
            ListKind::Tools => "notifications/tools/list_changed",
            ListKind::Prompts => "notifications/prompts/list_changed",
            ListKind::Resources => "notifications/resources/list_changed",
        }
    }

    /// The filter field that opts into it.
    #[must_use]
    pub fn filter_key(self) -> &'static str {
        match self {
            ListKind::Tools => "toolsListChanged",
            ListKind::Prompts => "promptsListChanged",
            ListKind::Resources => "resourcesListChanged",
        }
    }
}

/// How many times each list has changed since the process started, and how many times
/// resource updates may have been missed (what a subscription compares against what it has
/// already told its client).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListVersions {
    lists: [u64; 3],
    missed_updates: u64,
}

impl ListVersions {
    /// The count of `kind`.
    #[must_use]
    pub fn of(&self, kind: ListKind) -> u64 {
        self.lists[kind.index()]
    }

    /// One more change of `kind`.
    pub fn bump(&mut self, kind: ListKind) {
        self.lists[kind.index()] = self.lists[kind.index()].wrapping_add(1);
    }

    /// Resource updates may have been missed once more (announcements from another host were
    /// lost): each subscription announces every URI it subscribed to as updated.
    pub fn bump_missed_updates(&mut self) {
        self.missed_updates = self.missed_updates.wrapping_add(1);
    }
}

/// What a server can deliver on a listen stream (what its capabilities advertise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offered {
    /// Lists that may change, by [`ListKind`] order.
    pub lists: [bool; 3],
    /// `notifications/resources/updated` for subscribed URIs (`resources.subscribe`).
    pub resource_updates: bool,
}

impl Offered {
    /// Whether changes of `kind` may be announced.
    #[must_use]
    pub fn list(&self, kind: ListKind) -> bool {
        self.lists[kind.index()]
    }
}

/// A `SubscriptionFilter`: what a client opts into (or, acknowledged, what it gets).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    lists: [bool; 3],
    uris: Vec<String>,
}

/// Bounds on a listen request's filter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FilterLimits {
    /// Most URIs in `resourceSubscriptions`.
    pub max_uris: usize,
    /// Longest URI, in bytes.
    pub max_uri_bytes: usize,
}

impl Filter {
    /// Read `params.notifications` of a listen request.
    ///
    /// # Errors
    /// Why the filter is malformed (missing, not an object, a flag that is not a boolean, a
    /// URI list that is not an array of strings, or one over `limits`); the caller answers
    /// `-32602`.
    pub(crate) fn parse(params: Option<&Value>, limits: FilterLimits) -> Result<Filter, String> {
        let Some(Value::Object(n)) = params.and_then(|p| p.get("notifications")) else {
            return Err("params.notifications (the subscription filter) must be an object".into());
        };
        let mut f = Filter::default();
        for kind in ListKind::ALL {
            f.lists[kind.index()] = match n.get(kind.filter_key()) {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(format!("notifications.{} must be a boolean", kind.filter_key()));
                }
            };
        }
        match n.get("resourceSubscriptions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                if a.len() > limits.max_uris {
                    return Err(format!(
                        "notifications.resourceSubscriptions lists {} URIs; at most {} are allowed",
                        a.len(),
                        limits.max_uris
                    ));
                }
                for u in a {
                    let u = u
                        .as_str()
                        .ok_or("notifications.resourceSubscriptions must be an array of strings")?;
                    if u.is_empty() || u.len() > limits.max_uri_bytes {
                        return Err(format!(
                            "notifications.resourceSubscriptions: a URI must have 1 to {} bytes",
                            limits.max_uri_bytes
                        ));
                    }
                    if !f.uris.iter().any(|x| x == u) {
                        f.uris.push(u.to_owned());
                    }
                }
            }
            Some(_) => {
                return Err(
                    "notifications.resourceSubscriptions must be an array of strings".into()
                );
            }
        }
        Ok(f)
    }

    /// The part of this filter the server honours: list kinds it may announce, and URIs
    /// (of resources `known` says exist) when it sends resource updates at all.
    #[must_use]
    pub(crate) fn honoured(&self, offered: &Offered, known: impl Fn(&str) -> bool) -> Filter {
        let mut f = Filter::default();
        for kind in ListKind::ALL {
            f.lists[kind.index()] = self.lists[kind.index()] && offered.list(kind);
        }
        if offered.resource_updates {
            f.uris = self.uris.iter().filter(|u| known(u)).cloned().collect();
        }
        f
    }

    /// Whether changes of `kind` are wanted.
    #[must_use]
    pub(crate) fn wants_list(&self, kind: ListKind) -> bool {
        self.lists[kind.index()]
    }

    /// Whether an update of `uri` is wanted: it is a subscribed URI, or a sub-resource of one
    /// (`uri` continues a subscribed URI after a `/`).
    #[must_use]
    pub(crate) fn wants_uri(&self, uri: &str) -> bool {
        self.uris.iter().any(|s| {
            uri == s
                || uri
                    .strip_prefix(s.as_str())
                    .is_some_and(|rest| s.ends_with('/') || rest.starts_with('/'))
        })
    }

    /// As sent on the wire: only the fields that are set.
    #[must_use]
    pub(crate) fn to_value(&self) -> Value {
        let mut m = Map::new();
        for kind in ListKind::ALL.into_iter().filter(|k| self.wants_list(*k)) {
            m.insert(kind.filter_key().into(), Value::Bool(true));
        }
        if !self.uris.is_empty() {
            m.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        Value::Object(m)
    }
}

/// The `_meta` of every frame of a subscription.
fn tagged(id: &JsonRpcId) -> Value {
    json!({ meta::SUBSCRIPTION_ID: id.to_value() })
}

/// The graceful completion result of a subscription the server ends (SPEC.md §3.7).
#[must_use]
pub(crate) fn completion(id: &JsonRpcId, server_info: &Value) -> Bytes {
    let mut m = tagged(id);
    m[meta::SERVER_INFO] = server_info.clone();
    encode_result(id, &json!({"resultType": "complete", "_meta": m}))
}

/// One subscription's state: what its client has been told, and the frames still to send.
#[derive(Debug)]
pub(crate) struct Subscription {
    id: JsonRpcId,
    filter: Filter,
    /// The list versions the client has been told about (or that were current when it
    /// subscribed).
    told: ListVersions,
    out: VecDeque<Bytes>,
    ended: bool,
    /// The server's identity, for the completion result.
    server_info: Value,
}

impl Subscription {
    /// A new subscription of request `id` with the `honoured` filter, at list versions
    /// `now` (changes before the subscription are not announced). Its first frame is the
    /// acknowledgement.
    #[must_use]
    pub(crate) fn new(
        id: JsonRpcId,
        honoured: Filter,
        now: ListVersions,
        server_info: Value,
    ) -> Subscription {
        let ack = encode_notification(
            "notifications/subscriptions/acknowledged",
            Some(&json!({"_meta": tagged(&id), "notifications": honoured.to_value()})),
        );
        Subscription {
            id,
            filter: honoured,
            told: now,
            out: VecDeque::from([ack]),
            ended: false,
            server_info,
        }
    }

    /// The lists now stand at `versions`: one notification per wanted list that changed
    /// since the client was last told, and every subscribed URI if updates may have been
    /// missed since.
    pub(crate) fn handle_lists(&mut self, versions: ListVersions) {
        if self.ended {
            return;
        }
        for kind in ListKind::ALL {
            if versions.of(kind) != self.told.of(kind) && self.filter.wants_list(kind) {
                self.out.push_back(encode_notification(
                    kind.method(),
                    Some(&json!({"_meta": tagged(&self.id)})),
                ));
            }
        }
        let missed = versions.missed_updates != self.told.missed_updates;
        self.told = versions;
        if missed {
            self.handle_missed_updates();
        }
    }

    /// Resource `uri` changed.
    pub(crate) fn handle_updated(&mut self, uri: &str) {
        if !self.ended && self.filter.wants_uri(uri) {
            self.push_updated(uri);
        }
    }

    /// Resource updates were missed (the shell's queue overflowed, or another host's
    /// announcements were lost): every subscribed URI is announced as updated.
    pub(crate) fn handle_missed_updates(&mut self) {
        if self.ended {
            return;
        }
        for i in 0..self.filter.uris.len() {
            let uri = self.filter.uris[i].clone();
            self.push_updated(&uri);
        }
    }

    fn push_updated(&mut self, uri: &str) {
        self.out.push_back(encode_notification(
            "notifications/resources/updated",
            Some(&json!({"_meta": tagged(&self.id), "uri": uri})),
        ));
    }

    /// The server ends the subscription (it is draining or stopping): after what is queued,
    /// the completion result; then nothing more.
    pub(crate) fn handle_end(&mut self) {
        if !self.ended {
            self.ended = true;
            self.out.push_back(completion(&self.id, &self.server_info));
        }
    }

    /// The next frame to write (one JSON-RPC message), if any.
    #[must_use = "a polled frame must be written"]
    pub(crate) fn poll_frame(&mut self) -> Option<Bytes> {
        self.out.pop_front()
    }

    /// Everything is written and the subscription has ended: close the stream.
    #[must_use]
    pub(crate) fn is_finished(&self) -> bool {
        self.ended && self.out.is_empty()
    }
}

#[cfg(test)]
mod tests;
