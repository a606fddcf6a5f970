//! Where a running request's notifications and questions go: one [`Outbound`] with the
//! era's sink.

use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::oneshot;

use super::stateless::StatelessSink;
use crate::actor::StreamActor;
use crate::actor::links::{Emit, PollClose};
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{ErrorObject, code};
use crate::tools::{BoxFuture, ToolOutbound};

/// The [`ToolOutbound`] of one request, in either era.
pub(crate) enum Outbound {
    /// A legacy session's request: its notifications on its own stream (or the session's GET
    /// stream when it is answered as JSON), its questions sent to the client through the
    /// session, which routes the answers.
    Session {
        /// The session's doors for its requests' questions and notifications.
        session: Arc<SessionLinks>,
        /// The request's own stream, when it has one.
        stream: Option<Addr<StreamActor>>,
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

impl ToolOutbound for Outbound {
    fn notify(&self, json: Bytes) -> BoxFuture<()> {
        match self {
            Outbound::Session { stream: Some(s), .. } => {
                let s = s.clone();
                Box::pin(async move {
                    let _ = s.send(Emit { json, last: false }).await;
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
                let (tx, rx) = oneshot::channel();
                let msg = ServerRequest {
                    origin: origin.clone(),
                    stream: stream.clone(),
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
            Outbound::Session { stream: Some(s), .. } => {
                let s = s.clone();
                Box::pin(async move {
                    let _ = s.send(PollClose).await;
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
