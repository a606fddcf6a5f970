//! How a message's `params` are parsed: into a `Value`, except the 2026-07-28 keys of
//! `params._meta` (`protocolVersion`, `clientCapabilities`, `clientInfo`, `logLevel`), which
//! every modern request carries and which are read into a [`WireMeta`] as the body is parsed.
//! A map of strings for them (their keys alone are 30-odd bytes each) and its teardown cost
//! more than the rest of a small request; typed, `clientInfo` (self-reported, never used for a
//! decision) is only checked to be an object, without keeping it. Other `_meta` keys
//! (`progressToken`, idempotency keys, ...) stay in `params._meta`; a `_meta` left empty is
//! dropped.

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::proto::stateless::meta;

/// The 2026-07-28 keys of a request's `params._meta`, as sent (types are checked by
/// [`crate::proto::stateless::check`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireMeta {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub protocol_version: Option<Value>,
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub client_capabilities: Option<Value>,
    /// `io.modelcontextprotocol/clientInfo`: whether it is an object (its content is not kept).
    pub client_info_is_object: Option<bool>,
    /// `io.modelcontextprotocol/logLevel`.
    pub log_level: Option<Value>,
}

impl WireMeta {
    /// The keys of `params._meta` of an already-parsed `params` (for tests and tools that
    /// build messages by hand; the parser never needs it).
    #[must_use]
    pub fn of(params: &Value) -> Option<WireMeta> {
        let m = params.get("_meta")?.as_object()?;
        let w = WireMeta {
            protocol_version: m.get(meta::PROTOCOL_VERSION).cloned(),
            client_capabilities: m.get(meta::CLIENT_CAPABILITIES).cloned(),
            client_info_is_object: m.get(meta::CLIENT_INFO).map(Value::is_object),
            log_level: m.get(meta::LOG_LEVEL).cloned(),
        };
        (w != WireMeta::default()).then_some(w)
    }
}

/// Parsed `params`: the value (without the modern `_meta` keys), and those keys.
#[derive(Debug, Default)]
pub(super) struct ParamsWire(pub(super) Option<Value>, pub(super) Option<Box<WireMeta>>);

impl<'de> Deserialize<'de> for ParamsWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ParamsVisitor)
    }
}

/// A value that is not an object, kept whole (the caller decides whether it is allowed).
macro_rules! scalar_visits {
    ($wrap:expr) => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok($wrap(Value::Bool(v)))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok($wrap(Value::String(v)))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($wrap(Value::Null))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok($wrap(Value::Null))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut v = Vec::new();
            while let Some(x) = seq.next_element::<Value>()? {
                v.push(x);
            }
            Ok($wrap(Value::Array(v)))
        }
    };
}

struct ParamsVisitor;

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = ParamsWire;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON-RPC params")
    }

    scalar_visits!(|v| ParamsWire(Some(v), None));

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ParamsWire, A::Error> {
        let mut m = Map::new();
        let mut keys = None;
        while let Some(k) = map.next_key::<String>()? {
            if k == "_meta" {
                // A repeated key: the last one wins, as in a `Value`.
                let MetaWire(rest, found) = map.next_value()?;
                keys = found;
                match rest {
                    Some(r) => m.insert(k, r),
                    None => m.remove(&k),
                };
            } else {
                let v: Value = map.next_value()?;
                m.insert(k, v);
            }
        }
        Ok(ParamsWire(Some(Value::Object(m)), keys))
    }
}

/// `_meta`: the other keys (`None` when there are none), and the modern ones.
struct MetaWire(Option<Value>, Option<Box<WireMeta>>);

impl<'de> Deserialize<'de> for MetaWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MetaVisitor)
    }
}

struct MetaVisitor;

/// A `_meta` key, without allocating for the modern ones.
enum MetaKey {
    Version,
    Capabilities,
    Info,
    Level,
    Other(String),
}

impl<'de> Deserialize<'de> for MetaKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = MetaKey;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a _meta key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MetaKey, E> {
                Ok(match v {
                    meta::PROTOCOL_VERSION => MetaKey::Version,
                    meta::CLIENT_CAPABILITIES => MetaKey::Capabilities,
                    meta::CLIENT_INFO => MetaKey::Info,
                    meta::LOG_LEVEL => MetaKey::Level,
                    other => MetaKey::Other(other.to_owned()),
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Visitor<'de> for MetaVisitor {
    type Value = MetaWire;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("params._meta")
    }

    // Not an object: kept as it is (no modern keys can be in it).
    scalar_visits!(|v| MetaWire(Some(v), None));

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetaWire, A::Error> {
        let mut rest = Map::new();
        let mut w = WireMeta::default();
        while let Some(k) = map.next_key::<MetaKey>()? {
            match k {
                MetaKey::Version => w.protocol_version = Some(map.next_value()?),
                MetaKey::Capabilities => w.client_capabilities = Some(map.next_value()?),
                MetaKey::Info => w.client_info_is_object = Some(map.next_value::<IsObject>()?.0),
                MetaKey::Level => w.log_level = Some(map.next_value()?),
                MetaKey::Other(k) => {
                    let v: Value = map.next_value()?;
                    rest.insert(k, v);
                }
            }
        }
        let keys = (w != WireMeta::default()).then(|| Box::new(w));
        Ok(MetaWire((!rest.is_empty()).then_some(Value::Object(rest)), keys))
    }
}

/// Whether a value is an object; its content is read and dropped without being kept.
struct IsObject(bool);

impl<'de> Deserialize<'de> for IsObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IsObject;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<IsObject, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(IsObject(true))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<IsObject, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(IsObject(false))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<IsObject, E> {
                Ok(IsObject(false))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<IsObject, E> {
                Ok(IsObject(false))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<IsObject, E> {
                Ok(IsObject(false))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<IsObject, E> {
                Ok(IsObject(false))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<IsObject, E> {
                Ok(IsObject(false))
            }
            fn visit_unit<E: de::Error>(self) -> Result<IsObject, E> {
                Ok(IsObject(false))
            }
        }
        d.deserialize_any(V)
    }
}
