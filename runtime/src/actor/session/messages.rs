//! The messages a session receives from the HTTP shell, and what a POST produces.

use actix::prelude::*;
use bytes::Bytes;
use tokio::sync::oneshot;

use crate::actor::body::SseBody;
use crate::actor::registry::InboxTicket;
use crate::proto::admission::ReplyMode;
use crate::proto::error::Rejection;
use crate::proto::event_id::EventId;
use crate::proto::ids::Generation;
use crate::proto::jsonrpc::Incoming;

/// The answer to a request sent as JSON: its encoded response, or why there is none (the
/// session ended). A dropped sender means the request was cancelled (no response is owed).
pub(crate) type JsonReply = Result<Bytes, Rejection>;

/// What a POST produced.
#[derive(Debug)]
pub enum PostOutcome {
    /// Notification(s) or response(s) only: 202.
    Accepted,
    /// A JSON reply; the sender is dropped if the request is cancelled.
    Json(oneshot::Receiver<JsonReply>),
    /// An SSE reply.
    Sse(SseBody),
    /// An answer to a server-to-client request another host may wait for (a shared ledger):
    /// 202 once relayed, or why not ([`Rejection::AskerGone`]).
    Relayed(oneshot::Receiver<Result<(), Rejection>>),
    /// A 2025-03-26 batch: one JSON reply per request, in order.
    Batch(Vec<oneshot::Receiver<JsonReply>>),
}

/// POSTed message(s) for this session.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Post {
    /// The message(s).
    pub incoming: Incoming,
    /// Reply format for requests.
    pub reply_mode: ReplyMode,
    /// Where the outcome goes.
    pub reply: oneshot::Sender<Result<PostOutcome, Rejection>>,
    /// Its place in the session's inbox, given back when the message is dropped.
    pub ticket: InboxTicket,
    /// The request memory its parsed body holds (`None` without a request): moved to the
    /// request (a batch's split evenly between its requests), given back when the session
    /// has answered it; a refused one's at once.
    pub charge: Option<crate::stats::RequestCharge>,
    /// What the caller's lists show (`auth.filter_lists`), when filtered.
    pub lists: Option<std::sync::Arc<crate::proto::oauth::ListFilter>>,
}

/// Open a new standalone GET stream (replacing any previous one).
#[derive(Message)]
#[rtype(result = "()")]
pub struct OpenGet {
    /// Where the body goes.
    pub reply: oneshot::Sender<Result<SseBody, Rejection>>,
    /// Its place in the session's inbox, given back when the message is dropped.
    pub ticket: InboxTicket,
}

/// Resume the stream named by a verified cursor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resume {
    /// The verified cursor.
    pub event: EventId,
    /// Where the body goes.
    pub reply: oneshot::Sender<Result<SseBody, Rejection>>,
    /// Its place in the session's inbox, given back when the message is dropped.
    pub ticket: InboxTicket,
}

/// End the session (HTTP DELETE).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Delete {
    /// Acknowledgement.
    pub reply: oneshot::Sender<Result<(), Rejection>>,
    /// Its place in the session's inbox, given back when the message is dropped.
    pub ticket: InboxTicket,
}

/// A rollback's drain is over: end the requests admitted under a generation older than
/// `before` with the "drained" error (`-32010`).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct EndOlderRequests {
    pub(crate) before: Generation,
}

/// Another host sharing the ledger ended the session (DELETE, expiry): it ends here too.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct EndedElsewhere;

/// A [`Relayed`] message on its way to the session, holding a place in the session's
/// [`crate::actor::registry::Inbox`] (the bound a flood of them meets, as requests do).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Relay {
    pub(crate) relayed: Relayed,
    pub(crate) _place: InboxTicket,
}

/// What a client sent another host sharing the ledger for this session: an answer to a
/// server-to-client request, a cancellation, or a new log level.
pub(crate) enum Relayed {
    /// The answer to server-to-client request `id`.
    Answer(
        crate::proto::ids::JsonRpcId,
        Result<serde_json::Value, crate::proto::jsonrpc::ErrorObject>,
    ),
    /// `notifications/cancelled` of request `id`.
    Cancel(crate::proto::ids::JsonRpcId),
    /// `logging/setLevel` answered by another host (its record committed there).
    Level(crate::proto::mcp::LogLevel),
    /// What was relayed may have been missed (this host's subscription was cut, or not yet
    /// taken): the answers kept for the questions still waiting are read.
    MaybeMissed,
}

impl Relayed {
    /// The message a host published on the sessions channel (or kept, for an answer), as
    /// the session hears it; `None` when it is none of these.
    pub(crate) fn parse(m: &serde_json::Value) -> Option<Relayed> {
        use crate::proto::ids::JsonRpcId;
        if let Some(id) = JsonRpcId::from_value(&m["cancel"]) {
            return Some(Relayed::Cancel(id));
        }
        if let Some(level) = m["level"].as_str().and_then(crate::proto::mcp::LogLevel::parse) {
            return Some(Relayed::Level(level));
        }
        let id = JsonRpcId::from_value(&m["id"])?;
        match (m.get("result"), m.get("error")) {
            (Some(r), None) => Some(Relayed::Answer(id, Ok(r.clone()))),
            (None, Some(e)) => {
                serde_json::from_value(e.clone()).ok().map(|e| Relayed::Answer(id, Err(e)))
            }
            _ => None,
        }
    }
}

/// Stop the session (process shutdown, or an id never handed out).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown {
    /// Its place in the session's inbox (from the registry), given back once handled: the
    /// session does not hibernate while the message waits.
    pub(crate) _place: Option<super::InboxTicket>,
}

#[cfg(test)]
mod tests {
    use super::Relayed;
    use crate::proto::ids::JsonRpcId;
    use serde_json::json;

    #[test]
    fn relayed_messages_are_read_as_what_they_carry_and_anything_else_is_none() {
        let s = |v| Relayed::parse(&v);
        assert!(matches!(
            s(json!({"s": "h", "cancel": 7})),
            Some(Relayed::Cancel(JsonRpcId::Number(7)))
        ));
        assert!(matches!(
            s(json!({"s": "h", "level": "error"})),
            Some(Relayed::Level(crate::proto::mcp::LogLevel::Error))
        ));
        match s(json!({"s": "h", "id": 3, "result": {"ok": true}})) {
            Some(Relayed::Answer(JsonRpcId::Number(3), Ok(r))) => {
                assert_eq!(r, json!({"ok": true}))
            }
            _ => panic!("an answer"),
        }
        match s(json!({"id": "q", "error": {"code": -1, "message": "no"}})) {
            Some(Relayed::Answer(JsonRpcId::String(q), Err(e))) => {
                assert_eq!((&*q, e.code), ("q", -1));
            }
            _ => panic!("an error answer"),
        }
        for none in [
            json!({"s": "h"}),
            json!({"id": 3}),
            json!({"id": 3, "result": 1, "error": {"code": 1, "message": ""}}),
            json!({"id": 3, "error": "not an error object"}),
            json!({"level": "loud"}),
        ] {
            assert!(s(none.clone()).is_none(), "{none}");
        }
    }
}
