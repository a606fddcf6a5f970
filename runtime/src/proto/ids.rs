//! Typed identifiers and units. Each id has exactly one representation; nothing here is
//! re-parsed on a hot path.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Monotonic time in milliseconds since an origin chosen by the shell. The core never reads a
/// clock; the actors pass `now` in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tick(pub u64);

impl Tick {
    /// `self + ms`, saturating.
    #[must_use]
    pub fn plus_ms(self, ms: u64) -> Tick {
        Tick(self.0.saturating_add(ms))
    }
}

/// Configuration epoch. Tagged into session ids and cursors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(transparent)]
pub struct Generation(pub u32);

/// Stream id: allocated by its session from a counter that never repeats, so it is unique
/// within the session; cursors bind it to the session (see `event_id`), which makes every
/// event id unique across the deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u64);

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}", self.0)
    }
}

/// Sequence number of an event within its stream. `Seq(0)` is the priming position: no
/// message carries it; resuming after it replays everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(pub u64);

impl Seq {
    /// The position before the first event.
    pub const START: Seq = Seq(0);

    /// The following sequence number.
    #[must_use]
    pub fn next(self) -> Seq {
        Seq(self.0 + 1)
    }
}

/// An MCP session id as minted by the server: visible ASCII only (0x21..=0x7E).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// Wrap a header value after checking the visible-ASCII rule. Returns `None` for an empty
    /// value or one with spaces or control characters.
    #[must_use]
    pub fn parse(raw: &str) -> Option<SessionId> {
        if raw.is_empty() || raw.len() > 256 || !raw.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return None;
        }
        Some(SessionId(Arc::from(raw)))
    }

    /// The id as sent on the wire.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A JSON-RPC request id. Keeps string and number distinct: `1` and `"1"` are different ids.
/// `null` is not an id (rejected by the parser). Fractional numbers are rejected too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum JsonRpcId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(Arc<str>),
}

impl JsonRpcId {
    /// Convert a JSON value; `None` for anything that is not an integer or a string.
    #[must_use]
    pub fn from_value(v: &serde_json::Value) -> Option<JsonRpcId> {
        match v {
            serde_json::Value::Number(n) => n.as_i64().map(JsonRpcId::Number),
            serde_json::Value::String(s) => Some(JsonRpcId::String(Arc::from(s.as_str()))),
            _ => None,
        }
    }

    /// The id as a JSON value, type preserved.
    #[must_use]
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            JsonRpcId::Number(n) => serde_json::Value::from(*n),
            JsonRpcId::String(s) => serde_json::Value::from(&**s),
        }
    }
}

impl fmt::Display for JsonRpcId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonRpcId::Number(n) => write!(f, "{n}"),
            JsonRpcId::String(s) => write!(f, "{s:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_id_rejects_space_control_and_empty() {
        assert!(SessionId::parse("abc DEF").is_none());
        assert!(SessionId::parse("abc\u{7f}").is_none());
        assert!(SessionId::parse("").is_none());
        assert!(SessionId::parse("abc\tdef").is_none());
        assert_eq!(SessionId::parse("a-b_c.~!").unwrap().as_str(), "a-b_c.~!");
    }

    #[test]
    fn number_and_string_ids_are_distinct() {
        let n = JsonRpcId::from_value(&serde_json::json!(1)).unwrap();
        let s = JsonRpcId::from_value(&serde_json::json!("1")).unwrap();
        assert_ne!(n, s);
        assert_eq!(n.to_value(), serde_json::json!(1));
        assert_eq!(s.to_value(), serde_json::json!("1"));
    }

    #[test]
    fn null_float_and_object_are_not_ids() {
        assert!(JsonRpcId::from_value(&serde_json::Value::Null).is_none());
        assert!(JsonRpcId::from_value(&serde_json::json!(1.5)).is_none());
        assert!(JsonRpcId::from_value(&serde_json::json!({})).is_none());
    }
}
