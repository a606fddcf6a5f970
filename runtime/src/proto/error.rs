//! The one error table: every refusal of an HTTP request, its status, its JSON-RPC code and
//! its extra headers, defined once. The HTTP layer renders [`Rejection`] and nothing else;
//! README's error table is generated from the same rows (`Rejection::table`).

use super::ids::JsonRpcId;
use super::jsonrpc::{ErrorObject, code};

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
    /// Neither JSON nor SSE is acceptable to the client (POST), or SSE is not (GET).
    #[error("Not Acceptable: client must accept application/json or text/event-stream")]
    NotAcceptable,
    /// POST body is not declared as JSON.
    #[error("Unsupported Media Type: Content-Type must be application/json")]
    UnsupportedMediaType,
    /// Body larger than the configured limit.
    #[error("Payload Too Large")]
    PayloadTooLarge,
    /// HTTP method other than POST, GET, DELETE.
    #[error("Method Not Allowed")]
    MethodNotAllowed,
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
    /// Too many sessions, or the session's mailbox is full.
    #[error("Service Unavailable: overloaded")]
    Overloaded {
        /// Seconds the client should wait.
        retry_after_s: u32,
    },
    /// Anything unexpected. The client sees a generic text; details go to the log.
    #[error("Internal error")]
    Internal,
}

impl Rejection {
    /// HTTP status code.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Rejection::OriginNotAllowed | Rejection::HostNotAllowed => 403,
            Rejection::Unauthorized => 401,
            Rejection::NotAcceptable => 406,
            Rejection::UnsupportedMediaType => 415,
            Rejection::PayloadTooLarge => 413,
            Rejection::MethodNotAllowed => 405,
            Rejection::Parse
            | Rejection::InvalidMessage { .. }
            | Rejection::MissingSession
            | Rejection::UnsupportedVersion(_)
            | Rejection::AlreadyInitialized
            | Rejection::CursorRejected => 400,
            Rejection::SessionNotFound => 404,
            Rejection::RequestIdInFlight(_) => 409,
            Rejection::EventsLost => 410,
            Rejection::Overloaded { .. } => 503,
            Rejection::Internal => 500,
        }
    }

    /// JSON-RPC error code of the body.
    #[must_use]
    pub fn code(&self) -> i64 {
        match self {
            Rejection::Parse => code::PARSE_ERROR,
            Rejection::InvalidMessage { .. } | Rejection::AlreadyInitialized => code::INVALID_REQUEST,
            Rejection::SessionNotFound => code::SESSION_NOT_FOUND,
            Rejection::RequestIdInFlight(_) => code::REQUEST_ID_IN_FLIGHT,
            Rejection::CursorRejected => code::CURSOR_REJECTED,
            Rejection::EventsLost => code::EVENTS_LOST,
            Rejection::Overloaded { .. } => code::OVERLOADED,
            Rejection::Internal => code::INTERNAL_ERROR,
            Rejection::OriginNotAllowed
            | Rejection::HostNotAllowed
            | Rejection::Unauthorized
            | Rejection::NotAcceptable
            | Rejection::UnsupportedMediaType
            | Rejection::PayloadTooLarge
            | Rejection::MethodNotAllowed
            | Rejection::MissingSession
            | Rejection::UnsupportedVersion(_) => code::TRANSPORT,
        }
    }

    /// The request id the error body echoes, when one was readable.
    #[must_use]
    pub fn id(&self) -> Option<&JsonRpcId> {
        match self {
            Rejection::InvalidMessage { id, .. } => id.as_ref(),
            Rejection::RequestIdInFlight(id) => Some(id),
            _ => None,
        }
    }

    /// Extra response headers: `(name, value)`.
    #[must_use]
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        match self {
            Rejection::Unauthorized => vec![("WWW-Authenticate", "Bearer".into())],
            Rejection::MethodNotAllowed => vec![("Allow", "GET, POST, DELETE".into())],
            Rejection::Overloaded { retry_after_s } => vec![("Retry-After", retry_after_s.to_string())],
            _ => Vec::new(),
        }
    }

    /// The JSON-RPC error object of the body.
    #[must_use]
    pub fn to_error_object(&self) -> ErrorObject {
        let e = ErrorObject::new(self.code(), self.to_string());
        match self {
            Rejection::UnsupportedVersion(_) => e.with_data(serde_json::json!({
                "supported": super::version::SUPPORTED.map(|v| v.as_str()),
            })),
            _ => e,
        }
    }

    /// One representative of every variant, for the table test and README.
    #[must_use]
    pub fn table() -> Vec<(Rejection, &'static str)> {
        vec![
            (Rejection::OriginNotAllowed, "`Origin` present and not in the allow-list"),
            (Rejection::HostNotAllowed, "`Host` not allowed (loopback binds accept only localhost names)"),
            (Rejection::Unauthorized, "auth configured; bearer token missing or unknown"),
            (Rejection::NotAcceptable, "POST accepts neither JSON nor SSE; GET does not accept SSE"),
            (Rejection::UnsupportedMediaType, "POST `Content-Type` is present and not `application/json`"),
            (Rejection::PayloadTooLarge, "body larger than `max_body_bytes`"),
            (Rejection::MethodNotAllowed, "method other than POST, GET, DELETE"),
            (Rejection::Parse, "body is not JSON"),
            (
                Rejection::InvalidMessage { reason: "example".into(), id: None },
                "not JSON-RPC 2.0; `null` id; batch on a session newer than 2025-03-26; `initialize` in a batch",
            ),
            (Rejection::MissingSession, "no `MCP-Session-Id` on a non-`initialize` request"),
            (Rejection::SessionNotFound, "session unknown, deleted, expired, or owned by another caller"),
            (Rejection::UnsupportedVersion("1999-01-01".into()), "`MCP-Protocol-Version` not supported"),
            (Rejection::AlreadyInitialized, "`initialize` sent with an `MCP-Session-Id`"),
            (Rejection::RequestIdInFlight(JsonRpcId::Number(1)), "request id already in flight in the session"),
            (Rejection::CursorRejected, "`Last-Event-ID` malformed, forged, or from another stream/session/caller"),
            (
                Rejection::EventsLost,
                "GET resume: the stream is no longer retained, or (standalone GET stream) events after the cursor were evicted",
            ),
            (Rejection::Overloaded { retry_after_s: 1 }, "session limit reached or session mailbox full"),
            (Rejection::Internal, "unexpected server error (details only in the log)"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rejection_has_its_documented_status_and_code() {
        let expected: &[(u16, i64)] = &[
            (403, code::TRANSPORT),
            (403, code::TRANSPORT),
            (401, code::TRANSPORT),
            (406, code::TRANSPORT),
            (415, code::TRANSPORT),
            (413, code::TRANSPORT),
            (405, code::TRANSPORT),
            (400, code::PARSE_ERROR),
            (400, code::INVALID_REQUEST),
            (400, code::TRANSPORT),
            (404, code::SESSION_NOT_FOUND),
            (400, code::TRANSPORT),
            (400, code::INVALID_REQUEST),
            (409, code::REQUEST_ID_IN_FLIGHT),
            (400, code::CURSOR_REJECTED),
            (410, code::EVENTS_LOST),
            (503, code::OVERLOADED),
            (500, code::INTERNAL_ERROR),
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
    fn overload_and_auth_carry_their_headers() {
        assert_eq!(Rejection::Overloaded { retry_after_s: 2 }.headers(), vec![("Retry-After", "2".to_string())]);
        assert_eq!(Rejection::Unauthorized.headers()[0].0, "WWW-Authenticate");
        assert_eq!(Rejection::MethodNotAllowed.headers()[0].0, "Allow");
    }

    #[test]
    fn readme_error_table_matches_the_rejections() {
        let readme = include_str!("../../../README.md");
        for (r, when) in Rejection::table() {
            let row = format!("| {} | {} | {} |", r.status(), r.code(), when);
            assert!(readme.contains(&row), "README error table lacks or differs on: {row}");
        }
    }

    #[test]
    fn internal_error_text_is_generic() {
        assert_eq!(Rejection::Internal.to_error_object().message, "Internal error");
    }
}
