//! One request pipeline for both eras: what runs a request once its era's shell has admitted
//! it and [`Route`](crate::proto::route::Route) sent it to the catalog.
//!
//! The steps are the same in a legacy session and in a stateless 2026-07-28 request: the
//! request's [`ToolContext`] (its id, progress token, cancellation, log level, the client's
//! capabilities, whose handles it sees), a keyed call of a write tool run through its
//! idempotency receipt, any other call dispatched to the catalog, and one first poll at once
//! (a handler that does not wait is answered without a task or a stream of its own). What a
//! running handler sends goes through one [`Outbound`] with the era's sink: the session's
//! streams, or the stateless request's own reply.
//!
//! What differs stays with each era: a session's bookkeeping, streams and framing
//! (`actor::session`), a stateless request's places, tasks, questions answered on retry and
//! framing (`http::stateless`).

mod outbound;
mod stateless;

use std::sync::Arc;
use std::task::Poll;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub(crate) use self::outbound::{
    GetStream, Opened, Outbound, ServerRequest, SessionLinks, StreamDoor,
};
pub(crate) use self::stateless::{Inputs, StatelessSink};
use crate::actor::ToolDoor;
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{ErrorObject, Reply};
use crate::proto::mcp::LogLevel;
use crate::tools::{BoxFuture, Catalog, Dispatch, ToolContext};

/// A handler that waits: it answers when polled to its end.
pub(crate) type Handler = BoxFuture<Result<Reply, ErrorObject>>;

/// Who sends a request, as its handler sees them.
pub(crate) struct Requester {
    /// The authenticated principal, if any.
    pub(crate) principal: Option<Arc<str>>,
    /// Whose state handles and tasks these are: the principal, or the caller's address.
    pub(crate) owner: Option<Arc<str>>,
    /// The client's capabilities (the session's, or the request's `_meta`).
    pub(crate) capabilities: Arc<Value>,
    /// The level from which log notifications are sent.
    pub(crate) log_level: Option<LogLevel>,
    /// Log notifications may be sent at all (a stateless request that asked for no
    /// `logLevel` gets none).
    pub(crate) logs: bool,
    /// The legacy session's ledger names (a handle created here records them).
    pub(crate) session: Option<Arc<[Arc<str>]>>,
    /// What its lists show (`auth.filter_lists`), when filtered.
    pub(crate) lists: Option<Arc<crate::proto::oauth::ListFilter>>,
}

/// Run a request that its route sends to the catalog: build its context, and dispatch it (a
/// keyed call of a write tool through its receipt, which runs the tool only if the key
/// allows it). `door` is what the tool-call door decided and reserved for it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch(
    catalog: &Arc<Catalog>,
    receipts: &Arc<crate::stores::receipts::Receipts>,
    id: &JsonRpcId,
    method: &str,
    params: Option<&Value>,
    door: ToolDoor,
    requester: Requester,
    cancel: CancellationToken,
    out: Arc<Outbound>,
) -> Dispatch {
    let progress_token = params.and_then(crate::proto::jsonrpc::progress_token).cloned();
    let Requester { principal, owner, capabilities, log_level, logs, session, lists } = requester;
    if let Some(filter) = &lists
        && let Some(Ok(full)) = catalog.list_ref(method, params)
        && let Some(shown) = filter.apply(method, full)
    {
        return Dispatch::Ready(Ok(Reply::Value(shown)));
    }
    let rid = id.clone();
    let keeper = owner.clone();
    let cx = move || {
        let cx =
            ToolContext::new(rid, progress_token, cancel, log_level, capabilities, principal, out)
                .with_owner(owner);
        let cx = match session {
            Some(names) => cx.with_session(names),
            None => cx,
        };
        if logs { cx } else { cx.without_logs() }
    };
    match (door.call, door.place) {
        (Err(e), _) => Dispatch::Ready(Err(e)),
        (Ok(Some(call)), Some(place)) => {
            let (owned, c) = (params.cloned(), Arc::clone(catalog));
            let run = Box::new(move || c.call_tool_kept(owned.as_ref(), cx));
            Dispatch::Pending(receipts.call(call, keeper, place, run))
        }
        (Ok(_), _) => catalog.dispatch(method, params, cx),
    }
}

/// How a request's first poll went.
pub(crate) enum First {
    /// It answered without waiting (or never ran: answered by its route).
    Answered(Result<Reply, ErrorObject>),
    /// It waits: polled on by its era's shell.
    Waits(Handler),
}

/// Poll a dispatched request once, at once, with a waker that does nothing: a handler that
/// finishes without waiting is answered in the same write as anything before it (a session's
/// priming event, a stateless request's one JSON body), or, when it handed something to its
/// stream without waiting for it, behind that. One that waits has sent nothing yet (its first
/// send is still pending), so ordering is kept when its shell polls it on.
pub(crate) fn first_poll(dispatch: Dispatch) -> First {
    match dispatch {
        Dispatch::Ready(r) => First::Answered(r),
        Dispatch::Pending(mut fut) => {
            match fut.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
                Poll::Ready(r) => First::Answered(r),
                Poll::Pending => First::Waits(fut),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::tools::ToolOutbound;

    fn waker_poll<T>(f: &mut BoxFuture<T>) -> Poll<T> {
        f.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn a_handler_that_does_not_wait_is_answered_by_the_first_poll_and_one_that_waits_is_handed_back()
     {
        assert!(matches!(first_poll(Dispatch::Ready(Ok(json!(1).into()))), First::Answered(Ok(_))));
        let at_once: Handler = Box::pin(async { Ok(json!(2).into()) });
        assert!(
            matches!(first_poll(Dispatch::Pending(at_once)), First::Answered(Ok(v)) if v == json!(2))
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<Value>();
        let waits: Handler = Box::pin(async move { Ok(rx.await.unwrap_or_default().into()) });
        let First::Waits(mut fut) = first_poll(Dispatch::Pending(waits)) else {
            panic!("a handler that waits must be handed back")
        };
        tx.send(json!(3)).unwrap();
        assert!(matches!(waker_poll(&mut fut), Poll::Ready(Ok(v)) if v == json!(3)));
    }

    const KEY: [u8; 32] = [7; 32];

    fn stateless(params: &Value) -> Outbound {
        let inputs = Inputs::of(&[KEY], 60_000, Some("alice"), "tools/call", Some(params)).unwrap();
        Outbound::Stateless(Arc::new(StatelessSink::new(true, inputs, false)))
    }

    fn sink(out: &Outbound) -> &StatelessSink {
        match out {
            Outbound::Stateless(s) => s,
            Outbound::Session { .. } => panic!("a stateless outbound"),
        }
    }

    #[test]
    fn a_kept_call_is_made_a_value_and_a_sent_one_text() {
        let spec = crate::tools::ToolSpec::new("t", "a tool", json!({"type": "object"}));
        let c = Catalog::builder()
            .tool(crate::tools::tool_fn(spec, |_, _| async {
                Ok(crate::tools::CallToolResult::text("x"))
            }))
            .build(crate::tools::ServerInfo {
                name: "t".into(),
                version: "0".into(),
                instructions: None,
            })
            .unwrap();
        let params = json!({"name": "t", "arguments": {}});
        let cx = || {
            ToolContext::new(
                JsonRpcId::Number(1),
                None,
                CancellationToken::new(),
                None,
                Arc::new(json!({})),
                None,
                Arc::new(stateless(&params)),
            )
        };
        let answer = |d: Dispatch| match d {
            Dispatch::Ready(r) => r.unwrap(),
            Dispatch::Pending(mut f) => match waker_poll(&mut f) {
                Poll::Ready(r) => r.unwrap(),
                Poll::Pending => panic!("the tool answers at once"),
            },
        };
        let kept = answer(c.call_tool_kept(Some(&params), cx));
        let sent = answer(c.dispatch_uncaught("tools/call", Some(&params), cx));
        assert!(matches!(kept, Reply::Value(_)));
        assert!(matches!(sent, Reply::Raw(_)));
        assert!(sent == kept.into_value().unwrap());
    }

    #[test]
    fn a_stateless_question_without_an_answer_waits_and_is_sealed_into_input_required() {
        let params = json!({"name": "t", "arguments": {}});
        let out = stateless(&params);
        assert!(out.modern());
        let mut q = out.input("color", "roots/list", json!({}));
        assert!(waker_poll(&mut q).is_pending(), "never answered in this run");
        assert!(!sink(&out).asked_nothing());
        let r =
            sink(&out).input_required(&KEY, Some("alice"), "tools/call", Some(&params)).unwrap();
        assert_eq!(r["resultType"], "input_required");
        assert_eq!(r["inputRequests"]["color"]["method"], "roots/list");
        // The retry carries the answer: the same question is answered at once, and the next
        // requestState carries it for the rounds after.
        let answer = json!({"roots": []});
        let retry = json!({"name": "t", "arguments": {}, "inputResponses": {"color": answer},
            "requestState": r["requestState"]});
        let out = stateless(&retry);
        let mut q = out.input("color", "roots/list", json!({}));
        assert!(matches!(waker_poll(&mut q), Poll::Ready(Ok(v)) if v == answer));
        assert!(sink(&out).asked_nothing());
        // Another caller cannot use the sealed state.
        let stolen = Inputs::of(&[KEY], 60_000, Some("mallory"), "tools/call", Some(&retry));
        assert!(stolen.is_err());
    }

    #[test]
    fn a_stateless_answer_that_does_not_fit_its_question_is_invalid_params() {
        let params = json!({"name": "t", "arguments": {}, "inputResponses": {"input_1": {"x": 1}}});
        let out = stateless(&params);
        let mut q = out.request("roots/list", json!({}));
        let Poll::Ready(Err(e)) = waker_poll(&mut q) else { panic!("refused at once") };
        assert_eq!(e.code, crate::proto::jsonrpc::code::INVALID_PARAMS);
        assert!(e.message.contains("inputResponses.input_1"), "{}", e.message);
    }

    #[test]
    fn a_stateless_request_that_may_not_ask_is_refused_and_notifications_of_a_json_client_are_dropped()
     {
        let out = Outbound::Stateless(Arc::new(StatelessSink::new(false, Inputs::none(), false)));
        let mut q = out.request("roots/list", json!({}));
        let Poll::Ready(Err(e)) = waker_poll(&mut q) else { panic!("refused at once") };
        assert_eq!(e.code, crate::proto::jsonrpc::code::METHOD_NOT_FOUND);
        let mut n = out.notify(bytes::Bytes::from_static(b"{}"));
        assert!(
            n.as_mut()
                .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
                .is_ready()
        );
        assert!(!sink(&out).has_queued() && sink(&out).open().is_none());
    }

    #[test]
    fn a_stateless_notification_before_the_body_exists_waits_in_its_queue() {
        let out = Outbound::Stateless(Arc::new(StatelessSink::new(true, Inputs::none(), false)));
        let mut n = out.notify(bytes::Bytes::from_static(b"{\"n\":1}"));
        assert!(
            n.as_mut()
                .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
                .is_ready()
        );
        assert!(sink(&out).has_queued());
        let mut rx = sink(&out).take_receiver().expect("the queue was made by the notification");
        assert_eq!(rx.try_recv().unwrap(), bytes::Bytes::from_static(b"{\"n\":1}"));
        sink(&out).close();
        let mut n = out.notify(bytes::Bytes::from_static(b"{}"));
        assert!(
            n.as_mut()
                .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
                .is_ready()
        );
        assert!(rx.try_recv().is_err(), "closed: later notifications are dropped");
    }
}
