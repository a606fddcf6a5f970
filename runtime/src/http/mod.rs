//! The actix-web `/mcp` endpoint: reads the request head and body, calls
//! [`admit`](crate::proto::admission::admit), and forwards the typed command to the
//! supervisor or a session actor. Every refusal is a [`Rejection`] rendered by the one
//! [`ApiError`] `ResponseError` impl.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use bytes::{Bytes, BytesMut};
use futures_core::Stream as _;
use tokio::sync::oneshot;

use crate::actor::{Delete, OpenGet, Post, PostOutcome, Resume, SseBody, Supervisor};
use crate::proto::admission::{Command, HttpMethod, ReplyMode, RequestHead, admit};
use crate::proto::error::Rejection;
use crate::proto::jsonrpc::{encode_error, encode_result};
use crate::proto::mcp::{InitializeRequest, initialize_result};

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
        b.content_type("application/json").body(encode_error(self.0.id(), &self.0.to_error_object()))
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn method_of(req: &HttpRequest) -> HttpMethod {
    match *req.method() {
        actix_web::http::Method::POST => HttpMethod::Post,
        actix_web::http::Method::GET => HttpMethod::Get,
        actix_web::http::Method::DELETE => HttpMethod::Delete,
        _ => HttpMethod::Other,
    }
}

async fn read_body(mut payload: web::Payload, limit: usize) -> Result<Bytes, Rejection> {
    let mut buf = BytesMut::new();
    while let Some(chunk) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut payload).poll_next(cx)).await {
        let chunk = chunk.map_err(|_| Rejection::InvalidMessage { reason: "could not read the request body".into(), id: None })?;
        if buf.len() + chunk.len() > limit {
            return Err(Rejection::PayloadTooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn sse(body: SseBody) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache, no-transform"))
        .insert_header(("X-Accel-Buffering", "no"))
        .body(body)
}

fn json(bytes: Bytes) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(bytes)
}

/// The `/mcp` handler for every method.
///
/// # Errors
/// [`ApiError`] for every refusal.
pub async fn endpoint(req: HttpRequest, payload: web::Payload, sup: web::Data<Arc<Supervisor>>) -> Result<HttpResponse, ApiError> {
    let cfg = sup.config();
    let method = method_of(&req);
    let h = req.headers();
    let body = if method == HttpMethod::Post {
        let declared = header(h, "content-length").and_then(|v| v.parse::<usize>().ok());
        if declared.is_some_and(|n| n > cfg.admit.max_body_bytes) {
            return Err(Rejection::PayloadTooLarge.into());
        }
        read_body(payload, cfg.admit.max_body_bytes).await?
    } else {
        Bytes::new()
    };
    let head = RequestHead {
        method,
        accept: header(h, "accept"),
        content_type: header(h, "content-type"),
        session_id: header(h, SESSION_HEADER),
        protocol_version: header(h, "mcp-protocol-version"),
        origin: header(h, "origin"),
        host: header(h, "host"),
        last_event_id: header(h, "last-event-id"),
        authorization: header(h, "authorization"),
    };
    let admitted = admit(&head, &body, &cfg.admit)?;
    let principal = admitted.principal;
    match admitted.command {
        Command::Initialize { id, params, reply } => {
            let init = InitializeRequest::from_params(params.as_ref());
            let (session, version) = sup.create_session(principal, &init)?;
            let catalog = sup.catalog();
            let result = initialize_result(version, catalog.capabilities(), catalog.server_info(), catalog.instructions());
            let bytes = encode_result(&id, &result);
            let mut resp = match reply {
                ReplyMode::Json => json(bytes),
                ReplyMode::Sse => sse(SseBody::fixed(vec![crate::sse::data_frame(&bytes)])),
            };
            resp.headers_mut().insert(
                header::HeaderName::from_static(SESSION_HEADER),
                header::HeaderValue::from_str(session.as_str()).map_err(|_| Rejection::Internal)?,
            );
            Ok(resp)
        }
        Command::Post { session, version: _, incoming, reply } => {
            let handle = sup.lookup(&session, principal.as_ref())?;
            let (tx, rx) = oneshot::channel();
            handle.addr.try_send(Post { incoming, reply_mode: reply, reply: tx }).map_err(mailbox_error)?;
            match rx.await.map_err(|_| Rejection::SessionNotFound)?? {
                PostOutcome::Accepted => Ok(HttpResponse::Accepted().finish()),
                PostOutcome::Sse(body) => Ok(sse(body)),
                // The sender is dropped when the request is cancelled: no response is owed.
                PostOutcome::Json(rx) => Ok(rx.await.map_or_else(|_| HttpResponse::Accepted().finish(), json)),
                PostOutcome::Batch(rxs) => {
                    let mut out = Vec::with_capacity(rxs.len());
                    for rx in rxs {
                        if let Ok(b) = rx.await {
                            out.push(b);
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
        Command::OpenStream { session } => {
            let handle = sup.lookup(&session, principal.as_ref())?;
            let (tx, rx) = oneshot::channel();
            handle.addr.try_send(OpenGet { reply: tx }).map_err(mailbox_error)?;
            Ok(sse(rx.await.map_err(|_| Rejection::SessionNotFound)??))
        }
        Command::Resume { session, cursor } => {
            let handle = sup.lookup(&session, principal.as_ref())?;
            let event = handle.signer.decode(&cursor).map_err(|_| Rejection::CursorRejected)?;
            let (tx, rx) = oneshot::channel();
            handle.addr.try_send(Resume { event, reply: tx }).map_err(mailbox_error)?;
            Ok(sse(rx.await.map_err(|_| Rejection::SessionNotFound)??))
        }
        Command::Delete { session } => {
            let handle = sup.lookup(&session, principal.as_ref())?;
            let (tx, rx) = oneshot::channel();
            handle.addr.try_send(Delete { reply: tx }).map_err(mailbox_error)?;
            rx.await.map_err(|_| Rejection::SessionNotFound)??;
            Ok(HttpResponse::NoContent().finish())
        }
    }
}

fn mailbox_error<M>(e: actix::prelude::SendError<M>) -> Rejection {
    match e {
        actix::prelude::SendError::Full(_) => Rejection::Overloaded { retry_after_s: 1 },
        actix::prelude::SendError::Closed(_) => Rejection::SessionNotFound,
    }
}

/// Mount the endpoint at `path` with the supervisor as app data.
pub fn configure(path: &str, sup: Arc<Supervisor>) -> impl FnOnce(&mut web::ServiceConfig) {
    let path = path.to_owned();
    move |cfg: &mut web::ServiceConfig| {
        cfg.app_data(web::Data::new(sup)).app_data(web::PayloadConfig::new(usize::MAX)).route(&path, web::route().to(endpoint));
    }
}
