//! The one error table: every refusal of an HTTP request, its status, its JSON-RPC code and
//! its extra headers, defined once. The HTTP layer renders [`Rejection`] and nothing else;
//! README's error table is generated from the same rows (`Rejection::table`).

use super::ids::JsonRpcId;
use super::jsonrpc::{ErrorObject, code};
use super::limits::{CORS_MAX_PARAM_HEADERS, Limit, LimitExceeded};

/// Why a request was refused with 503 (the server is short of something; not the caller's
/// fault). Each cause has its own `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Overload {
    /// `sessions.max_sessions` live sessions.
    Sessions,
    /// The session's mailbox is full.
    Mailbox,
    /// `sessions.max_in_flight` requests in flight in the session.
    InFlight,
    /// The server is stopping.
    Draining,
    /// The server-wide stream memory budget (`limits.stream_memory_bytes`) is used up.
    StreamMemory,
    /// `modern.max_in_flight` modern requests are running.
    ModernInFlight,
    /// `modern.listen_max` `subscriptions/listen` streams are open.
    Listen,
    /// The ledger cannot commit (its store refuses writes: disk full, locked, I/O errors): a
    /// request that needs a new durable record is refused until it can.
    LedgerFailing,
    /// More than `ledger.queue_max_bytes` wait for the ledger's writer: new durable work is
    /// refused until it catches up.
    LedgerBacklog,
    /// The server-wide request memory budget (`limits.request_memory_bytes`) is held by
    /// requests in flight.
    RequestMemory,
    /// The ledger's reads are behind: as many wait as may (the store is slower than the
    /// traffic).
    LedgerReads,
    /// A resumed stream is served by another host sharing the ledger, and this one cannot
    /// follow it now (as many are followed as may be, or another host is taking it over).
    Elsewhere,
    /// This host's lease on a shared ledger went unrenewed for its length (the process was
    /// paused or cut off): another host may have taken its sessions over, so it answers
    /// nothing from what it holds until it has stopped.
    LeaseLapsed,
}

impl Overload {
    /// Seconds the client should wait.
    #[must_use]
    pub fn retry_after_s(self) -> u32 {
        match self {
            Overload::Mailbox
            | Overload::InFlight
            | Overload::ModernInFlight
            | Overload::Listen
            | Overload::LedgerBacklog
            | Overload::RequestMemory
            | Overload::LedgerReads
            | Overload::Elsewhere
            | Overload::LeaseLapsed => 1,
            Overload::StreamMemory => 2,
            Overload::Sessions | Overload::Draining | Overload::LedgerFailing => 5,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Overload::Sessions => "session limit reached",
            Overload::Mailbox => "session mailbox full",
            Overload::InFlight => "too many requests in flight in this session",
            Overload::Draining => "server is shutting down",
            Overload::StreamMemory => "server-wide stream memory budget is full",
            Overload::ModernInFlight => "too many 2026-07-28 requests running",
            Overload::Listen => "too many subscriptions/listen streams open",
            Overload::LedgerFailing => {
                "the ledger cannot commit right now (its store refuses writes: disk full, locked or failing); nothing was run or recorded, try again"
            }
            Overload::LedgerBacklog => {
                "the ledger is behind (more than ledger.queue_max_bytes wait to be committed); nothing was run or recorded, try again"
            }
            Overload::RequestMemory => "server-wide request memory budget is full",
            Overload::LedgerReads => {
                "the ledger's reads are behind (as many wait as may); nothing was run, try again"
            }
            Overload::Elsewhere => {
                "this stream is served by another host and cannot be followed here right now; resume again"
            }
            Overload::LeaseLapsed => {
                "this host's lease on the shared ledger lapsed (it was paused or cut off); another host serves, try again"
            }
        }
    }
}

/// Which per-principal quota a request broke (429).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quota {
    /// `quotas.sessions_per_principal` live sessions.
    Sessions,
    /// `quotas.session_rate_per_sec` / `session_burst`.
    SessionRate,
    /// `quotas.stream_memory_per_principal`: the caller's share of the stream memory budget.
    StreamMemory,
    /// `modern.listen_per_caller` `subscriptions/listen` streams open.
    Listen,
    /// `tasks.max_per_caller` tasks running (or `tasks.max_kept_per_caller` kept, or
    /// `tasks.bytes_per_caller` of results kept), for a tool that needs a task.
    Tasks,
    /// `ledger.receipts_per_caller` idempotency receipts kept, or
    /// `ledger.receipt_bytes_per_caller` of them.
    Receipts,
    /// `modern.max_in_flight_per_caller` 2026-07-28 requests of the caller running.
    ModernInFlight,
    /// `auth.oauth.failures_per_sec` refused tokens from the client's address (OAuth): no
    /// more are checked until its bucket refills.
    AuthFailures,
}

/// A store of the ledger whose server-wide byte bound is reached (503).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreBound {
    /// Idempotency receipts: `ledger.receipt_bytes_total`.
    Receipts,
    /// Kept tasks: `tasks.bytes_total`.
    Tasks,
}

/// A typed refusal of an HTTP request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// `Origin` present and not allowed (DNS rebinding / cross-site defence).
    #[error("Forbidden: origin not allowed")]
    OriginNotAllowed,
    /// `Host` not allowed (DNS rebinding defence on loopback binds).
    #[error("Forbidden: host not allowed")]
    HostNotAllowed,
    /// Authentication is configured and the bearer token is missing or unknown.
    #[error("Unauthorized: missing or invalid bearer token")]
    Unauthorized,
    /// OAuth: a bearer token was sent and is not accepted (signature, issuer, audience,
    /// expiry, or an introspection that says it is not active).
    #[error("Unauthorized: the access token is not accepted")]
    InvalidToken,
    /// OAuth: the token lacks a scope the request needs (the scopes it needs, sorted).
    #[error("Forbidden: the access token lacks a scope this request needs")]
    InsufficientScope(std::sync::Arc<[Box<str>]>),
    /// An access token in the query string (MCP: tokens go in the `Authorization` header only).
    #[error("Bad Request: access tokens are accepted in the Authorization header only")]
    TokenInQuery,
    /// OAuth: no authorization server that could accept the token answered in time.
    #[error("Service Unavailable: the authorization server could not be asked")]
    AuthUnavailable,
    /// Neither JSON nor SSE is acceptable to the client (POST), or SSE is not (GET).
    #[error("Not Acceptable: client must accept application/json or text/event-stream")]
    NotAcceptable,
    /// POST body is not declared as JSON.
    #[error("Unsupported Media Type: Content-Type must be application/json")]
    UnsupportedMediaType,
    /// Body larger than the configured limit.
    #[error("Payload Too Large")]
    PayloadTooLarge,
    /// The body did not arrive in full within `security.body_read_timeout_ms`.
    #[error("Request Timeout: the request body did not arrive in time")]
    BodyTimeout,
    /// HTTP method other than POST, GET, DELETE (or an OPTIONS that is no CORS preflight).
    #[error("Method Not Allowed")]
    MethodNotAllowed,
    /// A header the endpoint reads is not visible ASCII.
    #[error("Bad Request: the {0} header is not visible ASCII")]
    InvalidHeader(&'static str),
    /// A CORS preflight asks for more than [`CORS_MAX_PARAM_HEADERS`] `Mcp-Param-*` headers.
    #[error(
        "Bad Request: Access-Control-Request-Headers names more than {CORS_MAX_PARAM_HEADERS} Mcp-Param-* headers"
    )]
    TooManyParamHeaders,
    /// Body is not JSON.
    #[error("Parse error")]
    Parse,
    /// Body is JSON but not an acceptable JSON-RPC message for this endpoint.
    #[error("Invalid request: {reason}")]
    InvalidMessage {
        /// Why.
        reason: String,
        /// The request id, when readable.
        id: Option<JsonRpcId>,
    },
    /// The message is over a size bound (by parsed size, length, or count).
    #[error("Bad Request: {} exceeds its limit of {}", .0.limit.describe(), .0.max)]
    LimitExceeded(LimitExceeded),
    /// No `MCP-Session-Id` on a request that needs one.
    #[error("Bad Request: missing MCP-Session-Id header")]
    MissingSession,
    /// `MCP-Session-Id` is unknown, terminated, expired, or belongs to another caller.
    #[error("Session not found")]
    SessionNotFound,
    /// `MCP-Protocol-Version` names a version this server does not support.
    #[error("Bad Request: unsupported MCP-Protocol-Version {0:?}")]
    UnsupportedVersion(String),
    /// `initialize` sent on a request that already carries a session id.
    #[error("Bad Request: session already initialized")]
    AlreadyInitialized,
    /// A request with this id is still in flight in this session.
    #[error("Conflict: request id {0} is already in flight in this session")]
    RequestIdInFlight(JsonRpcId),
    /// `Last-Event-ID` is malformed, forged, or from another stream, session or caller.
    #[error("Bad Request: Last-Event-ID was not issued for this session")]
    CursorRejected,
    /// The stream a cursor names is no longer retained, or (standalone GET stream) events
    /// after the cursor were evicted from its replay window.
    #[error("Gone: events after Last-Event-ID are no longer available")]
    EventsLost,
    /// An answer to a server-to-client request asked by a request that ran on a host that
    /// has stopped (a shared ledger): no request waits for it.
    #[error(
        "Gone: the request that asked for this answer ran on a host that has stopped; nothing waits for it (resume that request's stream: it ends with -32009)"
    )]
    AskerGone,
    /// The caller is over a per-principal quota.
    #[error("Too Many Requests: {}", match .cause {
        Quota::Sessions => "too many live sessions for this caller",
        Quota::SessionRate => "sessions created too fast by this caller",
        Quota::StreamMemory => "this caller's share of the stream memory budget is full",
        Quota::Listen => "too many subscriptions/listen streams open for this caller",
        Quota::Tasks => "too many tasks of this caller are running or kept",
        Quota::Receipts => "this caller keeps as many idempotency receipts as it may (by count or bytes); the tool was not run",
        Quota::ModernInFlight => "too many 2026-07-28 requests of this caller are running",
        Quota::AuthFailures => "too many refused access tokens from this address",
    })]
    QuotaExceeded {
        /// Which quota.
        cause: Quota,
        /// Seconds the client should wait.
        retry_after_s: u32,
    },
    /// The server is short of a resource.
    #[error("Service Unavailable: {}", .0.describe())]
    Overloaded(Overload),
    /// A store of the ledger holds as many bytes as the server keeps for it, over all callers.
    #[error("Service Unavailable: {}", match .store {
        StoreBound::Receipts => "the server keeps as many idempotency receipts as it may (ledger.receipt_bytes_total); the tool was not run",
        StoreBound::Tasks => "the server keeps as many task results as it may (tasks.bytes_total)",
    })]
    StoreFull {
        /// Which store.
        store: StoreBound,
        /// Seconds until its oldest entry expires.
        retry_after_s: u32,
    },
    /// Anything unexpected. The client sees a generic text; details go to the log.
    #[error("Internal error")]
    Internal,
    /// A modern (2026-07-28) request refused before it ran (SPEC.md §3.11).
    #[error("{}", modern_message(.error))]
    Modern {
        /// Why.
        error: super::stateless::ModernError,
        /// The request id, echoed.
        id: Option<JsonRpcId>,
    },
    /// Another refusal of a request whose id was read (a 2026-07-28 request: every error
    /// echoes its id): status, code, headers and cause are the inner refusal's.
    #[error("{0}")]
    WithId(Box<Rejection>, JsonRpcId),
    /// A modern request's tool needs a client capability the request did not declare.
    #[error("Missing required client capability: {}", .capabilities)]
    MissingCapability {
        /// `requiredCapabilities` (a `ClientCapabilities` object).
        capabilities: serde_json::Value,
        /// The request id, echoed.
        id: JsonRpcId,
    },
}

fn modern_message(e: &super::stateless::ModernError) -> String {
    use super::stateless::ModernError as M;
    match e {
        M::HeaderMismatch(why) => format!("Header mismatch: {why}"),
        M::InvalidMeta(why) => format!("Invalid params: {why}"),
        M::UnsupportedVersion(v) => format!("Unsupported protocol version {v:?}; this server supports {} (and the legacy versions through initialize)", super::stateless::MODERN_VERSIONS.join(", ")),
        M::MethodNotFound(m) if super::stateless::REMOVED_METHODS.contains(&m.as_str()) => format!(
            "Method not found: {m} does not exist in protocol {}; legacy clients use initialize with one of {}",
            super::stateless::VERSION,
            super::version::SUPPORTED.map(|v| v.as_str()).join(", ")
        ),
        M::MethodNotFound(m) => format!("Method not found: {m}"),
        M::InvalidRequest(why) => format!("Invalid request: {why}"),
        M::InvalidInput(why) => format!("Invalid params: {why}"),
        M::NoSessionMethods => "Method Not Allowed: protocol 2026-07-28 has no sessions, so no GET stream and no DELETE; POST every request (subscriptions/listen for notifications)".into(),
    }
}

impl Rejection {
    /// HTTP status code.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Rejection::WithId(inner, _) => inner.status(),
            Rejection::OriginNotAllowed | Rejection::HostNotAllowed => 403,
            Rejection::Unauthorized | Rejection::InvalidToken => 401,
            Rejection::InsufficientScope(_) => 403,
            Rejection::TokenInQuery => 400,
            Rejection::AuthUnavailable => 503,
            Rejection::NotAcceptable => 406,
            Rejection::UnsupportedMediaType => 415,
            Rejection::PayloadTooLarge => 413,
            Rejection::BodyTimeout => 408,
            Rejection::MethodNotAllowed => 405,
            Rejection::InvalidHeader(_)
            | Rejection::TooManyParamHeaders
            | Rejection::Parse
            | Rejection::InvalidMessage { .. }
            | Rejection::LimitExceeded(_)
            | Rejection::MissingSession
            | Rejection::UnsupportedVersion(_)
            | Rejection::AlreadyInitialized
            | Rejection::CursorRejected => 400,
            Rejection::SessionNotFound => 404,
            Rejection::RequestIdInFlight(_) => 409,
            Rejection::EventsLost | Rejection::AskerGone => 410,
            Rejection::QuotaExceeded { .. } => 429,
            Rejection::Overloaded(_) | Rejection::StoreFull { .. } => 503,
            Rejection::Internal => 500,
            Rejection::Modern {
                error: super::stateless::ModernError::MethodNotFound(_), ..
            } => 404,
            Rejection::Modern {
                error: super::stateless::ModernError::NoSessionMethods, ..
            } => 405,
            Rejection::Modern { .. } | Rejection::MissingCapability { .. } => 400,
        }
    }

    /// JSON-RPC error code of the body.
    #[must_use]
    pub fn code(&self) -> i64 {
        match self {
            Rejection::WithId(inner, _) => inner.code(),
            Rejection::Parse => code::PARSE_ERROR,
            Rejection::InvalidMessage { .. }
            | Rejection::AlreadyInitialized
            | Rejection::LimitExceeded(_) => code::INVALID_REQUEST,
            Rejection::SessionNotFound => code::SESSION_NOT_FOUND,
            Rejection::RequestIdInFlight(_) => code::REQUEST_ID_IN_FLIGHT,
            Rejection::CursorRejected => code::CURSOR_REJECTED,
            Rejection::EventsLost => code::EVENTS_LOST,
            Rejection::AskerGone => code::ASKER_GONE,
            Rejection::QuotaExceeded { .. } => code::QUOTA_EXCEEDED,
            Rejection::Overloaded(_) | Rejection::StoreFull { .. } => code::OVERLOADED,
            Rejection::Internal => code::INTERNAL_ERROR,
            Rejection::Modern { error, .. } => match error {
                super::stateless::ModernError::HeaderMismatch(_) => code::HEADER_MISMATCH,
                super::stateless::ModernError::InvalidMeta(_)
                | super::stateless::ModernError::InvalidInput(_) => code::INVALID_PARAMS,
                super::stateless::ModernError::UnsupportedVersion(_) => {
                    code::UNSUPPORTED_PROTOCOL_VERSION
                }
                super::stateless::ModernError::MethodNotFound(_) => code::METHOD_NOT_FOUND,
                super::stateless::ModernError::InvalidRequest(_) => code::INVALID_REQUEST,
                super::stateless::ModernError::NoSessionMethods => code::TRANSPORT,
            },
            Rejection::MissingCapability { .. } => code::MISSING_CLIENT_CAPABILITY,
            Rejection::OriginNotAllowed
            | Rejection::HostNotAllowed
            | Rejection::Unauthorized
            | Rejection::InvalidToken
            | Rejection::InsufficientScope(_)
            | Rejection::TokenInQuery
            | Rejection::AuthUnavailable
            | Rejection::NotAcceptable
            | Rejection::UnsupportedMediaType
            | Rejection::PayloadTooLarge
            | Rejection::BodyTimeout
            | Rejection::MethodNotAllowed
            | Rejection::InvalidHeader(_)
            | Rejection::TooManyParamHeaders
            | Rejection::MissingSession
            | Rejection::UnsupportedVersion(_) => code::TRANSPORT,
        }
    }

    /// The request id the error body echoes, when one was readable.
    #[must_use]
    pub fn id(&self) -> Option<&JsonRpcId> {
        match self {
            Rejection::InvalidMessage { id, .. } | Rejection::Modern { id, .. } => id.as_ref(),
            Rejection::RequestIdInFlight(id)
            | Rejection::MissingCapability { id, .. }
            | Rejection::WithId(_, id) => Some(id),
            _ => None,
        }
    }

    /// `Retry-After` seconds, for 429 and 503.
    #[must_use]
    pub fn retry_after_s(&self) -> Option<u32> {
        match self {
            Rejection::WithId(inner, _) => inner.retry_after_s(),
            Rejection::QuotaExceeded { retry_after_s, .. }
            | Rejection::StoreFull { retry_after_s, .. } => Some(*retry_after_s),
            Rejection::Overloaded(cause) => Some(cause.retry_after_s()),
            Rejection::AuthUnavailable => Some(1),
            _ => None,
        }
    }

    /// Extra response headers: `(name, value)`.
    #[must_use]
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        if let Some(s) = self.retry_after_s() {
            return vec![("Retry-After", s.to_string())];
        }
        match self {
            Rejection::WithId(inner, _) => inner.headers(),
            Rejection::Unauthorized
            | Rejection::InvalidToken
            | Rejection::InsufficientScope(_)
            | Rejection::TokenInQuery => {
                vec![("WWW-Authenticate", self.challenge(None, &[]))]
            }
            Rejection::MethodNotAllowed => vec![("Allow", "GET, POST, DELETE, OPTIONS".into())],
            Rejection::Modern {
                error: super::stateless::ModernError::NoSessionMethods, ..
            } => {
                vec![("Allow", "POST, OPTIONS".into())]
            }
            _ => Vec::new(),
        }
    }

    /// The `WWW-Authenticate` value of an authentication refusal, with the Protected Resource
    /// Metadata URL and the scopes the request needs when OAuth is on (the scopes of an
    /// insufficient-scope refusal are its own).
    #[must_use]
    pub fn challenge(&self, resource_metadata: Option<&str>, scopes: &[Box<str>]) -> String {
        use super::oauth::{BearerError, challenge};
        match self.inner() {
            Rejection::InvalidToken => {
                challenge(resource_metadata, scopes, Some(BearerError::InvalidToken))
            }
            Rejection::InsufficientScope(needed) => {
                challenge(resource_metadata, needed, Some(BearerError::InsufficientScope))
            }
            Rejection::TokenInQuery => {
                challenge(resource_metadata, &[], Some(BearerError::InvalidRequest))
            }
            _ => challenge(resource_metadata, scopes, None),
        }
    }

    /// Whether this refusal is about the caller's credentials (it carries a
    /// `WWW-Authenticate` challenge).
    #[must_use]
    pub fn is_challenge(&self) -> bool {
        matches!(
            self.inner(),
            Rejection::Unauthorized
                | Rejection::InvalidToken
                | Rejection::InsufficientScope(_)
                | Rejection::TokenInQuery
        )
    }

    /// The JSON-RPC error object of the body.
    #[must_use]
    pub fn to_error_object(&self) -> ErrorObject {
        if let Rejection::WithId(inner, _) = self {
            return inner.to_error_object();
        }
        let e = ErrorObject::new(self.code(), self.to_string());
        match self {
            Rejection::UnsupportedVersion(_) => e.with_data(serde_json::json!({
                "supported": super::version::SUPPORTED.map(|v| v.as_str()),
            })),
            Rejection::LimitExceeded(l) => {
                e.with_data(serde_json::json!({"limit": l.limit.describe(), "max": l.max}))
            }
            Rejection::Modern {
                error: super::stateless::ModernError::UnsupportedVersion(v),
                ..
            } => e.with_data(
                serde_json::json!({"supported": super::stateless::MODERN_VERSIONS, "requested": v}),
            ),
            Rejection::MissingCapability { capabilities, .. } => {
                e.with_data(serde_json::json!({"requiredCapabilities": capabilities}))
            }
            _ => e,
        }
    }

    /// This refusal, echoing `id` when it carries none of its own.
    #[must_use]
    pub fn with_id(self, id: &JsonRpcId) -> Rejection {
        if self.id().is_some() { self } else { Rejection::WithId(Box::new(self), id.clone()) }
    }

    /// The refusal itself, without an id wrapper.
    #[must_use]
    pub fn inner(&self) -> &Rejection {
        match self {
            Rejection::WithId(inner, _) => inner.inner(),
            other => other,
        }
    }

    /// A short, stable name of the refusal's cause, for counters (`refused.<cause>`).
    #[must_use]
    pub fn cause(&self) -> &'static str {
        match self {
            Rejection::WithId(inner, _) => inner.cause(),
            Rejection::OriginNotAllowed => "origin",
            Rejection::HostNotAllowed => "host",
            Rejection::Unauthorized => "unauthorized",
            Rejection::InvalidToken => "invalid_token",
            Rejection::InsufficientScope(_) => "insufficient_scope",
            Rejection::TokenInQuery => "token_in_query",
            Rejection::AuthUnavailable => "auth_unavailable",
            Rejection::NotAcceptable => "not_acceptable",
            Rejection::UnsupportedMediaType => "media_type",
            Rejection::PayloadTooLarge => "body_too_large",
            Rejection::BodyTimeout => "body_timeout",
            Rejection::MethodNotAllowed => "method",
            Rejection::InvalidHeader(_) => "invalid_header",
            Rejection::TooManyParamHeaders => "preflight_headers",
            Rejection::Parse => "parse",
            Rejection::InvalidMessage { .. } => "invalid_message",
            Rejection::LimitExceeded(l) => match l.limit {
                Limit::JsonDepth | Limit::JsonValues => "limit.json",
                Limit::Capabilities(_) | Limit::ClientInfo(_) => "limit.handshake",
                Limit::IdLength
                | Limit::MethodLength
                | Limit::NameLength
                | Limit::UriLength
                | Limit::ProgressToken => "limit.length",
                Limit::BatchItems => "limit.batch",
            },
            Rejection::MissingSession => "missing_session",
            Rejection::SessionNotFound => "session_not_found",
            Rejection::UnsupportedVersion(_) => "version",
            Rejection::AlreadyInitialized => "already_initialized",
            Rejection::RequestIdInFlight(_) => "id_in_flight",
            Rejection::CursorRejected => "cursor_rejected",
            Rejection::EventsLost => "events_lost",
            Rejection::AskerGone => "asker_gone",
            Rejection::QuotaExceeded { cause: Quota::Sessions, .. } => "quota.sessions",
            Rejection::QuotaExceeded { cause: Quota::SessionRate, .. } => "quota.session_rate",
            Rejection::QuotaExceeded { cause: Quota::StreamMemory, .. } => "quota.stream_memory",
            Rejection::QuotaExceeded { cause: Quota::Listen, .. } => "quota.listen",
            Rejection::QuotaExceeded { cause: Quota::Tasks, .. } => "quota.tasks",
            Rejection::QuotaExceeded { cause: Quota::Receipts, .. } => "quota.receipts",
            Rejection::QuotaExceeded { cause: Quota::AuthFailures, .. } => "quota.auth_failures",
            Rejection::QuotaExceeded { cause: Quota::ModernInFlight, .. } => {
                "quota.modern_in_flight"
            }
            Rejection::StoreFull { store: StoreBound::Receipts, .. } => "overloaded.receipts",
            Rejection::StoreFull { store: StoreBound::Tasks, .. } => "overloaded.tasks",
            Rejection::Overloaded(Overload::Sessions) => "overloaded.sessions",
            Rejection::Overloaded(Overload::Mailbox) => "overloaded.mailbox",
            Rejection::Overloaded(Overload::InFlight) => "overloaded.in_flight",
            Rejection::Overloaded(Overload::Draining) => "overloaded.draining",
            Rejection::Overloaded(Overload::StreamMemory) => "overloaded.stream_memory",
            Rejection::Overloaded(Overload::ModernInFlight) => "overloaded.modern_in_flight",
            Rejection::Overloaded(Overload::Listen) => "overloaded.listen",
            Rejection::Overloaded(Overload::LedgerFailing) => "overloaded.ledger_failing",
            Rejection::Overloaded(Overload::LedgerBacklog) => "overloaded.ledger_backlog",
            Rejection::Overloaded(Overload::RequestMemory) => "overloaded.request_memory",
            Rejection::Overloaded(Overload::LedgerReads) => "overloaded.ledger_reads",
            Rejection::Overloaded(Overload::Elsewhere) => "overloaded.elsewhere",
            Rejection::Overloaded(Overload::LeaseLapsed) => "overloaded.lease_lapsed",
            Rejection::Internal => "internal",
            Rejection::Modern { error, .. } => match error {
                super::stateless::ModernError::HeaderMismatch(_) => "modern.header_mismatch",
                super::stateless::ModernError::InvalidMeta(_) => "modern.invalid_meta",
                super::stateless::ModernError::UnsupportedVersion(_) => "modern.version",
                super::stateless::ModernError::MethodNotFound(_) => "modern.method_not_found",
                super::stateless::ModernError::InvalidRequest(_) => "modern.invalid_request",
                super::stateless::ModernError::InvalidInput(_) => "modern.invalid_input",
                super::stateless::ModernError::NoSessionMethods => "modern.no_session_methods",
            },
            Rejection::MissingCapability { .. } => "modern.missing_capability",
        }
    }

    /// Every value [`Rejection::cause`] can return.
    pub const CAUSES: [&'static str; 60] = [
        "origin",
        "host",
        "unauthorized",
        "invalid_token",
        "insufficient_scope",
        "token_in_query",
        "auth_unavailable",
        "not_acceptable",
        "media_type",
        "body_too_large",
        "body_timeout",
        "method",
        "invalid_header",
        "preflight_headers",
        "parse",
        "invalid_message",
        "limit.json",
        "limit.handshake",
        "limit.length",
        "limit.batch",
        "missing_session",
        "session_not_found",
        "version",
        "already_initialized",
        "id_in_flight",
        "cursor_rejected",
        "events_lost",
        "asker_gone",
        "quota.sessions",
        "quota.session_rate",
        "quota.stream_memory",
        "quota.listen",
        "quota.tasks",
        "quota.receipts",
        "quota.modern_in_flight",
        "quota.auth_failures",
        "overloaded.receipts",
        "overloaded.tasks",
        "overloaded.sessions",
        "overloaded.mailbox",
        "overloaded.in_flight",
        "overloaded.draining",
        "overloaded.stream_memory",
        "overloaded.modern_in_flight",
        "overloaded.listen",
        "overloaded.ledger_failing",
        "overloaded.ledger_backlog",
        "overloaded.request_memory",
        "overloaded.ledger_reads",
        "overloaded.elsewhere",
        "overloaded.lease_lapsed",
        "internal",
        "modern.header_mismatch",
        "modern.invalid_meta",
        "modern.version",
        "modern.method_not_found",
        "modern.invalid_request",
        "modern.invalid_input",
        "modern.no_session_methods",
        "modern.missing_capability",
    ];

    /// One representative of every variant, for the table test and README.
    #[must_use]
    pub fn table() -> Vec<(Rejection, &'static str)> {
        use super::stateless::ModernError as M;
        let limit = |limit| Rejection::LimitExceeded(LimitExceeded { limit, max: 1 });
        let modern = |error| Rejection::Modern { error, id: Some(JsonRpcId::Number(1)) };
        vec![
            (
                Rejection::OriginNotAllowed,
                "`Origin` present and not in the allow-list (also on a CORS preflight)",
            ),
            (
                Rejection::HostNotAllowed,
                "`Host` not allowed (loopback binds accept only localhost names)",
            ),
            (
                Rejection::Unauthorized,
                "auth configured; no bearer token, or (static tokens only) an unknown one",
            ),
            (
                Rejection::InvalidToken,
                "OAuth: the access token is not accepted (`error=\"invalid_token\"`): signature, algorithm, issuer, audience not this resource, expired, not yet valid, or introspection says inactive",
            ),
            (
                Rejection::InsufficientScope(std::sync::Arc::from(vec![Box::from("s")])),
                "OAuth: the token lacks a scope the request needs (`error=\"insufficient_scope\"`, `scope=` what it needs)",
            ),
            (
                Rejection::TokenInQuery,
                "an `access_token` in the query string (`error=\"invalid_request\"`)",
            ),
            (
                Rejection::AuthUnavailable,
                "OAuth: no authorization server that could accept the token answered (keys or introspection) within `auth.oauth.fetch_timeout_ms` (a JWT: twice that; an opaque token: that per introspecting server), or its answer was not one",
            ),
            (
                Rejection::NotAcceptable,
                "POST accepts neither JSON nor SSE; GET does not accept SSE",
            ),
            (
                Rejection::UnsupportedMediaType,
                "POST `Content-Type` is present and not `application/json`",
            ),
            (
                Rejection::PayloadTooLarge,
                "body larger than `security.max_body_bytes` (checked against `Content-Length` before reading, and while reading)",
            ),
            (
                Rejection::BodyTimeout,
                "the body did not arrive in full within `security.body_read_timeout_ms`",
            ),
            (
                Rejection::MethodNotAllowed,
                "method other than POST, GET, DELETE; OPTIONS that is not a CORS preflight",
            ),
            (
                Rejection::InvalidHeader("Last-Event-ID"),
                "a header the endpoint reads (`Accept`, `Content-Type`, `Origin`, `Host`, `Authorization`, `MCP-Session-Id`, `MCP-Protocol-Version`, `Last-Event-ID`, `Access-Control-Request-Method`) is not visible ASCII",
            ),
            (
                Rejection::TooManyParamHeaders,
                "a CORS preflight's `Access-Control-Request-Headers` names more than 64 `Mcp-Param-*` headers (repeats count)",
            ),
            (Rejection::Parse, "body is not JSON"),
            (
                Rejection::InvalidMessage { reason: "example".into(), id: None },
                "not JSON-RPC 2.0; `null` id; batch on a session newer than 2025-03-26; `initialize` in a batch",
            ),
            (
                limit(Limit::JsonValues),
                "body deeper or with more values than `limits.json_*`; `initialize` `capabilities` or `clientInfo` over `limits.handshake_*`; string id, method, tool/prompt name or URI longer than its `limits.*_max_bytes`; a `_meta.progressToken` that is not a number or a string of at most `limits.id_max_bytes`; batch over `limits.batch_max_items` (`data` names the limit)",
            ),
            (Rejection::MissingSession, "no `MCP-Session-Id` on a non-`initialize` request"),
            (
                Rejection::SessionNotFound,
                "session unknown, deleted (also while its request was running), expired, or owned by another caller",
            ),
            (
                Rejection::UnsupportedVersion("1999-01-01".into()),
                "`MCP-Protocol-Version` not supported",
            ),
            (Rejection::AlreadyInitialized, "`initialize` sent with an `MCP-Session-Id`"),
            (
                Rejection::RequestIdInFlight(JsonRpcId::Number(1)),
                "request id already in flight in the session",
            ),
            (
                Rejection::CursorRejected,
                "`Last-Event-ID` malformed, forged, or from another stream/session/caller",
            ),
            (
                Rejection::EventsLost,
                "GET resume: the stream is no longer retained, or (standalone GET stream) events after the cursor were evicted",
            ),
            (
                Rejection::AskerGone,
                "a client's answer to a server-to-client request (elicitation, sampling, roots) whose asking request ran on another host sharing the ledger that has stopped (its lease lapsed): nothing waits for it; a resume of that request's stream ends it with `-32009`",
            ),
            (
                Rejection::QuotaExceeded { cause: Quota::Sessions, retry_after_s: 5 },
                "the caller (principal, or client address without auth) has `quotas.sessions_per_principal` live sessions (`Retry-After: 5`), creates them faster than `quotas.session_rate_per_sec` (`Retry-After`: when the next is allowed), or its share `quotas.stream_memory_per_principal` of the stream memory is full for a request that would open a stream or session (`Retry-After: 2`), or holds `modern.listen_per_caller` open `subscriptions/listen` streams (`Retry-After: 1`), or runs `tasks.max_per_caller` tasks (`Retry-After: 1`) or keeps `tasks.max_kept_per_caller` or `tasks.bytes_per_caller` (`Retry-After`: until its oldest expires) when calling a tool that needs one, or keeps `ledger.receipts_per_caller` idempotency receipts or `ledger.receipt_bytes_per_caller` of them for a keyed write-tool call (`Retry-After`: until its oldest expires; the tool did not run), or runs `modern.max_in_flight_per_caller` 2026-07-28 requests (`Retry-After: 1`), or (OAuth) sent more refused tokens from its address than `auth.oauth.failures_burst`, refilled at `auth.oauth.failures_per_sec` (`Retry-After`: when the next is checked)",
            ),
            (
                Rejection::Overloaded(Overload::Sessions),
                "`sessions.max_sessions` reached (`Retry-After: 5`), the server is draining: every new request, `initialize` included (`shutdown.retry_after_secs`, default 5), session mailbox full (1), `sessions.max_in_flight` reached (1), `modern.max_in_flight` 2026-07-28 requests running (1), `modern.listen_max` `subscriptions/listen` streams open (1), or the stream memory budget `limits.stream_memory_bytes` is full for a request that would open a stream (2), the request memory budget `limits.request_memory_bytes` is held by requests in flight (1), the ledger's reads are behind (1,024 wait) for a request that needs one (1), a resumed stream another host serves cannot be followed here now (4,096 followed, or another host is taking it over) (1), this host's lease on a shared ledger may have lapsed (its last successful renewal was sent more than a lease ago, or a renewal found it gone: each request read from then until the process stops, exit status 3) (1); the ledger cannot commit (5: a refused commit, or one unanswered for `ledger.commit_wait_ms`) or is more than `ledger.queue_max_bytes` behind (1) and the request needs a new durable record (`initialize` and reviving a session on a durable ledger, a keyed write-tool call, a tool that keeps state handles, a task, a resumable stream; the message names the ledger)",
            ),
            (
                Rejection::StoreFull { store: StoreBound::Receipts, retry_after_s: 60 },
                "the idempotency receipts of every caller hold `ledger.receipt_bytes_total` (a keyed write-tool call; the tool did not run), or the kept tasks `tasks.bytes_total` (a tool that needs a task); `Retry-After`: until the oldest expires",
            ),
            (Rejection::Internal, "unexpected server error (details only in the log)"),
            (
                modern(M::HeaderMismatch("example".into())),
                "modern request: `MCP-Protocol-Version` missing or different from `_meta`'s version; `Mcp-Method` missing or different from the body's method; `Mcp-Name` missing or different from `params.name` (`tools/call`, `prompts/get`) or `params.uri` (`resources/read`), after base64-sentinel decoding; an `Mcp-Param-*` header missing, extra, undecodable or different from its annotated argument (integers compared as numbers)",
            ),
            (
                modern(M::InvalidMeta("example".into())),
                "modern request: `_meta` lacks `io.modelcontextprotocol/protocolVersion` or `clientCapabilities`, or one of its fields has the wrong type (`clientInfo` not an object, an unknown `logLevel`)",
            ),
            (
                modern(M::UnsupportedVersion("2099-01-01".into())),
                "modern request naming a version other than 2026-07-28 (`data.supported`, `data.requested`)",
            ),
            (
                Rejection::MissingCapability {
                    capabilities: serde_json::json!({"sampling": {}}),
                    id: JsonRpcId::Number(1),
                },
                "modern request: the tool needs a client capability the request's `clientCapabilities` lack (`data.requiredCapabilities`); a call of a tool that needs a task, or a `tasks/*` request, without the tasks extension in them",
            ),
            (
                modern(M::MethodNotFound("ping".into())),
                "modern request for an unknown method or one removed in 2026-07-28 (`initialize`, `ping`, `logging/setLevel`, `resources/subscribe`, `resources/unsubscribe`, `notifications/initialized`); the message names the supported versions",
            ),
            (
                modern(M::InvalidRequest("example".into())),
                "modern request body that is a batch or a JSON-RPC response (clients send only requests and notifications in 2026-07-28)",
            ),
            (
                modern(M::InvalidInput("example".into())),
                "modern retry of an `input_required` result: `inputResponses` not an object, or `requestState` altered, expired (`modern.request_state_ttl_secs`), issued to another caller or for another request; a `subscriptions/listen` filter (`params.notifications`) missing or malformed, or naming more than `modern.listen_max_uris` URIs",
            ),
            (
                modern(M::NoSessionMethods),
                "GET or DELETE with a 2026-07-28 `MCP-Protocol-Version` and no `MCP-Session-Id` (that era has no sessions; `Allow: POST, OPTIONS`)",
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::super::limits::HandshakeBound;
    use super::*;

    #[test]
    fn every_rejection_has_its_documented_status_and_code() {
        let expected: &[(u16, i64)] = &[
            (403, code::TRANSPORT),
            (403, code::TRANSPORT),
            (401, code::TRANSPORT),
            (401, code::TRANSPORT),
            (403, code::TRANSPORT),
            (400, code::TRANSPORT),
            (503, code::TRANSPORT),
            (406, code::TRANSPORT),
            (415, code::TRANSPORT),
            (413, code::TRANSPORT),
            (408, code::TRANSPORT),
            (405, code::TRANSPORT),
            (400, code::TRANSPORT),
            (400, code::TRANSPORT),
            (400, code::PARSE_ERROR),
            (400, code::INVALID_REQUEST),
            (400, code::INVALID_REQUEST),
            (400, code::TRANSPORT),
            (404, code::SESSION_NOT_FOUND),
            (400, code::TRANSPORT),
            (400, code::INVALID_REQUEST),
            (409, code::REQUEST_ID_IN_FLIGHT),
            (400, code::CURSOR_REJECTED),
            (410, code::EVENTS_LOST),
            (410, code::ASKER_GONE),
            (429, code::QUOTA_EXCEEDED),
            (503, code::OVERLOADED),
            (503, code::OVERLOADED),
            (500, code::INTERNAL_ERROR),
            (400, code::HEADER_MISMATCH),
            (400, code::INVALID_PARAMS),
            (400, code::UNSUPPORTED_PROTOCOL_VERSION),
            (400, code::MISSING_CLIENT_CAPABILITY),
            (404, code::METHOD_NOT_FOUND),
            (400, code::INVALID_REQUEST),
            (400, code::INVALID_PARAMS),
            (405, code::TRANSPORT),
        ];
        let table = Rejection::table();
        assert_eq!(table.len(), expected.len());
        for ((r, _), (status, code)) in table.iter().zip(expected) {
            assert_eq!((r.status(), r.code()), (*status, *code), "{r:?}");
        }
    }

    #[test]
    fn unresumable_cursor_is_never_404_or_2xx() {
        for r in [Rejection::CursorRejected, Rejection::EventsLost] {
            assert_ne!(r.status(), 404);
            assert!(r.status() >= 400 && r.status() < 500);
        }
    }

    #[test]
    fn overload_and_quota_carry_retry_after_by_cause_and_auth_its_challenge() {
        assert_eq!(
            Rejection::Overloaded(Overload::InFlight).headers(),
            vec![("Retry-After", "1".to_string())]
        );
        assert_eq!(
            Rejection::Overloaded(Overload::Sessions).headers(),
            vec![("Retry-After", "5".to_string())]
        );
        assert_eq!(
            Rejection::Overloaded(Overload::StreamMemory).headers(),
            vec![("Retry-After", "2".to_string())]
        );
        let q = Rejection::QuotaExceeded { cause: Quota::SessionRate, retry_after_s: 3 };
        assert_eq!((q.status(), q.headers()), (429, vec![("Retry-After", "3".to_string())]));
        assert_eq!(Rejection::Unauthorized.headers()[0].0, "WWW-Authenticate");
        assert_eq!(
            Rejection::MethodNotAllowed.headers()[0],
            ("Allow", "GET, POST, DELETE, OPTIONS".to_string())
        );
    }

    #[test]
    fn limit_errors_name_the_limit_in_message_and_data() {
        let r = Rejection::LimitExceeded(LimitExceeded {
            limit: Limit::Capabilities(HandshakeBound::Values),
            max: 1024,
        });
        let e = r.to_error_object();
        assert!(e.message.contains("capabilities") && e.message.contains("1024"), "{}", e.message);
        assert_eq!(e.data.unwrap()["max"], 1024);
    }

    #[test]
    fn every_cause_is_listed_once() {
        let mut all: Vec<Rejection> = Rejection::table().into_iter().map(|(r, _)| r).collect();
        let hs = [HandshakeBound::Values, HandshakeBound::Depth, HandshakeBound::StringBytes];
        let limits = [
            Limit::JsonDepth,
            Limit::JsonValues,
            Limit::IdLength,
            Limit::MethodLength,
            Limit::NameLength,
            Limit::UriLength,
            Limit::BatchItems,
            Limit::ProgressToken,
        ]
        .into_iter()
        .chain(hs.map(Limit::Capabilities))
        .chain(hs.map(Limit::ClientInfo));
        for limit in limits {
            all.push(Rejection::LimitExceeded(LimitExceeded { limit, max: 1 }));
        }
        for o in [
            Overload::Sessions,
            Overload::Mailbox,
            Overload::InFlight,
            Overload::Draining,
            Overload::StreamMemory,
            Overload::ModernInFlight,
            Overload::Listen,
            Overload::LedgerFailing,
            Overload::LedgerBacklog,
            Overload::RequestMemory,
            Overload::LedgerReads,
            Overload::Elsewhere,
            Overload::LeaseLapsed,
        ] {
            all.push(Rejection::Overloaded(o));
        }
        all.push(Rejection::StoreFull { store: StoreBound::Tasks, retry_after_s: 1 });
        all.push(Rejection::QuotaExceeded { cause: Quota::Receipts, retry_after_s: 1 });
        all.push(Rejection::QuotaExceeded { cause: Quota::ModernInFlight, retry_after_s: 1 });
        all.push(Rejection::QuotaExceeded { cause: Quota::SessionRate, retry_after_s: 1 });
        all.push(Rejection::QuotaExceeded { cause: Quota::StreamMemory, retry_after_s: 2 });
        all.push(Rejection::QuotaExceeded { cause: Quota::Listen, retry_after_s: 1 });
        all.push(Rejection::QuotaExceeded { cause: Quota::Tasks, retry_after_s: 1 });
        all.push(Rejection::QuotaExceeded { cause: Quota::AuthFailures, retry_after_s: 1 });
        all.push(Rejection::Modern {
            error: super::super::stateless::ModernError::MethodNotFound("x".into()),
            id: None,
        });
        for r in &all {
            assert!(Rejection::CAUSES.contains(&r.cause()), "{r:?}");
        }
        let mut seen: Vec<&str> = all.iter().map(Rejection::cause).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), Rejection::CAUSES.len(), "CAUSES lists exactly the causes");
    }

    #[test]
    fn the_error_table_page_matches_the_rejections() {
        let page = include_str!("../../../docs/errors.md");
        for (r, when) in Rejection::table() {
            let row = format!("| {} | {} | {} |", r.status(), r.code(), when);
            assert!(page.contains(&row), "docs/errors.md lacks or differs on: {row}");
        }
    }

    #[test]
    fn a_refusal_with_an_id_keeps_its_status_code_headers_and_cause() {
        let r = Rejection::Overloaded(Overload::ModernInFlight).with_id(&JsonRpcId::Number(7));
        assert_eq!(
            (r.status(), r.code(), r.cause(), r.id()),
            (503, code::OVERLOADED, "overloaded.modern_in_flight", Some(&JsonRpcId::Number(7)))
        );
        assert_eq!(r.headers(), vec![("Retry-After", "1".to_string())]);
        assert_eq!(
            r.to_error_object(),
            Rejection::Overloaded(Overload::ModernInFlight).to_error_object()
        );
        assert_eq!(r.inner(), &Rejection::Overloaded(Overload::ModernInFlight));
        let own = Rejection::RequestIdInFlight(JsonRpcId::Number(1));
        assert_eq!(own.clone().with_id(&JsonRpcId::Number(2)), own, "an id of its own is kept");
    }

    #[test]
    fn internal_error_text_is_generic() {
        assert_eq!(Rejection::Internal.to_error_object().message, "Internal error");
    }
}
