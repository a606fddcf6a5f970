//! The resilient client's 2026-07-28 (modern era) rules, sans-IO: what a request carries
//! (`_meta` and the mirrored headers), how `server/discover` and a refusal tell the era, and
//! how a multi-round-trip (`input_required`) result becomes the next round's params.
//!
//! Every request is self-contained: its params carry the protocol version, the client's
//! capabilities and its identity in `_meta`; its headers mirror the method, the name or URI
//! it targets and, for `tools/call`, each argument the tool's input schema annotates with
//! `x-mcp-header`. A re-issued request is the same params under a new id.

use serde_json::{Map, Value, json};

use crate::proto::stateless::headers::{HeaderParam, encode_value};
use crate::proto::stateless::{self, meta};

/// `_meta` a modern request carries: the version, `capabilities` and `client_info`, beside
/// whatever the caller put there (a progress token, an idempotency key). Returns the params
/// to send (an object).
#[must_use]
pub fn request_params(params: Option<&Value>, capabilities: &Value, client_info: &Value) -> Value {
    let mut p = match params {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => Value::Object(Map::new()),
    };
    let m =
        p.as_object_mut().map(|o| o.entry("_meta").or_insert_with(|| Value::Object(Map::new())));
    if let Some(Value::Object(m)) = m {
        m.insert(meta::PROTOCOL_VERSION.into(), Value::from(stateless::VERSION));
        m.insert(meta::CLIENT_CAPABILITIES.into(), capabilities.clone());
        m.insert(meta::CLIENT_INFO.into(), client_info.clone());
    }
    p
}

/// The request-metadata headers of a modern POST of `method` with `params`: the version,
/// `Mcp-Method`, `Mcp-Name` for the methods that name something, and `Mcp-Param-{Name}` for
/// each of `mirrored` that the arguments set (values base64-sentinel encoded when not plain
/// ASCII).
#[must_use]
pub fn request_headers(
    method: &str,
    params: &Value,
    mirrored: &[HeaderParam],
) -> Vec<(String, String)> {
    let mut h = vec![
        ("MCP-Protocol-Version".to_owned(), stateless::VERSION.to_owned()),
        ("Mcp-Method".to_owned(), method.to_owned()),
    ];
    if let Some(key) = stateless::name_param(method)
        && let Some(name) = params.get(key).and_then(Value::as_str)
    {
        h.push(("Mcp-Name".to_owned(), encode_value(name)));
    }
    if method == "tools/call" {
        let args = params.get("arguments");
        for p in mirrored {
            let mut v = args;
            for k in &p.path {
                v = v.and_then(|x| x.get(k));
            }
            let text = match v {
                Some(Value::String(s)) => encode_value(s),
                Some(Value::Bool(b)) => b.to_string(),
                // The server compares integers as numbers: `42.0` is sent as `42`.
                Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
                    (Some(i), _) => i.to_string(),
                    (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                        format!("{}", f as i64)
                    }
                    _ => n.to_string(),
                },
                _ => continue,
            };
            h.push((format!("Mcp-Param-{}", p.name), text));
        }
    }
    h
}

/// The `x-mcp-header` parameters of each tool in a `tools/list` result. A tool whose
/// annotations are invalid is left out (the spec has clients drop it; calling it is the
/// caller's risk).
#[must_use]
pub fn header_params_of_tools(list: &Value) -> Vec<(String, Vec<HeaderParam>)> {
    let Some(tools) = list.get("tools").and_then(Value::as_array) else { return Vec::new() };
    tools
        .iter()
        .filter_map(|t| {
            let name = t.get("name")?.as_str()?;
            let params = crate::proto::stateless::headers::params_of(t.get("inputSchema")?).ok()?;
            (!params.is_empty()).then(|| (name.to_owned(), params))
        })
        .collect()
}

/// What a `server/discover` answer says.
#[derive(Debug, Clone, PartialEq)]
pub enum Discovered {
    /// The server speaks 2026-07-28; its capabilities.
    Modern(Value),
    /// A recognised modern refusal (a `400` with `-32022`, `-32021`, `-32020`, or `-32602`
    /// about `_meta`): the server is modern but refused this request; the message says why.
    /// Do not fall back.
    ModernRefusal(String),
    /// Anything else (an empty or unrecognised body, a legacy 400 or 404, a `-32602` that is
    /// not about `_meta`): not a modern server.
    NotModern,
}

/// Read a `server/discover` answer: `status` and the body.
#[must_use]
pub fn discovered(status: u16, body: &[u8]) -> Discovered {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if status == 200
        && let Some(r) = v.get("result")
        && r.get("supportedVersions")
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|x| x == stateless::VERSION))
    {
        return Discovered::Modern(r.get("capabilities").cloned().unwrap_or_else(|| json!({})));
    }
    let code = v.pointer("/error/code").and_then(Value::as_i64);
    let msg = v.pointer("/error/message").and_then(Value::as_str).unwrap_or_default();
    match code {
        // SPEC.md §3.9: only on a 400, and -32602 only for missing `_meta` (a legacy server
        // says -32602 for params it cannot read, too).
        Some(c @ -32022..=-32020) if status == 400 => {
            Discovered::ModernRefusal(format!("{c}: {msg}"))
        }
        Some(c @ -32602) if status == 400 && msg.contains("_meta") => {
            Discovered::ModernRefusal(format!("{c}: {msg}"))
        }
        _ => Discovered::NotModern,
    }
}

/// A complete result, or the questions of an `input_required` one.
#[derive(Debug, Clone, PartialEq)]
pub enum Round {
    /// The request's result.
    Complete(Value),
    /// The server asks: `inputRequests` (key → `{method, params}`) and the `requestState` to
    /// send back.
    InputRequired {
        /// The questions, by key.
        requests: Map<String, Value>,
        /// The opaque state, if the server sent one.
        state: Option<String>,
    },
}

/// Read a result.
#[must_use]
pub fn round_of(result: Value) -> Round {
    if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        let requests =
            result.get("inputRequests").and_then(Value::as_object).cloned().unwrap_or_default();
        let state = result.get("requestState").and_then(Value::as_str).map(str::to_owned);
        return Round::InputRequired { requests, state };
    }
    Round::Complete(result)
}

/// The next round's params: the original ones with this round's `answers` as
/// `inputResponses` and the server's `state` as `requestState` (answers of earlier rounds
/// travel inside the state).
#[must_use]
pub fn next_round(params: &Value, answers: Map<String, Value>, state: Option<String>) -> Value {
    let mut p = params.clone();
    if let Value::Object(m) = &mut p {
        m.insert("inputResponses".into(), Value::Object(answers));
        match state {
            Some(s) => m.insert("requestState".into(), Value::String(s)),
            None => m.remove("requestState"),
        };
    }
    p
}

/// Whether a `-32020` refusal is about an `Mcp-Param-*` header (then the client re-reads
/// `tools/list` and tries again once: the tool's annotations may have changed).
#[must_use]
pub fn is_param_header_mismatch(error_code: i64, message: &str) -> bool {
    error_code == crate::proto::jsonrpc::code::HEADER_MISMATCH && message.contains("Mcp-Param-")
}

#[cfg(test)]
mod tests;
