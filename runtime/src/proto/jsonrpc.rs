//! JSON-RPC 2.0 parsing and encoding.
//!
//! Rules: ids keep string vs number; a request with `"id": null` is invalid (it is neither a
//! request nor a notification); error responses omit an id that could not be read. Batches
//! (arrays) are parsed here and allowed or refused by the caller, which knows the session's
//! version.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::ids::JsonRpcId;

mod params;
pub use params::WireMeta;

/// Standard JSON-RPC error codes, and the implementation-defined ones this server uses
/// (`-32000..=-32019` is the legacy, implementation-defined range).
pub mod code {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// Generic transport-level refusal (bad headers, forbidden origin, ...).
    pub const TRANSPORT: i64 = -32000;
    /// Session not found (unknown, terminated, expired, or another caller's).
    pub const SESSION_NOT_FOUND: i64 = -32001;
    /// Resource not found (legacy era).
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// A request with this id is already in flight in this session.
    pub const REQUEST_ID_IN_FLIGHT: i64 = -32003;
    /// `Last-Event-ID` is malformed, forged, or belongs to another stream, session or caller.
    pub const CURSOR_REJECTED: i64 = -32004;
    /// The events after the cursor are no longer retained: they were lost.
    pub const EVENTS_LOST: i64 = -32005;
    /// The server is overloaded; retry after the indicated delay.
    pub const OVERLOADED: i64 = -32006;
    /// The caller is over one of its quotas; retry after the indicated delay.
    pub const QUOTA_EXCEEDED: i64 = -32007;
    /// A server-to-client request got no answer before its deadline.
    pub const REQUEST_TIMEOUT: i64 = -32008;
    /// The server restarted while the request was running; its outcome is unknown.
    pub const SERVER_RESTARTED: i64 = -32009;
    /// A rollback's drain ended the request at its grace deadline; its outcome is unknown.
    pub const DRAINED: i64 = -32010;
    /// A keyed write call ran once, but its result was too large to keep for a replay.
    pub const RESULT_NOT_KEPT: i64 = -32011;
    /// An answer to a server-to-client request whose asking request ran on a host that has
    /// stopped (shared ledger): nobody waits for it; resume the request's stream for its end.
    pub const ASKER_GONE: i64 = -32012;
    /// 2026-07-28: a request-metadata header is missing or differs from the body.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// 2026-07-28: the request lacks a client capability the server needs.
    pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    /// 2026-07-28: the request's protocol version is not supported.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// Error code.
    pub code: i64,
    /// Short description.
    pub message: String,
    /// Optional structured detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without data.
    #[must_use]
    pub fn new(code: i64, message: impl Into<String>) -> ErrorObject {
        ErrorObject { code, message: message.into(), data: None }
    }

    /// Attach structured data.
    #[must_use]
    pub fn with_data(mut self, data: Value) -> ErrorObject {
        self.data = Some(data);
        self
    }
}

/// One classified JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: has a non-null id and a method.
    Request {
        /// Request id.
        id: JsonRpcId,
        /// Method name.
        method: String,
        /// Parameters (an object or array), if any, without the 2026-07-28 `_meta` keys.
        params: Option<Value>,
        /// The 2026-07-28 keys of `params._meta`, when it had any (see [`WireMeta`]).
        meta: Option<Box<WireMeta>>,
    },
    /// A notification: a method and no id.
    Notification {
        /// Method name.
        method: String,
        /// Parameters, if any, without the 2026-07-28 `_meta` keys.
        params: Option<Value>,
        /// The 2026-07-28 keys of `params._meta`, when it had any.
        meta: Option<Box<WireMeta>>,
    },
    /// A successful response to a request we sent.
    Response {
        /// The id of our request.
        id: JsonRpcId,
        /// The result.
        result: Value,
    },
    /// An error response to a request we sent. `id` is `None` when the peer could not read it.
    ErrorResponse {
        /// The id of our request, if the peer gave one.
        id: Option<JsonRpcId>,
        /// The error.
        error: ErrorObject,
    },
}

impl Message {
    /// Whether this message needs an answer (is a request).
    #[must_use]
    pub fn is_request(&self) -> bool {
        matches!(self, Message::Request { .. })
    }
}

/// A parsed POST body: one message or a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A single message.
    Single(Message),
    /// A non-empty JSON array of messages (2025-03-26 only; the caller decides).
    Batch(Vec<Message>),
}

impl Incoming {
    /// Whether it carries a request (work to do), not only notifications and responses.
    #[must_use]
    pub fn carries_request(&self) -> bool {
        match self {
            Incoming::Single(m) => m.is_request(),
            Incoming::Batch(items) => items.iter().any(Message::is_request),
        }
    }
}

/// Why a body could not be turned into messages. `id` is set when the offending object had a
/// readable id, so the error response can carry it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or not UTF-8.
    #[error("parse error: {0}")]
    Json(String),
    /// JSON, but not a valid JSON-RPC message.
    #[error("invalid request: {reason}")]
    Invalid {
        /// Why.
        reason: &'static str,
        /// The id, when it could be read.
        id: Option<JsonRpcId>,
    },
}

impl ParseError {
    /// The JSON-RPC error this parse error becomes.
    #[must_use]
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            ParseError::Json(_) => ErrorObject::new(code::PARSE_ERROR, "Parse error"),
            ParseError::Invalid { reason, .. } => {
                ErrorObject::new(code::INVALID_REQUEST, format!("Invalid request: {reason}"))
            }
        }
    }

    /// The id to echo in the error response, if one could be read.
    #[must_use]
    pub fn id(&self) -> Option<&JsonRpcId> {
        match self {
            ParseError::Json(_) => None,
            ParseError::Invalid { id, .. } => id.as_ref(),
        }
    }
}

/// Distinguishes an absent member (`None`) from an explicit `null` (`Some(Value::Null)`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// As [`present`], for `params` (see [`params`]).
fn present_params<'de, D: Deserializer<'de>>(d: D) -> Result<Option<params::ParamsWire>, D::Error> {
    params::ParamsWire::deserialize(d).map(Some)
}

/// A message's `jsonrpc` member: whether it is `"2.0"` (read without keeping a copy; another
/// type than a string is refused as the `String` it replaced was).
struct Version(bool);

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Version;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Version, E> {
                Ok(Version(v == "2.0"))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Deserialize)]
struct Wire {
    jsonrpc: Option<Version>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    method: Option<String>,
    #[serde(default, deserialize_with = "present_params")]
    params: Option<params::ParamsWire>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

/// Parse a POST body into one message or a batch.
///
/// # Errors
/// [`ParseError::Json`] for invalid JSON; [`ParseError::Invalid`] for JSON that is not a
/// JSON-RPC 2.0 message (including an empty batch and a `null` request id).
pub fn parse_body(body: &[u8]) -> Result<Incoming, ParseError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let items: Vec<Value> =
            serde_json::from_slice(body).map_err(|e| ParseError::Json(e.to_string()))?;
        if items.is_empty() {
            return Err(ParseError::Invalid { reason: "empty batch", id: None });
        }
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            let wire: Wire = serde_json::from_value(item).map_err(|_| ParseError::Invalid {
                reason: "batch item is not an object",
                id: None,
            })?;
            out.push(classify(wire)?);
        }
        return Ok(Incoming::Batch(out));
    }
    let wire: Wire = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            ParseError::Invalid { reason: "not a JSON-RPC object", id: None }
        } else {
            ParseError::Json(e.to_string())
        }
    })?;
    classify(wire).map(Incoming::Single)
}

fn classify(w: Wire) -> Result<Message, ParseError> {
    let id = match &w.id {
        None => None,
        Some(v) => match JsonRpcId::from_value(v) {
            Some(id) => Some(id),
            None if v.is_null() => None,
            None => {
                return Err(ParseError::Invalid {
                    reason: "id must be a string or an integer",
                    id: None,
                });
            }
        },
    };
    if !w.jsonrpc.is_some_and(|v| v.0) {
        return Err(ParseError::Invalid { reason: "jsonrpc must be \"2.0\"", id });
    }
    if let Some(method) = w.method {
        if w.result.is_some() || w.error.is_some() {
            return Err(ParseError::Invalid {
                reason: "a request cannot carry result or error",
                id,
            });
        }
        let (params, meta) = w.params.map_or((None, None), |p| (p.0, p.1));
        let params = match params {
            None => None,
            Some(p @ (Value::Object(_) | Value::Array(_))) => Some(p),
            Some(_) => {
                return Err(ParseError::Invalid {
                    reason: "params must be an object or array",
                    id,
                });
            }
        };
        return match (w.id, id) {
            (None, _) => Ok(Message::Notification { method, params, meta }),
            (Some(_), Some(id)) => Ok(Message::Request { id, method, params, meta }),
            (Some(_), None) => {
                Err(ParseError::Invalid { reason: "request id must not be null", id: None })
            }
        };
    }
    match (w.result, w.error) {
        (Some(result), None) => match id {
            Some(id) => Ok(Message::Response { id, result }),
            None => Err(ParseError::Invalid { reason: "response without an id", id: None }),
        },
        (None, Some(error)) => {
            let error: ErrorObject = serde_json::from_value(error).map_err(|_| {
                ParseError::Invalid { reason: "malformed error object", id: id.clone() }
            })?;
            Ok(Message::ErrorResponse { id, error })
        }
        _ => Err(ParseError::Invalid {
            reason: "neither a request, a notification nor a response",
            id,
        }),
    }
}

#[derive(Serialize)]
struct OutResult<'a, R: Serialize + ?Sized> {
    jsonrpc: &'static str,
    id: &'a JsonRpcId,
    result: &'a R,
}

#[derive(Serialize)]
struct OutError<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a JsonRpcId>,
    error: &'a ErrorObject,
}

#[derive(Serialize)]
struct OutCall<'a, P: Serialize + ?Sized> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a JsonRpcId>,
    method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a P>,
}

/// What a request's handler answers: a JSON value, or the JSON text of a result its handler
/// serialized straight from its own type (a tool's result: building it as a `Value` first,
/// then writing that, cost a map and a string per key and a second walk).
///
/// Text keeps the order its type declares its fields in; a `Value` writes its keys sorted.
/// JSON objects are unordered, so both are the same answer (a keyed call, whose receipt keeps
/// its result as a value, lists the result's keys sorted; an unkeyed one in its type's order).
#[derive(Debug, Clone)]
pub enum Reply {
    /// A JSON value.
    Value(Value),
    /// One valid JSON value, as text.
    Raw(RawReply),
}

/// The text of a [`Reply`], made only by [`Reply::of`] (so always what a serializer wrote).
#[derive(Debug, Clone)]
pub struct RawReply(RawText);

/// A reply's text: its own, or shared by every reply that sends the same text (a catalog's
/// lists: a clone is then a count, not a copy of the list).
#[derive(Debug, Clone)]
enum RawText {
    Owned(Box<serde_json::value::RawValue>),
    Shared(Arc<serde_json::value::RawValue>),
}

impl RawReply {
    /// The JSON text.
    #[must_use]
    pub fn get(&self) -> &str {
        self.raw().get()
    }

    fn raw(&self) -> &serde_json::value::RawValue {
        match &self.0 {
            RawText::Owned(r) => r,
            RawText::Shared(r) => r,
        }
    }
}

impl Reply {
    /// `result`, serialized now; `null` for a value that cannot be serialized (a map with
    /// keys that are not strings: none of the runtime's result types has one), as
    /// `serde_json::to_value` gives.
    #[must_use]
    pub fn of<T: Serialize + ?Sized>(result: &T) -> Reply {
        serde_json::value::to_raw_value(result)
            .map_or(Reply::Value(Value::Null), |r| Reply::Raw(RawReply(RawText::Owned(r))))
    }

    /// The same reply, made to be sent many times: text is shared by its clones (one copy
    /// now, then a count per clone instead of a copy of the text).
    #[must_use]
    pub(crate) fn shared(self) -> Reply {
        match self {
            Reply::Raw(RawReply(RawText::Owned(r))) => {
                Reply::Raw(RawReply(RawText::Shared(r.into())))
            }
            other => other,
        }
    }

    /// As a JSON value (parsed again when it is text: for the paths that keep or merge a
    /// result, not for one that is only sent).
    ///
    /// # Errors
    /// `-32603` for text nested deeper than a `Value` is read (128 levels): written, such a
    /// result cannot be read back to be kept or merged (never silently `null`).
    pub fn into_value(self) -> Result<Value, ErrorObject> {
        match self {
            Reply::Value(v) => Ok(v),
            Reply::Raw(r) => read_back(r.get()),
        }
    }

    /// As a JSON value, borrowed when it is one.
    ///
    /// # Errors
    /// As [`Reply::into_value`].
    pub fn to_value(&self) -> Result<std::borrow::Cow<'_, Value>, ErrorObject> {
        match self {
            Reply::Value(v) => Ok(std::borrow::Cow::Borrowed(v)),
            Reply::Raw(r) => read_back(r.get()).map(std::borrow::Cow::Owned),
        }
    }
}

/// `1` inside `levels` arrays (`[[1]]` for 2): a value nested as deep as a test needs.
#[cfg(test)]
pub(crate) fn nested_arrays(levels: usize) -> Value {
    (0..levels).fold(Value::from(1), |v, _| Value::Array(vec![v]))
}

/// A result's text read back into a value. Text a serializer wrote fails to read back only
/// past serde_json's 128 levels of nesting.
fn read_back(text: &str) -> Result<Value, ErrorObject> {
    serde_json::from_str(text).map_err(|_| {
        ErrorObject::new(
            code::INTERNAL_ERROR,
            "the result nests too deeply (past 128 levels) to be kept or completed",
        )
    })
}

impl From<Value> for Reply {
    fn from(v: Value) -> Reply {
        Reply::Value(v)
    }
}

/// Equal when their JSON values are (for tests and comparisons; text is parsed, and text
/// that cannot be read back equals nothing).
impl PartialEq<Value> for Reply {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|v| *v == *other)
    }
}

impl Serialize for Reply {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Reply::Value(v) => v.serialize(s),
            Reply::Raw(r) => r.raw().serialize(s),
        }
    }
}

fn to_bytes<T: Serialize>(v: &T) -> Bytes {
    // Serializing our own plain structs into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

/// A request's `params._meta.progressToken`, if any (direct lookups: `Value::pointer`
/// allocates per path segment, and this runs on every request).
pub fn progress_token(params: &Value) -> Option<&Value> {
    params.get("_meta")?.get("progressToken")
}

/// Encode a success response.
#[must_use]
pub fn encode_result<R: Serialize + ?Sized>(id: &JsonRpcId, result: &R) -> Bytes {
    to_bytes(&OutResult { jsonrpc: "2.0", id, result })
}

/// Encode a success response whose result is already JSON (`result` must be one valid JSON
/// value: it is written as it is), in one allocation of its exact length: a `Vec` with room
/// to spare becomes `Bytes` through a second allocation (its shared header).
#[must_use]
pub fn encode_result_raw(id: &JsonRpcId, result: &[u8]) -> Bytes {
    encode_result_parts(id, &[result])
}

/// As [`encode_result_raw`], the result given in pieces, written one after the other (their
/// concatenation must be one valid JSON value): a result and the keys appended to it go out
/// in one allocation, without being joined first.
#[must_use]
pub fn encode_result_parts(id: &JsonRpcId, parts: &[&[u8]]) -> Bytes {
    const HEAD: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";
    const MID: &[u8] = b",\"result\":";
    // The id printed first (most are short: on the stack), so the length is known.
    let mut short = [0u8; 48];
    let mut cursor = std::io::Cursor::new(&mut short[..]);
    let long;
    let id_text: &[u8] = if serde_json::to_writer(&mut cursor, id).is_ok() {
        let n = usize::try_from(cursor.position()).expect("at most 48");
        &short[..n]
    } else {
        // An id is a string or an integer: serializing it into a Vec cannot fail.
        long = serde_json::to_vec(id).unwrap_or_default();
        &long
    };
    let result_len: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(HEAD.len() + id_text.len() + MID.len() + result_len + 1);
    out.extend_from_slice(HEAD);
    out.extend_from_slice(id_text);
    out.extend_from_slice(MID);
    for p in parts {
        out.extend_from_slice(p);
    }
    out.push(b'}');
    debug_assert_eq!(out.len(), out.capacity());
    Bytes::from(out)
}

/// Encode a success response with `reply` as its result (a text reply copied as it is, in
/// one allocation of its exact length: [`encode_result_raw`]).
#[must_use]
pub fn encode_reply(id: &JsonRpcId, reply: &Reply) -> Bytes {
    match reply {
        Reply::Raw(r) => encode_result_raw(id, r.get().as_bytes()),
        Reply::Value(v) => encode_result(id, v),
    }
}

/// Encode an error response; the id is omitted when it is `None` (never `null`).
#[must_use]
pub fn encode_error(id: Option<&JsonRpcId>, error: &ErrorObject) -> Bytes {
    to_bytes(&OutError { jsonrpc: "2.0", id, error })
}

/// Encode a notification.
#[must_use]
pub fn encode_notification<P: Serialize + ?Sized>(method: &str, params: Option<&P>) -> Bytes {
    to_bytes(&OutCall { jsonrpc: "2.0", id: None, method, params })
}

/// Encode a request.
#[must_use]
pub fn encode_request<P: Serialize + ?Sized>(
    id: &JsonRpcId,
    method: &str,
    params: Option<&P>,
) -> Bytes {
    to_bytes(&OutCall { jsonrpc: "2.0", id: Some(id), method, params })
}

#[cfg(test)]
mod tests;
