//! Where a running request's notifications and questions go: one [`Outbound`] with the
//! era's sink, and for a legacy SSE reply its stream's [`StreamDoor`].

use std::sync::Arc;

use actix::dev::channel::{self, AddressReceiver};
use actix::prelude::*;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::oneshot;

use super::stateless::StatelessSink;
use crate::actor::STREAM_MAILBOX;
use crate::actor::StreamActor;
use crate::actor::links::{Emit, PollClose};
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{ErrorObject, code};
use crate::proto::session::ClientRequestRefused;
use crate::tools::{BoxFuture, ToolOutbound};

/// The [`ToolOutbound`] of one request, in either era.
pub(crate) enum Outbound {
    /// A legacy session's request: its notifications on its own stream (or the session's GET
    /// stream when it is answered as JSON), its questions sent to the client through the
    /// session, which routes the answers.
    Session {
        /// The session's doors for its requests' questions and notifications.
        session: Arc<SessionLinks>,
        /// The request's own stream, when it has one (SSE).
        stream: Option<StreamDoor>,
        /// The request (its questions are related to it).
        origin: JsonRpcId,
    },
    /// A stateless request: its notifications in its own response, its questions answered
    /// from the retry or its task (see [`StatelessSink`]).
    Stateless(Arc<StatelessSink>),
}

/// A session's doors for what its requests send: made once per session and shared by its
/// requests' [`Outbound`]s (an `Arc` clone allocates nothing; a `Recipient` would).
pub(crate) struct SessionLinks {
    /// Questions to the client.
    pub(crate) ask: Recipient<ServerRequest>,
    /// The GET stream, for a notification of a request answered as JSON.
    pub(crate) get_stream: Recipient<GetStream>,
}

/// A server-to-client request from a running tool, to its session.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ServerRequest {
    /// The request it is related to.
    pub(crate) origin: JsonRpcId,
    /// That request's stream, when it has one (else the session's GET stream carries it).
    pub(crate) stream: Option<Addr<StreamActor>>,
    /// The method asked.
    pub(crate) method: String,
    /// Its params.
    pub(crate) params: Value,
    /// Where the client's answer goes.
    pub(crate) reply: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// Where a related notification of a request answered as JSON goes: the session's GET stream,
/// if one is open. The tool then sends to it itself, so a flood waits on the stream's mailbox
/// (backpressure on the tool) instead of piling up unbounded.
#[derive(Message)]
#[rtype(result = "Option<Addr<StreamActor>>")]
pub(crate) struct GetStream;

impl Outbound {
    /// A legacy session's request's door to its own stream, when it has one.
    pub(crate) fn stream_door(&self) -> Option<&StreamDoor> {
        match self {
            Outbound::Session { stream, .. } => stream.as_ref(),
            Outbound::Stateless(_) => None,
        }
    }
}

/// A request's own SSE stream as its tool and its session reach it. The stream actor's
/// mailbox is made only once something needs its address: the tool (a notification, a
/// question or a polling close while its handler runs) or the session, when the request
/// waits. A request answered in its handler's first poll whose tool never used its stream
/// gets none: its session keeps the stream as data (`actor::dormant`). A mailbox and the
/// addresses handed out of it cost about ten allocations an SSE reply.
///
/// Behind a lock: the tool may reach it from any thread while its session opens it; it is
/// held only to read or swap the state, never across an `await`.
pub(crate) struct StreamDoor(parking_lot::Mutex<Door>);

enum Door {
    /// Nothing asked for it yet.
    Unopened,
    /// Made for the tool: its actor is started in this mailbox by the session.
    Made(AddressReceiver<StreamActor>, Addr<StreamActor>),
    /// Its actor runs at this address (or is started there now).
    Open(Addr<StreamActor>),
    /// Kept as data: answered and closed, as a stream actor would drop what comes next.
    Kept,
}

/// Where a request's stream runs, as its session opens it ([`StreamDoor::open`]), with the
/// request's answer when it has one.
pub(crate) enum Opened<T> {
    /// Kept as data (answered at once): no actor, no mailbox.
    Kept(T),
    /// Its actor starts in this new mailbox.
    Fresh(Context<StreamActor>, Option<T>),
    /// Its actor starts in the mailbox its tool made and may have sent to already: an
    /// answer goes behind what is queued there.
    Used(Context<StreamActor>, Option<T>),
}

impl StreamDoor {
    pub(crate) fn new() -> StreamDoor {
        StreamDoor(parking_lot::Mutex::new(Door::Unopened))
    }

    /// The stream's address for its tool, its mailbox made now if nothing made it yet;
    /// `None` once its stream is kept as data (closed).
    fn addr(&self) -> Option<Addr<StreamActor>> {
        let mut door = self.0.lock();
        match &*door {
            Door::Open(a) | Door::Made(_, a) => Some(a.clone()),
            Door::Kept => None,
            Door::Unopened => {
                let (tx, rx) = channel::channel(STREAM_MAILBOX);
                let a = Addr::new(tx);
                *door = Door::Made(rx, a.clone());
                Some(a)
            }
        }
    }

    /// For the session, once the request's handler returned from its first poll: where its
    /// stream runs, with the request's `answer` if it has one; kept as data when `keep` (its
    /// mode allows) and answered at once, which only a stream its tool never used is.
    ///
    /// # Panics
    /// Called a second time for one request (a bug: its session opens it once).
    pub(crate) fn open<T>(&self, answer: Option<T>, keep: bool) -> Opened<T> {
        let mut door = self.0.lock();
        match (std::mem::replace(&mut *door, Door::Kept), answer) {
            (Door::Unopened, Some(answer)) if keep => Opened::Kept(answer),
            (Door::Unopened, answer) => {
                let ctx = Context::new();
                *door = Door::Open(ctx.address());
                Opened::Fresh(ctx, answer)
            }
            (Door::Made(rx, a), answer) => {
                *door = Door::Open(a);
                Opened::Used(Context::with_receiver(rx), answer)
            }
            (Door::Open(_) | Door::Kept, _) => unreachable!("a request's stream is opened once"),
        }
    }
}

impl ToolOutbound for Outbound {
    fn notify(&self, json: Bytes) -> BoxFuture<()> {
        match self {
            Outbound::Session { stream: Some(door), .. } => {
                // Kept as data: closed, so the notification is dropped, as a closed stream
                // drops it.
                let s = door.addr();
                Box::pin(async move {
                    if let Some(s) = s {
                        let _ = s.send(Emit { json, last: false }).await;
                    }
                })
            }
            Outbound::Session { stream: None, session, .. } => {
                let s = Arc::clone(session);
                Box::pin(async move {
                    // No GET stream: there is no connection this notification may use (it
                    // must not go on another request's stream); it is dropped.
                    if let Ok(Some(get)) = s.get_stream.send(GetStream).await {
                        let _ = get.send(Emit { json, last: false }).await;
                    }
                })
            }
            Outbound::Stateless(sink) => sink.notify(json),
        }
    }

    fn request(&self, method: &str, params: Value) -> BoxFuture<Result<Value, ErrorObject>> {
        match self {
            Outbound::Session { session, stream, origin } => {
                // Its stream kept as data: its request was answered (a tool that kept its
                // context asks after its answer), as the session would say.
                let stream = match stream.as_ref().map(StreamDoor::addr) {
                    Some(None) => {
                        let ended = ClientRequestRefused::OriginEnded.message();
                        return Box::pin(async move {
                            Err(ErrorObject::new(code::INTERNAL_ERROR, ended))
                        });
                    }
                    own => own.flatten(),
                };
                let (tx, rx) = oneshot::channel();
                let msg = ServerRequest {
                    origin: origin.clone(),
                    stream,
                    method: method.to_owned(),
                    params,
                    reply: tx,
                };
                let session = Arc::clone(session);
                Box::pin(async move {
                    session
                        .ask
                        .send(msg)
                        .await
                        .map_err(|_| ErrorObject::new(code::INTERNAL_ERROR, "session ended"))?;
                    rx.await.unwrap_or_else(|_| {
                        Err(ErrorObject::new(
                            code::INTERNAL_ERROR,
                            "session ended before the client answered",
                        ))
                    })
                })
            }
            Outbound::Stateless(sink) => sink.request(method, params),
        }
    }

    fn input(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> BoxFuture<Result<Value, ErrorObject>> {
        match self {
            // Sent at once: the key is not used.
            Outbound::Session { .. } => self.request(method, params),
            Outbound::Stateless(sink) => sink.input(key, method, params),
        }
    }

    fn close_for_polling(&self) -> BoxFuture<()> {
        match self {
            Outbound::Session { stream: Some(door), .. } => {
                let s = door.addr();
                Box::pin(async move {
                    if let Some(s) = s {
                        let _ = s.send(PollClose).await;
                    }
                })
            }
            // Stateless streams are not resumable: there is nothing to poll.
            Outbound::Session { stream: None, .. } | Outbound::Stateless(_) => Box::pin(async {}),
        }
    }

    fn modern(&self) -> bool {
        matches!(self, Outbound::Stateless(_))
    }

    fn continue_as_task(&self) -> BoxFuture<()> {
        match self {
            Outbound::Stateless(sink) => sink.continue_as_task(),
            Outbound::Session { .. } => Box::pin(async {}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_answered_at_once_that_its_tool_never_used_gets_no_mailbox() {
        let door = StreamDoor::new();
        assert!(
            matches!(door.open(Some(()), true), Opened::Kept(())),
            "kept as data: nothing to start"
        );
        assert!(door.addr().is_none(), "closed: what its tool sends later is dropped");
    }

    #[test]
    fn a_waiting_request_gets_its_mailbox_from_its_session_and_its_tool_the_same_address() {
        let door = StreamDoor::new();
        let Opened::Fresh(ctx, None) = door.open(None::<()>, true) else {
            panic!("it waits: a new mailbox")
        };
        assert!(door.addr() == Some(ctx.address()), "the tool sends to the actor started");
    }

    #[test]
    fn a_stream_its_tool_used_first_runs_in_the_mailbox_its_tool_sends_to() {
        for keep in [true, false] {
            let door = StreamDoor::new();
            let addr = door.addr().expect("made for the tool");
            assert!(door.addr() == Some(addr.clone()), "one mailbox");
            let Opened::Used(ctx, Some(())) = door.open(Some(()), keep) else {
                panic!("used: never kept as data, its answer handed back")
            };
            assert!(ctx.address() == addr, "what the tool sent before waits there");
            assert!(door.addr() == Some(addr));
        }
    }

    /// A session that is never asked anything (a question reaching it fails the test).
    struct Unasked;
    impl Actor for Unasked {
        type Context = Context<Self>;
    }
    impl Handler<ServerRequest> for Unasked {
        type Result = ();
        fn handle(&mut self, _: ServerRequest, _: &mut Context<Self>) {
            panic!("a question of a request kept as data reached its session");
        }
    }
    impl Handler<GetStream> for Unasked {
        type Result = Option<Addr<StreamActor>>;
        fn handle(&mut self, _: GetStream, _: &mut Context<Self>) -> Self::Result {
            None
        }
    }

    #[actix_web::test]
    async fn a_question_after_its_stream_was_kept_as_data_is_refused_without_asking() {
        let session = Unasked.start();
        let out = Outbound::Session {
            session: Arc::new(SessionLinks {
                ask: session.clone().recipient(),
                get_stream: session.recipient(),
            }),
            stream: Some(StreamDoor::new()),
            origin: JsonRpcId::Number(1),
        };
        assert!(matches!(
            out.stream_door().map(|d| d.open(Some(()), true)),
            Some(Opened::Kept(()))
        ));
        let e = out.request("sampling/createMessage", Value::Null).await.unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (code::INTERNAL_ERROR, "the originating request is no longer running")
        );
        out.notify(Bytes::from_static(b"{}")).await;
    }

    #[test]
    fn a_tool_sees_one_mailbox_whichever_thread_reaches_its_door_first() {
        for _ in 0..50 {
            let door = Arc::new(StreamDoor::new());
            let tool = std::thread::spawn({
                let door = Arc::clone(&door);
                move || door.addr()
            });
            let opened = door.open(Some(()), true);
            let sent_to = tool.join().expect("the tool's thread");
            match opened {
                // Before the tool: kept, and the tool finds it closed.
                Opened::Kept(()) => assert!(sent_to.is_none()),
                Opened::Used(ctx, _) => assert!(sent_to == Some(ctx.address())),
                Opened::Fresh(..) => panic!("answered at once: never a new mailbox"),
            }
        }
    }
}
