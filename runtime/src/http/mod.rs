//! The actix-web `/mcp` endpoint: reads the request head and body, calls
//! [`admit`](crate::proto::admission::admit), and forwards the typed command to the
//! supervisor or a session actor. Every refusal is a [`Rejection`] rendered by the one
//! [`ApiError`] `ResponseError` impl and counted once, by cause. Responses to an allowed
//! `Origin` carry the CORS headers, refusals included.

use std::net::IpAddr;
use std::sync::Arc;
use std::task::Poll;

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use bytes::{Bytes, BytesMut};
use futures_core::Stream as _;
use tokio::sync::oneshot;

use crate::actor::{
    Delete, InboxTicket, JsonReply, OpenGet, Phase, Post, PostOutcome, QuotaKey, Resume,
    SessionHandle, SseBody, Supervisor,
};
use crate::proto::admission::{
    Admitted, Command, HeadAdmitted, HttpMethod, ReplyMode, RequestHead, admit_after_auth,
    admit_body, admit_front, bearer_token, cors_headers, cors_origin, cors_preflight_headers,
};
use crate::proto::error::{Overload, Quota, Rejection};
use crate::proto::forwarded::{self, Cidr};
use crate::proto::jsonrpc::{Incoming, encode_result_raw};
use crate::proto::oauth::ListFilter;

pub mod admin;
mod listen;
mod metrics;
mod oauth;
mod stateless;

/// The session header, as written by this server.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The one error type of the HTTP layer.
#[derive(Debug)]
pub struct ApiError(pub Rejection);

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Rejection> for ApiError {
    fn from(r: Rejection) -> ApiError {
        ApiError(r)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn error_response(&self) -> HttpResponse {
        if self.0 == Rejection::Internal {
            tracing::warn!("internal error answered with 500");
        }
        let mut b = HttpResponse::build(self.status_code());
        for (k, v) in self.0.headers() {
            b.insert_header((k, v));
        }
        b.insert_header(json_type())
            .body(crate::proto::jsonrpc::encode_error(self.0.id(), &self.0.to_error_object()))
    }
}

/// The headers admission reads (names pre-parsed, so no lookup parses a name), and how an
/// error message spells them.
static READ_HEADERS: [(header::HeaderName, &str); 11] = {
    use header::HeaderName as N;
    [
        (header::ACCEPT, "Accept"),
        (header::CONTENT_TYPE, "Content-Type"),
        (N::from_static(SESSION_HEADER), "MCP-Session-Id"),
        (N::from_static("mcp-protocol-version"), "MCP-Protocol-Version"),
        (header::ORIGIN, "Origin"),
        (header::HOST, "Host"),
        (N::from_static("last-event-id"), "Last-Event-ID"),
        (header::AUTHORIZATION, "Authorization"),
        (header::ACCESS_CONTROL_REQUEST_METHOD, "Access-Control-Request-Method"),
        (N::from_static("mcp-method"), "Mcp-Method"),
        (N::from_static("mcp-name"), "Mcp-Name"),
    ]
};

/// Read the request head as admission sees it. A header that is present but not visible
/// ASCII is recorded as invalid (never treated as absent).
fn request_head(method: HttpMethod, h: &HeaderMap) -> RequestHead<'_> {
    let mut head = RequestHead::new(method);
    let mut values: [Option<&str>; 11] = [None; 11];
    for (slot, (name, display)) in values.iter_mut().zip(&READ_HEADERS) {
        if let Some(v) = h.get(name) {
            match v.to_str() {
                Ok(s) => *slot = Some(s),
                // Which path may refuse it: a session's headers matter to the legacy era only,
                // the mirrored ones to 2026-07-28 only (as -32020, with the request's id).
                Err(_) => match *display {
                    "MCP-Session-Id" | "Last-Event-ID" => {
                        head.invalid_session_header.get_or_insert(display);
                    }
                    "Mcp-Method" | "Mcp-Name" => {
                        head.invalid_modern_header.get_or_insert(display);
                    }
                    _ => {
                        head.invalid_header.get_or_insert(display);
                    }
                },
            }
        }
    }
    let [
        accept,
        content_type,
        session_id,
        protocol_version,
        origin,
        host,
        last_event_id,
        authorization,
        cors_request_method,
        mcp_method,
        mcp_name,
    ] = values;
    RequestHead {
        accept,
        content_type,
        session_id,
        protocol_version,
        origin,
        host,
        last_event_id,
        authorization,
        cors_request_method,
        mcp_method,
        mcp_name,
        ..head
    }
}

fn method_of(req: &HttpRequest) -> HttpMethod {
    match *req.method() {
        actix_web::http::Method::POST => HttpMethod::Post,
        actix_web::http::Method::GET => HttpMethod::Get,
        actix_web::http::Method::DELETE => HttpMethod::Delete,
        actix_web::http::Method::OPTIONS => HttpMethod::Options,
        _ => HttpMethod::Other,
    }
}

/// Read a POST body of at most `limit` bytes (`declared`: its `Content-Length`, to size the
/// buffer once), all of it within `deadline`.
async fn read_body(
    mut payload: web::Payload,
    limit: usize,
    declared: Option<usize>,
    deadline: std::time::Duration,
) -> Result<Bytes, Rejection> {
    let read = async move {
        let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
        while let Some(chunk) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut payload).poll_next(cx)).await
        {
            let chunk = chunk.map_err(|_| Rejection::InvalidMessage {
                reason: "could not read the request body".into(),
                id: None,
            })?;
            if buf.len() + chunk.len() > limit {
                return Err(Rejection::PayloadTooLarge);
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf.freeze())
    };
    // Most bodies arrived with their head: read at once, they need no timer.
    let mut read = std::pin::pin!(read);
    if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await {
        return r;
    }
    tokio::time::timeout(deadline, read).await.map_err(|_| Rejection::BodyTimeout)?
}

/// The head of every SSE response: no caching or transformation, no proxy buffering.
fn sse_head() -> actix_web::HttpResponseBuilder {
    // Static names and values: nothing parsed or checked per response.
    const X_ACCEL_BUFFERING: header::HeaderName =
        header::HeaderName::from_static("x-accel-buffering");
    let mut b = HttpResponse::Ok();
    b.insert_header((header::CONTENT_TYPE, header::HeaderValue::from_static("text/event-stream")))
        .insert_header((
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache, no-transform"),
        ))
        .insert_header((X_ACCEL_BUFFERING, header::HeaderValue::from_static("no")));
    b
}

fn sse(body: SseBody) -> HttpResponse {
    sse_head().body(body)
}

/// An SSE response streaming `frames`.
fn sse_streaming(
    frames: impl futures_core::Stream<Item = Result<Bytes, std::convert::Infallible>> + 'static,
) -> HttpResponse {
    sse_head().streaming(frames)
}

/// `Content-Type: application/json`, a static value (not parsed per response).
pub(crate) fn json_type() -> (header::HeaderName, header::HeaderValue) {
    (header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"))
}

fn json(bytes: Bytes) -> HttpResponse {
    HttpResponse::Ok().insert_header(json_type()).body(bytes)
}

/// A JSON reply: the response, nothing (cancelled: 202), or why the session could not give
/// one (its session ended meanwhile: 404, or 503 while stopping).
fn json_reply(r: Result<JsonReply, oneshot::error::RecvError>) -> Result<HttpResponse, Rejection> {
    match r {
        Ok(Ok(bytes)) => Ok(json(bytes)),
        Ok(Err(rejection)) => Err(rejection),
        Err(_) => Ok(HttpResponse::Accepted().finish()),
    }
}

/// The `/mcp` handler for every method.
pub async fn endpoint(
    req: HttpRequest,
    payload: web::Payload,
    sup: web::Data<Arc<Supervisor>>,
) -> HttpResponse {
    sup.stats().request();
    let head = request_head(method_of(&req), req.headers());
    let mut resp = match serve(&req, &head, payload, &sup).await {
        Ok(r) => r,
        Err(rejection) => {
            sup.stats().refused(&rejection);
            let mut resp = ApiError(rejection.clone()).error_response();
            if let Some(oauth) = sup.oauth()
                && rejection.is_challenge()
            {
                oauth::challenge(oauth, &rejection, &mut resp);
            }
            if rejection.inner() == &Rejection::Overloaded(Overload::Draining) {
                // How long a restart takes is the operator's to say.
                resp.headers_mut().insert(
                    header::RETRY_AFTER,
                    header::HeaderValue::from(sup.config().shutdown.retry_after_secs),
                );
            }
            resp
        }
    };
    sup.stats().http_response(resp.status().as_u16());
    if let Some(origin) = cors_origin(&head, sup.admit_policy()) {
        let h = resp.headers_mut();
        for (k, v) in cors_headers(origin) {
            if let (Ok(k), Ok(v)) =
                (header::HeaderName::try_from(k), header::HeaderValue::from_str(&v))
            {
                h.insert(k, v);
            }
        }
    } else if head.origin.is_some() {
        // The answer depends on Origin (this one is a refusal): caches must not reuse it for
        // another origin.
        resp.headers_mut().insert(header::VARY, header::HeaderValue::from_static("Origin"));
    }
    resp
}

/// The caller a quota counts (and, without authentication, who owns handles, tasks and
/// receipts): the principal, else the client's address ([`client_ip`]).
fn caller_key(req: &HttpRequest, principal: Option<&Arc<str>>, sup: &Supervisor) -> QuotaKey {
    let cfg = sup.config();
    let client =
        if principal.is_some() { None } else { client_ip(req, &cfg.security.trust_forwarded_for) };
    quota_key(principal, client, cfg.quotas.ipv6_prefix_len)
}

/// The client's address: the TCP peer's, or, when the peer is inside a range of `trusted`
/// (`security.trust_forwarded_for`), the one its `Forwarded` / `X-Forwarded-For` headers
/// name ([`crate::proto::forwarded::client_addr`]).
fn client_ip(req: &HttpRequest, trusted: &[Cidr]) -> Option<IpAddr> {
    let peer = req.peer_addr()?.ip();
    if !forwarded::is_trusted(peer, trusted) {
        return Some(peer);
    }
    let lines = |name: &header::HeaderName| {
        req.headers().get_all(name).map(header::HeaderValue::as_bytes).collect::<Vec<_>>()
    };
    Some(forwarded::client_addr(
        peer,
        trusted,
        &lines(&header::FORWARDED),
        &lines(&X_FORWARDED_FOR),
    ))
}

static X_FORWARDED_FOR: header::HeaderName = header::HeaderName::from_static("x-forwarded-for");

/// The caller a quota counts: the principal, else the client's address — IPv4 whole, IPv6 by
/// its first `v6_prefix` bits (one host usually holds a whole /64, so counting single IPv6
/// addresses would let it rotate past every quota).
fn quota_key(principal: Option<&Arc<str>>, client: Option<IpAddr>, v6_prefix: u8) -> QuotaKey {
    match (principal, client) {
        (Some(p), _) => QuotaKey::Principal(Arc::clone(p)),
        (None, Some(ip)) => QuotaKey::Address(match ip {
            std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => std::net::IpAddr::V4(v4),
                None => {
                    let mask = u128::MAX.checked_shl(128 - u32::from(v6_prefix)).unwrap_or(0);
                    std::net::IpAddr::V6((u128::from(v6) & mask).into())
                }
            },
            v4 => v4,
        }),
        (None, None) => QuotaKey::Unknown,
    }
}

/// A new stream needs room in the server-wide budget (503 when full) and in its caller's
/// share (429).
fn stream_memory_available(sup: &Supervisor, handle: &SessionHandle) -> Result<(), Rejection> {
    if sup.stream_memory_full() {
        return Err(Rejection::Overloaded(Overload::StreamMemory));
    }
    if handle.caller_budget.is_full() {
        return Err(Rejection::QuotaExceeded {
            cause: Quota::StreamMemory,
            retry_after_s: Overload::StreamMemory.retry_after_s(),
        });
    }
    Ok(())
}

fn opens_stream(incoming: &Incoming, reply: ReplyMode) -> bool {
    reply == ReplyMode::Sse && matches!(incoming, Incoming::Single(m) if m.is_request())
}

// `serve` is split so that every request's handler future stays small: an `async fn`
// keeps the storage of whatever it holds across an await, and one big match over every
// command made the future 1.3 KiB, past glibc's tcache and into its slow large-bin path
// on every request (mcp-host uses jemalloc now; a library user on glibc still gains).
// Admission and the answer are small futures of their own; what lies
// between them is synchronous ([`dispatch`]).
async fn serve(
    req: &HttpRequest,
    head: &RequestHead<'_>,
    payload: web::Payload,
    sup: &Arc<Supervisor>,
) -> Result<HttpResponse, Rejection> {
    if oauth::token_in_query(req.query_string()) {
        return Err(Rejection::TokenInQuery);
    }
    let (admitted, lists) = admit_request(req, head, payload, sup).await?;
    // Paused past its lease on a shared ledger: nothing is answered from what it holds.
    if let Err(lapsed) = sup.lease_holds()
        && !matches!(admitted.command, Command::Preflight)
    {
        return Err(match &admitted.command {
            Command::Modern { request, .. } => lapsed.with_id(&request.id),
            _ => lapsed,
        });
    }
    if sup.phase() != Phase::Serving && starts_work(&admitted.command) {
        // Draining: what finishes in-flight work (answers to server-to-client requests,
        // cancellations, resumes, DELETE) is still served; nothing new starts.
        return Err(match &admitted.command {
            Command::Modern { request, .. } => {
                Rejection::Overloaded(Overload::Draining).with_id(&request.id)
            }
            _ => Rejection::Overloaded(Overload::Draining),
        });
    }
    // Notifications and answers only, to a hibernating session: taken without waking it (most
    // often a client's `notifications/initialized` right after its handshake).
    if let Command::Post { session, incoming, .. } = &admitted.command
        && !incoming.carries_request()
        && sup.try_take_by_sleeping(session, admitted.principal.as_ref(), incoming)
    {
        return Ok(HttpResponse::Accepted().finish());
    }
    // A DELETE of a hibernating session: ended as data, without waking it.
    if let Command::Delete { session } = &admitted.command
        && sup.try_end_sleeping(session, admitted.principal.as_ref())
    {
        return Ok(deleted(sup).await);
    }
    let found = match admitted.command.session() {
        None => None,
        Some(session) => Some(match sup.lookup(session, admitted.principal.as_ref()) {
            // Not live here: perhaps parked, or recorded by the process before a restart.
            // Boxed, so this rare path adds a pointer, not its whole state, to every
            // request's future.
            Err(Rejection::SessionNotFound) => {
                let key = caller_key(req, admitted.principal.as_ref(), sup);
                Box::pin(sup.revive(session, admitted.principal.as_ref(), key)).await?;
                sup.lookup(session, admitted.principal.as_ref()).inspect_err(|_| {
                    tracing::debug!(target: "mcp_runtime::revive", "not found after the revive");
                })?
            }
            other => other?,
        }),
    };
    // Bound first: a `?` in the scrutinee would keep its temporary across the awaits.
    let next = dispatch(req, sup, admitted, lists, found)?;
    match next {
        Next::Ready(resp) => Ok(resp),
        Next::Recorded(None, resp, _) => Ok(resp),
        // A session id is handed out only once its record is committed, within the commit
        // wait; a dropped sender means the session stopped first (a drain began).
        Next::Recorded(Some(rx), resp, id) => match sup.ledger_writer().wait_committed(rx).await {
            Ok(()) => Ok(resp),
            Err(e) => {
                // Never handed out: it stops (a drain stops it anyway).
                sup.abandon_unrecorded(&id);
                Err(e.into())
            }
        },
        Next::Post(rx) => post_reply(rx).await,
        Next::Stream(rx, dropped) => match rx.await {
            Ok(Ok(body)) => Ok(sse(body)),
            Ok(Err(rejection)) => Err(rejection),
            Err(_) => Err(dropped),
        },
        Next::Delete(rx) => match rx.await {
            Ok(Ok(())) => Ok(deleted(sup).await),
            Ok(Err(rejection)) => Err(rejection),
            Err(_) => Err(Rejection::SessionNotFound),
        },
    }
}

/// The answer to a DELETE whose end was handed to the ledger. On a durable ledger that
/// commits, it is sent once the end is committed, so a crash right after never brings the
/// session back. While the ledger cannot commit (or stops committing within the commit wait)
/// it is acknowledged as handed over: the record lands when the ledger heals.
async fn deleted(sup: &Supervisor) -> HttpResponse {
    if sup.ledger_durable() && !sup.ledger_writer().is_failing() {
        let writer = sup.ledger_writer();
        let _ = writer.wait_committed(writer.barrier()).await;
    }
    HttpResponse::NoContent().finish()
}

/// Whether a command would start new work (refused while draining).
fn starts_work(c: &Command) -> bool {
    match c {
        Command::Initialize { .. } | Command::OpenStream { .. } => true,
        Command::Post { incoming, .. } => incoming.carries_request(),
        Command::Modern { .. } => true,
        Command::Preflight
        | Command::Resume { .. }
        | Command::Delete { .. }
        | Command::ModernNotification => false,
    }
}

/// What a request waits for once it has been handed to its session.
enum Next {
    Ready(HttpResponse),
    /// Ready once the session's first record is committed (a session id handed out
    /// survives a crash); nothing to wait for on a memory ledger.
    Recorded(Option<oneshot::Receiver<()>>, HttpResponse, crate::proto::ids::SessionId),
    Post(oneshot::Receiver<Result<PostOutcome, Rejection>>),
    /// A stream, and the answer when the session drops the reply.
    Stream(oneshot::Receiver<Result<SseBody, Rejection>>, Rejection),
    Delete(oneshot::Receiver<Result<(), Rejection>>),
}

/// Carry an admitted command to its session (`found` when it names one, with a place in its
/// inbox), or answer it here.
fn dispatch(
    req: &HttpRequest,
    sup: &Arc<Supervisor>,
    admitted: Admitted,
    lists: Option<Arc<ListFilter>>,
    found: Option<(SessionHandle, InboxTicket)>,
) -> Result<Next, Rejection> {
    let principal = admitted.principal;
    // The parsed body's share of the request memory budget, for a request that starts work
    // (refused with 503 before it is handed on when the budget is full): held while the
    // request runs. Notifications and responses finish work and are never refused for it.
    let charge = || {
        sup.stats()
            .request_memory_enter(admitted.parsed_bytes, sup.config().limits.request_memory_bytes)
    };
    // `found` is made from the command's session, so a command with one always has it.
    let found = move || found.ok_or(Rejection::Internal);
    match admitted.command {
        Command::Preflight => {
            let mut b = HttpResponse::NoContent();
            let requested = req
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .and_then(|v| v.to_str().ok());
            for (k, v) in cors_preflight_headers(requested)? {
                b.insert_header((k, v));
            }
            Ok(Next::Ready(b.finish()))
        }
        Command::Initialize { id, init, kept_bytes, reply } => {
            // Nothing of the body is held once the session exists (the handshake it keeps is
            // charged to the stream memory).
            let _charge = charge()?;
            let key = caller_key(req, principal.as_ref(), sup);
            let origin = req.headers().get(header::ORIGIN).and_then(|v| v.to_str().ok());
            let (session, version, recorded) =
                sup.create_session(key, principal, init, kept_bytes, origin)?;
            let bytes = encode_result_raw(&id, sup.catalog().initialize_result_text(version));
            let mut resp = match reply {
                ReplyMode::Json => json(bytes),
                ReplyMode::Sse => sse(SseBody::fixed(vec![crate::sse::data_frame(&bytes)])),
            };
            resp.headers_mut().insert(
                header::HeaderName::from_static(SESSION_HEADER),
                header::HeaderValue::from_str(session.as_str()).map_err(|_| Rejection::Internal)?,
            );
            Ok(Next::Recorded(recorded, resp, session))
        }
        Command::Post { version: _, incoming, reply, .. } => {
            let (handle, ticket) = found()?;
            if opens_stream(&incoming, reply) {
                stream_memory_available(sup, &handle)?;
            }
            // Given back when the session has answered the request(s) it carries.
            let charge = if incoming.carries_request() { Some(charge()?) } else { None };
            let (tx, rx) = oneshot::channel();
            handle.deliver(ticket, |ticket| Post {
                incoming,
                reply_mode: reply,
                reply: tx,
                ticket,
                charge,
                lists,
            })?;
            Ok(Next::Post(rx))
        }
        Command::OpenStream { .. } => {
            let (handle, ticket) = found()?;
            stream_memory_available(sup, &handle)?;
            let (tx, rx) = oneshot::channel();
            handle.deliver(ticket, |ticket| OpenGet { reply: tx, ticket })?;
            Ok(Next::Stream(rx, Rejection::SessionNotFound))
        }
        Command::Resume { cursor, .. } => {
            let (handle, ticket) = found()?;
            let event = handle.signer.decode(&cursor).map_err(|e| {
                tracing::debug!(target: "mcp_runtime::cursor", error = ?e, "resume refused: a cursor this session's signer did not issue");
                Rejection::CursorRejected
            })?;
            let (tx, rx) = oneshot::channel();
            handle.deliver(ticket, |ticket| Resume { event, reply: tx, ticket })?;
            // A dropped reply: the stream stopped (its retention ended) with the resume queued.
            Ok(Next::Stream(rx, Rejection::EventsLost))
        }
        Command::Modern { request, reply } => Ok(Next::Ready(stateless::serve(
            req,
            sup,
            principal,
            lists,
            request,
            reply,
            admitted.parsed_bytes,
        )?)),
        Command::ModernNotification => Ok(Next::Ready(HttpResponse::Accepted().finish())),
        Command::Delete { .. } => {
            let (handle, ticket) = found()?;
            let (tx, rx) = oneshot::channel();
            handle.deliver(ticket, |ticket| Delete { reply: tx, ticket })?;
            Ok(Next::Delete(rx))
        }
    }
}

/// The head's rules first (a refused caller never makes us buffer a body), then a POST's
/// body within its deadline and the body's rules.
async fn admit_request(
    req: &HttpRequest,
    head: &RequestHead<'_>,
    payload: web::Payload,
    sup: &Supervisor,
) -> Result<(Admitted, Option<Arc<ListFilter>>), Rejection> {
    let policy = sup.admit_policy();
    if let Some(preflight) = admit_front(head, policy)? {
        return Ok((preflight, None));
    }
    // A static token's principal, else an OAuth grant's (checked, or from the cache).
    let token = bearer_token(head);
    let mut grant = None;
    let principal = match (token.and_then(|t| policy.auth.as_ref()?.principal(t)), sup.oauth()) {
        (Some(p), _) => Some(p),
        (None, Some(oauth)) => {
            let g = oauth::authenticate(oauth, token, req, sup).await?;
            let p = Arc::clone(&g.principal);
            grant = Some(g);
            Some(p)
        }
        (None, None) if policy.auth.is_some() => return Err(Rejection::Unauthorized),
        (None, None) => None,
    };
    let admitted = match admit_after_auth(head, principal)? {
        HeadAdmitted::Done(a) => a,
        HeadAdmitted::Post { principal } => {
            let declared = req
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok());
            if declared.is_some_and(|n| n > policy.max_body_bytes) {
                return Err(Rejection::PayloadTooLarge);
            }
            let deadline =
                std::time::Duration::from_millis(sup.config().security.body_read_timeout_ms);
            let body = read_body(payload, policy.max_body_bytes, declared, deadline).await?;
            admit_body(principal, head, &body, policy)?
        }
    };
    let mut lists = None;
    if let (Some(grant), Some(oauth)) = (&grant, sup.oauth()) {
        oauth::check_scopes(oauth, &admitted, grant)?;
        lists = oauth.list_filter(grant);
    }
    Ok((admitted, lists))
}

/// The answer to a POST, once the session has taken it.
async fn post_reply(
    rx: oneshot::Receiver<Result<PostOutcome, Rejection>>,
) -> Result<HttpResponse, Rejection> {
    let outcome = match rx.await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(rejection)) => return Err(rejection),
        Err(_) => return Err(Rejection::SessionNotFound),
    };
    match outcome {
        PostOutcome::Accepted => Ok(HttpResponse::Accepted().finish()),
        PostOutcome::Relayed(rx) => match rx.await {
            Ok(Err(rejection)) => Err(rejection),
            // Relayed, or the session stopped before it could look (nothing to refuse).
            Ok(Ok(())) | Err(_) => Ok(HttpResponse::Accepted().finish()),
        },
        PostOutcome::Sse(body) => Ok(sse(body)),
        PostOutcome::Json(rx) => json_reply(rx.await),
        PostOutcome::Batch(rxs) => {
            let mut out = Vec::with_capacity(rxs.len());
            for rx in rxs {
                match rx.await {
                    Ok(Ok(b)) => out.push(b),
                    Ok(Err(rejection)) => return Err(rejection),
                    Err(_) => {}
                }
            }
            if out.is_empty() {
                return Ok(HttpResponse::Accepted().finish());
            }
            let mut arr = BytesMut::from(&b"["[..]);
            for (i, b) in out.iter().enumerate() {
                if i > 0 {
                    arr.extend_from_slice(b",");
                }
                arr.extend_from_slice(b);
            }
            arr.extend_from_slice(b"]");
            Ok(json(arr.freeze()))
        }
    }
}

/// `GET /readyz` on the MCP port: `200 ready` while serving with a ledger that commits, else
/// `503 not ready` (draining, starting, or the ledger cannot commit); no detail, no
/// authentication (load balancers and orchestrators ask it). The admin port's answers why.
async fn readyz(sup: web::Data<Arc<Supervisor>>) -> HttpResponse {
    if sup.ready() {
        HttpResponse::Ok().content_type("text/plain").body("ready\n")
    } else {
        HttpResponse::ServiceUnavailable().content_type("text/plain").body("not ready\n")
    }
}

/// `GET /livez`: `200` while the process serves HTTP at all.
async fn livez() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("live\n")
}

/// Mount the endpoint at `path`, and `GET /readyz` and `GET /livez`, with the supervisor as
/// app data.
pub fn configure(path: &str, sup: Arc<Supervisor>) -> impl FnOnce(&mut web::ServiceConfig) + use<> {
    let path = path.to_owned();
    move |cfg: &mut web::ServiceConfig| {
        oauth::routes(cfg, &sup);
        cfg.app_data(web::Data::new(sup))
            .app_data(web::PayloadConfig::new(usize::MAX))
            .route("/readyz", web::get().to(readyz))
            .route("/livez", web::get().to(livez))
            .route(&path, web::route().to(endpoint));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                header::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        h
    }

    /// The eleven fields `request_head` fills, in `READ_HEADERS`' order.
    fn read_fields<'a>(head: &RequestHead<'a>) -> [Option<&'a str>; 11] {
        [
            head.accept,
            head.content_type,
            head.session_id,
            head.protocol_version,
            head.origin,
            head.host,
            head.last_event_id,
            head.authorization,
            head.cors_request_method,
            head.mcp_method,
            head.mcp_name,
        ]
    }

    #[test]
    fn request_head_reads_each_header_admission_uses_and_ignores_others() {
        let sent = [
            "application/json",
            "application/json; charset=utf-8",
            "1.abc",
            "2025-11-25",
            "http://localhost",
            "127.0.0.1",
            "cursor",
            "Bearer t",
            "POST",
            "tools/call",
            "echo",
        ];
        // The names as clients send them, written out here (not read from `READ_HEADERS`).
        let names = [
            "Accept",
            "Content-Type",
            "Mcp-Session-Id",
            "MCP-Protocol-Version",
            "Origin",
            "Host",
            "Last-Event-ID",
            "Authorization",
            "Access-Control-Request-Method",
            "Mcp-Method",
            "Mcp-Name",
        ];
        let mut pairs: Vec<(&str, &[u8])> =
            names.iter().zip(sent).map(|(name, v)| (*name, v.as_bytes())).collect();
        pairs.push(("X-Other", b"ignored"));
        let h = headers(&pairs);
        let head = request_head(HttpMethod::Post, &h);
        assert_eq!(read_fields(&head), sent.map(Some));
        assert_eq!(
            (head.invalid_header, head.invalid_session_header, head.invalid_modern_header),
            (None, None, None)
        );
        let other = headers(&[("X-Other", b"1")]);
        let none = request_head(HttpMethod::Get, &other);
        assert_eq!(read_fields(&none), [None; 11]);
        assert_eq!(
            (none.invalid_header, none.invalid_session_header, none.invalid_modern_header),
            (None, None, None)
        );
    }

    #[test]
    fn request_head_reads_a_repeated_headers_first_value_as_a_lookup_does() {
        let h = headers(&[
            ("Mcp-Session-Id", b"first"),
            ("Mcp-Session-Id", b"second"),
            ("Accept", b"text/event-stream"),
            ("Accept", b"\xff"),
        ]);
        let head = request_head(HttpMethod::Post, &h);
        assert_eq!(head.session_id, h.get(SESSION_HEADER).and_then(|v| v.to_str().ok()));
        assert_eq!(head.session_id, Some("first"));
        assert_eq!(head.accept, Some("text/event-stream"));
        assert_eq!(head.invalid_header, None, "a later value is not read, valid or not");
        // A first value that is not visible ASCII is invalid even when a later one is fine.
        let h = headers(&[("Accept", b"\xff"), ("Accept", b"application/json")]);
        let head = request_head(HttpMethod::Post, &h);
        assert_eq!((head.accept, head.invalid_header), (None, Some("Accept")));
    }

    #[test]
    fn request_head_counts_each_unreadable_header_as_its_kind() {
        // A session's headers are the legacy era's to refuse, the mirrored ones 2026-07-28's;
        // the rest are everyone's. Each as sent, with the kind and name its refusal gives
        // (written out here, not read from `READ_HEADERS`).
        enum Kind {
            Any,
            Session,
            Modern,
        }
        let table = [
            ("accept", Kind::Any, "Accept"),
            ("content-type", Kind::Any, "Content-Type"),
            ("mcp-session-id", Kind::Session, "MCP-Session-Id"),
            ("mcp-protocol-version", Kind::Any, "MCP-Protocol-Version"),
            ("origin", Kind::Any, "Origin"),
            ("host", Kind::Any, "Host"),
            ("last-event-id", Kind::Session, "Last-Event-ID"),
            ("authorization", Kind::Any, "Authorization"),
            ("access-control-request-method", Kind::Any, "Access-Control-Request-Method"),
            ("mcp-method", Kind::Modern, "Mcp-Method"),
            ("mcp-name", Kind::Modern, "Mcp-Name"),
        ];
        for (sent, kind, named) in table {
            let h = headers(&[(sent, b"\xff")]);
            let head = request_head(HttpMethod::Post, &h);
            let expected = match kind {
                Kind::Any => (Some(named), None, None),
                Kind::Session => (None, Some(named), None),
                Kind::Modern => (None, None, Some(named)),
            };
            let found =
                (head.invalid_header, head.invalid_session_header, head.invalid_modern_header);
            assert_eq!(found, expected, "{sent}");
            assert_eq!(read_fields(&head), [None; 11], "{sent}: not read as a value");
        }
    }

    #[test]
    fn request_head_names_the_first_invalid_header_of_each_kind_in_a_fixed_order() {
        // Many invalid headers: the same report whatever order the map keeps them in. Each
        // map is seeded at random, so it walks its headers in an order of its own: 64 maps.
        let bad: &[u8] = b"\xff";
        for _ in 0..64 {
            let h = headers(&[
                ("Mcp-Name", bad),
                ("Last-Event-ID", bad),
                ("Host", bad),
                ("Mcp-Method", bad),
                ("Mcp-Session-Id", bad),
                ("Accept", bad),
                ("Origin", b"http://ok"),
            ]);
            let head = request_head(HttpMethod::Post, &h);
            assert_eq!(head.invalid_header, Some("Accept"));
            assert_eq!(head.invalid_session_header, Some("MCP-Session-Id"));
            assert_eq!(head.invalid_modern_header, Some("Mcp-Method"));
            assert_eq!(
                (head.accept, head.session_id, head.origin),
                (None, None, Some("http://ok"))
            );
        }
    }

    #[test]
    fn ipv6_callers_are_counted_by_prefix_and_ipv4_whole() {
        let key =
            |a: &str, p| quota_key(None, Some(a.parse::<std::net::SocketAddr>().unwrap().ip()), p);
        assert_eq!(
            key("[2001:db8:1:2:aaaa::1]:1", 64),
            key("[2001:db8:1:2:bbbb::9]:2", 64),
            "one /64, one caller"
        );
        assert_ne!(key("[2001:db8:1:2::1]:1", 64), key("[2001:db8:1:3::1]:1", 64));
        assert_ne!(
            key("[2001:db8:1:2::1]:1", 128),
            key("[2001:db8:1:2::2]:1", 128),
            "/128 counts single addresses"
        );
        assert_eq!(
            key("[::ffff:10.0.0.1]:1", 64),
            key("10.0.0.1:9", 64),
            "IPv4-mapped is the IPv4 address"
        );
        assert_ne!(key("10.0.0.1:1", 64), key("10.0.0.2:1", 64));
        let p: Arc<str> = "alice".into();
        assert_eq!(
            quota_key(Some(&p), Some("10.0.0.1".parse().unwrap()), 64),
            QuotaKey::Principal(p)
        );
    }
}
