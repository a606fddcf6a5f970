//! One actor per legacy session: drives a [`SessionCore`], runs requests as futures in its
//! own context (so completion and cancellation are serialized with everything else the
//! session does), and routes server-to-client requests and their answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::body::SseBody;
use super::registry::RegistryGuard;
use super::stream::{Attach, Close, Emit, PollClose, Shutdown as StreamShutdown, StreamActor};
use super::supervisor::Supervisor;
use crate::proto::admission::ReplyMode;
use crate::proto::error::Rejection;
use crate::proto::event_id::{CursorSigner, EventId};
use crate::proto::ids::{Generation, JsonRpcId, SessionId, StreamId};
use crate::proto::jsonrpc::{ErrorObject, Incoming, Message, code, encode_error, encode_request, encode_result};
use crate::proto::mcp::{LogLevel, method};
use crate::proto::replay::WindowLimits;
use crate::proto::session::{SessionCore, SessionLimits};
use crate::proto::stream::{CloseReason, StreamCore, StreamKind, StreamSettings};
use crate::proto::version::ProtocolVersion;
use crate::tools::{BoxFuture, Dispatch, ToolContext, ToolOutbound};

/// Shell data of an in-flight request.
#[derive(Debug)]
pub(crate) struct RequestTask {
    spawn: Option<SpawnHandle>,
    cancel: CancellationToken,
    json: Option<oneshot::Sender<Bytes>>,
}

struct PendingServerRequest {
    origin: JsonRpcId,
    reply: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// The session actor.
pub struct SessionActor {
    core: SessionCore<RequestTask, Addr<StreamActor>>,
    signer: Arc<CursorSigner>,
    settings: StreamSettings,
    client_caps: Arc<Value>,
    sup: Arc<Supervisor>,
    pending: HashMap<JsonRpcId, PendingServerRequest>,
    /// Deregisters the session when dropped: taken explicitly before a DELETE or expiry is
    /// acknowledged, and dropped with the actor on every other exit path.
    guard: Option<RegistryGuard>,
}

/// What a POST produced.
#[derive(Debug)]
pub enum PostOutcome {
    /// Notification(s) or response(s) only: 202.
    Accepted,
    /// A JSON reply; the sender is dropped if the request is cancelled.
    Json(oneshot::Receiver<Bytes>),
    /// An SSE reply.
    Sse(SseBody),
    /// A 2025-03-26 batch: one JSON reply per request, in order.
    Batch(Vec<oneshot::Receiver<Bytes>>),
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
}

/// Open a new standalone GET stream (replacing any previous one).
#[derive(Message)]
#[rtype(result = "()")]
pub struct OpenGet {
    /// Where the body goes.
    pub reply: oneshot::Sender<Result<SseBody, Rejection>>,
}

/// Resume the stream named by a verified cursor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Resume {
    /// The verified cursor.
    pub event: EventId,
    /// Where the body goes.
    pub reply: oneshot::Sender<Result<SseBody, Rejection>>,
}

/// End the session (HTTP DELETE).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Delete {
    /// Acknowledgement.
    pub reply: oneshot::Sender<Result<(), Rejection>>,
}

/// Stop the session (process shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Shutdown;

/// Reports from this session's stream actors.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) enum StreamEvent {
    /// A connection attached to one of the streams.
    Attached,
    /// A connection's body was dropped.
    DetachedConn,
    /// The stream produced its last event.
    Closed(StreamId),
    /// The stream's retention ended; it stopped.
    Gone(StreamId),
}

/// A server-to-client request from a running tool.
#[derive(Message)]
#[rtype(result = "()")]
struct ServerRequest {
    origin: JsonRpcId,
    stream: Option<Addr<StreamActor>>,
    method: String,
    params: Value,
    reply: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// A related notification from a request answered as JSON: goes to the GET stream.
#[derive(Message)]
#[rtype(result = "()")]
struct NotifyGet(Bytes);

impl Actor for SessionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.sup.config().session_mailbox);
        let ttl = self.sup.config().session_idle_ttl_ms;
        let every = Duration::from_millis((ttl / 4).clamp(10, 30_000));
        ctx.run_interval(every, |act, ctx| {
            if act.core.handle_timeout(act.sup.now()) {
                tracing::debug!(session = %act.log_id(), "session expired");
                act.guard.take();
                ctx.stop();
            }
        });
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.guard.take();
        let (requests, streams) = self.core.terminate();
        for (_, r) in requests {
            r.handle.cancel.cancel();
        }
        for s in streams {
            s.handle.do_send(StreamShutdown(CloseReason::SessionEnded));
        }
        self.pending.clear();
    }
}

impl SessionActor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: SessionId,
        principal: Option<Arc<str>>,
        version: ProtocolVersion,
        generation: Generation,
        signer: Arc<CursorSigner>,
        client_caps: Value,
        sup: Arc<Supervisor>,
        guard: RegistryGuard,
    ) -> SessionActor {
        let cfg = sup.config();
        let limits = SessionLimits {
            idle_ttl_ms: cfg.session_idle_ttl_ms,
            max_in_flight: cfg.max_in_flight_per_session,
            max_retained_streams: cfg.max_retained_streams_per_session,
        };
        let settings = StreamSettings {
            window: WindowLimits { max_events: cfg.replay_max_events, max_bytes: cfg.replay_max_bytes },
            prime: cfg.prime_streams && version.primes_streams(),
            retry_ms: cfg.retry_ms,
        };
        SessionActor {
            core: SessionCore::new(id, principal, version, generation, limits, sup.now()),
            signer,
            settings,
            client_caps: Arc::new(client_caps),
            sup,
            pending: HashMap::new(),
            guard: Some(guard),
        }
    }

    /// A short, non-secret tag for logs (never the session id itself).
    fn log_id(&self) -> String {
        let id = self.core.id().as_str();
        format!("{}…", &id[..id.len().min(6)])
    }

    /// Start the stream registered under `sid` in `sctx`; `final_json` when its request is
    /// already answered.
    fn start_stream(&mut self, sctx: Context<StreamActor>, sid: StreamId, kind: StreamKind, final_json: Option<Bytes>, ctx: &mut Context<Self>) -> SseBody {
        let core = StreamCore::new(sid, self.core.generation(), kind, (*self.signer).clone(), self.settings.clone());
        self.core.connection_delta(self.sup.now(), true);
        let closed = final_json.is_some();
        let body = StreamActor::start_in(sctx, core, final_json.as_deref(), ctx.address().downgrade(), Arc::clone(self.sup.config()));
        if closed {
            for evicted in self.core.stream_closed(sid) {
                evicted.handle.do_send(StreamShutdown(CloseReason::SessionEnded));
            }
        }
        body
    }

    fn on_message(&mut self, m: Message, mode: ReplyMode, ctx: &mut Context<Self>) -> Result<PostOutcome, Rejection> {
        match m {
            Message::Request { id, method, params } => self.start_request(id, method, params, mode, ctx),
            Message::Notification { method, params } => {
                self.on_notification(&method, params.as_ref(), ctx);
                Ok(PostOutcome::Accepted)
            }
            Message::Response { id, result } => {
                if let Some(p) = self.pending.remove(&id) {
                    let _ = p.reply.send(Ok(result));
                }
                Ok(PostOutcome::Accepted)
            }
            Message::ErrorResponse { id, error } => {
                if let Some(p) = id.and_then(|id| self.pending.remove(&id)) {
                    let _ = p.reply.send(Err(error));
                }
                Ok(PostOutcome::Accepted)
            }
        }
    }

    fn on_notification(&mut self, method: &str, params: Option<&Value>, ctx: &mut Context<Self>) {
        if method == method::CANCELLED {
            let id = params.and_then(|p| p.get("requestId")).and_then(JsonRpcId::from_value);
            if let Some(id) = id {
                self.cancel(&id, ctx);
            }
        }
        // notifications/initialized, roots/list_changed and unknown notifications need no
        // action from this server.
    }

    fn cancel(&mut self, id: &JsonRpcId, ctx: &mut Context<Self>) {
        let Some(task) = self.core.end_request(id, self.sup.now()) else { return };
        task.handle.cancel.cancel();
        if let Some(h) = task.handle.spawn {
            ctx.cancel_future(h);
        }
        if let Some(s) = task.stream.and_then(|sid| self.core.stream(sid)) {
            s.handle.do_send(Close(CloseReason::Cancelled));
        }
        self.pending.retain(|_, p| p.origin != *id);
    }

    fn start_request(&mut self, id: JsonRpcId, method: String, params: Option<Value>, mode: ReplyMode, ctx: &mut Context<Self>) -> Result<PostOutcome, Rejection> {
        let cancel = CancellationToken::new();
        self.core.begin_request(&id, RequestTask { spawn: None, cancel: cancel.clone(), json: None })?;
        // The stream's address exists before the stream starts, so the handler can be run
        // first and an immediate answer can share the priming event's write.
        let (stream, json_reply) = match mode {
            ReplyMode::Sse => {
                let sctx = Context::<StreamActor>::new();
                let addr = sctx.address();
                let sid = self.core.open_post_stream(&id, addr.clone());
                (Some((sctx, sid, addr)), None)
            }
            ReplyMode::Json => {
                let (tx, rx) = oneshot::channel();
                if let Some(f) = self.core.in_flight_mut(&id) {
                    f.handle.json = Some(tx);
                }
                (None, Some(rx))
            }
        };
        let stream_addr = stream.as_ref().map(|(_, _, a)| a.clone());
        let dispatch = match method.as_str() {
            method::PING => Dispatch::Ready(Ok(json!({}))),
            method::SET_LEVEL => Dispatch::Ready(self.set_level(params.as_ref())),
            "resources/subscribe" | "resources/unsubscribe" => Dispatch::Ready(self.subscription(&method, params.as_ref())),
            method::INITIALIZE => Dispatch::Ready(Err(ErrorObject::new(code::INVALID_REQUEST, "session already initialized"))),
            _ => {
                let progress_token = params.as_ref().and_then(|p| p.pointer("/_meta/progressToken")).cloned();
                let out: Arc<dyn ToolOutbound> = Arc::new(Outbound { session: ctx.address(), stream: stream_addr, origin: id.clone() });
                let log_level = self.core.log_level();
                let caps = Arc::clone(&self.client_caps);
                let catalog = Arc::clone(self.sup.catalog());
                let rid = id.clone();
                catalog.dispatch(&method, params.as_ref(), move || ToolContext::new(rid, progress_token, cancel, log_level, caps, out))
            }
        };
        let done = match dispatch {
            Dispatch::Ready(r) => Some(r),
            Dispatch::Pending(mut fut) => {
                // One poll now: a handler that finishes without waiting answers in the same
                // write as the priming event. One that waits has sent nothing yet (its first
                // send is still pending), so ordering is kept; it runs on in this context.
                match fut.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
                    std::task::Poll::Ready(r) => Some(r),
                    std::task::Poll::Pending => {
                        let rid = id.clone();
                        let h = ctx.spawn(fut.into_actor(self).map(move |r, act, _| act.complete(&rid, r)));
                        if let Some(f) = self.core.in_flight_mut(&id) {
                            f.handle.spawn = Some(h);
                        }
                        None
                    }
                }
            }
        };
        match (stream, json_reply) {
            (Some((sctx, sid, _)), _) => {
                let final_json = done.and_then(|r| self.take_response(&id, r).map(|(bytes, _, _)| bytes));
                Ok(PostOutcome::Sse(self.start_stream(sctx, sid, StreamKind::Post { request: id }, final_json, ctx)))
            }
            (None, Some(rx)) => {
                if let Some(r) = done {
                    self.complete(&id, r);
                }
                Ok(PostOutcome::Json(rx))
            }
            (None, None) => Err(Rejection::Internal),
        }
    }

    fn set_level(&mut self, params: Option<&Value>) -> Result<Value, ErrorObject> {
        let level = params
            .and_then(|p| p.get("level"))
            .and_then(Value::as_str)
            .and_then(LogLevel::parse)
            .ok_or_else(|| ErrorObject::new(code::INVALID_PARAMS, "level must be one of debug, info, notice, warning, error, critical, alert, emergency"))?;
        self.core.set_log_level(level);
        Ok(json!({}))
    }

    /// `resources/subscribe` and `resources/unsubscribe`. Only known resources can be
    /// subscribed to; no resource of ours changes yet, so nothing is recorded to notify.
    fn subscription(&self, method: &str, params: Option<&Value>) -> Result<Value, ErrorObject> {
        let uri = params
            .and_then(|p| p.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorObject::new(code::INVALID_PARAMS, "missing string parameter \"uri\""))?;
        if method == "resources/subscribe" && !self.sup.catalog().has_resource(uri) {
            return Err(ErrorObject::new(code::RESOURCE_NOT_FOUND, "Resource not found").with_data(json!({"uri": uri})));
        }
        Ok(json!({}))
    }

    /// A request finished: forget it and encode its response. `None` when it was cancelled
    /// (nothing is sent then). Also returns the task, for its reply route.
    fn take_response(&mut self, id: &JsonRpcId, r: Result<Value, ErrorObject>) -> Option<(Bytes, RequestTask, Option<StreamId>)> {
        let task = self.core.end_request(id, self.sup.now())?;
        if !self.pending.is_empty() {
            self.pending.retain(|_, p| p.origin != *id);
        }
        let bytes = match r {
            Ok(v) => encode_result(id, &v),
            Err(e) => encode_error(Some(id), &e),
        };
        Some((bytes, task.handle, task.stream))
    }

    /// A spawned request finished: send its response on its own stream (or JSON reply),
    /// unless it was cancelled.
    fn complete(&mut self, id: &JsonRpcId, r: Result<Value, ErrorObject>) {
        let Some((bytes, task, stream)) = self.take_response(id, r) else { return };
        if let Some(tx) = task.json {
            let _ = tx.send(bytes);
        } else if let Some(s) = stream.and_then(|sid| self.core.stream(sid)) {
            // At most one final per stream; do_send so a busy stream never loses a response.
            s.handle.do_send(Emit { json: bytes, last: true });
        }
    }
}

impl Handler<Post> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Post, ctx: &mut Context<Self>) {
        self.core.touch(self.sup.now());
        let r = self.core.check_active().and_then(|()| match msg.incoming {
            Incoming::Single(m) => self.on_message(m, msg.reply_mode, ctx),
            Incoming::Batch(items) => {
                if !self.core.version().allows_batches() {
                    return Err(Rejection::InvalidMessage {
                        reason: format!("JSON-RPC batches are not allowed in protocol {}", self.core.version().as_str()),
                        id: None,
                    });
                }
                let mut replies = Vec::new();
                for m in items {
                    let is_request = m.is_request();
                    let id = if let Message::Request { id, .. } = &m { Some(id.clone()) } else { None };
                    match self.on_message(m, ReplyMode::Json, ctx) {
                        Ok(PostOutcome::Json(rx)) => replies.push(rx),
                        Ok(_) => {}
                        Err(rej) if is_request => {
                            // Answer this request in the batch with its own error.
                            let (tx, rx) = oneshot::channel();
                            let _ = tx.send(encode_error(id.as_ref(), &rej.to_error_object()));
                            replies.push(rx);
                        }
                        Err(_) => {}
                    }
                }
                Ok(if replies.is_empty() { PostOutcome::Accepted } else { PostOutcome::Batch(replies) })
            }
        });
        let _ = msg.reply.send(r);
    }
}

impl Handler<OpenGet> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: OpenGet, ctx: &mut Context<Self>) {
        self.core.touch(self.sup.now());
        let r = self.core.check_active().map(|()| {
            let sctx = Context::<StreamActor>::new();
            let (sid, replaced) = self.core.open_get_stream(sctx.address());
            if let Some(old) = replaced {
                old.handle.do_send(StreamShutdown(CloseReason::Replaced));
            }
            self.start_stream(sctx, sid, StreamKind::Get, None, ctx)
        });
        let _ = msg.reply.send(r);
    }
}

impl Handler<Resume> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Resume, _: &mut Context<Self>) {
        self.core.touch(self.sup.now());
        if let Err(e) = self.core.check_active() {
            let _ = msg.reply.send(Err(e));
            return;
        }
        if msg.event.generation != self.core.generation() {
            let _ = msg.reply.send(Err(Rejection::CursorRejected));
            return;
        }
        let Some(entry) = self.core.stream(msg.event.stream) else {
            tracing::debug!(session = %self.log_id(), stream = %msg.event.stream, "resume of a stream no longer retained");
            let _ = msg.reply.send(Err(Rejection::EventsLost));
            return;
        };
        match entry.handle.try_send(Attach { after: msg.event.seq, reply: msg.reply }) {
            Ok(()) => {}
            Err(SendError::Full(m)) => {
                let _ = m.reply.send(Err(Rejection::Overloaded { retry_after_s: 1 }));
            }
            // Its retention just ended and the `Gone` report is still on its way.
            Err(SendError::Closed(m)) => {
                tracing::debug!(session = %self.log_id(), stream = %msg.event.stream, "resume of a stream whose retention just ended");
                let _ = m.reply.send(Err(Rejection::EventsLost));
            }
        }
    }
}

impl Handler<Delete> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: Delete, ctx: &mut Context<Self>) {
        let r = self.core.request_delete();
        if r.is_ok() {
            // Gone from the registry before the client hears "deleted".
            self.guard.take();
            ctx.stop();
        }
        let _ = msg.reply.send(r);
    }
}

impl Handler<Shutdown> for SessionActor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Handler<StreamEvent> for SessionActor {
    type Result = ();

    fn handle(&mut self, ev: StreamEvent, _: &mut Context<Self>) {
        let now = self.sup.now();
        match ev {
            StreamEvent::Attached => self.core.connection_delta(now, true),
            StreamEvent::DetachedConn => self.core.connection_delta(now, false),
            StreamEvent::Closed(sid) => {
                for evicted in self.core.stream_closed(sid) {
                    tracing::debug!(session = %self.log_id(), "closed stream evicted by max_retained_streams");
                    evicted.handle.do_send(StreamShutdown(CloseReason::SessionEnded));
                }
            }
            StreamEvent::Gone(sid) => {
                tracing::debug!(session = %self.log_id(), stream = %sid, "stream retention ended");
                self.core.remove_stream(sid);
            }
        }
    }
}

impl Handler<ServerRequest> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: ServerRequest, _: &mut Context<Self>) {
        if self.core.in_flight_mut(&msg.origin).is_none() {
            let _ = msg.reply.send(Err(ErrorObject::new(code::INTERNAL_ERROR, "the originating request is no longer running")));
            return;
        }
        let target = msg.stream.or_else(|| self.core.get_stream().map(|(_, a)| a.clone()));
        let Some(target) = target else {
            let _ = msg.reply.send(Err(ErrorObject::new(
                code::INTERNAL_ERROR,
                "no stream to carry a server-to-client request: accept text/event-stream or open a GET stream",
            )));
            return;
        };
        let id = self.core.next_server_request_id();
        target.do_send(Emit { json: encode_request(&id, &msg.method, Some(&msg.params)), last: false });
        self.pending.insert(id, PendingServerRequest { origin: msg.origin, reply: msg.reply });
    }
}

impl Handler<NotifyGet> for SessionActor {
    type Result = ();

    fn handle(&mut self, msg: NotifyGet, _: &mut Context<Self>) {
        if let Some((_, s)) = self.core.get_stream() {
            s.do_send(Emit { json: msg.0, last: false });
        }
        // No GET stream: there is no connection this notification may use (it must not go
        // on another request's stream); it is dropped.
    }
}

/// [`ToolOutbound`] of one request: its stream when it has one, else the session's GET
/// stream.
struct Outbound {
    session: Addr<SessionActor>,
    stream: Option<Addr<StreamActor>>,
    origin: JsonRpcId,
}

impl ToolOutbound for Outbound {
    fn notify(&self, json: Bytes) -> BoxFuture<()> {
        match &self.stream {
            Some(s) => {
                let s = s.clone();
                Box::pin(async move {
                    let _ = s.send(Emit { json, last: false }).await;
                })
            }
            None => {
                let s = self.session.clone();
                Box::pin(async move {
                    let _ = s.send(NotifyGet(json)).await;
                })
            }
        }
    }

    fn request(&self, method: &str, params: Value) -> BoxFuture<Result<Value, ErrorObject>> {
        let (tx, rx) = oneshot::channel();
        let msg = ServerRequest { origin: self.origin.clone(), stream: self.stream.clone(), method: method.to_owned(), params, reply: tx };
        let session = self.session.clone();
        Box::pin(async move {
            session.send(msg).await.map_err(|_| ErrorObject::new(code::INTERNAL_ERROR, "session ended"))?;
            rx.await.unwrap_or_else(|_| Err(ErrorObject::new(code::INTERNAL_ERROR, "session ended before the client answered")))
        })
    }

    fn close_for_polling(&self) -> BoxFuture<()> {
        let s = self.stream.clone();
        Box::pin(async move {
            if let Some(s) = s {
                let _ = s.send(PollClose).await;
            }
        })
    }
}
