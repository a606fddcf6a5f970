//! The modern era's (2026-07-28) side of `/mcp`: one stateless request, served without a
//! session, a replay window or a ledger record (modern streams are not resumable).
//!
//! A request's handler is polled once at once: when it finishes without a notification, the
//! answer is one JSON body (even to a client that accepts SSE); otherwise the answer is an SSE
//! stream that carries the request's notifications, then its result. The stream owns the
//! handler: when the client closes it, the handler is dropped and its cancellation token
//! fires (disconnect is cancellation in this era) and nothing more is sent.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_core::Stream;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::actor::{Counted, GenCount, Supervisor};
use crate::pipeline::{self, First, Handler, Inputs, Outbound, Requester, StatelessSink};
use crate::proto::admission::ReplyMode;
use crate::proto::error::Rejection;
use crate::proto::ids::JsonRpcId;
use crate::proto::jsonrpc::{ErrorObject, Reply, code, encode_error, encode_result_raw};
use crate::proto::route::{self, Era, Route, TaskOp, TaskPlan};
use crate::proto::stateless::{self, ModernError, ModernRequest, headers as mheaders, state};
use crate::proto::task::{self, TaskSupport};
use crate::stats::ModernInFlight as ModernPlace;
use crate::stats::RequestCharge;
use crate::stores::tasks::{TaskError, TaskSlot};
use crate::tools::Dispatch;

/// Serve one admitted modern request, whose body parses into about `parsed_bytes`.
///
/// `server/discover` and the lists are answered at once, without a place (they never wait).
/// Any other request is charged `parsed_bytes` of the request memory budget and takes a place
/// among `modern.max_in_flight` (and its caller's share of them), both held until its
/// response body is dropped (or its task ends), or given back at once when it is answered
/// without waiting.
///
/// # Errors
/// A [`Rejection`] answered before anything ran: draining, the request memory budget full,
/// too many modern requests (of the caller, or in all), a mirrored `Mcp-Param-*` header that
/// does not match, a capability the tool needs and the request lacks.
pub(super) fn serve(
    req: &HttpRequest,
    sup: &Arc<Supervisor>,
    principal: Option<Arc<str>>,
    lists: Option<std::sync::Arc<crate::proto::oauth::ListFilter>>,
    request: ModernRequest,
    reply: ReplyMode,
    parsed_bytes: usize,
) -> Result<HttpResponse, Rejection> {
    let caller = super::caller_key(req, principal.as_ref(), sup);
    let route = Route::of(Era::Stateless, &request.method);
    if route == Route::Listen {
        // Long-lived: counted among the listen places, not the requests a drain waits for. It
        // keeps only its filter (at most `modern.listen_max_uris` URIs) of the body: nothing
        // is charged to the request memory.
        return super::listen::open(sup, caller, request.id, request.params.as_ref(), reply);
    }
    // Whose handles and tasks these are: the principal, or the caller's address.
    let owner = caller.owner();
    let ModernRequest { id, method, params, meta } = request;
    if route == Route::AtOnce {
        let answer = answered_at_once(sup, &id, &method, params.as_ref(), lists.as_deref());
        sup.stats().modern_served();
        return Ok(super::json(answer));
    }
    let cfg = sup.config();
    let charge = sup
        .stats()
        .request_memory_enter(parsed_bytes, cfg.limits.request_memory_bytes)
        .map_err(|r| r.with_id(&id))?;
    let place = sup
        .stats()
        .modern_enter(caller, cfg.modern.max_in_flight, cfg.modern_share())
        .map_err(|r| r.with_id(&id))?;
    let catalog = sup.catalog();
    let refuse = |error| Rejection::Modern { error, id: Some(id.clone()) };
    let needs_tasks = || Rejection::MissingCapability {
        capabilities: task::required_capabilities(),
        id: id.clone(),
    };
    match route {
        Route::Task(op) => {
            // The capability comes first (before the task is looked up): tasks are for
            // clients that declared the extension on this very request.
            if !task::declared(&meta.capabilities) {
                return Err(needs_tasks());
            }
            if op.records() {
                // An answer or a cancellation is recorded before it is acknowledged.
                sup.ledger_accepts().map_err(|r| r.with_id(&id))?;
            }
            return Ok(tasks_request(sup, (place, charge), owner, &id, op, params.as_ref()));
        }
        Route::Catalog => {}
        _ => return Err(refuse(ModernError::MethodNotFound(method))),
    }
    let mut support = TaskSupport::Forbidden;
    if method == "tools/call"
        && let Some(tool) = params
            .as_ref()
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .and_then(|n| catalog.tool(n))
    {
        let mirrored = catalog.header_params(&tool.spec().name);
        mheaders::check_params(
            mirrored,
            params.as_ref().and_then(|p| p.get("arguments")),
            |lower| req.headers().get(format!("mcp-param-{lower}")).and_then(|v| v.to_str().ok()),
        )
        .map_err(|why| refuse(ModernError::HeaderMismatch(why)))?;
        support = tool.spec().task_support;
    }
    // A tool call's idempotency key and the door's refusals (modern streams are not
    // resumable: only receipts and state handles need the ledger).
    let door = sup.admit_tool_call(&method, params.as_ref(), &owner).map_err(|r| r.with_id(&id))?;
    // May this call become a task? Only for a tool that may run as one, a request that
    // declared the extension, a ledger that can record it, and a caller with room for one
    // more (its place is taken now, so concurrent calls cannot all pass, and given back
    // unless the call becomes a task).
    let plan = route::task_plan(support, task::declared(&meta.capabilities))
        .map_err(|route::NeedsTasks| needs_tasks())?;
    let ledger_ok = sup.ledger_accepts();
    if plan == TaskPlan::Required {
        ledger_ok.clone().map_err(|r| r.with_id(&id))?;
    }
    let reserved =
        (plan != TaskPlan::Never && ledger_ok.is_ok()).then(|| sup.tasks().reserve(owner.clone()));
    if plan == TaskPlan::Required
        && let Some(Err(no_room)) = reserved
    {
        let refusal = match no_room {
            crate::stores::tasks::NoRoom::Full { retry_after_s } => Rejection::StoreFull {
                store: crate::proto::error::StoreBound::Tasks,
                retry_after_s,
            },
            _ => Rejection::QuotaExceeded {
                cause: crate::proto::error::Quota::Tasks,
                retry_after_s: no_room.retry_after_s(),
            },
        };
        return Err(refusal.with_id(&id));
    }
    let mut slot = reserved.and_then(Result::ok);
    let inputs = if route::may_ask(&method) {
        let ttl_ms = cfg.modern.request_state_ttl_secs.saturating_mul(1000);
        Inputs::of(sup.request_state_keys(), ttl_ms, owner.as_deref(), &method, params.as_ref())
            .map_err(|why| refuse(ModernError::InvalidInput(why)))?
    } else {
        Inputs::none()
    };
    // A JSON-only client's notifications are dropped: there is nowhere to put them.
    let sink = Arc::new(StatelessSink::new(reply != ReplyMode::Json, inputs, slot.is_some()));
    let cancel = CancellationToken::new();
    let requester = Requester {
        principal,
        owner: owner.clone(),
        capabilities: Arc::new(meta.capabilities),
        log_level: meta.log_level,
        logs: meta.log_level.is_some(),
        session: None,
        lists,
    };
    // A write tool's call with an idempotency key goes through its receipt, as in a session:
    // a 2026-07-28 client re-issues a call whose stream dropped, and the re-issue must never
    // run the write twice.
    let dispatch = pipeline::dispatch(
        catalog,
        sup.receipts(),
        &id,
        &method,
        params.as_ref(),
        door,
        requester,
        cancel.clone(),
        Arc::new(Outbound::Stateless(Arc::clone(&sink))),
    );
    let finish = Finish { method, params, sup: Arc::clone(sup), sink, owner };
    // Counted in flight under the generation current at admission, before the handler first
    // runs: a rollback that starts while it runs finds it among the older generation's.
    let generation = matches!(dispatch, Dispatch::Pending(_))
        .then(|| sup.generations().enter_current(Counted::InFlight));
    let polled = pipeline::first_poll(dispatch);
    finish.sink.first_poll_done();
    let (first, handler): (Poll<_>, Option<Handler>) = match polled {
        // It waits (or asked to go on as a task) before asking anything: a task from here.
        First::Waits(handler) if let Some(slot) = slot.take_if(|_| finish.sink.asked_nothing()) => {
            drop(place);
            return Ok(make_task(sup, finish, handler, slot, cancel, generation, id, charge));
        }
        // Waiting for answers it does not have: dropped, its token fired (anything it spawned
        // stops); it runs again from its start on the retry.
        First::Waits(handler) => match finish.asked() {
            Some(r) => {
                cancel.cancel();
                (Poll::Ready(Ok(Reply::Value(r))), None)
            }
            None => (Poll::Pending, Some(handler)),
        },
        // A tool that needs a task is one even when it finished at once.
        First::Answered(r)
            if let Some(slot) = slot.take_if(|_| plan == TaskPlan::Required && r.is_ok()) =>
        {
            drop(place);
            let done: Handler = Box::pin(std::future::ready(r));
            return Ok(make_task(sup, finish, done, slot, cancel, generation, id, charge));
        }
        First::Answered(r) => (Poll::Ready(r), None),
    };
    match first {
        Poll::Ready(r) if !finish.sink.has_queued() => {
            drop((place, charge));
            // Anything the handler left running may notify no more.
            finish.sink.close();
            let answer = finish.encode(&id, r)?;
            sup.stats().modern_served();
            Ok(super::json(answer))
        }
        first => {
            let generation =
                generation.unwrap_or_else(|| sup.generations().enter_current(Counted::InFlight));
            // The status is sent from here on: a refusal is an error in the body.
            let ready = match first {
                Poll::Ready(r) => Some(finish.encode_in_stream(&id, r)),
                Poll::Pending => None,
            };
            let keepalive = std::time::Duration::from_millis(sup.config().sse.keepalive_ms);
            let ended = Box::pin(generation.generation().stateless_ended());
            // Streaming from here: the queue exists now, so a notification from anything the
            // handler spawned wakes the body at once.
            let rx = finish.sink.open();
            let body = ModernBody {
                handler,
                rx,
                ready,
                finish,
                id,
                cancel,
                stats: Arc::clone(sup.stats()),
                _place: place,
                _charge: charge,
                _generation: generation,
                ended,
                keepalive,
                tick: Box::pin(tokio::time::sleep(keepalive)),
                done: false,
            };
            if reply == ReplyMode::Json {
                return Ok(HttpResponse::Ok()
                    .insert_header(super::json_type())
                    .streaming(JsonOnce(body)));
            }
            Ok(super::sse_streaming(body))
        }
    }
}

/// The answer of `server/discover` and the lists ([`Route::AtOnce`]), which never change
/// while the process runs (encoded once, unless a cursor asks for a page) and never wait.
fn answered_at_once(
    sup: &Supervisor,
    id: &JsonRpcId,
    method: &str,
    params: Option<&Value>,
    lists: Option<&crate::proto::oauth::ListFilter>,
) -> Bytes {
    if lists.is_none()
        && let Some(result) = sup.modern_results().fixed(method, params)
    {
        return encode_result_raw(id, result);
    }
    let catalog = sup.catalog();
    let r = if method == "server/discover" {
        Ok(stateless::discover_result(catalog.modern_capabilities(), catalog.instructions()))
    } else {
        catalog
            .list_ref(method, params)
            .unwrap_or_else(|| Err(ErrorObject::new(code::INTERNAL_ERROR, "not a list")))
            .map(|full| lists.and_then(|f| f.apply(method, full)).unwrap_or_else(|| full.clone()))
    };
    match r {
        Ok(v) => encode_result_raw(id, &sup.modern_results().tails().encode(method, &v)),
        Err(e) => encode_error(Some(id), &e),
    }
}

/// A body computed by a future: one chunk, then the end (a task's creation and the `tasks/*`
/// methods wait for their ledger commit; the status is `200` whatever it brings).
struct OnceBody(Option<Pin<Box<dyn Future<Output = Bytes>>>>);

impl Stream for OnceBody {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(f) = self.0.as_mut() else { return Poll::Ready(None) };
        match f.as_mut().poll(cx) {
            Poll::Ready(b) => {
                self.0 = None;
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A `200` JSON answer computed by `work`, which runs to its end on the arbiter even when the
/// client goes away first (a task is then still created and driven, a cancellation still
/// recorded and its place given back): the body only carries its answer.
fn json_later(work: impl Future<Output = Bytes> + 'static) -> HttpResponse {
    let done = actix_rt::spawn(work);
    // A panic in the work leaves an empty body: the client reads an unknown outcome.
    HttpResponse::Ok()
        .insert_header(super::json_type())
        .streaming(OnceBody(Some(Box::pin(async move { done.await.unwrap_or_default() }))))
}

/// `tasks/get`, `tasks/update`, `tasks/cancel` of a request that declared the extension
/// (counted among the modern requests in flight, and charged to the request memory, `held`,
/// until answered).
fn tasks_request(
    sup: &Arc<Supervisor>,
    held: (ModernPlace, RequestCharge),
    owner: Option<Arc<str>>,
    id: &JsonRpcId,
    op: TaskOp,
    params: Option<&Value>,
) -> HttpResponse {
    let (sup, id) = (Arc::clone(sup), id.clone());
    let task_id =
        params.and_then(|p| p.get("taskId")).and_then(Value::as_str).unwrap_or_default().to_owned();
    let responses = params.and_then(|p| p.get("inputResponses")).cloned();
    json_later(async move {
        let _held = held;
        let tasks = sup.tasks();
        let p = owner.as_deref();
        let r = match op {
            TaskOp::Get => tasks.get(p, &task_id).await.map(|v| v.detailed()),
            TaskOp::Update => match responses {
                None => {
                    tasks.update(p, &task_id, &serde_json::Map::new(), state::check_answer).await
                }
                Some(Value::Object(m)) => tasks.update(p, &task_id, &m, state::check_answer).await,
                Some(_) => Err(TaskError::BadAnswer("inputResponses must be an object".into())),
            }
            .map(|()| Value::Object(serde_json::Map::new())),
            TaskOp::Cancel => {
                tasks.cancel(p, &task_id).await.map(|()| Value::Object(serde_json::Map::new()))
            }
        };
        match r {
            Ok(v) => encode_result_raw(&id, &sup.modern_results().tails().encode(op.method(), &v)),
            Err(e) => encode_error(Some(&id), &e.to_error_object()),
        }
    })
}

/// Make the call a task in `slot`: recorded (`working`), answered with its
/// `CreateTaskResult`, and its handler run on in the background (`drive`), which keeps the
/// request's `charge` (its handler holds the arguments) until the task ends.
#[allow(clippy::too_many_arguments)]
fn make_task(
    sup: &Arc<Supervisor>,
    finish: Finish,
    handler: Handler,
    slot: TaskSlot,
    cancel: CancellationToken,
    generation: Option<GenCount>,
    id: JsonRpcId,
    charge: RequestCharge,
) -> HttpResponse {
    let tasks = Arc::clone(sup.tasks());
    // Counted in flight: a drain waits for it, within its grace period.
    let generation =
        generation.unwrap_or_else(|| sup.generations().enter_current(Counted::InFlight));
    let tool = finish
        .params
        .as_ref()
        .and_then(|p| p.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    json_later(async move {
        // A task's notifications have no stream to go to.
        finish.sink.close();
        match tasks.create(slot, &tool, cancel.clone()).await {
            Ok(run) => {
                finish.sink.runs_as_task(Arc::clone(&tasks), Arc::clone(&run));
                let created = run.created();
                let ended = generation.generation().stateless_ended();
                actix_rt::spawn(crate::stores::tasks::drive(
                    tasks, run, handler, ended, charge, generation,
                ));
                encode_result_raw(
                    &id,
                    &finish.sup.modern_results().tails().encode("tools/call", &created),
                )
            }
            Err(e) => {
                cancel.cancel();
                encode_error(Some(&id), &e.to_error_object())
            }
        }
    })
}

/// How a handler's outcome becomes the response body.
struct Finish {
    method: String,
    /// The request's params (for the digest a `requestState` is bound to).
    params: Option<Value>,
    /// For the catalog, the encoded result tails and the `requestState` key.
    sup: Arc<Supervisor>,
    sink: Arc<StatelessSink>,
    /// The caller a `requestState` is bound to.
    owner: Option<Arc<str>>,
}

impl Finish {
    /// The `input_required` result, when the handler waits for answers it does not have
    /// (then it is dropped: it runs again from its start on the client's retry).
    fn asked(&self) -> Option<Value> {
        self.sink.input_required(
            self.sup.request_state_key(),
            self.owner.as_deref(),
            &self.method,
            self.params.as_ref(),
        )
    }

    /// The response bytes; a missing client capability is the 400 of the error table when
    /// nothing has been sent yet.
    fn encode(
        &self,
        id: &crate::proto::JsonRpcId,
        r: Result<Reply, ErrorObject>,
    ) -> Result<Bytes, Rejection> {
        match r {
            Ok(v) => Ok(self
                .sup
                .modern_results()
                .tails()
                .encode_response(id, &self.method, &v)
                .unwrap_or_else(|e| encode_error(Some(id), &e))),
            Err(e) if e.code == code::MISSING_CLIENT_CAPABILITY => {
                let capabilities = e
                    .data
                    .as_ref()
                    .and_then(|d| d.get("requiredCapabilities"))
                    .cloned()
                    .unwrap_or_else(|| Value::Object(serde_json::Map::new()));
                Err(Rejection::MissingCapability { capabilities, id: id.clone() })
            }
            // 2026-07-28: an unknown resource is invalid params, never -32002.
            Err(e) if e.code == code::RESOURCE_NOT_FOUND => {
                Ok(encode_error(Some(id), &ErrorObject { code: code::INVALID_PARAMS, ..e }))
            }
            Err(e) => Ok(encode_error(Some(id), &e)),
        }
    }

    /// As [`Self::encode`], a refusal rendered in the stream (the status is already sent).
    fn encode_in_stream(
        &self,
        id: &crate::proto::JsonRpcId,
        r: Result<Reply, ErrorObject>,
    ) -> Bytes {
        self.encode(id, r)
            .unwrap_or_else(|rejection| encode_error(Some(id), &rejection.to_error_object()))
    }
}

/// The SSE body of a modern request: its notifications as they come, then its result, then
/// the end. Dropping it (the client closed the stream) cancels the handler.
struct ModernBody {
    handler: Option<Handler>,
    rx: Option<mpsc::Receiver<Bytes>>,
    /// The final answer, once known.
    ready: Option<Bytes>,
    finish: Finish,
    id: crate::proto::JsonRpcId,
    cancel: CancellationToken,
    stats: Arc<crate::stats::RuntimeStats>,
    _place: crate::stats::ModernInFlight,
    /// Its share of the request memory budget: its handler holds the arguments.
    _charge: RequestCharge,
    _generation: GenCount,
    /// Resolves when the drain's or rollback's grace period is over for this request.
    ended: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    keepalive: std::time::Duration,
    tick: Pin<Box<tokio::time::Sleep>>,
    done: bool,
}

impl Stream for ModernBody {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        this.poll_handler(cx);
        // The queue exists once the handler first notified (perhaps in the poll above).
        if this.rx.is_none() {
            this.rx = this.finish.sink.take_receiver();
        }
        // Notifications first: each is sent before the result that follows it.
        if let Some(rx) = this.rx.as_mut() {
            match rx.poll_recv(cx) {
                Poll::Ready(Some(n)) => {
                    this.tick.as_mut().reset(tokio::time::Instant::now() + this.keepalive);
                    return Poll::Ready(Some(Ok(crate::sse::data_frame(&n))));
                }
                Poll::Ready(None) => this.rx = None,
                Poll::Pending => {}
            }
        }
        if let Some(r) = this.ready.take() {
            // Everything the handler queued before it finished goes first.
            if let Some(rx) = this.rx.as_mut()
                && let Ok(n) = rx.try_recv()
            {
                this.ready = Some(r);
                return Poll::Ready(Some(Ok(crate::sse::data_frame(&n))));
            }
            return Poll::Ready(Some(Ok(crate::sse::data_frame(&this.finished(r)))));
        }
        if this.tick.as_mut().poll(cx).is_ready() {
            this.tick.as_mut().reset(tokio::time::Instant::now() + this.keepalive);
            return Poll::Ready(Some(Ok(Bytes::from_static(crate::sse::COMMENT_KEEPALIVE))));
        }
        Poll::Pending
    }
}

impl ModernBody {
    /// Poll the handler until its answer is known (then kept in `ready`): its result, or the
    /// `input_required` result when it waits for answers it does not have (then it is dropped
    /// and its token fired).
    fn poll_handler(&mut self, cx: &mut Context<'_>) {
        if self.ready.is_some() {
            return;
        }
        let Some(h) = self.handler.as_mut() else { return };
        let r = match h.as_mut().poll(cx) {
            Poll::Ready(r) => r,
            // A handler that finished in this poll is answered with its result, not "drained".
            Poll::Pending if self.ended.as_mut().poll(cx).is_ready() => {
                // Its tool stops first; then the error is its answer.
                self.cancel.cancel();
                self.handler = None;
                let error = ErrorObject::new(
                    code::DRAINED,
                    "The server is stopping (or rolled back) and this request did not finish within the drain's grace period; it was stopped and its outcome is unknown. Re-issue it, with a new id, if running it again is safe.",
                );
                self.ready = Some(encode_error(Some(&self.id), &error));
                return;
            }
            Poll::Pending => match self.finish.asked() {
                Some(r) => {
                    self.cancel.cancel();
                    Ok(Reply::Value(r))
                }
                None => return,
            },
        };
        self.handler = None;
        self.ready = Some(self.finish.encode_in_stream(&self.id, r));
    }

    /// The answer goes out: the request is served.
    fn finished(&mut self, answer: Bytes) -> Bytes {
        self.done = true;
        self.stats.modern_served();
        answer
    }
}

impl Drop for ModernBody {
    fn drop(&mut self) {
        // Whatever the handler left running may notify no more.
        self.finish.sink.close();
        if !self.done {
            // The client closed the stream before the result: that is the cancellation.
            self.cancel.cancel();
            self.stats.modern_cancelled();
        }
    }
}

/// A JSON-only client's answer to a handler that waits: the one result, when it comes.
struct JsonOnce(ModernBody);

impl Stream for JsonOnce {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let b = &mut self.0;
        if b.done {
            return Poll::Ready(None);
        }
        b.poll_handler(cx);
        match b.ready.take() {
            Some(r) => {
                let answer = b.finished(r);
                Poll::Ready(Some(Ok(answer)))
            }
            None => Poll::Pending,
        }
    }
}
