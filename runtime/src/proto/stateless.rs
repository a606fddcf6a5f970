//! The modern era (protocol 2026-07-28, SPEC.md §3): which requests belong to it, and the
//! rules every such request must pass before it is served statelessly — the version header,
//! the per-request `_meta`, the mirrored `Mcp-Method` / `Mcp-Name` headers. Pure.
//!
//! Era per request (SPEC.md §3.10): a POST whose body carries
//! `params._meta["io.modelcontextprotocol/protocolVersion"]`, or whose `MCP-Protocol-Version`
//! header names a modern version, is modern; everything else is legacy and goes down the
//! session path unchanged.

pub(crate) mod headers;
pub(crate) mod listen;
pub(crate) mod state;

use bytes::Bytes;
use serde_json::Value;

use super::ids::JsonRpcId;
pub(crate) use super::jsonrpc::WireMeta;
use super::jsonrpc::{ErrorObject, Reply, encode_result_parts, encode_result_raw};
use super::mcp::LogLevel;

/// The modern protocol version.
pub(crate) const VERSION: &str = "2026-07-28";
/// Every version a modern request may name.
pub(crate) const MODERN_VERSIONS: [&str; 1] = [VERSION];

/// `_meta` keys of a modern request and result.
pub(crate) mod meta {
    /// The request's protocol version (required).
    pub(crate) const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// The client's capabilities (required; `{}` for none).
    pub(crate) const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// The client's self-description (optional, never used for decisions).
    pub(crate) const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// Deprecated: the least severe log level the client wants (none: no log notifications).
    pub(crate) const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    /// The server's identity, in every result's `_meta`.
    pub(crate) const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// On a listen stream's notifications: the listen request's id.
    pub(crate) const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
}

/// Methods that exist only in the legacy era: a modern request for one is "method not found"
/// (404, `-32601`).
pub(crate) const REMOVED_METHODS: [&str; 6] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "notifications/initialized",
];

/// The methods that name something in `Mcp-Name`, and which parameter it mirrors.
#[must_use]
pub(crate) fn name_param(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        // The tasks extension's methods name their task.
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// Whether a POST is modern: its body's `_meta` names a protocol version, or its
/// `MCP-Protocol-Version` header names a modern one. (A header naming a version nobody speaks,
/// without modern `_meta`, stays legacy: a legacy `initialize` negotiates in its body, and a
/// session's request with it gets the legacy 400.)
#[must_use]
pub(crate) fn is_modern(header_version: Option<&str>, meta: Option<&WireMeta>) -> bool {
    let in_meta = meta.is_some_and(|m| m.protocol_version.is_some());
    in_meta || header_version.map(str::trim).is_some_and(|v| MODERN_VERSIONS.contains(&v))
}

/// Why a modern request was refused before it ran (SPEC.md §3.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModernError {
    /// A required header is missing, differs from the body, or cannot be read: 400, `-32020`.
    HeaderMismatch(String),
    /// A required `_meta` field is missing or malformed: 400, `-32602`.
    InvalidMeta(String),
    /// The version is not one this server speaks: 400, `-32022`.
    UnsupportedVersion(String),
    /// Unknown, or removed in this era: 404, `-32601`.
    MethodNotFound(String),
    /// The body is not one request or notification: 400, `-32600`.
    InvalidRequest(String),
    /// A multi-round-trip retry's `inputResponses` is not an object, or its `requestState`
    /// is refused (altered, expired, another caller's or another request's); a listen filter
    /// that is malformed: 400, `-32602`.
    InvalidInput(String),
    /// GET or DELETE under a 2026-07-28 version header without a session: this era has no GET
    /// stream and no DELETE: 405.
    NoSessionMethods,
}

/// The validated head and `_meta` of a modern request.
#[derive(Debug, Clone, PartialEq)]
pub struct ModernMeta {
    /// `clientCapabilities`, as sent (an object).
    pub capabilities: Value,
    /// The requested log level, if any (without one, no log notifications are sent).
    pub log_level: Option<LogLevel>,
}

/// The request-metadata headers of a modern POST.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ModernHead<'a> {
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a str>,
    /// `Mcp-Method`.
    pub method: Option<&'a str>,
    /// `Mcp-Name`.
    pub name: Option<&'a str>,
    /// `Mcp-Method` or `Mcp-Name`, when present but not readable as visible ASCII (a value that
    /// is not plain ASCII must be sent as `=?base64?…?=`).
    pub unreadable: Option<&'a str>,
}

/// Check a modern request's version header, `_meta` and `Mcp-Method` / `Mcp-Name`, in the
/// order the conformance suite's reference server uses: header present, `_meta` fields
/// present, header equal to `_meta`, version supported, then the mirrored headers, then the
/// method.
///
/// # Errors
/// The first [`ModernError`] the request breaks.
pub(crate) fn check(
    head: &ModernHead<'_>,
    method: &str,
    params: Option<&Value>,
    wire: Option<Box<WireMeta>>,
) -> Result<ModernMeta, ModernError> {
    let header = head
        .protocol_version
        .map(str::trim)
        .ok_or_else(|| ModernError::HeaderMismatch("missing MCP-Protocol-Version header".into()))?;
    let w = wire.map(|b| *b).unwrap_or_default();
    let missing: Vec<&str> = [
        (meta::PROTOCOL_VERSION, w.protocol_version.is_none()),
        (meta::CLIENT_CAPABILITIES, w.client_capabilities.is_none()),
    ]
    .into_iter()
    .filter_map(|(k, gone)| gone.then_some(k))
    .collect();
    if !missing.is_empty() {
        return Err(ModernError::InvalidMeta(format!(
            "missing _meta keys: {}",
            missing.join(", ")
        )));
    }
    let version = w.protocol_version.as_ref().and_then(Value::as_str).ok_or_else(|| {
        ModernError::InvalidMeta(format!("_meta {} must be a string", meta::PROTOCOL_VERSION))
    })?;
    if version != header {
        return Err(ModernError::HeaderMismatch(format!(
            "MCP-Protocol-Version {header:?} does not match _meta {version:?}"
        )));
    }
    if !MODERN_VERSIONS.contains(&version) {
        return Err(ModernError::UnsupportedVersion(version.to_owned()));
    }
    let capabilities = w.client_capabilities.unwrap_or(Value::Null);
    if !capabilities.is_object() {
        return Err(ModernError::InvalidMeta(format!(
            "_meta {} must be an object",
            meta::CLIENT_CAPABILITIES
        )));
    }
    if w.client_info_is_object == Some(false) {
        return Err(ModernError::InvalidMeta(format!(
            "_meta {} must be an object",
            meta::CLIENT_INFO
        )));
    }
    let log_level = match w.log_level.as_ref() {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_str().and_then(LogLevel::parse).ok_or_else(|| {
            ModernError::InvalidMeta(format!("_meta {} must be a log level", meta::LOG_LEVEL))
        })?),
    };
    if let Some(name) = head.unreadable {
        return Err(ModernError::HeaderMismatch(format!(
            "the {name} header has characters a header value may not carry; send a value that is not plain ASCII as =?base64?…?="
        )));
    }
    match head.method {
        None => return Err(ModernError::HeaderMismatch("missing Mcp-Method header".into())),
        Some(h) if h != method => {
            return Err(ModernError::HeaderMismatch(format!(
                "Mcp-Method {h:?} does not match the body's method"
            )));
        }
        Some(_) => {}
    }
    if let Some(key) = name_param(method) {
        let body = params.and_then(|p| p.get(key)).and_then(Value::as_str);
        match (head.name, body) {
            (None, _) => return Err(ModernError::HeaderMismatch("missing Mcp-Name header".into())),
            (Some(raw), body) => {
                let decoded = headers::decode_value(raw)
                    .map_err(|e| ModernError::HeaderMismatch(format!("Mcp-Name: {e}")))?;
                if body != Some(decoded.as_str()) {
                    return Err(ModernError::HeaderMismatch(format!(
                        "Mcp-Name does not match the body's {key}"
                    )));
                }
            }
        }
    }
    if REMOVED_METHODS.contains(&method) {
        return Err(ModernError::MethodNotFound(method.to_owned()));
    }
    Ok(ModernMeta { capabilities, log_level })
}

/// A modern request, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ModernRequest {
    /// Its id (echoed by every answer).
    pub id: JsonRpcId,
    /// Its method.
    pub method: String,
    /// Its params, as sent.
    pub params: Option<Value>,
    /// What its `_meta` declared.
    pub meta: ModernMeta,
}

/// The methods whose complete results carry cache hints (`ttlMs`, `cacheScope`).
pub(crate) const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Cache hints of a result (SPEC.md §4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHints {
    /// `ttlMs`.
    pub ttl_ms: u64,
    /// `cacheScope`: `"public"` when the answer is the same for every caller, else
    /// `"private"`.
    pub public: bool,
}

/// A complete modern result: `resultType` (kept when the handler set one), the server's
/// identity in `_meta`, and for [`CACHEABLE`] methods the cache hints.
#[must_use]
pub(crate) fn complete_result(
    method: &str,
    mut result: Value,
    server_info: &Value,
    hints: CacheHints,
) -> Value {
    if let Value::Object(m) = &mut result {
        let complete =
            m.entry("resultType").or_insert_with(|| Value::from("complete")) == "complete";
        // An `input_required` result is never cacheable.
        if complete && CACHEABLE.contains(&method) {
            m.insert("ttlMs".into(), Value::from(hints.ttl_ms));
            m.insert(
                "cacheScope".into(),
                Value::from(if hints.public { "public" } else { "private" }),
            );
        }
        let meta = m.entry("_meta").or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(meta::SERVER_INFO.into(), server_info.clone());
        }
    }
    result
}

/// The fields [`complete_result`] adds, encoded once: a complete result is the handler's
/// object with these appended (when it set neither `resultType` nor `_meta`), without
/// rebuilding or cloning anything per request.
#[derive(Debug, Clone)]
pub struct ResultTails {
    /// `"resultType":"complete","_meta":{serverInfo}`.
    plain: Vec<u8>,
    /// The same with `ttlMs` and `cacheScope` for lists and `server/discover`, and for
    /// `resources/read`.
    list: Vec<u8>,
    read: Vec<u8>,
    server_info: Value,
    list_hints: CacheHints,
    read_hints: CacheHints,
    /// Searchers for `"resultType"` and `"_meta"` in a reply's text, built once.
    keys: [memchr::memmem::Finder<'static>; 2],
}

impl ResultTails {
    /// The tails for `server_info` and the cache hints of lists and reads.
    #[must_use]
    pub fn new(server_info: &Value, list_hints: CacheHints, read_hints: CacheHints) -> ResultTails {
        let meta = serde_json::to_string(&serde_json::json!({ meta::SERVER_INFO: server_info }))
            .unwrap_or_default();
        let scope = |h: CacheHints| if h.public { "public" } else { "private" };
        ResultTails {
            plain: format!(r#""resultType":"complete","_meta":{meta}"#).into_bytes(),
            list: format!(
                r#""resultType":"complete","ttlMs":{},"cacheScope":"{}","_meta":{meta}"#,
                list_hints.ttl_ms,
                scope(list_hints)
            )
            .into_bytes(),
            read: format!(
                r#""resultType":"complete","ttlMs":{},"cacheScope":"{}","_meta":{meta}"#,
                read_hints.ttl_ms,
                scope(read_hints)
            )
            .into_bytes(),
            server_info: server_info.clone(),
            list_hints,
            read_hints,
            keys: [
                memchr::memmem::Finder::new(b"\"resultType\""),
                memchr::memmem::Finder::new(b"\"_meta\""),
            ],
        }
    }

    /// [`ResultTails::encode`] of a handler's reply. A reply sent as text gets its tail
    /// appended to that text when it is an object in which neither `"resultType"` nor
    /// `"_meta"` appears at all (a nested key of that name only sends it the slow way, read
    /// back and merged; inside a string its quotes are escaped, and it does not count).
    ///
    /// # Errors
    /// As [`Reply::into_value`], when the slow way cannot read the text back.
    pub fn encode_reply(&self, method: &str, result: &Reply) -> Result<Vec<u8>, ErrorObject> {
        match self.appended(method, result) {
            Some(parts) => Ok(parts.concat()),
            None => self.encode_slow(method, result),
        }
    }

    /// The whole response to request `id` whose result is `result` (the result as
    /// [`ResultTails::encode_reply`] makes it), in one allocation when the tail is appended
    /// to the reply's text.
    ///
    /// # Errors
    /// As [`ResultTails::encode_reply`].
    pub fn encode_response(
        &self,
        id: &JsonRpcId,
        method: &str,
        result: &Reply,
    ) -> Result<Bytes, ErrorObject> {
        match self.appended(method, result) {
            Some(parts) => Ok(encode_result_parts(id, &parts)),
            None => Ok(encode_result_raw(id, &self.encode_slow(method, result)?)),
        }
    }

    /// A text reply with its tail appended, in pieces (the text without its closing brace,
    /// a comma unless the object is empty, the tail, the brace); `None` when it is not
    /// plain text to append to.
    fn appended<'a>(&'a self, method: &str, result: &'a Reply) -> Option<[&'a [u8]; 4]> {
        let Reply::Raw(r) = result else { return None };
        let text = r.get().as_bytes();
        let plain = text.len() >= 2
            && text[0] == b'{'
            && text[text.len() - 1] == b'}'
            && self.keys.iter().all(|k| k.find(text).is_none());
        if !plain {
            return None;
        }
        let inner = &text[1..text.len() - 1];
        let comma: &[u8] = if inner.iter().all(u8::is_ascii_whitespace) { b"" } else { b"," };
        Some([&text[..text.len() - 1], comma, self.tail(method), b"}"])
    }

    /// A reply that is a value, or text read back to be merged.
    fn encode_slow(&self, method: &str, result: &Reply) -> Result<Vec<u8>, ErrorObject> {
        Ok(self.encode(method, &*result.to_value()?))
    }

    /// The keys appended to `method`'s result.
    fn tail(&self, method: &str) -> &[u8] {
        match method {
            "resources/read" => &self.read,
            m if CACHEABLE.contains(&m) => &self.list,
            _ => &self.plain,
        }
    }

    /// The JSON of `method`'s complete result `result` (as [`complete_result`] makes it).
    #[must_use]
    pub fn encode(&self, method: &str, result: &Value) -> Vec<u8> {
        let tail = self.tail(method);
        match result {
            Value::Object(m) if !m.contains_key("resultType") && !m.contains_key("_meta") => {
                let mut out = Vec::with_capacity(128 + tail.len());
                // A Value always serializes.
                let _ = serde_json::to_writer(&mut out, result);
                out.pop(); // the closing brace
                if !m.is_empty() {
                    out.push(b',');
                }
                out.extend_from_slice(tail);
                out.push(b'}');
                out
            }
            // The handler set resultType or _meta itself: merged the slow way.
            other => {
                let hints =
                    if method == "resources/read" { self.read_hints } else { self.list_hints };
                serde_json::to_vec(&complete_result(
                    method,
                    other.clone(),
                    &self.server_info,
                    hints,
                ))
                .unwrap_or_default()
            }
        }
    }
}

/// The encoded results a modern request gets: the [`ResultTails`], and the results that never
/// change while the process runs (`server/discover` and the four lists, first page), whole.
#[derive(Debug, Clone)]
pub struct ModernResults {
    tails: ResultTails,
    fixed: Vec<(&'static str, Vec<u8>)>,
}

impl ModernResults {
    /// Encode `fixed` (method → its result before [`complete_result`]) once.
    #[must_use]
    pub fn new(tails: ResultTails, fixed: Vec<(&'static str, Value)>) -> ModernResults {
        let fixed = fixed.into_iter().map(|(m, v)| (m, tails.encode(m, &v))).collect();
        ModernResults { tails, fixed }
    }

    /// The tails.
    #[must_use]
    pub fn tails(&self) -> &ResultTails {
        &self.tails
    }

    /// The whole result of `method` when it never changes (for params without a `cursor`).
    #[must_use]
    pub fn fixed(&self, method: &str, params: Option<&Value>) -> Option<&[u8]> {
        if params.and_then(|p| p.get("cursor")).is_some_and(|c| !c.is_null()) {
            return None;
        }
        self.fixed.iter().find(|(m, _)| *m == method).map(|(_, b)| b.as_slice())
    }
}

/// The `server/discover` result (before [`complete_result`]).
#[must_use]
pub(crate) fn discover_result(capabilities: &Value, instructions: Option<&str>) -> Value {
    let mut r =
        serde_json::json!({"supportedVersions": MODERN_VERSIONS, "capabilities": capabilities});
    if let Some(i) = instructions {
        r["instructions"] = Value::from(i);
    }
    r
}

/// The capabilities a modern client is told: the legacy ones without what 2026-07-28
/// removed (`logging` is per request now), with `listChanged` for the lists and `subscribe`
/// for the resources the catalog announces changes of on `subscriptions/listen` (`offered`),
/// and neither where it does not (false flags are left out); and the tasks extension
/// (`extensions`) when a tool may run as a task.
#[must_use]
pub(crate) fn modern_capabilities(legacy: &Value, offered: &listen::Offered, tasks: bool) -> Value {
    let mut caps = legacy.clone();
    if let Value::Object(m) = &mut caps {
        m.remove("logging");
        for (_, v) in m.iter_mut() {
            if let Value::Object(inner) = v {
                inner.remove("listChanged");
                inner.remove("subscribe");
            }
        }
        let mut set = |key: &str, flag: &str| {
            if let Value::Object(inner) =
                m.entry(key).or_insert_with(|| Value::Object(serde_json::Map::new()))
            {
                inner.insert(flag.into(), Value::Bool(true));
            }
        };
        for (key, kind) in [
            ("tools", listen::ListKind::Tools),
            ("prompts", listen::ListKind::Prompts),
            ("resources", listen::ListKind::Resources),
        ] {
            if offered.list(kind) {
                set(key, "listChanged");
            }
        }
        if offered.resource_updates {
            set("resources", "subscribe");
        }
        if tasks {
            m.insert("extensions".into(), serde_json::json!({ super::task::EXTENSION: {} }));
        }
    }
    caps
}

#[cfg(test)]
mod tests;
