//! A session's messages: requests routed (`proto::route`) and run through the request
//! pipeline, notifications, cancellation, responses, and the completion of a request.

use std::sync::Arc;

use actix::prelude::*;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::actor::generations::{Counted, GenCount};
use crate::actor::lifecycle::Phase;
use crate::actor::stream::{Close, Emit, StreamActor};
use crate::pipeline::{self, First, Outbound, Requester, StreamDoor};
use crate::proto::admission::ReplyMode;
use crate::proto::error::{Overload, Rejection};
use crate::proto::ids::{JsonRpcId, StreamId};
use crate::proto::jsonrpc::{ErrorObject, Message, Reply, code, encode_error, encode_reply};
use crate::proto::mcp::{LogLevel, method};
use crate::proto::rollout::StreamMode;
use crate::proto::route::{Era, Route};
use crate::proto::stream::CloseReason;
use crate::tools::Dispatch;

use super::messages::PostOutcome;
use super::{RequestTask, SessionActor};

/// What a request brings besides its message: its share of the request memory budget, and
/// what its caller's lists show (`auth.filter_lists`).
pub(super) struct Carried {
    pub(super) charge: Option<crate::stats::RequestCharge>,
    pub(super) lists: Option<std::sync::Arc<crate::proto::oauth::ListFilter>>,
}

impl SessionActor {
    pub(super) fn on_message(
        &mut self,
        m: Message,
        mode: ReplyMode,
        carried: Carried,
        ctx: &mut Context<Self>,
    ) -> Result<PostOutcome, Rejection> {
        match m {
            // Admitted before a drain began and queued here since: the phase is read now.
            Message::Request { .. } if self.sup.phase() != Phase::Serving => {
                Err(Rejection::Overloaded(Overload::Draining))
            }
            Message::Request { id, method, params, .. } => {
                self.start_request(id, method, params, mode, carried, ctx)
            }
            Message::Notification { method, params, .. } => {
                self.on_notification(&method, params.as_ref(), ctx);
                Ok(PostOutcome::Accepted)
            }
            Message::Response { id, result } => Ok(self.client_answered(&id, Ok(result), ctx)),
            Message::ErrorResponse { id, error } => Ok(match id {
                Some(id) => self.client_answered(&id, Err(error), ctx),
                None => PostOutcome::Accepted,
            }),
        }
    }

    pub(super) fn on_notification(
        &mut self,
        method: &str,
        params: Option<&Value>,
        ctx: &mut Context<Self>,
    ) {
        if method == method::CANCELLED {
            let id = params.and_then(|p| p.get("requestId")).and_then(JsonRpcId::from_value);
            if let Some(id) = id {
                self.cancel(&id, ctx);
            }
        }
        // notifications/initialized, roots/list_changed and unknown notifications need no
        // action from this server.
    }

    /// The client answered server-to-client request `id`: the request waiting for it here
    /// gets the answer. One this session does not wait for may be another host's (a shared
    /// ledger): the host whose request asked is looked up, and the answer relayed to it, or
    /// refused as [`Rejection::AskerGone`] once that host is known to have stopped.
    pub(super) fn client_answered(
        &mut self,
        id: &JsonRpcId,
        answer: Result<Value, ErrorObject>,
        ctx: &mut Context<Self>,
    ) -> PostOutcome {
        if let Some(p) = self.core.answer_client_request(id) {
            let _ = p.handle.reply.send(answer);
            return PostOutcome::Accepted;
        }
        if !self.ledger.ledger.shared {
            return PostOutcome::Accepted;
        }
        let message = match answer {
            Ok(result) => json!({"id": id.to_value(), "result": result}),
            Err(error) => json!({"id": id.to_value(), "error": error}),
        };
        let (tx, rx) = oneshot::channel();
        let id_text = id.to_value().to_string();
        let key = crate::ledger::codec::question_key(&self.meta.hmac, &id_text);
        let (reads, run, now) =
            (Arc::clone(&self.ledger.ledger.reads), self.ledger.ledger.run, self.sup.now().0);
        // Gone only when the asker's run is known and its lease has lapsed; a failed or busy
        // read relays (as an unknown asker does: it may be a live host's).
        let look = async move {
            reads
                .run(move |store| match store.get(&key, now)? {
                    Some(v) => match std::str::from_utf8(&v).ok().and_then(|r| r.parse().ok()) {
                        Some(asker) if asker == run => Ok(Asker::Here),
                        Some(asker) => Ok(if store.run_alive(asker, &key)? {
                            Asker::Live
                        } else {
                            Asker::Gone
                        }),
                        None => Ok(Asker::Unknown),
                    },
                    None => Ok(Asker::Unknown),
                })
                .await
        };
        ctx.spawn(look.into_actor(self).map(move |asker, act, _| match asker {
            Ok(Asker::Gone) => {
                let _ = tx.send(Err(Rejection::AskerGone));
            }
            // Kept only for a question another live host recorded before asking: a client
            // cannot make the ledger keep answers nobody asked for.
            Ok(Asker::Live) => {
                act.relay_answer(&id_text, message);
                let _ = tx.send(Ok(()));
            }
            // This host asked, and its session no longer waits (answered, timed out, its
            // request over): no other host waits either.
            Ok(Asker::Here) => {
                let _ = tx.send(Ok(()));
            }
            Ok(Asker::Unknown) | Err(_) => {
                act.relay(message);
                let _ = tx.send(Ok(()));
            }
        }));
        PostOutcome::Relayed(rx)
    }

    /// Relayed answers may have been missed (a cut subscription): read the ones kept for the
    /// questions still waiting here ([`Self::relay_answer`]) and hand each to its request.
    pub(super) fn recheck_answers(&mut self, ctx: &mut Context<Self>) {
        let waiting = self.core.client_requests_waiting();
        if waiting.is_empty() {
            return;
        }
        let keys: Vec<String> = waiting
            .iter()
            .map(|id| crate::ledger::codec::answer_key(&self.meta.hmac, &id.to_value().to_string()))
            .collect();
        let (reads, now) = (Arc::clone(&self.ledger.ledger.reads), self.sup.now().0);
        // One read job for them all (a miss tells every live session at once); each key's
        // failure is its own.
        let look = async move {
            reads
                .run(move |store| {
                    Ok(keys.into_iter().map(|key| store.get(&key, now)).collect::<Vec<_>>())
                })
                .await
        };
        ctx.spawn(look.into_actor(self).map(|kept, act, _| {
            let kept = match kept {
                Ok(kept) => kept,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the answers kept for this session's questions after a cut subscription; they wait until their deadline");
                    return;
                }
            };
            for read in kept {
                let m = match read {
                    Ok(Some(m)) => m,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read an answer kept for one of this session's questions; it waits until its deadline");
                        continue;
                    }
                };
                let parsed = serde_json::from_slice::<Value>(&m).ok().and_then(|m| super::Relayed::parse(&m));
                let Some(super::Relayed::Answer(id, answer)) = parsed else {
                    tracing::warn!("an answer kept in the ledger for one of this session's questions is not one; ignored");
                    continue;
                };
                if act.answered_here(&id, answer) {
                    act.sup.stats().answer_recovered();
                    tracing::info!(%id, "an answer relayed while this host's subscription was cut was read from the ledger");
                }
            }
        }));
    }

    /// Hand the client's answer to the request here that waits for it: whether one did.
    pub(super) fn answered_here(
        &mut self,
        id: &JsonRpcId,
        answer: Result<Value, ErrorObject>,
    ) -> bool {
        let Some(p) = self.core.answer_client_request(id) else { return false };
        let _ = p.handle.reply.send(answer);
        true
    }

    /// Record which run asks the client `id` (a shared ledger): a host that gets the answer
    /// and finds that run gone refuses it ([`Self::client_answered`]). Kept as long as the
    /// question may wait, and a minute (hosts' clocks differ). `None` when not shared; else
    /// resolves once the record is committed.
    pub(super) fn note_question(
        &self,
        id: &JsonRpcId,
        timeout_ms: u64,
    ) -> Option<oneshot::Receiver<()>> {
        if !self.ledger.ledger.shared {
            return None;
        }
        let key = crate::ledger::codec::question_key(&self.meta.hmac, &id.to_value().to_string());
        Some(self.ledger.writer.submit_acked(vec![crate::ledger::Op::Put {
            key,
            value: Bytes::from(self.ledger.ledger.run.to_string()),
            expires_ms: self.question_record_expiry(timeout_ms),
        }]))
    }

    /// Send the client request `id` (encoded: `json`) on `target`; one that cannot be sent is
    /// answered with an error at once.
    pub(super) fn ask(&mut self, id: &JsonRpcId, json: Bytes, target: &Addr<StreamActor>) {
        // Its request may have ended (or the question timed out) while who asks was recorded.
        if !self.core.client_request_pending(id) {
            return;
        }
        if target.try_send(Emit { json, last: false }).is_err()
            && let Some(p) = self.core.answer_client_request(id)
        {
            let _ = p.handle.reply.send(Err(ErrorObject::new(
                code::INTERNAL_ERROR,
                "the request's stream is busy or gone",
            )));
        }
    }

    /// Tell the other hosts sharing the ledger about this session (`message` gets the
    /// session's HMAC as `s`); nothing when the ledger is not shared.
    pub(super) fn relay(&self, message: Value) {
        if let Some(message) = self.stamped(message) {
            self.ledger.writer.submit(vec![publish_relayed(message)]);
        }
    }

    /// [`Self::relay`] the client's answer to server-to-client request `id_text` (its JSON
    /// text), and keep it (`qa/<hmac>/<id>`, written before the publication) for as long as
    /// a question asked now may wait: an asker whose subscription was cut reads it there
    /// ([`Self::recheck_answers`]).
    pub(super) fn relay_answer(&self, id_text: &str, message: Value) {
        let Some(message) = self.stamped(message) else { return };
        let key = crate::ledger::codec::answer_key(&self.meta.hmac, id_text);
        let expires_ms = self.question_record_expiry(self.core.client_request_timeout_ms());
        let keep = crate::ledger::Op::Put { key, value: message.clone(), expires_ms };
        self.ledger.writer.submit(vec![keep, publish_relayed(message)]);
    }

    /// When a record of a question asked now (who asks, its kept answer) expires: as long as
    /// a question waits (`timeout_ms`), and a minute (hosts' clocks differ).
    fn question_record_expiry(&self, timeout_ms: u64) -> u64 {
        self.sup.now().0.saturating_add(timeout_ms).saturating_add(60_000)
    }

    /// `message` stamped with the session (`s`) and this run (`from`), as the sessions
    /// channel carries it; `None` when the ledger is not shared.
    fn stamped(&self, mut message: Value) -> Option<Bytes> {
        if !self.ledger.ledger.shared {
            return None;
        }
        message["s"] = json!(&*self.meta.hmac);
        // Redis delivers a publication to its publisher's subscription too: this host's
        // sessions heard it already.
        message["from"] = json!(self.ledger.ledger.run);
        Some(Bytes::from(message.to_string()))
    }

    pub(super) fn cancel(&mut self, id: &JsonRpcId, ctx: &mut Context<Self>) {
        self.cancel_here(id, ctx, true);
    }

    /// Cancel request `id`; one not running here may run on another host (`relay`: tell it).
    pub(super) fn cancel_here(&mut self, id: &JsonRpcId, ctx: &mut Context<Self>, relay: bool) {
        let Some(task) = self.core.end_request(id, self.now()) else {
            if relay {
                self.relay(json!({"cancel": id.to_value()}));
            }
            return;
        };
        task.handle.cancel.cancel();
        if let Some(h) = task.handle.spawn {
            ctx.cancel_future(h);
        }
        // (A stream kept as data is closed already.)
        if let Some(s) = task.stream.and_then(|sid| self.core.stream(sid)?.handle.live()) {
            s.do_send(Close(CloseReason::Cancelled));
        }
    }

    pub(super) fn start_request(
        &mut self,
        id: JsonRpcId,
        method: String,
        params: Option<Value>,
        mode: ReplyMode,
        Carried { charge, lists }: Carried,
        ctx: &mut Context<Self>,
    ) -> Result<PostOutcome, Rejection> {
        // A tool call's idempotency key and what its stream is for; the refusals before
        // anything runs (the ledger cannot take the durable record it needs, a receipt bound).
        let door = self.sup.admit_tool_call(&method, params.as_ref(), &self.owner)?;
        let purpose = door.purpose;
        if mode == ReplyMode::Sse && self.stream_mode(purpose) != StreamMode::Plain {
            self.sup.admit_recorded_stream(purpose, false)?;
        }
        let cancel = CancellationToken::new();
        let generation = self.gens.enter_current(Counted::InFlight);
        self.core.begin_request(
            &id,
            RequestTask {
                spawn: None,
                cancel: cancel.clone(),
                json: None,
                generation,
                _charge: charge,
            },
        )?;
        // The handler runs before its stream starts, so an immediate answer can share the
        // priming event's write; what it sends meanwhile goes through its stream's door.
        let json_reply = match mode {
            ReplyMode::Sse => None,
            ReplyMode::Json => {
                let (tx, rx) = oneshot::channel();
                if let Some(f) = self.core.in_flight_mut(&id) {
                    f.handle.json = Some(tx);
                }
                Some(rx)
            }
        };
        let out = Arc::new(Outbound::Session {
            session: Arc::clone(&self.links),
            stream: (mode == ReplyMode::Sse).then(StreamDoor::new),
            origin: id.clone(),
        });
        let dispatch = match Route::of(Era::Session, &method) {
            Route::Ping => Dispatch::Ready(Ok(json!({}).into())),
            Route::SetLevel => self.set_level(params.as_ref()),
            r @ (Route::Subscribe | Route::Unsubscribe) => {
                Dispatch::Ready(self.subscription(r, params.as_ref()).map(Reply::Value))
            }
            Route::Reinitialize => Dispatch::Ready(Err(ErrorObject::new(
                code::INVALID_REQUEST,
                "session already initialized",
            ))),
            _ => {
                let requester = Requester {
                    principal: self.principal.clone(),
                    owner: self.owner.clone(),
                    capabilities: Arc::clone(&self.client_caps),
                    log_level: self.core.log_level(),
                    logs: true,
                    session: Some(Arc::clone(&self.names)),
                    lists,
                };
                pipeline::dispatch(
                    self.sup.catalog(),
                    self.sup.receipts(),
                    &id,
                    &method,
                    params.as_ref(),
                    door,
                    requester,
                    cancel,
                    Arc::clone(&out),
                )
            }
        };
        // For the span of a request that waits (a known method's name, else "other": the
        // name is the client's).
        let request_method = crate::proto::mcp::method::span_name(&method);
        // Kept by the stream for its record's digest, computed only if it is ever recorded.
        let request = (mode == ReplyMode::Sse).then_some((method, params));
        let done = match pipeline::first_poll(dispatch) {
            First::Answered(r) => Some(r),
            First::Waits(fut) => {
                // It runs on in this context.
                let rid = id.clone();
                let fut = tracing::Instrument::instrument(
                    fut,
                    tracing::info_span!(parent: &self.span, "request", method = request_method),
                );
                let h = ctx.spawn(fut.into_actor(self).map(move |r, act, ctx| {
                    act.complete(&rid, r);
                    act.arm(ctx);
                }));
                if let Some(f) = self.core.in_flight_mut(&id) {
                    f.handle.spawn = Some(h);
                }
                None
            }
        };
        match (out.stream_door(), json_reply) {
            (Some(stream), _) => {
                let answered = done
                    .and_then(|r| self.take_response(&id, r))
                    .map(|(bytes, task, _)| (bytes, task.generation));
                Ok(PostOutcome::Sse(self.start_post_stream(stream, id, answered, request, purpose)))
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

    /// `logging/setLevel`: answered once the session's record with the level is committed
    /// (its answer, on a stream, is queued behind it), so a restart keeps what was answered.
    pub(super) fn set_level(&mut self, params: Option<&Value>) -> Dispatch {
        let Some(level) =
            params.and_then(|p| p.get("level")).and_then(Value::as_str).and_then(LogLevel::parse)
        else {
            return Dispatch::Ready(Err(ErrorObject::new(
                code::INVALID_PARAMS,
                "level must be one of debug, info, notice, warning, error, critical, alert, emergency",
            )));
        };
        self.core.set_log_level(level);
        // The level unchanged (sent again after an unconfirmed answer): its record may still
        // be queued, so the answer waits for everything queued before it.
        let ack = self.record_due(true).unwrap_or_else(|| self.ledger.writer.barrier());
        // The other hosts serving the session apply it too (after the record, in order).
        self.relay(json!({"level": level.as_str()}));
        let writer = Arc::clone(&self.ledger.writer);
        Dispatch::Pending(Box::pin(async move {
            writer.wait_committed(ack).await.map(|()| json!({}).into()).map_err(|_| {
                ErrorObject::new(
                    code::INTERNAL_ERROR,
                    "the log level applies now, but the ledger did not confirm recording it (a restart may forget it); send it again",
                )
            })
        }))
    }

    /// `resources/subscribe` and `resources/unsubscribe`. Only known resources can be
    /// subscribed to. Nothing is recorded: a session is not told of updates yet (only
    /// 2026-07-28 `subscriptions/listen` streams are; docs/protocol.md).
    pub(super) fn subscription(
        &self,
        route: Route,
        params: Option<&Value>,
    ) -> Result<Value, ErrorObject> {
        let uri = params.and_then(|p| p.get("uri")).and_then(Value::as_str).ok_or_else(|| {
            ErrorObject::new(code::INVALID_PARAMS, "missing string parameter \"uri\"")
        })?;
        if route == Route::Subscribe && !self.sup.catalog().has_resource(uri) {
            return Err(crate::tools::resource_not_found(uri));
        }
        Ok(json!({}))
    }

    /// A request finished: forget it and encode its response. `None` when it was cancelled
    /// (nothing is sent then). Also returns the task, for its reply route.
    pub(super) fn take_response(
        &mut self,
        id: &JsonRpcId,
        r: Result<Reply, ErrorObject>,
    ) -> Option<(Bytes, RequestTask, Option<StreamId>)> {
        let task = self.core.end_request(id, self.now())?;
        let bytes = match r {
            Ok(v) => encode_reply(id, &v),
            Err(e) => encode_error(Some(id), &e),
        };
        Some((bytes, task.handle, task.stream))
    }

    /// A spawned request finished: send its response on its own stream (or JSON reply),
    /// unless it was cancelled.
    pub(super) fn complete(&mut self, id: &JsonRpcId, r: Result<Reply, ErrorObject>) {
        let Some((bytes, task, stream)) = self.take_response(id, r) else { return };
        if let Some(tx) = task.json {
            let _ = tx.send(Ok(bytes));
        } else if let Some(s) = stream.and_then(|sid| self.core.stream(sid)?.handle.live()) {
            send_final(s, bytes, task.generation);
        }
    }
}

/// Hand a request's answer to its `stream`'s actor, within the stream's mailbox bound; a busy
/// stream gets it as soon as it has room: awaited on a task of its own (it outlives the
/// session if the session stops), the request counted `in_flight` until the stream has it (a
/// drain waits for it).
pub(super) fn send_final(stream: &Addr<StreamActor>, json: Bytes, in_flight: GenCount) {
    match stream.try_send(Emit { json, last: true }) {
        Ok(()) | Err(SendError::Closed(_)) => {}
        Err(SendError::Full(m)) => {
            let addr = stream.clone();
            actix_rt::spawn(async move {
                let _ = addr.send(m).await;
                drop(in_flight);
            });
        }
    }
}

/// The publication of a [`SessionActor::stamped`] message on the sessions channel.
fn publish_relayed(message: Bytes) -> crate::ledger::Op {
    crate::ledger::Op::Publish { channel: crate::ledger::codec::SESSIONS_CHANNEL, message }
}

/// Who asked the question a client answered here, as the ledger records it.
enum Asker {
    /// Another host, alive: the answer is relayed and kept.
    Live,
    /// Another host, whose lease lapsed: the answer is refused.
    Gone,
    /// This host: its session no longer waits; the answer is accepted and dropped.
    Here,
    /// Not recorded (never asked, expired, its record not committed) or not readable:
    /// relayed, neither refused nor kept.
    Unknown,
}
